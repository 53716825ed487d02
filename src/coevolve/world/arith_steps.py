"""Worked answers to arith questions: short written steps a small model can execute.

Why: a majority vote is right on uncertain questions only when the model's errors are slips, not
a wrong method. A warm start (``coevolve model smollm2-arith``) therefore teaches one procedure
per operation, written out, for any question the world's oracle reads (``read_expression``), not
only the shapes the world draws:

- ``+`` / ``-`` of two multi-digit numbers: the second split by place value, applied left to
  right (``62 - 17 = 62 - 10 - 7 = 52 - 7 = 45``); a negative result as ``-(b - a)``;
- ``×`` with one one-digit factor: the other split by place value (``47 × 6 = 40 × 6 + 7 × 6 =
  240 + 42 = 282``); two multi-digit factors: partial products by the second's place values
  (``47 × 36 = 47 × 30 + 47 × 6 = 1410 + 282 = 1692``); a power of ten directly;
- ``÷``: a whole two-digit quotient by its tens first (``84 ÷ 7: 7 × 10 = 70, 84 - 70 = 14,
  14 ÷ 7 = 2, so 84 ÷ 7 = 12``); otherwise the reduced fraction;
- several operations: multiplication and division first, then left to right, one step a line
  (the order of Python's syntax tree, which is the usual precedence).

Every answer ends ``The answer is \\boxed{v}.`` with the oracle's value.
"""

from __future__ import annotations

import ast
from fractions import Fraction

from coevolve.world.arith import oracle, read_expression

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "×", ast.Div: "÷"}


def _fmt(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _places(n: int) -> list[int]:
    """``347`` -> ``[300, 40, 7]`` (zero places dropped)."""
    digits = str(n)
    return [int(d) * 10 ** (len(digits) - 1 - i) for i, d in enumerate(digits) if d != "0"]


def _chain(start: int, op: str, parts: list[int]) -> str:
    """``= start op p1 op p2 = s1 op p2 = s2``: the running value after each part."""
    out, value, rest = [], start, list(parts)
    while rest:
        out.append(" = " + f"{value} " + " ".join(f"{op} {p}" for p in rest))
        value = value + rest[0] if op == "+" else value - rest[0]
        rest = rest[1:]
    return "".join(out) + f" = {value}"


def _add_sub(a: int, op: str, b: int) -> str:
    if a < 0 or b < 0 or len(_places(b)) < 2 or (op == "+" and a < 10):
        return f"{a} {op} {b} = {a + b if op == '+' else a - b}."
    if op == "-" and a < b:
        return f"{a} - {b} = -({b} - {a}). {_add_sub(b, '-', a)} So {a} - {b} = {a - b}."
    return f"{a} {op} {b}{_chain(a, op, _places(b))}."


def _sum_text(terms: list[int]) -> str:
    if len(terms) == 1:
        return ""
    return _chain(terms[0], "+", terms[1:])


def _times(a: int, b: int) -> str:
    if min(abs(a), abs(b)) <= 1 or a < 0 or b < 0 or max(a, b) < 10 or _power_of_ten(a) or _power_of_ten(b):
        return f"{a} × {b} = {a * b}."
    if b < 10 or a < 10:
        big, small = (a, b) if b < 10 else (b, a)
        parts = _places(big)
        if len(parts) == 1:
            return f"{a} × {b} = {a * b}."
        split = " + ".join(f"{p} × {small}" for p in parts)
        return f"{a} × {b} = {split}{_sum_text([p * small for p in parts])}."
    parts = _places(b)
    if len(parts) == 1:
        return f"{a} × {b} = {a * b}."
    split = " + ".join(f"{a} × {p}" for p in parts)
    return f"{a} × {b} = {split}{_sum_text([a * p for p in parts])}."


def _power_of_ten(n: int) -> bool:
    return n >= 10 and str(n).strip("0") == "1"


def _divide(a: int, b: int) -> str:
    q = Fraction(a, b)
    if b < 0 or a < 0 or q.denominator != 1 or not 10 <= q < 100 or b >= 10:
        return f"{a} ÷ {b} = {_fmt(q)}."
    tens = int(q) // 10 * 10
    rest = a - b * tens
    if rest == 0:
        return f"{a} ÷ {b}: {b} × {tens} = {a}, so {a} ÷ {b} = {tens}."
    return (
        f"{a} ÷ {b}: {b} × {tens} = {b * tens}, {a} - {b * tens} = {rest}, {rest} ÷ {b} = {rest // b}, "
        f"so {a} ÷ {b} = {tens} + {rest // b} = {int(q)}."
    )


def _step(a: Fraction, op: str, b: Fraction) -> str:
    if a.denominator != 1 or b.denominator != 1:
        value = {"+": a + b, "-": a - b, "×": a * b, "÷": a / b}[op]
        return f"{_fmt(a)} {op} {_fmt(b)} = {_fmt(value)}."
    x, y = int(a), int(b)
    if op in "+-":
        return _add_sub(x, op, y)
    return _times(x, y) if op == "×" else _divide(x, y)


def _walk(node: ast.AST, lines: list[str]) -> Fraction:
    if isinstance(node, ast.Expression):
        return _walk(node.body, lines)
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp):
        return -_walk(node.operand, lines)
    assert isinstance(node, ast.BinOp)
    a, b = _walk(node.left, lines), _walk(node.right, lines)
    op = _OPS[type(node.op)]
    lines.append(_step(a, op, b))
    return {"+": a + b, "-": a - b, "×": a * b, "÷": a / b}[op]


def worked_answer(question: str) -> str | None:
    """The worked answer to ``question``, or None when the oracle cannot answer it.

    >>> worked_answer("What is 62 - 17?")
    '62 - 17 = 62 - 10 - 7 = 52 - 7 = 45. The answer is \\\\boxed{45}.'
    >>> worked_answer("What is 47 * 36?")
    '47 × 36 = 47 × 30 + 47 × 6 = 1410 + 282 = 1692. The answer is \\\\boxed{1692}.'
    >>> worked_answer("What is 3 + 4 × 5 - 2?")
    '4 × 5 = 20. 3 + 20 = 23. 23 - 2 = 21. The answer is \\\\boxed{21}.'
    """
    answer, expr = oracle(question), read_expression(question)
    if answer is None or expr is None:
        return None
    lines: list[str] = []
    value = _walk(ast.parse(expr, mode="eval"), lines)
    assert _fmt(value) == answer
    return " ".join(lines or [f"{answer}."]) + f" The answer is \\boxed{{{answer}}}."


__all__ = ["worked_answer"]
