"""JSON-lines files: the one reader (plain or gzip, from disk or bytes), below every package that reads one.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from coevolve.errors import DataError, unparsable

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
                obj = _parse_line(line, f"{name}:{lineno}", objects_only, problem)
                if obj is not _SKIP:
                    yield lineno, obj
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            raise DataError(
                f"{name}: compressed stream broken after line {lineno} ({e}); the file is truncated or not gzip"
            ) from None
    finally:
        raw.close()


_SKIP = object()
"""What ``_parse_line`` returns for a blank line or a problem."""


def _parse_line(line: bytes, where: str, objects_only: bool, problem: Callable[[str], None]) -> Any:
    """The JSON value of one line, or ``_SKIP`` (blank, or a problem reported to ``problem``)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        problem(f"{where}: not UTF-8 (byte {line[e.start]:#04x} at column {e.start + 1})")
        return _SKIP
    if not text.strip():
        return _SKIP
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        problem(f"{where}: not valid JSON ({e.msg} at column {e.colno})")
        return _SKIP
    except (ValueError, RecursionError) as e:
        problem(f"{where}: not readable JSON: {unparsable(e)}")
        return _SKIP
    if objects_only and not isinstance(obj, dict):
        problem(f"{where}: expected a JSON object, got {type(obj).__name__}")
        return _SKIP
    return obj


def read_jsonl(
    path: str | Path, on_error: OnError = "raise", problems: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL / JSONL.gz file, in file order."""
    return [obj for _, obj in iter_jsonl(path, on_error=on_error, problems=problems)]
