"""The arithmetic world for real models: natural-language arithmetic with an exact oracle.

Why: a real model's learning must be shown and measured on a CPU, where no benchmark it could
learn in minutes exists and nothing can be downloaded. Questions are written the way a chat user
asks them ("What is 25 - 14?"), go through the real-model code path (tokenizer, chat template,
stop strings, math-verify grading), and every question — a generated one included — has an exact
answer, so a real-model run measures what the toy runs measure: pseudo-label accuracy against
the truth, and whether a writer's questions are valid and solvable.

Levels (``data.levels``; the held-out benchmark ``arith`` has all four, 125 items each), ordered
by how hard they are for a small instruct model (SmolLM2-135M-Instruct with the solver prompt's two
example turns, greedy, bf16: L1 0.63, L2 0.31, L3 0.17, L4 about 0.12 on the held-out set):

- L1: ``a + b``, ``a - b`` (a >= b), ``a × b`` with a in 1..20, b in 1..9;
- L2: two-digit times one-digit, ``a × b``;
- L3: two-digit ``a + b`` / ``a - b`` (a >= b);
- L4: three one-digit numbers joined by ``+`` / ``-``, left to right, every partial result >= 0.

The ladder (``LADDER_LEVELS``: L1-L4 and five harder rungs, so a model that has mastered L1-L4, e.g.
the warm start ``coevolve model smollm2-arith``, still has a frontier; the held-out benchmark
``arith_ladder`` has every rung, ``LADDER_PER_LEVEL`` items each, drawn from its own seed):

- L5: two-digit times two-digit;
- L6: three-digit ``a + b`` / ``a - b`` (a >= b);
- L7: four one-digit numbers joined by ``+ - ×``, at least one ``×`` and one ``+`` / ``-``
  (multiplication first), result >= 0;
- L8: exact division, a two- or three-digit number by a one-digit one (``a ÷ b``, whole quotient 10..99);
- L9: three-digit times two-digit.

The oracle reads any question holding exactly one arithmetic expression (digits with ``+ - × x *
÷ /`` or the words plus, minus, times, multiplied by, divided by) and no other number; it returns
the exact value (an integer, or a reduced fraction ``p/q``), or None when the question is not such
a question (then it is "not valid" in the writer audits). Multiplication and division bind
tighter than addition and subtraction, as usual.
"""

from __future__ import annotations

import ast
import functools
import operator
import random
import re
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from coevolve.curriculum.buffer import dedupe, normalize_question
from coevolve.errors import ConfigError
from coevolve.memory.diagnose import Diagnoser
from coevolve.memory.store import Cause
from coevolve.prompts import Prompter
from coevolve.types import Task
from coevolve.world.facts import WORLDS
from coevolve.world.real import draw_from, pool_from

LEVELS: tuple[int, ...] = (1, 2, 3, 4)
"""The arith world's default levels and those of the ``arith`` benchmark."""
LADDER_LEVELS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9)
"""Every level the world can draw (``data.levels``) and the ``arith_ladder`` benchmark's rungs."""
LADDER_SEED = 20261203
"""Seed of the ``arith_ladder`` benchmark (its own, so the ``arith`` benchmark stays as it was)."""
LADDER_PER_LEVEL = 50
HELDOUT_SEED = 20261201
"""Seed of the held-out benchmark: fixed, so every run and every ``coevolve eval`` of the
``arith`` benchmark asks the same questions."""
HELDOUT_SIZE = 500
DEFAULT_POOL = 400

_SYMBOL = {"+": "+", "-": "-", "*": "×", "/": "÷"}


def question_text(operands: Sequence[int], ops: Sequence[str]) -> str:
    """``What is 25 - 14?`` for operands (25, 14) and ops ('-',)."""
    expr = str(operands[0]) + "".join(f" {_SYMBOL[o]} {b}" for o, b in zip(ops, operands[1:]))
    return f"What is {expr}?"


def make_problem(rng: random.Random, level: int) -> Task:
    """One problem of ``level`` with its exact answer."""
    if level == 1:
        op = rng.choice("+-*")
        a, b = rng.randint(1, 20), rng.randint(1, 9)
        if op == "-" and a < b:
            a, b = b, a
        operands, ops = [a, b], [op]
    elif level == 2:
        operands, ops = [rng.randint(10, 99), rng.randint(2, 9)], ["*"]
    elif level == 3:
        op = rng.choice("+-")
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if op == "-" and a < b:
            a, b = b, a
        operands, ops = [a, b], [op]
    elif level == 4:
        while True:
            operands, ops = [rng.randint(1, 9) for _ in range(3)], [rng.choice("+-") for _ in range(2)]
            partial, ok = operands[0], True
            for o, b in zip(ops, operands[1:]):
                partial = partial + b if o == "+" else partial - b
                ok = ok and partial >= 0
            if ok:
                break
    else:
        operands, ops = _ladder_problem(rng, level)
    q = question_text(operands, ops)
    answer = oracle(q)
    assert answer is not None
    return Task(
        f"arith-L{level}-{'_'.join(map(str, operands))}-{''.join(ops).replace('/', 'd')}",
        q,
        answer,
        "arith",
        {"level": level, "ops": "".join(ops)},
    )


def sample_tasks(
    rng: random.Random, n: int, levels: Sequence[int] = LEVELS, banned: frozenset[str] = frozenset()
) -> list[Task]:
    """``n`` fresh problems, levels drawn uniformly, none of whose questions is in ``banned``."""
    out: list[Task] = []
    while len(out) < n:
        t = make_problem(rng, rng.choice(list(levels)))
        if normalize_question(t.question) not in banned:
            out.append(t)
    return out


def _ladder_problem(rng: random.Random, level: int) -> tuple[list[int], list[str]]:
    """Operands and operators of a ladder rung beyond L4 (module doc)."""
    if level == 5:
        return [rng.randint(10, 99), rng.randint(10, 99)], ["*"]
    if level == 6:
        op = rng.choice("+-")
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        return ([a, b] if op == "+" or a >= b else [b, a]), [op]
    if level == 7:
        while True:
            operands, ops = [rng.randint(1, 9) for _ in range(4)], [rng.choice("+-*") for _ in range(3)]
            if "*" in ops and set(ops) - {"*"} and _value(operands, ops) >= 0:
                return operands, ops
    if level == 8:
        b, q = rng.randint(2, 9), rng.randint(10, 99)
        return [b * q, b], ["/"]
    if level == 9:
        return [rng.randint(100, 999), rng.randint(10, 99)], ["*"]
    raise ConfigError(f"arith world: level must be one of {list(LADDER_LEVELS)}, got {level}")


def _value(operands: Sequence[int], ops: Sequence[str]) -> Fraction:
    expr = str(operands[0]) + "".join(f"{o}{b}" for o, b in zip(ops, operands[1:]))
    return _evaluate(ast.parse(expr, mode="eval"))


@functools.lru_cache(maxsize=8)
def _heldout(size: int) -> tuple[Task, ...]:
    rng = random.Random(HELDOUT_SEED)
    per = -(-size // len(LEVELS))
    by_level: list[list[Task]] = []
    seen: set[str] = set()
    for level in LEVELS:
        tasks: list[Task] = []
        while len(tasks) < per:
            t = make_problem(rng, level)
            if t.question not in seen:
                seen.add(t.question)
                tasks.append(t)
        by_level.append(tasks)
    # levels interleaved, so any prefix (eval.limit) is balanced over levels too
    order = [tasks[i] for i in range(per) for tasks in by_level][:size]
    return tuple(Task(f"arith-heldout-{i:04d}", t.question, t.answer, "arith", t.features) for i, t in enumerate(order))


def heldout_tasks(size: int = HELDOUT_SIZE) -> list[Task]:
    """The held-out benchmark ``arith``: ``size`` distinct questions balanced over the four
    levels, from a fixed seed; never trained on (``ArithWorld.excluded``)."""
    return list(_heldout(size))


def labelled_set(size: int, levels: Sequence[int], seed: int, banned: frozenset[str]) -> list[Task]:
    """A fixed labelled set of ``size`` distinct problems (``data.limit``), drawn once with ``seed``."""
    rng, out, seen = random.Random(seed), [], set()
    while len(out) < size:
        (t,) = sample_tasks(rng, 1, levels, banned)
        if t.question not in seen:
            seen.add(t.question)
            out.append(t)
    return out


# ------------------------------------------------------------------------------------------ oracle

_WORDS = (
    (r"multiplied\s+by", "*"),
    (r"divided\s+by", "/"),
    (r"times", "*"),
    (r"plus", "+"),
    (r"minus", "-"),
    (r"over", "/"),
)
_SYMBOLS = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-"})
_EXPR_RE = re.compile(r"(?:(?<![\d)])-\s*)?\(*\s*-?\d+(?:\s*\)*\s*[-+*/]\s*\(*\s*-?\d+\s*\)*)+")
_NUMBER_RE = re.compile(r"\d")
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ZeroDivisionError
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("not arithmetic")


def read_expression(question: str) -> str | None:
    """The one arithmetic expression of ``question`` in Python syntax, or None when there is
    none, more than one, or another number outside it.

    >>> read_expression("What is 25 − 14?"), read_expression("What is 7 times 8 plus 2?")
    ('25-14', '7*8+2')
    >>> read_expression("Tom has 3 apples. What is 4 + 5?") is None
    True
    """
    text = question.translate(_SYMBOLS)
    for word, sym in _WORDS:
        text = re.sub(rf"(?<=\d)\s+{word}\s+(?=[\d(])", f" {sym} ", text, flags=re.IGNORECASE)
    text = re.sub(r"(?<=\d)\s*[x]\s*(?=\d)", "*", text)  # "6 x 4"
    found = list(_EXPR_RE.finditer(text))
    if len(found) != 1:
        return None
    m = found[0]
    if _NUMBER_RE.search(text[: m.start()]) or _NUMBER_RE.search(text[m.end() :]):
        return None
    expr = re.sub(r"\s+", "", m.group(0))
    return expr if expr.count("(") == expr.count(")") else None


def oracle(question: str) -> str | None:
    """The exact answer of an arithmetic question (``read_expression``), or None.

    >>> oracle("What is 25 - 14?"), oracle("What is 84 ÷ 8?"), oracle("What is 6 × (3 + 4)?")
    ('11', '21/2', '42')
    >>> oracle("What is 5 ÷ 0?") is None, oracle("Name a prime.") is None
    (True, True)
    """
    expr = read_expression(question)
    if expr is None:
        return None
    try:
        value = _evaluate(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


# ------------------------------------------------------------------------------------------- world


class ArithWorld:
    """``World`` of natural-language arithmetic for a real model (``data.source=arith``):
    fresh labelled problems on every draw (or a fixed set of ``data.limit``), the held-out
    benchmark ``arith``, an exact oracle for any arithmetic question, the real-model prompts."""

    name = "arith"
    default_benches = WORLDS["arith"].default_benches
    default_diagnoser = "llm"
    knows_truth = True
    rep_tokenizer = "whitespace"

    def __init__(
        self,
        prompter: Prompter,
        chat_template: bool,
        levels: Sequence[int] = LEVELS,
        heldout_size: int = HELDOUT_SIZE,
        exclude_heldout: bool = True,
        tasks: Sequence[Task] | None = None,
    ):
        self.prompter = prompter
        self.chat_template = chat_template
        self.levels = tuple(levels)
        self.heldout_size = heldout_size
        self.exclude_heldout = exclude_heldout
        self.tasks = None if tasks is None else list(tasks)

    @classmethod
    def from_config(cls, cfg: Any, prompter: Prompter, say: Callable[[str], None]) -> ArithWorld:
        levels = tuple(cfg.data.levels or LEVELS)
        world = cls(prompter, cfg.model.chat_template, levels, cfg.eval.heldout_size, cfg.data.exclude_heldout)
        if cfg.data.limit is not None:
            world.tasks = labelled_set(cfg.data.limit, levels, cfg.data.limit_seed, world.excluded())
            say(
                f"[data] arith world: a fixed labelled set of {len(world.tasks)} problems (levels {list(levels)}, "
                f"seed {cfg.data.limit_seed})"
            )
        else:
            say(f"[data] arith world: fresh problems of levels {list(levels)} on every draw")
        return world

    def draw(self, rng: random.Random, n: int) -> list[Task]:
        if self.tasks is not None:
            return draw_from(self.tasks, rng, n)
        return sample_tasks(rng, n, self.levels, self.excluded())

    def pool(self, rng: random.Random, size: int | None) -> list[Task]:
        if self.tasks is not None:
            return pool_from(self.tasks, rng, size)
        return dedupe(self.draw(rng, size or DEFAULT_POOL), key=lambda t: t.question)

    def excluded(self) -> frozenset[str]:
        if not self.exclude_heldout:
            return frozenset()
        return _excluded(self.heldout_size)

    def oracle(self, question: str) -> str | None:
        return oracle(question)

    def bench_tasks(self, bench: str, data_dir: Path | None, limit: int | None) -> list[Task] | None:
        if bench not in ("arith", "arith_ladder"):
            return None
        tasks = heldout_tasks(self.heldout_size) if bench == "arith" else ladder_tasks()
        return tasks[:limit] if limit else tasks

    def prompter_for(self, tokenizer: Any) -> Prompter:
        return self.prompter.with_tokenizer(tokenizer)  # type: ignore[attr-defined]

    def trace_diagnoser(self) -> Diagnoser:
        raise ConfigError(
            "diagnoser.kind=trace needs the toy world (step traces); the arith world is diagnosed by a "
            "model: diagnoser.kind=llm"
        )

    def shows_causes(self, question: str, causes: Sequence[Cause]) -> list[bool] | None:
        return None

    def run_summary(self, run_dir: Path) -> dict[str, Any]:
        return {}  # the arith benchmark's accuracy by level is in the evaluation's results

    def true_cause(self, question: str, bad: str, good: str) -> str | None:
        return None


@functools.lru_cache(maxsize=1)
def _ladder() -> tuple[Task, ...]:
    rng = random.Random(LADDER_SEED)
    seen = {t.question for t in heldout_tasks()}  # its own questions: apart from the arith benchmark's
    by_level: list[list[Task]] = []
    for level in LADDER_LEVELS:
        tasks: list[Task] = []
        while len(tasks) < LADDER_PER_LEVEL:
            t = make_problem(rng, level)
            if t.question not in seen:
                seen.add(t.question)
                tasks.append(t)
        by_level.append(tasks)
    order = [tasks[i] for i in range(LADDER_PER_LEVEL) for tasks in by_level]
    return tuple(Task(f"arith-ladder-{i:04d}", t.question, t.answer, "arith", t.features) for i, t in enumerate(order))


def ladder_tasks() -> list[Task]:
    """The held-out benchmark ``arith_ladder``: ``LADDER_PER_LEVEL`` distinct questions of every
    rung of ``LADDER_LEVELS``, levels interleaved, from a fixed seed, none in the ``arith``
    benchmark; never trained on (``ArithWorld.excluded``)."""
    return list(_ladder())


@functools.lru_cache(maxsize=8)
def _excluded(size: int) -> frozenset[str]:
    return frozenset(normalize_question(t.question) for t in (*heldout_tasks(size), *ladder_tasks()))


def heldout_expressions(size: int = HELDOUT_SIZE) -> frozenset[str]:
    """The expressions (``read_expression``) of both held-out benchmarks: a question written
    another way (``47 * 36``, ``47 times 36``) is still a held-out question."""
    return frozenset(
        e for t in (*heldout_tasks(size), *ladder_tasks()) if (e := read_expression(t.question)) is not None
    )


__all__ = [
    "ArithWorld",
    "HELDOUT_SIZE",
    "LADDER_LEVELS",
    "LEVELS",
    "heldout_expressions",
    "heldout_tasks",
    "ladder_tasks",
    "labelled_set",
    "make_problem",
    "oracle",
    "question_text",
    "read_expression",
    "sample_tasks",
]
