"""The skill world: seven primitive procedures composed into chains, with known, injected deficits.

Why a second built-in world: in the toy arithmetic world the mechanisms the papers argue about
(a difficulty band with a frontier, a memory that finds the solver's weak skills) have nothing to
act on (docs/results/skill_world.md). Here every question is a chain of primitive steps, each
primitive has its own step format in the trace, and the base model is pretrained with a known
per-skill bug rate, so the ground truth a curriculum should find is fixed by design.

Questions are evaluated strictly left to right, one operation at a time, starting from a
two-digit number::

    47+38~*3      ->  47+38=85  ~85=58  58*3=174        answer 174
    93-27/4^30#   ->  93-27=66  66/4=16  16^30=30  #30=3  answer 3

| skill | in a question | trace step | what the procedure can get wrong (``BUGS``)         |
|-------|---------------|------------|------------------------------------------------------|
| add   | ``+n``        | ``a+n=c``  | drops the carry into the next column                 |
| sub   | ``-n``        | ``a-n=c``  | borrows but does not reduce the next digit           |
| mul   | ``*d``        | ``a*d=c``  | does not add the carry of the previous column        |
| div   | ``/d``        | ``a/d=c``  | drops the remainder between digits (long division)   |
| rev   | ``~``         | ``~a=c``   | keeps the digits in their order                      |
| max   | ``^n``        | ``a^n=c``  | compares the last digits instead of the numbers      |
| dsum  | ``#``         | ``#a=c``   | leaves out the first digit                           |

Every bug changes the result only on inputs that exercise it (a carry, a borrow, ...): the
``exercises`` predicate. The *injected* deficits (``DEFICITS``) are bug rates in the base model's
pretraining traces: the bug is taken in that share of the steps that exercise it, the rest of
the trace then follows from the wrong intermediate value. Which skills are deficient, and how
badly, is configuration (``DeficitProfile``); the default profile is two "soft" deficits (the
bug in 35 % of the traces: the solver's majority is right, its failures are minority traces a
diagnosis can see) and one "hard" systematic deficit (the bug in 70 %: the majority is wrong).

Values stay in 0..999: each operation states what it accepts (``accepts``).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coevolve.errors import DataError
from coevolve.types import Task
from coevolve.world.skill.procedures import CHAR_OP, MAX_VALUE, OP_CHAR, PRIMITIVES, SKILLS, UNARY

WORLD_VERSION = 1
"""Bump when questions, traces, bugs, prompts or the pretraining mix change: cached skill bases
are keyed by it."""

DEPTHS: tuple[int, ...] = (1, 2, 3, 4, 5)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


# --------------------------------------------------------------------------------------------
# deficits


@dataclass(frozen=True)
class DeficitProfile:
    """Injected bug rates per skill (skills not named are clean: rate 0), as ``(skill, rate)``
    pairs (hashable: the held-out set and the base are cached per profile). ``soft`` / ``hard``
    split the deficient skills by whether the solver's majority stays right (rate < 0.5)."""

    rates: tuple[tuple[str, float], ...] = (("sub", 0.35), ("mul", 0.35), ("div", 0.7))

    def __post_init__(self) -> None:
        seen = set()
        for s, r in self.rates:
            if s not in PRIMITIVES:
                raise DataError(f"deficit skill {s!r}: skills are {list(PRIMITIVES)}")
            if s in seen:
                raise DataError(f"deficit skill {s!r} named twice")
            seen.add(s)
            if not 0.0 <= r <= 1.0:
                raise DataError(f"deficit rate of {s!r} = {r}: must be in [0, 1]")

    @classmethod
    def of(cls, rates: Mapping[str, float]) -> DeficitProfile:
        """The profile of a ``{skill: rate}`` mapping (rates of 0 dropped), in ``SKILLS`` order."""
        for s in rates:
            if s not in PRIMITIVES:
                raise DataError(f"deficit skill {s!r}: skills are {list(PRIMITIVES)}")
        return cls(tuple((s, float(rates[s])) for s in SKILLS if rates.get(s, 0) > 0))

    def rate(self, skill: str) -> float:
        return next((float(r) for s, r in self.rates if s == skill), 0.0)

    @property
    def deficient(self) -> tuple[str, ...]:
        return tuple(s for s in SKILLS if self.rate(s) > 0)

    @property
    def soft(self) -> tuple[str, ...]:
        return tuple(s for s in self.deficient if self.rate(s) < 0.5)

    @property
    def hard(self) -> tuple[str, ...]:
        return tuple(s for s in self.deficient if self.rate(s) >= 0.5)

    @property
    def clean(self) -> tuple[str, ...]:
        return tuple(s for s in SKILLS if self.rate(s) == 0)

    def key(self) -> str:
        """Short text naming the profile (part of the cached base's folder name)."""
        return "-".join(f"{s}{round(self.rate(s) * 100)}" for s in self.deficient) or "clean"

    def to_dict(self) -> dict[str, float]:
        return {s: self.rate(s) for s in self.deficient}


DEFICITS = DeficitProfile()
"""The default injected profile: soft sub (35 %) and mul (35 %), hard div (70 %)."""


# --------------------------------------------------------------------------------------------
# chains: parse, evaluate, trace


@dataclass(frozen=True)
class Op:
    skill: str
    operand: int | None = None

    def text(self) -> str:
        return OP_CHAR[self.skill] + ("" if self.operand is None else str(self.operand))


@dataclass(frozen=True)
class Step:
    """One trace step: the skill, its inputs, the result written, whether the bug was taken."""

    skill: str
    value: int
    operand: int | None
    result: int
    buggy: bool = False

    def text(self) -> str:
        return step_text(self.skill, self.value, self.operand, self.result)


def step_text(skill: str, v: int, x: int | None, r: int) -> str:
    """``a+n=c`` / ``~a=c`` / ``#a=c``: the step format of each skill."""
    c = OP_CHAR[skill]
    return f"{c}{v}={r}" if skill in UNARY else f"{v}{c}{x}={r}"


_NUM = r"(0|[1-9]\d*)"
_OP_RE = re.compile(r"([+\-*/^])" + _NUM + r"|([~#])")
_STEP_RE = re.compile(r"^(?:([~#])" + _NUM + r"|" + _NUM + r"([+\-*/^])" + _NUM + r")=(-?\d+)$")


def question_text(start: int, ops: Sequence[Op]) -> str:
    return str(start) + "".join(o.text() for o in ops)


def parse_chain(text: str) -> tuple[int, list[Op]] | None:
    """(start, ops) of a well-formed question (no leading zeros, every operation accepted by its
    inputs, values within 0..999, depth 1..5), else None. A trailing ``=`` and whitespace are
    tolerated."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s.endswith("="):
        s = s[:-1]
    m = re.match(_NUM, s)
    if m is None:
        return None
    start = int(m.group(1))
    if not 10 <= start <= 99:
        return None
    ops: list[Op] = []
    i = m.end()
    while i < len(s):
        mo = _OP_RE.match(s, i)
        if mo is None:
            return None
        if mo.group(3):
            ops.append(Op(CHAR_OP[mo.group(3)]))
        else:
            ops.append(Op(CHAR_OP[mo.group(1)], int(mo.group(2))))
        i = mo.end()
    if not 1 <= len(ops) <= max(DEPTHS):
        return None
    v = start
    for o in ops:
        p = PRIMITIVES[o.skill]
        if (o.skill in UNARY) != (o.operand is None) or not p.accepts(v, o.operand):
            return None
        v = p.apply(v, o.operand)
        if not 0 <= v <= MAX_VALUE:
            return None
    return start, ops


def parse_question(text: str) -> str | None:
    """The canonical question text when ``text`` is a valid skill-world question, else None."""
    c = parse_chain(text)
    return None if c is None else question_text(*c)


def run_chain(start: int, ops: Sequence[Op], bugs: Sequence[bool] | None = None) -> list[Step]:
    """The trace of a chain; ``bugs[i]`` takes the bug at step i (where it changes anything)."""
    v, out = start, []
    for i, o in enumerate(ops):
        p = PRIMITIVES[o.skill]
        b = bool(bugs[i]) if bugs is not None else False
        r = p.apply(v, o.operand, buggy=b)
        out.append(Step(o.skill, v, o.operand, r, b and r != p.apply(v, o.operand)))
        v = r
    return out


def render_completion(steps: Sequence[Step], answer: int | str) -> str:
    """``<think>s1 s2 ...</think>\\boxed{ans}``: the solver's output format (as in the toy world)."""
    return f"{THINK_OPEN}{' '.join(s.text() for s in steps)}{THINK_CLOSE}\\boxed{{{answer}}}"


@dataclass(frozen=True)
class SkillProblem:
    """A question with everything the world knows about it."""

    question: str
    start: int
    ops: tuple[Op, ...]
    steps: tuple[Step, ...]  # the correct trace
    answer: str
    features: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def depth(self) -> int:
        return len(self.ops)

    def completion(self) -> str:
        return render_completion(self.steps, self.answer)

    def to_task(self, source: str = "skill") -> Task:
        return Task(
            id=f"skill-{self.question}",
            question=self.question,
            answer=self.answer,
            source=source,
            features=dict(self.features),
        )


def exercised(start: int, ops: Sequence[Op]) -> list[str]:
    """Skills whose bug would change the result at some step of the correct trace, in order."""
    return [s.skill for s in run_chain(start, ops) if PRIMITIVES[s.skill].exercises(s.value, s.operand)]


def make_problem(question: str, profile: DeficitProfile = DEFICITS) -> SkillProblem:
    """The full problem of a valid question (``DataError`` naming it otherwise). Features:
    ``depth``, ``skills`` (in order), ``exercised`` (skills whose bug the question can show),
    ``deficits`` (exercised deficient skills of ``profile``), ``stratum`` (the focal skill: the
    one deficient skill exercised, ``clean`` when none, ``mixed`` when several) and ``level``
    (the depth: the toy world's breakdown key)."""
    c = parse_chain(question)
    if c is None:
        raise DataError(f"not a valid skill-world question: {question!r}")
    start, ops = c
    steps = run_chain(start, ops)
    ex = exercised(start, ops)
    deficits = sorted({s for s in ex if profile.rate(s) > 0}, key=SKILLS.index)
    stratum = "clean" if not deficits else deficits[0] if len(deficits) == 1 else "mixed"
    feats = {
        "depth": len(ops),
        "level": len(ops),
        "skills": [o.skill for o in ops],
        "exercised": ex,
        "deficits": deficits,
        "stratum": stratum,
        "n_steps": len(ops),
    }
    return SkillProblem(question_text(start, ops), start, tuple(ops), tuple(steps), str(steps[-1].result), feats)


def oracle(question: str) -> str | None:
    c = parse_chain(question)
    return None if c is None else str(run_chain(*c)[-1].result)


# --------------------------------------------------------------------------------------------
# drawing questions


def draw_chain(rng: random.Random, depth: int, weights: Mapping[str, float], tries: int = 200) -> tuple[int, list[Op]]:
    """A random valid chain of ``depth`` operations, each skill drawn with ``weights`` among
    those the running value accepts."""
    for _ in range(tries):
        v = rng.randint(10, 99)
        start, ops = v, []
        for _ in range(depth):
            cands = []
            for s, w in weights.items():
                if w <= 0:
                    continue
                p = PRIMITIVES[s]
                x = p.draw_operand(rng, v)
                if (s in UNARY) == (x is None) and p.accepts(v, x):
                    cands.append((s, x, w))
            if not cands:
                break
            s, x, _ = rng.choices(cands, weights=[c[2] for c in cands])[0]
            ops.append(Op(s, x))
            v = PRIMITIVES[s].apply(v, x)
        if len(ops) == depth:
            return start, ops
    raise DataError(f"draw_chain: no valid chain of depth {depth} with weights {dict(weights)}")


def draw_focal(
    rng: random.Random, skill: str, depth: int, profile: DeficitProfile = DEFICITS, tries: int = 2000
) -> SkillProblem:
    """A question of stratum (``skill``, ``depth``): one step of ``skill`` that exercises its bug,
    every other step a clean skill of ``profile`` (so the question's accuracy is about ``skill``
    alone), with ``features["focus"] = skill``. ``skill="clean"``: clean skills only."""
    clean = {s: 1.0 for s in profile.clean}
    if skill == "clean":
        return make_problem(question_text(*draw_chain(rng, depth, clean)), profile)
    p = _draw_focal(rng, skill, depth, profile, tries)
    return replace(p, features={**p.features, "focus": skill})


def _draw_focal(rng: random.Random, skill: str, depth: int, profile: DeficitProfile, tries: int) -> SkillProblem:
    if skill not in PRIMITIVES:
        raise DataError(f"unknown skill {skill!r}; skills: {list(PRIMITIVES)}")
    others = {s: 1.0 for s in profile.clean if s != skill}
    for _ in range(tries):
        pos = rng.randrange(depth)
        v = rng.randint(10, 99)
        start, ops, ok = v, [], True
        for i in range(depth):
            if i == pos:
                p = PRIMITIVES[skill]
                for _ in range(20):
                    x = p.draw_operand(rng, v)
                    if p.accepts(v, x) and p.exercises(v, x):
                        break
                else:
                    ok = False
                    break
                ops.append(Op(skill, x))
                v = p.apply(v, x)
            else:
                try:
                    _, one = _extend(rng, v, others)
                except DataError:
                    ok = False
                    break
                ops.append(one)
                v = PRIMITIVES[one.skill].apply(v, one.operand)
        if ok:
            q = question_text(start, ops)
            if parse_chain(q) is not None:
                p_ = make_problem(q, profile)
                want = "clean" if profile.rate(skill) == 0 else skill
                if p_.features["stratum"] == want and skill in p_.features["exercised"]:
                    return p_
    raise DataError(f"draw_focal: no question of skill {skill!r} at depth {depth}")


def _extend(rng: random.Random, v: int, weights: Mapping[str, float]) -> tuple[int, Op]:
    cands = []
    for s, w in weights.items():
        p = PRIMITIVES[s]
        x = p.draw_operand(rng, v)
        if (s in UNARY) == (x is None) and p.accepts(v, x):
            cands.append((Op(s, x), w))
    if not cands:
        raise DataError(f"no operation accepts {v}")
    return v, rng.choices([c[0] for c in cands], weights=[c[1] for c in cands])[0]


def strata(profile: DeficitProfile = DEFICITS) -> tuple[str, ...]:
    """Held-out strata: every skill (deficient or clean) as the focal skill."""
    return SKILLS


def stratum_size(per_stratum: int, depth: int) -> int:
    """Held-out questions of a (skill, depth) stratum: ``per_stratum``, a quarter of it at depth 1.
    Why: a one-step question space is small (``36~`` has 72 siblings), and holding out most of it
    would leave the skill nothing to be learnt from at that depth."""
    return max(1, per_stratum // 4) if depth == 1 else per_stratum


HELDOUT_DEFAULT = 100
"""``per_stratum`` of the held-out set kept out of the base's pretraining (2,975 questions)."""


@functools.lru_cache(maxsize=4)
def _heldout(per_stratum: int, seed: int, profile: DeficitProfile) -> tuple[tuple[SkillProblem, ...], ...]:
    # memo of a pure function of its arguments (not shared mutable state); one tuple per stratum
    rng = random.Random(seed)
    out: list[tuple[SkillProblem, ...]] = []
    seen: set[str] = set()
    for s in strata(profile):
        for d in DEPTHS:
            got: list[SkillProblem] = []
            misses = 0
            while len(got) < stratum_size(per_stratum, d):
                p = draw_focal(rng, s, d, profile)
                if p.question in seen:
                    misses += 1
                    if misses > 10_000:
                        raise DataError(
                            f"held-out set: stratum ({s}, depth {d}) has fewer than "
                            f"{stratum_size(per_stratum, d)} distinct questions; lower per_stratum"
                        )
                    continue
                seen.add(p.question)
                got.append(p)
            out.append(tuple(got))
    return tuple(out)


HELDOUT_SEED = 4321


@functools.lru_cache(maxsize=8)
def heldout_problems(
    per_stratum: int = HELDOUT_DEFAULT, seed: int = HELDOUT_SEED, profile: DeficitProfile = DEFICITS
) -> tuple[SkillProblem, ...]:
    """The held-out set: ``stratum_size`` distinct questions for every (focal skill, depth), i.e.
    7 × (4 + 1/4) × ``per_stratum`` (2,975 by default), fixed by ``seed``; never trained on.

    A smaller set is the first questions of each stratum of the default one, so it stays outside
    the base's pretraining (a larger one holds the default set and more, which the base may have
    seen: only the default set is excluded)."""
    if not 1 <= per_stratum <= 1000:
        raise DataError(f"held-out per_stratum={per_stratum} must be in [1, 1000]")
    full = _heldout(max(per_stratum, HELDOUT_DEFAULT), seed, profile)
    return tuple(p for group in full for p in group[: stratum_size(per_stratum, group[0].depth)])


def heldout_tasks(
    per_stratum: int = HELDOUT_DEFAULT, seed: int = HELDOUT_SEED, profile: DeficitProfile = DEFICITS
) -> list[Task]:
    return [p.to_task("skill-heldout") for p in heldout_problems(per_stratum, seed, profile)]


@functools.lru_cache(maxsize=4)
def heldout_questions(
    per_stratum: int = HELDOUT_DEFAULT, seed: int = HELDOUT_SEED, profile: DeficitProfile = DEFICITS
) -> frozenset[str]:
    return frozenset(p.question for p in heldout_problems(per_stratum, seed, profile))


# --------------------------------------------------------------------------------------------
# labelled draws: the strata mix, a focus, and the U-shaped pool


def draw_strata(
    rng: random.Random, profile: DeficitProfile = DEFICITS, focus: Sequence[str] | None = None
) -> SkillProblem:
    """One question of a random stratum: focal skill uniform over ``focus`` (None: every skill),
    depth uniform over 1..5."""
    return draw_focal(rng, rng.choice(list(focus or SKILLS)), rng.choice(DEPTHS), profile)


POOL_SHARES = (("trivial", 0.4), ("out_of_reach", 0.4), ("between", 0.2))
"""The U-shaped labelled pool (``data.skill.pool=ushape`` and ``ladder``: they differ in the middle fifth)."""

POOLS = ("ladder", "ushape", "strata")
"""The labelled pools a fixed set (``data.limit``) or D²Evo's candidate pool is drawn from."""


def draw_ushape(rng: random.Random, profile: DeficitProfile = DEFICITS, middle: str = "between") -> SkillProblem:
    """One question of the U-shaped pool: ``trivial`` = one step of a clean skill; ``out_of_reach`` =
    five steps, at least three of them exercising a deficient skill; the middle fifth is
    ``between`` = a stratum of depth 2-4 (any focal skill: 4 of 7 are clean, so most of it is easy
    and the band held 16 of 256 questions at the base, 3 by round 3) or ``ladder`` = depth 2-4 with
    exactly one or two exercised soft deficits and no hard one (about 0.4-0.6 and 0.2-0.4 at the
    base: the first rung is in D²Evo's band, the second enters it as the solver repairs a soft
    skill). The kind is in ``features["pool_kind"]``."""
    u = rng.random()
    if u < POOL_SHARES[0][1]:
        kind, p = "trivial", draw_focal(rng, rng.choice(profile.clean or SKILLS), 1, profile)
    elif u < POOL_SHARES[0][1] + POOL_SHARES[1][1] and profile.deficient:
        w = {s: (4.0 if profile.rate(s) > 0 else 1.0) for s in SKILLS}
        while True:
            p = make_problem(question_text(*draw_chain(rng, 5, w)), profile)
            if sum(profile.rate(s) > 0 for s in p.features["exercised"]) >= 3:
                kind = "out_of_reach"
                break
    elif middle == "ladder" and profile.soft:
        kind, p = "ladder", draw_rung(rng, rng.choice((1, 2)), rng.choice((2, 3, 4)), profile)
    else:
        kind, p = "between", draw_focal(rng, rng.choice(SKILLS), rng.choice((2, 3, 4)), profile)
    return replace(p, features={**p.features, "pool_kind": kind})


def draw_rung(
    rng: random.Random, rung: int, depth: int, profile: DeficitProfile = DEFICITS, tries: int = 5000
) -> SkillProblem:
    """A question of depth ``depth`` whose steps exercise exactly ``rung`` soft deficits (counted
    with repeats) and no hard one, every other step a clean skill; ``features["rung"] = rung``."""
    if not 1 <= rung <= depth:
        raise DataError(f"draw_rung: rung {rung} must be in [1, depth={depth}]")
    w = {s: (2.0 if s in profile.soft else 1.0) for s in (*profile.soft, *profile.clean)}
    for _ in range(tries):
        p = make_problem(question_text(*draw_chain(rng, depth, w)), profile)
        ex = p.features["exercised"]
        if sum(s in profile.soft for s in ex) == rung and not any(s in profile.hard for s in ex):
            return replace(p, features={**p.features, "rung": rung})
    raise DataError(f"draw_rung: no question of depth {depth} with {rung} soft deficits")


def draw_pool(rng: random.Random, pool: str, profile: DeficitProfile = DEFICITS) -> SkillProblem:
    """One question of the named labelled pool (``POOLS``)."""
    if pool not in POOLS:
        raise DataError(f"labelled pool {pool!r}: one of {', '.join(POOLS)}")
    return (
        draw_strata(rng, profile)
        if pool == "strata"
        else draw_ushape(rng, profile, "ladder" if pool == "ladder" else "between")
    )


def labelled_set(
    n: int,
    seed: int = 0,
    profile: DeficitProfile = DEFICITS,
    pool: str = "ladder",
    banned: frozenset[str] | None = None,
) -> list[SkillProblem]:
    """A fixed labelled set of ``n`` distinct questions (``pool``: one of ``POOLS``), never
    a held-out question. Nested: the first ``n`` of a larger set with the same seed are this set
    (the label-budget axis compares L, 4L, 16L labels of one sequence)."""
    if pool not in POOLS:
        raise DataError(f"labelled pool {pool!r}: one of {', '.join(POOLS)}")
    rng = random.Random(seed)
    banned = heldout_questions(profile=profile) if banned is None else banned
    seen: set[str] = set()
    out: list[SkillProblem] = []
    misses = 0
    while len(out) < n:
        p = draw_pool(rng, pool, profile)
        if p.question in banned or p.question in seen:
            misses += 1
            if misses > 100 * n + 10_000:
                raise DataError(f"labelled_set: cannot find {n} distinct questions (found {len(out)})")
            continue
        seen.add(p.question)
        out.append(p)
    return out
