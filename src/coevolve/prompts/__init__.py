"""How each role is asked, and how a writer's question is read back: one ``Prompter`` per world.

Every prompt a run sends is built here: the solver prompt (training *and* evaluation use the same
one), multiple-choice items, the D²Evo questioner, the DiagEvo challenger, the label judge, the
diagnoser and the duplicate-cause confirmation. Two worlds implement it:

* ``coevolve.world.toy.prompts.ToyPrompter`` — the toy world's short formats (its base model was
  pretrained on exactly these strings);
* ``coevolve.prompts.chat.ChatPrompter`` — the papers' prompts for real models, through the
  tokenizer's chat template when ``model.chat_template`` is set, plain text otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from coevolve.types import Stop

StopKind = Literal["answer", "question"]
"""``question``: a writer's output (ends at ``</question>``); ``answer``: everything else."""


@runtime_checkable
class Prompter(Protocol):
    def solver(self, question: str) -> str:
        """Prompt asking the solver to reason in <think> then answer in \\boxed{}."""
        ...

    def choice(self, question: str, choices: Sequence[str]) -> str:
        """A multiple-choice item: the solver prompt with lettered options, the letter boxed."""
        ...

    def questioner(self, question: str, answer: str, difficulty: float) -> str:
        """D²Evo questioner prompt: anchor question, its answer, measured difficulty (0-100)."""
        ...

    def challenger(self, causes: Sequence[str]) -> str:
        """DiagEvo challenger prompt: [] free exploration, [c] targeted, [c1, c2] stitched."""
        ...

    def parse_question(self, completion: str) -> str | None:
        """The question inside exactly one well-formed <question>...</question>, else None."""
        ...

    def judge(self, question: str, answer: str) -> str:
        """Ask whether ``answer`` is the correct final answer (label verifier); reply yes/no."""
        ...

    def diagnoser(self, question: str, label: str, bad: str, good: str) -> str:
        """DiagEvo diagnosis request: the failed and the successful solution of one question."""
        ...

    def confirm(self, a: str, b: str) -> str:
        """Ask whether two error-cause descriptions name the same error; reply yes/no."""
        ...

    def stop(self, kind: StopKind) -> Stop:
        """Where a completion of this kind ends besides EOS (end-of-turn tokens, stop strings)."""
        ...


_PLACEHOLDER_RE = re.compile(r"\{\{(\w+)\}\}|\{(\w+)\}")


def fill_template(template: str, **values: str) -> str:
    """Substitute ``{name}`` placeholders literally (no ``str.format``: templates contain JSON);
    ``{{name}}`` stands for a literal ``{name}``.

    One pass over the template: a value is never searched for placeholders, so a model-written
    question or solution containing ``{good}`` cannot pull other fields into itself.

    >>> fill_template('{"q": "{question}"}', question="2+2")
    '{"q": "2+2"}'
    >>> fill_template("{a}|{b}", a="{b}", b="x")
    '{b}|x'
    >>> fill_template("\\\\boxed{{answer}} {answer}", answer="4")
    '\\\\boxed{answer} 4'
    """

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return "{" + m.group(1) + "}"
        return values.get(m.group(2), m.group(0))

    return _PLACEHOLDER_RE.sub(sub, template)


__all__ = ["Prompter", "StopKind", "fill_template"]
