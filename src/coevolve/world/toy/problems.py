"""The toy arithmetic world: problems, oracle answers, features and step traces.

Why a world of our own: no data can be downloaded, and the self-evolution loop needs problems
whose exact answer, difficulty features (carries, borrows, ...) and correct step-by-step trace
are known to the generator. That lets us measure what the papers can only estimate (true
pseudo-label accuracy, true difficulty of generated questions) and makes error causes meaningful.

Levels (as in the measured toy-world prototype):

- L1: 1-digit ``a+b``, ``a-b`` (a >= b), ``a*b``; one step ``a+b=r``.
- L2: 2-digit ``a+b`` / ``a-b`` (a >= b); column steps, ones first: ``7+8=15 3+5+1=9``;
  subtraction shows the borrowed top digit: ``62-38`` -> ``12-8=4 5-3=2``.
- L3: 3-digit ``a+b`` with at least one carry into a next column; column steps.
- L4: three 2-digit operands joined by ``+``/``-``, evaluated left to right, every partial
  result non-negative: ``41+18-36`` -> ``41+18=59 59-36=23``.

A question is the bare expression (``"37+58"``); prompts add ``=``. Completions use the same
format as real reasoning models: ``<think>`` steps ``</think>\\boxed{ans}`` (direct style:
``<think></think>\\boxed{ans}``).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coevolve.errors import DataError
from coevolve.types import Task

WORLD_VERSION = 2
"""Bump when problems, traces or prompt formats change: cached base models are keyed by it."""

LEVELS: tuple[int, ...] = (1, 2, 3, 4)

L1_PROBLEMS = 255
"""Distinct L1 problems: 100 sums, 55 differences (a >= b), 100 products of one-digit numbers."""

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_QUESTION_RE = re.compile(r"^(\d+)([+\-*])(\d+)(?:([+\-])(\d+))?$")


@dataclass(frozen=True)
class Problem:
    """One in-family problem with everything the world knows about it."""

    question: str  # canonical expression, e.g. "37+58"
    answer: str  # exact answer as a decimal string
    level: int
    steps: tuple[str, ...]  # correct step trace, e.g. ("7+8=15", "3+5+1=9")
    features: dict[str, Any] = field(default_factory=dict, compare=False)

    def completion(self, direct: bool = False) -> str:
        """Solver completion text (without EOS) in the project's output format."""
        return render_completion(() if direct else self.steps, self.answer)

    def to_task(self, source: str = "toy") -> Task:
        return Task(
            id=f"toy-L{self.level}-{self.question}",
            question=self.question,
            answer=self.answer,
            source=source,
            features=dict(self.features),
        )


def render_completion(steps: Sequence[str], answer: str) -> str:
    """``<think>s1 s2</think>\\boxed{ans}``: the single source of truth for the solver format."""
    return f"{THINK_OPEN}{' '.join(steps)}{THINK_CLOSE}\\boxed{{{answer}}}"


# --------------------------------------------------------------------------------------------
# column arithmetic (shared by traces, features and error classification)


def digits(n: int, width: int = 0) -> list[int]:
    """Decimal digits of ``n``, ones first, zero-padded to ``width``."""
    out = [int(c) for c in reversed(str(n))]
    return out + [0] * (width - len(out))


def column_add(a: int, b: int) -> tuple[list[str], list[int], bool]:
    """Column addition, ones first.

    Returns (steps, carry_columns, carry_out): ``carry_columns`` are the columns whose carry
    goes into a *next column* (those are the carries a solver can drop); ``carry_out`` says the
    top column overflowed (it is written in full, e.g. ``5+6+1=12`` -> ``125``).
    """
    width = max(len(str(a)), len(str(b)))
    da, db = digits(a, width), digits(b, width)
    steps: list[str] = []
    carry_cols: list[int] = []
    carry = 0
    for j in range(width):
        terms = [da[j], db[j]] + ([carry] if carry else [])
        s = sum(terms)
        steps.append("+".join(str(t) for t in terms) + f"={s}")
        carry = s // 10
        if carry and j < width - 1:
            carry_cols.append(j)
    return steps, carry_cols, bool(carry)


def column_sub(a: int, b: int) -> tuple[list[str], list[int], bool]:
    """Column subtraction (a >= b), ones first, showing the borrowed/reduced top digit.

    Returns (steps, borrow_columns, borrow_across_zero). ``borrow_across_zero`` is true when a
    borrow has to be taken in a column whose top digit is 0 (``60-38`` -> ``10-8``) or has to
    pass through a 0 (``503-278``): the classic hard case for learners.
    """
    if a < b:
        raise DataError(f"column_sub: negative result for {a}-{b}")
    width = len(str(a))
    da, db = digits(a, width), digits(b, width)
    steps: list[str] = []
    borrow_cols: list[int] = []
    across_zero = False
    borrow = 0
    for j in range(width):
        top = da[j] - borrow
        if top < db[j]:
            if da[j] == 0:
                across_zero = True
            top += 10
            borrow = 1
            borrow_cols.append(j)
        else:
            if borrow and da[j] == 0:
                across_zero = True
            borrow = 0
        steps.append(f"{top}-{db[j]}={top - db[j]}")
    return steps, borrow_cols, across_zero


def _apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise DataError(f"unknown operator {op!r}")


# --------------------------------------------------------------------------------------------
# parsing and classification


def _no_leading_zero(s: str) -> bool:
    return s == "0" or not s.startswith("0")


def parse_toy_question(text: str) -> str | None:
    """Canonical question when ``text`` is a valid in-family problem, else None.

    Why strict: generated questions are only useful (and their oracle only defined) inside the
    families L1..L4; ``01+55``, ``51-99`` (negative) or run-on text are rejected. A trailing
    ``=`` and surrounding whitespace are tolerated.
    """
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s.endswith("="):
        s = s[:-1]
    m = _QUESTION_RE.match(s)
    if m is None:
        return None
    a_s, op1, b_s, op2, c_s = m.groups()
    nums = [x for x in (a_s, b_s, c_s) if x is not None]
    if not all(_no_leading_zero(x) for x in nums):
        return None
    if _level_of(s) is None:
        return None
    return s


def _level_of(q: str) -> int | None:
    m = _QUESTION_RE.match(q)
    if m is None:
        return None
    a_s, op1, b_s, op2, c_s = m.groups()
    a, b = int(a_s), int(b_s)
    lens = [len(a_s), len(b_s)]
    if c_s is None:
        if op1 == "-" and a < b:
            return None
        if lens == [1, 1]:
            return 1
        if lens == [2, 2] and op1 in "+-":
            return 2
        if lens == [3, 3] and op1 == "+":
            _, carry_cols, _ = column_add(a, b)
            return 3 if carry_cols else None
        return None
    if op1 not in "+-" or len(c_s) != 2 or lens != [2, 2]:
        return None
    r1 = _apply(a, op1, b)
    r2 = _apply(r1, op2, int(c_s))
    if r1 < 0 or r2 < 0:
        return None
    return 4


def make_problem(question: str) -> Problem:
    """Full :class:`Problem` (answer, level, trace, features) for a valid question.

    Raises DataError naming the question when it is not in the families.
    """
    q = parse_toy_question(question)
    if q is None:
        raise DataError(f"not a valid toy question: {question!r}")
    level = _level_of(q)
    assert level is not None
    m = _QUESTION_RE.match(q)
    assert m is not None
    a_s, op1, b_s, op2, c_s = m.groups()
    operands = [int(a_s), int(b_s)] + ([int(c_s)] if c_s is not None else [])
    ops = [op1] + ([op2] if op2 is not None else [])
    cols = _columns(operands, ops, level)
    steps = _solution_steps(operands, ops, level, cols.answer)
    feats = _features(operands, ops, level, cols, len(steps))
    return Problem(question=q, answer=str(cols.answer), level=level, steps=tuple(steps), features=feats)


@dataclass(frozen=True)
class _Columns:
    """What the column analysis of a problem's binary operations finds, and the answer."""

    answer: int
    carry_cols: list[int]
    borrow_cols: list[int]
    carry_out: bool
    across_zero: bool


def _columns(operands: Sequence[int], ops: Sequence[str], level: int) -> _Columns:
    """Column analysis of each binary operation, left to right (L4 sub-operations too: they are
    what a dropped carry / forgotten borrow corrupts, even when the trace shows whole-number steps)."""
    carry_cols: list[int] = []
    borrow_cols: list[int] = []
    across_zero = False
    carry_out = False
    acc = operands[0]
    for op, x in zip(ops, operands[1:]):
        if op == "+" and level > 1:
            _, cc, co = column_add(acc, x)
            carry_cols += cc
            carry_out = carry_out or co
        elif op == "-" and level > 1:
            _, bc, az = column_sub(acc, x)
            borrow_cols += bc
            across_zero = across_zero or az
        acc = _apply(acc, op, x)
    return _Columns(acc, carry_cols, borrow_cols, carry_out, across_zero)


def _solution_steps(operands: Sequence[int], ops: Sequence[str], level: int, answer: int) -> list[str]:
    """The correct trace: one step (L1), the column steps (L2, L3) or the two whole-number steps (L4)."""
    a, b = operands[0], operands[1]
    if level == 1:
        return [f"{a}{ops[0]}{b}={answer}"]
    if level in (2, 3):
        return column_add(a, b)[0] if ops[0] == "+" else column_sub(a, b)[0]
    r1 = _apply(a, ops[0], b)
    return [f"{a}{ops[0]}{b}={r1}", f"{r1}{ops[1]}{operands[2]}={answer}"]


def _features(operands: list[int], ops: list[str], level: int, cols: _Columns, n_steps: int) -> dict[str, Any]:
    return {
        "level": level,
        "op": ops[0],
        "ops": ops,
        "operands": operands,
        "n_operands": len(operands),
        "n_digits": max(len(str(x)) for x in operands),
        "carries": len(cols.carry_cols),
        "carry_columns": cols.carry_cols,
        "carry_out": cols.carry_out,
        "borrows": len(cols.borrow_cols),
        "borrow_columns": cols.borrow_cols,
        "borrow_across_zero": cols.across_zero,
        "has_sum": "+" in ops,
        "has_difference": "-" in ops,
        "has_product": "*" in ops,
        # a-(b op c) differs from (a-b) op c: only then can "out of order" change the answer
        "order_matters": len(ops) == 2 and ops[0] == "-",
        "n_steps": n_steps,
    }


def oracle(question: str) -> str | None:
    """Exact answer of an in-family question, None when the question is not valid."""
    q = parse_toy_question(question)
    return None if q is None else make_problem(q).answer


def features(question: str) -> dict[str, Any]:
    """Features of a valid question (level, ops, carries, borrows, ...); DataError otherwise."""
    return dict(make_problem(question).features)


def correct_steps(question: str) -> tuple[str, ...]:
    """The correct step trace of a valid question."""
    return make_problem(question).steps


# --------------------------------------------------------------------------------------------
# generation


def random_problem(rng: random.Random, level: int) -> Problem:
    """One uniformly drawn problem of ``level`` (rejection sampling inside the family)."""
    if level == 1:
        op = rng.choice("+-*")
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        if op == "-" and a < b:
            a, b = b, a
        return make_problem(f"{a}{op}{b}")
    if level == 2:
        op = rng.choice("+-")
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if op == "-" and a < b:
            a, b = b, a
        return make_problem(f"{a}{op}{b}")
    if level == 3:
        while True:
            a, b = rng.randint(100, 999), rng.randint(100, 999)
            if column_add(a, b)[1]:
                return make_problem(f"{a}+{b}")
    if level == 4:
        while True:
            a, b, c = (rng.randint(10, 99) for _ in range(3))
            op1, op2 = rng.choice("+-"), rng.choice("+-")
            q = f"{a}{op1}{b}{op2}{c}"
            if _level_of(q) == 4:
                return make_problem(q)
    raise DataError(f"unknown toy level {level}; levels are {LEVELS}")


def _check_levels(levels: Sequence[int] | None) -> tuple[int, ...]:
    lv = tuple(LEVELS if levels is None else levels)
    bad = [x for x in lv if x not in LEVELS]
    if not lv or bad:
        raise DataError(f"levels={list(lv)}: each level must be one of {list(LEVELS)}")
    return lv


@functools.lru_cache(maxsize=8)
def _heldout_problems(n: int, seed: int) -> tuple[Problem, ...]:
    # memo of a pure function (deterministic in (n, seed)), not shared mutable state
    rng = random.Random(seed)
    out: list[Problem] = []
    for i, level in enumerate(LEVELS):
        k = n // len(LEVELS) + (1 if i < n % len(LEVELS) else 0)
        seen: set[str] = set()
        while len(seen) < k:
            p = random_problem(rng, level)
            if p.question not in seen:
                seen.add(p.question)
                out.append(p)
    return tuple(out)


def heldout_questions(n: int = 500, seed: int = 1234) -> frozenset[str]:
    """The held-out questions (excluded from pretraining and from :func:`sample_tasks`)."""
    return frozenset(p.question for p in _heldout_problems(n, seed))


def heldout_tasks(n: int = 500, seed: int = 1234) -> list[Task]:
    """Fixed, seeded evaluation set, balanced over levels, distinct questions.

    L1 has only 255 distinct problems, so the default 125 L1 items are about half of that
    family: L1 held-out accuracy therefore measures generalisation, as in the prototype.
    """
    if n < len(LEVELS) or n > 2000:
        raise DataError(f"heldout_tasks: n={n} must be in [{len(LEVELS)}, 2000]")
    if -(-n // len(LEVELS)) > L1_PROBLEMS:  # the balanced draw would search for L1 problems that do not exist
        raise DataError(
            f"eval.heldout_size={n}: a held-out set balanced over {len(LEVELS)} levels needs "
            f"{-(-n // len(LEVELS))} distinct L1 problems and L1 has {L1_PROBLEMS}; use at most "
            f"{L1_PROBLEMS * len(LEVELS)} (only the default 500 were kept out of the base's pretraining)"
        )
    return [p.to_task(source="toy-heldout") for p in _heldout_problems(n, seed)]


def sample_problems(
    rng: random.Random, n: int, levels: Sequence[int] | None = None, exclude_heldout: bool = True
) -> list[Problem]:
    """``n`` problems, level uniform over ``levels``, never a default held-out question."""
    lv = _check_levels(levels)
    banned = heldout_questions() if exclude_heldout else frozenset()
    out: list[Problem] = []
    while len(out) < n:
        p = random_problem(rng, rng.choice(lv))
        if p.question not in banned:
            out.append(p)
    return out


def sample_tasks(
    rng: random.Random, n: int, levels: Sequence[int] | None = None, exclude_heldout: bool = True
) -> list[Task]:
    """Training tasks with ``features`` filled (duplicates possible: draws are independent)."""
    return [p.to_task() for p in sample_problems(rng, n, levels, exclude_heldout)]


def labelled_set(n: int, levels: Sequence[int] | None = None, seed: int = 0) -> list[Task]:
    """A fixed labelled set of ``n`` distinct problems (level uniform over ``levels``, never a
    default held-out question), the same for every caller with the same arguments.

    Why: fresh draws give GRPO an unlimited labelled set of exactly the held-out distribution;
    the papers' setting is a limited labelled pool, shared by the full-label baseline and D²Evo's
    anchors. Raises DataError when the levels hold fewer than ``n`` allowed problems.
    """
    lv = _check_levels(levels)
    rng = random.Random(seed)
    banned = heldout_questions()
    seen: set[str] = set()
    out: list[Problem] = []
    misses = 0
    while len(out) < n:
        p = random_problem(rng, rng.choice(lv))
        if p.question in banned or p.question in seen:
            misses += 1
            if misses > 100 * n + 10_000:  # the levels are (nearly) exhausted: L1 has 255 problems
                raise DataError(
                    f"labelled_set: cannot find {n} distinct problems of levels {list(lv)} outside the "
                    f"held-out set (found {len(out)}); lower data.limit or add levels"
                )
            continue
        seen.add(p.question)
        out.append(p)
    return [p.to_task() for p in out]
