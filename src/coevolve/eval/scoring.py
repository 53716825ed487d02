"""The two answer styles of the benchmark registry that are not ``math``: ``mc`` (the option letter
from ``\\boxed{}`` or from "answer is (C)" / "Answer: C"; no letter found = wrong) and ``bbeh``
(BIG-Bench Extra Hard's normalised fuzzy exact match, re-implemented after google-deepmind/bbeh
``bbeh/evaluate.py``, ``\\boxed{}`` first). Pure text: ``last_boxed`` is the answer pipeline's, no
math-verify worker."""

from __future__ import annotations

import re

from coevolve.answers.extract import last_boxed
from coevolve.prompts.chat import LETTERS

_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mathbf|texttt|textrm)\s*\{(.*)\}$", re.S)
_LETTER_START = re.compile(r"^\(?\s*([A-Za-z])\s*\)?(?=$|[\s.:)\]])")
_ANSWER_PATTERNS = (
    # "the answer is (C)", "The correct answer is: option C", "**Answer:** C", "Answer: (C)"
    re.compile(
        r"(?i:answer)\**\s*(?i:is|:)[\s:*]*(?:(?i:option|choice)\s*)?\(?\s*([A-Z])\s*\)?"
        r"(?![A-Za-z0-9])"
    ),
)


def extract_choice(text: str, n_choices: int = 26) -> str | None:
    """Option letter chosen in ``text``, or None when there is none (the item then scores 0).

    Order: the last ``\\boxed{}`` when its content starts with a lone letter (``\\boxed{C}``,
    ``\\boxed{(C)}``, ``\\boxed{\\text{C}}``, ``\\boxed{C. 42}``; lower case accepted); else the
    last "answer is X" / "Answer: X" with an upper-case letter. Letters beyond ``n_choices``
    are ignored.
    """
    valid = LETTERS[: max(1, min(n_choices, 26))]
    box = last_boxed(text)
    if box is not None:
        inner = box.strip()
        while (w := _WRAPPER.match(inner)) is not None:
            inner = w.group(1).strip()
        m = _LETTER_START.match(inner)
        if m and m.group(1).upper() in valid:
            return m.group(1).upper()
    for pat in _ANSWER_PATTERNS:
        hits = [h.group(1) for h in pat.finditer(text) if h.group(1) in valid]
        if hits:
            return hits[-1]
    return None


def grade_choice(gold: str, text: str) -> bool:
    """Multiple-choice verdict: the extracted letter equals the gold letter; no letter -> wrong."""
    got = extract_choice(text)
    return got is not None and got == gold.strip().upper()


_BBEH_PREFIXES = ("The answer is:", "The final answer is ", "The final answer is: ", "The answer is ")


def _bbeh_strip_latex(s: str) -> str:
    if len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        s = s[1:-1]
    for cmd in ("boxed{", "text{", "texttt{"):
        if cmd in s and s.endswith("}"):
            s = s[:-1].split(cmd)[1]
    return s


def bbeh_extract(text: str) -> str:
    """BBEH prediction string after the official normalisation.

    Our prompt asks for ``\\boxed{}``, so the last boxed content is used when present; otherwise
    the official "The answer is: X" prefixes apply. Then, as in bbeh/evaluate.py: strip one
    trailing period, unwrap ``$..$`` / ``\\boxed{}`` / ``\\text{}`` / ``\\texttt{}``, lower-case,
    ", " -> ",", drop "**", keep the first line, strip one trailing period.
    """
    s = text.strip()
    box = last_boxed(s)
    if box is not None:
        s = box.strip()
    else:
        for p in _BBEH_PREFIXES:
            if p in s:
                s = s.split(p)[-1].strip()
    s = s.removesuffix(".")
    s = _bbeh_strip_latex(s)
    s = s.lower().replace(", ", ",").replace("**", "")
    s = s.split("\n")[0]
    return s.removesuffix(".")


def bbeh_match(prediction: str, reference: str) -> bool:
    """BBEH fuzzy match between a normalised prediction and a normalised reference.

    Equal strings; "(a)" vs "a" either way; equal numbers; equal after removing single quotes;
    one equal to the other in square brackets; prediction with a trailing "?".
    """
    if prediction == reference:
        return True
    for a, b in ((prediction, reference), (reference, prediction)):
        if len(a) == 3 and a[0] == "(" and a[-1] == ")":
            return a[1] == b
    try:
        if float(prediction) == float(reference):
            return True
    except ValueError:
        pass
    if prediction.replace("'", "") == reference.replace("'", ""):
        return True
    if f"[{reference}]" == prediction or f"[{prediction}]" == reference:
        return True
    return prediction.endswith("?") and prediction[:-1] == reference


def bbeh_reference(gold: str) -> str:
    """Normalised BBEH target: strip, lower-case, ", " -> ",", and one trailing period removed.

    The period rule is our one deviation from bbeh/evaluate.py: the official code strips the
    period from the prediction only, which makes the 11 targets ending in "." (bbeh_linguini)
    impossible to match.
    """
    return gold.strip().lower().replace(", ", ",").removesuffix(".")


def grade_bbeh(gold: str, text: str) -> bool:
    """BBEH verdict: official-style normalisation of both sides, then ``bbeh_match``."""
    return bbeh_match(bbeh_extract(text), bbeh_reference(gold))
