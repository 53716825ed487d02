"""A user's own reward (``reward.function``) and benchmark file (``eval.benches=[file.jsonl]``):
loaded from a real file, refused in one line before a run folder exists, and used by the
solver's reward, the votes and the evaluation alike (a toy grpo run end to end)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.errors import ConfigError, DataError
from coevolve.eval.benchmarks import load_tasks, resolve_benches
from coevolve.reward_function import FunctionGrader, check_function
from coevolve.training import solver_scores

REWARD = '''
def partial(completions, answers):
    """1 for the answer boxed, 0.25 for the answer anywhere else, 0 otherwise."""
    out = []
    for c, a in zip(completions, answers):
        out.append(1.0 if "\\\\boxed{" + a + "}" in c else 0.25 if a and a in c else 0.0)
    return out


def kwargs_only(completions, **kwargs):
    return [float(c == a) for c, a in zip(completions, kwargs["answers"])]


def wrong_length(completions, answers):
    return [1.0]


def not_numbers(completions, answers):
    return ["yes" for _ in completions]
'''


@pytest.fixture
def reward_file(tmp_path: Path) -> Path:
    p = tmp_path / "my_reward.py"
    p.write_text(REWARD, encoding="utf-8")
    return p


@pytest.fixture
def bench_file(tmp_path: Path) -> Path:
    rows = [{"id": f"q{a}_{b}", "problem": f"{a}+{b}", "sol": str(a + b)} for a, b in [(1, 2), (3, 4), (12, 5)]]
    p = tmp_path / "mine.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_function_grader_scores_grades_and_votes(reward_file):
    g = FunctionGrader(f"{reward_file}:partial")
    assert g.scores(["3", "3", "3"], ["\\boxed{3}", "it is 3", "no"]) == [1.0, 0.25, 0.0]
    assert g.grade_batch(["3", "3"], ["\\boxed{3}", "it is 3"]) == [True, False]
    vote = g.vote(["7", "8", "7", None])
    assert (vote.label, vote.sizes, vote.cluster_of, vote.n) == ("7", [2, 1], [0, 1, 0, -1], 4)
    # the solver reward is the function's value itself (TRL's reward_funcs), acc its verdict
    rows = solver_scores(["3", "3"], ["<think>x</think>\\boxed{3}", "3"], g, alpha=0.9)
    assert [r["score"] for r in rows] == [1.0, 0.25] and [r["acc"] for r in rows] == [1.0, 0.0]
    assert FunctionGrader(f"{reward_file}:kwargs_only").grade_batch(["a"], ["a"]) == [True]


def test_a_module_path_is_the_first_form(reward_file, monkeypatch):
    monkeypatch.syspath_prepend(str(reward_file.parent))
    assert FunctionGrader("my_reward:partial").scores(["1"], ["\\boxed{1}"]) == [1.0]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("partial_x", r"reward.function=.*my_reward.py:partial_x: .* has no 'partial_x'"),
        ("wrong_length", r"reward.function=.* returned 1 scores for 2 completions"),
        ("not_numbers", r"reward.function=.* must return a list of numbers"),
    ],
)
def test_bad_functions_are_one_line_naming_the_field(reward_file, name, message):
    with pytest.raises(ConfigError, match=message):
        FunctionGrader(f"{reward_file}:{name}").scores(["1", "2"], ["a", "b"])
    with pytest.raises(ConfigError, match=r"^reward.function=nosuch_pkg.mod:f: cannot import nosuch_pkg.mod"):
        check_function("nosuch_pkg.mod:f")
    with pytest.raises(ConfigError, match=r"^reward.function=missing.py:f: no file missing.py"):
        check_function("missing.py:f")


def test_user_benchmark_file_with_its_keys(bench_file):
    (b,) = resolve_benches([f"{bench_file}:question_key=problem:answer_key=sol"])
    assert (b.name, b.category, b.source) == ("mine", "user", str(bench_file))
    tasks = load_tasks(b)
    assert [(t.id, t.question, t.answer) for t in tasks] == [
        ("q1_2", "1+2", "3"),
        ("q3_4", "3+4", "7"),
        ("q12_5", "12+5", "17"),
    ]
    with pytest.raises(DataError, match=r"eval.benches: benchmark mine .*mine.jsonl:1: .*add :question_key=problem"):
        load_tasks(resolve_benches([str(bench_file)])[0])
    with pytest.raises(ConfigError, match=r"eval.benches: .*after the file comes :question_key"):
        resolve_benches([f"{bench_file}:questionkey=problem"])


def test_refused_before_the_run_folder_exists(tmp_path, reward_file, bench_file):
    from tests.test_cli import cli

    for override, message in [
        (f"reward.function={reward_file}:nope", "reward.function="),
        (f"eval.benches=[{tmp_path / 'absent.jsonl'}]", "eval.benches: benchmark absent"),
        (f"eval.benches=[{bench_file}]", "add :question_key=problem"),
    ]:
        out = tmp_path / "run"
        res = cli("run", "grpo", "--run-dir", str(out), override)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert message in res.stderr and "Traceback" not in res.stderr and not out.exists()


@pytest.mark.slow
def test_toy_run_rewards_votes_and_evaluates_with_the_function(tmp_path, toy_overrides_30, reward_file, bench_file):
    from coevolve.recipes import execute
    from coevolve.run import Run

    tiny = [
        "solver.steps=1",
        "solver.prompts_per_step=3",
        "solver.group_size=3",
        "eval.samples=0",
        "run.progress=false",
        "sampling.max_new_tokens=40",
        "eval.max_new_tokens=40",
        "eval.heldout_size=8",
    ]
    extra = [
        f"reward.function={reward_file}:partial",
        f"eval.benches=[toy,{bench_file}:question_key=problem:answer_key=sol]",
    ]
    summary = execute(load_config("grpo", None, tiny + toy_overrides_30 + extra), tmp_path / "r")
    run = Run.open(tmp_path / "r")
    g = FunctionGrader(f"{reward_file}:partial")
    rows = run.read_jsonl("round_01/solver_rollouts.jsonl")
    seen = set()
    for r in rows:  # every reward is the function's value (the math reward would give 0.1 or 0.9 too)
        for text, reward in zip(r["completions"], r["rewards"]):
            # a completion cut off before its box closed is read as no answer ("")
            expected = g.scores([r["label"]], [text]) + ([] if "\\boxed{" in text else g.scores([r["label"]], [""]))
            assert reward in expected
            seen.add(reward)
    assert seen <= {0.0, 0.25, 1.0} and len(rows) == 3
    results = json.loads((run.path / "round_01" / "eval" / "results.json").read_text())
    assert results["benchmarks"]["mine"]["category"] == "user" and results["benchmarks"]["mine"]["n"] == 3
    items = run.read_jsonl("round_01/eval/items_mine.jsonl")
    assert [i["id"] for i in items] == ["q1_2", "q3_4", "q12_5"]
    assert "mine" in summary["eval"]["final"]
