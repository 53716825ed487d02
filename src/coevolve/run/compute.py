"""Compute counters: what a run spent, per phase and cumulatively, for compute-matched curves.

``Compute`` is the one record (one name in code, ``state.json``, ``metrics.jsonl``, summary and
plots). Its four counters, per phase:

- ``rollouts``: completions sampled by any sampler of the run during the phase (the learner's
  policy, a frozen scorer or voter, a judge or diagnoser model, the evaluation), each one
  counted once: a prompt sampled with ``n`` answers is ``n`` rollouts.
- ``generated_tokens``: Σ ``len(Completion.token_ids)`` over those rollouts (the ids the sampler
  returned: up to and including the stopping token, no prompt, no padding).
- ``trained_tokens``: completion tokens in the sequences a learner update trained on (groups of
  zero reward variance dropped by ``learner.drop_zero_std`` and skipped steps excluded), once per
  optimizer epoch (``learner.epochs_per_batch``): Σ over updates of ``n_tokens · μ``.
- ``labels``: gold labels of real data read for the first time in the run by the phase: one per
  distinct labelled training question (grpo), the fixed difficulty pool once (D²Evo; anchors
  are drawn from that pool, so later rounds add none), none for generated questions or
  pseudo-labels (DiagEvo: 0). Evaluation answers are not counted (they are the yardstick).

Beside them, ``cut_off``: the rollouts that stopped at ``max_new_tokens``
(``Completion.finish_reason == "length"``); ``cut_off_share`` is its share of the phase's rollouts,
and a phase past ``CUT_OFF_WARN`` is warned about (a budget that cuts answers off turns them into
non-answers, so votes and rewards rest on fewer samples than asked).

A phase is *evaluation* when its name is ``eval`` (``EVAL_PHASE``); every other phase is
training. ``cumulative`` folds finished phase records in finishing order into (training,
evaluation) totals, so a resumed run (``kill -9`` + ``coevolve resume``) gets exactly the
counts of an uninterrupted one: the counts of a killed phase were never recorded and the phase
reruns from scratch. The process-local ``ComputeMeter`` only lives for one phase.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from coevolve.faults import fault_point
from coevolve.types import Completion, SamplingParams

COUNTERS = ("rollouts", "generated_tokens", "trained_tokens", "labels")
"""The counters of ``Compute``, in plot order."""

CUT_OFF_WARN = 0.05
"""Share of a phase's rollouts cut off by the token budget past which the run warns (ours)."""

EVAL_PHASE = "eval"
"""Phase name whose compute is evaluation, not training."""


@dataclass(frozen=True)
class Compute:
    """One phase's (or a run's cumulative) compute; the counters are defined in the module doc."""

    rollouts: int = 0
    generated_tokens: int = 0
    trained_tokens: int = 0
    labels: int = 0
    cut_off: int = 0

    def __add__(self, other: Compute) -> Compute:
        return Compute(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def cut_off_share(self) -> float | None:
        """Share of the rollouts that stopped at ``max_new_tokens``; None without rollouts."""
        return self.cut_off / self.rollouts if self.rollouts else None

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Compute:
        return cls(**{f.name: int(d.get(f.name, 0)) for f in fields(cls)})


class ComputeMeter:
    """Counts one phase's compute while it runs (``Run.phase`` resets it before the phase and
    stores ``total`` in the phase record after it); samplers report through ``MeteredSampler``,
    the GRPO loop through ``trained``, a phase that reads gold labels through ``labelled``."""

    def __init__(self) -> None:
        self.total = Compute()
        self.tick: Any = None  # the running phase's progress bar (``Run.phase``): told each call's rollouts

    def reset(self) -> None:
        self.total = Compute()

    def sampled(self, comps: Sequence[Sequence[Completion]], ticked: int = 0) -> None:
        """Count a call's completions; the progress bar gets those its engine did not tick already."""
        if self.tick is not None:
            self.tick(max(0, sum(len(g) for g in comps) - ticked))
        self.total += Compute(
            rollouts=sum(len(g) for g in comps),
            generated_tokens=sum(len(c.token_ids) for g in comps for c in g),
            cut_off=sum(c.finish_reason == "length" for g in comps for c in g),
        )

    def trained(self, tokens: int) -> None:
        self.total += Compute(trained_tokens=int(tokens))

    def labelled(self, n: int) -> None:
        self.total += Compute(labels=int(n))


class MeteredSampler:
    """A sampler that reports every completion it returns to a ``ComputeMeter`` (and passes its
    calls through the run's ``CallJournal`` when given); everything else (``tokenizer``,
    ``sync_weights``, engine internals) is the inner sampler's."""

    def __init__(self, inner: Any, meter: ComputeMeter, journal: Any = None) -> None:
        self.inner, self.meter, self.journal = inner, meter, journal

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        # through the running phase's journal (``run.journal``): recorded for its mid-phase saves,
        # or answered from them on resume; counted either way, as the calls they stand for
        # an engine that generates in chunks (hf: ``progress``) moves the bar per chunk, so one long
        # call (a benchmark's evaluation) is not silent until it ends
        ticked = [0]
        hook = getattr(self.inner, "progress", False) is None and self.meter.tick is not None
        if hook:

            def chunk_done(rows: int) -> None:
                ticked[0] += rows
                self.meter.tick(rows)

            self.inner.progress = chunk_done
        try:
            comps = (
                self._live(prompts, n, params)
                if self.journal is None
                else self.journal.call(self._live, prompts, n, params)
            )
        finally:
            if hook:
                self.inner.progress = None
        self.meter.sampled(comps, ticked[0])
        return comps

    def _live(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        fault_point("sample")
        return self.inner.sample(prompts, n, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def cut_off_warning(key: str, compute: Compute, budget_field: str) -> str | None:
    """The warning line for a phase whose cut-off share passes ``CUT_OFF_WARN``, else None."""
    share = compute.cut_off_share()
    if share is None or share <= CUT_OFF_WARN:
        return None
    return (
        f"[warning] {key}: {share:.1%} of {compute.rollouts} completions stopped at the token budget "
        f"(no answer unless their answer closed first): raise {budget_field}"
    )


def unmetered(sampler: Any) -> Any:
    """The sampler under a ``MeteredSampler`` (engine code checks the concrete class)."""
    return sampler.inner if isinstance(sampler, MeteredSampler) else sampler


@dataclass(frozen=True)
class CumulativeCompute:
    """The cumulative compute of a run when the phase ``key`` finished: ``train`` over every
    non-evaluation phase so far, ``eval`` over the evaluation phases so far (this one included)."""

    key: str
    train: Compute
    eval: Compute


def cumulative(records: Iterable[Any]) -> list[CumulativeCompute] | None:
    """Fold finished phase records (``PhaseRecord``, in finishing order) into cumulative
    compute; None when any record has no compute (a run made before the counters existed)."""
    train, ev, out = Compute(), Compute(), []
    for r in records:
        if r.compute is None:
            return None
        c = Compute.from_dict(r.compute)
        if r.name == EVAL_PHASE:
            ev += c
        else:
            train += c
        out.append(CumulativeCompute(r.key, train, ev))
    return out
