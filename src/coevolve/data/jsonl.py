"""JSON-lines files: the one reader (plain or gzip, from disk or bytes) and labelled question files.

Every problem names ``file:line``. A line is decoded on its own, so one non-UTF-8 byte or one
broken line costs that line, not the file: ``on_error="raise"`` stops at the first problem,
``"skip"`` records it and goes on (the caller reports what was skipped; nothing is silently lost).
A truncated gzip stream is reported with the last line that could be read.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

from coevolve.errors import DataError
from coevolve.types import Task

OnError = Literal["raise", "skip"]


def iter_jsonl(
    path: str | Path,
    *,
    data: bytes | None = None,
    on_error: OnError = "raise",
    problems: list[str] | None = None,
    objects_only: bool = True,
) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of a JSONL / JSONL.gz file.

    ``data`` passes the file's bytes instead of reading ``path`` (package resources); ``path``
    then only names it in messages. With ``objects_only`` a line that is not a JSON object is a
    problem. Problems are appended to ``problems`` (when given) as ``"file:line: what"``.
    """
    name = str(path)

    def problem(msg: str) -> None:
        if on_error == "raise":
            raise DataError(msg)
        if problems is not None:
            problems.append(msg)

    try:
        raw: io.BufferedIOBase
        if data is not None:
            raw = io.BytesIO(data)  # type: ignore[assignment]
        else:
            raw = open(path, "rb")  # noqa: SIM115 - closed in finally
    except IsADirectoryError:
        raise DataError(f"{name}: is a folder, not a JSONL file") from None
    except OSError as e:
        raise DataError(f"{name}: cannot read: {e.strerror or e}") from None
    lineno = 0
    try:
        stream = gzip.GzipFile(fileobj=raw) if name.endswith(".gz") else raw
        try:
            for lineno, line in enumerate(stream, start=1):
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    problem(f"{name}:{lineno}: not UTF-8 (byte {line[e.start]:#04x} at column {e.start + 1})")
                    continue
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    problem(f"{name}:{lineno}: not valid JSON ({e.msg} at column {e.colno})")
                    continue
                if objects_only and not isinstance(obj, dict):
                    problem(f"{name}:{lineno}: expected a JSON object, got {type(obj).__name__}")
                    continue
                yield lineno, obj
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            raise DataError(f"{name}: compressed stream broken after line {lineno} ({e}); "
                            "the file is truncated or not gzip") from None
    finally:
        raw.close()


def read_jsonl(path: str | Path, on_error: OnError = "raise", problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL / JSONL.gz file, in file order."""
    return [obj for _, obj in iter_jsonl(path, on_error=on_error, problems=problems)]


@dataclass
class LoadReport:
    path: str
    rows: int = 0
    loaded: int = 0
    problems: list[str] = field(default_factory=list)


def load_tasks(
    path: str | Path,
    *,
    question_key: str = "question",
    answer_key: str = "answer",
    id_key: str = "id",
    on_error: OnError = "raise",
    limit: int | None = None,
    require_answer: bool = True,
) -> tuple[list[Task], LoadReport]:
    """Read labelled tasks. Extra fields of each row go into ``Task.features``."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"dataset file {p} is a folder, not a JSONL file")
    if not p.is_file():
        raise DataError(f"dataset file {p} does not exist")
    report = LoadReport(path=str(p))
    tasks: list[Task] = []
    hint = " (set data.on_error=skip to skip broken rows)"
    seen = 0  # problems already checked against on_error

    def check() -> None:
        nonlocal seen
        if on_error == "raise" and len(report.problems) > seen:
            raise DataError(report.problems[seen] + hint)
        seen = len(report.problems)

    for lineno, row in iter_jsonl(p, on_error="skip", problems=report.problems):
        check()
        if limit is not None and len(tasks) >= limit:
            break
        report.rows += 1
        q, a = row.get(question_key), row.get(answer_key)
        if not isinstance(q, str) or not q.strip():
            report.problems.append(f"{p}:{lineno}: field {question_key!r} is missing or empty")
        elif require_answer and (a is None or (isinstance(a, str) and not a.strip())):
            report.problems.append(f"{p}:{lineno}: field {answer_key!r} is missing or empty")
        else:
            extra = {k: v for k, v in row.items() if k not in (question_key, answer_key, id_key)}
            tasks.append(Task(id=str(row.get(id_key, f"{p.name}:{lineno}")), question=q,
                              answer=None if a is None else str(a), source=str(p), features=extra))
        check()
    check()
    report.loaded = len(tasks)
    return tasks, report
