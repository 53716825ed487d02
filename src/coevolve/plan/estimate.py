"""The single-GPU plan of a recipe config: per phase the resident bytes, the largest transient
and the peak (``PhaseEstimate``), wall time, the problems (each naming the field to change) and
notes (``Plan``, ``make_plan``); a multi-GPU layout is added by ``coevolve.plan.layouts``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve.engine.servable import frozen_folders, unservable
from coevolve.errors import ConfigError
from coevolve.plan.advice import combined_fix, plan_problems
from coevolve.plan.devices import Device, GiB
from coevolve.plan.layouts import _vllm_rows, layout_plan, solver_server_problems, verl_batch_problems
from coevolve.plan.memory import (
    SAFETY_MARGIN,
    RoleMemory,
    _engine,
    _kv_rows,
    dtype_bytes,
    role_memory,
    sampler_call_bytes,
)
from coevolve.plan.placement import make_layout
from coevolve.plan.shapes import ModelShape, load_model_shape
from coevolve.plan.timing import (
    COMPLETION_FILL,
    SAVE_WRITE_GBPS,
    gen_seconds,
    mid_save_count,
    save_bytes,
    train_seconds,
)
from coevolve.plan.work import Gen, PhaseWork, phases, trainable_roles
from coevolve.recipes.declare import FROZEN_DIAGNOSER, FROZEN_SOLVER
from coevolve.rl.learner import LearnerConfig

if TYPE_CHECKING:
    from coevolve.plan.layouts import LayoutPlan


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
    layout: LayoutPlan | None = (
        None  # a multi-GPU layout (``make_plan(..., gpus=, nodes=)``); its problems are the plan's
    )
    vllm_share: float | None = (
        None  # engine.gpu_memory_utilization derived (unset, engine=vllm on a GPU): the largest that fits
    )

    @property
    def capacity(self) -> float:
        return self.device.memory_gib.value * GiB

    @property
    def limit(self) -> float:
        return self.capacity * (1 - SAFETY_MARGIN)

    @property
    def fits(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class _Sizing:
    """What every phase estimate of one plan shares: the model, the device and the settings that
    size memory and time."""

    shape: ModelShape
    device: Device
    b: int  # bytes per weight
    lcfg: LearnerConfig
    engine: str
    util: float | None
    sleep: bool
    max_batch_tokens: int | None
    hf_roles: frozenset[str] = frozenset()  # frozen roles served by hf beside a vLLM engine (``hf_frozen_roles``)

    def engine_of(self, g: Gen) -> str:
        return "hf" if g.role in self.hf_roles else self.engine

    @property
    def gpu(self) -> bool:
        return self.device.kind == "cuda"

    @property
    def idle_offload(self) -> bool:
        return bool(self.lcfg.offload_when_idle) and self.gpu  # Role.offload / ParkedSampler act on GPUs only

    @property
    def vllm_engine(self) -> float:
        """Bytes of one vLLM engine's share of the GPU (0 unless engine=vllm on a GPU)."""
        return (
            self.util * self.device.memory_gib.value * GiB
            if (self.engine == "vllm" and self.gpu and self.util)
            else 0.0
        )

    def kv_rows(self, g: Gen) -> int:
        return _kv_rows(g.call_rows, g.prompt, g.max_new, self.max_batch_tokens)

    def rows_in_flight(self, g: Gen) -> int:
        """Sequences decoding at once: a vLLM engine on a GPU holds what its KV cache (its share
        less the weights) takes at the full context, at most ``engine.max_batch``; hf's call
        chunks (``kv_rows``) otherwise."""
        if self.engine_of(g) == "vllm" and self.gpu and self.util:
            return min(
                g.call_rows, _vllm_rows(self.shape, self.b, self.vllm_engine, 1, g.prompt + g.max_new, g.call_rows)
            )
        return self.kv_rows(g)


def make_plan(
    cfg: Any,
    device: Device,
    shape: ModelShape | None = None,
    model_label: str | None = None,
    toy: bool | None = None,
    suggest: bool = True,
    gpus: int | None = None,
    nodes: int | None = None,
) -> Plan:
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
    plan, z, works = _single_gpu_plan(cfg, device, shape, model_label, toy)
    verl = getattr(getattr(cfg, "backend", None), "kind", "local") == "verl"
    # on any device: what the run's preflight refuses before any work (it runs this plan)
    batches = verl_batch_problems(cfg, works) + solver_server_problems(cfg, works, toy)
    if z.gpu and (gpus is not None or nodes is not None or z.engine == "ray" or verl):
        plan.layout = layout_plan(plan, cfg, make_layout(cfg, gpus, nodes), works)
        # with verl the optimizer state lives in verl's job, not in this process's host memory
        plan.problems = (
            batches + plan.layout.problems + [p for p in plan.problems if p.startswith("host memory") and not verl]
        )
        return plan
    plan.problems = batches + plan.problems
    if plan.problems and suggest:
        _suggest(plan, cfg, device, shape, model_label, toy)
    return plan


def _single_gpu_plan(
    cfg: Any, device: Device, shape: ModelShape, model_label: str | None, toy: bool
) -> tuple[Plan, _Sizing, list[PhaseWork]]:
    """The one-GPU plan (roles' memory, every phase's estimate, problems and notes), the sizing it
    was made with and the phases' work. With vLLM in sleep mode and no
    ``engine.gpu_memory_utilization`` the share is derived (``vllm_share_that_fits``) and the
    phases estimated again with it."""
    engine, util, sleep, max_batch_tokens = _engine(cfg)
    hf_roles, hf_notes = hf_frozen_roles(cfg, toy)
    z = _Sizing(shape, device, dtype_bytes(cfg, device), cfg.learner, engine, util, sleep, max_batch_tokens, hf_roles)
    works = phases(cfg, toy)
    roles = _role_memories(cfg, works, z)
    estimates = [_estimate(w, roles, z) for w in works]
    derived = None
    if engine == "vllm" and z.gpu and sleep and getattr(cfg.engine, "gpu_memory_utilization", None) is None:
        derived = vllm_share_that_fits(estimates, device)
        z = replace(z, util=derived)
        estimates = [_estimate(w, roles, z) for w in works]
    plan = Plan(
        cfg.recipe,
        model_label or "?",
        shape,
        device,
        z.b,
        roles,
        estimates,
        _host_bytes(roles, works, z),
        vllm_share=derived,
    )
    plan.problems, plan.notes = plan_problems(plan, cfg, z.lcfg, engine, max_batch_tokens)
    plan.notes += hf_notes + save_notes(cfg, works, shape, z.b)
    if derived is not None:
        plan.notes.append(
            f"engine.gpu_memory_utilization unset: {derived:g}, the largest share that fits beside the "
            "largest resident of a sampling phase (a run on this GPU starts its engine with it)"
        )
    return plan, z, works


def save_notes(cfg: Any, works: list[PhaseWork], shape: ModelShape, b: int) -> list[str]:
    """The cost of ``run.save_every``'s mid-phase saves: how many, the bytes of one (``save_bytes``)
    and the write time at ``SAVE_WRITE_GBPS``, for the GRPO phases the local backend trains."""
    every = int(getattr(getattr(cfg, "run", None), "save_every", 0) or 0)
    if not every or getattr(getattr(cfg, "backend", None), "kind", "local") != "local":
        return []
    size = save_bytes(shape, cfg.learner, b)
    counts = {w.name: w.times * mid_save_count(w.train.steps, every) for w in works if w.train is not None}
    n = sum(counts.values())
    seconds = n * size / (SAVE_WRITE_GBPS.value * 1e9)
    each = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    mb = lambda x: f"{x / GiB:.2f} GiB" if x >= GiB / 4 else f"{x / 1e6:.1f} MB"  # noqa: E731
    rate = SAVE_WRITE_GBPS
    return [
        f"run.save_every={every}: {n} mid-phase saves ({each or 'no phase has more steps than that'}) of "
        f"{mb(size)} each (weights, fp32 masters, AdamW state), {size / (rate.value * 1e9):.1f} s each and "
        f"{seconds:.0f} s in all at {rate.value:g} GB/s ({'measured' if rate.measured else 'assumed'}); the disk "
        "holds at most two at a time (the last and the one being written)"
    ]


VLLM_SHARE_STEP = 0.01
VLLM_SHARE_RANGE = (0.05, 0.95)


def vllm_share_that_fits(estimates: list[PhaseEstimate], device: Device) -> float:
    """The largest ``engine.gpu_memory_utilization`` with which every phase that samples fits
    (engine=vllm, sleep mode): the engine wakes beside each phase's resident bytes (weights, the
    training role's state) and sleeps through learner steps, so its share is what the device's
    limit (``SAFETY_MARGIN`` kept free) leaves above the largest such resident, rounded down to
    ``VLLM_SHARE_STEP`` within ``VLLM_SHARE_RANGE``. A larger share is a larger KV cache: more
    sequences in flight, the same answers."""
    cap = device.memory_gib.value * GiB
    resident = max((e.resident for e in estimates if e.work.gens), default=0.0)
    share = math.floor((cap * (1 - SAFETY_MARGIN) - resident) / cap / VLLM_SHARE_STEP) * VLLM_SHARE_STEP
    return round(min(VLLM_SHARE_RANGE[1], max(VLLM_SHARE_RANGE[0], share)), 2)


def _largest_call(works: list[PhaseWork], role: str, z: _Sizing) -> tuple[int, int, int] | None:
    """(rows, prompt, max_new) of ``role``'s largest sampler call (KV tokens)."""
    calls = [(z.kv_rows(g), g.prompt, g.max_new) for w in works for g in w.gens if g.role == role]
    return max(calls, key=lambda c: c[0] * (c[1] + c[2]), default=None)


def _role_memories(cfg: Any, works: list[PhaseWork], z: _Sizing) -> dict[str, RoleMemory]:
    """Each trainable role at its most demanding training phase."""
    roles: dict[str, RoleMemory] = {}
    for r in trainable_roles(cfg):
        trains = [w.train for w in works if w.train is not None and w.train.role == r] or [None]
        roles[r] = max(
            (role_memory(r, z.shape, z.lcfg, z.device, z.b, t, _largest_call(works, r, z)) for t in trains),
            key=lambda m: m.train_peak,
        )
    return roles


def _estimate(w: PhaseWork, roles: dict[str, RoleMemory], z: _Sizing) -> PhaseEstimate:
    """One phase: resident bytes (the roles the run loop keeps on the device, the training role's
    state), its transients (a learner step, each sampler call), wall time and tokens."""
    trainer = w.train.role if w.train is not None else None
    resident = 0.0
    for name, rm in roles.items():
        # the run loop parks every role but the solver that a phase does not use (``uses``)
        if not (z.idle_offload and name != "solver" and name not in w.uses):
            resident += rm.weights
        if name == trainer or not z.idle_offload:
            resident += rm.state  # idle roles' masters / optimizer state wait in CPU memory (Role.offload)
    transients: list[tuple[float, str, Gen | None]] = []
    if trainer:
        step = role_memory(trainer, z.shape, z.lcfg, z.device, z.b, w.train, None)
        transients.append(
            (
                step.learner_transient,
                f"{trainer} learner step ({step.micro_batch_rows} rows / "
                f"{step.micro_batch_tokens} tokens per micro-batch)",
                None,
            )
        )
    resident_roles: set[str] = set()
    for g in w.gens:
        extra, part = _sampling_transient(g, z)
        if g.role not in resident_roles:  # a frozen copy's weights count once however many calls it serves
            resident += extra
            resident_roles.add(g.role)
        transients.append(part)
    if z.engine == "vllm" and z.gpu and not z.sleep:
        resident += z.vllm_engine * len(roles)  # awake engines keep their share through learner steps
    transient, what, _ = max(transients, default=(0.0, "-", None), key=lambda x: x[0])
    gen_s = sum(gen_seconds(g, z.shape, z.device, z.b, z.engine_of(g), z.rows_in_flight(g)) for g in w.gens) * w.times
    train_s = 0.0
    if w.train is not None:
        ckpt = roles[w.train.role].checkpointing
        train_s = train_seconds(
            w.train, w.times, z.shape, z.lcfg, z.device, ckpt, "float32" if z.b == 4 else "bfloat16"
        )
    gen_tok = w.times * sum(g.rows * COMPLETION_FILL * g.max_new for g in w.gens)
    tr_tok = (
        0.0 if w.train is None else w.times * w.train.steps * w.train.rows_per_step * COMPLETION_FILL * w.train.max_new
    )
    return PhaseEstimate(w, resident, transient, what, transients, gen_s, train_s, gen_tok, tr_tok)


def _sampling_transient(g: Gen, z: _Sizing) -> tuple[float, tuple[float, str, Gen | None]]:
    """(resident bytes it adds, (transient bytes, what, g)) of one generation of a phase."""
    kvr = z.kv_rows(g)
    call = sampler_call_bytes(z.shape, z.b, kvr, g.prompt, g.max_new)
    label = f"{g.role} sampling ({kvr} rows x {g.prompt}+{g.max_new} tokens)"
    if z.engine_of(g) == "vllm" and z.gpu:  # (a frozen copy is a pinned host snapshot served by the role's engine)
        return 0.0, (
            0.0 if not z.sleep else z.vllm_engine,
            f"{g.role} vLLM engine (gpu_memory_utilization={z.util})",
            g,
        )
    if g.role == FROZEN_DIAGNOSER:  # on the device in the phases that sample it (PhaseParkedSampler)
        return z.shape.n_params * z.b, (call, label + (" on hf" if g.role in z.hf_roles else ""), g)
    if g.role == FROZEN_SOLVER:
        if z.idle_offload:  # ParkedSampler: the copy is on the GPU only while it samples
            return 0.0, (z.shape.n_params * z.b + call, label, g)
        return z.shape.n_params * z.b, (call, label, g)  # the copy lives through the phase
    return 0.0, (call, label, g)


def _host_bytes(roles: dict[str, RoleMemory], works: list[PhaseWork], z: _Sizing) -> float:
    """Host memory for offloaded state and parked weights (at most all of it at once)."""
    host = sum(rm.host for rm in roles.values())
    if z.idle_offload:
        host += sum(rm.masters + rm.optimizer for rm in roles.values())  # idle roles' state, at most all of it
        host += sum(rm.weights for n, rm in roles.items() if n != "solver")
        if _largest_call(works, FROZEN_SOLVER, z) is not None:
            host += z.shape.n_params * z.b
    hf_diagnoser = FROZEN_DIAGNOSER in z.hf_roles or (z.engine == "hf" and z.idle_offload)
    if z.gpu and hf_diagnoser and _largest_call(works, FROZEN_DIAGNOSER, z) is not None:
        host += z.shape.n_params * z.b  # an hf diagnoser parked between memory phases (PhaseParkedSampler)
    return host


def hf_frozen_roles(cfg: Any, toy: bool) -> tuple[frozenset[str], list[str]]:
    """The frozen rollout roles an ``engine=vllm`` run serves with hf instead (``Setup.load``: a
    model the engine cannot serve, ``engine.servable.unservable``), and notes naming every frozen
    model folder so served (a judge is not counted, as with any engine). A folder that cannot be
    read here is counted as served by hf (the larger cost)."""
    if toy or cfg.model.path is None or getattr(cfg.engine, "kind", "hf") != "vllm":
        return frozenset(), []
    roles, notes = set(), []
    for field_name, path in frozen_folders(cfg):
        if not (Path(path) / "config.json").is_file():
            why = f"{path} cannot be read here, so it is counted as if the vLLM engine could not serve it"
        else:
            diff = unservable(cfg.engine, cfg.model.path, path)
            if not diff:
                continue
            why = f"the vLLM engine built for model.path cannot serve it ({'; '.join(diff[:4])})"
        if field_name == "diagnoser.model_path":
            roles.add(FROZEN_DIAGNOSER)
            how = "counted as hf generate on the GPU during the memory phase, parked in CPU memory between them"
        else:
            how = "it runs on hf, parked in CPU memory between the phases that use it (not counted)"
        notes.append(f"{field_name}: {why}; {how}")
    return frozenset(roles), notes


def _suggest(plan: Plan, cfg: Any, device: Device, shape: ModelShape, model_label: str | None, toy: bool) -> None:
    """Try the tightest ``engine.max_batch`` / ``learner.max_tokens_per_micro_batch`` the problems
    name, together; when every phase fits with them, say so in the plan's notes."""
    fix = combined_fix(plan.problems)
    if not fix:
        return
    sections = {
        sec: getattr(cfg, sec).model_copy(
            update={k.split(".")[1]: v for k, v in fix.items() if k.startswith(sec + ".")}
        )
        for sec in {k.split(".")[0] for k in fix}
    }
    again = make_plan(cfg.model_copy(update=sections), device, shape, model_label, toy, suggest=False)
    if again.fits:
        plan.notes.append("every phase fits with: " + " ".join(f"{k}={v}" for k, v in fix.items()))
