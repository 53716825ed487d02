"""Rollout engines behind the one ``Sampler`` protocol (``coevolve.types``), and the one factory
that builds them: every phase that samples (solver, writers, frozen scorer, judge, diagnoser,
evaluation) gets its sampler from ``make_sampler``, so adding a backend touches one place."""

from __future__ import annotations

from typing import Any

from coevolve.engine.base import SamplerError, validate_params
from coevolve.engine.hf import HFSampler, load_model, load_tokenizer, resolve_device, resolve_dtype
from coevolve.errors import ConfigError
from coevolve.types import Sampler


def make_sampler(engine: Any, model: Any, tokenizer: Any) -> Sampler:
    """A sampler of kind ``engine.kind`` over ``model`` (``engine``: the config's ``engine``
    section, or anything with ``kind`` and ``max_batch``)."""
    if engine.kind == "hf":
        return HFSampler(model, tokenizer, max_batch=engine.max_batch)
    raise ConfigError(f"engine.kind={engine.kind!r}: unknown rollout engine (known: hf)")


def load_sampler(engine: Any, path: str, device: str = "auto", dtype: str = "auto") -> Sampler:
    """Load a model folder read-only (a judge, a diagnoser, a model to evaluate) and wrap it."""
    model, tokenizer = load_model(path, device=device, dtype=dtype)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return make_sampler(engine, model, tokenizer)


__all__ = ["HFSampler", "Sampler", "SamplerError", "load_model", "load_sampler", "load_tokenizer", "make_sampler", "resolve_device",
           "resolve_dtype", "validate_params"]
