"""Rollout engines behind the one ``Sampler`` protocol (``coevolve.types``), and the one dispatch
that builds them.

``KINDS`` maps ``engine.kind`` to its sampler class; each class states how it is checked
(``require``), built over a learner's module (``for_model``), loaded from a model folder
(``load``) and frozen at the weights a module has now (``pinned``). Nothing outside this package
asks which kind it got:

- a run builds every sampler through its ``Engine`` (``Engine(cfg.engine)``, closed with the
  run), which also owns what the samplers of a run share (an ``engine=ray`` actor pool) and frees
  it for a while on request (``release``: a verl phase wants the GPUs);
- ``make_sampler`` / ``freeze_sampler`` / ``load_sampler`` build one sampler outside a run (an
  evaluation, a reward worker, a test); a ray sampler built so owns a pool of its own.

Adding an engine: one sampler class with those four methods and one line in ``KINDS``.
"""

from __future__ import annotations

import copy
import importlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.engine.base import SamplerError, freeze_module, resolve_seed_scope, validate_params
from coevolve.engine.hf import HFSampler, load_model, load_tokenizer, resolve_device, resolve_dtype
from coevolve.errors import ConfigError
from coevolve.types import Sampler

KINDS: dict[str, str] = {
    "hf": "coevolve.engine.hf:HFSampler",
    "vllm": "coevolve.engine.vllm:VLLMSampler",
    "ray": "coevolve.engine.ray:RaySampler",
}
"""``engine.kind`` -> its sampler class (imported on first use: vllm and ray are optional)."""

ENGINES = tuple(KINDS)

ENGINE_DIR = "engine"
"""The run folder's folder for files the engine hands its workers while the run runs (``Engine``'s
``scratch``: ``engine.ray.weight_sync=path``); gone when the run's engine closes."""

seed_scope = resolve_seed_scope


def sampler_class(kind: str) -> Any:
    """The sampler class of ``engine.kind``; ``ConfigError`` naming the field for an unknown one."""
    if kind not in KINDS:
        raise ConfigError(f"engine.kind={kind!r}: unknown rollout engine (known: {', '.join(KINDS)})")
    module, _, name = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def check_engine(engine: Any) -> None:
    """Fail before any work when ``engine.kind`` cannot run here (unknown kind, ``vllm`` or
    ``ray`` without its package, ``ray`` with per-call seeds), with a ``ConfigError`` naming the
    field and how to install."""
    sampler_class(engine.kind).require(engine)


class Engine:
    """A run's rollout engine: every sampler the run draws from is built here, and what they
    share (the ``engine=ray`` actor pool, started at its first sampler) lives here and ends with
    ``close()`` (the run's end; also as a context manager). ``scratch``: a folder of the run for
    files the engine hands its workers (``engine.ray.weight_sync=path``), emptied when the engine
    starts (what a killed run left) and removed when it closes; None: the system's temp folder."""

    def __init__(self, cfg: Any, scratch: Path | None = None) -> None:
        check_engine(cfg)
        self.cfg = cfg
        self.kind = sampler_class(cfg.kind)
        self._shared: dict[str, Any] = {}
        self.scratch = scratch
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def shared(self, key: str, start: Callable[[], Any]) -> Any:
        """The resource ``key`` every sampler of this engine shares, started once by ``start``;
        it may ``release()`` (until its next use) and must ``close()``."""
        if key not in self._shared:
            self._shared[key] = start()
        return self._shared[key]

    def sampler(self, model: Any, tokenizer: Any) -> Sampler:
        """A sampler serving ``model``'s current weights (``role.sync()`` keeps it current)."""
        return self.kind.for_model(self.cfg, model, tokenizer, owner=self)

    def frozen(self, sampler: Any, model: Any, tokenizer: Any) -> Sampler:
        """A sampler that keeps serving the weights ``model`` has now while ``model`` trains on
        (D²Evo's frozen scorer), from ``sampler``, the sampler of ``model``: its kind's
        ``pinned`` (hf: a frozen deep copy of the module; vllm: a host-memory snapshot served by
        the same engine; ray: a frozen slot in the same actors)."""
        return freeze_sampler(self.cfg, sampler, model, tokenizer)

    def load(self, path: str, device: str = "auto", dtype: str = "auto") -> Sampler:
        """A read-only sampler over the model folder ``path`` (a judge, a diagnoser)."""
        return self.kind.load(self.cfg, path, device, dtype, owner=self)

    def release(self) -> None:
        """Free the shared resources' GPUs until their next use (before a verl phase)."""
        for res in self._shared.values():
            res.release()

    def close(self) -> None:
        for res in self._shared.values():
            res.close()
        self._shared.clear()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_sampler(engine: Any, model: Any, tokenizer: Any) -> Sampler:
    """A sampler of kind ``engine.kind`` over ``model``, outside a run (``engine``: the config's
    ``engine`` section, or anything with its fields)."""
    check_engine(engine)
    return sampler_class(engine.kind).for_model(engine, model, tokenizer)


def freeze_sampler(engine: Any, sampler: Any, model: Any, tokenizer: Any) -> Sampler:
    """A sampler that keeps serving the weights ``model`` has now (``Engine.frozen``); a sampler
    of another kind than ``engine.kind`` gets a frozen deep copy of the module in a new one."""
    check_engine(engine)
    cls = sampler_class(engine.kind)
    if isinstance(sampler, cls):
        return sampler.pinned(model)
    return cls.for_model(engine, freeze_module(copy.deepcopy(model)), tokenizer)


def load_sampler(engine: Any, path: str, device: str = "auto", dtype: str = "auto") -> Sampler:
    """Load a model folder read-only (a judge, a diagnoser, a model to evaluate) and wrap it in
    a sampler of kind ``engine.kind``, outside a run (see each kind's ``load``)."""
    check_engine(engine)
    return sampler_class(engine.kind).load(engine, path, device, dtype)


__all__ = [
    "ENGINES",
    "ENGINE_DIR",
    "Engine",
    "HFSampler",
    "KINDS",
    "Sampler",
    "SamplerError",
    "check_engine",
    "freeze_sampler",
    "load_model",
    "load_sampler",
    "load_tokenizer",
    "make_sampler",
    "resolve_device",
    "resolve_dtype",
    "sampler_class",
    "seed_scope",
    "validate_params",
]
