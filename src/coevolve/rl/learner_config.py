"""The learner's config (``LearnerConfig``: the ``learner`` section of every recipe config) and
the auto rules that resolve its ``None`` fields from the model and the device."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, field_validator

from coevolve.schema import Strict

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
