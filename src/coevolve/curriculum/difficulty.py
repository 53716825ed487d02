"""D²Evo step 1-2: difficulty of labelled questions under the frozen solver, and anchor mining.

``Acc_S(q) = correct / N`` over N solver samples; ``Difficulty(q) = (1 - correct/N) · 100`` (the
paper's scale, shown to the questioner); anchors are the questions with ``low <= Acc_S <= high``.

``estimate_difficulty`` is the paper's fixed N; ``estimate_difficulty_adaptive`` draws the
answers in stages and stops a question once its band membership is decided
(``coevolve.curriculum.sequential``), so N varies per question and each record carries its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from coevolve.curriculum.sampling import CurriculumError, answer_text, completion_answer, sample_chunked, sample_staged
from coevolve.curriculum.sequential import band_decision, schedule_of
from coevolve.errors import ConfigError
from coevolve.prompts import Prompter
from coevolve.schema import Band, Sequential
from coevolve.types import AnswerGrader, Completion, Sampler, SamplingParams, Task


@dataclass
class PassRecord:
    """Measured difficulty of one labelled question under the frozen solver.

    ``pass_rate = correct / n``; ``difficulty = (1 - correct/n) * 100``. ``answers`` are the
    extracted final answers (None = unparseable). ``n`` is the number of answers the rate rests
    on (fixed: N; adaptive: where the question stopped); ``decision`` says why an adaptive
    estimate stopped there ("below" / "inside" / "above": decided early; "cap": undecided, all N
    drawn) and is None for the fixed estimator (and then left out of the saved row).
    """

    task_id: str
    question: str
    answer: str
    n: int
    correct: int
    pass_rate: float
    difficulty: float
    answers: list[str | None] = field(default_factory=list)
    features: dict[str, Any] = field(default_factory=dict)
    decision: str | None = None

    @classmethod
    def from_counts(
        cls, task: Task, correct: int, n: int, answers: list[str | None] | None = None, decision: str | None = None
    ) -> PassRecord:
        if task.answer is None:
            raise CurriculumError(f"task {task.id!r} has no answer: difficulty needs a labelled question")
        if not 0 <= correct <= n or n < 1:
            raise CurriculumError(f"task {task.id!r}: correct={correct} out of n={n}")
        rate = correct / n
        return cls(
            task.id,
            task.question,
            task.answer,
            n,
            correct,
            rate,
            (1.0 - rate) * 100.0,
            list(answers or []),
            dict(task.features),
            decision,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["decision"] is None:  # fixed estimator: the saved row stays as it always was
            del d["decision"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PassRecord:
        return cls(**d)

    def to_task(self) -> Task:
        """The question as a solver task, carrying its measured difficulty and pass rate."""
        return Task(
            self.task_id,
            self.question,
            self.answer,
            features={**self.features, "difficulty": self.difficulty, "pass_rate": self.pass_rate},
        )


def estimate_difficulty(
    sampler: Sampler,
    prompter: Prompter,
    tasks: Sequence[Task],
    n: int,
    params: SamplingParams,
    grader: AnswerGrader,
    batch_prompts: int = 64,
) -> list[PassRecord]:
    """Sample ``n`` solver answers per labelled task and count the correct ones
    (``len(tasks) * n`` rollouts, one sampler call per chunk of ``batch_prompts`` prompts)."""
    for t in tasks:
        if t.answer is None:
            raise CurriculumError(f"task {t.id!r} has no answer: difficulty needs labelled questions")
    groups = sample_chunked(sampler, [prompter.solver(t.question) for t in tasks], n, params, batch_prompts)
    texts = [answer_text(c) for g in groups for c in g]
    golds = [str(t.answer) for t, g in zip(tasks, groups) for _ in g]
    verdicts = grader.grade_batch(golds, texts)
    records = []
    for i, (t, g) in enumerate(zip(tasks, groups)):
        correct = sum(bool(v) for v in verdicts[i * n : (i + 1) * n])
        records.append(PassRecord.from_counts(t, correct, n, [completion_answer(c) for c in g]))
    return records


def carry_prior(prev: PassRecord | None, seq: Sequential, discount: float) -> tuple[float, float]:
    """Beta prior of a question from last round's counts: ``(a + γ·k', b + γ·(n' - k'))`` with
    γ = ``discount`` (0 = the plain prior; last round's solver was a different model, so its
    counts are worth less than this round's)."""
    if discount < 0:
        raise ConfigError(f"difficulty.carry must be >= 0, got {discount}")
    if prev is None or discount == 0:
        return (seq.prior_a, seq.prior_b)
    return (seq.prior_a + discount * prev.correct, seq.prior_b + discount * (prev.n - prev.correct))


def estimate_difficulty_adaptive(
    sampler: Sampler,
    prompter: Prompter,
    tasks: Sequence[Task],
    n: int,
    params: SamplingParams,
    grader: AnswerGrader,
    band: Band,
    seq: Sequential,
    batch_prompts: int = 64,
    priors: Sequence[tuple[float, float]] | None = None,
) -> list[PassRecord]:
    """Sequential difficulty: answers in stages ``seq.stages`` then up to the cap ``n`` (each stage
    one chunked pass over the undecided questions); a question stops once ``band_decision``
    decides its band membership at ``seq.confidence`` under its prior (``priors[i]``, default
    ``(seq.prior_a, seq.prior_b)``). Undecided at the cap: ``k / n`` as in ``estimate_difficulty``.
    Rollouts = ``sum(r.n for r in records)``."""
    for t in tasks:
        if t.answer is None:
            raise CurriculumError(f"task {t.id!r} has no answer: difficulty needs labelled questions")
    schedule = schedule_of(seq, n)
    if priors is not None and len(priors) != len(tasks):
        raise CurriculumError(f"{len(priors)} priors for {len(tasks)} tasks")
    prior_of = list(priors) if priors is not None else [(seq.prior_a, seq.prior_b)] * len(tasks)
    golds = [str(t.answer) for t in tasks]
    verdicts: list[list[bool]] = [[] for _ in tasks]
    decided: dict[int, str] = {}

    def grade_new(idx: list[int], groups: list[list[Completion]]) -> None:
        pairs = [(i, answer_text(c)) for i, g in zip(idx, groups) for c in g[len(verdicts[i]) :]]
        for (i, _), v in zip(pairs, grader.grade_batch([golds[i] for i, _ in pairs], [t for _, t in pairs])):
            verdicts[i].append(bool(v))

    def stop(idx: list[int], groups: list[list[Completion]]) -> list[bool]:
        grade_new(idx, groups)
        out = []
        for i in idx:
            d = band_decision(sum(verdicts[i]), len(verdicts[i]), band, seq.confidence, prior_of[i])
            if d is not None:
                decided[i] = d
            out.append(d is not None)
        return out

    groups = sample_staged(sampler, [prompter.solver(t.question) for t in tasks], schedule, params, batch_prompts, stop)
    grade_new(list(range(len(tasks))), groups)
    return [
        PassRecord.from_counts(
            t, sum(verdicts[i]), len(verdicts[i]), [completion_answer(c) for c in groups[i]], decided.get(i, "cap")
        )
        for i, t in enumerate(tasks)
    ]


def mine_anchors(records: Sequence[PassRecord], band: Band) -> list[PassRecord]:
    """D²Evo anchors D_real^mid: the records whose pass rate lies in ``band`` (inclusive)."""
    return [r for r in records if band.contains(r.pass_rate)]


def random_anchors(records: Sequence[PassRecord], k: int, rng: random.Random) -> list[PassRecord]:
    """Ablation "w/ random anchor data": ``k`` records drawn uniformly without replacement
    (all of them when fewer), ignoring their pass rate. ``k`` is normally the band count, so
    the comparison with band mining holds the anchor count fixed."""
    if k < 0:
        raise CurriculumError(f"random_anchors: k must be >= 0, got {k}")
    return rng.sample(list(records), min(k, len(records)))


HIST_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def histogram_labels(edges: Sequence[float] = HIST_EDGES) -> list[str]:
    """Bin names of ``pass_rate_histogram``: ``=0, (0,0.2), [0.2,0.4), ..., [0.8,1), =1``."""
    e = [f"{x:g}" for x in edges]
    inner = ["[" + a + "," + b + ")" for a, b in zip(e[1:-1], e[2:])]
    return ["=" + e[0], "(" + e[0] + "," + e[1] + ")", *inner, "=" + e[-1]]


def pass_rate_histogram(rates: Iterable[float], edges: Sequence[float] = HIST_EDGES) -> dict[str, int]:
    """Counts per bin with the exact-0 and exact-1 bins separated (=0, (0,.2), [.2,.4), …,
    [.8,1), =1): the never-solved and always-solved questions carry no GRPO signal, so they
    are the two numbers that matter most when watching anchors shift.

    >>> pass_rate_histogram([0, 0.1, 0.2, 0.5, 0.8, 0.99, 1.0])
    {'=0': 1, '(0,0.2)': 1, '[0.2,0.4)': 1, '[0.4,0.6)': 1, '[0.6,0.8)': 0, '[0.8,1)': 2, '=1': 1}
    """
    e = [float(x) for x in edges]
    if len(e) < 2 or any(b <= a for a, b in zip(e, e[1:])):
        raise ConfigError(f"histogram edges must be >= 2 increasing values, got {list(edges)}")
    labels = histogram_labels(e)
    counts = dict.fromkeys(labels, 0)
    for r in rates:
        if not e[0] <= r <= e[-1]:
            raise CurriculumError(f"pass rate {r} outside the histogram range [{e[0]}, {e[-1]}]")
        if r == e[0]:
            counts[labels[0]] += 1
        elif r == e[-1]:
            counts[labels[-1]] += 1
        else:
            k = max(i for i in range(len(e) - 1) if r >= e[i])  # bin [e_k, e_k+1); k=0 is (e0, e1)
            counts[labels[k + 1]] += 1
    return counts
