"""``coevolve plan``: what a run will cost before it starts (issue 10).

Pure functions over a recipe config and a model's ``config.json`` (no weights needed):

- ``ModelShape.from_config``: layers, widths, heads, vocabulary -> parameter count, KV bytes per
  token, LoRA parameter count;
- ``phases(cfg, ...)``: per phase of the recipe, the rollouts and tokens it generates (by which
  role, in sampler calls of how many rows) and the tokens it trains on;
- ``role_memory``: one role's GPU bytes by kind: weights, fp32 masters, optimizer state,
  gradients, activations (with the learner's checkpointing and micro-batch budget), logits
  (plain or chunked log-probs), KV cache of its sampler;
- ``phase_memory``: the peak of each phase = what stays resident (every role's weights unless
  parked, the training role's state) + the largest transient (a learner step, or a sampler
  call's KV cache), with ``SAFETY_MARGIN`` headroom required;
- ``make_plan`` -> ``Plan`` (``fits``, ``problems`` each naming the field to change,
  ``format_plan``), and ``preflight_problems(cfg)`` for ``coevolve run``.

Wall time comes from ``DEVICES``, the one table of per-device rates; every rate says whether it
was measured (where, how) or assumed. The memory model follows the code it describes: the
learner's fp32 masters and per-parameter fp32 gradient accumulation, AdamW's m and v (plus the
foreach kernel's temporary fp32 copy when not fused), HF activation checkpointing of every
decoder layer, ``sequence_logprobs``' plain or chunked logits, ``HFSampler``'s row / KV-token
chunks, ``Role.offload`` / ``ParkedSampler`` placement. ``benchmarks/bench_learner_memory.py``
puts the estimate next to measured peaks.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.errors import ConfigError, ModelLoadError
from coevolve.rl.learner import LearnerConfig, resolve_gradient_checkpointing, resolve_logprob_chunk

GiB = float(1 << 30)
SAFETY_MARGIN = 0.10
"""A phase fits when its estimated peak leaves this share of the device free: allocator
fragmentation, the CUDA context, library workspaces and the estimate's own error live there."""

COMPLETION_FILL = 0.5
"""Assumed mean completion length as a share of its cap, for token counts and wall time (memory
always uses the cap: one micro-batch of capped rows is what has to fit)."""

PROMPT_TOKENS = {"toy": {"answer": 32, "question": 64}, "real": {"answer": 384, "question": 512}}
"""Assumed prompt lengths: toy prompts are ~30-60 characters (char tokenizer); a real math
question with instructions and chat template ~150-400 tokens, a writer prompt (anchor question,
answer, difficulty or memory causes) up to ~500. Assumed, conservative."""

DIAGEVO_KEPT_FRACTION = 0.3
"""Assumed share of DiagEvo's candidate pool that passes the dual filter (drives the diagnoses)."""

POOL_ROWS_IF_UNKNOWN = 12000
"""``difficulty.pool_size=None`` means every dataset row: assumed math_train12k's size."""

BENCH_ITEMS = {
    "gsm8k": 1319, "math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva": 272, "olympiadbench": 675,
    "mmlu_pro": 12032, "supergpqa": 300, "gpqa_diamond": 198, "bbeh": 4520, "bbeh_mini": 460,
}
"""Items per evaluation benchmark (the public test sets; supergpqa: the offline 300 sample)."""


# --------------------------------------------------------------------------- the rates table
@dataclass(frozen=True)
class Rate:
    """One device figure and where it comes from: ``measured`` (how, where) or assumed."""

    value: float
    measured: bool
    source: str


@dataclass(frozen=True)
class Device:
    """A device kind: its memory and the rates wall time is estimated from."""

    name: str
    kind: str  # "cuda" | "cpu"
    memory_gib: Rate  # usable accelerator (or, for cpu, host) memory
    host_memory_gib: Rate  # host memory for offloaded state / parked weights
    matmul_tflops: Rate  # dense peak in the model's compute dtype (bf16 on GPU, fp32 on CPU)
    train_mfu: Rate  # share of the peak a learner step reaches
    mem_gbps: Rate  # memory bandwidth (decode reads every weight and the KV cache once per step)
    hf_step_ms_per_layer: Rate  # HF generate's launch-bound floor per decode step and layer
    vllm_bw_efficiency: Rate  # share of bandwidth vLLM's decode reaches


DEVICES: dict[str, Device] = {
    "h200": Device(
        "h200", "cuda",
        memory_gib=Rate(139.0, True, "total GPU memory seen on the device machine (device README: about 139 GiB)"),
        host_memory_gib=Rate(128.0, True, "host memory of the H200 device machine (device README)"),
        matmul_tflops=Rate(790.0, True, "dense bf16 matmul rate measured on the device machine (device README)"),
        train_mfu=Rate(0.35, False, "assumed: HF eager model, checkpointing recompute counted separately"),
        mem_gbps=Rate(4800.0, False, "assumed: H200 HBM3e spec"),
        hf_step_ms_per_layer=Rate(83.0 / 36, True, "HF generate on a Qwen3-4B-shaped model, B=256: 81-86 ms per decode "
                                  "step for 36 layers (measured on an H200 by an earlier session of this project)"),
        vllm_bw_efficiency=Rate(0.6, False, "assumed: continuous batching with CUDA graphs"),
    ),
    "a100-80g": Device(
        "a100-80g", "cuda",
        memory_gib=Rate(79.2, False, "assumed: 80 GB card, memory torch reports"),
        host_memory_gib=Rate(256.0, False, "assumed host memory"),
        matmul_tflops=Rate(312.0, False, "assumed: A100 bf16 dense spec"),
        train_mfu=Rate(0.35, False, "assumed"),
        mem_gbps=Rate(2039.0, False, "assumed: A100 80 GB spec"),
        hf_step_ms_per_layer=Rate(83.0 / 36, False, "assumed: launch-bound like the measured H200 figure"),
        vllm_bw_efficiency=Rate(0.6, False, "assumed"),
    ),
    "a100-40g": Device(
        "a100-40g", "cuda",
        memory_gib=Rate(39.4, False, "assumed: 40 GB card, memory torch reports"),
        host_memory_gib=Rate(128.0, False, "assumed host memory"),
        matmul_tflops=Rate(312.0, False, "assumed: A100 bf16 dense spec"),
        train_mfu=Rate(0.35, False, "assumed"),
        mem_gbps=Rate(1555.0, False, "assumed: A100 40 GB spec"),
        hf_step_ms_per_layer=Rate(83.0 / 36, False, "assumed: launch-bound like the measured H200 figure"),
        vllm_bw_efficiency=Rate(0.6, False, "assumed"),
    ),
    "cpu": Device(
        "cpu", "cpu",
        memory_gib=Rate(24.0, True, "this project's 2-core CI machine (24 GiB); `coevolve run` uses the real figure"),
        host_memory_gib=Rate(24.0, True, "same memory"),
        matmul_tflops=Rate(0.0178, True, "effective fp32 rate of a SmolLM2-135M learner step, 2 shared cores "
                           "(benchmarks/bench_learner_memory.py --rates, 2026-11-30, load average ~5)"),
        train_mfu=Rate(1.0, True, "already folded into the measured effective rate"),
        mem_gbps=Rate(10.0, False, "assumed"),
        hf_step_ms_per_layer=Rate(10.1, True, "HF generate, SmolLM2-135M fp32 at batch 1: 303 ms per decode step / "
                                  "30 layers, 2 shared cores (benchmarks/bench_learner_memory.py --rates)"),
        vllm_bw_efficiency=Rate(0.3, False, "assumed"),
    ),
}


def device_for(name: str) -> Device:
    if name not in DEVICES:
        raise ConfigError(f"--device {name!r}: unknown device (known: {', '.join(DEVICES)})")
    return DEVICES[name]


def local_device(model_device: str = "auto") -> Device:
    """The device a run will use here (``model.device``), with its real memory: the nearest
    ``DEVICES`` entry for the rates, the memory torch / the OS reports."""
    import torch

    want_cuda = model_device.startswith("cuda") or (model_device == "auto" and torch.cuda.is_available())
    if want_cuda and torch.cuda.is_available():
        idx = torch.device(model_device).index if model_device.startswith("cuda:") else 0
        props = torch.cuda.get_device_properties(idx or 0)
        total = props.total_memory / GiB
        name = props.name.lower()
        base = DEVICES["h200"] if ("h200" in name or "h100" in name) else (
            DEVICES["a100-80g"] if total > 60 else DEVICES["a100-40g"])
        mem = Rate(round(total, 1), True, f"torch.cuda: {props.name}")
        return Device(f"{base.name} (here: {props.name})", "cuda", mem, _host_memory(), base.matmul_tflops,
                      base.train_mfu, base.mem_gbps, base.hf_step_ms_per_layer, base.vllm_bw_efficiency)
    cpu = DEVICES["cpu"]
    host = _host_memory()
    return Device("cpu (here)", "cpu", host, host, cpu.matmul_tflops, cpu.train_mfu, cpu.mem_gbps,
                  cpu.hf_step_ms_per_layer, cpu.vllm_bw_efficiency)


def _host_memory() -> Rate:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
        return Rate(round(total, 1), True, "this machine (os.sysconf)")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
        return DEVICES["cpu"].memory_gib


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer, as far as memory and FLOPs go."""

    model_type: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qk_norm: bool = False
    attention_bias: bool = False

    @classmethod
    def from_config(cls, d: dict[str, Any], where: str = "config.json") -> "ModelShape":
        """From a Hugging Face ``config.json`` dict (Llama / Qwen2 / Qwen3 / Mistral style)."""
        d = {**d.get("text_config", {}), **d} if "hidden_size" not in d else d
        try:
            hidden, heads = int(d["hidden_size"]), int(d["num_attention_heads"])
            return cls(
                model_type=str(d.get("model_type", "?")), layers=int(d["num_hidden_layers"]), hidden=hidden,
                intermediate=int(d["intermediate_size"]), heads=heads,
                kv_heads=int(d.get("num_key_value_heads") or heads),
                head_dim=int(d.get("head_dim") or hidden // heads), vocab=int(d["vocab_size"]),
                tied=bool(d.get("tie_word_embeddings", False)),
                qk_norm=str(d.get("model_type", "")).startswith("qwen3"),
                attention_bias=bool(d.get("attention_bias", str(d.get("model_type", "")) == "qwen2")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ModelLoadError(f"{where}: not a dense decoder config the planner understands (missing/bad {e})") from None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of one decoder layer's linear maps."""
        H, I = self.hidden, self.intermediate
        return [("q_proj", H, self.q_dim), ("k_proj", H, self.kv_dim), ("v_proj", H, self.kv_dim),
                ("o_proj", self.q_dim, H), ("gate_proj", H, I), ("up_proj", H, I), ("down_proj", I, H)]

    @property
    def layer_params(self) -> int:
        n = sum(i * o for _, i, o in self.linears()) + 2 * self.hidden
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_bias:
            n += self.q_dim + 2 * self.kv_dim
        return n

    @property
    def n_params(self) -> int:
        emb = self.vocab * self.hidden
        return emb * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    @property
    def largest_param(self) -> int:
        """Elements of the largest single tensor (the embedding): the transient half gradient."""
        return max(self.vocab * self.hidden, max(i * o for _, i, o in self.linears()))

    def lora_params(self, r: int, targets: str | list[str]) -> int:
        names = [n for n, _, _ in self.linears()] if targets == "all-linear" else (
            [targets] if isinstance(targets, str) else list(targets))
        per = sum(r * (i + o) for n, i, o in self.linears() if any(n == t or n.endswith(t) for t in names))
        return per * self.layers

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def act_bytes_per_token_layer(self, dtype_bytes: int) -> int:
        """Activations one decoder layer keeps for backward, per token: RMSNorm fp32 inputs and
        outputs, q/k/v projections (+ Qwen3's fp32 q/k norms), RoPE outputs, the attention output
        (SDPA's memory-efficient kernels keep no scores), and SwiGLU's gate, up, SiLU and product."""
        b, H, I, q, kv = dtype_bytes, self.hidden, self.intermediate, self.q_dim, self.kv_dim
        n = 8 * H + b * (2 * H + 3 * q + 3 * kv + 4 * I)
        if self.qk_norm:
            n += 4 * (q + kv)
        return n


def load_model_shape(cfg: Any) -> tuple[ModelShape, str, bool]:
    """(shape, where it came from, toy?) for ``cfg.model``: the folder's ``config.json`` alone
    (weights may be absent: plan before downloading), or the toy base model's architecture."""
    path = cfg.model.path
    if path is None:
        from coevolve.toy import build_model, build_tokenizer

        return ModelShape.from_config(build_model(len(build_tokenizer())).config.to_dict(), "toy"), "toy base model", True
    p = Path(path)
    f = p / "config.json"
    if not f.is_file():
        raise ModelLoadError(f"model.path: {p} has no config.json (the planner needs only that file)")
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{f}: not valid JSON ({e})") from None
    from coevolve.config.base import is_toy_model

    return ModelShape.from_config(d, str(f)), str(f), is_toy_model(p)


# --------------------------------------------------------------------------- the recipe's work
@dataclass(frozen=True)
class Gen:
    """Rollouts one role generates in a phase, in sampler calls of ``call_rows`` rows."""

    role: str
    what: str
    rows: int
    call_rows: int
    prompt: int
    max_new: int
    full_call: int = 0  # rows of one sampler call before engine.max_batch chunks it (a Ray pool splits these)


@dataclass(frozen=True)
class Train:
    """GRPO updates of one role in a phase."""

    role: str
    steps: int
    rows_per_step: int
    prompt: int
    max_new: int


@dataclass(frozen=True)
class PhaseWork:
    name: str
    times: int  # how often the phase runs (rounds)
    gens: tuple[Gen, ...] = ()
    train: Train | None = None
    note: str = ""

    @property
    def rollouts(self) -> int:
        return self.times * sum(g.rows for g in self.gens)

    @property
    def gen_tokens_cap(self) -> int:
        return self.times * sum(g.rows * g.max_new for g in self.gens)

    @property
    def train_tokens_cap(self) -> int:
        t = self.train
        return 0 if t is None else self.times * t.steps * t.rows_per_step * t.max_new


def _cap(phase: Any, sampling: Any) -> int:
    return int(getattr(phase, "max_new_tokens", None) or sampling.max_new_tokens)


def _eval_work(cfg: Any, toy: bool, prompt: int, times: int) -> PhaseWork:
    from coevolve.eval.benchmarks import resolve_benches

    e = cfg.eval
    benches = resolve_benches(e.benches or (["toy"] if toy else ["math7"]))
    rows = 0
    for b in benches:
        n = e.heldout_size if b.kind == "toy" else BENCH_ITEMS.get(b.name, 500)
        if e.limit is not None:
            n = min(n, e.limit)
        k = b.default_samples if e.samples == -1 else max(0, e.samples)
        rows += n * (1 + k)
    call = min(cfg.engine.max_batch, max(1, rows))
    return PhaseWork("eval", times, (Gen("solver", "benchmark answers", rows, call, prompt, e.max_new_tokens,
                                         full_call=max(1, rows)),),
                     note=", ".join(b.name for b in benches))


def phases(cfg: Any, toy: bool) -> list[PhaseWork]:
    """The recipe's phases with their rollouts (caps: every completion at its token cap)."""
    pt = PROMPT_TOKENS["toy" if toy else "real"]
    ans, qst = pt["answer"], pt["question"]
    s, mb = cfg.sampling, cfg.engine.max_batch

    def call(prompts: int, n: int) -> int:
        return max(1, min(mb, prompts * n))

    def gen(role: str, what: str, rows: int, prompts: int, n: int, prompt: int, max_new: int) -> Gen:
        """``rows`` rollouts in sampler calls of ``prompts`` x ``n`` (generated in chunks of ``engine.max_batch``)."""
        return Gen(role, what, rows, call(prompts, n), prompt, max_new, full_call=prompts * n)

    rounds = int(getattr(cfg, "rounds", 1))
    n_evals = 1 + (rounds if cfg.eval.every_round else 1) if cfg.recipe != "grpo" else 2
    out: list[PhaseWork] = []
    if cfg.recipe == "grpo":
        sp = cfg.solver
        rows = sp.prompts_per_step * sp.group_size
        out.append(PhaseWork("solver", 1, (gen("solver", "answers", sp.steps * rows,
                                               sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                             Train("solver", sp.steps, rows, ans, _cap(sp, s))))
    elif cfg.recipe == "d2evo":
        d, q, b, sp = cfg.difficulty, cfg.questioner, cfg.buffer, cfg.solver
        pool = d.pool_size or cfg.data.limit or POOL_ROWS_IF_UNKNOWN
        qrole = "solver" if q.share_weights else "questioner"
        out.append(PhaseWork("difficulty", rounds + int(d.measure_final),
                             (gen("solver", f"{d.samples} answers x {pool} pool questions", pool * d.samples,
                                  s.batch_prompts, d.samples, ans, s.max_new_tokens),)))
        if q.enabled and q.steps > 0:
            rows = q.prompts_per_step * q.group_size
            scorer = "frozen solver copy" if q.share_weights and q.frozen_scorer else "solver"
            out.append(PhaseWork("questioner", rounds, (
                gen(qrole, "questions", q.steps * rows, q.prompts_per_step, q.group_size, qst, _cap(q, s)),
                gen(scorer, f"{q.reward.solver_samples} answers per question", q.steps * rows * q.reward.solver_samples,
                    s.batch_prompts, q.reward.solver_samples, ans, s.max_new_tokens)),
                Train(qrole, q.steps, rows, qst, _cap(q, s))))
        if q.enabled and b.synthesis and b.generate > 0:
            out.append(PhaseWork("buffer", rounds, (
                gen(qrole, "questions", b.generate, s.batch_prompts, 1, qst, _cap(q, s)),
                gen("solver", f"{b.voting.samples} votes per question", b.generate * b.voting.samples,
                    s.batch_prompts, b.voting.samples, ans, s.max_new_tokens))))
        if sp.steps > 0:
            rows = sp.prompts_per_step * sp.group_size
            out.append(PhaseWork("solver", rounds, (gen("solver", "answers", sp.steps * rows,
                                                        sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                                 Train("solver", sp.steps, rows, ans, _cap(sp, s))))
    elif cfg.recipe == "diagevo":
        ch, pc, sp, dg, mem = cfg.challenger, cfg.pool, cfg.solver, cfg.diagnoser, cfg.memory
        if not ch.frozen and ch.steps > 0:
            rows = ch.prompts_per_step * ch.group_size
            out.append(PhaseWork("challenger", rounds, (
                gen("challenger", "questions", ch.steps * rows, ch.prompts_per_step, ch.group_size, qst, _cap(ch, s)),
                gen("solver", f"{ch.reward.solver_samples} answers per question", ch.steps * rows * ch.reward.solver_samples,
                    s.batch_prompts, ch.reward.solver_samples, ans, s.max_new_tokens)),
                Train("challenger", ch.steps, rows, qst, _cap(ch, s))))
        out.append(PhaseWork("pool", rounds, (
            gen("challenger", "candidate questions", pc.size, s.batch_prompts, 1, qst, _cap(ch, s)),
            gen("solver", f"{pc.voting.samples} construction answers", pc.size * pc.voting.samples,
                s.batch_prompts, pc.voting.samples, ans, s.max_new_tokens))))
        if sp.steps > 0:
            rows = sp.prompts_per_step * sp.group_size
            out.append(PhaseWork("solver", rounds, (gen("solver", "answers", sp.steps * rows,
                                                        sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                                 Train("solver", sp.steps, rows, ans, _cap(sp, s))))
        if mem.enabled:
            kept = max(1, int(pc.size * DIAGEVO_KEPT_FRACTION))
            llm = dg.kind == "llm" or (dg.kind == "auto" and not toy)
            gens = [gen("solver", "diagnoses", kept, s.batch_prompts, 1, 2 * ans, dg.max_new_tokens)] if llm else []
            if str(getattr(mem, "promotion_p1", "")) == "updated":
                gens.append(gen("solver", "promotion re-measure", kept * pc.voting.samples,
                                s.batch_prompts, pc.voting.samples, ans, s.max_new_tokens))
            out.append(PhaseWork("memory", rounds, tuple(gens),
                                 note=f"~{kept} kept questions assumed ({DIAGEVO_KEPT_FRACTION:.0%} of the pool)"))
    else:
        sp = getattr(cfg, "solver", None)
        if sp is not None:
            rows = sp.prompts_per_step * sp.group_size
            out.append(PhaseWork("solver", rounds, (gen("solver", "answers", sp.steps * rows,
                                                        sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                                 Train("solver", sp.steps, rows, ans, _cap(sp, s))))
    out.append(_eval_work(cfg, toy, ans, n_evals))
    return out


def trainable_roles(cfg: Any) -> list[str]:
    """Roles with their own model and learner, in the order the recipe builds them."""
    if cfg.recipe == "d2evo" and cfg.questioner.enabled and not cfg.questioner.share_weights:
        return ["solver", "questioner"]
    if cfg.recipe == "diagevo":
        return ["solver", "challenger"]
    return ["solver"]


# --------------------------------------------------------------------------- memory
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


def role_memory(role: str, shape: ModelShape, lcfg: LearnerConfig, device: Device, b: int, train: Train | None,
                kv_call: tuple[int, int, int] | None) -> RoleMemory:
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
    grads = trainable * 4.0 if not on_host else 0.0
    grads += (min(shape.largest_param, trainable) * b) if half else 0  # one half grad before its fp32 hook
    if fused or on_host:  # one kernel per tensor group, no temporaries (offloaded: the step runs on the CPU)
        opt_step = 0.0
    elif device.kind == "cuda":
        opt_step = trainable * 4.0  # foreach AdamW (the CUDA default): a temporary fp32 sqrt(v) for every tensor
    else:  # the per-tensor loop (CPU default): temporaries of one tensor at a time
        opt_step = 2.0 * min(shape.largest_param, trainable) * 4
    ckpt = resolve_gradient_checkpointing(lcfg, N)
    chunk = resolve_logprob_chunk(lcfg, shape.vocab)
    rows = tokens = 0
    act = logits = 0.0
    if train is not None:
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
    kv = 0.0 if kv_call is None else sampler_call_bytes(shape, b, *kv_call)
    return RoleMemory(role, weights, masters, optimizer, grads, act, logits, opt_step, kv, host, tokens, rows, ckpt,
                      chunk, trainable)


# --------------------------------------------------------------------------- the plan
@dataclass
class PhaseEstimate:
    work: PhaseWork
    resident: float  # weights of the roles on the GPU + the training role's state
    transient: float  # the largest of: learner step, each sampler call
    transient_what: str
    parts: list[tuple[float, str, Gen | None]]  # every transient (bytes, what, its generation or None: learner)
    gen_seconds: float
    train_seconds: float
    gen_tokens: float  # expected (COMPLETION_FILL of the cap)
    train_tokens: float

    @property
    def peak(self) -> float:
        return self.resident + self.transient


@dataclass
class Plan:
    recipe: str
    model: str
    shape: ModelShape
    device: Device
    dtype_bytes: int
    roles: dict[str, RoleMemory]
    phases: list[PhaseEstimate]
    host_bytes: float
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layout: "LayoutPlan | None" = None  # a multi-GPU layout (``make_plan(..., gpus=, nodes=)``); its problems are the plan's

    @property
    def capacity(self) -> float:
        return self.device.memory_gib.value * GiB

    @property
    def limit(self) -> float:
        return self.capacity * (1 - SAFETY_MARGIN)

    @property
    def fits(self) -> bool:
        return not self.problems


def _engine(cfg: Any) -> tuple[str, float | None, bool, int | None]:
    e = cfg.engine
    return (str(getattr(e, "kind", "hf")), getattr(e, "gpu_memory_utilization", None),
            bool(getattr(e, "sleep_mode", True)), getattr(e, "max_batch_tokens", None))


def _kv_rows(rows: int, prompt: int, max_new: int, max_batch_tokens: int | None) -> int:
    if max_batch_tokens is None:
        return rows
    return max(1, min(rows, max_batch_tokens // (prompt + max_new)))


def _gen_seconds(g: Gen, shape: ModelShape, device: Device, b: int, engine: str, kv_rows: int) -> float:
    """Decode time of one run of a generation: HF ``generate`` calls of ``kv_rows`` rows, each
    running until its longest row ends (taken as the cap: with G samples at T=1 one usually hits
    it), a decode step costing the largest of the launch-bound floor, reading weights + KV cache,
    and the matmuls; vLLM keeps ``kv_rows`` rows in flight and pays only the mean length."""
    if g.rows == 0:
        return 0.0
    weights = shape.n_params * b
    kv_tok = shape.kv_bytes_per_token(b)
    flops = device.matmul_tflops.value * 1e12
    if engine == "vllm":
        ctx = g.prompt + COMPLETION_FILL * g.max_new
        rows = max(1, kv_rows)
        step = (weights + rows * ctx * kv_tok) / (device.mem_gbps.value * 1e9 * device.vllm_bw_efficiency.value)
        step = max(step, 2 * shape.n_params * rows / flops)
        return g.rows * COMPLETION_FILL * g.max_new / rows * step
    calls = math.ceil(g.rows / max(1, kv_rows))
    rows = min(g.rows, kv_rows)
    ctx = g.prompt + g.max_new / 2
    step = max(device.hf_step_ms_per_layer.value * shape.layers / 1e3,
               (weights + rows * ctx * kv_tok) / (device.mem_gbps.value * 1e9),
               2 * shape.n_params * rows / flops)
    return calls * g.max_new * step


def _train_seconds(t: Train, times: int, shape: ModelShape, lcfg: LearnerConfig, device: Device, ckpt: bool) -> float:
    tokens = times * t.steps * t.rows_per_step * (t.prompt + COMPLETION_FILL * t.max_new)
    per_tok = 2 * shape.n_params * (3 if not lcfg.lora else 2) + (2 * shape.n_params if ckpt else 0)
    per_tok += 2 * shape.n_params * (int(lcfg.beta_kl > 0) + int(lcfg.epochs_per_batch > 1))
    per_tok *= lcfg.epochs_per_batch if lcfg.epochs_per_batch > 1 else 1
    attn = 6 * shape.layers * (t.prompt + t.max_new) * shape.q_dim  # causal QK^T and AV, forward + backward
    return tokens * (per_tok + attn) / (device.matmul_tflops.value * 1e12 * device.train_mfu.value)


def make_plan(cfg: Any, device: Device, shape: ModelShape | None = None, model_label: str | None = None,
              toy: bool | None = None, suggest: bool = True, gpus: int | None = None,
              nodes: int | None = None) -> Plan:
    """The plan of ``cfg`` on ``device`` (``shape`` / ``toy`` default to ``cfg.model``'s). When
    it does not fit and ``suggest``, the tightest ``engine.max_batch`` /
    ``learner.max_tokens_per_micro_batch`` named by the problems are tried together, and a set
    that makes every phase fit is added to ``notes``.

    On a GPU device with more than one GPU (``nodes`` x ``gpus``), ``engine=ray`` or
    ``backend=verl``, the plan also gets a ``layout`` (``layout_plan``) and its problems are the
    layout's per-GPU ones: the single-GPU figures stay as the reference they are built from."""
    if device.kind != "cuda" and (gpus not in (None, 1) or nodes not in (None, 1)):
        raise ConfigError(f"--gpus / --nodes: a multi-GPU layout needs a GPU --device (got {device.name})")
    if shape is None:
        shape, model_label, toy = load_model_shape(cfg)
    toy = bool(toy)
    b = dtype_bytes(cfg, device)
    lcfg: LearnerConfig = cfg.learner
    engine, util, sleep, max_batch_tokens = _engine(cfg)
    works = phases(cfg, toy)
    gpu = device.kind == "cuda"
    idle_offload = lcfg.offload_when_idle and gpu  # Role.offload / ParkedSampler act on GPUs only
    frozen_copy = "frozen solver copy"

    def largest_call(role: str) -> tuple[int, int, int] | None:
        calls = [(_kv_rows(g.call_rows, g.prompt, g.max_new, max_batch_tokens), g.prompt, g.max_new)
                 for w in works for g in w.gens if g.role == role]
        return max(calls, key=lambda c: c[0] * (c[1] + c[2]), default=None)

    roles: dict[str, RoleMemory] = {}  # each role at its most demanding training phase
    for r in trainable_roles(cfg):
        trains = [w.train for w in works if w.train is not None and w.train.role == r] or [None]
        roles[r] = max((role_memory(r, shape, lcfg, device, b, t, largest_call(r)) for t in trains),
                       key=lambda m: m.train_peak)
    copy_call = largest_call(frozen_copy)

    vllm_engine = util * device.memory_gib.value * GiB if (engine == "vllm" and gpu and util) else 0.0
    estimates: list[PhaseEstimate] = []
    for w in works:
        trainer = w.train.role if w.train is not None else None
        resident = 0.0
        for name, rm in roles.items():
            # recipes park a second role's weights in CPU memory for the solver's phases
            # (counted resident elsewhere, e.g. in round 1 before the first parking)
            if not (idle_offload and name != "solver" and w.name in ("solver", "memory")):
                resident += rm.weights
            if name == trainer or not idle_offload:
                resident += rm.state  # idle roles' masters / optimizer state wait in CPU memory (Role.offload)
        transients: list[tuple[float, str, Gen | None]] = []
        if trainer:
            step = role_memory(trainer, shape, lcfg, device, b, w.train, None)
            transients.append((step.learner_transient, f"{trainer} learner step ({step.micro_batch_rows} rows / "
                                                        f"{step.micro_batch_tokens} tokens per micro-batch)", None))
        for g in w.gens:
            kvr = _kv_rows(g.call_rows, g.prompt, g.max_new, max_batch_tokens)
            call = sampler_call_bytes(shape, b, kvr, g.prompt, g.max_new)
            label = f"{g.role} sampling ({kvr} rows x {g.prompt}+{g.max_new} tokens)"
            if engine == "vllm" and gpu:  # (a frozen copy is a pinned host snapshot served by the role's engine)
                transients.append((0.0 if not sleep else vllm_engine, f"{g.role} vLLM engine (gpu_memory_utilization={util})",
                                   g))
            elif g.role == frozen_copy:
                if idle_offload:  # ParkedSampler: the copy is on the GPU only while it samples
                    transients.append((shape.n_params * b + call, label, g))
                else:  # the copy lives through the phase
                    resident += shape.n_params * b
                    transients.append((call, label, g))
            else:
                transients.append((call, label, g))
        if engine == "vllm" and gpu and not sleep:
            resident += vllm_engine * len(roles)  # awake engines keep their share through learner steps
        transient, what, _ = max(transients, default=(0.0, "-", None), key=lambda x: x[0])
        gen_s = sum(_gen_seconds(g, shape, device, b, engine, _kv_rows(g.call_rows, g.prompt, g.max_new, max_batch_tokens))
                    for g in w.gens) * w.times
        train_s = 0.0
        if w.train is not None:
            train_s = _train_seconds(w.train, w.times, shape, lcfg, device, roles[w.train.role].checkpointing)
        gen_tok = w.times * sum(g.rows * COMPLETION_FILL * g.max_new for g in w.gens)
        tr_tok = 0.0 if w.train is None else w.times * w.train.steps * w.train.rows_per_step * COMPLETION_FILL * w.train.max_new
        estimates.append(PhaseEstimate(w, resident, transient, what, transients, gen_s, train_s, gen_tok, tr_tok))

    host = sum(rm.host for rm in roles.values())
    if idle_offload:
        host += sum(rm.masters + rm.optimizer for rm in roles.values())  # idle roles' state, at most all of it
        host += sum(rm.weights for n, rm in roles.items() if n != "solver")
        if copy_call is not None:
            host += shape.n_params * b
    plan = Plan(cfg.recipe, model_label or "?", shape, device, b, roles, estimates, host)
    plan.problems, plan.notes = _problems(plan, cfg, lcfg, engine, max_batch_tokens)
    verl = getattr(getattr(cfg, "backend", None), "kind", "local") == "verl"
    if gpu and (gpus is not None or nodes is not None or engine == "ray" or verl):
        plan.layout = layout_plan(plan, cfg, make_layout(cfg, gpus, nodes), works)
        # with verl the optimizer state lives in verl's job, not in this process's host memory
        plan.problems = plan.layout.problems + [p for p in plan.problems if p.startswith("host memory") and not verl]
        return plan
    if plan.problems and suggest:
        fix = combined_fix(plan.problems)
        if fix:
            sections = {sec: getattr(cfg, sec).model_copy(update={k.split(".")[1]: v for k, v in fix.items()
                                                                   if k.startswith(sec + ".")})
                        for sec in {k.split(".")[0] for k in fix}}
            again = make_plan(cfg.model_copy(update=sections), device, shape, model_label, toy, suggest=False)
            if again.fits:
                plan.notes.append("every phase fits with: " + " ".join(f"{k}={v}" for k, v in fix.items()))
    return plan


def combined_fix(problems: list[str]) -> dict[str, int]:
    """The smallest value of each numeric setting the problems name first in their advice."""
    out: dict[str, int] = {}
    for p in problems:
        for part in p.split("; ")[1:]:
            head = part.split(": change ", 1)[-1].split(" or ")[0]
            for field_ in ("engine.max_batch", "learner.max_tokens_per_micro_batch"):
                if head.startswith(field_ + "="):
                    v = int(head.split("=")[1].split()[0])
                    out[field_] = min(v, out.get(field_, v))
    return out


# --------------------------------------------------------------------------- advice
def _fits_learner(plan: Plan, lcfg: LearnerConfig, train: Train, resident_other: float, **update: Any) -> bool:
    """Would the learner step of ``train`` fit with ``update`` applied to the learner config?"""
    rm = role_memory(train.role, plan.shape, lcfg.model_copy(update=update), plan.device, plan.dtype_bytes, train, None)
    return resident_other + rm.weights + rm.state + rm.learner_transient <= plan.limit


def _budget_that_fits(plan: Plan, lcfg: LearnerConfig, train: Train, resident_other: float,
                      **update: Any) -> int | None:
    """The largest ``max_tokens_per_micro_batch`` (a multiple of 1024, at least one capped row)
    with which the learner step of ``train`` fits (with ``update`` applied too), or None."""
    row = train.prompt + train.max_new
    best = None
    for k in range(1, 257):
        budget = max(row, 1024 * k)
        if not _fits_learner(plan, lcfg, train, resident_other, max_tokens_per_micro_batch=budget,
                             micro_batch_size=max(lcfg.micro_batch_size, 4096), **update):
            break
        best = budget
    return best


def _learner_fixes(plan: Plan, lcfg: LearnerConfig, tr: Train, resident: float) -> list[str]:
    """Settings with which the learner step of ``tr`` fits, cheapest first."""
    rm = role_memory(tr.role, plan.shape, lcfg, plan.device, plan.dtype_bytes, tr, None)
    other = resident - rm.weights - rm.state
    fixes: list[str] = []
    # the memory switches that are off, each alone, then all of them with the largest budget that fits
    switches = {k: v for k, v, off in (("gradient_checkpointing", True, not rm.checkpointing),
                                       ("logprob_chunk_tokens", 1024, not rm.chunk)) if off}
    for k, v in switches.items():
        if _fits_learner(plan, lcfg, tr, other, **{k: v}):
            fixes.append(f"learner.{k}={str(v).lower()}")
    budget = _budget_that_fits(plan, lcfg, tr, other)
    if budget is not None and (lcfg.max_tokens_per_micro_batch is None or budget < lcfg.max_tokens_per_micro_batch):
        fixes.append(f"learner.max_tokens_per_micro_batch={budget}")
    if switches:
        b2 = _budget_that_fits(plan, lcfg, tr, other, **switches)
        if b2 is not None and b2 != budget:
            fixes.append(" with ".join(f"learner.{k}={str(v).lower()}" for k, v in switches.items())
                         + f" with learner.max_tokens_per_micro_batch={b2}")
    if not fixes:
        least = dict(gradient_checkpointing=True, logprob_chunk_tokens=1024, max_tokens_per_micro_batch=tr.prompt + tr.max_new)
        if not lcfg.offload_optimizer and not lcfg.lora and plan.device.kind == "cuda" and _fits_learner(
                plan, lcfg, tr, other, offload_optimizer=True, **least):
            fixes.append("learner.offload_optimizer=true (with checkpointing, chunked log-probs, one row per micro-batch)")
        if not lcfg.lora and _fits_learner(plan, lcfg, tr, other, lora=True, **least):
            fixes.append("learner.lora=true (configs/real/lora_8b.yaml)")
    if not fixes:
        fixes.append(f"a smaller model or a lower {tr.role if tr.role != 'solver' else 'sampling'}.max_new_tokens: even "
                     "one capped row per micro-batch with LoRA does not fit")
    return fixes


def _sampler_fixes(plan: Plan, cfg: Any, lcfg: LearnerConfig, engine: str, g: Gen, resident: float) -> list[str]:
    """Settings with which the sampler call of ``g`` fits on top of ``resident``."""
    if engine == "vllm":
        return ["engine.gpu_memory_utilization lower, or engine.sleep_mode=true"]
    per_row = sampler_call_bytes(plan.shape, plan.dtype_bytes, 1, g.prompt, g.max_new)
    room = plan.limit - resident - (plan.shape.n_params * plan.dtype_bytes if g.role.startswith("frozen") else 0)
    rows = int(room // per_row) if per_row > 0 else 0
    fixes = []
    if rows >= 1:
        fixes.append(f"engine.max_batch={rows}" + (f" (or engine.max_batch_tokens={rows * (g.prompt + g.max_new)})"
                                                  if hasattr(cfg.engine, "max_batch_tokens") else ""))
    if rows < 16:  # a handful of rows per call wastes the GPU: free resident memory instead
        fixes.append("learner.lora=true or learner.offload_optimizer=true (less resident state, room for the KV cache)")
    return fixes


def _problems(plan: Plan, cfg: Any, lcfg: LearnerConfig, engine: str, max_batch_tokens: int | None) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    gib = lambda x: f"{x / GiB:.1f} GiB"  # noqa: E731
    limit = plan.limit
    for e in plan.phases:
        if e.peak <= limit:
            continue
        w = e.work
        head = (f"phase {w.name}: peak {gib(e.peak)} > {gib(limit)} ({1 - SAFETY_MARGIN:.0%} of "
                f"{plan.device.memory_gib.value:g} GiB on {plan.device.name}) with {gib(e.resident)} resident")
        parts = []
        for size, what, g in sorted(e.parts, key=lambda x: -x[0]):
            if e.resident + size <= limit:
                continue
            if g is None and w.train is not None:
                fixes = _learner_fixes(plan, lcfg, w.train, e.resident)
            elif g is not None:
                fixes = _sampler_fixes(plan, cfg, lcfg, engine, g, e.resident)
            else:  # pragma: no cover - every part is a learner step or a generation
                fixes = []
            parts.append(f"{what} needs {gib(size)}: change " + " or ".join(fixes))
        if not parts:
            parts.append("the resident weights and state alone are too large: change learner.lora=true or "
                         "learner.offload_optimizer=true")
        problems.append(head + "; " + "; ".join(parts))
    host_cap = plan.device.host_memory_gib.value * GiB
    if plan.device.kind == "cuda" and plan.host_bytes > 0.9 * host_cap:
        problems.append(f"host memory: offloaded state and parked weights need {gib(plan.host_bytes)} > 90% of "
                        f"{plan.device.host_memory_gib.value:g} GiB; change learner.lora=true or learner.offload_when_idle=false")
    extra = [f for f in ("diagnoser.model_path", "buffer.judge_model_path")
             if getattr(getattr(cfg, f.split(".")[0], None), f.split(".")[1], None)]
    if extra:
        notes.append(f"{', '.join(extra)}: that model's weights and KV cache are not counted")
    if plan.shape.model_type not in ("llama", "qwen2", "qwen3", "mistral", "smollm3", "?"):
        notes.append(f"model_type {plan.shape.model_type!r}: estimated as a dense Llama-style decoder")
    for name, rm in plan.roles.items():
        if rm.micro_batch_rows and lcfg.max_tokens_per_micro_batch is not None:
            train = next(e.work.train for e in plan.phases if e.work.train is not None and e.work.train.role == name)
            if train.prompt + train.max_new > lcfg.max_tokens_per_micro_batch:
                notes.append(f"{name}: a capped row ({train.prompt + train.max_new} tokens) exceeds "
                             f"learner.max_tokens_per_micro_batch={lcfg.max_tokens_per_micro_batch}; such rows get a "
                             "micro-batch of their own (counted)")
    return problems, notes


# --------------------------------------------------------------------------- multi-GPU layouts (issue 14)
RAY_CALL_OVERHEAD_S = Rate(0.15, True, "issue 14's measurement: a Ray pool sample of 32 prompts x 8 over 2 CPU actors "
                           "(toy model) took 0.1-0.2 s in all; charged per sampler call as the pool's overhead (an "
                           "upper bound: it includes the sampling)")
VERL_PHASE_OVERHEAD_S = Rate(300.0, False, "assumed: one main_ppo run per phase (Ray job start, model load, vLLM "
                             "start-up, checkpoint save and merge to an HF folder)")
VERL_STATE_BYTES = {"params": 4, "grads": 4, "optimizer": 8}
"""verl's FSDP actor per trainable parameter, sharded over the job's GPUs: fp32 parameters (verl
loads the actor in fp32 and computes in bf16 under FSDP mixed precision), fp32 gradients, AdamW's
fp32 m and v."""


@dataclass(frozen=True)
class Layout:
    """The GPUs a run spreads over and how the recipe uses them.

    GPU 0 of the head node belongs to the coevolve process (its roles' weights, the local learner).
    ``engine=ray`` actors take ``actor_tp`` GPUs each; Ray does not know the coevolve process uses
    GPU 0, so one actor shares it (the default pool has one actor per GPU group Ray sees).
    ``backend=verl`` runs each GRPO phase as one job over ``verl_gpus`` GPUs (FSDP over all of
    them, a colocated rollout engine of ``verl_tp`` GPUs)."""

    nodes: int
    gpus_per_node: int
    engine: str  # engine.kind
    actor_engine: str = "hf"
    actors: int = 0  # Ray rollout actors (0 unless engine=ray)
    actor_tp: int = 1
    actor_util: float = 0.3  # vllm actors: engine.gpu_memory_utilization
    actor_sleep: bool = True  # vllm actors release their GPU memory between calls (engine.sleep_mode)
    backend: str = "local"
    verl_gpus: int = 0  # backend.verl.nnodes x n_gpus_per_node (0 unless backend=verl)
    verl_tp: int = 1
    verl_util: float = 0.6
    # the pool and verl's job place their GPUs in the same Ray cluster; no conflict, because the pool
    # releases its actors and placement group before every verl phase (engine.ray.release)
    shared_cluster: bool = False

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def actor_on_gpu0(self) -> bool:
        """Does an actor share GPU 0 with the coevolve process? Always, with a pool: Ray does not
        know this process uses GPU 0 and hands out GPU ids from 0 up (hide GPUs from the whole
        run with CUDA_VISIBLE_DEVICES, not with fewer actors)."""
        return self.actors > 0

    def describe(self) -> str:
        parts = [f"{self.nodes} node{'s' if self.nodes > 1 else ''} x {self.gpus_per_node} GPU"
                 f"{'s' if self.gpus_per_node > 1 else ''} ({self.gpus} in all)"]
        if self.actors:
            util = f", each engine at gpu_memory_utilization={self.actor_util:g}" if self.actor_engine == "vllm" else ""
            parts.append(f"engine=ray: {self.actors} {self.actor_engine} actor{'s' if self.actors > 1 else ''} x TP "
                         f"{self.actor_tp}{util} (one shares GPU 0)")
        else:
            parts.append(f"engine={self.engine} in the coevolve process on GPU 0")
        if self.verl_gpus:
            parts.append(f"backend=verl: GRPO phases as one job, FSDP over {self.verl_gpus} GPUs, rollout engines of TP "
                         f"{self.verl_tp} at gpu_memory_utilization={self.verl_util:g}")
        else:
            parts.append("backend=local: the learner on GPU 0")
        return "; ".join(parts)


def make_layout(cfg: Any, gpus: int | None = None, nodes: int | None = None) -> Layout:
    """The layout of ``cfg`` on ``nodes`` x ``gpus`` GPUs (default: ``backend.verl``'s job size
    with ``backend=verl``, else one GPU). Raises ``ConfigError`` naming the field (or flag) when
    the settings cannot be placed: a count below 1, a tensor-parallel size that does not divide
    a node's GPUs, more actor or verl GPUs than the layout has."""
    ray = getattr(cfg.engine, "ray", None)
    engine = str(getattr(cfg.engine, "kind", "hf"))
    bk = getattr(cfg, "backend", None)
    verl = bk is not None and bk.kind == "verl"
    v = bk.verl if verl else None
    g = gpus if gpus is not None else (v.n_gpus_per_node if v is not None else 1)
    n = nodes if nodes is not None else (v.nnodes if v is not None else 1)
    if g < 1:
        raise ConfigError(f"--gpus {g}: GPUs per node must be at least 1")
    if n < 1:
        raise ConfigError(f"--nodes {n}: nodes must be at least 1")
    lay = dict(nodes=n, gpus_per_node=g, engine=engine)
    if engine == "ray" and ray is not None:
        tp = ray.tensor_parallel_size
        if ray.actor_engine == "hf" and tp > 1:
            raise ConfigError(f"engine.ray.tensor_parallel_size={tp}: hf actors run on one GPU each; set "
                              "engine.ray.actor_engine=vllm or engine.ray.tensor_parallel_size=1")
        if g % tp:
            raise ConfigError(f"engine.ray.tensor_parallel_size={tp} does not divide the {g} GPUs per node (--gpus): "
                              "a tensor-parallel group stays on one node")
        # as coevolve.engine.ray does: one actor per tensor-parallel group of every GPU Ray sees
        actors = ray.num_actors if ray.num_actors is not None else max(1, n * g // tp)
        if actors * tp > n * g:
            raise ConfigError(f"engine.ray.num_actors={actors} x engine.ray.tensor_parallel_size={tp} = {actors * tp} "
                              f"GPUs > the layout's {n * g} (--nodes {n} x --gpus {g})")
        lay.update(actor_engine=ray.actor_engine, actors=actors, actor_tp=tp,
                   actor_util=float(cfg.engine.gpu_memory_utilization), actor_sleep=bool(cfg.engine.sleep_mode))
    if v is not None:
        if v.n_gpus_per_node % v.tensor_parallel_size:
            raise ConfigError(f"backend.verl.tensor_parallel_size={v.tensor_parallel_size} does not divide "
                              f"backend.verl.n_gpus_per_node={v.n_gpus_per_node}")
        if v.nnodes > n or v.n_gpus_per_node > g:
            raise ConfigError(f"backend.verl.nnodes={v.nnodes} x backend.verl.n_gpus_per_node={v.n_gpus_per_node} does "
                              f"not fit the layout's --nodes {n} x --gpus {g}")
        # one Ray cluster when the pool joins one (`ray start`) and verl's job joins it too, or runs on
        # several nodes (which needs `ray start`); a local Ray of this process and verl's own are apart
        shared = engine == "ray" and ray is not None and ray.address is not None and (
            v.ray_address is not None or v.nnodes > 1)
        lay.update(backend="verl", verl_gpus=v.nnodes * v.n_gpus_per_node, verl_tp=v.tensor_parallel_size,
                   verl_util=float(v.gpu_memory_utilization), shared_cluster=shared)
    return Layout(**lay)


def _tp_device(device: Device, tp: int) -> Device:
    """``device`` with ``tp`` GPUs' bandwidth and matmul rate (a tensor-parallel engine; assumed linear)."""
    if tp == 1:
        return device
    scale = lambda r: Rate(r.value * tp, False, f"{tp} x ({r.source}); linear TP scaling assumed")  # noqa: E731
    return Device(f"{device.name} x{tp}", device.kind, device.memory_gib, device.host_memory_gib,
                  scale(device.matmul_tflops), device.train_mfu, scale(device.mem_gbps), device.hf_step_ms_per_layer,
                  device.vllm_bw_efficiency)


@dataclass(frozen=True)
class VerlMemory:
    """Per-GPU bytes of a verl job: the FSDP shards (params, grads, optimizer state, a bf16
    reference model when KL is on), the gathered bf16 FSDP units, a micro-batch's activations and
    logits, and the colocated rollout engine's share. Training and rollout alternate: vLLM
    sleeps (weights offloaded, KV cache freed) while the actor trains, and gradients are freed
    while vLLM generates."""

    params: float
    grads: float
    optimizer: float
    ref: float
    gathered: float
    activations: float
    rollout: float

    @property
    def train_peak(self) -> float:
        return self.params + self.grads + self.optimizer + self.ref + self.gathered + self.activations

    @property
    def rollout_peak(self) -> float:
        return self.params + self.optimizer + self.ref + self.rollout

    @property
    def peak(self) -> float:
        return max(self.train_peak, self.rollout_peak)


def verl_memory(shape: ModelShape, lcfg: LearnerConfig, device: Device, b: int, train: Train, world: int,
                util: float) -> VerlMemory:
    """Per-GPU bytes of one verl GRPO job over ``world`` GPUs (``VerlMemory``): sharded state =
    total / world; activations and logits as the local learner's for one micro-batch (verl's
    dynamic batch size takes ``learner.max_tokens_per_micro_batch`` tokens per GPU); the rollout
    engine takes ``util`` of the GPU."""
    N = shape.n_params
    trainable = shape.lora_params(lcfg.lora_r, lcfg.lora_target_modules) if lcfg.lora else N
    frozen = (N * b) if lcfg.lora else 0.0  # LoRA: the base stays bf16 and frozen, shards of it
    params = (frozen + trainable * VERL_STATE_BYTES["params"]) / world
    grads = trainable * VERL_STATE_BYTES["grads"] / world
    optimizer = trainable * VERL_STATE_BYTES["optimizer"] / world
    ref = N * b / world if (lcfg.beta_kl > 0 and not lcfg.lora) else 0.0
    gathered = 2 * max(shape.layer_params, shape.vocab * shape.hidden) * b  # one unit in use, the next prefetched
    rm = role_memory(train.role, shape, lcfg, device, b, train, None)
    return VerlMemory(params, grads, optimizer, ref, gathered, rm.activations + rm.logits,
                      util * device.memory_gib.value * GiB)


@dataclass
class LayoutPhase:
    """One phase on a layout: per-GPU peaks by kind of GPU, its peak, and its wall time."""

    name: str
    gpus: dict[str, float]  # "GPU 0" / "actor GPU" / "verl GPU" -> peak bytes
    gen_seconds: float
    train_seconds: float
    overhead_seconds: float

    @property
    def peak(self) -> float:
        return max(self.gpus.values(), default=0.0)

    @property
    def where(self) -> str:
        return max(self.gpus, key=lambda k: self.gpus[k]) if self.gpus else "-"


@dataclass
class LayoutPlan:
    layout: Layout
    phases: list[LayoutPhase]
    verl: VerlMemory | None
    problems: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def _actor_chunk(g: Gen, actors: int, max_batch: int) -> int:
    """Rows of one actor's generate call: its share of the sampler call, chunked by engine.max_batch."""
    return max(1, min(max_batch, math.ceil((g.full_call or g.call_rows) / actors)))


def _actor_bytes(lay: Layout, shape: ModelShape, b: int, capacity: float, gens: tuple[Gen, ...],
                 max_batch_tokens: int | None, slots: int, max_batch: int) -> float:
    """Peak bytes of one actor GPU while the phase samples. The pool is one per process and every
    sampler (live solver, writer, frozen scorer) is a slot held by every actor (coevolve.engine.ray):
    hf actors keep every slot's weights on the GPU and add the KV cache of their share of a call;
    a vllm slot is an engine taking ``engine.gpu_memory_utilization`` of the GPU, the idle ones
    asleep (``engine.sleep_mode``) or, without sleep, all awake."""
    if not gens:
        return _actor_idle_bytes(lay, shape, b, capacity, slots)
    if lay.actor_engine == "vllm":
        return (1 if lay.actor_sleep else slots) * lay.actor_util * capacity
    call = max(sampler_call_bytes(shape, b, _kv_rows(_actor_chunk(g, lay.actors, max_batch), g.prompt, g.max_new,
                                                     max_batch_tokens), g.prompt, g.max_new) for g in gens)
    return slots * shape.n_params * b + call


def _actor_idle_bytes(lay: Layout, shape: ModelShape, b: int, capacity: float, slots: int) -> float:
    """An actor GPU between calls: hf actors keep every slot's weights, sleeping vllm engines nothing."""
    if lay.actors == 0:
        return 0.0
    if lay.actor_engine == "vllm":
        return 0.0 if lay.actor_sleep else slots * lay.actor_util * capacity
    return slots * shape.n_params * b


def _vllm_rows(shape: ModelShape, b: int, budget: float, tp: int, ctx: int, max_seqs: int) -> int:
    """Sequences one vLLM engine of ``tp`` GPUs keeps in flight: what its KV cache holds (its
    ``budget`` per GPU less the weights' share) at ``ctx`` tokens each, at most ``max_seqs``."""
    kv = max(0.0, budget - shape.n_params * b / tp) * tp
    return max(1, min(max_seqs, int(kv // max(1, shape.kv_bytes_per_token(b) * ctx))))


def layout_plan(plan: "Plan", cfg: Any, lay: Layout, works: list[PhaseWork]) -> LayoutPlan:
    """The per-GPU peak and wall time of every phase of ``plan`` on ``lay``.

    GPU 0 holds what the single-GPU plan keeps resident (every role's weights, the training role's
    state) and, with the local backend, the learner step; with ``engine=ray`` the sampler calls
    move to the actors (``_actor_bytes``), else they stay on GPU 0 as in the single-GPU plan. A GRPO
    phase with ``backend=verl`` runs on the verl job's GPUs (``verl_memory``; GPU 0 is one of them
    and keeps the coevolve process's weights, the actors keep their idle share). Times: a
    phase's rollouts split evenly over the actors (or verl's rollout engines), a verl learner step
    over its data-parallel GPUs; per-call and per-phase overheads from the rates."""
    shape, device, b = plan.shape, plan.device, plan.dtype_bytes
    lcfg: LearnerConfig = cfg.learner
    cap = plan.capacity
    _, _, _, max_batch_tokens = _engine(cfg)
    on_verl_phase = lambda w: lay.verl_gpus > 0 and w.train is not None  # noqa: E731
    slots = len({g.role for w in works if not on_verl_phase(w) for g in w.gens}) if lay.actors else 0
    weights_gpu0 = sum(rm.weights for rm in plan.roles.values())
    out = LayoutPlan(lay, [], None)
    actor_dev = _tp_device(device, lay.actor_tp)
    for e, w in zip(plan.phases, works):
        on_verl = on_verl_phase(w)
        gpus: dict[str, float] = {}
        gen_s = train_s = over_s = 0.0
        actor_idle = _actor_idle_bytes(lay, shape, b, cap, slots)
        if on_verl:
            vm = verl_memory(shape, lcfg, device, b, w.train, lay.verl_gpus, lay.verl_util)
            out.verl = vm if out.verl is None or vm.peak > out.verl.peak else out.verl
            gpus["GPU 0"] = weights_gpu0 + vm.peak + (actor_idle if lay.actor_on_gpu0 else 0.0)
            if lay.verl_gpus > 1:
                gpus["verl GPU"] = vm.peak + (actor_idle if lay.actors else 0.0)
            engines = max(1, lay.verl_gpus // lay.verl_tp)
            vdev = _tp_device(device, lay.verl_tp)
            for g in w.gens:
                if g.role == "frozen solver copy":
                    continue  # answered by the solver server (backend.verl.solver_url), not in this job
                in_flight = min(math.ceil(w.train.rows_per_step / engines),
                                _vllm_rows(shape, b, lay.verl_util * cap, lay.verl_tp, g.prompt + g.max_new, 1 << 30))
                gen_s += _gen_seconds(Gen(g.role, g.what, math.ceil(g.rows / engines), in_flight, g.prompt, g.max_new),
                                      shape, vdev, b, "vllm", in_flight) * w.times
            train_s = e.train_seconds / lay.verl_gpus
            over_s = VERL_PHASE_OVERHEAD_S.value * w.times
        else:
            learner = 0.0
            if w.train is not None:
                learner = role_memory(w.train.role, shape, lcfg, device, b, w.train, None).learner_transient
            if lay.actors:
                act = _actor_bytes(lay, shape, b, cap, w.gens, max_batch_tokens, slots, cfg.engine.max_batch)
                # the learner step and the actor's calls alternate: between calls an actor keeps only
                # its idle share (hf: its weights; a sleeping vllm engine: nothing)
                gpu0 = e.resident + (max(learner + actor_idle, act) if lay.actor_on_gpu0 else learner)
                gpus["GPU 0"] = gpu0
                if lay.gpus > 1 and w.gens:
                    gpus["actor GPU"] = act
                for g in w.gens:
                    per = Gen(g.role, g.what, math.ceil(g.rows / lay.actors),
                              _actor_chunk(g, lay.actors, cfg.engine.max_batch), g.prompt, g.max_new)
                    if lay.actor_engine == "vllm":
                        kvr = min(per.call_rows, _vllm_rows(shape, b, lay.actor_util * cap, lay.actor_tp,
                                                            g.prompt + g.max_new, cfg.engine.max_batch))
                    else:
                        kvr = _kv_rows(per.call_rows, g.prompt, g.max_new, max_batch_tokens)
                    gen_s += _gen_seconds(per, shape, actor_dev, b, lay.actor_engine, kvr) * w.times
                    calls = math.ceil(g.rows / max(1, g.full_call or g.call_rows))
                    over_s += calls * RAY_CALL_OVERHEAD_S.value * w.times
            else:
                gpus["GPU 0"] = e.peak
                gen_s = e.gen_seconds
            train_s = e.train_seconds
        out.phases.append(LayoutPhase(w.name, gpus, gen_s, train_s, over_s))
    out.assumptions = _layout_assumptions(lay)
    writers = [w.name for w in works if on_verl_phase(w) and w.name in ("questioner", "challenger")]
    if writers:
        out.assumptions.append(f"(not counted) phase {', '.join(writers)}: rewards ask the frozen solver served by "
                               "`vllm serve` (backend.verl.solver_url), its weights and KV cache on a GPU outside this "
                               "layout (docs/scale.md)")
    out.problems = _layout_problems(plan, cfg, lcfg, lay, out, works)
    return out


def _layout_assumptions(lay: Layout) -> list[str]:
    a = ["(model) GPU 0 of the head node belongs to the coevolve process: every role's weights and, with "
         "backend=local, the learner; Ray gives it an actor too (ids from 0 up), verl's job uses it as well"]
    if lay.actors:
        a.append(f"(model) rollout time = one actor's share: rows split evenly over {lay.actors} actors, no straggler "
                 "or load-balancing loss; one pool, every sampler (live, frozen, writer) a slot in every actor")
        a.append(f"(measured) Ray per-call overhead {RAY_CALL_OVERHEAD_S.value:g} s: {RAY_CALL_OVERHEAD_S.source}")
        if lay.actor_tp > 1:
            a.append(f"(model) a TP-{lay.actor_tp} engine decodes {lay.actor_tp}x as fast as one GPU")
    if lay.verl_gpus:
        a.append(f"(model) verl learner step time = the single-GPU estimate / {lay.verl_gpus} (FSDP data parallel, "
                 "all-gather / reduce-scatter and cross-node traffic not counted)")
        a.append(f"(model) verl per-GPU memory: fp32 params + fp32 grads + AdamW m, v sharded / {lay.verl_gpus}, "
                 "2 gathered bf16 FSDP units, one micro-batch's activations and logits unsharded; the colocated vLLM "
                 "takes backend.verl.gpu_memory_utilization of the GPU while rolling out and sleeps while training")
        a.append(f"(assumed) {VERL_PHASE_OVERHEAD_S.value:g} s per verl phase run: {VERL_PHASE_OVERHEAD_S.source}")
    if not lay.actors and not lay.verl_gpus and lay.gpus > 1:
        a.append("(model) with engine and backend local, only GPU 0 works: set engine=ray and/or backend=verl")
    a.append("(model) memory and time figures of the single-GPU plan above (its rates table) underlie every row")
    return a


def _layout_problems(plan: "Plan", cfg: Any, lcfg: LearnerConfig, lay: Layout, lp: LayoutPlan,
                     works: list[PhaseWork]) -> list[str]:
    """Each phase whose per-GPU peak does not fit, with the fields to change for that GPU."""
    problems = []
    gib = lambda x: f"{x / GiB:.1f} GiB"  # noqa: E731
    for p, e, w in zip(lp.phases, plan.phases, works):
        for where, size in p.gpus.items():
            if size <= plan.limit:
                continue
            head = f"phase {p.name}: {where} peak {gib(size)} > {gib(plan.limit)}"
            if where == "actor GPU" or (where == "GPU 0" and lay.actor_on_gpu0 and w.train is None):
                fix = ("engine.gpu_memory_utilization lower, or more GPUs per actor (engine.ray.tensor_parallel_size)"
                       if lay.actor_engine == "vllm" else
                       "engine.max_batch_tokens lower, engine.ray.num_actors higher, or engine.ray.actor_engine=vllm")
            elif lay.verl_gpus and w.train is not None:
                fix = ("backend.verl.n_gpus_per_node / backend.verl.nnodes higher (more shards), "
                       "learner.max_tokens_per_micro_batch lower, or backend.verl.gpu_memory_utilization lower")
            elif w.train is not None:
                fix = " or ".join(_learner_fixes(plan, lcfg, w.train, e.resident)) + " or backend=verl"
            else:
                fix = " or ".join(_sampler_fixes(plan, cfg, lcfg, lay.engine, w.gens[0], e.resident)) + \
                    " or engine=ray" if w.gens else "learner.lora=true"
            problems.append(f"{head}: change {fix}")
    if lay.verl_gpus and lp.verl is not None:
        need = plan.shape.n_params * plan.dtype_bytes / lay.verl_tp
        if need >= 0.9 * lay.verl_util * plan.capacity:
            problems.append(f"backend.verl: a rollout engine's weights ({gib(need)} per GPU at TP {lay.verl_tp}) leave "
                            f"no KV cache in backend.verl.gpu_memory_utilization={lay.verl_util:g} of the GPU; raise it "
                            "or backend.verl.tensor_parallel_size")
    if lay.actors and lay.actor_engine == "vllm":
        need = plan.shape.n_params * plan.dtype_bytes / lay.actor_tp
        if need >= 0.9 * lay.actor_util * plan.capacity:
            problems.append(f"engine.ray: a vllm actor's weights ({gib(need)} per GPU at TP {lay.actor_tp}) leave no KV "
                            f"cache in engine.gpu_memory_utilization={lay.actor_util:g}; raise it or "
                            "engine.ray.tensor_parallel_size")
    return problems


def format_layout(plan: "Plan") -> str:
    """The layout section of ``format_plan``: per-GPU peak and headroom per phase, the verdict,
    wall time, and which figures are a model and which were measured."""
    lp = plan.layout
    assert lp is not None
    gib = lambda x: f"{x / GiB:6.1f}"  # noqa: E731
    kinds = [k for k in ("GPU 0", "actor GPU", "verl GPU") if any(k in p.gpus for p in lp.phases)]
    L = [f"layout: {lp.layout.describe()}",
         f"per-GPU peak per phase, GiB ({plan.device.name}, {plan.device.memory_gib.value:g} GiB per GPU; "
         f"{SAFETY_MARGIN:.0%} headroom required)"]
    L.append("  " + f"{'phase':<11}" + "".join(f"{k:>11}" for k in kinds) + f"{'peak':>8}{'headroom':>9}"
             f"{'generate':>10}{'learn':>9}{'overhead':>9}")
    tot = [0.0, 0.0, 0.0]
    for p in lp.phases:
        head = 1 - p.peak / plan.capacity
        flag = "" if p.peak <= plan.limit else "  <-- does not fit"
        L.append("  " + f"{p.name:<11}" + "".join(f"{gib(p.gpus[k]) if k in p.gpus else '-':>11}" for k in kinds)
                 + f"{gib(p.peak):>8}{head:>9.0%}{_fmt_s(p.gen_seconds):>10}{_fmt_s(p.train_seconds):>9}"
                 f"{_fmt_s(p.overhead_seconds):>9}{flag}")
        tot[0] += p.gen_seconds
        tot[1] += p.train_seconds
        tot[2] += p.overhead_seconds
    L.append(f"  {'total':<11}" + " " * (11 * len(kinds) + 17) + f"{_fmt_s(tot[0]):>10}{_fmt_s(tot[1]):>9}"
             f"{_fmt_s(tot[2]):>9}  = {_fmt_s(sum(tot))} (grading and I/O not counted)")
    if lp.verl is not None:
        v = lp.verl
        L.append(f"  verl GPU (largest GRPO phase): params {v.params / GiB:.1f} + grads {v.grads / GiB:.1f} + optimizer "
                 f"{v.optimizer / GiB:.1f} + ref {v.ref / GiB:.1f} + gathered units {v.gathered / GiB:.1f} + "
                 f"activations/logits {v.activations / GiB:.1f} = train {v.train_peak / GiB:.1f}; rollout "
                 f"{v.rollout_peak / GiB:.1f} (vLLM {v.rollout / GiB:.1f})")
    L.append("scaling assumptions:")
    L.extend(f"  - {a}" for a in lp.assumptions)
    return "\n".join(L)


# --------------------------------------------------------------------------- output
def _fmt_s(sec: float) -> str:
    if sec < 120:
        return f"{sec:.0f} s"
    if sec < 7200:
        return f"{sec / 60:.0f} min"
    return f"{sec / 3600:.1f} h"


def _fmt_n(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def format_plan(plan: Plan) -> str:
    """The plan as text: model, device, per-phase work and time, per-role memory, per-phase peak,
    verdict with the fields to change, and the rates used."""
    s, d = plan.shape, plan.device
    gib = lambda x: f"{x / GiB:6.1f}"  # noqa: E731
    L: list[str] = []
    L.append(f"plan: {plan.recipe} on {d.name} ({d.memory_gib.value:g} GiB; {SAFETY_MARGIN:.0%} headroom required)")
    L.append(f"model: {plan.model}: {s.model_type}, {s.n_params / 1e9:.3f}B params, {s.layers} layers, hidden {s.hidden}, "
             f"{s.heads}/{s.kv_heads} heads x {s.head_dim}, vocab {s.vocab}, {'tied' if s.tied else 'untied'}; "
             f"weights {'bf16' if plan.dtype_bytes == 2 else 'fp32'}")
    any_role = next(iter(plan.roles.values()))
    L.append(f"learner: {'LoRA ' + _fmt_n(any_role.trainable) + ' trainable' if any_role.trainable < s.n_params else 'full fine-tune'}, "
             f"checkpointing {'on' if any_role.checkpointing else 'off'}, log-prob chunk "
             f"{any_role.chunk or 'off (full logits)'}, largest micro-batch {any_role.micro_batch_rows} rows / "
             f"{any_role.micro_batch_tokens} tokens")
    L.append("")
    L.append("work (caps: every completion at its limit; tokens at the assumed mean of "
             f"{COMPLETION_FILL:.0%} of the cap; times from the rates below)")
    L.append(f"  {'phase':<11}{'runs':>5}{'rollouts':>10}{'gen tokens':>12}{'train tokens':>14}{'generate':>10}{'learn':>9}  what")
    tot = [0.0] * 5
    for e in plan.phases:
        w = e.work
        what = "; ".join(f"{g.role}: {g.what} ({g.max_new} max)" for g in w.gens) + (f"  [{w.note}]" if w.note else "")
        L.append(f"  {w.name:<11}{w.times:>5}{_fmt_n(w.rollouts):>10}{_fmt_n(e.gen_tokens):>12}{_fmt_n(e.train_tokens):>14}"
                 f"{_fmt_s(e.gen_seconds):>10}{_fmt_s(e.train_seconds):>9}  {what}")
        for i, v in enumerate((w.rollouts, e.gen_tokens, e.train_tokens, e.gen_seconds, e.train_seconds)):
            tot[i] += v
    L.append(f"  {'total':<11}{'':>5}{_fmt_n(tot[0]):>10}{_fmt_n(tot[1]):>12}{_fmt_n(tot[2]):>14}{_fmt_s(tot[3]):>10}"
             f"{_fmt_s(tot[4]):>9}  = {_fmt_s(tot[3] + tot[4])} (grading and I/O not counted)")
    L.append("")
    L.append("memory per role, GiB (training peak = weights + masters + optimizer + grads + max(activations + logits, "
             "optimizer-step temporaries))")
    L.append(f"  {'role':<12}{'weights':>8}{'masters':>8}{'optim':>8}{'grads':>8}{'activ':>8}{'logits':>8}{'optstep':>8}"
             f"{'train peak':>11}{'KV (call)':>10}")
    for name, rm in plan.roles.items():
        L.append(f"  {name:<12}{gib(rm.weights):>8}{gib(rm.masters):>8}{gib(rm.optimizer):>8}{gib(rm.grads):>8}"
                 f"{gib(rm.activations):>8}{gib(rm.logits):>8}{gib(rm.opt_step):>8}{gib(rm.train_peak):>11}{gib(rm.kv):>10}")
    L.append("")
    L.append("peak per phase, GiB (resident: weights of the roles on the GPU + the training role's state)"
             + ("; one GPU, the reference of the layout below" if plan.layout is not None else ""))
    L.append(f"  {'phase':<11}{'resident':>9}{'transient':>10}{'peak':>8}{'headroom':>9}  largest transient")
    for e in plan.phases:
        head = 1 - e.peak / plan.capacity
        flag = "" if e.peak <= plan.limit else "  <-- does not fit"
        L.append(f"  {e.work.name:<11}{gib(e.resident):>9}{gib(e.transient):>10}{gib(e.peak):>8}{head:>9.0%}  "
                 f"{e.transient_what}{flag}")
    if plan.host_bytes:
        L.append(f"  host memory for offloaded state / parked weights: up to {plan.host_bytes / GiB:.1f} GiB")
    L.append("")
    if plan.layout is not None:
        L.append(format_layout(plan))
        L.append("")
    if plan.fits and plan.layout is not None:
        worst_l = max(plan.layout.phases, key=lambda p: p.peak)
        L.append(f"verdict: fits on the layout (largest per-GPU peak {worst_l.peak / GiB:.1f} GiB in phase "
                 f"{worst_l.name} on {worst_l.where}, headroom {1 - worst_l.peak / plan.capacity:.0%})")
    elif plan.fits:
        worst = max(plan.phases, key=lambda e: e.peak)
        L.append(f"verdict: fits (largest peak {worst.peak / GiB:.1f} GiB in phase {worst.work.name}, "
                 f"headroom {1 - worst.peak / plan.capacity:.0%})")
    else:
        L.append("verdict: DOES NOT FIT")
        L.extend(f"  - {p}" for p in plan.problems)
    for n in plan.notes:
        L.append(f"note: {n}")
    L.append("")
    L.append(f"rates ({d.name}; * = measured, - = assumed):")
    for label, r in (("memory GiB", d.memory_gib), ("matmul TFLOP/s", d.matmul_tflops), ("train MFU", d.train_mfu),
                     ("memory GB/s", d.mem_gbps), ("HF decode ms/step/layer", d.hf_step_ms_per_layer)):
        L.append(f"  {'*' if r.measured else '-'} {label:<24}{r.value:>10.4g}  {r.source}")
    return "\n".join(L)


def preflight_problems(cfg: Any) -> list[str]:
    """What ``coevolve run`` refuses: the plan's problems on the device this run will use
    (the real GPU memory, or this machine's memory on CPU), each naming the field to change."""
    device = local_device(cfg.model.device)
    gpus = None
    ray = getattr(cfg.engine, "ray", None)
    if device.kind == "cuda" and cfg.engine.kind == "ray" and ray is not None and ray.address is None:
        import torch

        gpus = torch.cuda.device_count()  # a local Ray sees every GPU of this machine
    plan = make_plan(cfg, device, gpus=gpus)
    return [f"{p} (see `coevolve plan {cfg.recipe}`)" for p in plan.problems]


__all__ = [
    "COMPLETION_FILL", "DEVICES", "Device", "Gen", "ModelShape", "PROMPT_TOKENS", "Plan", "PhaseWork", "Rate",
    "SAFETY_MARGIN", "Train", "device_for", "format_plan", "load_model_shape", "local_device", "make_plan", "phases",
    "preflight_problems", "role_memory", "trainable_roles", "Layout", "LayoutPlan", "LayoutPhase", "VerlMemory",
    "make_layout", "layout_plan", "verl_memory", "format_layout",
]

