"""Multi-GPU layouts (``coevolve plan --gpus N --nodes M``, ``engine=ray``, ``backend=verl``):
given how a run spreads over GPUs (``coevolve.plan.placement``), the per-GPU peak and wall time
of every phase on that layout, the scaling assumptions each figure rests on, and the problems of
the layout (docs/scale.md)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coevolve.plan.advice import _learner_fixes, _sampler_fixes
from coevolve.plan.devices import Device, GiB, Rate
from coevolve.plan.memory import _engine, _kv_rows, role_memory, sampler_call_bytes
from coevolve.plan.placement import Layout
from coevolve.plan.shapes import ModelShape
from coevolve.plan.timing import gen_seconds
from coevolve.plan.work import Gen, PhaseWork, Train
from coevolve.recipes.declare import FROZEN_SOLVER
from coevolve.rl.learner import LearnerConfig
from coevolve.schema import nearest_dividing, verl_micro_batch, vllm_share

if TYPE_CHECKING:
    from coevolve.plan.estimate import Plan


RAY_CALL_OVERHEAD_S = Rate(
    0.15,
    True,
    "dev/perf/bench_ray.py: a Ray pool sample of 32 prompts x 8 over 2 CPU actors "
    "(toy model) took 0.1-0.2 s in all; charged per sampler call as the pool's overhead (an "
    "upper bound: it includes the sampling)",
)
VERL_PHASE_OVERHEAD_S = Rate(
    300.0,
    False,
    "assumed: one main_ppo run per phase (Ray job start, model load, vLLM "
    "start-up, checkpoint save and merge to an HF folder)",
)
VERL_STATE_BYTES = {"params": 4, "grads": 4, "optimizer": 8}
"""verl's FSDP actor per trainable parameter, sharded over the job's GPUs: fp32 parameters (verl
loads the actor in fp32 and computes in bf16 under FSDP mixed precision), fp32 gradients, AdamW's
fp32 m and v."""


def verl_batch_problems(cfg: Any, works: list[PhaseWork]) -> list[str]:
    """``backend=verl``: every GRPO phase's rollouts per step (``prompts_per_step x group_size``)
    must divide over the job's ``nnodes x n_gpus_per_node`` GPUs (verl splits a step's batch
    evenly over its data-parallel workers and stops otherwise); each GPU's share is then cut
    into micro-batches that divide it (``verl_micro_batch``, what ``verl.overrides`` passes).
    One check for ``coevolve plan`` and the run's preflight (``make_plan``), each problem naming
    the fields and the nearest values that divide."""
    bk = getattr(cfg, "backend", None)
    if bk is None or bk.kind != "verl":
        return []
    v = bk.verl
    world = v.nnodes * v.n_gpus_per_node
    out = []
    for w in works:
        t = w.train
        if t is None or verl_micro_batch(t.rows_per_step, world, cfg.learner.micro_batch_size) is not None:
            continue
        sec = getattr(cfg, t.section)
        n, p = sec.group_size, sec.prompts_per_step
        gpus = nearest_dividing(
            v.n_gpus_per_node, lambda g, t=t: t.rows_per_step % (v.nnodes * g) == 0, max(2 * v.n_gpus_per_node, 8)
        )
        prompts = nearest_dividing(p, lambda q, n=n: (q * n) % world == 0, 2 * p + world)
        fix = [f"backend.verl.n_gpus_per_node={g}" for g in gpus] + [
            f"{t.section}.prompts_per_step={q}" for q in prompts
        ]
        out.append(
            f"phase {w.name}: {t.section}.prompts_per_step x {t.section}.group_size = {p} x {n} = "
            f"{t.rows_per_step} rollouts per step do not divide over the {world} GPUs of backend.verl.nnodes="
            f"{v.nnodes} x backend.verl.n_gpus_per_node={v.n_gpus_per_node} (verl splits each step evenly over "
            f"them); nearest that divide: {' or '.join(fix)}"
        )
    return out


def solver_server_problems(cfg: Any, works: list[PhaseWork], toy: bool) -> list[str]:
    """``backend=verl`` writer phases on a real model: who answers for the frozen solver. verl's
    reward workers are Ray actors without a GPU (a real solver loaded there would sample on the
    CPU, or not start), and a server the user started once (``solver_url``) keeps round 1's solver
    while D²Evo's reward needs each round's (π_S^{t-1}): ``backend.verl.serve_solver=true``.
    Part of the plan's problems, so `coevolve plan` and the run's preflight refuse alike."""
    bk = getattr(cfg, "backend", None)
    if bk is None or bk.kind != "verl":
        return []
    v = bk.verl
    writers = [w.train.section for w in works if w.train is not None and w.train.kind == "question"]
    if not writers:
        return []
    if v.solver_api_key_env and not v.solver_url:
        return ["backend.verl.solver_api_key_env names the key of a backend.verl.solver_url server: set solver_url too"]
    if v.solver_api_key_env and not os.environ.get(v.solver_api_key_env):
        return [
            f"backend.verl.solver_api_key_env: the environment variable {v.solver_api_key_env} is not set (or empty)"
        ]
    if v.serve_solver and v.solver_url:
        return [
            "backend.verl.solver_url and backend.verl.serve_solver=true: one frozen solver server; unset "
            "solver_url to let coevolve serve each round's solver"
        ]
    if toy or v.serve_solver:
        return []
    rounds = int(getattr(cfg, "rounds", 1))
    if v.solver_url and rounds > 1:
        return [
            f"backend.verl.solver_url with rounds={rounds}: the server keeps the solver it was started with, so "
            f"rounds 2-{rounds} of {', '.join(writers)} would be scored by round 1's solver; set "
            "backend.verl.serve_solver=true (coevolve serves each round's) and unset solver_url"
        ]
    if not v.solver_url:
        return [
            f"backend=verl with a real model: {', '.join(writers)} rewards need the frozen solver on a GPU and "
            "verl's reward workers have none; set backend.verl.serve_solver=true (and backend.verl.solver_gpus), "
            "or backend.verl.solver_url for a one-round run"
        ]
    return []


def _tp_device(device: Device, tp: int) -> Device:
    """``device`` with ``tp`` GPUs' bandwidth and matmul rate (a tensor-parallel engine; assumed linear)."""
    if tp == 1:
        return device
    scale = lambda r: Rate(r.value * tp, False, f"{tp} x ({r.source}); linear TP scaling assumed")  # noqa: E731
    return Device(
        f"{device.name} x{tp}",
        device.kind,
        device.memory_gib,
        device.host_memory_gib,
        scale(device.matmul_tflops),
        device.train_mfu,
        scale(device.mem_gbps),
        device.hf_step_ms_per_layer,
        device.vllm_bw_efficiency,
    )


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


def verl_memory(
    shape: ModelShape, lcfg: LearnerConfig, device: Device, b: int, train: Train, world: int, util: float
) -> VerlMemory:
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
    return VerlMemory(
        params, grads, optimizer, ref, gathered, rm.activations + rm.logits, util * device.memory_gib.value * GiB
    )


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


def _actor_bytes(
    lay: Layout,
    shape: ModelShape,
    b: int,
    capacity: float,
    gens: tuple[Gen, ...],
    max_batch_tokens: int | None,
    slots: int,
    max_batch: int,
) -> float:
    """Peak bytes of one actor GPU while the phase samples. The pool is one per process and every
    sampler (live solver, writer, frozen scorer) is a slot held by every actor (coevolve.engine.ray):
    hf actors keep every slot's weights on the GPU and add the KV cache of their share of a call;
    a vllm actor serves every slot as a weight version of its one engine, which takes
    ``engine.gpu_memory_utilization`` of the GPU however many slots it serves (the versions it
    does not hold wait in host memory)."""
    if not gens:
        return _actor_idle_bytes(lay, shape, b, capacity, slots)
    if lay.actor_engine == "vllm":
        return lay.actor_util * capacity
    call = max(
        sampler_call_bytes(
            shape,
            b,
            _kv_rows(_actor_chunk(g, lay.actors, max_batch), g.prompt, g.max_new, max_batch_tokens),
            g.prompt,
            g.max_new,
        )
        for g in gens
    )
    return slots * shape.n_params * b + call


def _actor_idle_bytes(lay: Layout, shape: ModelShape, b: int, capacity: float, slots: int) -> float:
    """An actor GPU between calls: hf actors keep every slot's weights; a vllm actor's one engine
    nothing while it sleeps (``engine.sleep_mode``), else its share of the GPU."""
    if lay.actors == 0:
        return 0.0
    if lay.actor_engine == "vllm":
        return 0.0 if lay.actor_sleep else lay.actor_util * capacity
    return slots * shape.n_params * b


def _vllm_rows(shape: ModelShape, b: int, budget: float, tp: int, ctx: int, max_seqs: int) -> int:
    """Sequences one vLLM engine of ``tp`` GPUs keeps in flight: what its KV cache holds (its
    ``budget`` per GPU less the weights' share) at ``ctx`` tokens each, at most ``max_seqs``."""
    kv = max(0.0, budget - shape.n_params * b / tp) * tp
    return max(1, min(max_seqs, int(kv // max(1, shape.kv_bytes_per_token(b) * ctx))))


def layout_plan(plan: Plan, cfg: Any, lay: Layout, works: list[PhaseWork]) -> LayoutPlan:
    """The per-GPU peak and wall time of every phase of ``plan`` on ``lay``.

    GPU 0 holds what the single-GPU plan keeps resident (every role's weights, the training role's
    state) and, with the local backend, the learner step; with ``engine=ray`` the sampler calls
    move to the actors (``_actor_bytes``), else they stay on GPU 0 as in the single-GPU plan. A GRPO
    phase with ``backend=verl`` runs on the verl job's GPUs (``verl_memory``; GPU 0 is one of them
    and keeps the coevolve process's weights, the actors keep their idle share). Times: a
    phase's rollouts split evenly over the actors (or verl's rollout engines), a verl learner step
    over its data-parallel GPUs; per-call and per-phase overheads from the rates."""
    on_verl_phase = lambda w: lay.verl_gpus > 0 and w.train is not None  # noqa: E731
    slots = len({g.role for w in works if not on_verl_phase(w) for g in w.gens}) if lay.actors else 0
    out = LayoutPlan(lay, [], None)
    for e, w in zip(plan.phases, works):
        if on_verl_phase(w):
            phase, vm = _verl_phase(plan, cfg, lay, e, w, slots)
            out.verl = vm if out.verl is None or vm.peak > out.verl.peak else out.verl
        else:
            phase = _local_phase(plan, cfg, lay, e, w, slots)
        out.phases.append(phase)
    out.assumptions = _layout_assumptions(lay)
    writers = [w.name for w in works if on_verl_phase(w) and w.train is not None and w.train.kind == "question"]
    if writers and cfg.backend.verl.serve_solver:
        _count_solver_server(out, cfg, lay, plan.capacity, writers)
    elif writers:
        out.assumptions.append(
            f"(not counted) phase {', '.join(writers)}: rewards ask the frozen solver served by "
            "`vllm serve` (backend.verl.solver_url), its weights and KV cache on a GPU outside this "
            "layout (docs/scale.md)"
        )
    out.problems = _layout_problems(plan, cfg, cfg.learner, lay, out, works)
    return out


def _count_solver_server(out: LayoutPlan, cfg: Any, lay: Layout, capacity: float, writers: list[str]) -> None:
    """``backend.verl.serve_solver``: the writer phases' solver server (``coevolve.verl.server``)
    takes ``engine.gpu_memory_utilization`` of a GPU while verl's job runs: a GPU of its own when
    the layout has one outside verl's job, else on top of a verl GPU (which one is not known: all
    are charged)."""
    server = vllm_share(cfg.engine) * capacity
    own = lay.gpus > lay.verl_gpus
    for p in out.phases:
        if p.name not in writers:
            continue
        if own:
            p.gpus["solver server GPU"] = server
        else:
            for k in p.gpus:
                p.gpus[k] += server
    where = (
        "a GPU outside verl's job (backend.verl.solver_gpus)"
        if own
        else "beside verl's job on one of its GPUs (every verl GPU charged)"
    )
    out.assumptions.append(
        f"(model) phase {', '.join(writers)}: the frozen solver server coevolve starts "
        f"(backend.verl.serve_solver) takes engine.gpu_memory_utilization={vllm_share(cfg.engine):g} "
        f"of {where}"
    )


def _verl_phase(plan: Plan, cfg: Any, lay: Layout, e: Any, w: PhaseWork, slots: int) -> tuple[LayoutPhase, VerlMemory]:
    """A GRPO phase run by verl's job: its per-GPU memory, rollouts over its engines, a learner
    step over its data-parallel GPUs, the job's start-up overhead."""
    shape, device, b, cap = plan.shape, plan.device, plan.dtype_bytes, plan.capacity
    assert w.train is not None
    actor_idle = _actor_idle_bytes(lay, shape, b, cap, slots)
    vm = verl_memory(shape, cfg.learner, device, b, w.train, lay.verl_gpus, lay.verl_util)
    gpus = {
        "GPU 0": sum(rm.weights for rm in plan.roles.values()) + vm.peak + (actor_idle if lay.actor_on_gpu0 else 0.0)
    }
    if lay.verl_gpus > 1:
        gpus["verl GPU"] = vm.peak + (actor_idle if lay.actors else 0.0)
    engines = max(1, lay.verl_gpus // lay.verl_tp)
    vdev = _tp_device(device, lay.verl_tp)
    gen_s = 0.0
    for g in w.gens:
        if g.role == FROZEN_SOLVER:
            continue  # answered by the solver server (backend.verl.solver_url), not in this job
        in_flight = min(
            math.ceil(w.train.rows_per_step / engines),
            _vllm_rows(shape, b, lay.verl_util * cap, lay.verl_tp, g.prompt + g.max_new, 1 << 30),
        )
        gen_s += (
            gen_seconds(
                Gen(g.role, g.what, math.ceil(g.rows / engines), in_flight, g.prompt, g.max_new),
                shape,
                vdev,
                b,
                "vllm",
                in_flight,
            )
            * w.times
        )
    return LayoutPhase(w.name, gpus, gen_s, e.train_seconds / lay.verl_gpus, VERL_PHASE_OVERHEAD_S.value * w.times), vm


def _local_phase(plan: Plan, cfg: Any, lay: Layout, e: Any, w: PhaseWork, slots: int) -> LayoutPhase:
    """A phase of the coevolve process: GPU 0 as in the single-GPU plan, its sampler calls on the
    actors when there are any (split evenly over them, a Ray overhead per call)."""
    if not lay.actors:
        return LayoutPhase(w.name, {"GPU 0": e.peak}, e.gen_seconds, e.train_seconds, 0.0)
    shape, device, b, cap = plan.shape, plan.device, plan.dtype_bytes, plan.capacity
    _, _, _, max_batch_tokens = _engine(cfg)
    learner = 0.0
    if w.train is not None:
        learner = role_memory(w.train.role, shape, cfg.learner, device, b, w.train, None).learner_transient
    act = _actor_bytes(lay, shape, b, cap, w.gens, max_batch_tokens, slots, cfg.engine.max_batch)
    # the learner step and the actor's calls alternate: between calls an actor keeps only its idle
    # share (hf: its weights; a sleeping vllm engine: nothing)
    actor_idle = _actor_idle_bytes(lay, shape, b, cap, slots)
    gpus = {"GPU 0": e.resident + (max(learner + actor_idle, act) if lay.actor_on_gpu0 else learner)}
    if lay.gpus > 1 and w.gens:
        gpus["actor GPU"] = act
    actor_dev = _tp_device(device, lay.actor_tp)
    gen_s = over_s = 0.0
    for g in w.gens:
        per = Gen(
            g.role,
            g.what,
            math.ceil(g.rows / lay.actors),
            _actor_chunk(g, lay.actors, cfg.engine.max_batch),
            g.prompt,
            g.max_new,
        )
        if lay.actor_engine == "vllm":
            kvr = min(
                per.call_rows,
                _vllm_rows(shape, b, lay.actor_util * cap, lay.actor_tp, g.prompt + g.max_new, cfg.engine.max_batch),
            )
        else:
            kvr = _kv_rows(per.call_rows, g.prompt, g.max_new, max_batch_tokens)
        gen_s += gen_seconds(per, shape, actor_dev, b, lay.actor_engine, kvr) * w.times
        over_s += math.ceil(g.rows / max(1, g.full_call or g.call_rows)) * RAY_CALL_OVERHEAD_S.value * w.times
    return LayoutPhase(w.name, gpus, gen_s, e.train_seconds, over_s)


def _layout_assumptions(lay: Layout) -> list[str]:
    a = [
        "(model) GPU 0 of the head node belongs to the coevolve process: every role's weights and, with "
        "backend=local, the learner; Ray gives it an actor too (ids from 0 up), verl's job uses it as well"
    ]
    if lay.actors:
        a.append(
            f"(model) rollout time = one actor's share: rows split evenly over {lay.actors} actors, no straggler "
            "or load-balancing loss; one pool, every sampler (live, frozen, writer) a slot in every actor"
        )
        a.append(f"(measured) Ray per-call overhead {RAY_CALL_OVERHEAD_S.value:g} s: {RAY_CALL_OVERHEAD_S.source}")
        if lay.actor_tp > 1:
            a.append(f"(model) a TP-{lay.actor_tp} engine decodes {lay.actor_tp}x as fast as one GPU")
    if lay.verl_gpus:
        a.append(
            f"(model) verl learner step time = the single-GPU estimate / {lay.verl_gpus} (FSDP data parallel, "
            "all-gather / reduce-scatter and cross-node traffic not counted)"
        )
        a.append(
            f"(model) verl per-GPU memory: fp32 params + fp32 grads + AdamW m, v sharded / {lay.verl_gpus}, "
            "2 gathered bf16 FSDP units, one micro-batch's activations and logits unsharded; the colocated vLLM "
            "takes engine.gpu_memory_utilization (unset: 0.6) of the GPU while rolling out and sleeps while training"
        )
        a.append(f"(assumed) {VERL_PHASE_OVERHEAD_S.value:g} s per verl phase run: {VERL_PHASE_OVERHEAD_S.source}")
    if not lay.actors and not lay.verl_gpus and lay.gpus > 1:
        a.append("(model) with engine and backend local, only GPU 0 works: set engine=ray and/or backend=verl")
    a.append("(model) memory and time figures of the single-GPU plan above (its rates table) underlie every row")
    return a


def _layout_problems(
    plan: Plan, cfg: Any, lcfg: LearnerConfig, lay: Layout, lp: LayoutPlan, works: list[PhaseWork]
) -> list[str]:
    """Each phase whose per-GPU peak does not fit, with the fields to change for that GPU."""
    problems = []
    gib = lambda x: f"{x / GiB:.1f} GiB"  # noqa: E731
    for p, e, w in zip(lp.phases, plan.phases, works):
        for where, size in p.gpus.items():
            if size <= plan.limit:
                continue
            head = f"phase {p.name}: {where} peak {gib(size)} > {gib(plan.limit)}"
            if where == "actor GPU" or (where == "GPU 0" and lay.actor_on_gpu0 and w.train is None):
                fix = (
                    "engine.gpu_memory_utilization lower, or more GPUs per actor (engine.tensor_parallel_size)"
                    if lay.actor_engine == "vllm"
                    else "engine.max_batch_tokens lower, engine.ray.num_actors higher, or engine.ray.actor_engine=vllm"
                )
            elif lay.verl_gpus and w.train is not None:
                fix = (
                    "backend.verl.n_gpus_per_node / backend.verl.nnodes higher (more shards), "
                    "learner.max_tokens_per_micro_batch lower, or engine.gpu_memory_utilization lower"
                )
            elif w.train is not None:
                fix = " or ".join(_learner_fixes(plan, lcfg, w.train, e.resident)) + " or backend=verl"
            else:
                fix = (
                    " or ".join(_sampler_fixes(plan, cfg, lcfg, lay.engine, w.gens[0], e.resident)) + " or engine=ray"
                    if w.gens
                    else "learner.lora=true"
                )
            problems.append(f"{head}: change {fix}")
    if lay.verl_gpus and lp.verl is not None:
        need = plan.shape.n_params * plan.dtype_bytes / lay.verl_tp
        if need >= 0.9 * lay.verl_util * plan.capacity:
            problems.append(
                f"backend.verl: a rollout engine's weights ({gib(need)} per GPU at TP {lay.verl_tp}) leave "
                f"no KV cache in engine.gpu_memory_utilization={lay.verl_util:g} of the GPU; raise it "
                "or engine.tensor_parallel_size"
            )
    if lay.actors and lay.actor_engine == "vllm":
        need = plan.shape.n_params * plan.dtype_bytes / lay.actor_tp
        if need >= 0.9 * lay.actor_util * plan.capacity:
            problems.append(
                f"engine.ray: a vllm actor's weights ({gib(need)} per GPU at TP {lay.actor_tp}) leave no KV "
                f"cache in engine.gpu_memory_utilization={lay.actor_util:g}; raise it or "
                "engine.tensor_parallel_size"
            )
    return problems
