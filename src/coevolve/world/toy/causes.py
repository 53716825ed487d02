"""Error-cause catalogue of the toy world and rule-based diagnosis of solver traces.

Why: DiagEvo's challenger writes questions that target a *transferable* error cause ("dropped
the carry into the next column"), and its diagnoser names the cause where a wrong trace leaves
a right one. In the toy world both are exact: every cause maps to a problem feature the
generator can produce on demand, and a wrong step can be classified against the correct trace.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from coevolve.errors import DataError
from coevolve.world.toy.problems import (
    LEVELS,
    THINK_CLOSE,
    THINK_OPEN,
    Problem,
    column_add,
    digits,
    make_problem,
    parse_toy_question,
    random_problem,
)


@dataclass(frozen=True)
class ToyCause:
    """A transferable error cause: no numbers of any particular question in its text."""

    id: str
    text: str
    skill: str


@dataclass(frozen=True)
class Divergence:
    """Where a wrong completion leaves a right one, and why (the cause it shows)."""

    step: int  # index of the first differing step (0-based)
    cause_id: str
    cause: str  # cause text
    skill: str
    bad_step: str  # "" when the bad completion has no step there
    good_step: str  # the step of the good completion ("" when none)


def _c(id_: str, text: str, skill: str) -> tuple[str, ToyCause]:
    return id_, ToyCause(id_, text, skill)


CAUSES: Mapping[str, ToyCause] = MappingProxyType(
    dict(
        [
            _c("carry_dropped", "dropped the carry into the next column", "addition"),
            _c("extra_carry", "added a carry that was not there", "addition"),
            _c("single_sum", "wrong single-digit sum", "addition"),
            _c("multi_sum", "wrong sum of two numbers", "addition"),
            _c("forgot_borrow", "forgot to borrow", "subtraction"),
            _c("borrow_across_zero", "borrow across a zero", "subtraction"),
            _c("borrow_not_repaid", "forgot to reduce the next digit after borrowing", "subtraction"),
            _c("single_diff", "wrong single-digit difference", "subtraction"),
            _c("multi_diff", "wrong difference of two numbers", "subtraction"),
            _c("single_product", "wrong single-digit product", "multiplication"),
            _c("op_order", "applied operations out of order", "multi-step"),
            _c("wrong_intermediate", "used a wrong intermediate result in the next step", "multi-step"),
            _c("misread", "copied a number wrongly from the question", "working"),
            _c("guessed", "guessed the answer without working", "working"),
            _c("answer_mismatch", "wrote a final answer that differs from the working", "working"),
        ]
    )
)
"""Cause id -> ToyCause. Skill nodes: addition, subtraction, multiplication, multi-step, working."""

# cause id -> (feature predicate, levels whose problems can show it). A problem "shows" a cause
# when the mistake is possible on it; the challenger is trained (and rewarded) on this.
_Pred = Callable[[dict[str, Any]], bool]
_CAUSE_FEATURE: Mapping[str, tuple[_Pred, tuple[int, ...]]] = MappingProxyType(
    {
        "carry_dropped": (lambda f: f["carries"] >= 1, (2, 3, 4)),
        "extra_carry": (lambda f: f["has_sum"] and f["level"] in (2, 3) and f["carries"] < f["n_digits"] - 1, (2, 3)),
        "single_sum": (lambda f: f["has_sum"] and f["level"] <= 3, (1, 2, 3)),
        "multi_sum": (lambda f: f["has_sum"] and f["level"] == 4, (4,)),
        "forgot_borrow": (lambda f: f["borrows"] >= 1, (2, 4)),
        "borrow_across_zero": (lambda f: f["borrow_across_zero"], (2, 4)),
        "borrow_not_repaid": (lambda f: f["borrows"] >= 1 and f["level"] == 2, (2,)),
        "single_diff": (lambda f: f["has_difference"] and f["level"] <= 2, (1, 2)),
        "multi_diff": (lambda f: f["has_difference"] and f["level"] == 4, (4,)),
        "single_product": (lambda f: f["has_product"], (1,)),
        "op_order": (lambda f: f["order_matters"], (4,)),
        "wrong_intermediate": (lambda f: f["n_operands"] == 3, (4,)),
        "misread": (lambda f: True, LEVELS),
        "guessed": (lambda f: f["n_steps"] >= 2, (2, 3, 4)),
        "answer_mismatch": (lambda f: True, LEVELS),
    }
)

_TEXT_TO_ID: Mapping[str, str] = MappingProxyType({c.text: c.id for c in CAUSES.values()})


def cause_by_text(text: str) -> ToyCause | None:
    """The catalogue cause whose text is ``text`` (exact, stripped), else None."""
    cid = _TEXT_TO_ID.get(text.strip())
    return None if cid is None else CAUSES[cid]


def _cause_id(cause: str) -> str:
    if cause in CAUSES:
        return cause
    c = cause_by_text(cause)
    if c is None:
        raise DataError(f"unknown toy cause {cause!r}: expected an id or text from CAUSES")
    return c.id


def shows_cause(cause: str, feats: dict[str, Any]) -> bool:
    """True when a problem with features ``feats`` exhibits ``cause`` (id or catalogue text)."""
    return bool(_CAUSE_FEATURE[_cause_id(cause)][0](feats))


def problem_for_causes(
    rng: random.Random, causes: Sequence[str], banned: frozenset[str] = frozenset(), tries: int = 400
) -> Problem:
    """A problem showing every cause in ``causes`` (ids or texts) when possible.

    Why a fallback: two causes may be incompatible (e.g. a product and a borrow); the stitched
    challenger target is then a problem showing the first cause, which is what a sensible
    writer would produce. ``[]`` -> any problem.
    """
    ids = [_cause_id(c) for c in causes]
    if not ids:
        while True:
            p = random_problem(rng, rng.choice(LEVELS))
            if p.question not in banned:
                return p
    for need in (ids, ids[:1]):
        levels = set(LEVELS)
        for cid in need:
            levels &= set(_CAUSE_FEATURE[cid][1])
        if not levels:
            continue
        lv = sorted(levels)
        for _ in range(tries):
            p = random_problem(rng, rng.choice(lv))
            if p.question not in banned and all(_CAUSE_FEATURE[c][0](p.features) for c in need):
                return p
    raise DataError(f"no toy problem shows causes {ids}")


# --------------------------------------------------------------------------------------------
# diagnosis of traces

_THINK_RE = re.compile(re.escape(THINK_OPEN) + r"(.*?)" + re.escape(THINK_CLOSE), re.S)
_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_STEP_RE = re.compile(r"^(\d+)([+\-*])(\d+)(?:([+\-*])(\d+))?=(-?\d+)$")


def parse_trace(completion: str) -> tuple[list[str], str | None]:
    """(steps, boxed answer) of a solver completion; steps are the space-separated items
    inside the first ``<think>...</think>`` (empty for a direct answer)."""
    m = _THINK_RE.search(completion)
    steps = m.group(1).split() if m else []
    boxes = _BOXED_RE.findall(completion)
    return steps, (boxes[-1].strip() if boxes else None)


def _nums(step: str) -> tuple[list[int], list[str], int] | None:
    m = _STEP_RE.match(step)
    if m is None:
        return None
    a, o1, b, o2, c, r = m.groups()
    ns = [int(a), int(b)] + ([int(c)] if c is not None else [])
    ops = [o1] + ([o2] if o2 is not None else [])
    return ns, ops, int(r)


def _no_carry_sums(a: int, b: int) -> set[int]:
    """Results of ``a+b`` with one or all inner carries dropped (what a dropped carry gives)."""
    width = max(len(str(a)), len(str(b)))
    da, db = digits(a, width), digits(b, width)
    out: set[int] = set()
    _, carry_cols, _ = column_add(a, b)
    for drop in [set(carry_cols)] + [{j} for j in carry_cols]:
        carry, total = 0, 0
        for j in range(width):
            s = da[j] + db[j] + carry
            carry = s // 10 if j not in drop else 0
            total += (s % 10 if j < width - 1 else s) * 10**j
        out.add(total)
    return out


def _no_borrow_diff(a: int, b: int) -> int:
    """``a-b`` computed digit by digit as smaller-from-larger (the forgot-to-borrow error)."""
    width = max(len(str(a)), len(str(b)))
    da, db = digits(a, width), digits(b, width)
    return sum(abs(x - y) * 10**j for j, (x, y) in enumerate(zip(da, db)))


def _classify_step(p: Problem, i: int, bad: str) -> str:
    """Cause id of a wrong step ``bad`` at index ``i`` of problem ``p``."""
    f = p.features
    ref = p.steps[i] if i < len(p.steps) else None
    got = _nums(bad)
    if ref is None or got is None:
        return "answer_mismatch" if ref is None else "misread"
    (rn, rops, _), (gn, gops, gr) = _nums(ref), got  # type: ignore[misc]
    if gn == rn and gops == rops:
        # right operands, wrong result: an arithmetic slip; say which kind
        op = rops[0]
        if f["level"] == 4:
            a, b = rn
            if op == "+" and gr in _no_carry_sums(a, b):
                return "carry_dropped"
            if op == "-" and gr == _no_borrow_diff(a, b):
                return "forgot_borrow"
            return "multi_sum" if op == "+" else "multi_diff"
        return {"+": "single_sum", "-": "single_diff", "*": "single_product"}[op]
    if f["level"] in (2, 3):
        if rops[0] == "+":
            # column addition: the carry term is the 3rd operand
            if len(rn) == 3 and gn == rn[:2]:
                return "carry_dropped"
            if len(gn) == 3 and len(rn) == 2 and gn[:2] == rn:
                return "extra_carry"
            return "misread"
        # column subtraction: compare with the original digits of the column
        a, b = f["operands"]
        width = len(str(a))
        top, bot = digits(a, width)[i], digits(b, width)[i]
        if gn == [top, bot] or gn == [bot, top]:
            if top == 0 and i in f["borrow_columns"]:
                return "borrow_across_zero"
            if i in f["borrow_columns"]:
                return "forgot_borrow"
            return "borrow_not_repaid"  # kept the top digit although the column lent one
        if gn[1:] == [bot] and gn[0] == top + 10 and i not in f["borrow_columns"]:
            return "forgot_borrow"  # borrowed when not needed: a borrow confusion
        if gn[1:] == [bot] and gn[0] in (top + 10, top) and top == 0:
            return "borrow_across_zero"
        return "misread"
    if f["level"] == 4:
        a, b, c = f["operands"]
        if i == 0:
            if gn == [b, c]:
                return "op_order"
            return "misread"
        # second step with the right operator and operand but another first number: the
        # (wrong or miscopied) intermediate result was carried into the next step
        if gn[1:] == rn[1:] and gops == rops:
            return "wrong_intermediate"
        return "misread"
    return "misread"


def explain_divergence(question: str, bad: str, good: str) -> Divergence | None:
    """The first step where the wrong completion ``bad`` leaves the right one ``good``, with the
    transferable cause of the mistake.

    Why the correct trace too: ``good`` may be a direct answer or take another route; the cause
    is read off by comparing the bad step with the *correct* step at that position. Returns
    None when the question is not in the family, when ``bad`` does not differ, or when its
    first wrong step cannot be located (e.g. no parseable answer at all).
    """
    q = parse_toy_question(question)
    if q is None:
        return None
    p = make_problem(q)
    bsteps, bans = parse_trace(bad)
    gsteps, gans = parse_trace(good)
    if bsteps == gsteps and bans == gans:
        return None

    def div(i: int, cid: str) -> Divergence:
        c = CAUSES[cid]
        bs = bsteps[i] if i < len(bsteps) else ""
        gs = gsteps[i] if i < len(gsteps) else (p.steps[i] if not gsteps and i < len(p.steps) else "")
        return Divergence(step=i, cause_id=c.id, cause=c.text, skill=c.skill, bad_step=bs, good_step=gs)

    if not bsteps:
        if bans is None:
            return None
        return div(0, "guessed") if bans != p.answer else None
    # first step of the bad trace that is wrong w.r.t. the correct trace
    for i, s in enumerate(bsteps):
        if i >= len(p.steps) or s != p.steps[i]:
            return div(i, _classify_step(p, i, s))
    # every step right (maybe too few): the answer does not follow the working
    if bans != p.answer:
        return (
            div(len(bsteps), "answer_mismatch")
            if len(bsteps) < len(p.steps)
            else div(len(bsteps) - 1, "answer_mismatch")
        )
    return None
