"""The prompts of both worlds: the papers' ChatPrompter and the toy world's ToyPrompter."""

from __future__ import annotations

import doctest

import pytest

import coevolve.prompts as P
import coevolve.prompts.chat as CP
from coevolve.errors import CoevolveError, ConfigError
from coevolve.prompts import Prompter
from coevolve.prompts.chat import ChatPrompter
from coevolve.toy.prompts import ToyPrompter


def test_doctests() -> None:
    assert doctest.testmod(CP).failed == 0 and doctest.testmod(P).failed == 0


def test_is_prompter_and_prompts_follow_papers() -> None:
    p = ChatPrompter()
    assert isinstance(p, Prompter)
    s = p.solver("What is 2+3?")
    assert "<think>" in s and "\\boxed{}" in s and "What is 2+3?" in s
    q = p.questioner("What is 2+3?", "5", 37.5)
    assert "What is 2+3?" in q and "Reference answer: 5" in q and "38/100" in q
    assert "ONE new problem of the same difficulty" in q and "<question></question>" in q
    free = p.challenger([])
    assert "expert competition-math problem setter" in free and "<question>" in free
    tgt = p.challenger(["forgets to carry"])
    assert "forgets to carry" in tgt
    st = p.challenger(["forgets to carry", "drops a sign"])
    assert "forgets to carry" in st and "drops a sign" in st and "compound" in st
    with pytest.raises(CoevolveError):
        p.challenger(["a", "b", "c"])


def test_training_and_evaluation_share_the_solver_prompt() -> None:
    """A multiple-choice item is the solver prompt with lettered options: the same instructions
    the model was trained with, plus the letter format."""
    p = ChatPrompter()
    plain, mc = p.solver("Which is prime?"), p.choice("Which is prime?", ["4", "7"])
    assert plain.split("Which is prime?")[0] == mc.split("Which is prime?")[0]  # same system text
    assert "A. 4\nB. 7" in mc and "letter" in mc
    with pytest.raises(CoevolveError):
        p.choice("q", ["only one"])


def test_judge_diagnoser_confirm_prompts_in_both_worlds() -> None:
    for p in (ChatPrompter(), ToyPrompter()):
        assert isinstance(p, Prompter)
        j = p.judge("2+2", "4")
        assert "2+2" in j and "4" in j and "yes or no" in j
        d = p.diagnoser("2+2", "4", "BADTRACE", "GOODTRACE")
        assert all(x in d for x in ("2+2", "4", "BADTRACE", "GOODTRACE"))
        custom = p.diagnoser("q", "l", "b", "g", template='{"x": "{question}|{bad}"}')
        assert '{"x": "q|b"}' in custom  # JSON braces survive, placeholders are filled literally
        c = p.confirm("cause one", "cause two")
        assert "cause one" in c and "cause two" in c


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<question>What is 2+3?</question>", "What is 2+3?"),
        ("thinking...\n<question>\n  Find x.\n</question>\n\\boxed{4}", "Find x."),
        ("<question></question>", None),
        ("<question>   </question>", None),
        ("<question>a</question> <question>b</question>", None),
        ("<question>a", None),
        ("a</question>", None),
        ("</question>a<question>", None),
        ("<question>a<question>b</question>", None),
        ("no tags at all", None),
    ],
)
def test_parse_question(text: str, expected: str | None) -> None:
    assert ChatPrompter().parse_question(text) == expected


def test_chat_template_path() -> None:
    class Tok:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"

    p = ChatPrompter(Tok(), use_chat_template=True)
    out = p.solver("Q?")
    assert out.startswith("system:Please reason step by step") and out.endswith("user:Q?|assistant:")
    assert p.judge("q", "a").startswith("user:")  # no system turn for the yes/no questions
    with pytest.raises(ConfigError):
        ChatPrompter(None, use_chat_template=True)
