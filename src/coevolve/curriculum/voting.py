"""Pseudo-labels by majority vote, and the confidence filters on them (D²Evo step 3, DiagEvo
stage 2): the one place where p1 / p2 of a question are computed and filtered."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from coevolve.curriculum.sampling import completion_answer, sample_chunked, sample_staged
from coevolve.curriculum.sequential import schedule_of, vote_decision
from coevolve.errors import ConfigError
from coevolve.prompts import Prompter
from coevolve.schema import Band, FilterMode, Voting
from coevolve.types import AnswerGrader, Completion, Sampler, SamplingParams

OracleFn = Callable[[str], "str | None"]
"""``oracle(question) -> exact answer or None`` (worlds that know the truth: the toy world)."""


@dataclass
class VoteRecord:
    """Majority vote over ``n`` solver answers to one (generated) question.

    ``p1`` = share of all n answers in the majority cluster (unparseable ones count as
    disagreeing), ``p2`` = share of the runner-up, ``label`` = the majority answer (pseudo-label).
    ``meta`` carries provenance (what the writer was asked, round, oracle answer...) for the
    saved artefacts.
    """

    question: str
    n: int
    answers: list[str | None]
    label: str | None
    p1: float
    p2: float
    sizes: list[int] = field(default_factory=list)
    id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VoteRecord:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def _records(questions: Sequence[str], answers: list[list[str | None]], grader: AnswerGrader) -> list[VoteRecord]:
    """Vote each question's answers. A question whose non-answers (nothing stated, or cut off by
    the token budget) outnumber its largest answer cluster gets no label: the majority of the
    solver's samples said nothing, so no pseudo-label rests on them (the filters drop it)."""
    records = []
    for q, a, v in zip(questions, answers, grader.vote_batch(answers)):
        none = sum(1 for x in a if x is None or not x.strip())
        label = v.label if v.sizes and v.sizes[0] >= none else None
        records.append(VoteRecord(q, len(a), a, label, float(v.p1), float(v.p2), list(v.sizes)))
    return records


def label_questions(
    sampler: Sampler,
    prompter: Prompter,
    questions: Sequence[str],
    n: int,
    params: SamplingParams,
    grader: AnswerGrader,
    batch_prompts: int = 64,
) -> list[VoteRecord]:
    """Sample ``n`` solver answers per question, extract the final answers and vote: the writer
    reward's x = p1, pseudo-labels and the DiagEvo filter all come from here."""
    groups = sample_chunked(sampler, [prompter.solver(q) for q in questions], n, params, batch_prompts)
    answers = [[completion_answer(c) for c in g] for g in groups]
    return _records(questions, answers, grader)


def label_questions_adaptive(
    sampler: Sampler,
    prompter: Prompter,
    questions: Sequence[str],
    voting: Voting,
    params: SamplingParams,
    grader: AnswerGrader,
    batch_prompts: int = 64,
) -> list[VoteRecord]:
    """``label_questions`` in stages (``voting.sequential``, cap ``voting.samples``): after each
    stage the open questions are voted on and a question stops once ``vote_decision`` says it
    passes or fails ``voting.filter`` at ``voting.sequential.confidence``. Each record's ``n``
    is the number of answers it rests on (p1 / p2 are shares of those)."""
    seq = voting.sequential
    prior = (seq.prior_a, seq.prior_b)

    def stop(idx: list[int], groups: list[list[Completion]]) -> list[bool]:
        votes = grader.vote_batch([[completion_answer(c) for c in g] for g in groups])
        return [
            vote_decision(list(v.sizes), len(g), voting.band, voting.tau, voting.filter, seq.confidence, prior)
            is not None
            for v, g in zip(votes, groups)
        ]

    groups = sample_staged(
        sampler, [prompter.solver(q) for q in questions], schedule_of(seq, voting.samples), params, batch_prompts, stop
    )
    answers = [[completion_answer(c) for c in g] for g in groups]
    return _records(questions, answers, grader)


def confidence_filter(
    records: Sequence[VoteRecord], band: Band, tau: float = 1.6, mode: FilterMode = "dual"
) -> list[VoteRecord]:
    """DiagEvo's dual-confidence filter (stage 2); also D²Evo's band filter (``absolute``).

    * ``dual``: keep when p1 lies in ``band`` (not trivial, not hopeless) and ``p1 >= tau · p2``
      (the majority clearly beats the runner-up, so the pseudo-label is trustworthy);
    * ``absolute``: only the band;
    * ``none``: keep everything (ablation "no filter").

    Records without a label (nothing parsed) are always dropped: there is nothing to train on.
    """
    if mode not in ("dual", "absolute", "none"):
        raise ConfigError(f"filter mode must be 'dual', 'absolute' or 'none', got {mode!r}")
    if tau < 0:
        raise ConfigError(f"filter tau must be >= 0, got {tau}")
    kept = []
    for r in records:
        if r.label is None:
            continue
        if mode != "none" and not band.contains(r.p1):
            continue
        if mode == "dual" and r.p1 < tau * r.p2 - 1e-12:
            continue
        kept.append(r)
    return kept


def label_correct(record: VoteRecord, oracle: OracleFn, grader: AnswerGrader) -> bool | None:
    """Whether the pseudo-label equals the oracle answer (None when the world cannot tell or
    there is no label)."""
    gold = oracle(record.question)
    if gold is None or record.label is None:
        return None
    return bool(grader.is_equiv(gold, record.label))


def pseudo_label_accuracy(records: Sequence[VoteRecord], oracle: OracleFn, grader: AnswerGrader) -> float | None:
    """Share of records whose pseudo-label equals the oracle answer; None when no record can be
    checked (no oracle answers, e.g. real data). Unlabelled records count as wrong."""
    hits = total = 0
    for r in records:
        if oracle(r.question) is None:
            continue
        total += 1
        hits += int(bool(label_correct(r, oracle, grader)))
    return hits / total if total else None
