"""Atomic file writes: a reader (or a resumed run) never sees half a file.

Temp file in the same folder, fsync, then ``os.replace``: after a crash at any moment the target
holds either the old or the new content, and a failed write (a full disk) leaves the old
content in place and no temp file behind. A temp file orphaned by a ``kill -9`` is named
``.<name>.<random>.tmp`` (``TMP_SUFFIX``); ``Run.open`` removes such files.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from coevolve.faults import fault_point

TMP_SUFFIX = ".tmp"

_UMASK = os.umask(0)
os.umask(_UMASK)  # read once at import (os.umask only sets): atomic writes get the modes open() would give


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would make run files and exports private to one user
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        fault_point("write")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def to_json(o: Any) -> Any:
    """``json.dumps`` fallback: records with ``to_dict``, dataclasses, numpy/torch scalars,
    sets, tuples and paths."""
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def json_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=to_json) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=to_json) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(json_line(r) for r in rows))
