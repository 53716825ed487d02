"""D²Evo recipe: config defaults, a smoke run with every artefact, every ablation, malformed
questioner output, kill -9 + resume == uninterrupted, and the real-model path (toy model
standing in for an HF folder, six rows of math_train12k shipped in tests/data). Every run uses
the default toy base (the ``toy_base`` session fixture, requested by every test that runs one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.run import Phase, Run

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "d2evo_smoke.yaml"
MATH12K_6 = ROOT / "tests" / "data" / "math_train12k_6.jsonl"  # the first 6 rows of MATH train (MIT), as shipped

TINY = [  # one round, minimal sizes: each ablation run takes a few seconds
    "rounds=1",
    "difficulty.pool_size=16",
    "difficulty.samples=4",
    "difficulty.band.low=0.25",
    "difficulty.band.high=0.75",
    "questioner.steps=1",
    "questioner.prompts_per_step=4",
    "questioner.group_size=2",
    "questioner.reward.samples=4",
    "buffer.generate=8",
    "buffer.voting.samples=4",
    "solver.steps=1",
    "solver.prompts_per_step=4",
    "solver.group_size=2",
    "eval.heldout_size=16",
    "eval.samples=0",
    "run.progress=false",
    "run.threads=1",
    "difficulty.measure_final=false",
]


def _run(tmp: Path, name: str, overrides: list[str]) -> tuple[dict, Run]:
    from coevolve.lab.report import write_report
    from coevolve.recipes import execute

    cfg = load_config("d2evo", SMOKE, overrides)
    summary = execute(cfg, tmp / name, report=write_report)
    return summary, Run.open(tmp / name)


# The smoke run doubles as the uninterrupted reference of the kill -9 test (same config, same
# seeds; solver.steps=4 so that there is a step to kill the process in): one run, two tests.
REF = ["solver.steps=4"]


def _cli(args: list[str], log: Path) -> subprocess.Popen:
    """``coevolve`` in a fresh process, its output appended to ``log``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    with open(log, "a") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "coevolve.cli", *args], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT
        )


@pytest.fixture(scope="module")
def ref(tmp_path_factory, toy_base) -> tuple[dict, Run]:
    """The uninterrupted smoke run, made through the CLI in a fresh process like the killed run
    and its resume (a run in this process would inherit the state earlier tests left)."""
    path = tmp_path_factory.mktemp("d2evo_ref") / "ref"
    log = path.parent / "log"
    assert _cli(["run", "d2evo", "-c", str(SMOKE), "--run-dir", str(path), *REF], log).wait() == 0, log.read_text()[
        -3000:
    ]
    return json.loads((path / "summary.json").read_text()), Run.open(path)


def test_config_defaults_are_the_papers() -> None:
    cfg = load_config("d2evo")
    assert cfg.rounds == 3
    d, q = cfg.difficulty, cfg.questioner
    assert (d.samples, d.band.low, d.band.high) == (32, 0.4, 0.8)
    assert (q.reward.band.low, q.reward.band.high, q.reward.a, q.reward.samples) == (0.4, 0.8, 2.0, 8)
    assert cfg.solver.alpha == 0.9 and cfg.buffer.voting.samples == 8 and cfg.buffer.voting.filter == "absolute"
    assert q.enabled and q.share_weights and cfg.buffer.synthesis and d.selection == "band"
    assert q.reward.kind == "plateau" and cfg.buffer.verifier == "none"
    file_cfg = load_config("d2evo", ROOT / "configs" / "d2evo.yaml")
    assert file_cfg.model_dump() == cfg.model_dump()  # the YAML writes the defaults out
    for bad in (
        ["difficulty.band.low=0.9"],
        ["questioner.reward.band.low=0.9"],
        ["anchor_selection=best"],
        ["questioner_reward=foo"],
        ["questioner.reward.a=0.5"],
        ["buffer.voting.band.low=0.9"],
    ):
        with pytest.raises(ConfigError):
            load_config("d2evo", None, bad)


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_smoke_run_artefacts_metrics_report(ref: tuple[dict, Run]) -> None:
    summary, run = ref
    cfg = load_config("d2evo", SMOKE, REF)
    rounds, pool, n = cfg.rounds, cfg.difficulty.pool_size, cfg.difficulty.samples
    assert rounds == 2
    for t in range(1, rounds + 1):
        rd = run.path / f"round_{t:02d}"
        for f in (
            "difficulty.jsonl",
            "anchors.jsonl",
            "pool_histogram.json",
            "questioner_generated.jsonl",
            "questioner_rollouts.jsonl",
            "candidates.jsonl",
            "pool.jsonl",
            "buffer.jsonl",
            "solver_rollouts.jsonl",
            "eval/items_toy.jsonl",
            "eval/results.json",
        ):
            assert (rd / f).exists(), f
        diff = run.read_jsonl(f"round_{t:02d}/difficulty.jsonl")
        assert len(diff) == pool and all(
            r["n"] == n and r["difficulty"] == pytest.approx((1 - r["correct"] / n) * 100) for r in diff
        )
        anchors = run.read_jsonl(f"round_{t:02d}/anchors.jsonl")
        assert all(0.4 <= a["pass_rate"] <= 0.8 for a in anchors)
        gen = run.read_jsonl(f"round_{t:02d}/questioner_generated.jsonl")
        assert gen and all({"question", "x", "reward", "well_formed"} <= set(g) for g in gen)
        assert all(g["reward"] == 0.0 for g in gen if not g["well_formed"])
        buf = run.read_jsonl(f"round_{t:02d}/buffer.jsonl")
        assert {b["features"]["origin"] for b in buf} <= {"real", "generated"}
        assert sum(b["features"]["origin"] == "real" for b in buf) == len(anchors)
        for b in buf:
            if b["features"]["origin"] == "generated":
                assert 0.4 <= b["features"]["p1"] <= 0.8 and b["answer"] is not None
    assert (run.path / "final" / "difficulty.jsonl").exists()
    keys = {k for m in run.metrics.rows() for k in m}
    for k in (
        "curriculum/pool_size",
        "curriculum/hist/=0",
        "curriculum/anchors",
        "questioner/reward_mean",
        "questioner/well_formed",
        "questioner/copies",
        "curriculum/buffer/buffer_generated",
        "solver/acc_mean",
        "curriculum/buffer/oracle_acc_kept",
        "eval/toy/greedy",
        "eval/toy/sampled",
        "phase/difficulty/seconds",
        "phase/difficulty/rollouts",
        "phase/questioner/rollouts",
        "phase/solver/rollouts",
        "phase/buffer/rollouts",
    ):
        assert k in keys, k
    rows = summary["rounds"]
    assert len(rows) == rounds and "buffer/oracle_acc_kept" in rows[0] and "anchors/anchors" in rows[0]
    assert rows[0]["difficulty/rollouts"] == pool * n
    assert summary["final"]["difficulty/pool_size"] == pool
    q = run.result(Phase("questioner", 1))
    assert q.rollouts == q.values["rollouts_generate"] + q.values["rollouts_verify"] > 0
    assert summary["eval"]["base"]["toy"]["greedy"] is not None and "final" in summary["eval"]
    report = (run.path / "report" / "report.md").read_text()
    assert "after last round" in report and "| round 2 |" in report and "## Per round" in report


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
@pytest.mark.parametrize(
    "ablation",
    [
        ["questioner=false"],
        ["share_weights=false"],
        ["synthesis=false"],
        ["anchor_selection=random"],
        ["questioner_reward=rzero"],
        ["label_verifier=oracle"],
        ["label_verifier=checker"],
    ],
    ids=lambda a: a[0],
)
def test_ablations_run(tmp_path: Path, ablation: list[str]) -> None:
    summary, run = _run(tmp_path, "abl", TINY + ablation)
    assert run.done(Phase("solver", 1)) and run.done(Phase("eval", 1))
    buf = run.result(Phase("buffer", 1)).values
    anchors = run.result(Phase("anchors", 1)).values
    if ablation[0] in ("questioner=false", "synthesis=false"):
        assert buf["buffer_generated"] == 0 and buf["buffer_real"] == anchors["anchors"]
    if ablation[0] == "questioner=false":
        assert not run.done(Phase("questioner", 1))
    if ablation[0] == "share_weights=false":
        assert run.state.checkpoint("questioner").endswith("questioner_r01q")
        assert run.state.checkpoint("solver").endswith("solver_r01")
    if ablation[0] == "questioner_reward=rzero":
        # R-Zero's reward is min(p, 1-p) minus a repetition penalty, and -1 minus it when malformed
        # (the plateau would give 1.0 inside the band and 0.0 to a malformed output)
        gen = run.read_jsonl("round_01/questioner_generated.jsonl")
        assert any(g["well_formed"] for g in gen)
        assert all(g["reward"] <= min(g["x"], 1 - g["x"]) + 1e-9 for g in gen if g["well_formed"])
        assert all(g["reward"] <= -1.0 for g in gen if not g["well_formed"])
    if ablation[0] == "anchor_selection=random":
        assert anchors["anchors"] == anchors["band"]
    if ablation[0] == "label_verifier=oracle":
        rows = run.read_jsonl("round_01/pool.jsonl")
        assert rows and all("verdict" in r and "label_correct" in r for r in rows)
        # kept labels get an oracle verdict equal to the label check; measure-only: nothing is rejected
        assert all(r["verdict"] == r["label_correct"] for r in rows if r["kept"])
        cands = run.read_jsonl("round_01/candidates.jsonl")
        assert not any(c["status"] == "rejected" for c in cands)
        assert buf["buffer_generated"] == sum(r["kept"] for r in rows)
    if ablation[0] == "label_verifier=checker":
        # the stand-in for the paper's GPT-5.2 check: every wrong label is dropped, each check a label read
        rows = run.read_jsonl("round_01/pool.jsonl")
        assert rows and not any(r["kept"] and r["label_correct"] is False for r in rows)
        cands = run.read_jsonl("round_01/candidates.jsonl")
        checked = sum(c["status"] in ("kept", "rejected") for c in cands)  # every label that passed the filter
        assert checked and run.result(Phase("buffer", 1)).compute["labels"] == checked
        assert buf["buffer_generated"] == sum(c["status"] == "kept" for c in cands)


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_malformed_questioner_output_scores_zero_and_is_saved(tmp_path: Path, monkeypatch) -> None:
    from coevolve.recipes import setup

    real = setup.make_world

    class Flaky:
        """Every other completion is unparseable (as a broken questioner would write)."""

        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def parse_question(self, completion: str):
            self.calls += 1
            return None if self.calls % 2 else self.inner.parse_question(completion)

    def flaky_world(cfg, tok, say):
        world = real(cfg, tok, say)
        world.prompter = Flaky(world.prompter)
        return world

    monkeypatch.setattr(setup, "make_world", flaky_world)
    _, run = _run(tmp_path, "flaky", TINY)
    gen = run.read_jsonl("round_01/questioner_generated.jsonl")
    bad = [g for g in gen if not g["well_formed"]]
    assert bad and all(g["reward"] == 0.0 and g["completion"] is not None for g in bad)
    rows = run.read_jsonl("round_01/candidates.jsonl")
    assert any(r["status"] == "malformed" for r in rows)
    assert run.done(Phase("eval", 1))


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_kill9_mid_phase_then_resume_equals_uninterrupted(tmp_path: Path, ref: tuple[dict, Run]) -> None:
    """The CLI run is killed with SIGKILL inside 01/solver, resumed with `coevolve resume`, and must
    equal the uninterrupted reference run (the smoke run, also made through the CLI) file for
    file. No time limit on reaching the kill point: a loaded machine is slow, not wrong."""
    _, ref_run = ref
    victim = tmp_path / "victim"
    log = tmp_path / "log"
    p = _cli(["run", "d2evo", "-c", str(SMOKE), "--run-dir", str(victim), *REF], log)
    killed_in = None
    while p.poll() is None:
        m = victim / "metrics.jsonl"
        if m.exists():
            lines = [json.loads(x) for x in m.read_text().splitlines() if x.strip().endswith("}")]
            if any(x.get("phase") == "solver" and x.get("round") == 1 and x.get("step", -1) >= 0 for x in lines):
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                killed_in = "01/solver"
                break
        time.sleep(0.02)
    assert killed_in is not None, "run finished before it could be killed"
    done = [p["key"] for p in json.loads((victim / "state.json").read_text())["phases"]]
    assert killed_in not in done and "01/buffer" in done  # really killed mid-phase
    assert (victim / "config.yaml").read_text() == (ref_run.path / "config.yaml").read_text()
    assert _cli(["resume", str(victim)], log).wait() == 0, log.read_text()[-3000:]
    a = json.loads((ref_run.path / "summary.json").read_text())
    b = json.loads((victim / "summary.json").read_text())
    assert a["eval"] == b["eval"]
    strip = lambda rows: [{k: v for k, v in x.items() if "seconds" not in k} for x in rows]  # noqa: E731
    assert strip(a["rounds"]) == strip(b["rounds"]) and a["final"] == b["final"]
    for t in (1, 2):
        for f in (
            "buffer.jsonl",
            "pool.jsonl",
            "questioner_generated.jsonl",
            "solver_rollouts.jsonl",
            "eval/items_toy.jsonl",
        ):
            rel = f"round_{t:02d}/{f}"
            assert (ref_run.path / rel).read_text() == (victim / rel).read_text(), rel
    ma = [{k: v for k, v in x.items() if k != "time" and "seconds" not in k} for x in ref_run.metrics.rows()]
    mb = [{k: v for k, v in x.items() if k != "time" and "seconds" not in k} for x in Run.open(victim).metrics.rows()]
    assert ma == mb  # no duplicated or missing metric lines after the resume


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_real_model_path_with_toy_model_as_hf_folder(tmp_path: Path, toy_base: Path) -> None:
    rows = [json.loads(x) for x in MATH12K_6.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 6
    summary, run = _run(
        tmp_path,
        "real",
        TINY
        + [
            f"model.path={toy_base}",
            f"data.source={MATH12K_6}",
            "difficulty.pool_size=null",
            "sampling.max_new_tokens=24",
            "eval.max_new_tokens=24",
            "eval.limit=4",
            "questioner.max_new_tokens=24",
            "difficulty.band.low=0.0",
            "difficulty.band.high=1.0",  # the toy model solves none: keep every row as an anchor
        ],
    )
    diff = run.read_jsonl("round_01/difficulty.jsonl")
    assert {d["task_id"] for d in diff} == {r["id"] for r in rows}
    gen = run.read_jsonl("round_01/questioner_generated.jsonl")
    assert gen and all(g["reward"] == 0.0 for g in gen if not g["well_formed"])
    first = run.read_jsonl("round_01/questioner_rollouts.jsonl")[0]
    assert "expert competition-math problem setter" in first["prompt"] and "Reference answer:" in first["prompt"]
    assert run.result(Phase("buffer", 1)).values["oracle_acc_kept"] is None  # no oracle for real data
    assert run.done(Phase("eval", 1))


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_adaptive_difficulty_run_records_samples_per_question(tmp_path: Path) -> None:
    """difficulty.estimator=adaptive (with carry in round 2) and an adaptive buffer vote: each
    record says how many answers it rests on and the phase's rollouts are their sum."""
    summary, run = _run(
        tmp_path,
        "adaptive",
        TINY
        + [
            "rounds=2",
            "difficulty.samples=8",
            "difficulty.estimator=adaptive",
            "difficulty.sequential.stages=[2,4]",
            "difficulty.carry=2",
            "difficulty.sequential.confidence=0.8",
            "buffer.voting.samples=8",
            "buffer.voting.estimator=adaptive",
            "buffer.voting.sequential.stages=[4]",
        ],
    )
    early = 0
    for t in (1, 2):
        recs = run.read_jsonl(f"round_{t:02d}/difficulty.jsonl")
        res = run.result(Phase("difficulty", t))
        assert res.rollouts == sum(r["n"] for r in recs) <= 8 * len(recs)
        assert all(r["decision"] in ("below", "inside", "above", "cap") for r in recs)
        assert all((r["n"] == 8) == (r["decision"] == "cap") for r in recs)
        assert all(r["pass_rate"] == r["correct"] / r["n"] and len(r["answers"]) == r["n"] for r in recs)
        assert res.values["stopped"]["cap"] == sum(r["decision"] == "cap" for r in recs)
        early += sum(r["n"] < 8 for r in recs)
        pool = run.read_jsonl(f"round_{t:02d}/pool.jsonl")
        assert all(r["n"] in (4, 8) and len(r["answers"]) == r["n"] for r in pool)
    assert early > 0 and run.done(Phase("eval", 2))
