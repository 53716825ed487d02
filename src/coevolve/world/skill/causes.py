"""Error causes of the skill world and rule-based diagnosis of its traces.

Every skill has two causes: its *bug* (the procedure error of ``coevolve.world.skill.problems``; the
injected deficits are three of these seven) and a *slip* (any other wrong result of that step).
Five more causes are about the working rather than a skill (a wrong number copied, a step left
out, ...). A question "shows" a bug cause when one of its steps exercises the bug, a slip cause
when it has a step of the skill.

The diagnosis is exact: the first step of the wrong trace that differs from the correct trace is
classified against it (``explain_divergence``), as the toy world's trace diagnoser does; a step
whose result is the skill's bug applied to the right inputs is the bug, any other wrong result a
slip. Why against the correct trace and not the successful response: a diagnosis that cannot
see the truth is blind where the majority is wrong (the hard deficit), which is the point of it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coevolve.errors import DataError
from coevolve.world.skill.problems import (
    CHAR_OP,
    DEFICITS,
    DEPTHS,
    PRIMITIVES,
    SKILLS,
    THINK_CLOSE,
    THINK_OPEN,
    UNARY,
    DeficitProfile,
    SkillProblem,
    draw_chain,
    make_problem,
    parse_chain,
    question_text,
)
from coevolve.world.toy.causes import Divergence


@dataclass(frozen=True)
class SkillCause:
    """A transferable cause (no numbers of any question in its text), the primitive it belongs to
    (``skill``: a key of ``PRIMITIVES``, or ``working``) and the skill-node name the diagnosis
    files it under (``node``: words, so the memory's embedder tells the nodes apart)."""

    id: str
    text: str
    skill: str
    kind: str  # "bug" | "slip" | "working"

    @property
    def node(self) -> str:
        return NODE_NAMES[self.skill]


_BUG_TEXT = {
    "add": "dropped the carry into the next column when adding",
    "sub": "borrowed but did not reduce the next digit when subtracting",
    "mul": "forgot to add the carry when multiplying by a digit",
    "div": "dropped the remainder between digits in long division",
    "rev": "kept the digits in their order when reversing",
    "max": "compared the last digits instead of the whole numbers",
    "dsum": "left out the first digit of the digit sum",
}
_SLIP_TEXT = {
    "add": "wrong sum of two numbers",
    "sub": "wrong difference of two numbers",
    "mul": "wrong product with a digit",
    "div": "wrong quotient by a digit",
    "rev": "wrong digits when reversing a number",
    "max": "picked the wrong number as the larger",
    "dsum": "wrong digit sum",
}
NODE_NAMES = {
    "add": "column addition",
    "sub": "column subtraction with borrowing",
    "mul": "multiplying with carries",
    "div": "long division with remainders",
    "rev": "reversing the digits of a number",
    "max": "comparing two numbers",
    "dsum": "summing the digits of a number",
    "working": "following the working step by step",
}
_WORKING = {
    "misread": "used a wrong number from the question",
    "wrong_input": "started a step from a wrong intermediate result",
    "wrong_operation": "applied a different operation than the question asks",
    "stopped_early": "stopped before the last operation",
    "answer_mismatch": "wrote a final answer that differs from the working",
}

CAUSES: Mapping[str, SkillCause] = {
    **{f"{s}_bug": SkillCause(f"{s}_bug", _BUG_TEXT[s], s, "bug") for s in SKILLS},
    **{f"{s}_slip": SkillCause(f"{s}_slip", _SLIP_TEXT[s], s, "slip") for s in SKILLS},
    **{k: SkillCause(k, t, "working", "working") for k, t in _WORKING.items()},
}
"""Cause id -> SkillCause: 7 bugs, 7 slips, 5 working causes."""

_TEXT_TO_ID = {c.text: c.id for c in CAUSES.values()}


def bug_cause(skill: str) -> str:
    """The cause id of ``skill``'s bug (an injected deficit when the skill is deficient)."""
    return f"{skill}_bug"


def injected_causes(profile: DeficitProfile = DEFICITS) -> dict[str, str]:
    """``{cause id: "soft" | "hard"}`` of the deficits injected into the base: the ground truth
    a diagnosis memory is scored against."""
    return {bug_cause(s): ("soft" if s in profile.soft else "hard") for s in profile.deficient}


def cause_by_text(text: str) -> SkillCause | None:
    cid = _TEXT_TO_ID.get(text.strip())
    return None if cid is None else CAUSES[cid]


def _cause_id(cause: str) -> str:
    if cause in CAUSES:
        return cause
    c = cause_by_text(cause)
    if c is None:
        raise DataError(f"unknown skill-world cause {cause!r}: expected an id or text from CAUSES")
    return c.id


def shows_cause(cause: str, feats: Mapping[str, Any]) -> bool:
    """True when a question with features ``feats`` (``make_problem``) can show ``cause``."""
    c = CAUSES[_cause_id(cause)]
    if c.kind == "bug":
        return c.skill in feats["exercised"]
    if c.kind == "slip":
        return c.skill in feats["skills"]
    if c.id in ("wrong_input", "stopped_early"):
        return feats["depth"] >= 2
    return True


def problem_for_causes(
    rng: random.Random,
    causes: Sequence[str],
    banned: frozenset[str] = frozenset(),
    profile: DeficitProfile = DEFICITS,
    tries: int = 400,
) -> SkillProblem:
    """A question showing every cause of ``causes`` when one is found (else the first cause
    alone: two causes may not fit one short chain), depth uniform in 1..5, skills weighted towards
    the causes' own; ``[]`` -> any question."""
    ids = [_cause_id(c) for c in causes]
    need_skills = {CAUSES[c].skill for c in ids if CAUSES[c].skill in PRIMITIVES}
    weights = {s: (6.0 if s in need_skills else 1.0) for s in SKILLS}
    for need in (ids, ids[:1]):
        for _ in range(tries):
            depth = rng.choice(DEPTHS)
            if len({CAUSES[c].skill for c in need if CAUSES[c].skill in PRIMITIVES}) > depth:
                continue
            q = question_text(*draw_chain(rng, depth, weights))
            if q in banned:
                continue
            p = make_problem(q, profile)
            if all(shows_cause(c, p.features) for c in need):
                return p
        if not ids:
            break
    raise DataError(f"no skill-world question shows causes {ids}")


# --------------------------------------------------------------------------------------------
# diagnosis of traces

_THINK_RE = re.compile(re.escape(THINK_OPEN) + r"(.*?)" + re.escape(THINK_CLOSE), re.S)
_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_STEP_RE = re.compile(r"^(?:([~#])(\d+)|(\d+)([+\-*/^])(\d+))=(-?\d+)$")


def parse_trace(completion: str) -> tuple[list[str], str | None]:
    """(steps, boxed answer) of a completion: the space-separated items of the first
    ``<think>...</think>`` and the last ``\\boxed{}``."""
    m = _THINK_RE.search(completion)
    steps = m.group(1).split() if m else []
    boxes = _BOXED_RE.findall(completion)
    return steps, (boxes[-1].strip() if boxes else None)


def parse_step(step: str) -> tuple[str, int, int | None, int] | None:
    """(skill, input, operand, result) of one trace step, None when it is not a step."""
    m = _STEP_RE.match(step)
    if m is None:
        return None
    if m.group(1):
        return CHAR_OP[m.group(1)], int(m.group(2)), None, int(m.group(6))
    return CHAR_OP[m.group(4)], int(m.group(3)), int(m.group(5)), int(m.group(6))


def classify_step(p: SkillProblem, i: int, bad: str) -> str:
    """Cause id of the wrong step ``bad`` at index ``i`` of ``p``'s trace (every earlier step of
    the bad trace equal to the correct one)."""
    if i >= len(p.steps):
        return "answer_mismatch"  # working past the last operation
    ref = p.steps[i]
    got = parse_step(bad)
    if got is None:
        return "misread"
    skill, v, x, r = got
    if skill != ref.skill:
        return "wrong_operation"
    if v != ref.value:
        return "wrong_input" if i > 0 else "misread"
    if x != ref.operand:
        return "misread"
    prim = PRIMITIVES[skill]
    if prim.exercises(v, x) and r == prim.apply(v, x, buggy=True):
        return bug_cause(skill)
    return f"{skill}_slip"


def explain_divergence(question: str, bad: str, good: str) -> Divergence | None:
    """The first step where the wrong completion ``bad`` leaves the correct trace, with its cause
    (``good`` only fills the divergence record); None when ``bad`` is right, when the question is
    not in the world, or when ``bad`` has no answer at all."""
    c = parse_chain(question)
    if c is None:
        return None
    p = make_problem(question_text(*c))
    bsteps, bans = parse_trace(bad)
    gsteps, _ = parse_trace(good)
    if bans is None:
        return None
    correct = [s.text() for s in p.steps]

    def div(i: int, cid: str) -> Divergence:
        cause = CAUSES[cid]
        return Divergence(
            step=i,
            cause_id=cid,
            cause=cause.text,
            skill=cause.node,
            bad_step=bsteps[i] if i < len(bsteps) else "",
            good_step=gsteps[i] if i < len(gsteps) else (correct[i] if i < len(correct) else ""),
        )

    for i, s in enumerate(bsteps):
        if i >= len(correct) or s != correct[i]:
            return div(i, classify_step(p, i, s))
    if len(bsteps) < len(correct):
        return div(len(bsteps), "stopped_early") if bans != p.answer else None
    if bans != p.answer:
        return div(len(bsteps) - 1, "answer_mismatch")
    return None


def trace_step_outcomes(question: str, completion: str) -> list[tuple[str, bool, str]]:
    """``(skill, exercised, outcome)`` of every step of ``question`` that a completion reaches on
    the correct trace (its inputs right), up to its first wrong step: ``outcome`` is ``right``,
    ``bug`` (the skill's bug on a step that exercises it), ``slip`` (any other wrong result) or
    ``other`` (the step unreadable, another operation or input, or missing: the trace stopped)."""
    c = parse_chain(question)
    if c is None:
        return []
    p = make_problem(question_text(*c))
    steps, _ = parse_trace(completion)
    out = []
    for i, ref in enumerate(p.steps):
        prim = PRIMITIVES[ref.skill]
        ex = prim.exercises(ref.value, ref.operand)
        got = parse_step(steps[i]) if i < len(steps) else None
        if got is None or got[:3] != (ref.skill, ref.value, ref.operand):
            out.append((ref.skill, ex, "other"))
            break
        if got[3] == ref.result:
            out.append((ref.skill, ex, "right"))
            continue
        bug = ex and got[3] == prim.apply(ref.value, ref.operand, buggy=True)
        out.append((ref.skill, ex, "bug" if bug else "slip"))
        break  # later steps start from a wrong value
    return out


def trace_bug_steps(question: str, completion: str) -> list[tuple[str, bool]]:
    """For a completion that follows the correct trace up to each step: ``(skill, bug taken)`` of
    every step whose inputs are right and that exercises its skill's bug (the measured bug rate of
    a model: taken / exercised). Stops at the first step that leaves the correct trace otherwise."""
    return [(sk, o == "bug") for sk, ex, o in trace_step_outcomes(question, completion) if ex and o != "other"]


__all__ = [
    "CAUSES",
    "SkillCause",
    "bug_cause",
    "cause_by_text",
    "classify_step",
    "explain_divergence",
    "injected_causes",
    "parse_step",
    "parse_trace",
    "problem_for_causes",
    "shows_cause",
    "trace_bug_steps",
    "trace_step_outcomes",
    "UNARY",
]
