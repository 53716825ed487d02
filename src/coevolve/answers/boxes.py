"""Box reading: the content of the last ``\\boxed`` / ``\\fbox`` of a model output, matched by brace
depth, and the boxes joined to it (step 1 of the reading order in ``extract``)."""

from __future__ import annotations

import re

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
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


def _box_at(text: str, end_cmd: int, closing: dict[int, int]) -> tuple[str, int] | None:
    """(content, end) of the box whose command ends at ``end_cmd``; None when malformed."""
    j = end_cmd
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    if j < n and text[j] == "{":
        close = closing.get(j)
        if close is None:
            return None
        return text[j + 1 : close].strip(), close + 1
    if j > end_cmd:  # space form: "\boxed 5" -> the next token, up to '$' or whitespace
        m = re.match(r"[^\s$]+", text[j : j + 1000])
        if m:
            return m.group(0).rstrip(".,;"), j + m.end()
    return None


# What may stand between boxes that give one answer together ("\boxed{1} and \boxed{2}",
# "\boxed{2}, \boxed{3}", "\[\boxed{-2} \quad \text{and} \quad \boxed{1}\]"): math-verify reads
# boxes joined by "and" / "or" / commas as one set.
_BOX_JOIN_RE = re.compile(
    r"(?:\s|[,;&$]|\\\\|\\[()\[\],;: ]|\\q?quad(?![a-zA-Z])|\b(?:and|or)\b"
    r"|\\(?:text|mbox|textrm)\s*\{\s*(?:and|or|,)?\s*\})*"
)
# ... or by a short clause that ends in "and" ("\boxed{1} papers and \boxed{2} bins",
# "\boxed{(3, 3)} \text{ for part (a) and } \boxed{(1, 1)}"), as math-verify reads them: at most 30
# characters, no sentence end, no math and no other command in between.
_BOX_CLAUSE_JOIN_RE = re.compile(r"[\s$]*(?:\\text\s*\{)?[^{}\n.!?;:$\\]{0,30}?\band\s*\}?[\s$]*")


def has_box(text: str) -> bool:
    """True when ``text`` holds a ``\\boxed`` / ``\\fbox`` command (well-formed or not)."""
    return _BOX_RE.search(text) is not None


def _boxes(text: str) -> tuple[list[re.Match[str]], dict[int, int]]:
    cmds = list(_BOX_RE.finditer(text))
    return cmds, (_closing_braces(text, cmds[0].end()) if cmds else {})


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed``/``\\fbox`` in ``text``; None when there is none, or when
    that last box is empty or never closed (a truncated answer is no answer: an earlier box is not
    read in its place)."""
    cmds, closing = _boxes(text)
    last = _box_at(text, cmds[-1].end(), closing) if cmds else None
    return None if last is None else (last[0] or None)


def _joined(text: str, a: int, b: int) -> bool:
    """True when ``text[a:b]``, the gap between two boxes, makes them one answer."""
    return _BOX_JOIN_RE.fullmatch(text, a, b) is not None or _BOX_CLAUSE_JOIN_RE.fullmatch(text, a, b) is not None


def boxed_answer(text: str) -> str | None:
    """The answer the boxes of ``text`` state: ``last_boxed``, together with the boxes right
    before it that are joined to it only by "and", "or", commas, spacing or math delimiters, read
    as the set ``\\{a, b\\}`` (as math-verify does): a model that boxes two candidates is not
    rewarded for the second one alone. None when ``last_boxed`` is None."""
    return boxed_answer_and_end(text)[0]


def boxed_answer_and_end(text: str) -> tuple[str | None, int]:
    """``boxed_answer(text)`` and the index just past the last box (-1 when there is no
    well-formed last box)."""
    cmds, closing = _boxes(text)
    last = _box_at(text, cmds[-1].end(), closing) if cmds else None
    return _joined_boxes(text, cmds, closing, last), (-1 if last is None else last[1])


def _joined_boxes(
    text: str, cmds: list[re.Match[str]], closing: dict[int, int], last: tuple[str, int] | None
) -> str | None:
    if last is None or not last[0]:
        return None
    parts = [last[0]]
    start = cmds[-1].start()
    for m in reversed(cmds[:-1]):
        prev = _box_at(text, m.end(), closing)
        if prev is None or not prev[0] or prev[1] > start or not _joined(text, prev[1], start):
            break
        parts.append(prev[0])
        start = m.start()
    if len(parts) == 1:
        return parts[0]
    return "\\{" + ", ".join(reversed(parts)) + "\\}"
