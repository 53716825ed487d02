"""Child processes that die with the driver: verl's trainer and merger, the frozen solver's
``vllm serve``, a study's runs.

Rule: every such child starts in a process group of its own (so it and whatever it starts can be
stopped as one) with a parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, set in
the child between fork and exec): when the driver dies by any means, ``kill -9`` included, the
kernel sends the child SIGTERM, on which ``vllm serve`` stops its engine and a Python trainer
exits. SIGTERM rather than SIGKILL so the child can stop its own children, which the signal does
not reach. The group is recorded in ``children.json`` of the folder the child works for (the run
folder; a study's output folder) while it runs, and the record is dropped when it ends.
``Run.open`` (``coevolve resume``) and a restarted study refuse, in one line naming the group,
while any process of a recorded group still lives: a second trainer must never write the
checkpoints a first one is still writing. A record whose group is gone is dropped.

Where ``prctl`` does not exist (not Linux) the children still get their own group and the
resume check; only the death signal is missing. The signal is tied to the thread that started
the child, so children are started from the driver's main thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from coevolve.errors import RunStateError
from coevolve.run.files import atomic_write_json

CHILDREN_FILE = "children.json"
PR_SET_PDEATHSIG = 1
DEATH_SIGNAL = signal.SIGTERM
STOP_GRACE_S = 30.0


def _prctl() -> Any:
    """libc's ``prctl`` (Linux), resolved before any fork; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks the kernel for ``DEATH_SIGNAL`` when this process dies, and
    ends the child at once when this process died before the request took effect. Everything
    it calls is resolved here, before the fork. None where there is no ``prctl``."""
    prctl, parent = _prctl(), os.getpid()
    if prctl is None:
        return None
    sig, kill, getppid, me = int(DEATH_SIGNAL), os.kill, os.getppid, os.getpid

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if getppid() != parent:  # the driver is already gone: the signal will never come
            kill(me(), sig)

    return preexec


# ------------------------------------------------------------------------------------------ record
def _read(folder: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((folder / CHILDREN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(folder: Path, data: dict[str, dict[str, Any]]) -> None:
    f = folder / CHILDREN_FILE
    if data:
        atomic_write_json(f, data)
    else:
        f.unlink(missing_ok=True)


def _stat(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (``/proc/PID/stat`` field 22), or None."""
    st = _stat(pid)
    return st[19] if st else None


def _group_lives(pgid: int) -> bool:
    """A process of group ``pgid`` runs (a zombie waiting to be reaped does not count)."""
    if Path("/proc/self/stat").is_file():
        for d in os.listdir("/proc"):
            st = _stat(d) if d.isdigit() else None
            if st and st[0] != "Z" and st[2] == str(pgid):
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(rec: dict[str, Any]) -> bool:
    """Whether a process of the recorded group still lives. A live process with the leader's
    pid but another start time is a newcomer that reused the number: the group is gone."""
    pgid = int(rec["pgid"])
    started = _start_time(pgid)
    if started is not None and rec.get("started") not in (None, started):
        return False
    return _group_lives(pgid)


def check_children(folder: Path) -> None:
    """Refuse, in one line, while a child recorded in ``folder`` lives (a driver killed while it
    ran); drop the records of groups that are gone."""
    recs = _read(folder)
    live = {k: r for k, r in recs.items() if group_alive(r)}
    if live:
        name, r = next(iter(live.items()))
        raise RunStateError(
            f"{folder}: {name} (process group {r['pgid']}, started by a coevolve process that is gone) is still "
            f"running: {str(r.get('cmd', ''))[:120]}; wait for it to end or stop it (kill -- -{r['pgid']}), then retry"
        )
    if recs:
        _write(folder, {})


# ------------------------------------------------------------------------------------------ start, stop
def spawn(cmd: Sequence[str], *, record: Path | None, name: str, **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **popen)`` in a process group of its own that gets ``DEATH_SIGNAL``
    when this process dies, recorded as ``name`` in ``record``'s ``children.json`` (None: not
    recorded). Drop the record with ``forget`` once the child has ended."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(list(cmd), process_group=0, preexec_fn=die_with_parent(), **popen)
    if record is not None:
        recs = _read(record)
        recs[name] = {
            "pgid": proc.pid,
            "pid": proc.pid,
            "started": _start_time(proc.pid),
            "driver": os.getpid(),
            "cmd": " ".join(map(str, cmd)),
            "at": time.time(),
        }
        _write(record, recs)
    return proc


def forget(record: Path | None, name: str) -> None:
    if record is not None:
        recs = _read(record)
        if recs.pop(name, None) is not None:
            _write(record, recs)


def stop(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """Stop ``proc``'s whole process group: SIGTERM, then SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):  # what the leader left behind in its group
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def child(cmd: Sequence[str], *, record: Path | None, name: str, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``with child(...) as proc``: ``spawn``; when the block ends, its group stopped (``stop``)
    unless it already ended, and its record dropped."""
    proc = spawn(cmd, record=record, name=name, **popen)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            stop(proc)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the leader ended: nothing of its group outlives it
        forget(record, name)


def run_child(cmd: Sequence[str], *, record: Path | None, name: str, **popen: Any) -> int:
    """``subprocess.run(cmd).returncode`` as a ``child``: an interrupt (Ctrl-C, SIGTERM) stops its group."""
    with child(cmd, record=record, name=name, **popen) as proc:
        return proc.wait()


__all__ = ["CHILDREN_FILE", "check_children", "child", "die_with_parent", "forget", "run_child", "spawn", "stop"]
