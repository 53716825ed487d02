"""Ray actor pool of rollout engines (``engine.kind=ray``): every sampler call is split over a
pool of Ray actors, each holding an ``hf`` or ``vllm`` sampler built by the one factory
(``make_sampler`` inside the actor), one actor per GPU or tensor-parallel group.

Design decisions (why, not what):

* **Per-prompt seeds.** A pool only reproduces in-process sampling when each prompt's draws
  depend on that prompt alone: measured on the toy model, one seed per batch matched 0 of 32
  prompts, one seed per prompt 32 of 32. The pool therefore always samples with
  ``seed_scope=prompt`` (``prompt_seeds`` of the whole call, computed here and sent with each
  actor's share), and an in-process ``HFSampler(seed_scope="prompt")`` gives the same token ids.
* **One pool per run, one slot per weight version.** The live solver, the live writer, a
  frozen scorer, a judge: each sampler is a *slot* (a model held by every actor) of the one pool
  the run's ``coevolve.engine.Engine`` owns (started at its first sampler, closed with the run),
  not a pool of its own. Actors are processes (~0.45 GB each before any model on the toy), so a
  frozen scorer costs one more copy of the weights in every actor, not more actors; a slot is
  dropped when its sampler is closed or collected. A sampler built outside a run
  (``make_sampler``) owns a pool of its own, closed with it.
* **Weights.** A slot from a live module starts from its config, tokenizer and a CPU state dict
  put once in Ray's object store (no shared filesystem needed); each actor builds the module on
  the meta device from them (``module_from_state``: no random initialisation first).
  ``sync_weights`` either puts the new state dict once (``weight_sync=broadcast``) or saves it
  as one safetensors file (``path``: needs a filesystem all nodes see; in a run, under the run
  folder's ``engine/``, removed with the run's engine), and every actor loads it
  into the module and sampler the slot already has: a sync never rebuilds a sampler, so a vllm
  actor keeps its engine and gets the new weights as a version pushed at its next call.
  ``load_sampler`` slots load the folder by path.
* **One engine per actor.** A vllm actor's slots are weight versions of the one vLLM engine of
  its process (``coevolve.engine.vllm``: every in-process sampler of one model shape shares an
  engine, and a slot it cannot serve is refused when added, naming the difference), so a frozen
  scorer or a judge next to the live slot adds a host copy of its weights, not a second engine
  and KV cache on the GPU.
* **Faults.** An actor that dies (``RayActorError``) is recreated by us, not by Ray's
  ``max_restarts``: Ray would re-run the constructor only, while we must also bring back every
  slot at its current weights. Then its share of the call is sent again; with per-prompt seeds
  the result equals a call without the failure. After ``engine.ray.max_restarts`` recreations of
  one actor the call raises ``SamplerError`` naming the actor and the cause.
* **Lifecycle.** A Ray started by a pool (``address=None``) is shut down when that pool is
  closed (with its run, or at the latest when the process ends); a cluster joined by address is
  left running. No ports or
  device ids are chosen here: Ray picks free ports, placement groups pick the GPUs. A Ray started
  by a pool listens on 127.0.0.1 only (``_loopback_only``); a cluster is joined by its address.

Ray is imported lazily: the default ``hf`` lane never imports it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import itertools
import os
import sys
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.engine.base import SamplerError, prompt_seeds, resolve_seed_scope, unwrap_peft, validate_params
from coevolve.engine.hf import load_tokenizer
from coevolve.engine.weights import host_snapshot, module_from_state
from coevolve.errors import ConfigError
from coevolve.types import Completion, SamplingParams

INSTALL_HINT = "install it with pip install 'coevolve[ray]' (Ray 2.60, docs/engines.md)"
PLACEMENT_TIMEOUT_S = 300.0
"""How long to wait for the pool's placement group before reporting that the cluster lacks the
resources (a request Ray cannot meet otherwise waits forever)."""
LOCAL_PLACEMENT_TIMEOUT_S = 30.0
"""The same for a Ray started here, whose resources are fixed (only slow actor starts wait)."""


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def require_ray(field_name: str = "engine.kind") -> None:
    if not ray_available():
        raise ConfigError(f"{field_name}=ray needs the ray package, which is not installed; {INSTALL_HINT}")


def tensor_parallel_refusal(engine: Any) -> str | None:
    """Why ``engine.tensor_parallel_size`` > 1 cannot run in a Ray actor, or None. Each actor's
    engine is built in the actor's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the
    ``uni`` executor of ``engine.vllm``), which drives exactly one GPU: a TP-k bundle would hold
    k GPUs and use one. Refused rather than run at 1/k of the speed the plan would assume."""
    tp = int(getattr(engine, "tensor_parallel_size", 1))
    ray = getattr(engine, "ray", None)
    if getattr(engine, "kind", None) != "ray" or tp <= 1 or ray is None:
        return None
    if ray.actor_engine == "hf":
        return (
            f"engine.tensor_parallel_size={tp}: hf actors run on one GPU each; set "
            "engine.ray.actor_engine=vllm or engine.tensor_parallel_size=1"
        )
    return (
        f"engine.tensor_parallel_size={tp} with engine.ray.actor_engine=vllm: each actor runs vLLM's in-process "
        "single-GPU executor and cannot shard a model over its GPUs; set engine.tensor_parallel_size=1 (one "
        "actor per GPU) or, for a model that needs several GPUs, backend=verl (its rollout engines shard)"
    )


# --------------------------------------------------------------------------------------------
# the actor (runs in a Ray worker process)


def _state_dict(state: Any) -> dict[str, Any]:
    """A slot's weights as a state dict: ``state`` itself, or read from the safetensors file it
    names (``weight_sync=path``)."""
    if isinstance(state, (str, os.PathLike)):
        from safetensors.torch import load_file

        return load_file(str(state))
    return state


class EngineActor:
    """One engine process of the pool: a sampler per slot, all built by ``make_sampler`` with
    ``seed_scope=prompt``. Wrapped by ``ray.remote`` in ``RayPool``; plain methods so it can also
    be driven in-process by tests."""

    def __init__(self, engine: Any, threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, int(threads)))
        self.engine = engine
        self.samplers: dict[int, Any] = {}
        self.models: dict[int, Any] = {}  # slot -> the module a weight sync loads into (not for folder slots)
        self.builds: dict[int, int] = {}
        self.fault = False

    def pid(self) -> int:
        return os.getpid()

    def add(self, slot: int, folder: str | None, device: str, dtype: str, blob: Any, state: Any) -> None:
        """Build slot ``slot``: from ``blob`` (config, generation config, tokenizer) and its
        weights ``state`` (a state dict of a live or frozen module of the driver, or the path of
        the safetensors file a path sync wrote), or by path from the HF ``folder``
        (``load_sampler``: a vllm actor engine then reads the folder itself). The module is
        built on the meta device and takes ``state``'s tensors (``module_from_state``): no
        random initialisation of weights that are overwritten at once."""
        from coevolve.engine import (  # lazy: a test monkeypatches coevolve.engine.load_sampler
            load_sampler,
            make_sampler,
            resolve_device,
            resolve_dtype,
        )

        self.drop(slot)
        self.builds[slot] = self.builds.get(slot, 0) + 1
        if blob is None:
            self.samplers[slot] = load_sampler(self.engine, str(folder), device=device, dtype=dtype)
            return
        dev = resolve_device(device)
        model = module_from_state(blob.config, _state_dict(state), resolve_dtype(dtype, dev))
        if blob.generation_config is not None:
            model.generation_config = blob.generation_config
        model.to(dev)
        for p in model.parameters():
            p.requires_grad_(False)
        self.samplers[slot] = make_sampler(self.engine, model, blob.tokenizer)
        if self.engine.kind == "vllm":
            # the engine holds the weights on the GPU; the module only feeds later pushes, so it
            # waits in host memory (one host copy per slot, no second GPU copy)
            model.to("cpu")
        self.models[slot] = model

    def load_state(self, slot: int, state: Any) -> None:
        """A weight update of ``slot`` in place, into the module and sampler it already has (a
        vllm actor's engine gets the new version pushed at its next call; nothing is rebuilt):
        ``state`` is the object store's state dict (``weight_sync=broadcast``) or the path of the
        safetensors file the driver wrote (``path``)."""
        model = self.models[slot]
        model.load_state_dict(_state_dict(state))
        self.samplers[slot].sync_weights(model)

    def build_counts(self) -> dict[int, int]:
        """How many times each slot was built in this actor (a weight sync builds nothing)."""
        return dict(self.builds)

    def drop(self, slot: int) -> None:
        sampler = self.samplers.pop(slot, None)
        self.models.pop(slot, None)
        if sampler is not None and hasattr(sampler, "close"):
            sampler.close()
        import gc

        gc.collect()

    def arm_fault(self) -> None:
        """Test hook: the next ``sample`` call kills this process mid-call."""
        self.fault = True

    def sample(
        self, slot: int, prompts: list[str], n: int, params: SamplingParams, seeds: list[int | None]
    ) -> list[list[Completion]]:
        if self.fault:
            os._exit(1)
        return self.samplers[slot].sample_seeded(prompts, n, params, seeds)


# --------------------------------------------------------------------------------------------
# the pool (driver side)


@dataclass
class ModelBlob:
    """What an actor needs to rebuild a live module without a shared filesystem (the weights
    travel separately as a state dict)."""

    config: Any
    generation_config: Any
    tokenizer: Any


@dataclass
class _Slot:
    """One weight version served by every actor; enough to rebuild it in a recreated actor."""

    device: str
    dtype: str
    folder: str | None = None
    blob: Any = None  # ObjectRef of a ModelBlob
    state: Any = None  # ObjectRef of the latest state dict, or the path of the latest weight_sync=path file
    tmp: Any = None  # a TemporaryDirectory owning that file (weight_sync=path)
    frozen: bool = False


def _init_ray(engine: Any) -> bool:
    """Join ``address`` or start a local Ray (logical CPUs: at least what the pool asks, so a
    2-core machine can still hold a 2-actor pool beside the driver). True when Ray was started
    here (the pool that started it stops it)."""
    import ray

    r = engine.ray
    if ray.is_initialized():
        return False
    # Workers must import the same coevolve as this process (a source tree on sys.path, not an
    # installed copy): pass its folder on, in front of the inherited PYTHONPATH.
    src = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([src] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env = {"PYTHONPATH": path}
    if r.address is not None:
        ray.init(address=r.address, runtime_env={"env_vars": env}, logging_level="WARNING", log_to_driver=False)
        return False
    import torch

    actors = r.num_actors or (torch.cuda.device_count() // engine.tensor_parallel_size) or 2  # as RayPool._start counts
    want = int(max(os.cpu_count() or 1, actors * r.cpus_per_actor + 1))
    with _environ(PYTHONPATH=path), _loopback_only():  # the environment: inherited by the raylet and its workers
        ray.init(
            num_cpus=want,
            include_dashboard=False,
            object_store_memory=r.object_store_memory,
            logging_level="WARNING",
            log_to_driver=False,
        )
    return True


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for a single-machine Ray: off, every Ray process takes 127.0.0.1 as the node's
address and listens there only (Ray 2.60 on Linux otherwise listens on all interfaces, and turns
``_node_ip_address="127.0.0.1"`` into the machine's reachable address)."""


@contextlib.contextmanager
def _environ(**values: str):
    """``os.environ`` with ``values`` set inside the block, as it was after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _loopback_only():
    """A local Ray started inside the block binds 127.0.0.1 only: nothing of the pool is reachable
    from another machine. The switch (``LOOPBACK_ENV``) is read by Ray's processes at import, so it
    goes into their environment, and into this process's copy of it (already imported)."""
    consts = importlib.import_module("ray._private.ray_constants")
    old = getattr(consts, "ENABLE_RAY_CLUSTER", None)
    consts.ENABLE_RAY_CLUSTER = False
    try:
        with _environ(**{LOOPBACK_ENV: "0"}):
            yield
    finally:
        consts.ENABLE_RAY_CLUSTER = old


@dataclass
class RayPool:
    """The actors of one engine config, their placement group, and the slots they serve. Owned
    by a run's ``Engine`` (``close`` with the run) or by one sampler built outside a run."""

    engine: Any  # the EngineConfig (kind=ray)
    actors: list[Any] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    slots: dict[int, _Slot] = field(default_factory=dict)
    pg: Any = None
    gpus: int = 0
    started_ray: bool = False  # this pool started the local Ray it runs in (and stops it on close)
    sync_dir: Path | None = None  # where weight_sync=path files go (the run's engine folder; None: temp)
    _ids: Any = field(default_factory=itertools.count)

    @classmethod
    def start(cls, engine: Any, sync_dir: Path | None = None) -> RayPool:
        require_ray()
        pool = cls(engine, sync_dir=sync_dir)
        pool._start()
        atexit.register(pool.close)  # a pool left open when the process ends still takes its Ray down
        return pool

    # ---------------------------------------------------------------- actors
    def _inner_engine(self) -> Any:
        """The config every actor builds its samplers from: the same engine fields, with the
        actor's engine kind and per-prompt seeds."""
        return self.engine.model_copy(update={"kind": self.engine.ray.actor_engine, "seed_scope": "prompt"})

    def _start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group

        r = self.engine.ray
        self.started_ray = _init_ray(self.engine) or self.started_ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        tp = self.engine.tensor_parallel_size
        self.gpus = tp if gpus > 0 else 0
        n = r.num_actors or (max(1, gpus // tp) if gpus > 0 else 2)
        bundle = {"CPU": r.cpus_per_actor, **({"GPU": self.gpus} if self.gpus else {})}
        self.pg = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
        # a cluster we joined may still be scaling up; a local one started here will not grow
        timeout = PLACEMENT_TIMEOUT_S if r.address is not None else LOCAL_PLACEMENT_TIMEOUT_S
        ready, _ = ray.wait([self.pg.ready()], timeout=timeout)
        if not ready:
            have = ray.available_resources()
            ray.util.remove_placement_group(self.pg)
            raise SamplerError(
                f"engine.ray: the cluster cannot place {n} actors of {bundle} within "
                f"{timeout:.0f} s (available: {have}); lower engine.ray.num_actors, "
                "cpus_per_actor or engine.tensor_parallel_size"
            )
        self.actors = [self._new_actor(i) for i in range(n)]
        self.restarts = [0] * n
        ray.get([a.pid.remote() for a in self.actors])  # constructed and importable everywhere

    def _new_actor(self, i: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        r = self.engine.ray
        cls = ray.remote(EngineActor)
        strategy = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=i)
        return cls.options(
            num_cpus=r.cpus_per_actor, num_gpus=self.gpus, max_restarts=0, scheduling_strategy=strategy
        ).remote(self._inner_engine(), r.cpus_per_actor)

    def release(self) -> None:
        """Free the actors and the placement group (their GPUs and memory) but keep every slot at
        its current weights; ``ensure`` (run by the next call) starts them again. A verl phase
        does this first: its trainer wants the same GPUs (on a joined cluster, the same Ray
        resources) for the whole phase, and the rollout actors are idle meanwhile."""
        import ray

        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
        self.actors = []
        if self.pg is not None:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(self.pg)
            self.pg = None

    def ensure(self) -> None:
        """Start a released pool again: new actors, every slot re-added at its current weights."""
        if self.actors:
            return
        self._start()
        for i in range(len(self.actors)):
            self._call(
                i,
                lambda a: [
                    a.add.remote(sid, s.folder, s.device, s.dtype, s.blob, s.state) for sid, s in self.slots.items()
                ],
            )

    def _restart(self, i: int, cause: BaseException) -> None:
        """Recreate actor ``i`` with every slot at its current weights (or give up)."""
        import ray

        self.restarts[i] += 1
        if self.restarts[i] > self.engine.ray.max_restarts:
            raise SamplerError(
                f"Ray engine actor {i} died {self.restarts[i]} times (engine.ray.max_restarts="
                f"{self.engine.ray.max_restarts}); last cause: {type(cause).__name__}: {cause}"
            )
        with contextlib.suppress(Exception):
            ray.kill(self.actors[i], no_restart=True)
        self.actors[i] = self._new_actor(i)
        self._call(
            i,
            lambda a: [
                a.add.remote(sid, s.folder, s.device, s.dtype, s.blob, s.state) for sid, s in self.slots.items()
            ],
        )

    def _call(self, i: int, submit: Any) -> Any:
        """``ray.get`` of what ``submit(actor i)`` returns, recreating the actor when it dies."""
        import ray
        from ray.exceptions import RayActorError

        while True:
            try:
                return ray.get(submit(self.actors[i]))
            except RayActorError as e:
                self._restart(i, e)

    def on_all(self, submit: Any) -> list[Any]:
        """``submit`` on every actor at once; an actor that dies is recreated and asked again."""
        import ray
        from ray.exceptions import RayActorError

        self.ensure()
        refs = [submit(a) for a in self.actors]
        out = []
        for i, ref in enumerate(refs):
            try:
                out.append(ray.get(ref))
            except RayActorError as e:
                self._restart(i, e)
                out.append(self._call(i, submit))
        return out

    # ---------------------------------------------------------------- slots
    def add_slot(self, slot: _Slot) -> int:
        sid = next(self._ids)
        self.slots[sid] = slot
        self.on_all(lambda a: a.add.remote(sid, slot.folder, slot.device, slot.dtype, slot.blob, slot.state))
        return sid

    def drop_slot(self, sid: int) -> None:
        slot = self.slots.pop(sid, None)
        if slot is None:
            return
        for a in self.actors:
            with contextlib.suppress(Exception):
                a.drop.remote(sid)
        if slot.tmp is not None:
            slot.tmp.cleanup()

    def close(self) -> None:
        """Drop every slot, release the actors and the placement group and, when this pool
        started Ray, stop it. Safe to call again."""
        if "ray" not in sys.modules:
            return
        for sid in list(self.slots):
            self.drop_slot(sid)
        self.release()
        if self.started_ray:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
            self.started_ray = False

    # ---------------------------------------------------------------- sampling
    def sample(
        self, sid: int, prompts: list[str], n: int, params: SamplingParams, seeds: list[int | None]
    ) -> list[list[Completion]]:
        """Contiguous shares balanced by prompt count (call order kept); a share whose actor
        died is sent again to its recreated actor."""
        import ray
        from ray.exceptions import RayActorError

        self.ensure()
        k = min(len(self.actors), len(prompts))
        bounds = [(j * len(prompts) // k, (j + 1) * len(prompts) // k) for j in range(k)]
        parts: dict[int, list[list[Completion]]] = {}
        pending = list(range(k))
        while pending:
            refs = {
                j: self.actors[j].sample.remote(
                    sid, prompts[bounds[j][0] : bounds[j][1]], n, params, seeds[bounds[j][0] : bounds[j][1]]
                )
                for j in pending
            }
            pending = []
            for j, ref in refs.items():
                try:
                    parts[j] = ray.get(ref)
                except RayActorError as e:
                    self._restart(j, e)
                    pending.append(j)
        return [group for j in range(k) for group in parts[j]]


# --------------------------------------------------------------------------------------------
# the sampler


class RaySampler:
    """``Sampler`` over a Ray actor pool. Build it with ``coevolve.engine.Engine`` (a run's
    samplers share the run's pool) or ``make_sampler`` / ``load_sampler`` (``engine.kind=ray``;
    the sampler then owns a pool of its own).

    ``tokenizer`` is this process's copy (prompt encoding for callers, e.g. chat templates);
    the actors hold their own. ``sync_weights(model)`` pushes ``model``'s weights to every actor
    (``engine.ray.weight_sync``); a frozen sampler refuses it. ``close()`` drops this sampler's
    slot (and closes its pool when it owns one)."""

    def __init__(self, engine: Any, pool: RayPool, slot: int, tokenizer: Any, owns_pool: bool = False) -> None:
        self.engine, self.pool, self.slot, self.tokenizer = engine, pool, slot, tokenizer
        self._finalizer = weakref.finalize(self, _drop_quietly, pool, slot, owns_pool)

    # ------------------------------------------------------------------ construction
    @classmethod
    def require(cls, engine: Any) -> None:
        """Ray must be installed, seeds must be per prompt (a pool splits every call), and a vllm
        actor runs on one GPU (``tensor_parallel_refusal``)."""
        refusal = tensor_parallel_refusal(engine)
        if refusal:
            raise ConfigError(refusal)
        if resolve_seed_scope(engine) == "call":
            raise ConfigError(
                "engine.seed_scope=call with engine.kind=ray: a pool splits every call over its actors, "
                "so only per-prompt seeds reproduce; use engine.seed_scope=prompt (the default for ray)"
            )
        require_ray()

    @staticmethod
    def _pool(engine: Any, owner: Any) -> tuple[RayPool, bool]:
        """The owner's shared pool (started at its first sampler), or a new pool of the sampler's own."""
        if owner is None:
            return RayPool.start(engine), True
        pool = owner.shared("ray-pool", lambda: RayPool.start(engine, getattr(owner, "scratch", None)))
        pool.ensure()
        return pool, False

    @classmethod
    def for_model(cls, engine: Any, model: Any, tokenizer: Any, owner: Any = None) -> RaySampler:
        """A slot serving ``model``'s current weights (a learner's module)."""
        pool, own = cls._pool(engine, owner)
        return cls._slot_of(engine, pool, model, tokenizer, frozen=False, owns_pool=own)

    @classmethod
    def _slot_of(
        cls, engine: Any, pool: RayPool, model: Any, tokenizer: Any, frozen: bool, owns_pool: bool = False
    ) -> RaySampler:
        import ray

        base = unwrap_peft(model)
        dtype = next(model.parameters()).dtype
        blob = ModelBlob(base.config, getattr(base, "generation_config", None), tokenizer)
        slot = _Slot(
            device="auto" if pool.gpus else "cpu",
            dtype=str(dtype).removeprefix("torch."),
            blob=ray.put(blob),
            state=ray.put(host_snapshot(model, dtype)),
            frozen=frozen,
        )
        return cls(engine, pool, pool.add_slot(slot), tokenizer, owns_pool)

    @classmethod
    def load(cls, engine: Any, path: str, device: str = "auto", dtype: str = "auto", owner: Any = None) -> RaySampler:
        """A slot loaded by every actor from the model folder ``path`` (a judge, a diagnoser,
        a model to evaluate); on several nodes the folder must be on a filesystem they share."""
        pool, own = cls._pool(engine, owner)
        dev = "cpu" if device == "cpu" or not pool.gpus else "auto"
        slot = _Slot(device=dev, dtype=dtype, folder=str(Path(path).resolve()), frozen=True)
        return cls(engine, pool, pool.add_slot(slot), load_tokenizer(path), own)

    def pinned(self, model: Any) -> RaySampler:
        """A frozen slot of ``model``'s current weights in the same actors (one more copy of the
        weights per actor, no new actors)."""
        return RaySampler._slot_of(self.engine, self.pool, model, self.tokenizer, frozen=True)

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: Any) -> None:
        """Every actor serves ``model``'s current weights when this returns."""
        import ray

        slot = self.pool.slots.get(self.slot)
        if slot is None:
            raise SamplerError("sync_weights on a closed Ray sampler")
        if slot.frozen:
            raise SamplerError(
                "sync_weights on a frozen (pinned or loaded) Ray sampler: its weights are fixed by design"
            )
        dtype = next(model.parameters()).dtype
        if self.engine.ray.weight_sync == "broadcast":
            slot.state = ray.put(host_snapshot(model, dtype))
            self.pool.on_all(lambda a: a.load_state.remote(self.slot, slot.state))
            return
        import tempfile

        from safetensors.torch import save_file

        # the weights alone: the actors keep the module and sampler they have and load the file
        # into them (a recreated actor builds the slot from its blob and this file); in a run, under
        # its folder (the filesystem the field asks every node to see), else the system's temp folder
        if self.pool.sync_dir is not None:
            self.pool.sync_dir.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.TemporaryDirectory(prefix="ray-weights-", dir=self.pool.sync_dir)
        path = os.path.join(tmp.name, "model.safetensors")
        save_file({k: v.contiguous() for k, v in host_snapshot(model, dtype).items()}, path, metadata={"format": "pt"})
        old = slot.tmp
        slot.state, slot.tmp = path, tmp
        self.pool.on_all(lambda a: a.load_state.remote(self.slot, path))
        if old is not None:
            old.cleanup()

    # ------------------------------------------------------------------ API
    def encode(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        """``n`` completions per prompt; outer list follows ``prompts``. Each prompt's samples
        come from its own seed (``prompt_seeds``), so they equal an in-process
        ``HFSampler(seed_scope="prompt")`` of the same weights, however the call is split."""
        validate_params(n, params)
        if isinstance(prompts, str):
            raise SamplerError("sample: prompts must be a sequence of strings, not one string")
        if self.slot not in self.pool.slots:
            raise SamplerError("sample on a closed Ray sampler")
        prompts = list(prompts)
        if not prompts:
            return []
        return self.pool.sample(self.slot, prompts, n, params, prompt_seeds(params.seed, prompts))

    def close(self) -> None:
        self._finalizer()


def _drop_quietly(pool: RayPool, slot: int, owns_pool: bool) -> None:
    """Drop a collected sampler's slot (and its own pool); nothing to do once Ray is gone."""
    if "ray" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        pool.drop_slot(slot)
        if owns_pool:
            pool.close()


__all__ = ["EngineActor", "RayPool", "RaySampler", "ray_available", "require_ray"]
