"""Prompts as configuration: every role's system text, user template and example turns.

A run's ``prompts`` section (``RecipeConfig.prompts``) holds one entry per role — solver,
questioner (D²Evo), challenger (DiagEvo / R-Zero), judge (D²Evo's label check), diagnoser
(DiagEvo's ``D_ext``) and confirm (the memory's duplicate check) — each settable from YAML or
``key=value`` (``prompts.solver.system="..."``). The defaults are the papers' wording (R-Zero's
code for the solver and the challenger, D²Evo's anchor prompt for the questioner, DiagEvo's
diagnosis request); ``ChatPrompter`` renders them for real models.

Templates: ``{name}`` is a placeholder, substituted literally (``fill_template``); ``{{name}}``
is a literal ``{name}``. Each role states which placeholders its user template needs and which it
may use; a template that lacks a needed one or names one that does not exist fails at load,
naming the field. System texts and examples are literal text.

Example turns: worked examples shown to the model before the real request. With a chat template
they are earlier conversation turns (user, assistant, user, assistant, ..., then the request),
which is what makes a small instruct model copy the answer format; without one they are
``Question: ...`` / ``Answer: ...`` blocks before the request (a base model continues the
pattern). Measured on SmolLM2-135M-Instruct, two-digit arithmetic: the solver system prompt alone
boxes 0 % of answers; with two example turns ~98 %; the same examples pasted into the user
message do not work (docs/real-models.md, "A real model on a CPU").
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, model_validator

from coevolve.schema import Strict

SOLVER_SYSTEM = "Please reason step by step inside <think> </think> tags, then put your final answer within \\boxed{}."

QUESTIONER_SYSTEM = "You are an expert competition-math problem setter."

QUESTIONER_USER = (
    "Here is a reference problem, its answer, and its measured difficulty for the current solver "
    "(0 = always solved, 100 = never solved).\n\n"
    "Reference problem:\n{question}\n\n"
    "Reference answer: {answer}\n"
    "Difficulty: {difficulty}/100\n\n"
    "Write ONE new problem of the same difficulty. It must be different from the reference problem, "
    "self-contained, and have a single verifiable final answer. "
    "Output the new problem inside <question></question> tags and nothing else."
)

CHALLENGER_SYSTEM = (
    "You are an expert competition-math problem setter.\n"
    "FIRST, in your private scratch-pad, think step-by-step to design a brand-new, non-trivial problem. "
    "The problem could come from any field of mathematics, including but not limited to algebra, geometry, "
    "number theory, combinatorics, prealgebra, probability, statistics, and calculus. "
    "Aim for a difficulty such that fewer than 30 % of advanced high-school students could solve it. "
    "Avoid re-using textbook cliches or famous contest problems.\n"
    "THEN, without revealing any of your private thoughts, output **exactly** the following two blocks:\n\n"
    "<question>\n{The full problem statement on one or more lines}\n</question>\n\n"
    "\\boxed{final_answer}\n\n"
    "Do NOT output anything else - no explanations, no extra markup."
)

CHALLENGER_FREE = (
    "Generate one new, challenging reasoning question now. Remember to format the output exactly as instructed."
)

CHALLENGER_TARGETED = (
    "Solvers often fail because of the following error:\n{cause}\n\n"
    "Generate one new, challenging reasoning question whose correct solution requires avoiding exactly "
    "this error. Remember to format the output exactly as instructed."
)

CHALLENGER_STITCHED = (
    "Solvers often fail because of the following two related errors:\n(1) {cause1}\n(2) {cause2}\n\n"
    "Generate one new, challenging compound question whose correct solution requires avoiding both "
    "errors in the same solution. Remember to format the output exactly as instructed."
)

JUDGE_USER = (
    "Question: {question}\nProposed final answer: {answer}\n"
    "Is {answer} the correct final answer to the question above? Reply yes or no."
)

DIAGNOSER_USER = """You compare two solutions of the same problem to find why one failed.
Problem: {question}
Reference answer (majority vote): {label}
Failed solution:
{bad}
Successful solution:
{good}
Find the earliest step where the failed solution departs from the successful one and state the underlying error as a transferable cause: a general error pattern without any numbers or wording from this problem, plus the short name of the skill it belongs to.
Reply with JSON only: {"divergence_step": <step index, 0-based>, "cause": "<one sentence>", "skill": "<skill name>"}"""

CONFIRM_USER = "Do these two descriptions name the same error?\nA: {a}\nB: {b}\nAnswer yes or no."

_PLACEHOLDER_RE = re.compile(r"\{\{\w+\}\}|\{(\w+)\}")


def placeholders(template: str) -> set[str]:
    """The ``{name}`` placeholders of ``template`` (``{{name}}`` is literal text, not one).

    >>> sorted(placeholders("{question} = {{answer}}"))
    ['question']
    """
    return {m.group(1) for m in _PLACEHOLDER_RE.finditer(template) if m.group(1)}


def check_template(where: str, template: str, required: frozenset[str], allowed: frozenset[str]) -> None:
    """Raise ``ValueError`` (a config error naming ``where``) when ``template`` lacks a required
    placeholder or names one the role does not provide."""
    found = placeholders(template)
    missing, unknown = sorted(required - found), sorted(found - allowed)
    if missing or unknown:
        parts = ([f"lacks {', '.join('{' + m + '}' for m in missing)}"] if missing else []) + (
            [f"names {', '.join('{' + u + '}' for u in unknown)}, which this role does not provide"] if unknown else []
        )
        fill = ", ".join("{" + a + "}" for a in sorted(allowed)) or "none"
        raise ValueError(
            f"{where}: the template {' and '.join(parts)} (placeholders here: {fill}; "
            "write {{name}} for a literal {name})"
        )


class Example(Strict):
    """One worked example: a user message and the assistant's reply, shown before the request."""

    user: str = Field(..., min_length=1, description="The example's user message (literal text).")
    assistant: str = Field(..., min_length=1, description="The reply the model should imitate (literal text).")


class RolePrompt(Strict):
    """A role's prompt: system text, user template(s), example turns.

    ``TEMPLATES`` maps each template field to (required, allowed) placeholders."""

    TEMPLATES: ClassVar[dict[str, tuple[frozenset[str], frozenset[str]]]] = {}

    system: str | None = Field(None, description="System text (literal); None = no system message.")
    examples: list[Example] = Field(
        default_factory=list,
        description="Worked examples shown before the request: "
        "earlier chat turns with a chat template, Question/Answer blocks without one.",
    )

    @model_validator(mode="after")
    def _templates(self) -> RolePrompt:
        for name, (required, allowed) in self.TEMPLATES.items():
            check_template(name, getattr(self, name), required, allowed)
        return self


def _fields(*names: str) -> frozenset[str]:
    return frozenset(names)


class SolverPrompt(RolePrompt):
    """The solver's prompt, the same in training and evaluation (multiple-choice items put the
    lettered options into ``{question}``)."""

    TEMPLATES = {"user": (_fields("question"), _fields("question"))}
    system: str | None = Field(
        SOLVER_SYSTEM,
        description="System text (R-Zero's solver prompt plus the <think> request the format reward checks).",
    )
    user: str = Field("{question}", description="User template; {question}.")


class QuestionerPrompt(RolePrompt):
    """D²Evo's questioner: an anchor (question, answer, measured difficulty) -> one new question."""

    TEMPLATES = {"user": (_fields("question", "difficulty"), _fields("question", "answer", "difficulty"))}
    system: str | None = Field(QUESTIONER_SYSTEM, description="System text.")
    user: str = Field(
        QUESTIONER_USER,
        description="User template; {question} and {difficulty} (0-100, rounded) "
        "needed, {answer} optional (D²Evo prompts with the anchor, its answer and its difficulty).",
    )


class ChallengerPrompt(RolePrompt):
    """DiagEvo's / R-Zero's challenger: free exploration, one targeted cause, or two stitched."""

    TEMPLATES = {
        "free": (_fields(), _fields()),
        "targeted": (_fields("cause"), _fields("cause")),
        "stitched": (_fields("cause1", "cause2"), _fields("cause1", "cause2")),
    }
    system: str | None = Field(CHALLENGER_SYSTEM, description="System text (R-Zero's problem-setter prompt).")
    free: str = Field(CHALLENGER_FREE, description="User text of free exploration (no placeholders).")
    targeted: str = Field(CHALLENGER_TARGETED, description="User template targeted at one error cause; {cause}.")
    stitched: str = Field(
        CHALLENGER_STITCHED, description="User template of a stitched compound question; {cause1} {cause2}."
    )


class JudgePrompt(RolePrompt):
    """D²Evo's optional label check: is this the correct final answer? (yes / no)."""

    TEMPLATES = {"user": (_fields("question", "answer"), _fields("question", "answer"))}
    user: str = Field(JUDGE_USER, description="User template; {question} {answer}.")


class DiagnoserPrompt(RolePrompt):
    """DiagEvo's diagnosis request D_ext(x, ŷ, r⁻, r⁺) -> a transferable cause (JSON)."""

    TEMPLATES = {"user": (_fields("question", "bad", "good"), _fields("question", "label", "bad", "good"))}
    user: str = Field(DIAGNOSER_USER, description="User template; {question} {bad} {good} needed, {label} optional.")


class ConfirmPrompt(RolePrompt):
    """The memory's duplicate check: do two cause texts name the same error? (yes / no)."""

    TEMPLATES = {"user": (_fields("a", "b"), _fields("a", "b"))}
    user: str = Field(CONFIRM_USER, description="User template; {a} {b}.")


class PromptsConfig(Strict):
    """Every role's prompt for real models (the toy world's solver / writer prompts are fixed by
    its pretraining; its judge / diagnoser models, when real, use these)."""

    solver: SolverPrompt = Field(default_factory=SolverPrompt, description="Solver (training and evaluation).")
    questioner: QuestionerPrompt = Field(default_factory=QuestionerPrompt, description="D²Evo questioner.")
    challenger: ChallengerPrompt = Field(default_factory=ChallengerPrompt, description="DiagEvo / R-Zero challenger.")
    judge: JudgePrompt = Field(default_factory=JudgePrompt, description="D²Evo label judge (buffer.verifier=judge).")
    diagnoser: DiagnoserPrompt = Field(default_factory=DiagnoserPrompt, description="DiagEvo diagnosis model.")
    confirm: ConfirmPrompt = Field(default_factory=ConfirmPrompt, description="Duplicate-cause confirmation.")

    WRITER_ROLES: ClassVar[tuple[str, ...]] = ("solver", "questioner", "challenger")
    """Roles the policy itself plays (fixed in the toy world); the others are asked of judge /
    diagnosis models."""


__all__ = [
    "ChallengerPrompt",
    "ConfirmPrompt",
    "DiagnoserPrompt",
    "Example",
    "JudgePrompt",
    "PromptsConfig",
    "QuestionerPrompt",
    "RolePrompt",
    "SolverPrompt",
    "check_template",
    "placeholders",
]
