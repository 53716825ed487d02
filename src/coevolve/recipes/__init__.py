"""One readable file per recipe (``grpo``, ``d2evo``, ``diagevo``), each declaring its phases once
(``declare.Recipe``) and named by the registry (``registry``), over shared building blocks, one
file each: the run's parts (``setup``), the run loop (``runner``), the evaluation and probe steps
(``evaluation``, ``probe``, ``eval_cache``), round selection (``selection``), the summary
(``summary``) and resuming (``resume``); here ``execute``: how every entry point (the CLI, the
study) opens a run folder and runs one."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from coevolve.config import dump_yaml
from coevolve.config.sections import RecipeConfig
from coevolve.errors import RunStateError
from coevolve.provenance import record_provenance
from coevolve.recipes.registry import recipe_of
from coevolve.recipes.resume import (
    CONFIG_PRINT_KEY,
    EXTENDABLE,
    PHASE_LIST_KEY,
    check_config_print,
    check_phase_list,
    extend_run,
    extension_config,
)
from coevolve.rl.learner import OPTIM_FILE
from coevolve.run import STATE_FILE, SUMMARY_FILE, Run, derive_seed, say
from coevolve.run.lock import run_lock
from coevolve.run.trackers import make_trackers

WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})
"""Errors of a write that the run cannot fix itself (full disk, quota, I/O error, read-only)."""


class RunWriteError(RunStateError):
    """The run folder could not be written (full disk ...); its last finished phase is intact."""


@contextlib.contextmanager
def open_run(
    cfg: RecipeConfig,
    path: Path,
    *,
    new: bool = False,
    force: bool = False,
    extend: str | None = None,
    said: Sequence[str] = (),
) -> Iterator[Any]:
    """The one place a run folder is opened: take its one-writer lock (``run.lock``, held until
    the block ends), create the folder's run (``new``: refuse a folder that already holds one) or
    reopen it (``Run.open``: an unfinished phase's metrics cut, temp files removed), check its
    phase list (``check_phase_list``, ``force``), and bind what the config says about it: master
    seed, checkpoint budget, progress printer (run.log gets ``said``, what the command printed
    before the folder existed), live trackers. A failed write inside the block
    (a full disk) becomes ``RunWriteError``; the trackers are closed on the way out."""
    path = Path(path)
    with run_lock(path, create=True), write_errors(path):
        created = not ((path / STATE_FILE).is_file() and not new)
        run = Run.create(path, dump_yaml(cfg), cfg.recipe) if created else Run.open(path)
        record_provenance(run.path, created)  # versions, git commit, device: one entry per start
        if extend is not None:
            for line in extend_run(cfg, run, extend, force):
                say(line)
        check_phase_list(cfg, run, force)
        for line in check_config_print(cfg, run, force, extended=extend is not None):
            say(line)
        r = cfg.run
        run.bind(
            seed=r.seed,
            keep_checkpoints=r.keep_checkpoints,
            say=say,
            resume_only=(OPTIM_FILE,),
            save_every=r.save_every,
            progress=r.progress,
            said=tuple(said),
        )
        run.metrics.attach(
            make_trackers(
                r.trackers,
                run.path,
                run.metrics.trained(),
                run_id=run_tracker_id(run),
                name=run.path.name,
                project=r.wandb_project,
                mode=r.wandb_mode,
                config=cfg.model_dump(mode="json"),
            )
        )
        try:
            yield run
        finally:
            run.metrics.close()  # live trackers flush and close even when the run stops early


def run_tracker_id(run: Any) -> str:
    """One W&B run per run folder, the same id on every resume (stored in state.json)."""
    if "tracker_id" not in run.state.data:
        tid = derive_seed(int(run.state.data.get("created", 0) * 1000), str(run.path.name))
        run.state.save({**run.state.data, "tracker_id": tid})
    return f"{run.path.name}-{run.state.data['tracker_id']:08x}"


def finished_summary(path: Path) -> dict[str, Any] | None:
    """The summary of a finished run in ``path`` (read only), or None."""
    state, summary = Path(path) / STATE_FILE, Path(path) / SUMMARY_FILE
    if not (state.is_file() and summary.is_file()):
        return None
    if json.loads(state.read_text(encoding="utf-8")).get("status") != "finished":
        return None
    return json.loads(summary.read_text(encoding="utf-8"))


def execute(
    cfg: RecipeConfig,
    path: Path,
    *,
    new: bool = False,
    skip_finished: bool = False,
    force: bool = False,
    extend: str | None = None,
    report: Callable[[Path], Path] | None = None,
    said: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``cfg``'s recipe in the run folder ``path``: create it, or resume it when it already
    holds a run (``new``: refuse that); record the status (running / interrupted / failed /
    finished) in its state. With ``skip_finished``, a finished run is not reopened and its
    summary is returned. ``extend``: the config text of the run given more rounds
    (``extension_config``; ``coevolve resume RUN rounds=N``). ``report``: what writes the run's
    report after its summary, inside the run (``lab.report.write_report``, passed down by the
    commands above the library: the recipes never import the lab); None writes none. ``said``:
    the command's lines before the folder existed (its preflight), for run.log.

    The folder is opened once (``open_run``: lock, phase-list check, binding); a write that fails
    (a full disk) ends the run as ``RunWriteError``: every finished phase is intact on disk and
    ``coevolve resume`` continues once there is room. ``run.threads`` sets torch's CPU threads for
    the run and is restored after it, so a later run in the same process starts as a fresh one."""
    import torch

    from coevolve.recipes.runner import run_recipe  # lazy: pulls scipy

    if skip_finished and (done := finished_summary(path)) is not None:
        return done
    recipe = recipe_of(cfg.recipe)
    threads = torch.get_num_threads()
    with open_run(cfg, path, new=new, force=force, extend=extend, said=said) as run:
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        try:  # a failed "running" write is a failure like any other: recorded when the disk lets it
            run.state.set_status("running")
            summary = run_recipe(recipe, cfg, run, report)
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


FULL_BYTES = 1 << 20
"""Free space under which a failed write is taken for a full disk (ours)."""


def disk_full(e: BaseException, path: Path) -> bool:
    """Whether ``e`` is a write the run cannot fix itself: an ``OSError`` of ``WRITE_ERRNOS``, or
    what the libraries that write inside a checkpoint raise instead on a full disk (safetensors'
    ``SafetensorError`` naming os error 28, torch's ``RuntimeError`` "unexpected pos"), told apart
    by the ``OSError`` it was raised during (torch.save into a Python file object keeps it), by the
    text, or by the folder's file system having (almost) no room left."""
    if isinstance(e, OSError):
        return e.errno in WRITE_ERRNOS
    if isinstance(e.__context__, OSError):  # torch.save into a Python file: the write's own error
        return e.__context__.errno in WRITE_ERRNOS
    if not isinstance(e, RuntimeError) and type(e).__name__ != "SafetensorError":
        return False
    if "No space left on device" in str(e) or "os error 28" in str(e):
        return True
    try:
        st = os.statvfs(next(p for p in (Path(path), *Path(path).parents) if p.exists()))
    except (OSError, StopIteration):
        return False
    return st.f_bavail * st.f_frsize < FULL_BYTES


@contextlib.contextmanager
def write_errors(path: Path) -> Iterator[None]:
    """Turn a failed write into the clear ``RunWriteError`` (how to continue, no traceback)."""
    try:
        yield
    except Exception as e:
        if not disk_full(e, path):
            raise
        said = " ".join(str(e).split())  # torch's text spans lines
        raise RunWriteError(
            f"writing the run folder failed ({said[:200]}); every finished phase is intact: free space "
            f"(or fix the disk), then `coevolve resume {path}` continues"
        ) from e


__all__ = [
    "CONFIG_PRINT_KEY",
    "EXTENDABLE",
    "PHASE_LIST_KEY",
    "RunWriteError",
    "check_config_print",
    "check_phase_list",
    "execute",
    "extend_run",
    "extension_config",
    "open_run",
    "write_errors",
]
