"""One readable file per recipe (``grpo``, ``d2evo``, ``diagevo``), each declaring its phases once
(``declare.Recipe``), over shared building blocks (``common``: the run loop derived from the
declaration, the evaluation phase, the summary), and ``execute``: how every entry point (the
CLI, the ablation scripts) runs one."""

from __future__ import annotations

import contextlib
import copy
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


PHASE_LIST_KEY = "phase_list"
"""state.json's list of the phase keys the recipe goes through (runs made before it was named so
saved it as ``plan``)."""


def check_phase_list(cfg: RecipeConfig, run: Any, force: bool = False) -> None:
    """Compare the phases the recipe goes through now (``Recipe.phase_list(cfg)``) with those
    saved in state.json when the run was made; refuse a resume that would not reproduce the run
    that was started (phases added, removed or reordered, listed) unless ``force``. Runs saved
    without a list are checked against their finished phases, which must be a prefix of it. The
    current list is saved either way."""
    from coevolve.config import recipe_of

    planned = [p.key for p in recipe_of(cfg.recipe).phase_list(cfg)]
    saved = run.state.data.get(PHASE_LIST_KEY, run.state.data.get("plan"))
    done = [r.key for r in run.state.records()]
    if saved is None:
        changed = done != planned[: len(done)]
        saved = done
    else:
        changed = saved != planned
    if changed and not force:
        added = [k for k in planned if k not in saved]
        removed = [k for k in saved if k not in planned]
        detail = "; ".join(filter(None, [f"added: {', '.join(added)}" if added else "",
                                         f"removed: {', '.join(removed)}" if removed else "",
                                         "" if added or removed else "same phases, another order"]))
        raise RunStateError(f"{run.path}: recipe {cfg.recipe!r} now goes through other phases than when this run was "
                            f"made ({detail}); the resumed run would not be the run that was started. Resume with "
                            "--force to run the new phase list anyway (finished phases are kept), or start a new run")
    if run.state.data.get(PHASE_LIST_KEY) != planned:
        data = {k: v for k, v in run.state.data.items() if k != "plan"}
        run.state.save({**data, PHASE_LIST_KEY: planned})


EXTENDABLE = ("rounds",)
"""The fields ``coevolve resume`` may change besides ``run.*``: more rounds continue a run (every
finished round is kept); any other field would change phases already done."""


def extension_config(saved: RecipeConfig, overrides: list[str], wanted: RecipeConfig) -> str:
    """The config text a run extended to ``wanted`` keeps (its saved config with ``wanted``'s
    rounds), after checking the extension: only ``EXTENDABLE`` fields among ``overrides`` (the
    non-``run.*`` ones), on a recipe that has rounds, and no fewer rounds than the run has."""
    from coevolve.config import dump_yaml
    from coevolve.errors import ConfigError

    keys = [o.split("=", 1)[0] for o in overrides]
    if bad := [k for k in keys if k not in EXTENDABLE]:
        raise ConfigError(f"{', '.join(bad)}: resume changes only run.* fields and extends a run by its rounds "
                          "(rounds=N); another setting would change phases already done: start a new run for it")
    if "rounds" not in type(saved).model_fields:
        raise ConfigError(f"rounds: a {saved.recipe} run has no rounds to extend; start a new run (e.g. with more "
                          "solver.steps)")
    old, rounds = int(getattr(saved, "rounds")), int(getattr(wanted, "rounds"))
    if rounds < old:
        raise ConfigError(f"rounds={rounds} (command line): this run has {old} rounds; resume continues a run and "
                          "cannot shorten it (export an earlier round's checkpoint instead)")
    return dump_yaml(saved.model_copy(update={"rounds": rounds}))


def extend_run(cfg: RecipeConfig, run: Any, config_yaml: str, force: bool = False) -> list[str]:
    """Make ``run`` (finished or not) the start of a run of ``cfg.rounds`` rounds: every phase done
    is kept; the final stage's phases (they measure the last round) are dropped, with their rows
    at the end of metrics.jsonl, to run again after the new last round; the run's config and phase
    list become the extended run's. Refused, like a changed recipe (``check_phase_list``), unless
    the phases kept come first in the new list in the same order. Returns the dropped phases."""
    from coevolve.config import recipe_of
    from coevolve.run import CONFIG_FILE
    from coevolve.run.files import atomic_write_text

    planned = [p.key for p in recipe_of(cfg.recipe).phase_list(cfg)]
    done = {r.key for r in run.state.records()}
    saved = run.state.data.get(PHASE_LIST_KEY, run.state.data.get("plan")) or [r.key for r in run.state.records()]
    # a round evaluation done as the old last round stays although the new schedule skips it
    kept = [k for k in saved if not k.startswith("final/") and (k in planned or k not in done)]
    kept = [k for k in kept if k in planned]
    if planned[: len(kept)] != kept and not force:
        raise RunStateError(f"{run.path}: the phases done are not the start of the extended run's phases ({len(kept)} "
                            "kept, then a change); resume with --force to run the new list anyway, or start a new run")
    final = [r.key for r in run.state.records() if r.stage == "final"]
    data = copy.deepcopy(run.state.data)
    if final:
        lines = run.metrics.path.read_text(encoding="utf-8").splitlines(keepends=True) if run.metrics.path.exists() else []
        # the final stage runs after every round: its rows are those after the last row of a round
        last = max((i for i, line in enumerate(lines) if line.strip() and json.loads(line).get("round") is not None),
                   default=len(lines) - 1)
        atomic_write_text(run.metrics.path, "".join(lines[: last + 1]))
        data["metrics_bytes"] = run.metrics.size()
        data["phases"] = [p for p in data["phases"] if p["key"] not in final]
    atomic_write_text(run.path / CONFIG_FILE, config_yaml)
    run.state.save({**{k: v for k, v in data.items() if k != "plan"}, PHASE_LIST_KEY: planned})
    return final


@contextlib.contextmanager
def open_run(cfg: RecipeConfig, path: Path, *, new: bool = False, force: bool = False,
             extend: str | None = None) -> Iterator[Any]:
    """The one place a run folder is opened: take its one-writer lock (``run.lock``, held until
    the block ends), create the folder's run (``new``: refuse a folder that already holds one) or
    reopen it (``Run.open``: an unfinished phase's metrics cut, temp files removed), check its
    phase list (``check_phase_list``, ``force``), and bind what the config says about it: master
    seed, checkpoint budget, progress printer, live trackers. A failed write inside the block
    (a full disk) becomes ``RunWriteError``; the trackers are closed on the way out."""
    from coevolve.config import dump_yaml
    from coevolve.rl.learner import OPTIM_FILE
    from coevolve.run import STATE_FILE, Run, say
    from coevolve.run.lock import run_lock
    from coevolve.run.trackers import make_trackers

    path = Path(path)
    with run_lock(path, create=True), write_errors(path):
        if (path / STATE_FILE).is_file() and not new:
            run = Run.open(path)
        else:
            run = Run.create(path, dump_yaml(cfg), cfg.recipe)
        if extend is not None:
            if dropped := extend_run(cfg, run, extend, force):
                say(f"extended to {getattr(cfg, 'rounds')} rounds: {', '.join(dropped)} run again after the last round")
        check_phase_list(cfg, run, force)
        r = cfg.run
        run.bind(seed=r.seed, keep_checkpoints=r.keep_checkpoints, say=say, resume_only=(OPTIM_FILE,))
        run.metrics.attach(make_trackers(r.trackers, run.path, run.metrics.count(), run_id=run_tracker_id(run),
                                         name=run.path.name, project=r.wandb_project, mode=r.wandb_mode,
                                         config=cfg.model_dump(mode="json")))
        try:
            yield run
        finally:
            run.metrics.close()  # live trackers flush and close even when the run stops early


def run_tracker_id(run: Any) -> str:
    """One W&B run per run folder, the same id on every resume (stored in state.json)."""
    from coevolve.run import derive_seed

    if "tracker_id" not in run.state.data:
        tid = derive_seed(int(run.state.data.get("created", 0) * 1000), str(run.path.name))
        run.state.save({**run.state.data, "tracker_id": tid})
    return f"{run.path.name}-{run.state.data['tracker_id']:08x}"


def finished_summary(path: Path) -> dict[str, Any] | None:
    """The summary of a finished run in ``path`` (read only), or None."""
    from coevolve.run import STATE_FILE, SUMMARY_FILE

    state, summary = Path(path) / STATE_FILE, Path(path) / SUMMARY_FILE
    if not (state.is_file() and summary.is_file()):
        return None
    if json.loads(state.read_text(encoding="utf-8")).get("status") != "finished":
        return None
    return json.loads(summary.read_text(encoding="utf-8"))


def execute(cfg: RecipeConfig, path: Path, *, new: bool = False, skip_finished: bool = False,
            force: bool = False, extend: str | None = None) -> dict[str, Any]:
    """Run ``cfg``'s recipe in the run folder ``path``: create it, or resume it when it already
    holds a run (``new``: refuse that); record the status (running / interrupted / failed /
    finished) in its state. With ``skip_finished``, a finished run is not reopened and its
    summary is returned. ``extend``: the config text of the run given more rounds
    (``extension_config``; ``coevolve resume RUN rounds=N``).

    The folder is opened once (``open_run``: lock, phase-list check, binding); a write that fails
    (a full disk) ends the run as ``RunWriteError``: every finished phase is intact on disk and
    ``coevolve resume`` continues once there is room. ``run.threads`` sets torch's CPU threads for
    the run and is restored after it, so a later run in the same process starts as a fresh one."""
    import torch

    from coevolve.config import recipe_of
    from coevolve.recipes.common import run_recipe

    if skip_finished and (done := finished_summary(path)) is not None:
        return done
    recipe = recipe_of(cfg.recipe)
    threads = torch.get_num_threads()
    with open_run(cfg, path, new=new, force=force, extend=extend) as run:
        if cfg.run.threads:
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
            torch.set_num_threads(threads)
        run.state.set_status("finished")
        return summary


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
