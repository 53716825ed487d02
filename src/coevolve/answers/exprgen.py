"""Random answer pairs whose true relation is known by exact evaluation (the grader's property test).

Why: a reward that says "equal" wrongly is the one failure a policy learns to exploit, and a
hand-picked regression set only covers what someone thought of. Here every expression is a small
tree with an exact value (``fractions.Fraction``), rendered as LaTeX the way a model would write it:
integers, fractions, terminating decimals, powers (negative exponents too), sums, differences,
products (``\\cdot`` / ``\\times``), nested ``\\frac``, square roots of perfect squares, long sums
``a+1+1+…+1`` (the issue-13 trap: a long sum graded as its first term) and intervals.

A pair is ``equal`` exactly when the two values are equal (intervals: same endpoints by value and
same bracket types). Non-equal pairs are near misses on purpose (off by one, sign, reciprocal, a
changed last term, a different bracket) plus unrelated expressions. A non-equal pair whose values
agree to within the grader's documented decimal rounding (``FLOAT_ROUNDING`` places) is never
produced: there "equal" is the documented rounding rule, not an error.

Used by ``tests/test_answers.py`` (a fast seeded subset) and ``dev/grader_property.py`` (the
full run with counts).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

from .normalize import FLOAT_ROUNDING


@dataclass(frozen=True)
class ExprPair:
    """One generated (gold, pred) pair with its exactly known relation and the family it comes from."""

    gold: str
    pred: str
    equal: bool
    family: str


@dataclass(frozen=True)
class _Expr:
    """A rendered expression: LaTeX text, exact value, and precedence (1 sum, 2 product, 3 atom)."""

    tex: str
    value: Fraction
    prec: int


def _paren(e: _Expr, rng: random.Random) -> str:
    return f"\\left({e.tex}\\right)" if rng.random() < 0.3 else f"({e.tex})"


def _atom_text(e: _Expr, need: int, rng: random.Random) -> str:
    """``e`` as an operand needing precedence ``need`` (negative values are parenthesised)."""
    if e.prec < need or e.tex.startswith("-"):
        return _paren(e, rng)
    return e.tex


def decimal_text(v: Fraction) -> str | None:
    """``v`` as a terminating decimal (``-0.125``), or None when its expansion does not terminate."""
    digits, x = 0, abs(v)
    while x.denominator != 1 and digits < 12:
        x *= 10
        digits += 1
    if x.denominator != 1:
        return None
    s = str(x.numerator).rjust(digits + 1, "0")
    body = s if digits == 0 else s[:-digits] + "." + s[-digits:]
    return ("-" if v < 0 else "") + body


def canonical(v: Fraction, rng: random.Random) -> str:
    """The plain written form of a value: an integer, a terminating decimal, or ``\\frac{p}{q}``."""
    if v.denominator == 1:
        return str(v.numerator)
    dec = decimal_text(v)
    if dec is not None and rng.random() < 0.5:
        return dec
    sign = "-" if v < 0 else ""
    return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


def _leaf(rng: random.Random) -> _Expr:
    kind = rng.random()
    if kind < 0.45:
        n = rng.randint(-20, 200)
        return _Expr(str(n), Fraction(n), 3)
    if kind < 0.65:
        p, q = rng.randint(1, 30), rng.randint(2, 30)
        sign = -1 if rng.random() < 0.2 else 1
        tex = ("-" if sign < 0 else "") + f"\\{rng.choice(['frac', 'frac', 'dfrac'])}{{{p}}}{{{q}}}"
        return _Expr(tex, sign * Fraction(p, q), 3)
    if kind < 0.8:
        v = Fraction(rng.randint(-999, 9999), rng.choice([10, 100, 1000, 4, 8]))
        return _Expr(decimal_text(v) or str(v), v, 3)
    if kind < 0.92:
        b, e = rng.randint(2, 12), rng.randint(-3, 6)
        return _Expr(f"{b}^{{{e}}}", Fraction(b) ** e, 3)
    k = rng.randint(1, 30)
    return _Expr(f"\\sqrt{{{k * k}}}", Fraction(k), 3)


def expression(rng: random.Random, depth: int = 2) -> _Expr:
    """A random expression tree of at most ``depth`` operator levels, with its exact value."""
    if depth <= 0 or rng.random() < 0.3:
        return _leaf(rng)
    op = rng.choice(["+", "-", "*", "*", "frac", "pow"])
    a = expression(rng, depth - 1)
    if op == "pow":
        e = rng.randint(0, 3)
        if a.value == 0 and e == 0:
            e = 1
        base = a.tex if a.tex.isdigit() else _paren(a, rng)  # \\frac{1}{2}^{2} would be ambiguous
        return _Expr(f"{base}^{{{e}}}", a.value**e, 3)
    b = expression(rng, depth - 1)
    if op == "+":
        return _Expr(f"{a.tex}+{_atom_text(b, 2, rng)}", a.value + b.value, 1)
    if op == "-":
        return _Expr(f"{a.tex}-{_atom_text(b, 2, rng)}", a.value - b.value, 1)
    if op == "*":
        dot = rng.choice(["\\cdot ", "\\times "])
        return _Expr(f"{_atom_text(a, 2, rng)}{dot}{_atom_text(b, 3, rng)}", a.value * b.value, 2)
    if b.value == 0:
        return a
    return _Expr(f"\\frac{{{a.tex}}}{{{b.tex}}}", a.value / b.value, 3)


def _near_miss(v: Fraction, rng: random.Random) -> Fraction:
    """A value close to ``v`` but different (the mistakes a model makes)."""
    choices = [v + 1, v - 1, -v, v * 2, v + Fraction(1, 10), v + Fraction(1, 2), v * 10]
    if v != 0:
        choices += [1 / v, v / 10]
    w = rng.choice(choices)
    return w if w != v else v + 1


def _distinguishable(a: Fraction, b: Fraction) -> bool:
    """Values that differ beyond the documented decimal rounding (so "not equal" is the only answer)."""
    return abs(a - b) > Fraction(1, 10**FLOAT_ROUNDING)


def _interval(rng: random.Random) -> tuple[str, str, bool]:
    lo = expression(rng, 1).value
    hi = lo + Fraction(rng.randint(1, 40), rng.choice([1, 2, 4, 5]))
    left, right = rng.choice("[("), rng.choice("])")

    def render(a: Fraction, b: Fraction, lft: str, rgt: str) -> str:
        return f"{lft}{canonical(a, rng)}, {canonical(b, rng)}{rgt}"

    gold = render(lo, hi, left, right)
    if rng.random() < 0.4:
        return gold, render(lo, hi, left, right), True
    change = rng.choice(["lo", "hi", "left", "right"])
    if change == "lo":
        return gold, render(lo - 1, hi, left, right), False
    if change == "hi":
        return gold, render(lo, hi + Fraction(1, 2), left, right), False
    if change == "left":
        return gold, render(lo, hi, "(" if left == "[" else "[", right), False
    return gold, render(lo, hi, left, "]" if right == ")" else ")"), False


def _long_sum(rng: random.Random) -> tuple[str, str, bool]:
    """``a+1+1+…+1`` against its first term (never equal) or its true value (equal)."""
    first = rng.randint(1, 9)
    terms = rng.choice([rng.randint(2, 60), rng.randint(100, 160), rng.randint(900, 1100), 5000])
    pred = f"{first}+" + "+".join(["1"] * terms)
    if rng.random() < 0.7:
        return str(first), pred, False
    return str(first + terms), pred, True


def make_pair(rng: random.Random, want_equal: bool) -> ExprPair:
    """One pair; ``want_equal`` asks for an equal pair (long sums and intervals may differ)."""
    r = rng.random()
    if r < 0.06:
        gold, pred, eq = _long_sum(rng)
        return ExprPair(gold, pred, eq, "long_sum")
    if r < 0.14:
        gold, pred, eq = _interval(rng)
        return ExprPair(gold, pred, eq, "interval")
    e = expression(rng, rng.randint(1, 3))
    if want_equal:
        return ExprPair(canonical(e.value, rng), e.tex, True, "value_vs_expr")
    if rng.random() < 0.5:
        w = _near_miss(e.value, rng)
        return ExprPair(canonical(w, rng), e.tex, False, "near_miss")
    f = expression(rng, rng.randint(1, 3))
    return ExprPair(f.tex, e.tex, f.value == e.value, "expr_vs_expr")


OUTPUT_FORMS: dict[str, str] = {
    "boxed": "so the result is \\boxed{{{}}}",
    "statement": "The answer is ${}$.",
    "sentence": "We work it out step by step. So the result is {}.",
}
"""How a generated model output states its answer (``form.format(pred)``): in a box, in an answer
statement, or as the final sentence in plain text -- the three readings of ``extract_answer``."""


def generate(n_unequal: int, n_equal: int, seed: int) -> list[ExprPair]:
    """``n_unequal`` non-equal and ``n_equal`` equal pairs (shuffled), deterministic in ``seed``."""
    rng = random.Random(seed)
    unequal: list[ExprPair] = []
    equal: list[ExprPair] = []
    while len(unequal) < n_unequal or len(equal) < n_equal:
        pair = make_pair(rng, want_equal=len(equal) < n_equal and rng.random() < 0.5)
        if not pair.equal:
            if pair.family in ("near_miss", "expr_vs_expr") and not _distinguishable(*_values(pair)):
                continue
            if len(unequal) < n_unequal:
                unequal.append(pair)
        elif len(equal) < n_equal:
            equal.append(pair)
    pairs = unequal + equal
    rng.shuffle(pairs)
    return pairs


def _values(pair: ExprPair) -> tuple[Fraction, Fraction]:
    """Exact values of a near-miss / expr-vs-expr pair, recomputed from the text (test helper)."""
    return _eval_tex(pair.gold), _eval_tex(pair.pred)


def _eval_tex(tex: str) -> Fraction:
    """Exact value of a LaTeX string produced by this module (a tiny recursive-descent evaluator)."""
    return _Parser(tex).parse()


class _Parser:
    """Evaluates exactly the grammar ``expression`` writes (sum > product > power > atom)."""

    def __init__(self, s: str) -> None:
        for a, b in (("\\left(", "("), ("\\right)", ")"), ("\\dfrac", "\\frac"), ("\\times ", "*"), ("\\cdot ", "*")):
            s = s.replace(a, b)
        self.s, self.i = s, 0

    def parse(self) -> Fraction:
        v = self.sum()
        if self.i != len(self.s):
            raise ValueError(f"unparsed tail {self.s[self.i :]!r}")
        return v

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def eat(self, tok: str) -> None:
        if not self.s.startswith(tok, self.i):
            raise ValueError(f"expected {tok!r} at {self.i} in {self.s!r}")
        self.i += len(tok)

    def sum(self) -> Fraction:
        v = self.product()
        while self.peek() in ("+", "-"):
            op = self.peek()
            self.i += 1
            w = self.product()
            v = v + w if op == "+" else v - w
        return v

    def product(self) -> Fraction:
        v = self.power()
        while self.peek() == "*":
            self.i += 1
            v *= self.power()
        return v

    def power(self) -> Fraction:
        v = self.atom()
        if self.peek() == "^":
            self.i += 1
            self.eat("{")
            e = self.sum()
            self.eat("}")
            v = v ** int(e)
        return v

    def group(self) -> Fraction:
        self.eat("{")
        v = self.sum()
        self.eat("}")
        return v

    def atom(self) -> Fraction:
        c = self.peek()
        if c == "-":
            self.i += 1
            return -self.power()
        if c == "(":
            self.i += 1
            v = self.sum()
            self.eat(")")
            return v
        if self.s.startswith("\\frac", self.i):
            self.i += len("\\frac")
            return self.group() / self.group()
        if self.s.startswith("\\sqrt", self.i):
            self.i += len("\\sqrt")
            v = self.group()
            root = round(float(v) ** 0.5)
            if Fraction(root * root) != v:
                raise ValueError(f"not a perfect square: {v}")
            return Fraction(root)
        j = self.i
        while j < len(self.s) and (self.s[j].isdigit() or self.s[j] == "."):
            j += 1
        if j == self.i:
            raise ValueError(f"unexpected {c!r} at {self.i} in {self.s!r}")
        tok, self.i = self.s[self.i : j], j
        return Fraction(tok)
