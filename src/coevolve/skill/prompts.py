"""The skill world's prompts: the toy world's formats (the same short strings, the same
pretraining), with questions read back by the skill world's parser.

- solver:      ``Q:47+38~*3=\\nA:``  ->  ``<think>47+38=85 ~85=58 58*3=174</think>\\boxed{174}``
- questioner:  ``ANCHOR:47+38~*3=174 D:55\\nNEW:``  ->  ``<question>62+19~*4</question>``
- challenger:  ``NEW:`` | ``FOCUS:<cause text>\\nNEW:`` | ``FOCUS:<c1>\\nFOCUS:<c2>\\nNEW:``
"""

from __future__ import annotations

import re
from typing import Sequence

from coevolve.errors import DataError
from coevolve.prompts import StopKind, fill_template
from coevolve.skill.world import parse_question
from coevolve.toy.prompts import (
    CONFIRM_TEMPLATE,
    DIAGNOSER_TEMPLATE,
    JUDGE_TEMPLATE,
    QUESTION_CLOSE,
    QUESTION_OPEN,
    challenger_prompt,
    questioner_prompt,
    solver_prompt,
)
from coevolve.types import Stop

_QBLOCK_RE = re.compile(re.escape(QUESTION_OPEN) + r"(.*?)" + re.escape(QUESTION_CLOSE), re.S)


def parse_question_block(completion: str) -> str | None:
    """The canonical question when ``completion`` holds exactly one ``<question>..</question>``
    block with a valid skill-world question, else None."""
    if completion.count(QUESTION_OPEN) != 1 or completion.count(QUESTION_CLOSE) != 1:
        return None
    m = _QBLOCK_RE.search(completion)
    return None if m is None else parse_question(m.group(1))


class SkillPrompter:
    """:class:`coevolve.prompts.Prompter` of the skill world."""

    def solver(self, question: str) -> str:
        return solver_prompt(question)

    def choice(self, question: str, choices: Sequence[str]) -> str:
        raise DataError("the skill world has no multiple-choice items")

    def judge(self, question: str, answer: str) -> str:
        return fill_template(JUDGE_TEMPLATE, question=question, answer=answer)

    def diagnoser(self, question: str, label: str, bad: str, good: str, template: str | None = None) -> str:
        return fill_template(template or DIAGNOSER_TEMPLATE, question=question, label=label, bad=bad, good=good)

    def confirm(self, a: str, b: str) -> str:
        return fill_template(CONFIRM_TEMPLATE, a=a, b=b)

    def stop(self, kind: StopKind) -> Stop:
        """EOS only: the skill base ends every completion with it."""
        return Stop()

    def questioner(self, question: str, answer: str, difficulty: float) -> str:
        return questioner_prompt(question, answer, difficulty)

    def challenger(self, causes: Sequence[str]) -> str:
        return challenger_prompt(causes)

    def parse_question(self, completion: str) -> str | None:
        return parse_question_block(completion)
