"""The base-evaluation cache: a built-in base's evaluation, kept once for every run that evaluates
it identically."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from coevolve.recipes.setup import Setup
from coevolve.run import Phase, derive_seed
from coevolve.run.compute import Compute, ComputeMeter
from coevolve.run.files import TMP_SUFFIX, atomic_write_json


def base_eval_cache(s: Setup, phase: Phase) -> Path | None:
    """Where the base evaluation of a built-in base (toy or skill, ``model.path`` unset) is kept
    for every run that evaluates it identically: same base folder, world, eval settings, eval seed,
    engine and threads. Why: every run of a study starts from the same cached base, and its base
    evaluation (thousands of held-out items, greedy and sampled) would be recomputed bit for bit
    by each of them. None for a real model and for every later evaluation."""
    if phase.stage != "base" or s.cfg.model.path is not None or s.cfg.learner.resume_from_checkpoint:
        return None  # (a solver started from a checkpoint is not the built-in base)
    import hashlib
    import json

    cfg = s.cfg
    # repeats joins the key only when set, so the caches of single-run evaluations stay valid
    key = {
        "world": s.world.name,
        "eval": cfg.eval.model_dump(
            mode="json", exclude={"every_round"} | ({"repeats"} if cfg.eval.repeats == 1 else set())
        ),
        "seed": derive_seed(cfg.run.seed, "eval"),
        "engine": cfg.engine.kind,
        "dtype": cfg.model.dtype,
        "device": cfg.model.device,
        "threads": cfg.run.threads,
        "data": (
            cfg.data.skill.model_dump(
                mode="json", include={"deficits", "base_steps", "base_seed", "heldout_per_stratum"}
            )
            if s.world.name == "skill"
            else cfg.data.exclude_heldout
        ),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return s.base / "eval_cache" / digest


def load_cached_eval(cache: Path, out_dir: Path, meter: ComputeMeter, grader: Any = None) -> dict[str, Any] | None:
    """The cached ``results.json`` (its files copied into ``out_dir``), None on a miss. The
    evaluation's compute and grader counters, saved with it, are counted again (into ``meter``
    and ``grader.stats``), so a run's figures do not depend on whether another run filled the
    cache first."""
    import json

    spent = _cache_compute(cache)
    if not (cache / "results.json").is_file() or not spent.is_file():
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in cache.iterdir():
        shutil.copyfile(f, out_dir / f.name)
    saved = json.loads(spent.read_text(encoding="utf-8"))
    meter.total += Compute.from_dict(saved["compute"] if "compute" in saved else saved)
    if (stats := getattr(grader, "stats", None)) is not None:
        stats.replay(saved.get("grader", {}))
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))


def save_cached_eval(src: Path, cache: Path, spent: Compute, graded: dict[str, int] | None = None) -> None:
    """Copy an evaluation folder into the cache, whole or not at all (staging folder + rename; a
    concurrent writer of the same entry wrote the same files), and beside it the compute it took
    and what it added to the grader's counters (``graded``)."""
    staging = cache.with_name(f".{cache.name}{TMP_SUFFIX}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(_cache_compute(cache), {"compute": spent.to_dict(), "grader": graded or {}})
        shutil.copytree(src, staging)
        if not cache.exists():
            os.replace(staging, cache)
    except OSError:
        pass  # a read-only cache folder: the run is unaffected, the next one evaluates again
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _cache_compute(cache: Path) -> Path:
    """Where a cached evaluation's compute is kept: beside its folder, not in it (the folder's
    files are copied into the run's evaluation folder as they are)."""
    return cache.with_name(f"{cache.name}.compute.json")
