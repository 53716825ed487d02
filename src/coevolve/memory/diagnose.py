"""Diagnosers: ``e_new = D_ext(x, ŷ, r⁻, r⁺)`` (DiagEvo stage 4).

Given a question, its pseudo-label, one failed response r⁻ and one successful response r⁺, a
diagnoser finds the earliest step where the two traces diverge and states a *transferable*
cause (no numbers or surface form of the question) plus the skill it belongs to.

* ``TraceDiagnoser`` — the toy world's exact rule-based diagnosis over step traces
  (``coevolve.world.toy.explain_divergence``); the default there because a tiny model cannot write
  English.
* ``LLMDiagnoser`` — the paper's prompt-based diagnosis on any ``Sampler`` (the solver itself or
  a separate model). Model output is untrusted: anything that is not a valid JSON object with
  the expected fields becomes ``None`` and is counted as garbage, never an exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from coevolve.types import Sampler, SamplingParams


@dataclass
class Diagnosis:
    """Earliest divergent step (0-based index into the steps of r⁻ / r⁺ as the diagnoser counts
    them), the transferable cause text and its skill. ``source_id`` is the world's own cause id
    when the diagnoser knows it (toy traces), else None."""

    divergence_step: int
    cause: str
    skill: str
    source_id: str | None = None


@dataclass
class DiagnoserStats:
    """Calls made, valid diagnoses, garbage outputs (unparseable / invalid) and 'no divergence'
    answers (a trace diagnoser that finds the two traces agree)."""

    calls: int = 0
    ok: int = 0
    garbage: int = 0
    none: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"calls": self.calls, "ok": self.ok, "garbage": self.garbage, "none": self.none}


@runtime_checkable
class Diagnoser(Protocol):
    stats: DiagnoserStats

    def diagnose(self, question: str, label: str, bad: str, good: str) -> Diagnosis | None: ...

    def diagnose_batch(self, requests: Sequence[tuple[str, str, str, str]]) -> list[Diagnosis | None]: ...


# ------------------------------------------------------------------------------------------
_NUM_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")


def strip_surface(cause: str, question: str, extra: Sequence[str] = ()) -> str:
    """Remove the question's surface from a cause so it transfers to other questions: the
    question text itself becomes "the question", every number that occurs in the question (or in
    ``extra``, e.g. the label) becomes "a number"; whitespace is collapsed.

    >>> strip_surface("forgot the carry when adding 57 and 68", "57+68=")
    'forgot the carry when adding a number and a number'
    """
    out = cause
    q = question.strip()
    if len(q) >= 4 and q in out:
        out = out.replace(q, "the question")
    nums = set(_NUM_RE.findall(question))
    for e in extra:
        nums.update(_NUM_RE.findall(e or ""))
    for num in sorted(nums, key=len, reverse=True):
        out = re.sub(rf"(?<![\w.]){re.escape(num)}(?![\w])", "a number", out)
    return re.sub(r"\s+", " ", out).strip()


def clip_middle(text: str, max_chars: int) -> str:
    """``text`` when it has at most ``max_chars`` characters, else its start and end with a marker
    naming how much was cut. Why: a diagnosis prompt embeds model outputs of any length; the start
    holds the setup and the first steps, the end the final answer, and the prompt must stay inside
    the diagnosis model's context.

    >>> clip_middle("abcdefghij" * 30, 200)[:12], len(clip_middle("x" * 10_000, 200)) <= 200
    ('abcdefghijab', True)
    """
    if len(text) <= max_chars:
        return text
    marker = f"\n[... {len(text) - max_chars} characters cut ...]\n"
    keep = max(0, max_chars - len(marker) - 8)  # the marker's own count may grow by a few digits
    head = keep // 2
    cut = len(text) - keep
    marker = f"\n[... {cut} characters cut ...]\n"
    return text[:head] + marker + text[len(text) - (keep - head) :]


_JSON_STARTS = 32


def extract_json_object(text: str) -> dict[str, Any] | None:
    """First balanced ``{...}`` block of ``text`` parsed as a JSON object (code fences and prose
    around it tolerated), else None.

    At most ``_JSON_STARTS`` opening braces are tried as the start: each try scans forward, so
    30,000 unclosed ``{`` took minutes; a diagnosis is one of the first objects of its reply."""
    text = re.sub(r"```(?:json)?", "", text)
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _JSON_STARTS:
        tries += 1
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start : i + 1])
                    except (json.JSONDecodeError, RecursionError):
                        break
                    return obj if isinstance(obj, dict) else None
        start = text.find("{", start + 1)
    return None


def parse_diagnosis(text: str, question: str, label: str = "", max_cause_chars: int = 300) -> Diagnosis | None:
    """Validate a model's JSON diagnosis: ``divergence_step`` a non-negative integer (an
    integral float or numeric string is accepted), ``cause`` a non-empty string that still has
    at least 3 letters of its own after ``strip_surface``, ``skill`` a string (missing -> "general")."""
    obj = extract_json_object(text)
    if obj is None:
        return None
    step = obj.get("divergence_step")
    try:
        if isinstance(step, bool):
            return None
        step_f = float(step)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if step_f != int(step_f) or step_f < 0:
        return None
    cause, skill = obj.get("cause"), obj.get("skill", "general")
    if not isinstance(cause, str) or not isinstance(skill, str):
        return None
    cause = strip_surface(cause, question, extra=(label,))[:max_cause_chars]
    skill = strip_surface(skill, question, extra=(label,))[:100] or "general"
    content = cause.replace("a number", "").replace("the question", "")
    if sum(ch.isalpha() for ch in content) < 3:  # nothing transferable left
        return None
    return Diagnosis(divergence_step=int(step_f), cause=cause, skill=skill)


PromptFn = Callable[[str, str, str, str], str]
"""``prompt(question, label, bad, good) -> model input`` (the world's ``Prompter.diagnoser``)."""


@dataclass
class LLMDiagnoser:
    """Prompt-based diagnoser on any ``Sampler`` (one completion per request, batched).

    ``prompt`` builds the model input from a request (the world's diagnosis prompt, through the
    model's chat template where it has one). ``last_outputs`` keeps the raw texts of the last
    batch for auditing.
    """

    sampler: Sampler
    prompt: PromptFn
    params: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.0, max_new_tokens=256))
    stats: DiagnoserStats = field(default_factory=DiagnoserStats)
    last_outputs: list[str] = field(default_factory=list)

    def diagnose_batch(self, requests: Sequence[tuple[str, str, str, str]]) -> list[Diagnosis | None]:
        """Diagnose ``(question, label, bad, good)`` requests in one sampler call."""
        if not requests:
            return []
        prompts = [self.prompt(*r) for r in requests]
        outs = self.sampler.sample(prompts, 1, self.params)
        self.last_outputs = [o[0].text if o else "" for o in outs]
        result: list[Diagnosis | None] = []
        for (question, label, _, _), text in zip(requests, self.last_outputs):
            self.stats.calls += 1
            d = parse_diagnosis(text, question, label)
            if d is None:
                self.stats.garbage += 1
            else:
                self.stats.ok += 1
            result.append(d)
        return result

    def diagnose(self, question: str, label: str, bad: str, good: str) -> Diagnosis | None:
        return self.diagnose_batch([(question, label, bad, good)])[0]


@dataclass
class TraceDiagnoser:
    """Diagnosis from step traces (the toy world's ``explain_divergence``). Its causes are
    already transferable (a fixed catalogue), and carry the world's cause id as ``source_id``."""

    explain: Callable[[str, str, str], Any]
    stats: DiagnoserStats = field(default_factory=DiagnoserStats)

    def diagnose(self, question: str, label: str, bad: str, good: str) -> Diagnosis | None:
        self.stats.calls += 1
        div = self.explain(question, bad, good)
        if div is None:
            self.stats.none += 1
            return None
        cause = str(div.cause).strip()  # catalogue text: transferable by construction
        if not cause:
            self.stats.garbage += 1
            return None
        self.stats.ok += 1
        return Diagnosis(
            divergence_step=int(div.step),
            cause=cause,
            skill=str(div.skill),
            source_id=None if getattr(div, "cause_id", None) is None else str(div.cause_id),
        )

    def diagnose_batch(self, requests: Sequence[tuple[str, str, str, str]]) -> list[Diagnosis | None]:
        return [self.diagnose(*r) for r in requests]
