"""Final-answer reading of model outputs: the one reading behind reward, vote and evaluation.

Why a hand-written reader: the reward and the majority vote both need *one* answer string per
completion, fast (the toy world reads thousands per round) and in the parent process (the vote
clusters strings before any math-verify call). Regex-only extractors break on nested braces
(``\\boxed{\\frac{1}{2}}``), so boxes are matched by brace depth.

Reading order (the contract, docs/CONTRACTS.md):

1. **A box decides.** When the output holds a ``\\boxed`` / ``\\fbox`` command, the answer is the
   content of the last one (nested braces, or the space form ``\\boxed 5``) and nothing else is
   read: when that last box is empty or its braces never close (a truncated output), there is no
   answer. A box whose content does not parse is graded "not equal" -- never replaced by some
   other number of the text. Boxes joined to the last one only by "and", "or", commas or spacing
   (``\\boxed{1} and \\boxed{2}``), or by a short clause ending in "and" (``\\boxed{1} papers and
   \\boxed{2}``), are one answer, the set ``\\{1, 2\\}`` (``boxed_answer``). Minerva's template
   after the last box ("The final answer is $X$. I hope it is correct.", X math) states X instead.
2. **No box: the answer section.** The text is cut at the first chat-template token
   (``<|im_end|>``, ``<|im_start|>``, ``<|endoftext|>``, ``</s>`` ...: what follows is a
   hallucinated next turn); when it has ``</think>`` only the text after the last one is read, and
   a ``<think>`` that is never closed means no answer.
3. **Answer statements**, strongest kind first, the last one of a kind winning (math-verify's
   ``LatexExtractionConfig`` / ``ExprExtractionConfig`` priorities, with lighteval's answer words
   in 44 languages): (a) "final answer ... is X"; (b) an answer word and a colon ("Answer: X",
   "Réponse : X", "答案：X"); (c) an answer word and X in the same clause ("the answer is X",
   "la réponse est X", "Answer $9$"). X is what follows up to the end of the sentence: all of it
   when it reads as a bare answer (``x = 3``, ``$\\frac{1}{2}$``, ``Evelyn``), else its first math
   span within 50 characters with no clause break before it. A statement with no X is not one.
4. **The final sentence** (the last-number rule of math-verify and lighteval, restricted to the
   last sentence, so that an intermediate value of the working is not read as the answer): its
   last math span. Sentences end at ``. ! ?`` before a space, ``。！？।؟۔`` and line breaks --
   never inside ``$..$`` / ``\\(..\\)`` (one line) or ``$$..$$`` / ``\\[..\\]`` (any lines), and
   not at a decimal point. Closing remarks ("I hope it is correct.", "Hope this helps!") are not
   the final sentence.
5. Otherwise no answer (``None``): the vote counts it as disagreeing with every other answer.

A math span is a math environment (its content) or a run of numbers, operators, brackets, LaTeX
commands and one-letter variables in the text ("25 - 14 = 11", "3x + 2", "\\frac{2}{5}"). A chain
of numeric equalities reads as its last value ("25 - 14 = 11" -> "11", math-verify's last-equation
rule); an equation with a variable (``x = 3``, ``2x + y = 5``) is kept whole for the grader. A
span that is a sentence is no answer; a ``$`` whose inline "math" would be a sentence is a currency
sign (``= $10,455. The final answer is $10,455$``). Plain-text math is read as models write it:
``-1 + sqrt(3)``, ``2**(1/4)``, a time ``20:34:00``, ``33.5 percent``; a sign after "Answer:" is
the answer's.

This module holds the order; box reading lives in ``boxes``, the free-text reading in ``freetext``.
"""

from __future__ import annotations

import re

from .boxes import boxed_answer, boxed_answer_and_end, has_box, last_boxed
from .freetext import MATHISH_RE, answer_section, is_bare, read_unboxed

# Minerva's answer template, math-verify's first-priority pattern: "Final Answer: The final answer is
# X. I hope it is correct." after the last box states the answer (the boxes before it are working).
_SIGNED_FINAL_RE = re.compile(r"(?i:final\s+answer\s+is)[^\n]{1,200}?\.?\s?I\s+hope(?![a-z])")


def _boxed_or_signed(text: str) -> str | None:
    """``boxed_answer``, unless Minerva's answer template follows the last box and its X is math (a
    digit, ``$`` or a LaTeX command: "the final answer is above" leaves the box to decide)."""
    boxed, end = boxed_answer_and_end(text)
    # str.find first: a boxed output pays one scan of its tail, no regex, unless it says "hope"
    if end >= 0 and text.find("hope", end) >= 0 and _SIGNED_FINAL_RE.search(text, end):
        signed = read_unboxed(text[end:])
        if signed is not None and MATHISH_RE.search(signed):
            return signed
    return boxed


def extract_answer(text: str | None, fallback: bool = True) -> str | None:
    """Final answer of a model output, or None when it states none (module docstring).

    The last ``\\boxed{}`` when the output has a box; otherwise, with ``fallback`` (the default),
    the free-text reading: answer statements, then the last math span of the final sentence.
    ``fallback=False`` reads boxes only.

    >>> extract_answer("so \\\\boxed{\\\\frac{1}{2}} done")
    '\\\\frac{1}{2}'
    >>> extract_answer("So, 25 - 14 = 11.")
    '11'
    >>> extract_answer("Réponse : 12") , extract_answer("The answer is $x = 3$.")
    ('12', 'x = 3')
    >>> extract_answer("good \\\\boxed{3} then truncated \\\\boxed{\\\\frac{1}{") is None
    True
    >>> extract_answer("<think>2+2</think><answer>4</answer>"), extract_answer("56. The answer is \\\\box")
    ('4', None)
    """
    if not text or _CUT_MARKER_RE.search(text):
        return None
    tagged = _tagged_answer(text)
    if tagged is not None:
        return tagged or None
    if has_box(text):
        return _boxed_or_signed(text)
    return read_unboxed(text) if fallback else None


# A completion that ends inside a final-answer marker ("... is \\box", "<answ") was cut off:
# it states no answer, and an earlier number of it is not read in its place.
_CUT_MARKER_RE = re.compile(
    r"(?:\\b(?:o(?:x(?:e(?:d)?)?)?)?|\\f(?:b(?:o(?:x)?)?)?|<a(?:n(?:s(?:w(?:e(?:r)?)?)?)?)?)\s*$"
)
_TAG_OPEN, _TAG_CLOSE = "<answer>", "</answer>"


def _tagged_answer(text: str) -> str | None:
    """The content of the last ``<answer>`` of the answer section (R1-style templates, read as
    their graders read it); "" when that tag never closes (cut off: no answer); None when the
    section has no ``<answer>`` tag."""
    s = answer_section(text)
    open_at = -1 if s is None else s.rfind(_TAG_OPEN)
    if open_at < 0:
        return None
    body = s[open_at + len(_TAG_OPEN) :]
    close = body.find(_TAG_CLOSE)
    if close < 0:
        return ""
    return answer_or_whole(body[:close]) or ""


def answer_or_whole(text: str) -> str | None:
    """One side of a pair to grade, which may be a whole model output or a bare answer: the box
    when it has one (None when that box is empty or truncated), the whole string when it is a
    bare answer (``x = 3``, ``\\$5``, ``12 and 13``, ``5 dollars``, ``Evelyn``), else the
    free-text reading of ``extract_answer`` (None when it states no answer). An ``<answer>`` tag
    is read first, as by ``extract_answer``."""
    tagged = _tagged_answer(text)
    if tagged is not None:
        return tagged or None
    if has_box(text):
        return _boxed_or_signed(text)
    s = text.strip()
    return s if is_bare(s) else read_unboxed(s)


__all__ = ["answer_or_whole", "answer_section", "boxed_answer", "extract_answer", "has_box", "last_boxed"]
