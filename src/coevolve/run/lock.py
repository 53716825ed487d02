"""One writer per run folder: ``run.lock``, held by ``coevolve run`` / ``coevolve resume`` (and
every other ``recipes.execute`` caller) for as long as the process works on the folder.

Rule: the lock is an ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<run>/run.lock``, held on an open
file for the life of the process. The kernel drops a flock when its process dies by any means,
``kill -9`` included, so a lock left by a dead process is free: the next ``run`` / ``resume``
simply takes it over. Two processes that both find a stale lock cannot both win: the flock is
granted to exactly one of them, atomically, by the kernel (no read-pid-then-write race). The
file's text (pid, host, start time, command) is written by the holder after it has the lock and
only serves the refusal message of the next process; it is never used to decide who holds it.

The lock's file descriptor is not inherited by child processes (Python opens it close-on-exec
and the grader workers are started with ``close_fds``), so a child that outlives a killed
parent cannot keep a run folder locked. On network filesystems ``flock`` is only as good as the
server's lock support; run folders belong on a local disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from coevolve.errors import RunStateError

LOCK_FILE = "run.lock"


class RunLockedError(RunStateError):
    """Another live process is writing the run folder."""


def check_run_dir(path: Path) -> None:
    """A run folder path must be a folder or not exist yet, and so must each of its parents: an
    existing file anywhere on the path is named (instead of a ``NotADirectoryError`` traceback)."""
    for p in [path, *path.parents]:
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                where = f"run folder {path}" if p == path else f"{p}, a parent of run folder {path},"
                raise RunStateError(
                    f"{where} is an existing file, not a folder; choose another --run-dir (or run.root)"
                )
            return


def holder(path: Path) -> str:
    """Who holds (or last held) the lock of run folder ``path``, from the lock file's text."""
    try:
        info = json.loads((Path(path) / LOCK_FILE).read_text(encoding="utf-8"))
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(info["started"])))
        return f"pid {info['pid']} on host {info['host']}, started {started}, command: {info['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its name yet"


@contextlib.contextmanager
def run_lock(path: str | Path, *, create: bool = False) -> Iterator[None]:
    """Hold the one-writer lock of run folder ``path`` (made first with ``create``) inside the
    ``with`` block; raise ``RunLockedError`` naming the holder when another process has it. Not
    re-entrant: a run is opened once (``recipes.open_run``), so a second lock of the same folder,
    even by the same process, is refused."""
    path = Path(path)
    check_run_dir(path)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    elif not path.is_dir():
        raise RunStateError(f"{path} is not a coevolve run folder (it does not exist)")
    try:  # no-follow: a run.lock symlink must not get its target truncated
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError:
        if (path / LOCK_FILE).is_symlink():
            raise RunStateError(f"{path / LOCK_FILE} is a symlink; a run folder's lock must be a plain file") from None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunLockedError(
            f"run folder {path} is in use by another coevolve process ({holder(path)}); wait for it "
            "to finish or stop it: a lock whose process is gone is taken over automatically"
        ) from None
    try:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "command": " ".join(["coevolve", *sys.argv[1:]]) if sys.argv else "coevolve",
        }
        with contextlib.suppress(OSError):  # the holder's name is a courtesy; a full disk must not stop the run
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock; the file stays (removing it would let a third process lock a new inode)


__all__ = ["LOCK_FILE", "RunLockedError", "check_run_dir", "holder", "run_lock"]
