"""GPU memory of a role: weights, fp32 masters, optimizer state, gradients, activations (with
the learner's checkpointing and micro-batch budget), logits (plain or chunked log-probs) and the
KV cache of its sampler calls. The model follows the code it describes (``rl.learner``,
``engine.hf``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coevolve.plan.devices import Device
from coevolve.plan.shapes import ModelShape
from coevolve.plan.work import Train
from coevolve.rl.learner import LearnerConfig, resolve_gradient_checkpointing, resolve_logprob_chunk
from coevolve.schema import vllm_share

SAFETY_MARGIN = 0.10
"""A phase fits when its estimated peak leaves this share of the device free: allocator
fragmentation, the CUDA context, library workspaces and the estimate's own error live there."""


@dataclass
class RoleMemory:
    """One role's GPU bytes by kind (``kv`` is its sampler's largest call)."""

    role: str
    weights: float
    masters: float
    optimizer: float
    grads: float
    activations: float
    logits: float
    opt_step: float
    kv: float
    host: float  # bytes that live in host memory (offloaded state)
    micro_batch_tokens: int
    micro_batch_rows: int
    checkpointing: bool
    chunk: int
    trainable: int

    @property
    def state(self) -> float:
        """Masters + optimizer state on the GPU while the role trains."""
        return self.masters + self.optimizer

    @property
    def learner_transient(self) -> float:
        """A learner step on top of weights + state: fp32 gradients, then the larger of the
        micro-batch forward/backward (activations + logits) and the optimizer step's temporaries."""
        return self.grads + max(self.activations + self.logits, self.opt_step)

    @property
    def train_peak(self) -> float:
        return self.weights + self.state + self.learner_transient


def sampler_call_bytes(shape: ModelShape, b: int, rows: int, prompt: int, max_new: int) -> float:
    """GPU bytes of one HF ``generate`` call beyond the weights: the KV cache of ``rows`` rows
    grown to prompt + max_new tokens, the sampling logits (fp32 scores, probabilities, processed)
    and the prefill's widest activation (one layer's MLP over every prompt token)."""
    kv = rows * (prompt + max_new) * shape.kv_bytes_per_token(b)
    return kv + rows * shape.vocab * 12 + rows * prompt * b * (4 * shape.hidden + 3 * shape.intermediate)


def dtype_bytes(cfg: Any, device: Device) -> int:
    d = cfg.model.dtype
    if d == "auto":
        return 2 if device.kind == "cuda" else 4
    return 4 if d == "float32" else 2


def micro_batch(lcfg: LearnerConfig, rows_per_step: int, prompt: int, max_new: int) -> tuple[int, int]:
    """(rows, padded tokens) of the largest micro-batch when every completion hits its cap."""
    row = prompt + max_new
    if lcfg.max_tokens_per_micro_batch is not None:
        rows = max(1, min(lcfg.micro_batch_size, rows_per_step, lcfg.max_tokens_per_micro_batch // row))
    else:
        rows = max(1, min(lcfg.micro_batch_size, rows_per_step))
    return rows, rows * row


def role_memory(
    role: str,
    shape: ModelShape,
    lcfg: LearnerConfig,
    device: Device,
    b: int,
    train: Train | None,
    kv_call: tuple[int, int, int] | None,
) -> RoleMemory:
    """GPU bytes of one role. ``train``: its GRPO phase (None: it never trains); ``kv_call``:
    (rows, prompt, max_new) of its largest sampler call."""
    N = shape.n_params
    trainable = shape.lora_params(lcfg.lora_r, lcfg.lora_target_modules) if lcfg.lora else N
    weights = N * b + (trainable * 4 if lcfg.lora else 0)  # PEFT keeps adapters in fp32
    if lcfg.beta_kl > 0 and not lcfg.lora:
        weights += N * b  # the reference model
    half = b < 4 and not lcfg.lora
    masters = trainable * 4 if half else 0.0
    optimizer = trainable * 8.0
    fused = lcfg.fused_optimizer if lcfg.fused_optimizer is not None else device.kind == "cuda"
    on_host = lcfg.offload_optimizer and device.kind == "cuda" and half  # the learner refuses it otherwise
    host = masters + optimizer if on_host else 0.0
    if on_host:
        masters = optimizer = 0.0
    # fp32 gradient sums on the weights' device through the whole backward, offloaded state or not
    # (``rl.precision.Fp32GradSum``: one device-to-host copy per step, not one per micro-batch)
    grads = trainable * 4.0
    grads += (min(shape.largest_param, trainable) * b) if half else 0  # one half grad before its fp32 hook
    if fused or on_host:  # one kernel per tensor group, no temporaries (offloaded: the step runs on the CPU)
        opt_step = 0.0
    elif device.kind == "cuda":
        opt_step = trainable * 4.0  # foreach AdamW (the CUDA default): a temporary fp32 sqrt(v) for every tensor
    else:  # the per-tensor loop (CPU default): temporaries of one tensor at a time
        opt_step = 2.0 * min(shape.largest_param, trainable) * 4
    ckpt = resolve_gradient_checkpointing(lcfg, N)
    chunk = resolve_logprob_chunk(lcfg, shape.vocab)
    rows, tokens, act, logits = (0, 0, 0.0, 0.0) if train is None else _step_bytes(shape, lcfg, b, train, ckpt, chunk)
    kv = 0.0 if kv_call is None else sampler_call_bytes(shape, b, *kv_call)
    return RoleMemory(
        role, weights, masters, optimizer, grads, act, logits, opt_step, kv, host, tokens, rows, ckpt, chunk, trainable
    )


def _step_bytes(
    shape: ModelShape, lcfg: LearnerConfig, b: int, train: Train, ckpt: bool, chunk: int
) -> tuple[int, int, float, float]:
    """(rows, tokens, activation bytes, logits bytes) of one micro-batch of the role's GRPO step,
    with gradient checkpointing ``ckpt`` and the log-prob chunk ``chunk`` (0: full logits)."""
    rows, tokens = micro_batch(lcfg, train.rows_per_step, train.prompt, train.max_new)
    per_layer = shape.act_bytes_per_token_layer(b)
    if ckpt:  # each layer's input is kept; one layer is recomputed (and its gradients live) at a time
        act = tokens * (shape.layers * shape.hidden * b + 2 * per_layer)
    else:
        act = tokens * shape.layers * per_layer
    act += tokens * shape.hidden * (b + 4) * 2  # embeddings, final norm, the head's input
    completion = rows * train.max_new
    if chunk:  # one chunk's logits (half + fp32 + gradient), and the head's weight gradient accumulator
        logits = min(chunk, completion) * shape.vocab * (b + 12) + completion * shape.hidden * 4 * 3
        if not lcfg.lora:
            logits += shape.vocab * shape.hidden * (4 + (b if b < 4 else 0))
    else:  # (N, T+1, V) logits and their gradient, a saved fp32 log-softmax per row, one row's temporaries
        logits = completion * shape.vocab * (2 * b + 4) + train.max_new * shape.vocab * 12
    return rows, tokens, act, logits


def _kv_rows(rows: int, prompt: int, max_new: int, max_batch_tokens: int | None) -> int:
    if max_batch_tokens is None:
        return rows
    return max(1, min(rows, max_batch_tokens // (prompt + max_new)))


def _engine(cfg: Any) -> tuple[str, float | None, bool, int | None]:
    e = cfg.engine
    return (
        str(getattr(e, "kind", "hf")),
        vllm_share(e),
        bool(getattr(e, "sleep_mode", True)),
        getattr(e, "max_batch_tokens", None),
    )
