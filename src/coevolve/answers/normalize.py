"""Cheap answer canonicalisation and the exact/numeric fast path.

Why: math-verify (sympy + ANTLR) costs milliseconds per call and must run in a worker process;
the toy world votes over integer answers thousands of times per round. ``normalize`` maps the
common surface variants (``\\dfrac``, ``\\text{}`` wrappers, ``\\$``, ``1,000``, ``^\\circ``,
``x = 3``, trailing units/periods) to one string, and ``cheap_equiv`` decides plain numbers
without any subprocess. Anything it cannot decide returns ``None`` and goes to math-verify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_PLAIN_INT_RE = re.compile(r"-?\d+")
_WRAPPER_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mathsf|mbox|operatorname|boldsymbol|bm)\s*\{"
)
_UNICODE_OPS = str.maketrans({"−": "-", "·": "\\cdot ", "×": "\\times ", "÷": "\\div "})
_NEG_SPACE_RE = re.compile(r"\\!\s*")
_BRACED_COMMA_RE = re.compile(r"\s*\{\s*,\s*\}\s*")  # "14{,}916", "14 {, }916": a thousands comma
_SPACING_RE = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~|\\displaystyle|\\limits")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])\s*")
_FRAC_VARIANT_RE = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*(\d)")  # \frac12 -> \frac{1}{2}
_FRAC_HALF_SHORT_RE = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")  # \frac{10}3
_FRAC_FIRST_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*\{")  # \frac3{4}
_SQRT_SHORT_RE = re.compile(r"\\sqrt\s*(\d+|[a-zA-Z])")
_PRIME_RE = re.compile(r"\^\s*\{\s*\\prime\s*\}|\^\s*\\prime|\\prime|’")  # A^{\prime} is A'
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_PERCENT_RE = re.compile(r"\\%|%|\\percent")
_DOLLAR_RE = re.compile(r"\\\$|\$|€|£|¥")
_THOUSANDS_RE = re.compile(r"(?<![\d.])([1-9]\d{0,2})((?:,\d{3})+)(?![\d])")
_ASSIGN_RE = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*(?=[^=])")
UNIT_WORDS: tuple[str, ...] = tuple(
    (
        "dollars|dollar|cents|cent|units|unit|degrees|degree|percent|pct|meters|meter|metres|cm|mm|km|"
        "kg|mg|inches|inch|feet|foot|ft|miles|mile|hours|hour|minutes|minute|seconds|second|days|day|"
        "years|year|square|sq|cubic|people|students|ways|points|marbles|apples|cookies|cups|pounds|lbs|"
        "grams|gram|liters|litres|liter|mph|m|s|g|h"
    ).split("|")
)
"""Unit words an answer may carry after its number (``5 dollars``, ``12 cm``): dropped by
``normalize``, and not a sign of a sentence to the pair grader."""
# A unit word must end where its letters end: without the look-ahead "mmm…m" splits into m/mm runs
# in exponentially many ways and a short model answer stalls the parent process.
_TRAILING_UNIT_RE = re.compile(
    r"^([-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:/\d+)?)\s*(?:(?:"
    + "|".join(UNIT_WORDS)
    + r")(?![a-zA-Z])(?:\^?\{?[23]\}?|²|³)?\s*)+\.?$",
    re.IGNORECASE,
)
_NUM_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,3})?")
_FRAC_NUM_RE = re.compile(r"([-+]?)\\frac\{([-+]?\d+)\}\{([-+]?\d+)\}")
_SLASH_NUM_RE = re.compile(r"([-+]?\d+)/([-+]?\d+)")
_SCI_RE = re.compile(r"([-+]?(?:\d+(?:\.\d*)?|\.\d+))(?:\\times|\*|x)10\^\{?([-+]?\d+)\}?")
_NEWLINE_PROTECT_RE = re.compile(r"(\\[a-zA-Z]+)\s+(?=[a-zA-Z])")
PLAIN_FUNCTIONS: tuple[str, ...] = ("sqrt", "cbrt", "exp", "log", "ln", "sin", "cos", "tan")
"""Functions a model writes in plain-text math (``-1 + sqrt(3)``). ``normalize`` turns ``sqrt(x)``
into ``\\sqrt{x}`` and ``a**b`` into ``a^{b}``: math-verify's LaTeX parser reads ``-1 + sqrt(3)``
as no value, and only its plain-expression parser reads ``**`` -- which reads ``-1 + sqrt(3)`` as
``-1`` (a partial match), so it is never sent a raw answer."""
_SQRT_CALL_RE = re.compile(r"(?<![\\a-zA-Z])sqrt\s*\(")
_POW_RE = re.compile(r"\*\*\s*")
_PERCENT_WORD_RE = re.compile(r"(?<=[\d\s])(?:percent|per\s+cent|pct)(?![a-zA-Z])", re.IGNORECASE)
_REVERSED_ASSIGN_RE = re.compile(r"^([^=]*[^=\s])\s*=\s*[a-zA-Z](?:_\{?\w+\}?)?$")  # "2 = x"
_TIME_RE = re.compile(r"(\d{1,2}:\d{2}):00")  # "20:34:00" is the time 20:34
TIME_FULL_RE = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?")
FLOAT_ROUNDING = 6  # decimal places, same as math-verify's verify(float_rounding=6)


def matching_brace(s: str, open_idx: int, pair: str = "{}") -> int | None:
    """Index of the ``}`` (or ``pair[1]``) matching the ``{`` (``pair[0]``) at ``open_idx`` (None
    when unbalanced)."""
    depth = 0
    for i in range(open_idx, len(s)):
        if s[i] == pair[0]:
            depth += 1
        elif s[i] == pair[1]:
            depth -= 1
            if depth == 0:
                return i
    return None


def _plain_math_to_latex(s: str) -> str:
    """``sqrt(x)`` -> ``\\sqrt{x}``, ``a**(b)`` / ``a**b`` -> ``a^{(b)}`` / ``a^{b}`` (see
    ``PLAIN_FUNCTIONS``); an unbalanced call is left as written. Linear per rewrite, at most 20."""
    for _ in range(20):
        m = _SQRT_CALL_RE.search(s)
        close = None if m is None else matching_brace(s, m.end() - 1, "()")
        if m is None or close is None:
            break
        s = s[: m.start()] + "\\sqrt{" + s[m.end() : close] + "}" + s[close + 1 :]
    for _ in range(20):
        m = _POW_RE.search(s)
        if m is None:
            break
        j = m.end()
        end = matching_brace(s, j, "()") if j < len(s) and s[j] == "(" else None
        if end is None:
            num = re.match(r"[-+]?[\w.]+", s[j:])
            end = j + num.end() - 1 if num else None
        if end is None:
            break
        s = s[: m.start()] + "^{" + s[j : end + 1] + "}" + s[end + 1 :]
    return s


def _unwrap_commands(s: str) -> str:
    """Replace ``\\text{X}``-style wrappers by X (nested braces handled)."""
    for _ in range(20):
        m = _WRAPPER_RE.search(s)
        if m is None:
            return s
        open_idx = m.end() - 1
        close = matching_brace(s, open_idx)
        if close is None:
            return s
        s = s[: m.start()] + s[open_idx + 1 : close] + s[close + 1 :]
    return s


def _strip_delimiters(s: str) -> str:
    s = s.strip()
    changed = True
    while changed and s:
        changed = False
        for a, b in (("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]"), ("$", "$")):
            if len(s) >= len(a) + len(b) and s.startswith(a) and s.endswith(b):
                s = s[len(a) : len(s) - len(b)].strip()
                changed = True
                break
    return s


def _canon(ans: str) -> tuple[str, bool]:
    """(canonical string, had_percent). See module docstring for the list of rewrites."""
    s = ans.strip()
    if _PLAIN_INT_RE.fullmatch(s):
        return s.lstrip("+") if not s.startswith("-0") else s, False
    s = _strip_delimiters(s).translate(_UNICODE_OPS)
    s = s.replace("\\\\", "\\") if re.search(r"\\\\[a-zA-Z]", s) else s  # doubled-escape dumps
    s = _unwrap_commands(s)
    s = _BRACED_COMMA_RE.sub(",", s).replace("\\{", "\x01").replace("\\}", "\x02")
    s = _NEG_SPACE_RE.sub("", s)  # "16,\\!386" is one number: a negative space joins, it does not separate
    s = _SPACING_RE.sub(" ", s)
    s = _LEFT_RIGHT_RE.sub("", s)
    s = _FRAC_VARIANT_RE.sub(r"\\frac", s)
    s = _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_FIRST_SHORT_RE.sub(r"\\frac{\1}{", s)
    s = _FRAC_HALF_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", s)
    s = _DEGREE_RE.sub("", _PRIME_RE.sub("'", s))
    if "sqrt" in s or "**" in s:
        s = _plain_math_to_latex(s)
    had_percent = bool(_PERCENT_RE.search(s) or _PERCENT_WORD_RE.search(s))
    s = _PERCENT_WORD_RE.sub("", _PERCENT_RE.sub("", s))
    s = _DOLLAR_RE.sub("", s)
    s = s.strip().rstrip(".").strip()
    m = _TRAILING_UNIT_RE.match(s)
    if m:
        s = m.group(1)
    s = _THOUSANDS_RE.sub(lambda mm: mm.group(1) + mm.group(2).replace(",", ""), s)
    if s.count("=") == 1:
        s = _ASSIGN_RE.sub("", s)
        s = _REVERSED_ASSIGN_RE.sub(r"\1", s)  # "2 = x" states x = 2
    if TIME_FULL_RE.fullmatch(s):
        s = _TIME_RE.sub(r"\1", s)
    s = _NEWLINE_PROTECT_RE.sub(lambda mm: mm.group(1) + "\x00", s)
    s = re.sub(r",\s+(?=\d)", ",\x00", s)  # "32, 349" is a list, not 32349: keep the gap
    s = re.sub(r"\s+", "", s).replace("\x00", " ")
    s = s.replace("\x01", "\\{").replace("\x02", "\\}")
    s = s.rstrip(".")
    # one redundant outer pair of braces: {5} -> 5
    while len(s) > 2 and s[0] == "{" and s[-1] == "}" and "{" not in s[1:-1] and "}" not in s[1:-1]:
        s = s[1:-1]
    return s, had_percent


def normalize(ans: str) -> str:
    """Cheap canonical string of an answer (no sympy): equal strings mean equal answers.

    The converse does not hold (``1/2`` and ``0.5`` stay different strings); ``cheap_equiv``
    and math-verify handle value equality.
    """
    return _canon(ans)[0]


@dataclass(frozen=True)
class Canon:
    """A normalised answer with its exact value when it is a plain number (else None)."""

    text: str
    value: Fraction | None
    percent: bool
    inexact: bool  # written with a decimal point: compare with math-verify's rounding


def _parse_number(s: str) -> tuple[Fraction, bool] | None:
    """Exact value of a plain real number string (int, decimal, a/b, \\frac{a}{b}, a\\times10^k)."""
    if not s or len(s) > 40:
        return None
    if _NUM_RE.fullmatch(s):
        return Fraction(s), "." in s or "e" in s.lower()
    m = _FRAC_NUM_RE.fullmatch(s) or _SLASH_NUM_RE.fullmatch(s)
    if m:
        groups = m.groups()
        sign = -1 if len(groups) == 3 and groups[0] == "-" else 1
        num, den = (groups[1], groups[2]) if len(groups) == 3 else groups
        if int(den) == 0:
            return None
        return sign * Fraction(int(num), int(den)), False
    m = _SCI_RE.fullmatch(s)
    if m and abs(int(m.group(2))) < 400:
        return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2)), "." in m.group(1)
    return None


def canon(ans: str) -> Canon:
    """Normalised text plus exact numeric value (when the answer is a plain number)."""
    text, pct = _canon(ans)
    parsed = _parse_number(text)
    if parsed is None:
        return Canon(text, None, pct, False)
    return Canon(text, parsed[0], pct, parsed[1])


def _num_close(a: Fraction, b: Fraction, inexact: bool) -> bool:
    """Equal, or (``inexact``) equal after rounding to ``FLOAT_ROUNDING`` places -- rounded
    exactly: through ``float`` two numbers above ~1e9 that differ in the 6th place (or, past 1e16,
    in the units) became the same double and were graded equal."""
    if a == b:
        return True
    if not inexact:
        return False
    return round(a, FLOAT_ROUNDING) == round(b, FLOAT_ROUNDING)


_DECIMAL_COMMA_RE = re.compile(r"[-+]?\d+,\d+")


def _decimal_comma_equiv(a: Canon, b: Canon) -> bool | None:
    """``1,22`` next to a plain number reads as a decimal comma (math-verify: 1,22 == 1.22)."""
    for x, y in ((a, b), (b, a)):
        if x.value is None and y.value is not None and _DECIMAL_COMMA_RE.fullmatch(x.text):
            if _num_close(Fraction(x.text.replace(",", ".")), y.value, True):
                return True
    return None


def cheap_equiv(a: Canon, b: Canon) -> bool | None:
    """Decide equivalence without sympy: True/False when sure, None when math-verify must decide.

    Equal normalised strings are equal. Two plain numbers are compared exactly, or after rounding
    to ``FLOAT_ROUNDING`` places when one is written as a decimal (math-verify's rule). A percent
    sign on one side accepts both readings (``10\\%`` equals ``10`` and ``0.1``), as math-verify does.
    """
    if a.text == b.text:
        return True
    if a.value is None or b.value is None:
        return _decimal_comma_equiv(a, b)
    inexact = a.inexact or b.inexact
    if _num_close(a.value, b.value, inexact):
        return True
    if a.percent != b.percent:
        pct, other = (a, b) if a.percent else (b, a)
        return _num_close(pct.value / 100, other.value, inexact)  # type: ignore[operator]
    return False
