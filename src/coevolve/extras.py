"""The optional extras (``pyproject.toml``) a config needs, checked before any folder is made or any
model is built: a run that would stop at its first use of a missing package (the MiniLM embedder at
round one's memory phase, a tracker after the run folder exists) is refused up front with the field,
the extra and the pip command in one line. Only whether the package can be found is asked (no
import: sentence-transformers or wandb cost seconds to import)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from coevolve.data.sources import GENERATED, source_kind
from coevolve.errors import ConfigError
from coevolve.models import MARKER, default_cache_dir


def have(module: str) -> bool:
    """Whether ``module`` can be imported here (a module set to ``None`` in ``sys.modules`` cannot)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def needed_extras(cfg: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(field=value, extra, modules)`` for each optional extra ``cfg`` will use (engines other than
    hf are checked with their own install hints by ``coevolve.engine.check_engine``)."""
    needs: list[tuple[str, str, tuple[str, ...]]] = []
    memory = getattr(cfg, "memory", None)
    if memory is not None and getattr(memory, "enabled", False) and getattr(memory, "embedder", None) == "minilm":
        needs.append(("memory.embedder=minilm", "embed", ("sentence_transformers",)))
    run = getattr(cfg, "run", None)
    for tracker, module in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
        if tracker in (getattr(run, "trackers", None) or []):
            needs.append((f"run.trackers={tracker}", "track", (module,)))
    if getattr(getattr(cfg, "learner", None), "lora", False):
        needs.append(("learner.lora=true", "lora", ("peft",)))
    needs += _data_extras(getattr(cfg, "data", None))
    if getattr(getattr(cfg, "backend", None), "kind", None) == "verl":
        needs.append(("backend.kind=verl", "verl", ("pyarrow",)))
    model = getattr(getattr(cfg, "model", None), "path", None)
    if isinstance(model, str) and _unbuilt(model, "smollm2-135m-instruct"):
        needs.append((f"model.path={model}", "models", ("gguf", "accelerate")))
    if isinstance(model, str) and _unbuilt(model, "smollm2-135m-arith"):  # the warm start (coevolve.warmstart)
        needs.append((f"model.path={model}", "trl", ("trl", "accelerate")))
    return needs


def _data_extras(data: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    source = getattr(data, "source", None)
    if not isinstance(source, str) or source in GENERATED:
        return []
    try:
        kind = source_kind(source)
    except Exception:  # noqa: BLE001 - a source that does not exist is named by check_source
        return []
    if kind == "parquet":
        return [(f"data.source={source}", "datasets", ("pyarrow",))]
    if kind in ("disk", "folder", "hub"):
        return [(f"data.source={source}", "datasets", ("datasets",))]
    return []


def _unbuilt(path: str, name: str) -> bool:
    p = Path(path)
    return p.parent == default_cache_dir() and p.name == name and not (p / MARKER).is_file()


def check_extras(cfg: Any) -> None:
    """Refuse ``cfg`` when an extra it needs is not installed: one line naming the field, the extra
    and the pip command (``ConfigError``, exit 2)."""
    for field, extra, modules in needed_extras(cfg):
        absent = [m for m in modules if not have(m)]
        if absent:
            raise ConfigError(
                f"{field} needs the '{extra}' extra ({', '.join(absent)} not installed): "
                f"pip install 'coevolve[{extra}]'"
            )
