"""Labelled question files: JSONL or JSONL.gz with one object per line.

Broken rows (invalid JSON, missing / empty question or answer, non-object lines) are reported
with file and line number; ``on_error="raise"`` stops at the first one, ``"skip"`` drops them
and returns the list of problems so the caller can report them (nothing is silently lost).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from coevolve.errors import DataError
from coevolve.types import Task


@dataclass
class LoadReport:
    path: str
    rows: int = 0
    loaded: int = 0
    problems: list[str] = field(default_factory=list)


def _open(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def load_tasks(
    path: str | Path,
    *,
    question_key: str = "question",
    answer_key: str = "answer",
    id_key: str = "id",
    on_error: Literal["raise", "skip"] = "raise",
    limit: int | None = None,
    require_answer: bool = True,
) -> tuple[list[Task], LoadReport]:
    """Read labelled tasks. Extra fields of each row go into ``Task.features``."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"dataset file {p} does not exist")
    report = LoadReport(path=str(p))
    tasks: list[Task] = []
    try:
        with _open(p) as f:
            for lineno, line in enumerate(f, 1):
                if limit is not None and len(tasks) >= limit:
                    break
                if not line.strip():
                    continue
                report.rows += 1
                problem = None
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    row, problem = None, f"{p}:{lineno}: not valid JSON ({e.msg})"
                if problem is None and not isinstance(row, dict):
                    problem = f"{p}:{lineno}: expected a JSON object, got {type(row).__name__}"
                if problem is None:
                    q = row.get(question_key)
                    a = row.get(answer_key)
                    if not isinstance(q, str) or not q.strip():
                        problem = f"{p}:{lineno}: field {question_key!r} is missing or empty"
                    elif require_answer and (a is None or (isinstance(a, str) and not a.strip())):
                        problem = f"{p}:{lineno}: field {answer_key!r} is missing or empty"
                if problem is not None:
                    if on_error == "raise":
                        raise DataError(problem + " (set data.on_error=skip to skip broken rows)")
                    report.problems.append(problem)
                    continue
                extra = {k: v for k, v in row.items() if k not in (question_key, answer_key, id_key)}
                tasks.append(
                    Task(
                        id=str(row.get(id_key, f"{p.name}:{lineno}")),
                        question=row[question_key],
                        answer=None if row.get(answer_key) is None else str(row[answer_key]),
                        source=str(p),
                        features=extra,
                    )
                )
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read dataset file {p}: {e}") from None
    report.loaded = len(tasks)
    return tasks, report
