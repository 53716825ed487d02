"""``state.json``: which phases are done, what they produced, where each role resumes from.

One JSON document, rewritten atomically at every phase boundary: a phase's record and the
checkpoints it produced move in the same write, so a crash can never leave a checkpoint pointer
ahead of the phase log (or behind it).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from coevolve.errors import RunStateError
from coevolve.faults import fault_point
from coevolve.run.files import atomic_write_json

STATE_FORMAT = 2
CONTINUED_KEY = "continued"
"""state.json's phases to be continued with more steps: phase key -> its ``record`` and its
``book`` (``training.StepBook.state``) as it finished with fewer; kept here, not read from the
phase folder, so a continuation killed at any moment starts again from the same point."""
MID_SAVE_KEY = "mid_phase_save"
"""state.json's last mid-phase save (``run.save_every``) of the running phase: its ``key``, its
folder ``dir`` (relative), its ``number``, and what the run had at that moment: ``metrics_bytes``
(the log is cut back to it on resume), ``grader`` (the phase's grader counters so far) and
``seconds``; a question loop's saves also list their ``chain`` of folders (``run.journal``).
Named here only once the folder is complete; gone when the phase is done."""


def check_paths(path: Path, data: dict[str, Any]) -> None:
    """Every checkpoint path in state.json must be relative and stay inside the run folder:
    stale ones are deleted, so ``../x`` or ``/x`` would delete a folder outside the run."""
    found = [*data.get("checkpoints", {}).values(), *data.get("pinned", {}).values()]
    if MID_SAVE_KEY in data:
        found += [data[MID_SAVE_KEY].get("dir"), *data[MID_SAVE_KEY].get("chain", [])]
    for hist in data.get("checkpoint_history", {}).values():
        found += hist
    for rel in found:
        if not isinstance(rel, str) or not rel or PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
            raise RunStateError(
                f"{path}: checkpoint path {str(rel)[:200]!r} is not a relative path inside the run folder"
            )


@dataclass
class PhaseRecord:
    """A finished phase: where it sits in the run, its figures, rollouts and wall time, and its
    ``compute`` (``coevolve.run.compute.Compute`` as a dict; None in runs made before it existed)."""

    key: str
    name: str
    round: int | None
    stage: str
    values: dict[str, Any] = field(default_factory=dict)
    rollouts: int = 0
    seconds: float = 0.0
    finished: float = 0.0
    problem: str | None = None
    compute: dict[str, int] | None = None
    digests: dict[str, str] | None = None  # sha256 per file it left (run.digests; None in older runs)


class PhaseState:
    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = Path(path)
        self.data = data

    @classmethod
    def new(cls, path: Path, recipe: str) -> PhaseState:
        state = cls(
            path,
            {
                "format": STATE_FORMAT,
                "recipe": recipe,
                "created": time.time(),
                "status": "running",
                "phases": [],
                "checkpoints": {},
                "checkpoint_history": {},
                "metrics_bytes": 0,
            },
        )
        state.save()
        return state

    @classmethod
    def load(cls, path: Path) -> PhaseState:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RunStateError(f"{path} is corrupt: {e}") from None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            got = data.get("format", 1) if isinstance(data, dict) else "?"
            raise RunStateError(
                f"{path}: run state format {got}, this coevolve reads format {STATE_FORMAT}; the run was "
                "made by an older coevolve: resume it with that version, or start a new run"
            )
        check_paths(path, data)
        return cls(path, data)

    def save(self, data: dict[str, Any] | None = None) -> None:
        """Write ``data`` (default: the current state) and make it the current state only once it
        is on disk: a failed write (full disk) leaves file and memory at the last good state, so a
        later save (the ``failed`` status) cannot write a half-made change."""
        data = self.data if data is None else data
        fault_point("state")
        atomic_write_json(self.path, data)
        self.data = data

    # -- phases ----------------------------------------------------------------------------
    @property
    def recipe(self) -> str:
        return str(self.data.get("recipe", ""))

    def records(self) -> list[PhaseRecord]:
        """Finished phases in the order they finished."""
        return [PhaseRecord(**r) for r in self.data["phases"]]

    def record(self, key: str) -> PhaseRecord | None:
        return next((PhaseRecord(**r) for r in self.data["phases"] if r["key"] == key), None)

    def finish(
        self,
        rec: PhaseRecord,
        checkpoints: dict[str, str],
        keep: int,
        metrics_bytes: int,
        pins: dict[str, str] | None = None,
    ) -> list[str]:
        """Record a finished phase and move the roles' resume points in one atomic write;
        return checkpoint folders (relative) that fell out of the last ``keep`` per role, and the
        phase's mid-phase save.
        ``pins``: a checkpoint per role kept beyond ``keep`` (the round ``run.select`` picks so
        far), replacing the role's earlier pin, which then falls out like any other."""
        data = copy.deepcopy(self.data)
        data["phases"].append(asdict(rec))
        if rec.key in data.get(CONTINUED_KEY, {}):  # a phase continued with more steps is done again
            del data[CONTINUED_KEY][rec.key]
            if not data[CONTINUED_KEY]:
                del data[CONTINUED_KEY]
        data["metrics_bytes"] = metrics_bytes
        mid = data.get(MID_SAVE_KEY)
        if mid is not None and mid["key"] == rec.key:  # the phase's mid-phase save is no resume point now
            del data[MID_SAVE_KEY]
        pinned = data.setdefault("pinned", {}) if pins else data.get("pinned", {})
        pinned.update(pins or {})
        stale = []
        for role in {*checkpoints, *(pins or {})}:
            hist = data["checkpoint_history"].setdefault(role, [])
            if (rel := checkpoints.get(role)) is not None:
                if rel not in hist:
                    hist.append(rel)
                data["checkpoints"][role] = rel
            for h in [h for h in hist[:-keep] if h != pinned.get(role)]:  # the last `keep` and the pin stay
                hist.remove(h)
                stale.append(h)
        self.save(data)
        stale += mid.get("chain", [mid["dir"]]) if mid is not None and mid["key"] == rec.key else []
        return [s for s in stale if s not in self.data["checkpoints"].values()]

    def checkpoint(self, role: str) -> str | None:
        return self.data["checkpoints"].get(role)

    def set_status(self, status: str) -> None:
        self.save({**self.data, "status": status})
