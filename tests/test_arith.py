"""The arith world: natural-language arithmetic for real models, with an exact oracle."""

from __future__ import annotations

import doctest
import hashlib
import json
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


@pytest.mark.parametrize(
    "question,answer",
    [
        ("What is 25 - 14?", "11"),
        ("What is 23 × 7?", "161"),
        ("What is 10 + 82 - 13?", "79"),
        ("What is 2 + 3 × 4?", "14"),
        ("Compute (2 + 3) * 4.", "20"),
        ("What is 84 ÷ 8?", "21/2"),
        ("What is 7 times 8?", "56"),
        ("What is 45 minus 17?", "28"),
        ("What is 6 x 4?", "24"),
        ("What is -5 + 3?", "-2"),
        ("What is 100 divided by 4?", "25"),
        ("  what is 3+4 ? ", "7"),
    ],
)
def test_oracle_reads_natural_language(question: str, answer: str) -> None:
    assert A.oracle(question) == answer


@pytest.mark.parametrize(
    "question",
    [
        "What is 7?",
        "Name a prime number.",
        "Tom has 3 apples. What is 4 + 5?",
        "What is 3 + 4 and 5 + 6?",
        "What is 5 ÷ 0?",
        "What is 2.5 + 1?",
        "What is (3 + 4?",
        "",
        "What is one plus two?",
    ],
)
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
    for level in A.LADDER_LEVELS[4:]:
        for _ in range(200):
            t = A.make_problem(rng, level)
            assert A.oracle(t.question) == t.answer and t.features["level"] == level and int(t.answer) >= 0
    assert A.read_expression(A.make_problem(rng, 7).question).count("*") >= 1
    assert "/" not in A.make_problem(rng, 8).id  # ids stay usable as file names
    with pytest.raises(ConfigError):
        A.make_problem(rng, 10)


def test_arith_benchmark_is_unchanged_by_the_ladder() -> None:
    """The ``arith`` benchmark's 500 items hash as they did before the ladder existed, so earlier
    figures stay comparable."""
    rows = [[t.id, t.question, t.answer, t.features] for t in A.heldout_tasks()]
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    assert digest == "a7fca185e5e67f81b27f30f478ba768687a377c9614a4332af4c8e9a9fdb6043"


def test_ladder_is_held_out_per_level_and_never_drawn() -> None:
    ladder = A.ladder_tasks()
    assert len(ladder) == A.LADDER_PER_LEVEL * len(A.LADDER_LEVELS) == 450
    assert [sum(t.features["level"] == lv for t in ladder) for lv in A.LADDER_LEVELS] == [50] * 9
    assert [t.features["level"] for t in ladder[:9]] == list(A.LADDER_LEVELS)  # interleaved: prefixes balanced
    assert len({t.question for t in ladder}) == 450
    assert not {t.question for t in ladder} & {t.question for t in A.heldout_tasks()}
    assert all(A.oracle(t.question) == t.answer for t in ladder)
    (b,) = resolve_benches(["arith_ladder"])
    assert [t.question for t in load_tasks(b, limit=9)] == [t.question for t in ladder[:9]]
    w = make_world(_cfg("data.levels=[5,6,7,8,9]"), None, lambda _: None)
    assert {normalize_question(t.question) for t in ladder} <= w.excluded()
    drawn = w.draw(random.Random(0), 3000)
    assert {t.features["level"] for t in drawn} == {5, 6, 7, 8, 9}
    assert not {normalize_question(t.question) for t in drawn} & w.excluded()
    assert len(w.bench_tasks("arith_ladder", None, None)) == 450


def test_heldout_is_fixed_balanced_and_never_drawn() -> None:
    h = A.heldout_tasks()
    assert len(h) == 500 and len({t.question for t in h}) == 500
    assert [sum(t.features["level"] == lv for t in h) for lv in A.LEVELS] == [125] * 4
    assert [t.question for t in h[:3]] == [t.question for t in A.heldout_tasks()[:3]]  # same every call
    assert h[0].question == "What is 8 + 3?" and h[-1].question == "What is 3 + 4 + 7?"  # pinned: the benchmark
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
    assert {t.features["level"] for t in tasks} == {2, 3} and not {
        normalize_question(t.question) for t in tasks
    } & w.excluded()
    assert len(w.bench_tasks("arith", None, None)) == 100 and w.bench_tasks("math500", None, None) is None
    assert w.oracle("What is 2 + 2?") == "4"
    fixed = make_world(_cfg("data.limit=16", "data.limit_seed=1"), None, said.append)
    assert len(fixed.pool(random.Random(0), None)) == 16 and "fixed labelled set of 16" in said[-1]


@pytest.mark.parametrize(
    "over,message",
    [
        (["data.levels=[0]"], "data.levels: must be a non-empty list"),
        (["data.levels=[10]"], "data.levels: must be a non-empty list"),
        (["data.levels=[]"], "data.levels: must be a non-empty list"),
        (["data.source=skill", "data.levels=[1]"], "data.levels: levels apply to the generated worlds toy and arith"),
    ],
)
def test_bad_levels(over: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(*over)


def test_arith_needs_a_real_model() -> None:
    with pytest.raises(ConfigError, match="data.source=arith asks questions in natural language for a real model"):
        load_config("grpo", None, ["data.source=arith"])


def test_preflight_checks_the_benchmark_evaluated_and_can_be_overruled(smollm2) -> None:
    """The answer-length check reads the benchmarks the run evaluates (arith: ~40 tokens, not
    math7's hundreds); run.preflight=warn (coevolve run --force) prints the problems and goes on."""
    from coevolve.preflight import budget_problems, evaluated_benches, preflight

    base = [f"model.path={smollm2}", "data.source=arith", "model.chat_template=true"]
    ok = load_config("grpo", None, [*base, "sampling.max_new_tokens=48", "eval.max_new_tokens=48"])
    assert [b.name for b in evaluated_benches(ok)] == ["arith"] and budget_problems(ok) == []
    short = load_config("grpo", None, [*base, "sampling.max_new_tokens=48", "eval.max_new_tokens=8"])
    with pytest.raises(ConfigError, match=r"eval.max_new_tokens=8 is far below .* arith \(~40 tokens\)"):
        preflight(short, lambda _: None)
    said: list[str] = []
    warned = load_config(
        "grpo", None, [*base, "sampling.max_new_tokens=48", "eval.max_new_tokens=8", "run.preflight=warn"]
    )
    problems = preflight(warned, said.append)  # returns instead of raising
    assert any(p.startswith("eval.max_new_tokens=8 is far below") for p in problems)
    assert len(said) == len(problems) and all(x.startswith("warning (run.preflight=warn): ") for x in said)
    gsm = load_config(
        "grpo",
        None,
        [
            f"model.path={smollm2}",
            "data.source=arith",
            "eval.benches=[gsm8k]",
            "sampling.max_new_tokens=48",
            "eval.max_new_tokens=100",
        ],
    )
    assert [p.split(" is far")[0] for p in budget_problems(gsm)] == ["eval.max_new_tokens=100"]  # gsm8k: ~250 tokens


def test_expected_answer_tokens_from_the_data_dir(tmp_path) -> None:
    """With eval.data_dir holding a benchmark's file, its worked solutions set the expected length."""
    import json

    from coevolve.eval.benchmarks import get
    from coevolve.preflight import expected_answer_tokens

    (tmp_path / "gsm8k").mkdir()
    rows = [{"id": str(i), "question": "q", "answer": "1", "solution": "x" * 400} for i in range(5)]
    (tmp_path / "gsm8k" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert expected_answer_tokens(get("gsm8k"), str(tmp_path)) == 200  # 2 x 400 chars / 4
    assert expected_answer_tokens(get("gsm8k"), None) == get("gsm8k").answer_tokens
