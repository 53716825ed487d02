"""Wall time of a phase's generations and learner steps from the device's rates."""

from __future__ import annotations

import math

from coevolve.plan.devices import Device, Rate
from coevolve.plan.shapes import ModelShape
from coevolve.plan.work import Gen, Train
from coevolve.rl.learner import LearnerConfig

SAVE_WRITE_GBPS = Rate(
    1.0,
    False,
    "assumed: a local SSD's sustained write (a network file system is slower); measured only at toy "
    "scale: the toy learner's 6.5 MB save took 0.07 s with its fsync on a shared 2-core VM",
)
"""How fast a mid-phase save (``run.save_every``) is written, for its cost in the plan."""


def save_bytes(shape: ModelShape, lcfg: LearnerConfig, b: int) -> float:
    """Bytes of one learner save (``Learner.save``): the weights as saved (``b`` bytes each; the
    fp32 adapter alone with LoRA) + fp32 masters of half-precision weights + AdamW's m and v.

    >>> from coevolve.plan.shapes import ModelShape
    >>> s = ModelShape("qwen3", 1, 8, 16, 1, 1, 8, 64, True)
    >>> save_bytes(s, LearnerConfig(), 2) == s.n_params * (2 + 4 + 8)
    True
    """
    trainable = shape.lora_params(lcfg.lora_r, lcfg.lora_target_modules) if lcfg.lora else shape.n_params
    weights = trainable * 4 if lcfg.lora else shape.n_params * b
    masters = trainable * 4 if b < 4 and not lcfg.lora else 0
    return float(weights + masters + trainable * 8)


def mid_save_count(steps: int, save_every: int) -> int:
    """Mid-phase saves of a GRPO phase of ``steps`` steps: after every ``save_every``-th step but
    the last (0 when off).

    >>> mid_save_count(10, 3), mid_save_count(9, 3), mid_save_count(10, 0)
    (3, 2, 0)
    """
    return 0 if save_every <= 0 or steps <= 0 else (steps - 1) // save_every


COMPLETION_FILL = 0.5
"""Assumed mean completion length as a share of its cap, for token counts and wall time (memory
always uses the cap: one micro-batch of capped rows is what has to fit)."""


def gen_seconds(g: Gen, shape: ModelShape, device: Device, b: int, engine: str, kv_rows: int) -> float:
    """Decode time of one run of a generation: HF ``generate`` calls of ``kv_rows`` rows, each
    running until its longest row ends (taken as the cap: with G samples at T=1 one usually hits
    it), a decode step costing the largest of the launch-bound floor, reading weights + KV cache,
    and the matmuls; vLLM keeps ``kv_rows`` rows in flight and pays only the mean length."""
    if g.rows == 0:
        return 0.0
    weights = shape.n_params * b
    kv_tok = shape.kv_bytes_per_token(b)
    flops = device.matmul_tflops.value * 1e12
    decode = flops if device.decode_tflops is None else device.decode_tflops.value * 1e12
    if engine == "vllm":
        ctx = g.prompt + COMPLETION_FILL * g.max_new
        rows = max(1, kv_rows)
        step = (weights + rows * ctx * kv_tok) / (device.mem_gbps.value * 1e9 * device.vllm_bw_efficiency.value)
        step = max(step, 2 * shape.n_params * rows / flops)
        return g.rows * COMPLETION_FILL * g.max_new / rows * step
    calls = math.ceil(g.rows / max(1, kv_rows))
    rows = min(g.rows, kv_rows)
    ctx = g.prompt + g.max_new / 2
    step = max(
        device.hf_step_ms_per_layer.value * shape.layers / 1e3,
        rows * device.hf_us_per_row_step.value / 1e6,  # a CPU's per-row cost of a step (sampling, small models)
        (weights + rows * ctx * kv_tok) / (device.mem_gbps.value * 1e9),
        2 * shape.n_params * rows / decode,
    )
    return calls * g.max_new * step


def train_tokens(t: Train, times: int, share_prompt: bool) -> float:
    """Token passes of a role's GRPO updates: every row [prompt | completion], or with
    ``learner.share_prompt`` each group's prompt once and its G completions on its KV cache."""
    prompts = t.rows_per_step / max(1, t.group) if share_prompt else t.rows_per_step
    return times * t.steps * (prompts * t.prompt + t.rows_per_step * COMPLETION_FILL * t.max_new)


def train_flops(t: Train, times: int, shape: ModelShape, lcfg: LearnerConfig, ckpt: bool) -> float:
    """FLOPs of a role's GRPO updates: forward + backward of the weights (2 + 4 per parameter and
    token; LoRA skips the weight gradients), the recompute of checkpointing, a reference / old
    policy forward when used, and causal attention."""
    tokens = train_tokens(t, times, lcfg.share_prompt)
    per_tok = 2 * shape.n_params * (3 if not lcfg.lora else 2) + (2 * shape.n_params if ckpt else 0)
    per_tok += 2 * shape.n_params * (int(lcfg.beta_kl > 0) + int(lcfg.epochs_per_batch > 1))
    per_tok *= lcfg.epochs_per_batch if lcfg.epochs_per_batch > 1 else 1
    attn = 6 * shape.layers * (t.prompt + t.max_new) * shape.q_dim  # causal QK^T and AV, forward + backward
    return tokens * (per_tok + attn)


def train_seconds(
    t: Train, times: int, shape: ModelShape, lcfg: LearnerConfig, device: Device, ckpt: bool, dtype: str = "bfloat16"
) -> float:
    """Learner time: ``train_flops`` at the device's rate in the weights' dtype (a CPU learns in
    fp32 several times slower than in bf16), and at least the device's per-token floor (a CPU's
    overhead per token pass and layer, which bounds small models)."""
    rate = device.matmul_tflops.value
    if device.kind == "cpu" and dtype == "float32" and device.fp32_tflops is not None:
        rate = device.fp32_tflops.value
    flops_s = train_flops(t, times, shape, lcfg, ckpt) / (rate * 1e12 * device.train_mfu.value)
    passes = train_tokens(t, times, lcfg.share_prompt) * max(1, lcfg.epochs_per_batch)
    return max(flops_s, passes * shape.layers * device.learn_us_per_token_layer.value / 1e6)
