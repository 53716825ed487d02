"""``metrics.jsonl``: one JSON object per line, namespaced keys, appended as a run goes.

Resume semantics: the byte length of the log is recorded at every phase boundary; reopening a
run cuts off what an interrupted phase had written, so nothing is logged twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from coevolve.faults import fault_point
from coevolve.jsonl import read_jsonl
from coevolve.run.files import json_line

TAIL_BYTES = 1 << 20
"""How far back a torn last line is looked for (a metrics row is far shorter)."""


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


class MetricsLog:
    """``metrics.jsonl`` plus optional live trackers (TensorBoard, W&B) fed the same rows, with
    one global training step as their x axis: the training steps (rows with a ``step``, of any
    role) logged before the row, so a step row sits at its place in the run's training and an
    evaluation at the steps trained before it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.trackers: list[Any] = []
        self.step = 0  # the global training step of the next row (the trackers' x axis)

    def count(self) -> int:
        """Rows in the log."""
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as f:
            return sum(1 for line in f if line.strip())

    def trained(self) -> int:
        """Training steps in the log (rows with a ``step``): the global step a resumed run goes on from."""
        return sum(1 for r in self.rows() if "step" in r)

    def attach(self, trackers: list[Any]) -> None:
        """Feed every following row to ``trackers`` too, from the global step of the rows already
        logged. The rows logged since the last training step sit at that step, where a resumed
        TensorBoard purges (``purge_step``) what an interrupted phase left: they are fed again."""
        self.trackers = list(trackers)
        rows = self.rows()
        self.step = sum(1 for r in rows if "step" in r)
        last = max((i for i, r in enumerate(rows) if "step" in r), default=-1)
        for row in rows[last + 1 :] if self.trackers else []:
            for t in self.trackers:
                t.log(row, self.step)

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def truncate(self, nbytes: int) -> None:
        """Drop everything after the first ``nbytes`` bytes (lines of an unfinished phase)."""
        if self.path.exists() and self.path.stat().st_size > nbytes:
            with open(self.path, "r+b") as f:
                f.truncate(nbytes)

    def cut_torn_line(self) -> int:
        """Cut a last line a killed writer left unfinished (no newline or not JSON) back to the
        last complete line, so rows appended after it stay valid JSON; return bytes dropped."""
        if not self.path.exists() or (size := self.path.stat().st_size) == 0:
            return 0
        start = max(0, size - TAIL_BYTES)
        with open(self.path, "r+b") as f:
            f.seek(start)
            tail = f.read()
            body = tail[:-1] if tail.endswith(b"\n") else tail
            cut = body.rfind(b"\n") + 1  # where the last line starts (0: the tail holds one line)
            if tail.endswith(b"\n") and _parses(body[cut:]):
                return 0
            keep = start + cut
            f.truncate(keep)
        return size - keep

    def log(self, metrics: dict[str, Any], **context: Any) -> None:
        """Append ``{context..., time, metrics...}`` (context: round, phase, step)."""
        row = {
            **{k: v for k, v in context.items() if v is not None or k == "round"},
            "time": round(time.time(), 3),
            **metrics,
        }
        fault_point("metrics")
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json_line(row))
        for t in self.trackers:
            t.log(row, self.step)
        self.step += int("step" in row)

    def flush(self) -> None:
        for t in self.trackers:
            t.flush()

    def close(self) -> None:
        for t in self.trackers:
            t.close()
        self.trackers = []

    def rows(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path) if self.path.exists() else []
