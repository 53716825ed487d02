"""Final-answer extraction from model outputs.

Why a hand-written extractor: the reward and the majority vote both need *one* answer per
completion, and they need it fast (the toy world extracts thousands per round). Regex-only
extractors break on nested braces (``\\boxed{\\frac{1}{2}}``), so boxes are matched by brace depth.

Order of preference (documented contract, see docs/CONTRACTS.md):
1. the last well-formed ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces), or ``\\boxed 5`` (space form);
   a truncated last box (unbalanced braces) is skipped in favour of the previous one;
2. if ``fallback`` is on: the last "final answer is X" / "the answer is X" / "Answer: X" phrase
   (Minerva / lm-eval style, "I hope it is correct" tails are cut);
3. if ``last_number`` is on (off by default, because the last number of an unfinished solution is
   usually an intermediate value): the last number in the text;
4. otherwise ``None``.
"""

from __future__ import annotations

import re

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
# "final answer is X" beats "the answer is X" beats "Answer: X"; within a kind the last match wins.
# Patterns are anchors: the answer is the text after the last anchor of the first kind found.
_PHRASE_RES: tuple[re.Pattern[str], ...] = (
    re.compile(r"final\s+answer\s*(?:is|:)\s*:?\s*", re.IGNORECASE),
    re.compile(r"(?:the|my)\s+answer\s+is\s*:?\s*", re.IGNORECASE),
    re.compile(r"answer\s*:\s*", re.IGNORECASE),
)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_HOPE_RE = re.compile(r"\.?\s*I hope it is correct.*$", re.IGNORECASE | re.DOTALL)
# A sentence ends at '.', '!' or '?' followed by whitespace/end; decimals like 3.5 are kept.
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s|$)")


_BRACE_TOKEN_RE = re.compile(r"\\[{}]|[{}]")


def _closing_braces(text: str, start: int = 0) -> dict[int, int]:
    """Index of the ``}`` closing each ``{`` of ``text[start:]`` (escaped ``\\{``/``\\}``
    ignored; unclosed ones absent), in one left-to-right pass.

    Why one pass: matching each box's brace by scanning forward from it costs O(length) per box,
    so a completion of 20,000 unclosed ``\\boxed{`` took minutes to extract. A stack gives the
    same pairs (the ``}`` that pops a ``{`` is the first one where the depth counted from that
    ``{`` returns to zero) in O(length) for all boxes together.
    """
    closing: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN_RE.finditer(text, start):
        c = m.group()
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            closing[stack.pop()] = m.start()
    return closing


def _box_content(text: str, end_cmd: int, closing: dict[int, int]) -> str | None:
    """Content of the box whose command ends at ``end_cmd``; None when malformed."""
    j = end_cmd
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    if j < n and text[j] == "{":
        close = closing.get(j)
        if close is None:
            return None
        return text[j + 1 : close].strip()
    if j > end_cmd:  # space form: "\boxed 5" -> the next token, up to '$' or whitespace
        m = re.match(r"[^\s$]+", text[j : j + 1000])
        if m:
            return m.group(0).rstrip(".,;")
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed ``\\boxed``/``\\fbox`` in ``text`` (None when none)."""
    matches = list(_BOX_RE.finditer(text))
    if not matches:
        return None
    closing = _closing_braces(text, matches[0].start())
    for m in reversed(matches):
        content = _box_content(text, m.end(), closing)
        if content is not None and content != "":
            return content
    return None


def _clean_phrase_answer(raw: str) -> str | None:
    """Trim a phrase-anchored answer to its first line/sentence and drop math delimiters."""
    s = _HOPE_RE.sub("", raw)
    s = s.split("\n", 1)[0].strip()
    # Cut at the first sentence end that is not inside $...$ (prices like "$3.50." stay intact).
    out = []
    in_math = False
    i = 0
    while i < len(s):
        c = s[i]
        if c == "$" and (i == 0 or s[i - 1] != "\\"):
            in_math = not in_math
        if not in_math and c in ".!?" and (i + 1 == len(s) or s[i + 1].isspace()):
            break
        out.append(c)
        i += 1
    s = "".join(out).strip()
    if s.startswith("$$") and s.endswith("$$") and len(s) > 4:
        s = s[2:-2].strip()
    elif s.startswith("$") and s.endswith("$") and len(s) > 2 and s.count("$") == 2:
        s = s[1:-1].strip()
    for a, b in (("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(a) and s.endswith(b):
            s = s[2:-2].strip()
    s = s.strip().rstrip(".")
    return s or None


def extract_answer(text: str | None, fallback: bool = True, last_number: bool = False) -> str | None:
    """Final answer of a model output, or None when nothing answer-like is found.

    ``fallback`` enables the phrase anchors ("final answer is X", "the answer is X", "Answer: X");
    ``last_number`` additionally returns the last number in the text as a last resort.
    """
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if fallback:
        for pat in _PHRASE_RES:
            found = list(pat.finditer(text))
            for m in reversed(found):
                # only the anchor's own line can hold the answer: cutting there first keeps
                # many empty anchors ("final answer is .\n" x 30,000) linear, not quadratic
                eol = text.find("\n", m.end())
                ans = _clean_phrase_answer(text[m.end() : eol if eol >= 0 else len(text)])
                if ans is not None:
                    return ans
    if last_number:
        nums = _NUMBER_RE.findall(text)
        if nums:
            return nums[-1].rstrip(",")
    return None


def answer_or_whole(text: str) -> str:
    """The boxed answer when ``text`` contains a box, else the whole string (stripped).

    Used by the pair grader, where either side may be a full model output or a bare answer: a
    bare answer such as ``x = 3`` must not be cut by the phrase fallback.
    """
    boxed = last_boxed(text)
    return boxed if boxed is not None else text.strip()
