"""One readable file per recipe (``grpo``, ``d2evo``, ``diagevo``), each declaring its phases once
(``declare.Recipe``), over shared building blocks (``common``: the run loop derived from the
declaration, the evaluation phase, the summary), and ``execute``: how every entry point (the
CLI, the ablation scripts) runs one."""

from __future__ import annotations

import contextlib
import errno
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coevolve.config.base import RecipeConfig
from coevolve.errors import RunStateError

WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})
"""Errors of a write that the run cannot fix itself (full disk, quota, I/O error, read-only)."""


class RunWriteError(RunStateError):
    """The run folder could not be written (full disk ...); its last finished phase is intact."""


def check_plan(cfg: RecipeConfig, run: Any, force: bool = False) -> None:
    """Compare the phases the recipe goes through now (``Recipe.phase_list(cfg)``) with those saved in
    state.json when the run was made; refuse a resume that would not reproduce the run that was
    started (phases added, removed or reordered, listed) unless ``force``. Runs saved without a
    plan are checked against their finished phases, which must be a prefix of the plan. The
    current plan is saved either way."""
    from coevolve.config import recipe_of

    plan = [p.key for p in recipe_of(cfg.recipe).phase_list(cfg)]
    saved = run.state.data.get("plan")
    done = [r.key for r in run.state.records()]
    if saved is None:
        changed = done != plan[: len(done)]
        saved = done
    else:
        changed = saved != plan
    if changed and not force:
        added = [k for k in plan if k not in saved]
        removed = [k for k in saved if k not in plan]
        detail = "; ".join(filter(None, [f"added: {', '.join(added)}" if added else "",
                                         f"removed: {', '.join(removed)}" if removed else "",
                                         "" if added or removed else "same phases, another order"]))
        raise RunStateError(f"{run.path}: recipe {cfg.recipe!r} now goes through other phases than when this run was "
                            f"made ({detail}); the resumed run would not be the run that was started. Resume with "
                            "--force to run the new phase list anyway (finished phases are kept), or start a new run")
    if run.state.data.get("plan") != plan:
        run.state.save({**run.state.data, "plan": plan})


def execute(cfg: RecipeConfig, path: Path, *, skip_finished: bool = False, force: bool = False) -> dict[str, Any]:
    """Run ``cfg``'s recipe in the run folder ``path``: create it, or resume it when it already
    holds a run; record the status (running / interrupted / failed / finished) in its state.
    With ``skip_finished``, a finished run is not reopened and its summary is returned.

    The folder's one-writer lock (``run.lock``) is held throughout. A resumed run whose recipe
    now goes through other phases than the saved plan is refused (``check_plan``) unless
    ``force``. A write that fails (a full disk) ends the run as ``RunWriteError``: every finished
    phase is intact on disk and ``coevolve resume`` continues once there is room."""
    from coevolve.run.lock import run_lock

    path = Path(path)
    with run_lock(path, create=True), write_errors(path):
        return _execute_locked(cfg, path, skip_finished, force)


@contextlib.contextmanager
def write_errors(path: Path) -> Iterator[None]:
    """Turn a failed write into the clear ``RunWriteError`` (how to continue, no traceback)."""
    try:
        yield
    except OSError as e:
        if e.errno not in WRITE_ERRNOS:
            raise
        raise RunWriteError(f"writing the run folder failed ({e}); every finished phase is intact: free space "
                            f"(or fix the disk), then `coevolve resume {path}` continues") from e


def _execute_locked(cfg: RecipeConfig, path: Path, skip_finished: bool, force: bool) -> dict[str, Any]:
    from coevolve.config import dump_yaml, recipe_of
    from coevolve.recipes.common import run_recipe
    from coevolve.run import STATE_FILE, SUMMARY_FILE, Run

    if (path / STATE_FILE).is_file():
        if skip_finished and (path / SUMMARY_FILE).is_file():
            if json.loads((path / STATE_FILE).read_text(encoding="utf-8")).get("status") == "finished":
                return json.loads((path / SUMMARY_FILE).read_text(encoding="utf-8"))
        run = Run.open(path)
    else:
        run = Run.create(path, dump_yaml(cfg), cfg.recipe)
    check_plan(cfg, run, force)
    recipe = recipe_of(cfg.recipe)
    if cfg.run.threads:
        import torch

        torch.set_num_threads(cfg.run.threads)
    run.state.set_status("running")
    try:
        summary = run_recipe(recipe, cfg, run)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            run.state.set_status("interrupted")
        raise
    except BaseException:
        with contextlib.suppress(OSError):  # on a full disk the status is lost, not the error that caused it
            run.state.set_status("failed")
        raise
    finally:
        run.metrics.close()  # live trackers flush and close even when the run stops early
        if cfg.engine.kind == "ray":  # the run's actor pool (and a Ray it started) end with the run
            from coevolve.engine.ray import shutdown

            shutdown()
    run.state.set_status("finished")
    return summary
