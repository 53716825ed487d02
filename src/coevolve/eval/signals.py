"""Label-free round signals, round selection and early stopping.

Neither paper chooses its final round automatically: DiagEvo's math average peaks at round 5
(72.3) and falls to 72.0 / 71.4 at rounds 6 / 7 (picked by hand, a limit the paper names);
D²Evo runs a fixed 3 rounds. After every round the solver answers a fixed *probe* set that is
never trained on (``recipes.probe.phase_probe``), and this module turns those answers into
figures that need no gold label, then picks a round from them.

Per probe question i with n answers, of which u_i are unparseable and the parseable ones fall
into answer clusters of sizes c_i1 >= c_i2 >= ... (``AnswerGrader.vote``):

* ``p1``        mean_i c_i1 / n                       (majority-vote self-consistency, as DiagEvo's p1)
* ``entropy``   mean_i −Σ_k q_ik ln q_ik, q_ik = c_ik / n, with the u_i unparseable answers
                one more bucket (nats; 0 = every answer the same)
* ``parsed``    Σ_i (n − u_i) / Σ_i n                  (share of answers with a final answer)
* ``answer_tokens``   mean completion length in tokens
* ``question_chars``  mean length of the questions the writer generated this round
* ``agreement`` share of probe questions whose majority label equals the previous round's
                (the base model's for round 1); a question unlabelled in either round disagrees
* ``accuracy`` / ``pass_rate`` (only where the probe has gold answers): majority label equal
  to gold (maj@n), and the share of single answers equal to gold (mean@n); ``pass_hist`` is the
  histogram of the per-question pass rates.

Selection (``run.select``): ``last`` (the papers' practice) or ``best_signal:<name>``: the round
t* in 1..T with the best value of the signal (higher is better except ``entropy``), the earliest
on ties. Early stopping (``run.stop_patience`` = k): after round t, with the base model's probe
as round 0, let b(t) be the earliest round in 0..t whose value is the best of rounds 0..t; the
run stops after round t when t − b(t) >= k, i.e. k rounds in a row brought no strict
improvement. Both are pure functions of the per-round values, so a resumed run decides the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from coevolve.errors import ConfigError

Direction = Literal["max", "min"]

SIGNALS: dict[str, Direction] = {
    "p1": "max",
    "entropy": "min",
    "parsed": "max",
    "agreement": "max",
    "accuracy": "max",
    "pass_rate": "max",
}
"""Signals a selection rule may name, with the direction that counts as better. ``answer_tokens``
and ``question_chars`` are logged to watch length inflation, not to select (no direction is
right in general). ``accuracy`` / ``pass_rate`` need gold answers on the probe."""

LABEL_FREE = ("p1", "entropy", "parsed", "agreement")
"""The signals that need no gold answer."""

PROBE_PREFIX = "probe/"
"""Namespace of the probe's figures in metrics.jsonl."""


def answer_entropy(sizes: Sequence[int], unparsed: int) -> float:
    """Entropy (nats) of one question's answer distribution: the answer clusters of ``sizes``
    plus one bucket for the ``unparsed`` answers.

    >>> round(answer_entropy([2, 2], 0), 4)
    0.6931
    >>> answer_entropy([4], 0)
    0.0
    """
    n = sum(sizes) + unparsed
    if n == 0:
        return 0.0
    return -sum(c / n * math.log(c / n) for c in [*sizes, unparsed] if c > 0)


def probe_signals(
    sizes: Sequence[Sequence[int]],
    n: Sequence[int],
    answer_tokens: Sequence[Sequence[int]],
    agree_prev: Sequence[bool] | None = None,
    correct: Sequence[Sequence[bool]] | None = None,
    label_correct: Sequence[bool] | None = None,
    question_chars: Sequence[int] = (),
) -> dict[str, float | None]:
    """The round's signals from the probe's answers: per question ``sizes`` (answer clusters,
    descending, parseable answers only) of ``n`` answers, each answer's length in tokens
    (``answer_tokens``), whether its majority label equals the previous round's
    (``agree_prev``; None in a run's first probe), each answer's correctness against gold
    (``correct``) and its majority label's (``label_correct``; both None without gold), and the lengths of this round's generated questions.

    >>> s = probe_signals([[3, 1], [2]], [4, 4], [[5, 5, 5, 5], [3, 3, 3, 3]], [True, False])
    >>> s["p1"], s["parsed"], s["agreement"], s["answer_tokens"]
    (0.625, 0.875, 0.5, 4.0)
    """
    if not len(sizes) == len(n) == len(answer_tokens):
        raise ValueError(
            f"probe_signals: {len(sizes)} questions with sizes, {len(n)} with n, "
            f"{len(answer_tokens)} with answer lengths"
        )
    q = len(sizes)
    total = sum(n)
    p1 = [s[0] / k if s and k else 0.0 for s, k in zip(sizes, n)]  # (Q,)
    ent = [answer_entropy(s, k - sum(s)) for s, k in zip(sizes, n)]  # (Q,)
    lengths = [t for per in answer_tokens for t in per]
    out: dict[str, float | None] = {
        "p1": _mean(p1),
        "entropy": _mean(ent),
        "parsed": sum(sum(s) for s in sizes) / total if total else None,
        "answer_tokens": _mean([float(t) for t in lengths]),
        "question_chars": _mean([float(c) for c in question_chars]),
        "agreement": None if agree_prev is None else _mean([float(a) for a in agree_prev]),
        "accuracy": None,
        "pass_rate": None,
    }
    if agree_prev is not None and len(agree_prev) != q:
        raise ValueError(f"probe_signals: {len(agree_prev)} agreement flags for {q} questions")
    if correct is not None:
        if len(correct) != q:
            raise ValueError(f"probe_signals: {len(correct)} rows of correctness for {q} questions")
        out["pass_rate"] = _mean([sum(c) / len(c) if c else 0.0 for c in correct])
    if label_correct is not None:
        if len(label_correct) != q:
            raise ValueError(f"probe_signals: {len(label_correct)} label checks for {q} questions")
        out["accuracy"] = _mean([float(c) for c in label_correct])
    return out


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# ----------------------------------------------------------------------------------------------
# selection and stopping


@dataclass(frozen=True)
class SelectRule:
    """A parsed ``run.select``: ``last``, or the best round of ``signal``."""

    kind: Literal["last", "best_signal"]
    signal: str | None = None

    @property
    def direction(self) -> Direction:
        return SIGNALS[self.signal] if self.signal else "max"

    def __str__(self) -> str:
        return "last" if self.kind == "last" else f"best_signal:{self.signal}"


def parse_select(text: str) -> SelectRule:
    """``last`` or ``best_signal:<name>`` with a name of ``SIGNALS``; a clear error otherwise.

    >>> parse_select("best_signal:p1")
    SelectRule(kind='best_signal', signal='p1')
    """
    if text == "last":
        return SelectRule("last")
    kind, _, name = text.partition(":")
    if kind == "best_signal" and name in SIGNALS:
        return SelectRule("best_signal", name)
    raise ConfigError(
        f"run.select={text!r}: expected 'last' or 'best_signal:<name>' with a name among {', '.join(SIGNALS)}"
    )


def _better(a: float, b: float, direction: Direction) -> bool:
    return a > b if direction == "max" else a < b


def best_round(values: Mapping[int, float | None], direction: Direction) -> int | None:
    """The earliest round holding the best value (None values skipped; None when none).

    >>> best_round({1: 0.5, 2: 0.7, 3: 0.7}, "max"), best_round({1: 0.5, 2: 0.7}, "min")
    (2, 1)
    """
    best: int | None = None
    for t in sorted(values):
        v = values[t]
        if v is None:
            continue
        if best is None or _better(v, values[best], direction):  # type: ignore[arg-type]
            best = t
    return best


def stop_round(values: Mapping[int, float | None], direction: Direction, patience: int | None) -> int | None:
    """The round after which the run stops (None: it does not): the first t >= 1 with
    t − b(t) >= ``patience``, b(t) the earliest best round of 0..t (round 0: the base model).

    >>> stop_round({0: 0.5, 1: 0.6, 2: 0.6, 3: 0.55, 4: 0.9}, "max", 2)
    3
    >>> stop_round({0: 0.5, 1: 0.6, 2: 0.7}, "max", 1) is None
    True
    """
    if not patience:
        return None
    for t in sorted(k for k in values if k >= 1):
        b = best_round({k: v for k, v in values.items() if k <= t}, direction)
        if b is not None and t - b >= patience:
            return t
    return None


def select_round(rule: SelectRule, values: Mapping[int, float | None], last: int) -> tuple[int, str]:
    """The round to export and evaluate as final under ``rule`` among rounds 1..``last``, and
    why, in words (``values``: the rule's signal by round; round 0 is ignored)."""
    if rule.kind == "last":
        return last, f"run.select=last: the last round run ({last})"
    rounds = {t: v for t, v in values.items() if 1 <= t <= last}
    t = best_round(rounds, rule.direction)
    if t is None:
        return last, f"run.select={rule}: no round has a {rule.signal} value on the probe; the last round ({last})"
    best = "highest" if rule.direction == "max" else "lowest"
    return t, f"run.select={rule}: round {t} has the {best} probe {rule.signal} ({rounds[t]:.4f}) of rounds 1-{last}"


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties; Pearson on the ranks); None with
    fewer than 3 pairs or a constant side.

    >>> rank_correlation([1, 2, 3, 4], [10, 20, 30, 25])
    0.8
    """
    if len(xs) != len(ys):
        raise ValueError(f"rank_correlation: {len(xs)} x values but {len(ys)} y values")
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


SIGNAL_ORDER = ("p1", "entropy", "parsed", "agreement", "answer_tokens", "question_chars", "accuracy", "pass_rate")
"""Every per-round probe figure, in the order the report shows them."""


def oracle_regret(chosen: int, accuracy: Mapping[int, float]) -> tuple[bool, float]:
    """Whether round ``chosen`` has the best held-out ``accuracy`` of rounds >= 1 (the oracle's
    choice; a tie counts as the best), and the accuracy lost against that choice.

    >>> hit, lost = oracle_regret(2, {0: 0.9, 1: 0.5, 2: 0.7, 3: 0.75})
    >>> hit, round(lost, 4)
    (False, 0.05)
    """
    best = max(v for t, v in accuracy.items() if t >= 1)
    return accuracy[chosen] >= best, best - accuracy[chosen]


__all__ = [
    "LABEL_FREE",
    "PROBE_PREFIX",
    "SIGNALS",
    "SIGNAL_ORDER",
    "SelectRule",
    "answer_entropy",
    "best_round",
    "oracle_regret",
    "parse_select",
    "probe_signals",
    "rank_correlation",
    "select_round",
    "stop_round",
]
