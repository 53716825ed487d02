"""Fault injection at named write sites, for the kill-anywhere fuzz and the write-failure tests.

Off by default: with ``COEVOLVE_FAULT`` unset (and no ``configure`` call) ``fault_point`` is one
``is None`` test, and it is only called where a file is written or an answer graded, never per
token. Why a hook rather than timing: a random ``kill -9`` almost never lands in the few
milliseconds of a ``state.json`` rewrite or a checkpoint save, and those are exactly the moments
a resume has to survive; the hook reaches them deterministically.

``COEVOLVE_FAULT="site:n:action[,site:n:action...]"``: at the ``n``-th call (1-based, counted per
process) of ``site``, ``kill`` SIGKILLs the process, ``killgroup`` its whole process group (the
fuzz starts each run in a session of its own, so the run and its grader workers die together,
whichever of them reaches the site), and ``enospc`` raises ``OSError(ENOSPC)``.
``COEVOLVE_FAULT="count:FILE"`` counts every site and writes ``{site: calls}`` to ``FILE.<pid>``
at exit (how the fuzz learns how often each site is reached in an uninterrupted run);
``configure("count")`` only counts (``calls()``).

Sites: ``write`` (``files.atomic_write_text``: temp file complete, not yet renamed), ``state``
(``state.json`` about to be rewritten: after a phase's last artefact, before its mark),
``metrics`` (a ``metrics.jsonl`` row about to be appended), ``checkpoint`` (a learner checkpoint:
model written, optimiser state not yet), ``rollouts`` (a rollout batch about to be appended),
``grade`` (the grader about to decide one answer, by its cheap path or its worker), ``worker``
(a math-verify worker process about to answer a request), ``save`` (a mid-phase save written
whole, not yet renamed into place nor named in ``state.json``: ``run.save_every``), ``sample``
(a recipe's sampler about to be called, not answered from a mid-phase save).
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import signal
from collections import Counter

ENV = "COEVOLVE_FAULT"
SITES = ("write", "state", "metrics", "checkpoint", "rollouts", "grade", "worker", "save", "sample")
ACTIONS = ("kill", "killgroup", "enospc")

_plan: dict[str, tuple[int, str]] | None = None
_calls: Counter[str] = Counter()


def parse(spec: str) -> dict[str, tuple[int, str]]:
    """``"site:n:action,..."`` -> ``{site: (n, action)}``; a malformed spec is a ``ValueError``."""
    plan: dict[str, tuple[int, str]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        site, n, action = item.split(":")
        if site not in SITES or action not in ACTIONS or int(n) < 1:
            raise ValueError(f"{ENV}: bad item {item!r} (sites {SITES}, actions {ACTIONS}, n >= 1)")
        plan[site] = (int(n), action)
    return plan


def configure(spec: str | None) -> None:
    """Arm (or with ``None`` disarm) faults in this process and reset the call counts."""
    global _plan
    _calls.clear()
    if not spec:
        _plan = None
    elif spec == "count" or spec.startswith("count:"):
        _plan = {}
        if spec != "count":
            out = f"{spec[len('count:') :]}.{os.getpid()}"
            atexit.register(lambda: _write_counts(out))
    else:
        _plan = parse(spec)


def _write_counts(path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(_calls), f)


def fault_point(site: str) -> None:
    """Count a call of ``site`` and fire the armed fault when this is its ``n``-th call."""
    if _plan is None:
        return
    _calls[site] += 1
    armed = _plan.get(site)
    if armed is None or _calls[site] != armed[0]:
        return
    if armed[1] == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {site} call {armed[0]})")
    if armed[1] == "killgroup":
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def calls() -> dict[str, int]:
    """Calls per site counted since ``configure`` (empty while faults are off)."""
    return dict(_calls)


configure(os.environ.get(ENV))

__all__ = ["ACTIONS", "ENV", "SITES", "calls", "configure", "fault_point", "parse"]
