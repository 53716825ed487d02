"""A pool of math-verify workers: once rollouts are fast, grading one answer at a time in one
process becomes the bottleneck (a GRPO step of 128 questions x 8 answers is 1,024 comparisons;
a D²Evo difficulty pass is N = 32 per question).

``GraderPool(workers)`` holds ``workers`` independent ``Grader`` s, each with its own worker process
and the same hard timeout, and spreads ``grade_batch`` / ``vote_batch`` over them from a thread
pool, item by item as each grader is free (the threads spend their time waiting on the worker pipes, so the GIL is not the limit).
Results are identical to one ``Grader``: every comparison is deterministic and independent, and
each vote is still computed by one grader in answer order.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from types import TracebackType
from typing import TypeVar

from coevolve.errors import GraderError
from coevolve.types import Vote

from .grader import Grader, GraderStats
from .worker import DEFAULT_VERIFY_FN, WORKER_MEMORY_MB

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Cores minus one (the main process samples and trains), at least one."""
    return max(1, (os.cpu_count() or 2) - 1)


class GraderPool:
    """``AnswerGrader`` over ``workers`` grader processes (see the module docstring)."""

    def __init__(
        self, workers: int, timeout: float = 5.0, verify_fn: str = DEFAULT_VERIFY_FN, memory_mb: int = WORKER_MEMORY_MB
    ) -> None:
        if workers < 1:
            raise GraderError(f"grading pool: workers must be >= 1, got {workers}")
        self.graders = [Grader(timeout=timeout, verify_fn=verify_fn, memory_mb=memory_mb) for _ in range(workers)]
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grader")

    @property
    def workers(self) -> int:
        return len(self.graders)

    @property
    def stats(self) -> GraderStats:
        """The workers' counters, summed."""
        total = GraderStats()
        for g in self.graders:
            for f in fields(GraderStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(g.stats, f.name))
        return total

    def _spread(self, items: Sequence[T], fn: Callable[[Grader, T], R]) -> list[R]:
        """``fn(grader, item)`` for every item, results in item order. Each grader takes the next
        item as soon as it is free (a shared counter), so an answer that runs to the timeout holds
        up one worker for one item, not a fixed share of the batch behind it."""
        n, k = len(items), min(self.workers, len(items))
        if k <= 1:
            return [fn(self.graders[0], x) for x in items]
        out: list[R | None] = [None] * n
        nxt = itertools.count()  # next() on a count is atomic under the GIL

        def work(g: Grader) -> None:
            for i in iter(lambda: next(nxt), None):
                if i >= n:
                    return
                out[i] = fn(g, items[i])

        for job in [self._threads.submit(work, self.graders[j]) for j in range(k)]:
            job.result()
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ AnswerGrader
    def is_equiv(self, gold: str | None, pred: str | None, timeout: float | None = None) -> bool:
        return self.graders[0].is_equiv(gold, pred, timeout)

    def grade(self, gold: str, completion: str, timeout: float | None = None) -> bool:
        return self.graders[0].grade(gold, completion, timeout)

    def vote(self, answers: list[str | None], timeout: float | None = None) -> Vote:
        return self.graders[0].vote(answers, timeout)

    def grade_batch(self, golds: Sequence[str], completions: Sequence[str], timeout: float | None = None) -> list[bool]:
        if len(golds) != len(completions):
            raise GraderError(f"grade_batch: {len(golds)} golds but {len(completions)} completions")
        return self._spread(list(zip(golds, completions)), lambda g, gc: g.grade(gc[0], gc[1], timeout))

    def vote_batch(self, groups: Sequence[list[str | None]], timeout: float | None = None) -> list[Vote]:
        return self._spread(list(groups), lambda g, answers: g.vote(list(answers), timeout))

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        self._threads.shutdown(wait=True)
        for g in self.graders:
            g.close()

    def __enter__(self) -> GraderPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def make_grader(timeout: float = 5.0, workers: int | None = None) -> Grader | GraderPool:
    """One ``Grader`` for one worker, else a ``GraderPool``; ``workers=None`` = ``default_workers()``."""
    n = default_workers() if workers is None else workers
    return Grader(timeout=timeout) if n <= 1 else GraderPool(n, timeout)
