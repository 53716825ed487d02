"""What to change when a phase does not fit: the learner settings (checkpointing, chunked
log-probs, a token budget per micro-batch, optimizer offload, LoRA) or sampler settings
(``engine.max_batch``) with which its peak fits, each checked against the memory model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coevolve.plan.devices import GiB
from coevolve.plan.memory import SAFETY_MARGIN, role_memory, sampler_call_bytes
from coevolve.plan.work import Gen, Train
from coevolve.rl.learner import LearnerConfig

if TYPE_CHECKING:
    from coevolve.plan.estimate import PhaseEstimate, Plan


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


def _fits_learner(plan: Plan, lcfg: LearnerConfig, train: Train, resident_other: float, **update: Any) -> bool:
    """Would the learner step of ``train`` fit with ``update`` applied to the learner config?"""
    rm = role_memory(train.role, plan.shape, lcfg.model_copy(update=update), plan.device, plan.dtype_bytes, train, None)
    return resident_other + rm.weights + rm.state + rm.learner_transient <= plan.limit


def _budget_that_fits(
    plan: Plan, lcfg: LearnerConfig, train: Train, resident_other: float, **update: Any
) -> int | None:
    """The largest ``max_tokens_per_micro_batch`` (a multiple of 1024, at least one capped row)
    with which the learner step of ``train`` fits (with ``update`` applied too), or None."""
    row = train.prompt + train.max_new
    best = None
    for k in range(1, 257):
        budget = max(row, 1024 * k)
        if not _fits_learner(
            plan,
            lcfg,
            train,
            resident_other,
            max_tokens_per_micro_batch=budget,
            micro_batch_size=max(lcfg.micro_batch_size, 4096),
            **update,
        ):
            break
        best = budget
    return best


def _learner_fixes(plan: Plan, lcfg: LearnerConfig, tr: Train, resident: float) -> list[str]:
    """Settings with which the learner step of ``tr`` fits, cheapest first."""
    rm = role_memory(tr.role, plan.shape, lcfg, plan.device, plan.dtype_bytes, tr, None)
    other = resident - rm.weights - rm.state
    fixes: list[str] = []
    # the memory switches that are off, each alone, then all of them with the largest budget that fits
    switches = {
        k: v
        for k, v, off in (
            ("gradient_checkpointing", True, not rm.checkpointing),
            ("logprob_chunk_tokens", 1024, not rm.chunk),
        )
        if off
    }
    for k, v in switches.items():
        if _fits_learner(plan, lcfg, tr, other, **{k: v}):
            fixes.append(f"learner.{k}={str(v).lower()}")
    budget = _budget_that_fits(plan, lcfg, tr, other)
    if budget is not None and (lcfg.max_tokens_per_micro_batch is None or budget < lcfg.max_tokens_per_micro_batch):
        fixes.append(f"learner.max_tokens_per_micro_batch={budget}")
    if switches:
        b2 = _budget_that_fits(plan, lcfg, tr, other, **switches)
        if b2 is not None and b2 != budget:
            fixes.append(
                " with ".join(f"learner.{k}={str(v).lower()}" for k, v in switches.items())
                + f" with learner.max_tokens_per_micro_batch={b2}"
            )
    if not fixes:
        least = dict(
            gradient_checkpointing=True, logprob_chunk_tokens=1024, max_tokens_per_micro_batch=tr.prompt + tr.max_new
        )
        if (
            not lcfg.offload_optimizer
            and not lcfg.lora
            and plan.device.kind == "cuda"
            and _fits_learner(plan, lcfg, tr, other, offload_optimizer=True, **least)
        ):
            fixes.append(
                "learner.offload_optimizer=true (with checkpointing, chunked log-probs, one row per micro-batch)"
            )
        if not lcfg.lora and _fits_learner(plan, lcfg, tr, other, lora=True, **least):
            fixes.append("learner.lora=true (configs/real/lora_8b.yaml)")
    if not fixes:
        fixes.append(
            f"a smaller model or a lower {tr.section}.max_new_tokens: even "
            "one capped row per micro-batch with LoRA does not fit"
        )
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
        fixes.append(
            f"engine.max_batch={rows}"
            + (
                f" (or engine.max_batch_tokens={rows * (g.prompt + g.max_new)})"
                if hasattr(cfg.engine, "max_batch_tokens")
                else ""
            )
        )
    if rows < 16:  # a handful of rows per call wastes the GPU: free resident memory instead
        fixes.append("learner.lora=true or learner.offload_optimizer=true (less resident state, room for the KV cache)")
    return fixes


def plan_problems(
    plan: Plan, cfg: Any, lcfg: LearnerConfig, engine: str, max_batch_tokens: int | None
) -> tuple[list[str], list[str]]:
    """The plan's problems (each phase over the device's limit with the fixes of its largest parts;
    host memory) and its notes (what the estimate does not count or assumes)."""
    problems = [p for e in plan.phases if (p := _phase_problem(plan, cfg, lcfg, engine, e)) is not None]
    host_cap = plan.device.host_memory_gib.value * GiB
    if plan.device.kind == "cuda" and plan.host_bytes > 0.9 * host_cap:
        problems.append(
            f"host memory: offloaded state and parked weights need {_gib(plan.host_bytes)} > 90% of "
            f"{plan.device.host_memory_gib.value:g} GiB; change learner.lora=true or learner.offload_when_idle=false"
        )
    return problems, _plan_notes(plan, cfg, lcfg)


def _gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def _phase_problem(plan: Plan, cfg: Any, lcfg: LearnerConfig, engine: str, e: PhaseEstimate) -> str | None:
    """A phase over the limit: its peak, and for each part that does not fit beside the resident
    weights (largest first) the settings that would shrink it; None when the phase fits."""
    limit = plan.limit
    if e.peak <= limit:
        return None
    w = e.work
    head = (
        f"phase {w.name}: peak {_gib(e.peak)} > {_gib(limit)} ({1 - SAFETY_MARGIN:.0%} of "
        f"{plan.device.memory_gib.value:g} GiB on {plan.device.name}) with {_gib(e.resident)} resident"
    )
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
        parts.append(f"{what} needs {_gib(size)}: change " + " or ".join(fixes))
    if not parts:
        parts.append(
            "the resident weights and state alone are too large: change learner.lora=true or "
            "learner.offload_optimizer=true"
        )
    return head + "; " + "; ".join(parts)


def _plan_notes(plan: Plan, cfg: Any, lcfg: LearnerConfig) -> list[str]:
    notes: list[str] = []
    if getattr(cfg, "recipe", None) == "diagevo" and cfg.diagnosis_model_path() is not None:
        notes.append(
            "diagnoser.model_path: the frozen diagnoser is counted at the solver's shape in the memory "
            "phase (on a GPU it waits in CPU memory between memory phases, unless the hf engine runs with "
            "learner.offload_when_idle=false)"
        )
    if getattr(getattr(cfg, "buffer", None), "judge_model_path", None):
        notes.append("buffer.judge_model_path: that model's weights and KV cache are not counted")
    if plan.shape.model_type not in ("llama", "qwen2", "qwen3", "mistral", "smollm3", "?"):
        notes.append(f"model_type {plan.shape.model_type!r}: estimated as a dense Llama-style decoder")
    for name, rm in plan.roles.items():
        if rm.micro_batch_rows and lcfg.max_tokens_per_micro_batch is not None:
            train = next(e.work.train for e in plan.phases if e.work.train is not None and e.work.train.role == name)
            if train.prompt + train.max_new > lcfg.max_tokens_per_micro_batch:
                notes.append(
                    f"{name}: a capped row ({train.prompt + train.max_new} tokens) exceeds "
                    f"learner.max_tokens_per_micro_batch={lcfg.max_tokens_per_micro_batch}; such rows get a "
                    "micro-batch of their own (counted)"
                )
    return notes
