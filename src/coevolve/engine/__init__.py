"""Rollout engines behind the one ``Sampler`` protocol (``coevolve.types``), and the one factory
that builds them: every phase that samples (solver, writers, frozen scorer, judge, diagnoser,
evaluation) gets its sampler from ``make_sampler``, so adding a backend touches one place."""

from __future__ import annotations

import copy
from typing import Any

from coevolve.engine.base import SamplerError, validate_params
from coevolve.engine.hf import HFSampler, load_model, load_tokenizer, resolve_device, resolve_dtype
from coevolve.errors import ConfigError
from coevolve.types import Sampler

ENGINES = ("hf", "vllm", "ray")


def seed_scope(engine: Any) -> str:
    """``engine.seed_scope`` resolved: unset means 'prompt' for ray (a pool only reproduces
    in-process sampling with per-prompt seeds) and 'call' otherwise (the historical draws)."""
    scope = getattr(engine, "seed_scope", None)
    return scope if scope is not None else ("prompt" if engine.kind == "ray" else "call")


def check_engine(engine: Any) -> None:
    """Fail before any work when ``engine.kind`` cannot run here (unknown kind, ``vllm`` or
    ``ray`` without its package, ``ray`` with per-call seeds), with a ``ConfigError`` naming the
    field and how to install."""
    if engine.kind not in ENGINES:
        raise ConfigError(f"engine.kind={engine.kind!r}: unknown rollout engine (known: {', '.join(ENGINES)})")
    if engine.kind == "vllm":
        from coevolve.engine.vllm import require_vllm  # imports no vllm, only checks it is there

        require_vllm()
    if engine.kind == "ray":
        from coevolve.engine.ray import require_ray  # imports no ray, only checks it is there

        if seed_scope(engine) == "call":
            raise ConfigError("engine.seed_scope=call with engine.kind=ray: a pool splits every call over its actors, "
                              "so only per-prompt seeds reproduce; use engine.seed_scope=prompt (the default for ray)")
        require_ray()


def make_sampler(engine: Any, model: Any, tokenizer: Any) -> Sampler:
    """A sampler of kind ``engine.kind`` over ``model`` (``engine``: the config's ``engine``
    section, or anything with its fields). ``vllm`` starts an engine in this process and pushes
    ``model``'s weights into it; ``role.sync()`` keeps it current."""
    check_engine(engine)
    if engine.kind == "ray":
        from coevolve.engine.ray import RaySampler

        return RaySampler.for_model(engine, model, tokenizer)
    if engine.kind == "vllm":
        from coevolve.engine.vllm import VLLMSampler

        return VLLMSampler.for_model(engine, model, tokenizer).scoped(seed_scope(engine))
    return HFSampler(model, tokenizer, max_batch=engine.max_batch, max_batch_tokens=engine.max_batch_tokens,
                     seed_scope=seed_scope(engine), prefix_cache=bool(getattr(engine, "prefix_caching", False)))


def freeze_sampler(engine: Any, sampler: Sampler, model: Any, tokenizer: Any) -> Sampler:
    """A sampler that keeps serving the weights ``model`` has now while ``model`` trains on (the
    D²Evo frozen scorer). ``hf``: a frozen deep copy of the module (one more copy of the weights on
    the learner's device). ``vllm``: a host-memory snapshot served by ``sampler``'s engine (one more
    copy in host memory, in the engine's dtype; no second engine or KV cache; the weights are
    reloaded whenever the engine switches between the live and the frozen version). ``ray``: a
    frozen slot in the same actors (one more copy of the weights in every actor, no new actors)."""
    check_engine(engine)
    if engine.kind == "ray":
        from coevolve.engine.ray import RaySampler

        if isinstance(sampler, RaySampler):
            return sampler.pinned(model)
    if engine.kind == "vllm":
        from coevolve.engine.vllm import VLLMSampler

        if isinstance(sampler, VLLMSampler):
            return sampler.pinned(model)
    frozen = copy.deepcopy(model)
    frozen.eval()
    for p in frozen.parameters():
        p.requires_grad_(False)
    return make_sampler(engine, frozen, tokenizer)


def load_sampler(engine: Any, path: str, device: str = "auto", dtype: str = "auto") -> Sampler:
    """Load a model folder read-only (a judge, a diagnoser, a model to evaluate) and wrap it.
    ``vllm`` reads a full model folder itself (no Hugging Face copy in memory); a LoRA adapter
    checkpoint is merged by ``load_model`` first and pushed. ``ray``: every actor loads the folder
    by path (on several nodes it must be on a filesystem they share)."""
    check_engine(engine)
    if engine.kind == "ray":
        from coevolve.engine.ray import RaySampler

        return RaySampler.for_path(engine, path, load_tokenizer(path), device=device, dtype=dtype)
    if engine.kind == "vllm":
        from pathlib import Path

        from coevolve.engine.vllm import VLLMSampler

        if (Path(path) / "config.json").is_file():
            return VLLMSampler.for_path(engine, path, load_tokenizer(path), device=device, dtype=dtype).scoped(
                seed_scope(engine))
    model, tokenizer = load_model(path, device=device, dtype=dtype)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return make_sampler(engine, model, tokenizer)


__all__ = ["ENGINES", "HFSampler", "Sampler", "SamplerError", "check_engine", "freeze_sampler", "load_model", "load_sampler",
           "load_tokenizer", "make_sampler", "resolve_device", "resolve_dtype", "seed_scope", "validate_params"]
