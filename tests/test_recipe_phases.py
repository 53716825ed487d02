"""The recipes' phase functions and helpers, directly, on hand-made inputs (no model): D²Evo's
anchor phase over a hand-written difficulty file, the audit records of a writer batch, DiagEvo's
±1 match reward through the real grader, the summary of a run's phase records, when evaluation
is due, and the grpo recipe's config (the papers' "Full Data" baseline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from coevolve.answers import Grader
from coevolve.config import load_config
from coevolve.curriculum import PassRecord, VoteRecord
from coevolve.curriculum.proposals import WriterBatch
from coevolve.recipes import d2evo, evaluation, setup, summary
from coevolve.run import Phase, PhaseResult, Run
from coevolve.training import match_reward
from coevolve.types import Completion, Task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def grader():
    with Grader() as g:
        yield g


def _setup(tmp_path: Path, recipe: str, overrides: list[str]) -> setup.Setup:
    """A Setup that holds only the config and the run folder: enough for phases that read and
    write artefacts but touch no model, world or grader."""
    cfg = load_config(recipe, None, overrides)
    run = Run.create(tmp_path / "run", "recipe: x\n", recipe, seed=cfg.run.seed, say=lambda m: None)
    return setup.Setup(cfg, run, world=None, grader=None, base=None, engine=None, trainer=None)  # type: ignore[arg-type]


def _d2(s: setup.Setup) -> d2evo.D2Evo:
    return d2evo.D2Evo(s, solver=None, questioner=None, pool=[])  # type: ignore[arg-type]


def _difficulty(s: setup.Setup, t: int, rates: dict[str, float], n: int = 8) -> None:
    recs = [PassRecord.from_counts(Task(tid, f"q {tid}", "1"), round(r * n), n) for tid, r in rates.items()]
    s.run.write_jsonl(s.run.path / f"round_{t:02d}" / "difficulty.jsonl", [r.to_dict() for r in recs])


def test_phase_anchors_band_entered_left_and_cap(tmp_path: Path) -> None:
    s = _setup(tmp_path, "d2evo", ["difficulty.band.low=0.25", "difficulty.band.high=0.5"])
    _difficulty(s, 1, {"a": 0.125, "b": 0.25, "c": 0.375, "d": 0.5, "e": 0.625})
    rec = d2evo.phase_anchors(_d2(s), Phase("anchors", 1))
    anchors = s.run.read_jsonl("round_01/anchors.jsonl")
    assert [a["task_id"] for a in anchors] == ["b", "c", "d"]  # the configured band, both edges in
    assert rec.values == {"anchors": 3, "band": 3, "entered": 3, "left": 0, "anchor_pass_rate_mean": 0.375}
    hist = json.loads((s.run.path / "round_01" / "pool_histogram.json").read_text())
    assert hist["band"] == {"low": 0.25, "high": 0.5} and sum(hist["pool"].values()) == 5
    _difficulty(s, 2, {"a": 0.25, "b": 0.25, "c": 0.75, "d": 0.5, "e": 0.625})
    rec2 = d2evo.phase_anchors(_d2(s), Phase("anchors", 2))
    assert [a["task_id"] for a in s.run.read_jsonl("round_02/anchors.jsonl")] == ["a", "b", "d"]
    assert (rec2.values["entered"], rec2.values["left"]) == (1, 1)  # a in, c out
    assert d2evo.phase_anchors(_d2(s), Phase("anchors", 2)).values == rec2.values  # done: not run again

    capped = _setup(
        tmp_path / "cap", "d2evo", ["difficulty.band.low=0.25", "difficulty.band.high=0.5", "difficulty.max_anchors=2"]
    )
    _difficulty(capped, 1, {"a": 0.125, "b": 0.25, "c": 0.375, "d": 0.5, "e": 0.625})
    assert (
        d2evo.phase_anchors(_d2(capped), Phase("anchors", 1)).values["anchors"] == 2
        and d2evo.phase_anchors(_d2(capped), Phase("anchors", 1)).values["band"] == 3
    )
    rnd = _setup(
        tmp_path / "rnd", "d2evo", ["difficulty.band.low=0.25", "difficulty.band.high=0.5", "anchor_selection=random"]
    )
    _difficulty(rnd, 1, {f"t{i}": (i % 9) / 8 for i in range(40)})
    picked = [
        a["pass_rate"]
        for a in (d2evo.phase_anchors(_d2(rnd), Phase("anchors", 1)), rnd.run.read_jsonl("round_01/anchors.jsonl"))[1]
    ]
    in_band = sum(0.25 <= (i % 9) / 8 <= 0.5 for i in range(40))
    assert len(picked) == in_band and any(not 0.25 <= p <= 0.5 for p in picked)  # as many, drawn from the whole pool


def test_questioner_audit_records_every_completion() -> None:
    tasks = [Task("a1", "2+3=", "5", features={"difficulty": 50.0})]
    comps = [[Completion("<q>", [], []), Completion("junk", [], []), Completion("<q2>", [], [])]]
    votes = {"2+3=": VoteRecord("2+3=", 4, [], "5", 0.75, 0.25), "7+1=": VoteRecord("7+1=", 4, [], "8", 0.5, 0.5)}
    wb = WriterBatch([["2+3=", None, "7+1="]], [[0.75, None, 0.5]], [[1.0, 0.0, 1.0]], [[True, False, True]], votes, 8)
    obs = d2evo.questioner_audit(0, tasks, comps, wb)
    recs = obs.records
    assert [(r["question"], r["well_formed"], r["x"], r["label"], r["reward"], r["copy_of_anchor"]) for r in recs] == [
        ("2+3=", True, 0.75, "5", 1.0, True),
        (None, False, None, None, 0.0, False),
        ("7+1=", True, 0.5, "8", 1.0, False),
    ]
    assert all(r["anchor_id"] == "a1" and r["anchor_difficulty"] == 50.0 for r in recs)
    assert obs.metrics["copies"] == pytest.approx(1 / 3) and obs.metrics["well_formed"] == pytest.approx(2 / 3)
    assert obs.rollouts == 8


def test_diagevo_match_reward_is_plus_minus_one_against_the_pseudo_label(grader: Grader) -> None:
    tasks = [
        Task("g1", "q1", "1/2", features={"targets": ["c0001"], "oracle": "0.5"}),
        Task("g2", "q2", "7", features={"targets": [], "oracle": "8"}),
    ]
    comps = [
        [Completion("so \\boxed{0.5}", [], []), Completion("\\boxed{2}", [], [])],
        [Completion("\\boxed{7}", [], []), Completion("no answer", [], [])],
    ]
    rewards, obs = match_reward(grader)(0, tasks, comps)
    assert rewards == [[1.0, -1.0], [1.0, -1.0]]
    assert [r["matches"] for r in obs.records] == [[True, False], [True, False]]
    assert obs.records[0]["targets"] == ["c0001"] and obs.records[1]["responses"] == ["\\boxed{7}", "no answer"]
    assert obs.metrics["match_rate"] == 0.5 and obs.metrics["oracle_acc"] == 0.25  # only "0.5" is truly right


def test_write_summary_from_the_phase_records(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "run", "recipe: grpo\n", "grpo", say=lambda m: None)
    ev = lambda g: {"eval": {"toy": {"greedy": g, "sampled": None, "n": 4, "score": g, "metric": "acc"}}}  # noqa: E731
    run.phase(Phase.base("eval"), lambda ctx: PhaseResult(ev(0.25), rollouts=4))
    run.phase(Phase("solver", 1), lambda ctx: PhaseResult({"reward_mean": 0.5, "hist": {"x": 1}}, rollouts=16))
    run.phase(Phase("eval", 1), lambda ctx: PhaseResult(ev(0.5), rollouts=4))
    run.phase(Phase("solver", 2), lambda ctx: PhaseResult({"reward_mean": 0.0}, rollouts=16, problem="no update"))
    run.phase(Phase("eval", 2), lambda ctx: PhaseResult(ev(0.75), rollouts=4))
    run.phase(Phase.final("difficulty"), lambda ctx: PhaseResult({"pool_size": 9}, rollouts=72))
    s = summary.write_summary(run, {"note": "x"})
    assert s == json.loads((run.path / "summary.json").read_text())
    assert (
        s["recipe"] == "grpo" and s["ok"] is False and s["problems"] == [{"phase": "02/solver", "problem": "no update"}]
    )
    assert s["eval"]["base"]["toy"]["greedy"] == 0.25 and s["eval"]["final"]["toy"]["greedy"] == 0.75
    assert set(s["eval"]["rounds"]) == {"1", "2"} and s["note"] == "x"
    r1 = s["rounds"][0]
    assert r1["round"] == 1 and r1["solver/reward_mean"] == 0.5 and "solver/hist" not in r1  # scalars only
    assert r1["solver/rollouts"] == 16 and r1["eval/rollouts"] == 4 and "phase/solver/seconds" in r1
    assert s["final"] == {"difficulty/rollouts": 72, "difficulty/pool_size": 9}
    assert s["rollouts"] == 4 + 16 + 4 + 16 + 4 + 72


def test_eval_due() -> None:
    every = load_config("d2evo", None, ["rounds=3"])
    last = load_config("d2evo", None, ["rounds=3", "eval.every_round=false"])
    assert [evaluation.eval_due(every, Phase("eval", t)) for t in (1, 2, 3)] == [True, True, True]
    assert [evaluation.eval_due(last, Phase("eval", t)) for t in (1, 2, 3)] == [False, False, True]


def test_grpo_config_is_the_full_data_baseline() -> None:
    from coevolve.config.grpo import GRPOConfig

    cfg = GRPOConfig()
    assert cfg.recipe == "grpo" and (cfg.solver.steps, cfg.solver.prompts_per_step, cfg.solver.group_size) == (
        80,
        16,
        8,
    )
    assert cfg.solver.alpha == 0.9  # R-Zero's α, our default for D²Evo's labelled reward
    assert load_config("grpo", ROOT / "configs" / "grpo.yaml").solver == cfg.solver
    assert load_config("grpo", None, ["solver.steps=3"]).solver.group_size == 8  # a partial override keeps the rest
    with pytest.raises(ValidationError, match="recipe"):
        GRPOConfig.model_validate({"recipe": "d2evo"})
