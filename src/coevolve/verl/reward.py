"""The ``compute_score`` verl calls for every rollout of a ``backend=verl`` phase.

verl 0.9.1 scores one sample per call (``NaiveRewardManager``)::

    compute_score(data_source, solution_str, ground_truth, extra_info=None, **reward_kwargs)
        -> float | {"score": float, **extras}

and puts a dict's other keys into ``reward_extra_info`` (one list per key over the batch, also
written into the rollout dumps). The row's ``training.RewardSpec`` (``extra_info["reward"]``) is
the phase's reward as data, evaluated here by the same functions the local loop evaluates it
with, so a verl phase is rewarded by the same rules as a local one:

    solver  R = α·acc + (1-α)·fmt        (``training.score_sample``: ``rewards.solver_rewards``)
    match   R = +1 if the answer matches the pseudo-label else -1   (``rewards.signed_match_rewards``)
    writer  R = the writer reward on the frozen solver's vote        (``verl.writer.score_sample``)

The extras ``acc`` / ``format`` / ``match`` and ``row`` (the parquet row index) let
``coevolve.verl.convert`` rebuild the phase's rollouts file and metrics from verl's dumps.
"""

from __future__ import annotations

import threading
from typing import Any

from coevolve.answers.grader import Grader
from coevolve.errors import CoevolveError
from coevolve.training import RewardSpec, score_sample

_GRADER: Grader | None = None
_LOCK = threading.Lock()  # verl's reward loop calls compute_score from executor threads; a Grader is one pipe


class VerlRewardError(CoevolveError, ValueError):
    """A row verl asked to score carries no usable coevolve reward spec."""


def _grader(timeout: float) -> Grader:
    """One grader per reward worker process, started at its first call (a grader owns a child
    process for math-verify's timeouts; starting one per sample would dominate the cost)."""
    global _GRADER
    if _GRADER is None:
        _GRADER = Grader(timeout=timeout)
    return _GRADER


_SPECS: dict[str, Any] = {}


def _writer_spec(path: str) -> Any:
    from coevolve.verl.writer import WriterSpec  # lazy: pulls torch

    if path not in _SPECS:
        _SPECS[path] = WriterSpec.read(path)
    return _SPECS[path]


class _LockedGrader:
    """The worker's grader behind ``_LOCK`` (the writer path votes from executor threads too)."""

    def __init__(self, grader: Grader):
        self.grader = grader

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.grader, name)

        def call(*a: Any, **k: Any) -> Any:
            with _LOCK:
                return fn(*a, **k)

        return call


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, float]:
    """Score one completion by the coevolve reward its row names (module docstring)."""
    info = extra_info or {}
    if not isinstance(info.get("reward"), dict):
        raise VerlRewardError(
            f"compute_score: row of {data_source!r} has no extra_info['reward'] "
            "(not a parquet written by coevolve.verl.parquet)"
        )
    spec = RewardSpec.from_dict(info["reward"])
    row = float(info.get("index", -1))
    if spec.kind == "writer":
        from coevolve.verl.writer import score_sample as score_writer_sample  # lazy: pulls torch

        if not spec.writer:
            raise VerlRewardError(f"compute_score: writer row {row:g} of {data_source!r} names no writer spec file")
        return {
            **score_writer_sample(
                _writer_spec(spec.writer),
                solution_str,
                int(info.get("step", 0)),
                _LockedGrader(_grader(spec.grader_timeout)),
            ),
            "row": row,
        }
    if spec.kind not in ("solver", "match"):
        raise VerlRewardError(f"compute_score: unknown reward kind {spec.kind!r} in row {row:g} of {data_source!r}")
    with _LOCK:
        return {**score_sample(spec, solution_str, ground_truth or "", _grader(spec.grader_timeout)), "row": row}
