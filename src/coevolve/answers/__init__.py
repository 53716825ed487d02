"""Answer pipeline: extraction, normalisation, equivalence (math-verify in a worker), voting.

Module-level functions use one lazily created default ``Grader`` (the allowed exception to "no
module state": it caches a worker process). Create your own ``Grader`` for a different timeout or
to control the worker's lifetime (``with Grader() as g: ...``).
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path
from typing import Literal, TextIO

from coevolve.types import Vote

from .extract import answer_or_whole, extract_answer, last_boxed
from .grader import Grader, GraderStats
from .normalize import canon, cheap_equiv, normalize
from .pool import GraderPool, default_workers, make_grader

__all__ = [
    "Grader",
    "GraderPool",
    "GraderStats",
    "answer_or_whole",
    "canon",
    "cheap_equiv",
    "close_default_grader",
    "default_grader",
    "default_workers",
    "extract_answer",
    "grade",
    "grade_jsonl",
    "grade_pair",
    "is_equiv",
    "last_boxed",
    "make_grader",
    "normalize",
    "vote",
]

_DEFAULT: dict[str, Grader] = {}
_DEFAULT_LOCK = threading.Lock()


def default_grader() -> Grader:
    """The shared Grader behind the module-level functions (created on first use)."""
    with _DEFAULT_LOCK:
        g = _DEFAULT.get("grader")
        if g is None:
            g = Grader()
            _DEFAULT["grader"] = g
        return g


def close_default_grader() -> None:
    """Stop the default Grader's worker (registered at exit; safe to call twice)."""
    with _DEFAULT_LOCK:
        g = _DEFAULT.pop("grader", None)
    if g is not None:
        g.close()


atexit.register(close_default_grader)


def is_equiv(gold: str | None, pred: str | None, timeout: float = 5.0) -> bool:
    """Is ``pred`` equal to ``gold``? Cheap path first, then math-verify under a hard timeout."""
    return default_grader().is_equiv(gold, pred, timeout)


def grade(gold: str, completion: str, timeout: float = 5.0) -> bool:
    """Extract the final answer of ``completion`` and compare it with ``gold``."""
    return default_grader().grade(gold, completion, timeout)


def vote(answers: list[str | None], timeout: float = 5.0) -> Vote:
    """Majority vote over answers (None counts in the denominator); see ``Grader.vote``."""
    return default_grader().vote(answers, timeout)


def grade_pair(gold: str, pred: str) -> bool:
    """CLI helper: compare two strings, each a whole model output or a bare answer."""
    return default_grader().grade_pair(gold, pred)


def grade_jsonl(
    path: str | Path, out: TextIO | Path | None = None, on_error: Literal["raise", "skip"] = "raise"
) -> tuple[int, int]:
    """CLI helper: grade a JSONL of ``{"gold", "pred"}`` rows; returns (n_equal, n_graded)."""
    return default_grader().grade_jsonl(path, out, on_error=on_error)
