"""The single-GPU plan of a recipe config: per phase the resident bytes, the largest transient
and the peak (``PhaseEstimate``), wall time, the problems (each naming the field to change) and
notes (``Plan``, ``make_plan``); a multi-GPU layout is added by ``coevolve.plan.layouts``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coevolve.errors import ConfigError
from coevolve.plan.advice import combined_fix, plan_problems
from coevolve.plan.devices import GiB, Device
from coevolve.plan.layouts import layout_plan, make_layout
from coevolve.plan.memory import SAFETY_MARGIN, RoleMemory, _engine, _kv_rows, dtype_bytes, role_memory, sampler_call_bytes
from coevolve.plan.shapes import ModelShape, load_model_shape
from coevolve.plan.timing import COMPLETION_FILL, _gen_seconds, _train_seconds
from coevolve.plan.work import Gen, PhaseWork, phases, trainable_roles
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
            # the run loop parks every role but the solver that a phase does not use (``uses``)
            if not (idle_offload and name != "solver" and name not in w.uses):
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
    plan.problems, plan.notes = plan_problems(plan, cfg, lcfg, engine, max_batch_tokens)
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

