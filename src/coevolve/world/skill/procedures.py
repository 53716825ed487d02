"""The skill world's seven primitive procedures (``coevolve.world.skill.problems`` composes them
into chains): each one's correct function, its bug (the procedure error the base is pretrained
to make), the inputs it accepts and the operands questions draw for it."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

SKILLS: tuple[str, ...] = ("add", "sub", "mul", "div", "rev", "max", "dsum")
OP_CHAR: Mapping[str, str] = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rev": "~", "max": "^", "dsum": "#"}
CHAR_OP: Mapping[str, str] = {c: s for s, c in OP_CHAR.items()}
UNARY: frozenset[str] = frozenset({"rev", "dsum"})
MAX_VALUE = 999


# --------------------------------------------------------------------------------------------
# digits and the seven procedures, correct and buggy


def digits(n: int) -> list[int]:
    """Decimal digits of ``n``, ones first."""
    return [int(c) for c in reversed(str(n))]


def _from_digits(ds: Sequence[int]) -> int:
    """Inverse of ``digits`` where the top entry may exceed 9 (written in full)."""
    return sum(d * 10**j for j, d in enumerate(ds))


def add_no_carry(a: int, b: int) -> int:
    """Column addition that writes each column's ones and drops its carry (the top column is
    written in full): ``47+38`` -> ``75``."""
    da, db = digits(a), digits(b)
    w = max(len(da), len(db))
    da, db = da + [0] * (w - len(da)), db + [0] * (w - len(db))
    cols = [(x + y) % 10 for x, y in zip(da[:-1], db[:-1])] + [da[-1] + db[-1]]
    return _from_digits(cols)


def sub_no_repay(a: int, b: int) -> int:
    """Column subtraction that borrows (top + 10) but never reduces the next top digit:
    ``93-27`` -> ``13-7=6, 9-2=7`` -> ``76``. Needs a >= b; a column left negative by the missing
    reduction cannot happen (the top digit is never reduced)."""
    da, db = digits(a), digits(b)
    db = db + [0] * (len(da) - len(db))
    out = []
    for x, y in zip(da, db):
        out.append(x + 10 - y if x < y else x - y)
    # the top column cannot borrow (a >= b keeps it non-negative only with repayment): a top
    # column that would need one is written as the difference of the digits it shows
    if da[-1] < db[-1]:
        out[-1] = db[-1] - da[-1]
    return _from_digits(out)


def mul_no_carry(a: int, d: int) -> int:
    """Multiplication by a digit, ones first, that writes each product's ones and forgets its
    carry (the top product is written in full): ``58*3`` -> ``8*3=24 -> 4; 5*3=15`` -> ``154``."""
    da = digits(a)
    cols = [(x * d) % 10 for x in da[:-1]] + [da[-1] * d]
    return _from_digits(cols)


def div_no_remainder(a: int, d: int) -> int:
    """Long division by a digit, top digit first, that drops each step's remainder instead of
    bringing it down: ``74/3`` -> ``7/3=2, 4/3=1`` -> ``21`` (correct: 24)."""
    q = 0
    for x in reversed(digits(a)):
        q = q * 10 + x // d
    return q


def rev_kept(a: int) -> int:
    """Reversal that keeps the digits in their order (returns ``a``)."""
    return a


def max_last_digit(a: int, b: int) -> int:
    """The larger by the ones digit (ties: by value): ``38^71`` -> ``38``."""
    return a if (a % 10, a) > (b % 10, b) else b


def dsum_no_first(a: int) -> int:
    """Digit sum without the first (top) digit: ``#174`` -> ``11``."""
    return sum(digits(a)[:-1])


def _rev(a: int) -> int:
    return int(str(a)[::-1])


@dataclass(frozen=True)
class Primitive:
    """One procedure: the correct function, its bug, the inputs it accepts, the inputs on which
    the bug changes the result, and the operands questions draw for it."""

    skill: str
    correct: Callable[..., int]
    bug: Callable[..., int]
    accepts: Callable[[int, int | None], bool]
    draw_operand: Callable[[random.Random, int], int | None]

    def exercises(self, v: int, x: int | None) -> bool:
        """Whether the bug changes the result on these inputs."""
        return self.apply(v, x, buggy=True) != self.apply(v, x)

    def apply(self, v: int, x: int | None, buggy: bool = False) -> int:
        f = self.bug if buggy else self.correct
        return f(v) if self.skill in UNARY else f(v, x)


def _two_digit(rng: random.Random, v: int) -> int:
    return rng.randint(10, 99)


def _digit(rng: random.Random, v: int) -> int:
    return rng.randint(2, 9)


def _sub_operand(rng: random.Random, v: int) -> int | None:
    return rng.randint(10, min(99, v)) if v >= 10 else None


def _max_operand(rng: random.Random, v: int) -> int:
    # near the running value half of the time, so both outcomes of the comparison occur
    return rng.randint(max(10, v - 60), min(MAX_VALUE, v + 60)) if rng.random() < 0.5 else rng.randint(10, 999)


def _in(lo: int, hi: int) -> Callable[[int | None], bool]:
    return lambda x: x is not None and lo <= x <= hi


_TWO, _DIG, _MAXOP = _in(10, 99), _in(2, 9), _in(10, MAX_VALUE)

PRIMITIVES: Mapping[str, Primitive] = {
    "add": Primitive("add", lambda a, b: a + b, add_no_carry, lambda v, x: _TWO(x) and v + x <= MAX_VALUE, _two_digit),
    "sub": Primitive("sub", lambda a, b: a - b, sub_no_repay, lambda v, x: _TWO(x) and x <= v, _sub_operand),
    "mul": Primitive("mul", lambda a, d: a * d, mul_no_carry, lambda v, x: _DIG(x) and 10 <= v <= 99, _digit),
    "div": Primitive("div", lambda a, d: a // d, div_no_remainder, lambda v, x: _DIG(x) and 10 <= v <= 99, _digit),
    "rev": Primitive("rev", _rev, rev_kept, lambda v, x: x is None and v >= 10 and v % 10 != 0, lambda rng, v: None),
    "max": Primitive("max", lambda a, b: max(a, b), max_last_digit, lambda v, x: _MAXOP(x), _max_operand),
    "dsum": Primitive(
        "dsum", lambda a: sum(digits(a)), dsum_no_first, lambda v, x: x is None and v >= 10, lambda rng, v: None
    ),
}
"""Operand ranges (what a question may say): ``+n`` / ``-n`` two digits, ``*d`` / ``/d`` one digit
2..9, ``^n`` 10..999; ``*`` and ``/`` need a two-digit running value (one-step results a tiny
model can learn; products stay <= 891), ``-`` one at least as large as n, ``~`` one without a
trailing zero, ``~`` / ``#`` at least 10."""
