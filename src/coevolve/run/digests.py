"""Content hashes of what a finished phase left (its folder's files, its checkpoints' files),
kept in its state.json record and checked when the run is reopened: a flipped byte in a
checkpoint's weights or an edited artefact would otherwise resume silently to other results."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coevolve.errors import RunStateError
from coevolve.run.files import TMP_SUFFIX


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def folder_digests(root: Path, folders: Iterable[Path]) -> dict[str, str]:
    """sha256 of every plain file under ``folders`` (temp files aside), by path relative to ``root``."""
    out: dict[str, str] = {}
    for folder in folders:
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file() and not p.is_symlink() and not p.name.endswith(TMP_SUFFIX):
                out[str(p.resolve().relative_to(root))] = file_digest(p)
    return out


def verify_digests(root: Path, data: dict[str, Any]) -> None:
    """Refuse, naming the file, when a file a finished phase recorded differs from its hash, or
    a file of a role's current checkpoint (what a resume loads) is gone. Files of checkpoints
    that fell out of the kept ones are removed on purpose and not looked for."""
    current = {str(Path(c)) for c in data.get("checkpoints", {}).values()}
    latest: dict[
        str, tuple[dict[str, Any], str]
    ] = {}  # a later phase may rewrite a file of its folder: its hash is the one that holds
    for rec in data.get("phases", []):
        for rel, want in (rec.get("digests") or {}).items():
            latest[rel] = (rec, want)
    for rel, (rec, want) in latest.items():
        p = root / rel
        if not p.is_file():
            if any(Path(rel).is_relative_to(c) for c in current):
                raise RunStateError(
                    f"{p}: missing; phase {rec['key']} left it in the checkpoint the run resumes "
                    "from: restore it, or start a new run"
                )
            continue
        if file_digest(p) != want:
            raise RunStateError(
                f"{p}: its content differs from what phase {rec['key']} wrote (sha256 {want[:12]}...); "
                "the run would resume to other results: restore the file, or start a new run"
            )
