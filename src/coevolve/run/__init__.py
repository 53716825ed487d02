"""The run folder: config snapshot, phase state, metrics log, per-phase artefacts, checkpoints.

Resume model: a recipe is a sequence of named phases (``Phase("difficulty", round=1)`` ->
``01/difficulty``, ``Phase.base("eval")`` -> ``base/eval``). Each phase is a function of the
config, the artefacts on disk and the latest checkpoints, with its own seed derived from the
master seed and the phase key. A phase writes its artefacts atomically, then is marked done in
``state.json`` (also atomic). A run killed at any moment (even ``kill -9``) therefore resumes at
the first phase not marked done, from exactly the same inputs, and produces exactly the same
results as a run that was never interrupted.

Three jobs, three parts: ``PhaseState`` (``state.json``), ``MetricsLog`` (``metrics.jsonl``) and
the artefact files (``files``); ``Run`` binds them with the master seed and the progress printer.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.errors import RunStateError
from coevolve.faults import fault_point
from coevolve.jsonl import read_jsonl
from coevolve.run.children import check_children
from coevolve.run.compute import Compute, ComputeMeter, cumulative, cut_off_warning
from coevolve.run.digests import folder_digests, verify_digests
from coevolve.run.files import TMP_SUFFIX, atomic_write_json, atomic_write_jsonl, atomic_write_text
from coevolve.run.journal import CallJournal
from coevolve.run.lock import LOCK_FILE, check_run_dir
from coevolve.run.metrics import MetricsLog
from coevolve.run.rng import random_states, set_random_states
from coevolve.run.state import CONTINUED_KEY, MID_SAVE_KEY, PhaseRecord, PhaseState

STATE_FILE = "state.json"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
LOG_FILE = "run.log"
"""Every line the run says (phases, notes, warnings), appended by each start and resume."""
SAVES_DIR = "saves"
"""The run folder's mid-phase saves (``run.save_every``): ``<phase key>_<number>/`` with the
phase's ``saved.json`` and what its writer put beside it (``Run.mid_save``)."""
SAVED_FILE = "saved.json"
Say = Callable[[str], None]


def say(msg: str) -> None:
    """One-line progress message on stderr."""
    from rich.console import Console

    Console(stderr=True).print(msg, highlight=False, markup=False)


def derive_seed(master: int, *parts: Any) -> int:
    """Stable 31-bit seed from the master seed and a phase key (independent of PYTHONHASHSEED)."""
    h = hashlib.sha256(repr((master,) + parts).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass(frozen=True)
class Phase:
    """Where a phase sits: a round 1..T, or a stage outside the rounds (``base``, ``final``)."""

    name: str
    round: int | None = None
    stage: str = ""

    @classmethod
    def base(cls, name: str) -> Phase:
        return cls(name, None, "base")

    @classmethod
    def final(cls, name: str) -> Phase:
        return cls(name, None, "final")

    @property
    def folder(self) -> str:
        """Artefact folder of the phase, relative to the run folder."""
        return f"round_{self.round:02d}" if self.round is not None else self.stage

    @property
    def key(self) -> str:
        return f"{self.round:02d}/{self.name}" if self.round is not None else f"{self.stage}/{self.name}"


@dataclass
class PhaseResult:
    """What a phase returns: small JSON-able figures (kept in state.json and summary.json), the
    rollouts it drew, the checkpoints it wrote (``{role: folder}``), which become that role's
    resume point in the same atomic write that marks the phase done, and ``problem``: why a phase
    that should have done its job did not (e.g. trained on nothing), reported in summary.json."""

    values: dict[str, Any] = field(default_factory=dict)
    rollouts: int = 0
    checkpoints: dict[str, Path] = field(default_factory=dict)
    problem: str | None = None
    pins: dict[str, Path] = field(default_factory=dict)
    """Checkpoints (``{role: folder}``) kept beyond ``run.keep_checkpoints``: the round
    ``run.select`` picks so far, so it can still be exported when the run ends."""


@dataclass
class PhaseContext:
    """Handed to a phase function: its seed, its artefact folder, its metrics logger and the
    meter of its compute (``coevolve.run.compute``). ``prior``: the book of the steps the phase
    already took when it is continued with more (``coevolve resume RUN solver.steps=N``:
    ``recipes.extend_run``; ``training.StepBook.state``), else None."""

    phase: Phase
    seed: int
    dir: Path
    metrics: MetricsLog
    say: Say
    compute: ComputeMeter = field(default_factory=ComputeMeter)
    prior: dict[str, Any] | None = None
    run_dir: Path | None = None  # the run folder (its ``children.json`` lists the phase's child processes)
    saved: dict[str, Any] | None = None
    """The phase's last mid-phase save when the phase resumes from one (what its writer returned,
    with ``dir``: the save's folder), else None."""
    saver: Callable[[Callable[[Path], dict[str, Any]]], None] | None = None

    def mid_save(self, write: Callable[[Path], dict[str, Any]]) -> None:
        """A mid-phase save: ``write(folder)`` fills a fresh folder and returns what the phase
        needs to go on (JSON); it becomes the phase's resume point (``ctx.saved`` of a resumed run)
        in one atomic step. A no-op outside a run (a bare context)."""
        if self.saver is not None:
            self.saver(write)

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """One metrics line tagged with this phase's round and name (and ``step``)."""
        self.metrics.log(metrics, round=self.phase.round, phase=self.phase.name, step=step)


class Run:
    """A run folder. ``Run.create`` makes one, ``Run.open`` reopens it for resuming."""

    def __init__(
        self, path: Path, state: PhaseState, *, seed: int = 0, keep_checkpoints: int = 2, say: Say = say
    ) -> None:
        # absolute: artefact paths are built both from the folder (``ctx.dir``) and relative to it
        # (``write_jsonl(rel)``), and a relative folder (``runs/...``) would be joined twice
        self.path = Path(path).absolute()
        self.state = state
        self.metrics = MetricsLog(self.path / METRICS_FILE)
        self.seed = seed
        self.keep_checkpoints = keep_checkpoints
        self.say = say
        self.resume_only: tuple[str, ...] = ()  # checkpoint files only the newest checkpoint of a role keeps
        self.meter = ComputeMeter()  # the running phase's compute; reset by every phase, kept in its record
        # the config field a phase's completion cap comes from, named by its cut-off warning
        self.budget_fields: dict[str, str] = {}
        # the run's grader counters (``GraderStats.decided``): each phase logs what it added
        self.grader_counts: Callable[[], dict[str, int]] = dict
        self.save_every = 0  # run.save_every (``bind``)
        self.progress = False  # run.progress (``bind``): a bar per phase that samples without training
        self.expected: int | None = None  # the next phase's answers (``expect``), its bar's total
        self.journal = CallJournal()  # the running phase's sampler calls (``run.journal``)

    @classmethod
    def create(cls, path: Path, config_yaml: str, recipe: str, **kw: Any) -> Run:
        path = Path(path)
        check_run_dir(path)
        if (path / STATE_FILE).exists():
            raise RunStateError(f"{path} already holds a run; use `coevolve resume {path}` or choose another --run-dir")
        own = lambda n: n in OWN_FILES or (n.startswith(".") and n.endswith(TMP_SUFFIX))  # noqa: E731
        theirs = sorted(p.name for p in path.iterdir() if not own(p.name)) if path.is_dir() else []
        if theirs:  # a run writes config.yaml, summary.json, report/ there and clears .*.tmp files below it
            shown = ", ".join(theirs[:5]) + (f" and {len(theirs) - 5} more" if len(theirs) > 5 else "")
            raise RunStateError(
                f"run folder {path} exists and holds files that are not a run's ({shown}); a run would overwrite "
                "or delete some of them: choose a new or empty --run-dir (or run.name)"
            )
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path / CONFIG_FILE, config_yaml)
        return cls(path, PhaseState.new(path / STATE_FILE, recipe), **kw)

    @classmethod
    def open(cls, path: Path, **kw: Any) -> Run:
        """Reopen a run folder to continue it: cuts the metrics of an unfinished phase and removes
        temp files a killed writer left, so only the folder's one writer (``run.lock``) opens it."""
        path = Path(path)
        if not (path / STATE_FILE).is_file() or not (path / CONFIG_FILE).is_file():
            raise RunStateError(f"{path} is not a coevolve run folder (no {STATE_FILE} / {CONFIG_FILE})")
        check_children(path)  # a trainer a killed driver started must not write beside this one
        run = cls(path, PhaseState.load(path / STATE_FILE), **kw)
        # a phase that resumes from its mid-phase save keeps the rows it had logged by then
        mid = run.state.data.get(MID_SAVE_KEY) or run.state.data
        run.metrics.truncate(int(mid.get("metrics_bytes", 0)))
        if dropped := run.metrics.cut_torn_line():
            say(f"[warn] {run.metrics.path}: cut an unfinished last line ({dropped} bytes) a killed writer left")
        for tmp in list(path.rglob(f".*{TMP_SUFFIX}")):  # what a killed writer left half-written (files.py,
            if tmp.is_dir():  # checkpoint staging folders)
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
        verify_digests(path.resolve(), run.state.data)
        return run

    def bind(
        self,
        *,
        seed: int,
        keep_checkpoints: int,
        say: Say = say,
        resume_only: tuple[str, ...] = (),
        save_every: int = 0,
        progress: bool = False,
        said: tuple[str, ...] = (),
    ) -> Run:
        """Bind the run's master seed, checkpoint budget, printer, the checkpoint files only a
        role's newest checkpoint keeps, ``run.save_every`` and ``run.progress`` (from its config;
        ``recipes.open_run``). ``said``: what the command printed before the folder existed (the
        preflight's notes and warnings), added to run.log (not printed again)."""
        self.seed, self.keep_checkpoints, self.resume_only = seed, keep_checkpoints, resume_only
        self.save_every, self.progress = save_every, progress
        for msg in said:
            self.log_line(msg)

        def say_and_log(msg: str) -> None:
            say(msg)
            self.log_line(msg)

        self.say = say_and_log
        return self

    def log_line(self, msg: str) -> None:
        """Append ``msg`` to run.log, time-stamped."""
        with open(self.path / LOG_FILE, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}\n")

    def expect(self, answers: int | None) -> None:
        """The answers the next phase samples (its declared work, ``recipes.runner``): the total of
        its progress bar (None: no bar, e.g. a GRPO phase, which shows its steps)."""
        self.expected = answers

    # -- phases ------------------------------------------------------------------------------
    def done(self, phase: Phase) -> bool:
        return self.state.record(phase.key) is not None

    def result(self, phase: Phase) -> PhaseRecord | None:
        return self.state.record(phase.key)

    def phase(self, phase: Phase, fn: Callable[[PhaseContext], PhaseResult]) -> PhaseRecord:
        """Run ``fn`` unless ``phase`` is already done; return the phase's record either way.
        ``fn`` must write its artefacts (atomically, into ``ctx.dir``) before returning."""
        rec = self.state.record(phase.key)
        if rec is not None:
            self.say(f"[skip] {phase.key} (done)")
            return rec
        seed = derive_seed(self.seed, phase.key)
        seed_everything(seed)
        # a phase continued with more steps: its record and book as it had finished with fewer
        prior = self.state.data.get(CONTINUED_KEY, {}).get(phase.key)
        mid = self.state.data.get(MID_SAVE_KEY)
        mid = mid if mid is not None and mid["key"] == phase.key else None
        saved = None
        if mid is not None:  # resumed from its last mid-phase save: what it had counted by then
            saved = self._read_mid_save(phase, mid)
            prior = {**(prior or {}), "record": {"seconds": mid["seconds"]}, "grader": mid["grader"]}
        note = f" (from its mid-phase save {mid['number']})" if mid else " (continued)" if prior else ""
        self.say(f"[phase] {phase.key}{note}")
        self.meter.reset()
        counts0, t0 = self.grader_counts(), time.perf_counter()
        ctx = PhaseContext(
            phase,
            seed,
            self.path / phase.folder,
            self.metrics,
            self.say,
            self.meter,
            prior=prior.get("book") if prior else None,
            run_dir=self.path,
            saved=saved,
            saver=lambda write: self.mid_save(phase, write, counts0, t0, prior),
        )
        ctx.dir.mkdir(parents=True, exist_ok=True)
        self.journal.start(
            self.save_every, lambda write: self.mid_save(phase, write, counts0, t0, prior, rerun=True), saved, self.say
        )
        bar = self._bar(phase)
        try:
            res = fn(ctx)
        finally:
            self.journal.stop()
            if bar is not None:
                bar.close()
                self.meter.tick = None
        seconds = time.perf_counter() - t0 + (prior["record"]["seconds"] if prior else 0.0)
        rec = PhaseRecord(
            phase.key, phase.name, phase.round, phase.stage, res.values, res.rollouts, seconds, time.time(),
            res.problem, self.meter.total.to_dict(),
        )  # fmt: skip
        ctx.log(self._end_figures(rec, counts0, prior))
        self._finish(rec, res, ctx.dir)
        return rec

    def _finish(self, rec: PhaseRecord, res: PhaseResult, folder: Path) -> None:
        """The phase's cut-off warning and problem lines, then its record (the done mark)."""
        budget = self.budget_fields.get(rec.name, "sampling.max_new_tokens")
        warning = cut_off_warning(rec.key, self.meter.total, budget)
        if warning:
            self.say(warning)
        if res.problem:
            self.say(f"[problem] {rec.key}: {res.problem}")
        self._record(rec, res, folder)

    def _read_mid_save(self, phase: Phase, mid: dict[str, Any]) -> dict[str, Any]:
        """What the phase had counted at its last mid-phase save (``saved.json``), with the save's
        folder and the chain of saves before it."""
        folder = self.path / mid["dir"]
        try:
            saved = {**json.loads((folder / SAVED_FILE).read_text(encoding="utf-8")), "dir": folder}
        except (OSError, ValueError) as e:
            raise RunStateError(
                f"{folder}: the mid-phase save {phase.key} resumes from cannot be read ({e}); remove "
                f"'{MID_SAVE_KEY}' from {self.state.path} to run the phase again from its start"
            ) from None
        saved["chain"] = [self.path / rel for rel in mid.get("chain", [mid["dir"]])]
        return saved

    def _bar(self, phase: Phase) -> Any:
        """A progress bar over the answers a phase samples (``expect``; an adaptive loop may stop
        short of it), moved by every sampler call (``ComputeMeter.tick``); None without one."""
        expected, self.expected = self.expected, None
        if not self.progress or not expected:
            return None
        from tqdm.auto import tqdm  # lazy: only runs that show progress

        bar = tqdm(total=expected, desc=phase.key, unit="answer", leave=False, dynamic_ncols=True)
        self.meter.tick = bar.update
        return bar

    def mid_save(
        self,
        phase: Phase,
        write: Callable[[Path], dict[str, Any]],
        counts0: dict[str, int],
        t0: float,
        prior: dict[str, Any] | None,
        rerun: bool = False,
    ) -> None:
        """Save the running ``phase`` mid-way: ``write(folder)`` fills a staging folder and returns
        its JSON (``saved.json``); the folder is renamed into ``saves/`` and then named in
        state.json (``MID_SAVE_KEY``) with the metrics log's length, the phase's grader counters
        and seconds so far; the save before it is deleted last. A kill at any moment leaves the
        last save or this one as the resume point, whole (a staging folder is removed by
        ``Run.open``, an unnamed folder by the next save or the phase's end).

        ``rerun``: a save of what the phase's calls returned (``run.journal``): the resumed phase
        runs again from its start, so the log is cut to where the phase began and its grader
        counters start from nothing; the phase's earlier saves stay (``chain``: each holds the
        calls after the one before)."""
        last = self.state.data.get(MID_SAVE_KEY)
        last = last if last is not None and last["key"] == phase.key else None
        number = last["number"] + 1 if last is not None else 1
        rel = f"{SAVES_DIR}/{_save_stem(phase)}{number:06d}"
        final = self.path / rel
        staging = final.with_name(f".{final.name}{TMP_SUFFIX}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            atomic_write_json(staging / SAVED_FILE, write(staging))
        except BaseException:  # a full disk: nothing half-written stays
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fault_point("save")
        shutil.rmtree(final, ignore_errors=True)  # the same number left unnamed by a killed save
        os.replace(staging, final)
        seconds = time.perf_counter() - t0 + (prior["record"]["seconds"] if prior else 0.0)
        entry: dict[str, Any] = {"key": phase.key, "dir": rel, "number": number, "seconds": seconds}
        if rerun:
            chain = [*(last.get("chain", []) if last is not None else []), rel]
            entry.update(
                metrics_bytes=int(self.state.data.get("metrics_bytes", 0)),
                grader=dict((prior or {}).get("grader") or {}),
                chain=chain,
            )
        else:
            chain = [rel]
            entry.update(
                metrics_bytes=self.metrics.size(),
                grader=grader_metrics(phase.name, counts0, self.grader_counts(), (prior or {}).get("grader")),
            )
        self.state.save({**self.state.data, MID_SAVE_KEY: entry})
        self._drop_saves(phase, keep=chain)

    def _drop_saves(self, phase: Phase, keep: list[str] = []) -> None:  # noqa: B006 (read only)
        """Delete ``phase``'s mid-phase save folders but those in ``keep`` (relative)."""
        for old in (self.path / SAVES_DIR).glob(f"{_save_stem(phase)}[0-9]*"):
            if old.is_dir() and str(old.relative_to(self.path)) not in keep:
                shutil.rmtree(old, ignore_errors=True)

    def _end_figures(self, rec: PhaseRecord, counts0: Any, prior: dict[str, Any] | None) -> dict[str, Any]:
        """The metrics row of a phase's end: its time and rollouts, the share of its completions
        cut off, the grader's counters over the phase (a continued phase's first end's added), and
        the run's compute so far (this phase's included)."""
        name = rec.name
        share = self.meter.total.cut_off_share()
        return {
            f"phase/{name}/seconds": round(rec.seconds, 3),
            f"phase/{name}/rollouts": rec.rollouts,
            **({} if share is None else {f"phase/{name}/cut_off_share": share}),
            **grader_metrics(name, counts0, self.grader_counts(), (prior or {}).get("grader")),
            **compute_metrics(self.state.records() + [rec]),
        }

    def _record(self, rec: PhaseRecord, res: PhaseResult, folder: Path) -> None:
        """Mark ``rec`` done with the hashes of what it left and move its roles' checkpoints."""
        root = self.path.resolve()
        known = {k: v for r in self.state.records() for k, v in (r.digests or {}).items()}
        found = folder_digests(
            root, [folder, *res.checkpoints.values()]
        )  # a round's folder holds its earlier phases' too
        rec.digests = {k: v for k, v in found.items() if known.get(k) != v}
        ckpts = {role: str(Path(p).resolve().relative_to(root)) for role, p in res.checkpoints.items()}
        pins = {role: str(Path(p).resolve().relative_to(root)) for role, p in res.pins.items()}
        for rel in self.state.finish(rec, ckpts, self.keep_checkpoints, self.metrics.size(), pins):
            shutil.rmtree(self.path / rel, ignore_errors=True)
        self._drop_saves(Phase(rec.name, rec.round, rec.stage))  # one a kill left unnamed too
        self.metrics.flush()  # live trackers hold the phase's rows before the next phase starts
        for role in ckpts:  # older checkpoints stay loadable models; only a resume needs optimiser state
            for rel in self.state.data["checkpoint_history"].get(role, [])[:-1]:
                for name in self.resume_only:
                    (self.path / rel / name).unlink(missing_ok=True)

    def checkpoint(self, role: str) -> Path | None:
        """The role's latest checkpoint folder (None before its first one)."""
        rel = self.state.checkpoint(role)
        return None if rel is None else self.path / rel

    def checkpoint_dir(self, role: str, tag: str) -> Path:
        return self.path / "checkpoints" / f"{role}_{tag}"

    # -- artefacts ----------------------------------------------------------------------------
    def write_json(self, rel: str | Path, obj: Any) -> Path:
        atomic_write_json(self.path / rel, obj)
        return self.path / rel

    def write_jsonl(self, rel: str | Path, rows: Iterable[Any]) -> Path:
        atomic_write_jsonl(self.path / rel, rows)
        return self.path / rel

    def read_jsonl(self, rel: str | Path) -> list[dict[str, Any]]:
        return read_jsonl(self.path / rel)


def _save_stem(phase: Phase) -> str:
    """The name a phase's mid-phase save folders start with (``01_solver_``)."""
    return phase.key.replace("/", "_") + "_"


def grader_metrics(
    name: str, before: dict[str, int], after: dict[str, int], prior: dict[str, int] | None = None
) -> dict[str, int]:
    """``phase/<name>/grader_<counter>``: what the phase added to the grader's counters
    (timeouts, errors, refusals by the over-limit rule, comparisons, worker requests); ``prior``:
    a continued phase's figures when it first ended, which its continuation adds to."""
    prior = prior or {}
    return {
        (key := f"phase/{name}/grader_{k}"): v - before.get(k, 0) + int(prior.get(key, 0)) for k, v in after.items()
    }


def compute_metrics(records: list[PhaseRecord]) -> dict[str, int]:
    """``compute/train/<counter>`` and ``compute/eval/<counter>``: the run's cumulative compute
    once the last of ``records`` finished (nothing for a run whose older phases have none)."""
    points = cumulative(records)
    if not points:
        return {}
    last = points[-1]
    return {
        f"compute/{part}/{k}": v
        for part, c in (("train", last.train), ("eval", last.eval))
        for k, v in c.to_dict().items()
    }


def read_recipe(path: Path) -> str:
    """The recipe of the run in folder ``path``, read without opening the run (no lock taken,
    nothing written); ``RunStateError`` when ``path`` holds no run."""
    path = Path(path)
    if not (path / STATE_FILE).is_file() or not (path / CONFIG_FILE).is_file():
        raise RunStateError(f"{path} is not a coevolve run folder (no {STATE_FILE} / {CONFIG_FILE})")
    return PhaseState.load(path / STATE_FILE).recipe


def eval_folder(path: Path, which: str = "last", round_number: int | None = None) -> Path | None:
    """The folder (``<phase folder>/eval``) of the run's base evaluation (``which="base"``), of
    round ``round_number``'s when given and finished, else of its last finished one; read only,
    None when the run has no such evaluation (or no state.json)."""
    f = Path(path) / STATE_FILE
    if not f.is_file():
        return None
    recs = [r for r in PhaseState.load(f).records() if r.name == "eval" and (r.stage == "base") == (which == "base")]
    chosen = [r for r in recs if round_number is not None and r.round == round_number] or recs
    if not chosen:
        return None
    last = chosen[-1]
    return Path(path) / Phase(last.name, last.round, last.stage).folder / "eval"


def eval_items(path: Path, which: str = "final", bench: str = "skill") -> list[dict[str, Any]] | None:
    """Per-item records (``items_<bench>.jsonl``) of a run folder's base (``which="base"``) or
    last evaluation; None when the run has none."""
    folder = eval_folder(path, which)
    items = folder / f"items_{bench}.jsonl" if folder is not None else None
    if items is None or not items.is_file():
        return None
    return read_jsonl(items)


OWN_FILES = frozenset({LOCK_FILE, CONFIG_FILE, LOG_FILE, "provenance.json"})
"""What a run folder may hold before its state.json: the lock and the files a start killed before
its first phase left (a fresh ``coevolve run`` there is that start again)."""


def default_run_path(root: str | Path, recipe: str, name: str | None) -> Path:
    return Path(root) / (name or f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}")


__all__ = [
    "CONFIG_FILE",
    "CONTINUED_KEY",
    "Compute",
    "ComputeMeter",
    "METRICS_FILE",
    "STATE_FILE",
    "SUMMARY_FILE",
    "Phase",
    "PhaseContext",
    "PhaseRecord",
    "PhaseResult",
    "PhaseState",
    "Run",
    "default_run_path",
    "derive_seed",
    "eval_folder",
    "eval_items",
    "random_states",
    "read_recipe",
    "say",
    "seed_everything",
    "set_random_states",
]
