"""The arith world: natural-language arithmetic for real models, with an exact oracle."""

from __future__ import annotations

import doctest
import random

import pytest

import coevolve.world.arith as A
from coevolve.config import load_config
from coevolve.curriculum.buffer import normalize_question
from coevolve.errors import ConfigError
from coevolve.eval.benchmarks import load_tasks, resolve_benches
from coevolve.prompts.chat import ChatPrompter
from coevolve.world import make_world


def test_doctests() -> None:
    assert doctest.testmod(A).failed == 0


@pytest.mark.parametrize("question,answer", [
    ("What is 25 - 14?", "11"), ("What is 23 × 7?", "161"), ("What is 10 + 82 - 13?", "79"),
    ("What is 2 + 3 × 4?", "14"), ("Compute (2 + 3) * 4.", "20"), ("What is 84 ÷ 8?", "21/2"),
    ("What is 7 times 8?", "56"), ("What is 45 minus 17?", "28"), ("What is 6 x 4?", "24"),
    ("What is -5 + 3?", "-2"), ("What is 100 divided by 4?", "25"), ("  what is 3+4 ? ", "7"),
])
def test_oracle_reads_natural_language(question: str, answer: str) -> None:
    assert A.oracle(question) == answer


@pytest.mark.parametrize("question", [
    "What is 7?", "Name a prime number.", "Tom has 3 apples. What is 4 + 5?", "What is 3 + 4 and 5 + 6?",
    "What is 5 ÷ 0?", "What is 2.5 + 1?", "What is (3 + 4?", "", "What is one plus two?",
])
def test_oracle_refuses_what_it_cannot_read(question: str) -> None:
    assert A.oracle(question) is None


def test_every_generated_problem_is_answered_by_the_oracle() -> None:
    rng = random.Random(7)
    for level in A.LEVELS:
        for _ in range(200):
            t = A.make_problem(rng, level)
            assert A.oracle(t.question) == t.answer and t.features["level"] == level
            assert t.question.startswith("What is ") and t.question.endswith("?")
            assert int(t.answer) >= 0
    with pytest.raises(ConfigError):
        A.make_problem(rng, 5)


def test_heldout_is_fixed_balanced_and_never_drawn() -> None:
    h = A.heldout_tasks()
    assert len(h) == 500 and len({t.question for t in h}) == 500
    assert [sum(t.features["level"] == lv for t in h) for lv in A.LEVELS] == [125] * 4
    assert [t.question for t in h[:3]] == [t.question for t in A.heldout_tasks()[:3]]  # same every call
    assert h[0].question == "What is 8 + 3?" and h[-1].question == "What is 10 + 82 - 13?"  # pinned: the benchmark
    banned = frozenset(normalize_question(t.question) for t in h)
    drawn = A.sample_tasks(random.Random(0), 3000, banned=banned)
    assert not {normalize_question(t.question) for t in drawn} & banned
    fixed = A.labelled_set(64, (1, 2), seed=3, banned=banned)
    assert len({t.question for t in fixed}) == 64 and {t.features["level"] for t in fixed} == {1, 2}
    assert [t.question for t in fixed] == [t.question for t in A.labelled_set(64, (1, 2), seed=3, banned=banned)]


def test_arith_is_a_named_benchmark() -> None:
    (b,) = resolve_benches(["arith"])
    assert b.category == "arith" and b.kind == "math"
    assert [t.question for t in load_tasks(b, limit=5)] == [t.question for t in A.heldout_tasks()[:5]]


def _cfg(*over: str):
    return load_config("grpo", None, ["model.path=/models/any", "data.source=arith", *over])


def test_world_from_config(tmp_path) -> None:
    said: list[str] = []
    w = make_world(_cfg("data.levels=[2,3]", "eval.heldout_size=100"), None, said.append)
    assert isinstance(w, A.ArithWorld) and w.name == "arith" and w.knows_truth
    assert w.default_benches == ("arith",) and isinstance(w.prompter, ChatPrompter)
    tasks = w.draw(random.Random(0), 50)
    assert {t.features["level"] for t in tasks} == {2, 3} and not {normalize_question(t.question) for t in tasks} & w.excluded()
    assert len(w.bench_tasks("arith", None, None)) == 100 and w.bench_tasks("math500", None, None) is None
    assert w.oracle("What is 2 + 2?") == "4"
    fixed = make_world(_cfg("data.limit=16", "data.seed=1"), None, said.append)
    assert len(fixed.pool(random.Random(0), None)) == 16 and "fixed labelled set of 16" in said[-1]


@pytest.mark.parametrize("over,message", [
    (["data.levels=[0]"], "data.levels must be a non-empty list"),
    (["data.levels=[]"], "data.levels must be a non-empty list"),
])
def test_bad_levels(over: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(*over)


def test_arith_needs_a_real_model() -> None:
    with pytest.raises(ConfigError, match="data.source=arith asks questions in natural language for a real model"):
        load_config("grpo", None, ["data.source=arith"])
