"""The toy world's prompts (solver, D²Evo questioner, DiagEvo challenger, judge, diagnoser).

Why one module: pretraining builds its examples with exactly these functions, so the base
model has seen every prompt the recipes will later send it. Prompts are short because the
tiny model's context is 256 characters and training cost grows with sequence length.

Formats (BOS is added by the tokenizer, EOS ends every completion):
- solver:      ``Q:37+58=\\nA:``  ->  ``<think>7+8=15 3+5+1=9</think>\\boxed{95}``
- questioner:  ``ANCHOR:37+58=95 D:60\\nNEW:``  ->  ``<question>41+29</question>``
- challenger:  ``NEW:`` (free) | ``FOCUS:<cause text>\\nNEW:`` |
               ``FOCUS:<c1>\\nFOCUS:<c2>\\nNEW:``  ->  ``<question>458+367</question>``
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from coevolve.errors import DataError
from coevolve.prompts import StopKind, fill_template
from coevolve.types import Stop
from coevolve.world.toy.problems import parse_toy_question

# Rough difficulty (100 - sampled accuracy %) of each level for the prototype base: the
# questioner's "D:" number during pretraining, so the number correlates with the anchor's level.
LEVEL_DIFFICULTY: dict[int, float] = {1: 30.0, 2: 60.0, 3: 65.0, 4: 93.0}

QUESTION_OPEN, QUESTION_CLOSE = "<question>", "</question>"
DIAGNOSER_TEMPLATE = "DIAG:{question}={label}\nBAD:{bad}\nGOOD:{good}\nJSON:"
"""Short diagnosis prompt (the toy model's context is 256 characters)."""
JUDGE_TEMPLATE = (
    "Question: {question}\nProposed final answer: {answer}\n"
    "Is {answer} the correct final answer to the question above? Reply yes or no.\nReply:"
)
CONFIRM_TEMPLATE = "Do these two descriptions name the same error?\nA: {a}\nB: {b}\nAnswer yes or no:"
_QBLOCK_RE = re.compile(re.escape(QUESTION_OPEN) + r"(.*?)" + re.escape(QUESTION_CLOSE), re.S)


def _bare(question: str) -> str:
    q = question.strip()
    return q[:-1] if q.endswith("=") else q


def solver_prompt(question: str) -> str:
    """``Q:<question>=\\nA:`` (the question may be given with or without a trailing ``=``)."""
    return f"Q:{_bare(question)}=\nA:"


def questioner_prompt(question: str, answer: str, difficulty: float) -> str:
    """``ANCHOR:<q>=<answer> D:<difficulty 0-100, rounded>\\nNEW:``."""
    if not 0.0 <= float(difficulty) <= 100.0:
        raise DataError(f"questioner difficulty={difficulty!r} must be in [0, 100]")
    return f"ANCHOR:{_bare(question)}={answer.strip()} D:{round(float(difficulty))}\nNEW:"


def challenger_prompt(causes: Sequence[str]) -> str:
    """One ``FOCUS:<cause text>`` line per cause, then ``NEW:`` (no causes = free writing)."""
    lines = []
    for c in causes:
        text = " ".join(str(c).split())  # one line per cause: newlines would break the format
        if not text:
            raise DataError("challenger cause text is empty")
        lines.append(f"FOCUS:{text}\n")
    return "".join(lines) + "NEW:"


def question_completion(question: str) -> str:
    """The questioner/challenger target text for ``question``."""
    return f"{QUESTION_OPEN}{_bare(question)}{QUESTION_CLOSE}"


def parse_question_block(completion: str, parse: Callable[[str], str | None] | None = None) -> str | None:
    """The canonical question when ``completion`` has exactly one ``<question>..</question>``
    block holding a valid problem (no other tags around it), else None. ``parse`` reads the
    block's text: the toy world's parser unless a world with the same formats gives its own."""
    if completion.count(QUESTION_OPEN) != 1 or completion.count(QUESTION_CLOSE) != 1:
        return None
    m = _QBLOCK_RE.search(completion)
    if m is None:
        return None
    return (parse or parse_toy_question)(m.group(1))


class CharPrompter:
    """:class:`coevolve.prompts.Prompter` of the worlds with the toy formats above (the toy world,
    the skill world): the same prompts, each world's own question parser (``parse``)."""

    world = "toy"
    parse: Callable[[str], str | None] = staticmethod(parse_toy_question)

    def solver(self, question: str) -> str:
        return solver_prompt(question)

    def choice(self, question: str, choices: Sequence[str]) -> str:
        raise DataError(f"the {self.world} world has no multiple-choice items")

    def judge(self, question: str, answer: str) -> str:
        return fill_template(JUDGE_TEMPLATE, question=question, answer=answer)

    def diagnoser(self, question: str, label: str, bad: str, good: str, template: str | None = None) -> str:
        return fill_template(template or DIAGNOSER_TEMPLATE, question=question, label=label, bad=bad, good=good)

    def confirm(self, a: str, b: str) -> str:
        return fill_template(CONFIRM_TEMPLATE, a=a, b=b)

    def stop(self, kind: StopKind) -> Stop:
        """Nothing but EOS: the toy and skill bases were pretrained to end every completion with it."""
        return Stop()

    def questioner(self, question: str, answer: str, difficulty: float) -> str:
        return questioner_prompt(question, answer, difficulty)

    def challenger(self, causes: Sequence[str]) -> str:
        return challenger_prompt(causes)

    def parse_question(self, completion: str) -> str | None:
        return parse_question_block(completion, type(self).parse)


class ToyPrompter(CharPrompter):
    """:class:`coevolve.prompts.Prompter` for the toy world (the formats above)."""
