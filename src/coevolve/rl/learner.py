"""GRPO learner: one optimizer update from a batch of rollout groups.

The learner owns the optimizer and nothing else: it gets finished rollouts (token ids and
rewards per group) from the recipes, so sampling backend, reward and curriculum stay
independent of it. Design choices and why:

- zero-variance groups are dropped before the update (their tokens never enter the token-mean
  normaliser: the DAPO / TRL loss_type="dapo" / verl token-mean formulation);
- the token-mean normaliser is the *global* count of active completion tokens, so micro-batch
  size only trades memory for time and never changes the update;
- with half-precision models the optimizer keeps fp32 master weights (a 1e-6 update is far
  below half a bf16 ulp and would round away) and copies them back after each step; gradients
  are summed in fp32 on the model's device, one parameter at a time as backward produces it
  (``register_post_accumulate_grad_hook``), so no bf16 gradient survives a micro-batch and
  micro-batch sums are not rounded to bf16; the chunked LM head hands its fp32 weight gradient
  over directly (it never passes through bf16); the sums reach the masters once per step (one
  device-to-host copy when the masters live in CPU memory);
- non-finite loss or gradients raise ``NonFiniteLossError`` before any weight is touched.

Memory for 4B-8B models on one GPU (``coevolve plan`` estimates every term):
activation checkpointing (non-reentrant, works with LoRA; auto-on from 0.5B parameters),
token-budget micro-batches (``max_tokens_per_micro_batch``: rows sorted by length, packed
fully left-padded so a micro-batch costs rows x its longest row), chunked log-probs and entropy
(``logprob_chunk_tokens``: never a full (T, V) fp32 log-softmax), fused AdamW on CUDA, optional
optimizer state in CPU memory (``offload_optimizer``), and ``offload_state`` / ``onload_state``
so a role that is not training keeps only its weights on the GPU.
"""

from __future__ import annotations

import json
import math
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, field_validator
from torch import Tensor

from coevolve.errors import CoevolveError, ConfigError, RunStateError
from coevolve.faults import fault_point
from coevolve.rl.grpo import (
    RLInputError,
    _decoder_and_head,
    group_advantages,
    policy_loss,
    sequence_logprobs,
    shared_prompt_logprobs,
)
from coevolve.schema import Strict

STATE_JSON = "learner_state.json"
OPTIM_FILE = "learner_optim.pt"


AUTO_CHECKPOINT_MIN_PARAMS = 500_000_000
"""Models from this size up get activation checkpointing by default: the 4B-8B targets need it to
fit, and the toy model / SmolLM2-135M (CPU tests) would only pay its recompute."""
AUTO_CHUNK_MIN_VOCAB = 32768
"""Vocabularies from this size up get chunked log-probs by default (Qwen3: 151936, Llama 3:
128256, SmolLM2: 49152); the toy's 104 tokens keep the plain full-logits path."""
AUTO_CHUNK_TOKENS = 1024
"""Tokens per chunk: a (1024, 152k) fp32 slice is 0.6 GB, and the head matmul stays large."""


def resolve_gradient_checkpointing(cfg: LearnerConfig, n_params: int) -> bool:
    """``cfg.gradient_checkpointing``, or the auto rule: on from ``AUTO_CHECKPOINT_MIN_PARAMS``."""
    if cfg.gradient_checkpointing is not None:
        return bool(cfg.gradient_checkpointing)
    return n_params >= AUTO_CHECKPOINT_MIN_PARAMS


def resolve_logprob_chunk(cfg: LearnerConfig, vocab_size: int) -> int:
    """Chunk size of the log-prob pass (0 = plain full logits): ``cfg.logprob_chunk_tokens`` or
    the auto rule (``AUTO_CHUNK_TOKENS`` from ``AUTO_CHUNK_MIN_VOCAB`` vocabulary entries)."""
    if cfg.logprob_chunk_tokens is not None:
        return int(cfg.logprob_chunk_tokens)
    return AUTO_CHUNK_TOKENS if vocab_size >= AUTO_CHUNK_MIN_VOCAB else 0


def resolve_fused(cfg: LearnerConfig, device: torch.device) -> bool:
    """Fused AdamW: ``cfg.fused_optimizer`` or auto (CUDA state device only; on CPU the foreach
    kernel is the reference the toy figures were made with)."""
    if cfg.fused_optimizer is not None:
        return bool(cfg.fused_optimizer)
    return device.type == "cuda"


def pack_rows(order: list[int], widths: list[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Consecutive runs of ``order`` as padded batches: at most ``max_rows`` rows and
    ``rows x widest row <= max_tokens`` (``widths[i]``: row i's padded length); a row wider than
    the budget goes alone. Shared by the learner's micro-batches and the hf sampler's KV budget."""
    out: list[list[int]] = []
    cur: list[int] = []
    widest = 0
    for i in order:
        if cur and ((len(cur) + 1) * max(widest, widths[i]) > max_tokens or len(cur) + 1 > max_rows):
            out.append(cur)
            cur, widest = [], 0
        cur.append(i)
        widest = max(widest, widths[i])
    if cur:
        out.append(cur)
    return out


def pack_micro_batches(lengths: list[int], max_tokens: int | None, max_rows: int) -> list[list[int]]:
    """Row indices per micro-batch.

    ``max_tokens`` None: consecutive runs of ``max_rows`` rows in the given order (the original
    behaviour, kept bit-exact). Otherwise rows are sorted by length, longest first (so the
    largest micro-batch runs first and an out-of-memory shows at once), and packed by
    ``pack_rows``. Order inside the sort is stable, so packing is deterministic.
    """
    n = len(lengths)
    if max_tokens is None:
        return [list(range(i, min(i + max_rows, n))) for i in range(0, n, max_rows)]
    return pack_rows(sorted(range(n), key=lambda i: -lengths[i]), lengths, max_rows, max_tokens)


class NonFiniteLossError(CoevolveError):
    """The loss or the gradient became NaN/inf; the weights were left untouched."""


class LearnerConfig(Strict):
    """Optimizer and GRPO-loss settings (the ``learner`` section of every recipe config).

    ``epochs_per_batch`` is μ: optimizer steps per rollout batch (1 = on-policy, ratio == 1).
    ``micro_batch_size`` caps sequences per micro-batch, ``max_tokens_per_micro_batch`` (when
    set) caps padded tokens too. ``lora`` needs the ``lora`` extra (peft). The memory fields'
    ``None`` means "auto" with the rule given in each description; the toy model's path (fp32,
    104-token vocabulary, 2 layers) is exactly the plain one under the defaults.
    """

    lr: float = Field(
        3e-5,
        gt=0,
        allow_inf_nan=False,
        description="AdamW learning rate (toy: 3e-5; 3e-4 collapses, 1e-4 degrades; real 4B: ~1e-6).",
    )
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="Learning-rate schedule over each GRPO phase's optimizer steps (steps x epochs_per_batch; every "
        "round's phase starts it again, as a new TRL trainer would), from transformers' get_scheduler: 'constant', "
        "'linear' (TRL's default: decays to 0 at the phase's last step), 'cosine' (to 0). A pure function of the "
        "step, so a resumed or continued phase is exact. (our default: constant, the papers name none)",
    )
    warmup_steps: int = Field(
        0, ge=0, description="Optimizer steps of linear warm-up from 0 at the start of each GRPO phase (0 = none)."
    )
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas, each in [0, 1).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, ge=0, description="Global gradient-norm clip (0 = no clipping).")
    eps_low: float = Field(0.2, ge=0, lt=1, description="Lower PPO clip (1 - eps_low).")
    eps_high: float = Field(
        0.28,
        ge=0,
        description="Upper PPO clip (1 + eps_high), DAPO clip-higher (our default; textbook GRPO: 0.2, symmetric).",
    )
    beta_kl: float = Field(
        0.0,
        ge=0,
        description="k3 KL coefficient to the reference model (0 = no reference; our "
        "default. Textbook GRPO keeps a KL term, e.g. DeepSeekMath 0.04, R-Zero 0.01).",
    )
    loss_agg: Literal["token-mean", "seq-mean"] = Field(
        "token-mean",
        description="GRPO loss aggregation: 'token-mean' over every token of the update batch (DAPO; our "
        "default) or 'seq-mean', each answer's token mean averaged over answers (textbook GRPO, which the papers cite; "
        "configs/textbook_grpo.yaml).",
    )
    scale_std: bool = Field(True, description="Divide advantages by the group std (False = Dr. GRPO).")
    adv_eps: float = Field(1e-4, gt=0, description="Added to the group std (TRL: 1e-4; verl: 1e-6).")
    drop_zero_std: bool = Field(
        True,
        description="Drop zero-variance groups before the update (their tokens never enter the token-mean normaliser).",
    )
    micro_batch_size: int = Field(64, ge=1, description="Sequences per forward/backward micro-batch.")
    epochs_per_batch: int = Field(1, ge=1, description="GRPO inner epochs (μ) over each rollout batch.")
    lora: bool = Field(False, description="Train LoRA adapters (needs the 'lora' extra: peft).")
    lora_r: int = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha.")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    lora_target_modules: str | list[str] = Field("all-linear", description="LoRA target modules (peft syntax).")
    gradient_checkpointing: bool | None = Field(
        None,
        description="Activation checkpointing of every decoder layer (non-reentrant; works with LoRA): "
        "activations of a micro-batch shrink from ~layers x per-layer to ~one layer, for ~1/3 more compute. "
        f"None = auto: on when the model has >= {AUTO_CHECKPOINT_MIN_PARAMS / 1e9:g}B parameters (real models; "
        "off for the toy model and SmolLM2-135M).",
    )
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="Padded-token budget of one forward/backward micro-batch (rows x longest row). "
        "Rows are sorted by length (longest first) and packed fully left-padded, so padding waste stays small; "
        "a row longer than the budget gets a micro-batch of its own. None = micro-batches of micro_batch_size "
        "rows in rollout order (the toy default). Both caps apply when set. Real 4B: ~16384-32768 with "
        "gradient checkpointing.",
    )
    logprob_chunk_tokens: int | None = Field(
        None,
        ge=0,
        description="Completion tokens per LM-head + log-softmax chunk (checkpointed), so the "
        f"(tokens, vocab) fp32 logits are never materialised. None = auto: {AUTO_CHUNK_TOKENS} when the vocabulary "
        f"has >= {AUTO_CHUNK_MIN_VOCAB} entries (real LLMs), 0 (off: one full-logits pass) otherwise.",
    )
    fused_optimizer: bool | None = Field(
        None,
        description="Fused AdamW kernel (one launch, no foreach temporaries of a full fp32 parameter "
        "copy). None = auto: on when the optimizer state lives on a CUDA device.",
    )
    offload_optimizer: bool = Field(
        False,
        description="Keep the fp32 masters and AdamW state in CPU memory and run the optimizer step "
        "there (saves 12 bytes per trainable parameter of GPU memory; costs a PCIe round trip of the "
        "gradients and weights per update).",
    )
    share_prompt: bool = Field(
        False,
        description="Run each GRPO group's prompt once and its G completions on the prompt's KV cache "
        "(rl.grpo.shared_prompt_logprobs): a step costs B·P + N·T token passes instead of N·(P + T), the same "
        "values within float rounding. Worth it when prompts are long next to answers (few-shot prompts: ~3x less "
        "compute for ~120-token prompts and ~30-token answers). Needs gradient_checkpointing off (the cache) and a "
        "plain decoder + LM head. false = every row [prompt | completion] on its own (the reference).",
    )
    resume_from_checkpoint: str | None = Field(
        None,
        description="A checkpoint folder of a coevolve run (RUN/checkpoints/solver_rNN: weights, "
        "learner_optim.pt, learner_state.json) the solver of a new run starts from, with its AdamW state, fp32 "
        "masters and step count (TRL's resume_from_checkpoint; verl's resume_from_path). This section's settings "
        "(lr, betas, weight decay) apply from the first step. Checked before the run folder exists: the files, the "
        "checkpoint's world and learner.lora; a model whose trainable parameters differ is refused when loaded. "
        "The base evaluation then measures the checkpoint. Other roles start from model.path. backend=local only.",
    )
    offload_when_idle: bool = Field(
        True,
        description="When a role's GRPO phase ends, move its fp32 masters and optimizer state to CPU "
        "memory (they come back at its next update), and let recipes park idle roles' weights there, so a "
        "role that is not training holds at most its half-precision weights on the GPU. No-op on CPU.",
    )

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in v):
            raise ValueError(f"each beta must be in [0, 1), got {list(v)}")
        return (float(v[0]), float(v[1]))


@dataclass
class RolloutGroup:
    """G completions of one prompt with their rewards.

    ``logprobs`` (optional) are the sampler's per-token log-probs; when given for every group
    they are used as log pi_old (off-policy correction for a separate rollout engine), otherwise
    pi_old is the learner's own no-grad forward (mu > 1) or ``logp.detach()`` (mu == 1).
    """

    prompt_ids: list[int]
    completion_ids: list[list[int]]
    rewards: list[float]
    logprobs: list[list[float]] | None = None


def _validate_groups(groups: list[RolloutGroup]) -> None:
    if not groups:
        raise RLInputError("Learner.step: got no rollout groups")
    for gi, g in enumerate(groups):
        if not g.prompt_ids:
            raise RLInputError(f"Learner.step: group {gi} has an empty prompt_ids")
        if len(g.completion_ids) != len(g.rewards):
            raise RLInputError(
                f"Learner.step: group {gi} has {len(g.completion_ids)} completions but {len(g.rewards)} rewards"
            )
        if len(g.rewards) < 2:
            raise RLInputError(f"Learner.step: group {gi} has G={len(g.rewards)} samples; GRPO needs >= 2")
        if not all(math.isfinite(float(r)) for r in g.rewards):
            raise RLInputError(f"Learner.step: group {gi} has a NaN/inf reward: {g.rewards}")
        if g.logprobs is not None:
            if len(g.logprobs) != len(g.completion_ids) or any(
                len(lp) != len(c) for lp, c in zip(g.logprobs, g.completion_ids)
            ):
                raise RLInputError(f"Learner.step: group {gi} logprobs do not match completion lengths")
    with_lp = sum(g.logprobs is not None for g in groups)
    if 0 < with_lp < len(groups):
        raise RLInputError("Learner.step: logprobs given for some groups but not all")


@dataclass
class _Batch:
    input_ids: Tensor  # (B, P + T)
    attention_mask: Tensor  # (B, P + T)
    completion_mask: Tensor  # (B, T)
    adv: Tensor  # (B,)
    old_logp: Tensor | None  # (B, T) sampler log-probs, or None
    ref_logp: Tensor | None = None  # (B, T), filled when beta_kl > 0
    prompt_ids: Tensor | None = None  # (Bp, P) with share_prompt: one left-padded prompt per group; then
    prompt_mask: Tensor | None = None  # input_ids / attention_mask hold only the (B, T) completions


def _collate(
    seqs: list[tuple[list[int], list[int], float, list[float] | None]],
    pad_id: int,
    device: torch.device,
    left_pad_all: bool = False,
) -> _Batch:
    """[left-padded prompt | right-padded completion]: positions are recomputed from the mask,
    and all completions start in the same column so log-probs need only the last T logits.

    ``left_pad_all``: each whole row [prompt | completion] is left-padded instead, so a
    micro-batch is rows x (longest prompt + completion) rather than rows x (longest prompt +
    longest completion); every completion still lies in the last T columns (its mask says where).
    """
    P = max(len(s[0]) for s in seqs)
    T = max(1, max(len(s[1]) for s in seqs))
    B = len(seqs)
    if left_pad_all:
        P = max(1, max(len(s[0]) + len(s[1]) for s in seqs) - T)  # >= 1: sequence_logprobs needs T < L
    ids = torch.full((B, P + T), pad_id, dtype=torch.long)  # (B, P + T)
    attn = torch.zeros((B, P + T), dtype=torch.long)  # (B, P + T)
    cmask = torch.zeros((B, T), dtype=torch.float32)  # (B, T)
    adv = torch.tensor([s[2] for s in seqs], dtype=torch.float32)  # (B,)
    has_old = seqs[0][3] is not None
    old = torch.zeros((B, T), dtype=torch.float32) if has_old else None  # (B, T)
    for i, (p, c, _, lp) in enumerate(seqs):
        # completion columns [c0, c0 + len(c)) of the (P + T)-wide row; the prompt ends at c0
        c0 = P + T - len(c) if left_pad_all else P
        ids[i, c0 - len(p) : c0] = torch.tensor(p, dtype=torch.long)
        attn[i, c0 - len(p) : c0] = 1
        if c:
            ids[i, c0 : c0 + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, c0 : c0 + len(c)] = 1
            t0 = c0 - P  # first completion column inside the last T
            cmask[i, t0 : t0 + len(c)] = 1.0
            if old is not None and lp is not None:
                old[i, t0 : t0 + len(c)] = torch.tensor(lp, dtype=torch.float32)
    return _Batch(
        ids.to(device), attn.to(device), cmask.to(device), adv.to(device), None if old is None else old.to(device)
    )


def _collate_shared(
    groups: list[tuple[list[int], list[tuple[list[int], float, list[float] | None]]]], pad_id: int, device: torch.device
) -> _Batch:
    """``share_prompt`` layout: the groups' prompts left-padded (Bp, P); their completions
    right-padded (B, T), G consecutive rows per prompt, in ``input_ids`` / ``attention_mask``."""
    sizes = {len(comps) for _, comps in groups}
    if len(sizes) != 1:
        raise RLInputError(f"learner.share_prompt: groups of one micro-batch differ in size ({sorted(sizes)})")
    rows = [(c, a, lp) for _, comps in groups for c, a, lp in comps]
    P = max(len(p) for p, _ in groups)
    T = max(1, max(len(c) for c, _, _ in rows))
    pids = torch.full((len(groups), P), pad_id, dtype=torch.long)  # (Bp, P)
    pmask = torch.zeros((len(groups), P), dtype=torch.long)  # (Bp, P)
    for i, (p, _) in enumerate(groups):
        pids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
        pmask[i, P - len(p) :] = 1
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)  # (B, T)
    cmask = torch.zeros((len(rows), T), dtype=torch.float32)  # (B, T)
    has_old = rows[0][2] is not None
    old = torch.zeros((len(rows), T), dtype=torch.float32) if has_old else None  # (B, T)
    for i, (c, _, lp) in enumerate(rows):
        if c:
            ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            cmask[i, : len(c)] = 1.0
            if old is not None and lp is not None:
                old[i, : len(c)] = torch.tensor(lp, dtype=torch.float32)
    adv = torch.tensor([a for _, a, _ in rows], dtype=torch.float32)  # (B,)
    return _Batch(
        ids.to(device),
        cmask.long().to(device),
        cmask.to(device),
        adv.to(device),
        None if old is None else old.to(device),
        prompt_ids=pids.to(device),
        prompt_mask=pmask.to(device),
    )


def _enable_checkpointing(model: Any) -> None:
    """Non-reentrant activation checkpointing of every decoder layer (the reentrant variant
    needs inputs that require grad, which a LoRA model's frozen embeddings do not give)."""
    kwargs = {"use_reentrant": False}
    try:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            raise ValueError("no activation_checkpointing_enable / gradient_checkpointing_enable method")
    except ValueError as e:
        raise ConfigError(
            f"LearnerConfig.gradient_checkpointing: {type(model).__name__} does not support it ({e}); "
            "set learner.gradient_checkpointing=false"
        ) from None


class _Fp32GradSum:
    """The fp32 sum of one half-precision parameter's gradients over a step's micro-batches, kept
    on the parameter's device. The learner moves it to the master once per step (``_take_grads``):
    for masters in CPU memory (``offload_optimizer``) that is one device-to-host copy per step
    instead of one per micro-batch, and no sum is ever taken on the CPU."""

    __slots__ = ("sum",)

    def __init__(self) -> None:
        self.sum: Tensor | None = None

    def add(self, g: Tensor) -> None:
        """Add ``g`` (any float dtype, on the parameter's device); a fresh tensor is taken over."""
        if self.sum is None:
            self.sum = g.detach().float()  # a fresh fp32 tensor (an fp32 ``g`` is taken as is: nobody else holds it)
        else:
            self.sum.add_(g.detach())


def _fp32_accumulator(acc: _Fp32GradSum) -> Any:
    """Post-accumulate-grad hook of a half-precision parameter: add its fresh gradient into the
    fp32 sum ``acc`` and free it, one parameter at a time. So the sum over micro-batches is taken
    in fp32, and at most one parameter's half gradient exists."""

    def hook(p: Tensor) -> None:
        g = p.grad
        if g is None:
            return
        acc.add(g)
        p.grad = None

    return hook


_OWNER = "_coevolve_learner"
"""Attribute a half-precision parameter carries while a learner's gradient hook sits on it:
(weak reference to that learner, hook handle)."""


def _remove_hooks(handles: list[Any]) -> None:
    for h in handles:
        h.remove()
    handles.clear()


def _wrap_lora(model: Any, cfg: LearnerConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ConfigError("learner.lora=true needs the 'lora' extra (peft): pip install 'coevolve[lora]'") from e
    lcfg = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lcfg)


class Learner:
    """GRPO learner over a Hugging Face causal LM (shared in place with the sampler).

    With ``cfg.lora`` the model is wrapped with PEFT; use ``learner.model`` for sampling then.
    ``ref_model`` is needed only when ``cfg.beta_kl > 0`` (with LoRA the adapter-free base
    serves as reference when it is None).

    A learner over half-precision weights puts a gradient hook on every trainable parameter.
    ``close()`` (or leaving a ``with Learner(...)`` block, or dropping the learner) removes them
    and frees the masters and optimizer state; only then can another learner train the same
    model (building one while the first is open is a ``ConfigError``: the first one's hooks would
    take every gradient).
    """

    def __init__(
        self, model: Any, cfg: LearnerConfig | None = None, ref_model: Any = None, tokenizer: Any = None
    ) -> None:
        self.cfg = cfg or LearnerConfig()
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0  # any id works: padded positions are masked
        n_params = sum(p.numel() for p in model.parameters())
        self.gradient_checkpointing = resolve_gradient_checkpointing(self.cfg, n_params)
        if self.gradient_checkpointing:
            _enable_checkpointing(model)  # before LoRA wrapping: PEFT forwards to the same layers
        if self.cfg.share_prompt and self.gradient_checkpointing:
            raise ConfigError(
                "learner.share_prompt=true runs completions on the prompt's KV cache, which activation "
                "checkpointing turns off: set learner.gradient_checkpointing=false (or share_prompt=false)"
            )
        vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 0
        self.logprob_chunk = resolve_logprob_chunk(self.cfg, int(vocab))
        if self.cfg.lora:
            model = _wrap_lora(model, self.cfg)
        if self.cfg.beta_kl > 0 and ref_model is None and not self.cfg.lora:
            raise ConfigError("LearnerConfig.beta_kl > 0 needs a ref_model (or lora=True)")
        self.model = model
        self.ref_model = ref_model
        self.tokenizer = tokenizer
        if self.cfg.share_prompt and _decoder_and_head(model) is None:
            raise ConfigError(
                f"learner.share_prompt=true needs a plain decoder + LM head; {type(model).__name__} has "
                "none (set learner.share_prompt=false)"
            )
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ConfigError("Learner: the model has no trainable parameters")
        self.param_names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.device = self.params[0].device
        # where the masters and the optimizer state live when the learner is active
        self.state_device = torch.device("cpu") if self.cfg.offload_optimizer else self.device
        self._state_at = self.state_device  # where they are now (offload_state moves them)
        # fp32 master copies when the model holds half-precision weights
        self.master: list[Tensor] | None = None
        self._sums: list[_Fp32GradSum] = []
        self._hooks: list[Any] = []
        self._head_sink: Any = None
        self.closed = False
        if any(p.dtype != torch.float32 for p in self.params):
            self._hook_fp32_masters(model)
        # a learner dropped without close() must not leave hooks that take the model's gradients
        self._finalizer = weakref.finalize(self, _remove_hooks, self._hooks)
        opt_params = self.master if self.master is not None else self.params
        if self.cfg.offload_optimizer and self.master is None and self.device.type != "cpu":
            raise ConfigError(
                "learner.offload_optimizer=true offloads the fp32 masters of half-precision weights, but the "
                f"trainable parameters here are fp32 on {self.device} (LoRA adapters, or model.dtype=float32); "
                "set learner.offload_optimizer=false"
            )
        self.fused = resolve_fused(self.cfg, self.state_device)
        extra = {"fused": True} if self.fused else {}
        self.optimizer = torch.optim.AdamW(
            opt_params, lr=self.cfg.lr, betas=self.cfg.betas, weight_decay=self.cfg.weight_decay, **extra
        )
        self.step_count = 0
        self._lr_factor: Any = None  # the phase's schedule (begin_phase); None = cfg.lr throughout
        self.phase_step = 0  # optimizer steps taken in the phase, the schedule's argument

    def begin_phase(self, updates: int, done: int = 0) -> None:
        """Start ``learner.lr_schedule`` for a GRPO phase of ``updates`` calls of ``step`` of which
        ``done`` are already taken (a continued or resumed phase): each call's optimizer steps get
        ``cfg.lr`` x transformers' schedule factor at their index in the phase. The factor is a pure
        function of that index, so a phase resumed at step k goes on exactly as if never stopped."""
        # transformers.optimization costs ~4 s to import; a config load (which imports this module) must not pay it
        from transformers.optimization import get_scheduler

        mu = self.cfg.epochs_per_batch
        name = "constant_with_warmup" if self.cfg.lr_schedule == "constant" else self.cfg.lr_schedule
        probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # holds the schedule, never steps
        sched = get_scheduler(name, probe, num_warmup_steps=self.cfg.warmup_steps, num_training_steps=updates * mu)
        self._lr_factor = sched.lr_lambdas[0]
        self.phase_step = done * mu

    @property
    def current_lr(self) -> float:
        """The learning rate of the next optimizer step."""
        return self.cfg.lr * (1.0 if self._lr_factor is None else float(self._lr_factor(self.phase_step)))

    def _hook_fp32_masters(self, model: Any) -> None:
        """Set up fp32 training of half-precision weights (called once, from ``__init__``):
        claim the parameters (``_claim``), make their fp32 master copies in ``state_device``, and
        hook every parameter so that its gradients are summed in fp32 and its half gradient is
        freed at once (``_fp32_accumulator``). With the chunked log-prob path the LM head's fp32
        weight gradient is handed straight to its sum (``_head_sink``), skipping bf16 rounding."""
        self._claim()
        self.master = [
            p.detach().to(self.state_device, torch.float32, copy=True).requires_grad_(True) for p in self.params
        ]
        self._sums = [_Fp32GradSum() for _ in self.params]
        me = weakref.ref(self)
        for p, acc in zip(self.params, self._sums):
            h = p.register_post_accumulate_grad_hook(_fp32_accumulator(acc))
            self._hooks.append(h)
            setattr(p, _OWNER, (me, h))
        # the chunked head's fp32 weight gradient goes straight into its sum (no bf16 rounding)
        parts = _decoder_and_head(model) if self.logprob_chunk else None
        head_w = getattr(parts[1], "weight", None) if parts is not None else None
        for p, acc in zip(self.params, self._sums):
            if p is head_w:
                self._head_sink = acc.add

    def _claim(self) -> None:
        """Refuse parameters another open learner hooks; clear hooks a dropped learner left."""
        for name, p in zip(self.param_names, self.params):
            prev = getattr(p, _OWNER, None)
            if prev is None:
                continue
            owner = prev[0]()
            if owner is not None and not owner.closed:
                raise ConfigError(
                    f"Learner: parameter {name} is already trained by another open Learner, whose "
                    "gradient hooks would take every gradient of this one; call close() on that "
                    "learner first (or use it as a context manager)"
                )
            prev[1].remove()
            delattr(p, _OWNER)

    def close(self) -> None:
        """Remove the gradient hooks and free the fp32 masters and optimizer state. The model
        keeps its current weights and can be trained by a new learner; this one cannot step,
        save or load any more. Idempotent."""
        if self.closed:
            return
        self._finalizer()  # removes the hooks (once)
        for p in self.params:
            prev = getattr(p, _OWNER, None)
            if prev is not None and prev[0]() is self:
                delattr(p, _OWNER)
        for p in self.params:
            p.grad = None
        self.master, self._sums, self._head_sink = None, [], None
        self.optimizer.state.clear()
        self.optimizer.param_groups.clear()
        self.closed = True
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RunStateError(
                f"Learner.{what}: this learner was closed (its hooks and optimizer state are gone); "
                "build a new Learner over the model"
            )

    # ------------------------------------------------------------------ device placement
    def _move_state(self, dev: torch.device) -> None:
        """Masters (in place: the optimizer holds these very tensors) and AdamW state to ``dev``.
        Scalar ``step`` counters stay where the optimizer keeps them (CPU unless fused)."""
        if self._state_at == dev:
            return
        with torch.no_grad():
            if self.master is not None:
                for m in self.master:
                    m.data = m.data.to(dev)
                    m.grad = None
            for st in self.optimizer.state.values():
                for k, v in list(st.items()):
                    if isinstance(v, Tensor) and (k != "step" or self.fused):
                        st[k] = v.to(dev)
        self._state_at = dev

    def offload_state(self) -> None:
        """Move the fp32 masters and optimizer state to CPU memory (a role that is not training
        then holds only its weights on the GPU); the next ``step`` brings them back. No-op when
        they already live on the CPU (CPU runs, ``offload_optimizer``)."""
        self._move_state(torch.device("cpu"))

    def onload_state(self) -> None:
        """Masters and optimizer state back to ``state_device`` (``step`` does this itself)."""
        self._move_state(self.state_device)

    def move_weights(self, device: torch.device | str) -> None:
        """Model weights (and a separate reference model's) to ``device``: recipes park an idle
        role's weights in CPU memory and bring them back before it samples or trains."""
        self.model.to(device)
        if self.ref_model is not None:
            self.ref_model.to(device)

    # ------------------------------------------------------------------ internals
    def _opt_params(self) -> list[Tensor]:
        return self.master if self.master is not None else self.params

    def _zero_grads(self) -> None:
        for p in self.params:
            p.grad = None
        if self.master is not None:
            for m in self.master:
                m.grad = None
        for acc in self._sums:
            acc.sum = None

    def _take_grads(self) -> None:
        """Hand each parameter's fp32 gradient sum to its master: the same tensor when the master
        lives on the parameter's device, one device-to-host copy per parameter and step when it
        lives in CPU memory (``offload_optimizer``)."""
        if self.master is None:
            return
        for m, acc in zip(self.master, self._sums):
            if acc.sum is not None:
                m.grad = acc.sum.to(m.device)
                acc.sum = None

    def _logprobs(self, model: Any, b: _Batch, return_entropy: bool = False, head_grad_sink: Any = None) -> Any:
        """Completion log-probs of micro-batch ``b`` under ``model`` (its layout decides the path)."""
        if b.prompt_ids is not None:
            return shared_prompt_logprobs(
                model,
                b.prompt_ids,
                b.prompt_mask,
                b.input_ids,
                b.completion_mask,
                return_entropy=return_entropy,
                chunk_tokens=self.logprob_chunk,
                head_grad_sink=head_grad_sink,
            )
        return sequence_logprobs(
            model,
            b.input_ids,
            b.attention_mask,
            b.completion_mask,
            return_entropy=return_entropy,
            chunk_tokens=self.logprob_chunk,
            head_grad_sink=head_grad_sink,
        )

    def _ref_logprobs(self, b: _Batch) -> Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return self._logprobs(self.ref_model, b).float()
            with self.model.disable_adapter():  # LoRA: the frozen base is the reference
                return self._logprobs(self.model, b).float()

    # ------------------------------------------------------------------ API
    def step(self, groups: list[RolloutGroup]) -> dict[str, float]:
        """One GRPO update (``epochs_per_batch`` optimizer steps) from ``groups``.

        Returns metrics; ``skipped == 1`` means no optimizer step was taken because every group
        had zero reward variance (or no completion tokens were left).
        """
        cfg = self.cfg
        self._check_open("step")
        _validate_groups(groups)
        all_rewards = [float(r) for g in groups for r in g.rewards]
        all_lens = [len(c) for g in groups for c in g.completion_ids]
        seqs: list[tuple[list[int], list[int], float, list[float] | None]] = []
        n_zero = 0
        for g in groups:
            adv_1G, zero_1 = group_advantages(
                torch.tensor([g.rewards], dtype=torch.float64), scale_std=cfg.scale_std, eps=cfg.adv_eps
            )
            if bool(zero_1[0]):
                n_zero += 1
                if cfg.drop_zero_std:
                    continue
            prompt = list(g.prompt_ids)  # one object per group: share_prompt groups rows by it
            for k, c in enumerate(g.completion_ids):
                lp = None if g.logprobs is None else [float(x) for x in g.logprobs[k]]
                seqs.append((prompt, list(c), float(adv_1G[0, k]), lp))
        rt = torch.tensor(all_rewards, dtype=torch.float64)
        n_tokens = sum(len(s[1]) for s in seqs)
        metrics: dict[str, float] = {
            "frac_zero_std": n_zero / len(groups),
            "reward_mean": float(rt.mean()),
            "reward_std": float(rt.std(unbiased=False)),
            "completion_len_mean": sum(all_lens) / len(all_lens),
            "n_groups": float(len(groups)),
            "n_groups_used": float(len(groups) - n_zero if cfg.drop_zero_std else len(groups)),
            "n_tokens": float(n_tokens),
            "adv_abs_mean": sum(abs(s[2]) for s in seqs) / len(seqs) if seqs else 0.0,
            "lr": self.current_lr,  # of this update's first optimizer step
            "micro_batches": 0.0,
            "pad_frac": 0.0,
            "loss": 0.0,
            "grad_norm": 0.0,
            "clip_frac": 0.0,
            "clip_frac_low": 0.0,
            "clip_frac_high": 0.0,
            "ratio_mean": 1.0,
            "kl": 0.0,
            "entropy": 0.0,
        }
        if not seqs or n_tokens == 0:
            self.phase_step += cfg.epochs_per_batch  # the schedule moves on: its position is the phase's step
            metrics.update(skipped=1.0, step=float(self.step_count))
            return metrics

        if cfg.share_prompt:
            mbs = self._shared_micro_batches(seqs)
            real = sum(len(c) for _, c, _, _ in seqs) + sum(len(b_p) for b_p in {id(s[0]): s[0] for s in seqs}.values())
            padded = sum(b.input_ids.numel() + (0 if b.prompt_ids is None else b.prompt_ids.numel()) for b in mbs)
        else:
            packed = cfg.max_tokens_per_micro_batch is not None
            groups_idx = pack_micro_batches(
                [len(p) + len(c) for p, c, _, _ in seqs], cfg.max_tokens_per_micro_batch, cfg.micro_batch_size
            )
            mbs = [
                _collate([seqs[i] for i in idx], self.pad_id, self.device, left_pad_all=packed) for idx in groups_idx
            ]
            real = sum(len(p) + len(c) for p, c, _, _ in seqs)
            padded = sum(b.input_ids.numel() for b in mbs)
        metrics.update(micro_batches=float(len(mbs)), pad_frac=1.0 - real / max(1, padded))
        self.onload_state()
        was_training = self.model.training
        self.model.train()
        try:
            # pi_old: sampler log-probs, else a frozen pre-update forward when mu > 1
            if mbs[0].old_logp is None and cfg.epochs_per_batch > 1:
                with torch.no_grad():
                    for b in mbs:
                        b.old_logp = self._logprobs(self.model, b).float()
            need_ref = cfg.beta_kl > 0 or self.ref_model is not None
            if need_ref:
                for b in mbs:
                    b.ref_logp = self._ref_logprobs(b)
            sums = {
                k: 0.0
                for k in (
                    "loss",
                    "grad_norm",
                    "entropy",
                    "clip_frac",
                    "clip_frac_low",
                    "clip_frac_high",
                    "ratio_mean",
                    "kl",
                )
            }
            for _epoch in range(cfg.epochs_per_batch):
                ep = self._one_update(mbs, n_tokens)
                for k in sums:
                    sums[k] += ep[k]
        finally:
            self.model.train(was_training)
        for k, v in sums.items():
            metrics[k] = v / cfg.epochs_per_batch
        metrics.update(skipped=0.0, step=float(self.step_count))
        return metrics

    def _shared_micro_batches(self, seqs: list[tuple[list[int], list[int], float, list[float] | None]]) -> list[_Batch]:
        """``share_prompt`` micro-batches: whole groups (rows of one prompt object are one group,
        in order), as many as ``micro_batch_size`` rows allow (at least one group each)."""
        groups: list[tuple[list[int], list[tuple[list[int], float, list[float] | None]]]] = []
        for p, c, a, lp in seqs:
            if not groups or groups[-1][0] is not p:
                groups.append((p, []))
            groups[-1][1].append((c, a, lp))
        out, cur, rows = [], [], 0
        for g in groups:
            if cur and rows + len(g[1]) > self.cfg.micro_batch_size:
                out.append(_collate_shared(cur, self.pad_id, self.device))
                cur, rows = [], 0
            cur.append(g)
            rows += len(g[1])
        if cur:
            out.append(_collate_shared(cur, self.pad_id, self.device))
        return out

    def _one_update(self, mbs: list[_Batch], n_tokens: int) -> dict[str, float]:
        cfg = self.cfg
        n_seqs = sum(int(b.adv.shape[0]) for b in mbs)  # every answer of the update batch (seq-mean's S)
        self._zero_grads()
        total_loss = 0.0
        acc = {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "ratio_mean": 0.0, "kl": 0.0}
        ent_sum = 0.0
        for b in mbs:
            logp, ent = self._logprobs(self.model, b, return_entropy=True, head_grad_sink=self._head_sink)
            logp = logp.float()  # (B, T)
            ent_sum += float(ent.sum())
            old = b.old_logp if b.old_logp is not None else logp.detach()
            loss, st = policy_loss(
                logp,
                old,
                b.adv,
                b.completion_mask,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                ref_logp_NT=b.ref_logp,
                beta=cfg.beta_kl,
                num_tokens=float(n_tokens),
                agg=cfg.loss_agg,
                num_seqs=float(n_seqs),
            )
            if not torch.isfinite(loss):
                self._zero_grads()
                raise NonFiniteLossError(
                    f"GRPO loss is {loss.item()} at learner step {self.step_count} (weights untouched); "
                    "check the learning rate, rewards and model dtype"
                )
            loss.backward()
            total_loss += float(loss.detach())
            w = float(st["n_tokens"]) / n_tokens
            for k in acc:
                acc[k] += float(st[k]) * w
        # half-precision models: the hooks summed the gradients in fp32 on the device (nothing is
        # left in p.grad); they reach the masters here, once per step
        self._take_grads()
        opt_params = self._opt_params()
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(opt_params, max_norm)
        if not torch.isfinite(grad_norm):
            self._zero_grads()
            raise NonFiniteLossError(
                f"gradient norm is {grad_norm.item()} at learner step {self.step_count} (weights untouched)"
            )
        if self._lr_factor is not None:  # a phase's schedule (begin_phase); otherwise the optimizer's own lr
            for group in self.optimizer.param_groups:
                group["lr"] = self.current_lr
        self.optimizer.step()
        self.phase_step += 1
        self._zero_grads()
        if self.master is not None:
            with torch.no_grad():
                for p, m in zip(self.params, self.master):
                    p.copy_(m)
        self.step_count += 1
        return {"loss": total_loss, "grad_norm": float(grad_norm), "entropy": ent_sum / n_tokens, **acc}

    # ------------------------------------------------------------------ checkpoints
    def save(self, out_dir: str | Path, tokenizer: Any = None) -> Path:
        """Write the model (``save_pretrained``), the tokenizer when given (or held), optimizer
        state + fp32 masters (``learner_optim.pt``) and step + config (``learner_state.json``)."""
        self._check_open("save")
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(d))
        fault_point("checkpoint")  # the moment a crash leaves a model without its optimiser state
        tok = tokenizer if tokenizer is not None else self.tokenizer
        if tok is not None:
            tok.save_pretrained(str(d))
        # into a Python file, not a path: on a full disk torch's "unexpected pos" error then carries
        # the write's OSError (ENOSPC) as its context, which recipes.disk_full reads
        with open(d / OPTIM_FILE, "wb") as f:
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "master": None if self.master is None else [m.detach().cpu() for m in self.master],
                    "param_names": self.param_names,
                },
                f,
            )
        (d / STATE_JSON).write_text(
            json.dumps({"step": self.step_count, "config": self.cfg.model_dump(mode="json")}, indent=2)
        )
        return d

    def load(self, in_dir: str | Path) -> None:
        """Restore weights, optimizer state, masters and step from ``save``'s folder.

        The learner's own config is kept (so a resumed run may change e.g. the lr); the saved
        config is only used to check that the trainable parameters match.
        """
        self._check_open("load")
        d = Path(in_dir)
        for f in (STATE_JSON, OPTIM_FILE):
            if not (d / f).is_file():
                raise RunStateError(f"learner checkpoint {d} is missing {f}")
        state = json.loads((d / STATE_JSON).read_text())
        blob = torch.load(d / OPTIM_FILE, map_location="cpu", weights_only=True)
        if blob["param_names"] != self.param_names:
            raise RunStateError(
                f"learner checkpoint {d}: trainable parameters differ from this model "
                f"({len(blob['param_names'])} saved vs {len(self.param_names)} here)"
            )
        for i, (name, param) in enumerate(zip(self.param_names, self._opt_params())):
            saved = blob["optimizer"]["state"].get(i, {}).get("exp_avg")
            if saved is not None and tuple(saved.shape) != tuple(param.shape):
                raise RunStateError(
                    f"learner checkpoint {d}: its optimiser state is for another model ({name}: "
                    f"{tuple(saved.shape)} saved vs {tuple(param.shape)} here)"
                )
        self._load_weights(d)
        if blob["master"] is not None:
            if self.master is None:
                raise RunStateError(f"learner checkpoint {d} has fp32 masters but this model is fp32")
            with torch.no_grad():
                for p, m, saved in zip(self.params, self.master, blob["master"]):
                    m.copy_(saved.to(m.device))
                    p.copy_(m)
        self.optimizer.load_state_dict(blob["optimizer"])
        for group in self.optimizer.param_groups:  # load_state_dict brings the saved ones: this config's apply
            group.update(lr=self.cfg.lr, betas=self.cfg.betas, weight_decay=self.cfg.weight_decay)
        self.step_count = int(state["step"])

    def load_weights(self, in_dir: str | Path) -> None:
        """Only the weights of an HF folder (``*.safetensors``, or a LoRA adapter), e.g. what
        another trainer produced (``backend=verl``); optimizer state, masters and step stay as
        they are, and fp32 masters are refreshed from the new weights."""
        self._load_weights(Path(in_dir))
        if self.master is not None:
            with torch.no_grad():
                for p, m in zip(self.params, self.master):
                    m.copy_(p.detach().to(m.device, m.dtype))

    def _load_weights(self, d: Path) -> None:
        if self.cfg.lora:
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(self.model, load_peft_weights(str(d), device=str(self.device)))
            return
        from safetensors.torch import load_file

        files = sorted(p for p in d.glob("*.safetensors") if not p.name.startswith("adapter"))
        if not files:
            raise RunStateError(f"learner checkpoint {d} has no *.safetensors weights")
        sd: dict[str, Tensor] = {}
        for f in files:
            sd.update(load_file(str(f), device=str(self.device)))
        missing, unexpected = self.model.load_state_dict(sd, strict=False)
        loaded_ptrs = {p.data_ptr() for n, p in self.model.state_dict().items() if n in sd}
        bad_missing = [k for k in missing if self.model.state_dict()[k].data_ptr() not in loaded_ptrs]
        if unexpected or bad_missing:
            raise RunStateError(
                f"learner checkpoint {d}: weights do not match the model "
                f"(missing {bad_missing[:5]}, unexpected {list(unexpected)[:5]})"
            )
