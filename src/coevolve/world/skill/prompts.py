"""The skill world's prompts: the toy world's formats (the same short strings, the same
pretraining), with questions read back by the skill world's parser.

- solver:      ``Q:47+38~*3=\\nA:``  ->  ``<think>47+38=85 ~85=58 58*3=174</think>\\boxed{174}``
- questioner:  ``ANCHOR:47+38~*3=174 D:55\\nNEW:``  ->  ``<question>62+19~*4</question>``
- challenger:  ``NEW:`` | ``FOCUS:<cause text>\\nNEW:`` | ``FOCUS:<c1>\\nFOCUS:<c2>\\nNEW:``
"""

from __future__ import annotations

from coevolve.world.skill.problems import parse_question
from coevolve.world.toy.prompts import CharPrompter
from coevolve.world.toy.prompts import parse_question_block as _block


def parse_question_block(completion: str) -> str | None:
    """The canonical question when ``completion`` holds exactly one ``<question>..</question>``
    block with a valid skill-world question, else None."""
    return _block(completion, parse_question)


class SkillPrompter(CharPrompter):
    """:class:`coevolve.prompts.Prompter` of the skill world."""

    world = "skill"
    parse = staticmethod(parse_question)
