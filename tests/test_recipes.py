"""Each recipe declared once (``recipes.declare``): the schedule derived from a declaration, and
every recipe run end to end at smoke size checking that the phases it executed are exactly the
phases its declaration plans, in order, with the ablation switches that drop phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.recipes.declare import Recipe, Rollouts, Step, Training, Work
from coevolve.recipes.registry import recipe_of
from coevolve.run import Run

torch.set_num_threads(1)


class _Cfg:
    rounds = 2

    def __init__(self, final: bool = True, middle: bool = True) -> None:
        self.final, self.middle = final, middle


def _noop(parts, phase):
    return None


def _work(cfg, toy):
    return Work(
        (Rollouts("solver", "answers", 6, 3, 2, "answer", 8),), Training("solver", "solver", 1, 3, 2, "answer", 8)
    )


FAKE = Recipe(
    "fake",
    roles=lambda cfg: ("solver",),
    build=lambda s, r: None,
    steps=(
        Step("eval", _noop, stage="base", work=_work),
        Step("a", _noop, work=_work),
        Step("b", _noop, when=lambda cfg, ph: cfg.middle),
        Step("eval", _noop, when=lambda cfg, ph: ph.round == cfg.rounds, work=_work),
        Step("a", _noop, stage="final", when=lambda cfg, ph: cfg.final, work=_work),
    ),
)


def test_schedule_is_base_then_rounds_then_final_filtered_by_when():
    keys = [p.key for p in FAKE.phase_list(_Cfg())]
    assert keys == ["base/eval", "01/a", "01/b", "02/a", "02/b", "02/eval", "final/a"]
    assert [p.key for p in FAKE.phase_list(_Cfg(final=False, middle=False))] == ["base/eval", "01/a", "02/a", "02/eval"]


def test_work_counts_every_phase_of_a_step_name_in_round_order():
    rows = [(step.name, times, work.rollouts[0].rows) for step, times, work in FAKE.work(_Cfg(), toy=True)]
    assert rows == [("a", 3, 6), ("eval", 2, 6)]  # b declares no work; base + round 2 evals; rounds + final a
    assert [(s.name, n) for s, n, _ in FAKE.work(_Cfg(final=False), toy=True)] == [("a", 2), ("eval", 2)]


# ---------------------------------------------------------------------------------- end to end
TINY = [
    "run.progress=false",
    "run.threads=1",
    "eval.heldout_size=8",
    "eval.samples=0",
    "eval.max_new_tokens=24",
    "sampling.max_new_tokens=24",
]
GRPO = ["solver.steps=1", "solver.prompts_per_step=2", "solver.group_size=2"]
D2EVO = [
    "rounds=2",
    "difficulty.pool_size=8",
    "difficulty.samples=2",
    "questioner.steps=1",
    "questioner.prompts_per_step=2",
    "questioner.group_size=2",
    "questioner.reward.samples=2",
    "buffer.generate=4",
    "buffer.voting.samples=2",
    "solver.steps=1",
    "solver.prompts_per_step=2",
    "solver.group_size=2",
    "eval.every_round=false",
    "probe.size=4",
    "probe.samples=2",
]
DIAGEVO = [
    "rounds=2",
    "challenger.steps=1",
    "challenger.prompts_per_step=2",
    "challenger.group_size=2",
    "challenger.reward.samples=2",
    "pool.size=6",
    "pool.voting.samples=2",
    "solver.steps=1",
    "solver.prompts_per_step=2",
    "solver.group_size=2",
    "memory.embedder=hash",
    "eval.every_round=false",
    "probe.size=4",
    "probe.samples=2",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> list[str]:
    from coevolve.world.toy import ensure_base

    cache = tmp_path_factory.mktemp("toycache")
    ensure_base(cache, steps=2, seed=0)  # the phases, not the figures, are under test
    return [f"model.toy_cache={cache}", "model.toy_steps=2"]


@pytest.fixture(scope="module")
def learning(tmp_path_factory) -> list[str]:
    """A base that learns within a step (rewards vary), for tests that compare trained runs."""
    from coevolve.world.toy import ensure_base

    cache = tmp_path_factory.mktemp("toycache30")
    ensure_base(cache, steps=30, seed=0)
    return [f"model.toy_cache={cache}", "model.toy_steps=30"]


CASES = {
    "grpo": ("grpo", GRPO, ["base/eval", "01/solver", "01/eval"]),
    "d2evo": (
        "d2evo",
        D2EVO,
        [
            "base/eval",
            "base/probe",
            "01/difficulty",
            "01/anchors",
            "01/questioner",
            "01/buffer",
            "01/solver",
            "01/probe",
            "02/difficulty",
            "02/anchors",
            "02/questioner",
            "02/buffer",
            "02/solver",
            "02/probe",
            "02/eval",
            "final/difficulty",
        ],
    ),
    "d2evo w/o questioner, no final measure, no probe": (
        "d2evo",
        D2EVO + ["questioner=false", "difficulty.measure_final=false", "eval.every_round=true", "probe.size=0"],
        [
            "base/eval",
            "01/difficulty",
            "01/anchors",
            "01/buffer",
            "01/solver",
            "01/eval",
            "02/difficulty",
            "02/anchors",
            "02/buffer",
            "02/solver",
            "02/eval",
        ],
    ),
    "diagevo": (
        "diagevo",
        DIAGEVO,
        [
            "base/eval",
            "base/probe",
            "01/challenger",
            "01/pool",
            "01/solver",
            "01/memory",
            "01/probe",
            "02/challenger",
            "02/pool",
            "02/solver",
            "02/memory",
            "02/probe",
            "02/eval",
        ],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_recipe_executes_exactly_the_phases_it_plans(tmp_path, tiny, case):
    from coevolve.recipes import execute

    recipe, overrides, want = CASES[case]
    cfg = load_config(recipe, None, TINY + tiny + overrides)
    planned = [p.key for p in recipe_of(recipe).phase_list(cfg)]
    assert planned == want  # the declaration says what the paper's recipe (and the ablation) does
    execute(cfg, tmp_path / "run")
    run = Run.open(tmp_path / "run")
    executed = [r.key for r in run.state.records()]
    assert executed == planned
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert state["status"] == "finished"
    for key in executed:  # every executed phase wrote into its own folder
        folder = "base" if key.startswith("base/") else "final" if key.startswith("final/") else f"round_{key[:2]}"
        assert (tmp_path / "run" / folder).is_dir(), key
    # every phase logs the grader's counters it added (timeouts, refusals: metrics.jsonl, report)
    grading = [k for r in run.metrics.rows() for k in r if k.endswith("/grader_timeouts")]
    assert len(grading) == len(executed)
    assert sum(r.get(k, 0) for r in run.metrics.rows() for k in r if k.endswith("/grader_calls")) > 0


def test_phase_functions_run_the_phase_they_are_given(tmp_path, tiny, monkeypatch):
    """The loop hands each step its scheduled phase; a step that ran another phase (a forgotten
    round, a hard-coded name) would leave the executed list different from the plan."""
    from coevolve.recipes import execute, grpo

    seen = []
    real = grpo.phase_solver

    def spy(parts, phase):
        seen.append(phase.key)
        return real(parts, phase)

    steps = tuple(
        Step(s.name, spy, s.stage, s.when, s.uses, s.work) if s.name == "solver" else s for s in grpo.RECIPE.steps
    )
    monkeypatch.setattr(
        grpo, "RECIPE", Recipe("grpo", steps, grpo.RECIPE.roles, grpo.RECIPE.build, grpo.RECIPE.needs_labels)
    )
    execute(load_config("grpo", None, TINY + tiny + GRPO), tmp_path / "run")
    assert seen == ["01/solver"]


def test_resume_refuses_a_changed_phase_list_derived_from_the_declaration(tmp_path, tiny):
    from coevolve.errors import RunStateError
    from coevolve.recipes import execute

    execute(load_config("d2evo", None, TINY + tiny + D2EVO + ["rounds=1"]), tmp_path / "d")
    with pytest.raises(RunStateError, match="removed: 01/questioner"):  # the ablation drops a phase
        execute(load_config("d2evo", tmp_path / "d" / "config.yaml", ["questioner=false"]), tmp_path / "d")


def test_recipes_in_one_process_equal_a_fresh_process(tmp_path, tiny, learning):
    """Several recipes in one process leave nothing behind that changes the next one: a grpo run
    after a D²Evo and a DiagEvo run in this (test) process writes the same artefacts, byte for
    byte, as the same grpo run in a fresh ``coevolve run`` process."""
    import os
    import subprocess
    import sys

    from coevolve.recipes import execute

    root = Path(__file__).resolve().parents[1]
    grpo = TINY + learning + GRPO + ["eval.samples=2", "solver.steps=2", "solver.group_size=4"]
    env = {**os.environ, "PYTHONPATH": str(root / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    fresh = subprocess.run(
        [sys.executable, "-m", "coevolve", "run", "grpo", *grpo, "--run-dir", str(tmp_path / "fresh")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert json.loads((tmp_path / "fresh" / "state.json").read_text())["phases"][1]["values"]["updates"] > 0
    execute(load_config("d2evo", None, TINY + tiny + D2EVO + ["rounds=1"]), tmp_path / "d2evo")
    execute(load_config("diagevo", None, TINY + tiny + DIAGEVO + ["rounds=1"]), tmp_path / "diagevo")
    execute(load_config("grpo", None, grpo), tmp_path / "here")
    files = sorted(
        p.relative_to(tmp_path / "fresh") for p in (tmp_path / "fresh").rglob("*.jsonl") if p.name != "metrics.jsonl"
    )
    assert any("rollouts" in str(f) for f in files) and any("items_" in str(f) for f in files)
    for rel in files:
        assert (tmp_path / "here" / rel).read_bytes() == (tmp_path / "fresh" / rel).read_bytes(), rel
    assert (tmp_path / "here" / "checkpoints").is_dir()
    a, b = (json.loads((tmp_path / d / "summary.json").read_text())["eval"] for d in ("fresh", "here"))
    assert a == b


def test_a_lora_roles_initialisation_follows_run_seed_not_the_process(tmp_path, learning):
    """LoRA adapters start from random weights: the run seeds the generators before it builds its
    roles, so what the process drew before the run does not change the run."""
    pytest.importorskip("peft")
    from coevolve.recipes import execute

    cfg = load_config(
        "grpo",
        None,
        TINY + learning + GRPO + ["learner.lora=true", "learner.lora_r=4", "solver.steps=2", "solver.group_size=4"],
    )
    for i, seed in enumerate((1, 2)):
        torch.manual_seed(seed)  # another state of the process's generator
        execute(cfg, tmp_path / f"r{i}")
    for rel in (
        Path("round_01") / "solver_rollouts.jsonl",  # lora_B starts at 0: the first draws agree anyway
        Path("checkpoints") / "solver_r01" / "adapter_model.safetensors",
    ):  # lora_A is random: it would not
        assert (tmp_path / "r0" / rel).read_bytes() == (tmp_path / "r1" / rel).read_bytes(), rel


@pytest.mark.slow
def test_a_run_with_repeated_evaluation_reports_mean_and_std(tmp_path, tiny):
    """eval.repeats=2 inside a run: each evaluation draws its samples twice (counted by the
    plan), and results.json, the summary and the report give mean ± sample std over the runs."""
    import math

    from coevolve.lab.report import write_report
    from coevolve.lab.run_view import final_results as run_results
    from coevolve.plan import phases
    from coevolve.recipes import execute

    cfg = load_config("grpo", None, TINY + tiny + GRPO + ["eval.samples=2", "eval.repeats=2"])
    execute(cfg, tmp_path / "run")
    toy = run_results(tmp_path / "run")["benchmarks"]["toy"]
    a, b = toy["sampled_runs"]
    assert toy["sampled"] == pytest.approx((a + b) / 2) and toy["sampled_std"] == pytest.approx(
        abs(a - b) / math.sqrt(2)
    )
    assert toy["repeats"] == 2 and toy["score_std"] == 0.0  # the toy score is greedy: evaluated once
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval"]["final"]["toy"]["score_std"] == 0.0 and summary["eval"]["final"]["toy"]["repeats"] == 2
    # the plan counts what the evaluations drew: 8 items x (1 greedy + 2 runs x 2 samples), twice
    from coevolve.run import STATE_FILE
    from coevolve.run.state import PhaseState

    drawn = [r.rollouts for r in PhaseState.load(tmp_path / "run" / STATE_FILE).records() if r.name == "eval"]
    assert drawn == [8 * (1 + 2 * 2)] * 2
    assert {w.name: w for w in phases(cfg, toy=True)}["eval"].rollouts == sum(drawn)
    assert "over 2 evaluation runs" in write_report(tmp_path / "run").read_text()


def test_the_recipe_registry_names_every_config_and_refuses_an_unknown_name():
    """recipes/ owns its registry; config keeps only name -> config class: the two name the same recipes."""
    from coevolve.config import CONFIGS
    from coevolve.errors import ConfigError
    from coevolve.recipes.registry import RECIPES

    assert list(RECIPES) == list(CONFIGS)
    assert all(isinstance(recipe_of(name), Recipe) for name in RECIPES)
    with pytest.raises(ConfigError, match="unknown recipe 'grpoo'.*grpo"):
        recipe_of("grpoo")
