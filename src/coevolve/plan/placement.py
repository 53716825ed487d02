"""Where a run's parts go on ``nodes`` x ``gpus`` GPUs (``coevolve plan --gpus N --nodes M``,
``engine=ray``, ``backend=verl``): the ``Layout`` record and ``make_layout``, which places the
config's Ray actors and verl job and refuses what cannot be placed. What each phase then needs
on that layout is ``coevolve.plan.layouts``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coevolve.engine.ray import tensor_parallel_refusal
from coevolve.errors import ConfigError
from coevolve.schema import vllm_share


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
    actor_util: float = 0.3  # vllm actors: engine.gpu_memory_utilization (coevolve's default)
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
        parts = [
            f"{self.nodes} node{'s' if self.nodes > 1 else ''} x {self.gpus_per_node} GPU"
            f"{'s' if self.gpus_per_node > 1 else ''} ({self.gpus} in all)"
        ]
        if self.actors:
            util = f", each engine at gpu_memory_utilization={self.actor_util:g}" if self.actor_engine == "vllm" else ""
            parts.append(
                f"engine=ray: {self.actors} {self.actor_engine} actor{'s' if self.actors > 1 else ''} x TP "
                f"{self.actor_tp}{util} (one shares GPU 0)"
            )
        else:
            parts.append(f"engine={self.engine} in the coevolve process on GPU 0")
        if self.verl_gpus:
            parts.append(
                f"backend=verl: GRPO phases as one job, FSDP over {self.verl_gpus} GPUs, rollout engines of TP "
                f"{self.verl_tp} at gpu_memory_utilization={self.verl_util:g}"
            )
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
    v = bk.verl if bk is not None and bk.kind == "verl" else None
    g = gpus if gpus is not None else (v.n_gpus_per_node if v is not None else 1)
    n = nodes if nodes is not None else (v.nnodes if v is not None else 1)
    if g < 1:
        raise ConfigError(f"--gpus {g}: GPUs per node must be at least 1")
    if n < 1:
        raise ConfigError(f"--nodes {n}: nodes must be at least 1")
    lay: dict[str, Any] = dict(nodes=n, gpus_per_node=g, engine=engine)
    tp = int(getattr(cfg.engine, "tensor_parallel_size", 1))
    if engine == "ray" and ray is not None:
        lay.update(_ray_actors(cfg.engine, ray, n, g, tp))
    if v is not None:
        # one Ray cluster when the run joins one (engine.ray.address: the pool and verl's jobs); a local
        # Ray of this process and verl's own are apart
        shared = engine == "ray" and ray is not None and ray.address is not None
        lay.update(_verl_job(cfg.engine, v, n, g, tp, shared))
    return Layout(**lay)


def _ray_actors(engine: Any, ray: Any, n: int, g: int, tp: int) -> dict[str, Any]:
    """The ``engine=ray`` pool's fields of the layout: as coevolve.engine.ray does, one actor per
    tensor-parallel group of every GPU Ray sees (unless ``engine.ray.num_actors`` says)."""
    refusal = tensor_parallel_refusal(engine)  # the pool's own refusal: plan and run agree
    if refusal:
        raise ConfigError(refusal)
    if g % tp:
        raise ConfigError(
            f"engine.tensor_parallel_size={tp} does not divide the {g} GPUs per node (--gpus): "
            "a tensor-parallel group stays on one node"
        )
    actors = ray.num_actors if ray.num_actors is not None else max(1, n * g // tp)
    if actors * tp > n * g:
        raise ConfigError(
            f"engine.ray.num_actors={actors} x engine.tensor_parallel_size={tp} = {actors * tp} "
            f"GPUs > the layout's {n * g} (--nodes {n} x --gpus {g})"
        )
    return dict(
        actor_engine=ray.actor_engine,
        actors=actors,
        actor_tp=tp,
        actor_util=vllm_share(engine),
        actor_sleep=bool(engine.sleep_mode),
    )


def _verl_job(engine: Any, v: Any, n: int, g: int, tp: int, shared: bool) -> dict[str, Any]:
    """The ``backend=verl`` job's fields of the layout (``v``: ``backend.verl``)."""
    if v.n_gpus_per_node % tp:
        raise ConfigError(
            f"engine.tensor_parallel_size={tp} (verl's rollout engines) does not divide "
            f"backend.verl.n_gpus_per_node={v.n_gpus_per_node}"
        )
    if v.nnodes > n or v.n_gpus_per_node > g:
        raise ConfigError(
            f"backend.verl.nnodes={v.nnodes} x backend.verl.n_gpus_per_node={v.n_gpus_per_node} does "
            f"not fit the layout's --nodes {n} x --gpus {g}"
        )
    return dict(
        backend="verl",
        verl_gpus=v.nnodes * v.n_gpus_per_node,
        verl_tp=tp,
        verl_util=vllm_share(engine, "verl"),
        shared_cluster=shared,
    )
