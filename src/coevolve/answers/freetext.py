"""Free-text reading of a model output that has no box: the answer section, answer statements and
the final sentence (steps 2-5 of the reading order in ``extract``), and whether a string is a bare
answer rather than a sentence."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from .normalize import PLAIN_FUNCTIONS, UNIT_WORDS

# Chat-template tokens: what follows one is a turn the model should not have written.
_CHAT_TOKEN_RE = re.compile(r"<\|[A-Za-z_]+(?:\|>|>)|</s>|<\|end[a-z_]*\|>|\[INST\]|\[/INST\]")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"

# Answer words, from lighteval's TRANSLATION_LITERALS[language].answer
# (huggingface/lighteval, MIT, src/lighteval/tasks/templates/utils/translation_literals.py).
ANSWER_WORDS: tuple[str, ...] = (
    "answer",
    "antwoord",
    "antwort",
    "cevap",
    "erantzuna",
    "javob",
    "jawaban",
    "jibu",
    "odgovor",
    "odpoveď",
    "odpověď",
    "odpowiedź",
    "resposta",
    "respuesta",
    "risposta",
    "réponse",
    "răspuns",
    "sagot",
    "svar",
    "trả lời",
    "tubag",
    "vastaus",
    "vastus",
    "válasz",
    "απάντηση",
    "адказ",
    "валэктон",
    "відповідь",
    "одговор",
    "ответ",
    "отговор",
    "яуап",
    "җавап",
    "إجابة",
    "جواب",
    "उत्तर",
    "উত্তর",
    "ਜਵਾਬ",
    "જવાબ",
    "பதில்",
    "జవాబు",
    "คำตอบ",
    "回答",
    "答案",
)
_WORD_ALT = "|".join(re.escape(w) for w in sorted(ANSWER_WORDS, key=len, reverse=True))
# Anchors of answer statements: (a) "final answer ... is" (math-verify's final answer.{0,100}?\s+is,
# within one sentence); (b) an answer word and a colon; (c) an answer word. In alphabets written with spaces between words an answer word must start a
# word ("answer", not "ranswer"); in Chinese, Japanese and Arabic ("الإجابة") it need not.
_SPACED = r"A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff"  # Latin, Greek, Cyrillic letters
_WORD_START = rf"(?<![{_SPACED}])"
_WORD_END = rf"(?:s|es)?(?![{_SPACED}])"  # "answer", "answers", "réponses"; not "answered"
_FINAL_RE = re.compile(r"(?i:final\s+answer)(?:(?![.!?]\s)[^\n]){0,100}?\s(?i:is)\b\s*:?", re.UNICODE)
_WORD_RE = re.compile(rf"{_WORD_START}(?i:{_WORD_ALT}){_WORD_END}", re.UNICODE)


@functools.lru_cache(maxsize=256)
def _anchor_res(words: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(colon, word) anchor patterns for the answer words present in a text: scanning for 44
    alternatives at every position cost most of the reading time; most outputs hold one or none."""
    alt = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return (
        re.compile(rf"{_WORD_START}(?i:{alt}){_WORD_END}\s*(?:\*\*)?\s*[:：]"),
        re.compile(rf"{_WORD_START}(?i:{alt}){_WORD_END}"),
    )


def _anchor_kinds(s: str) -> list[tuple[re.Pattern[str], bool]]:
    """The anchor patterns worth running on ``s``, strongest kind first, each with whether the
    anchor itself says "is" / ":" (then a word alone after it is an answer)."""
    low = s.lower()
    kinds = [(_FINAL_RE, True)] if "final" in low else []
    words = tuple(w for w in ANSWER_WORDS if w in low)
    if words:
        colon, word = _anchor_res(words)
        kinds += [(colon, True), (word, False)]
    return kinds


ANCHOR_WINDOW = 50
"""Characters after an answer statement's anchor within which its math span must start (math-verify's ``.{0,50}?``)."""
_MAX_X = 300  # a statement's X longer than this is not tried as a bare answer (bounds the cost per anchor)

# Copulas and punctuation between an anchor and a bare X ("is", "est", "是", ":", "=").
_LEAD_RE = re.compile(
    r"(?:[\s*:：=—]|-(?![\d.($\\]))*(?:(?i:is|are|was|will\s+be|would\s+be|equals|est|sera|ist|lautet|es|é|è|是|为|為)"
    r"(?![^\W\d_]))?[\s*:：=]*"
)
_CLAUSE_BREAK_RE = re.compile(r"[,;，；،、]")
_SAID_RE = re.compile(r"[^\s*\-—]")  # the lead holds a copula, a colon or "="
MATHISH_RE = re.compile(r"[\d$\\]")  # a digit, a math delimiter or a LaTeX command

# Math environments: $$..$$ and \[..\] over any lines; $..$ and \(..\) on one line. An opening $ is
# not escaped and not right after a digit ("1,000.99$" is a price, as in math-verify).
_DELIM_RE = re.compile(r"\\\$|\$\$|\$|\\\[|\\\]|\\\(|\\\)")
# Sentence ends outside math: ASCII . ! ? before whitespace or the end, the CJK / Devanagari /
# Arabic / Urdu stops anywhere, and line breaks.
_SENT_END_RE = re.compile(r"(?<!\\)[.!?](?=\s|$)|[。！？।؟۔]|\n")
_SIGN_OFF_RE = re.compile(
    r"^\W*(?:i\s+hope\s+(?:it|this|that)\s+(?:is\s+correct|helps)|hope\s+(?:it|this|that)\s+helps"
    r"|let\s+me\s+know\b.*|feel\s+free\b.*|thank\s+you\b.*|thanks\b.*|good\s+luck\b.*)\W*$",
    re.IGNORECASE | re.DOTALL,
)
# A run of math in running text: numbers (not glued to a word: "AZYUK2A" has none), operators,
# brackets, LaTeX commands, one-letter variables, currency and percent signs, spaces.
_RUN_TOKEN = (
    r"(?<![A-Za-z]{2})\d{1,2}(?::\d{2}){1,2}(?![\d:])"  # a time (20:34, 20:34:00)
    r"|(?<![A-Za-z]{2})\d+(?:[.,]\d+)*|\.\d+"  # a number, not glued to a word ("AZYUK2A" holds none)
    rf"|(?<![A-Za-z])(?:{'|'.join(PLAIN_FUNCTIONS)})(?=\s*\()"  # plain-text math: sqrt(3), log(2)
    r"|(?<![A-Za-z])(?:percent|pi)(?![A-Za-z])"
    r"|\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox|operatorname)\s*\{[^{}\n]*\}"  # units, names
    r"|\\(?:begin|end)\s*\{[A-Za-z*]+\}"  # matrix and array environments
    r"|\\[A-Za-z]+\d*|\\\\|\\[%$,!;: {}]"  # LaTeX commands ("\\frac12", "\\sqrt3"), "\\\\", escapes
    r"|[-+*/^_=<>()\[\]{}&×÷·−±≤≥≠%°²³$€£¥₹,;]|(?<![A-Za-z'’])[A-Za-z](?![A-Za-z'’])|[ \t]"
)
_RUN_RE = re.compile(rf"(?:{_RUN_TOKEN})+")
_DIGIT_RE = re.compile(r"\d")
_ALNUM_RE = re.compile(r"[^\W_]")
_LONE_LETTER_RE = re.compile(r"^(?:[A-Za-z]\s+)+(?=[-\d$.(\\])")  # "a 5", "I 3": an article, not a variable
_TRAILING_LETTER_RE = re.compile(r"(?<=[$€£¥₹%])\s+[A-Za-z]$")  # "2,74 $ a": a word after a price
_SENTENCE_RE = re.compile(
    r"(?<![\\\w])[^\W\d_]{2,}\s+[^\W\d_]{2,}|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\u0e00-\u0e7f]"
)
_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox)\s*\{([^{}]*)\}")
_EQ_SPLIT_RE = re.compile(r"(?<![<>!:=\\])=(?!=)")
_LATEX_CMD_RE = re.compile(r"\\[A-Za-z]+")
_LATEX_ENV_RE = re.compile(r"\\(?:begin|end)\s*\{[A-Za-z*]+\}")
_DOLLAR_RE = re.compile(r"(?<!\\)\$")
_LETTER_RE = re.compile(r"[A-Za-z]")
_WORDS_RE = re.compile(r"[^\W\d_]{2,}")
_LONE_WORD_RE = re.compile(r"[\W_]*[^\W\d_]+[\W_]*")
_NONSPACE_RE = re.compile(r"\S")


@dataclass(frozen=True)
class _Env:
    start: int  # first delimiter character
    end: int  # just past the closing delimiter
    content: str


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    text: str
    env: bool


class _Doc:
    """An answer section with its math environments and sentence ends, each found once.

    Every step is linear in the text's length (up to a log factor): each environment opener looks
    up its closer by bisection, a statement's math span is looked for within ``ANCHOR_WINDOW``
    characters of its anchor.
    """

    def __init__(self, s: str):
        self.s = s
        self.envs = self._math_envs()
        self.env_starts = [e.start for e in self.envs]
        ends = [m.start() for m in _SENT_END_RE.finditer(s)]
        self.ends = [i for i in ends if not self.in_env(i)] if self.envs else ends

    def _math_envs(self) -> list[_Env]:
        s = self.s
        toks = [(m.start(), m.group()) for m in _DELIM_RE.finditer(s) if m.group() != "\\$"]
        pos_of: dict[str, list[int]] = {}
        for i, (_, t) in enumerate(toks):
            pos_of.setdefault(t, []).append(i)
        newlines = [m.start() for m in re.finditer("\n", s)]
        closer = {"$$": "$$", "$": "$", "\\[": "\\]", "\\(": "\\)"}
        envs: list[_Env] = []
        i = 0
        while i < len(toks):
            p, t = toks[i]
            i += 1
            if t not in closer or (t == "$" and p > 0 and s[p - 1].isdigit()):
                continue
            idxs = pos_of.get(closer[t], [])
            k = bisect.bisect_right(idxs, i - 1)
            if k == len(idxs):
                continue
            j = idxs[k]
            lo, hi = p + len(t), toks[j][0]
            if t in ("$", "\\(") and bisect.bisect_left(newlines, lo) < bisect.bisect_left(newlines, hi):
                continue  # inline math stays on one line
            if _NONSPACE_RE.search(s, lo, hi) is None:
                continue
            if t == "$" and _is_sentence(s[lo:hi]):
                continue  # "$10,455. Final Answer: ... is $": a currency sign, not inline math
            envs.append(_Env(p, hi + len(closer[t]), s[lo:hi]))
            i = j + 1
        return envs

    def in_env(self, i: int) -> bool:
        k = bisect.bisect_right(self.env_starts, i) - 1
        return k >= 0 and self.envs[k].end > i

    def sentence_end(self, i: int) -> int:
        k = bisect.bisect_left(self.ends, i)
        return self.ends[k] if k < len(self.ends) else len(self.s)

    def spans(self, lo: int, hi: int, starts_before: int | None = None) -> Iterator[_Span]:
        """Math spans of ``s[lo:hi]`` left to right: environments inside it and runs between them,
        each whole; with ``starts_before``, only those that start before it (the scan stops there,
        so a statement's window costs its own length, not the rest of the sentence's)."""
        s = self.s
        limit = hi if starts_before is None else starts_before
        cur = lo
        k = bisect.bisect_left(self.env_starts, lo)
        while cur < hi:
            env = self.envs[k] if k < len(self.envs) and self.envs[k].start < hi else None
            stop = env.start if env is not None else hi
            for m in _RUN_RE.finditer(s, cur, stop):
                if m.start() >= limit:
                    return
                if _DIGIT_RE.search(m.group()):
                    yield _Span(m.start(), m.end(), m.group(), False)
            if env is None or env.start >= limit:
                return
            if env.end <= hi:
                yield _Span(env.start, env.end, env.content, True)
            cur = env.end
            k += 1

    def statement_answer(self, at: int, said: bool) -> str | None:
        """X of an answer statement whose anchor ends at ``at`` (module docstring, step 3);
        ``said``: the anchor ends in "is" or a colon.

        X is never cut short: an X longer than ``_MAX_X`` is not tried as a bare answer (it would
        be over the grader's length limit anyway) but its first math span is read whole -- cutting
        "$3+1+1+…+1$" at 300 characters left "$3+1+…" for the grader, read as 3."""
        s = self.s
        stop = self.sentence_end(at)
        lead = _LEAD_RE.match(s, at, stop)
        x0 = lead.end() if lead else at
        if stop - x0 <= _MAX_X:
            rest = s[x0:stop].strip()
            if rest and not _is_sentence(rest) and _balanced(rest):
                bare = _one_env_content(rest.strip("*")).rstrip(".,;:*").strip()
                # a word alone is an answer only after "is" or a colon ("The answer is Evelyn"),
                # not after the bare noun ("no boxed answer here")
                said = said or (lead is not None and _SAID_RE.search(lead.group()) is not None)
                if _ALNUM_RE.search(bare) and (said or MATHISH_RE.search(rest)):
                    return _chain_value(bare)
        cut = _CLAUSE_BREAK_RE.search(s, at, at + ANCHOR_WINDOW)
        for span in self.spans(at, stop, cut.start() if cut else at + ANCHOR_WINDOW):
            return _span_answer(span)
        return None

    def final_sentence_answer(self) -> str | None:
        """The last math span of the last sentence that is not a closing remark (step 4)."""
        bounds = [-1, *self.ends, len(self.s)]
        for k in range(len(bounds) - 1, 0, -1):
            a, b = bounds[k - 1] + 1, bounds[k]
            sentence = self.s[a:b]
            if not sentence.strip() or _SIGN_OFF_RE.match(sentence):
                continue
            last = None
            for last in self.spans(a, b):  # noqa: B007 (the loop keeps the last span)
                pass
            return None if last is None else _span_answer(last)
        return None


def _balanced(s: str) -> bool:
    """Every bracket closed, in order (any opener pairs with any closer: ``[0, 1)`` is balanced)."""
    depth = 0
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _trim_run(s: str) -> str:
    """A run without the spaces, markdown ``**``, dangling operators and unmatched brackets at
    its ends (one pass: a run of 50,000 ``(`` costs no more than its length)."""
    s = _TRAILING_LETTER_RE.sub("", _LONE_LETTER_RE.sub("", s.strip(" \t*=,;")))
    while s and s[-1] in "+-*/^=<>×÷·−±,;(":
        s = s[:-1].rstrip()
    stack: list[int] = []
    unmatched: set[int] = set()
    for i, c in enumerate(s):
        if c in "([{":
            stack.append(i)
        elif c in ")]}":
            if stack:
                stack.pop()
            else:
                unmatched.add(i)
    unmatched.update(stack)
    lo, hi = 0, len(s)
    while lo < hi and (lo in unmatched or s[lo].isspace()):
        lo += 1
    while hi > lo and (hi - 1 in unmatched or s[hi - 1].isspace()):
        hi -= 1
    return s[lo:hi]


def _is_sentence(s: str) -> bool:
    """Two words in a row (not LaTeX commands; ``\\text{}`` contents unwrapped) or a script
    written without spaces (CJK, Thai): a sentence, not an answer."""
    return bool(_SENTENCE_RE.search(_TEXT_CMD_RE.sub(r" \1 ", s)))


def _chain_value(s: str) -> str:
    """``25 - 14 = 11`` -> ``11``: a chain of equalities whose sides are all numeric (no variable
    outside LaTeX command names) reads as its last side; an equation (``x = 3``, ``7 = 11a + c``)
    is unchanged."""
    if "=" not in s:
        return s
    inner = s.strip()
    if len(inner) > 2 and inner[0] in "([" and inner[-1] in ")]" and _balanced(inner[1:-1]):
        inner = inner[1:-1].strip()  # "(35 + 70 = 105)"
    parts = _EQ_SPLIT_RE.split(inner)
    if len(parts) < 2 or any(_LETTER_RE.search(_LATEX_CMD_RE.sub("", p)) for p in parts):
        return s
    return parts[-1].strip()


def _span_answer(span: _Span) -> str | None:
    """The answer a math span states, or None (a sentence, or nothing left)."""
    text = span.text.strip() if span.env else _trim_run(span.text)
    if not text or _is_sentence(text):
        return None
    text = _chain_value(text).strip().rstrip(".,;:").strip()
    return text or None


def _one_env_content(s: str) -> str:
    """The content of ``s`` when ``s`` is exactly one math environment (``$5$`` -> ``5``; not
    ``$1$ and $2$``), else ``s`` stripped."""
    s = s.strip()
    for a, b in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        n = len(_DOLLAR_RE.findall(s)) if a[0] == "$" else s.count(a)
        if len(s) > len(a) + len(b) and s.startswith(a) and s.endswith(b) and n == (2 * len(a) if a == b else 1):
            return s[len(a) : len(s) - len(b)].strip()
    return s


def answer_section(text: str) -> str | None:
    """The part of an output that states its answer: up to the first chat-template token, after
    the last ``</think>``; None when a ``<think>`` is never closed (the reasoning did not finish)."""
    m = _CHAT_TOKEN_RE.search(text)
    if m is not None:
        text = text[: m.start()]
    close = text.rfind(_THINK_CLOSE)
    if close >= 0:
        return text[close + len(_THINK_CLOSE) :]
    if _THINK_OPEN in text:
        return None
    return text


def read_unboxed(text: str) -> str | None:
    """Final answer of an output without a box: answer statements, then the final sentence
    (module docstring, steps 2-5)."""
    s = answer_section(text)
    if s is None or not s.strip():
        return None
    doc = _Doc(s)
    for kind, said in _anchor_kinds(s):
        found = [m for m in kind.finditer(s) if not doc.in_env(m.start())]
        for m in reversed(found):
            ans = doc.statement_answer(m.end(), said)
            if ans is not None:
                return ans
    return doc.final_sentence_answer()


_BARE_WORDS = frozenset(UNIT_WORDS) | frozenset(PLAIN_FUNCTIONS) | {"and", "or", "pi"}
_FACTORIAL_RE = re.compile(r"(?<=[\d)}])!")  # "1/2004!": a factorial, not the end of a sentence


def is_bare(s: str) -> bool:
    """True when ``s`` reads as a bare answer rather than a sentence: one math environment, or text
    whose words (outside math, LaTeX commands and ``\\text{}``) are at most units, "and" / "or",
    or one word standing alone (``Evelyn``), with no answer word and no sentence end inside."""
    if _one_env_content(s) != s:
        return True
    if _WORD_RE.search(s) or _SENT_END_RE.search(_FACTORIAL_RE.sub("", s.rstrip(". "))):
        return False
    doc = _Doc(s)
    rest = "".join(s[a:b] for a, b in zip([0, *(e.end for e in doc.envs)], [*(e.start for e in doc.envs), len(s)]))
    rest = _LATEX_CMD_RE.sub(" ", _LATEX_ENV_RE.sub(" ", rest))
    words = [w for w in _WORDS_RE.findall(rest) if w.lower() not in _BARE_WORDS]
    return not words or (len(words) == 1 and _LONE_WORD_RE.fullmatch(rest) is not None)
