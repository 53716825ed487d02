"""DiagEvo recipe: configs, smoke runs of every ablation, the LLM diagnoser on the toy model,
kill -9 + resume equivalence, and ``coevolve memory``.

Every run uses the default toy base (the ``toy_base`` session fixture): it writes valid questions,
so the pool, the filters and the memory have something to work on whatever ran before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.errors import ConfigError, RunStateError
from coevolve.lab.memory_tree import memory_command
from coevolve.memory import ErrorMemory
from coevolve.run import Run

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "diagevo_smoke.yaml"
# extra shrinking for the many smoke runs of this file (one round is enough to exercise a switch)
SMALL = ["memory.embedder=hash", "eval.heldout_size=20", "pool.size=32", "solver.steps=1"]
TINY = ["rounds=1", *SMALL]


def _cli(args: list[str], log: Path) -> subprocess.Popen:
    """``coevolve`` in a fresh process (the smoke reference, the killed run and its resume),
    its output appended to ``log`` (a file, not a pipe nobody reads while the run goes on)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    with open(log, "a") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "coevolve", *args], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT
        )


def _cli_ok(args: list[str], log: Path) -> None:
    assert _cli(args, log).wait() == 0, log.read_text()[-3000:]


def _metrics(rd: Path) -> list[dict]:
    """metrics.jsonl without the fields that measure time."""
    rows = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if k != "time" and "seconds" not in k} for m in rows]


def _run(run_dir: Path, overrides: list[str], base: Path = SMOKE) -> dict:
    from coevolve.recipes import execute

    return execute(load_config("diagevo", base, overrides), run_dir)


def test_shipped_configs_load_and_document_paper_defaults():
    cfg = load_config("diagevo", ROOT / "configs" / "diagevo.yaml")
    v = cfg.pool.voting
    assert cfg.rounds == 5 and v.tau == 1.6 and (v.band.low, v.band.high) == (0.3, 0.8) and v.filter == "dual"
    assert cfg.memory.theta_up == 0.8 and cfg.memory.k == 1.0 and cfg.challenger.reward.kind == "plateau"
    assert cfg.sampling.max_new_tokens == 48  # toy solver cap (prototype GRPO: max_new 48)
    load_config("diagevo", SMOKE)
    from coevolve.lab.study import ablations

    grid = ablations("diagevo")
    assert {
        "full",
        "frozen_challenger",
        "explore_only",
        "targeted_only",
        "no_filter",
        "absolute_filter",
        "random_pair",
        "llm_diagnoser",
        "no_memory",
    } <= set(grid)
    for name, v in grid.items():
        load_config("diagevo", ROOT / "configs" / "diagevo.yaml", list(v.overrides))
    for name, section in type(cfg).model_fields.items():
        sub = getattr(cfg, name)
        for fname, f in getattr(type(sub), "model_fields", {}).items():
            assert f.description, f"{name}.{fname} has no description"


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match="pool.voting.filter"):
        load_config("diagevo", None, ["pool.voting.filter=sometimes"])
    with pytest.raises(ConfigError, match="pool.voting.band"):
        load_config("diagevo", None, ["pool.voting.band.low=0.9", "pool.voting.band.high=0.5"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("diagevo", None, ["memory.nope=1"])


def test_memory_command(tmp_path):
    with pytest.raises(RunStateError, match="no round_NN/memory.json"):
        memory_command(tmp_path)
    m = ErrorMemory()
    n = m.add_node("addition")
    c = m.add_cause("dropped the carry into the next column", n.id)
    m.record_failure(c.id, 1, 3)
    m.fix_reference(1)
    m.save(tmp_path / "round_01" / "memory.json")
    m.record_failure(c.id, 2, 1)
    m.save(tmp_path / "round_02" / "memory.json")
    (tmp_path / "config.yaml").write_text("memory:\n  k: 2.0\n")
    out = memory_command(tmp_path)
    assert "after round 2 (latest)" in out and "f=4" in out and "epsilon=0.600" in out  # 3/(3+4/2)
    assert "f=3" in memory_command(tmp_path, 1)
    with pytest.raises(RunStateError, match="available: 1, 2"):
        memory_command(tmp_path, 7)


@pytest.fixture(scope="module")
def smoke_ref(tmp_path_factory, toy_overrides) -> tuple[Path, dict]:
    """One uninterrupted 2-round smoke run, shared by the artefact checks and as the reference
    of the kill -9 test (same overrides), so the file pays for it once. Run through the CLI in a
    fresh process, as the killed run and its resume are: a run in this process would inherit
    whatever state earlier tests left behind."""
    rd = tmp_path_factory.mktemp("smoke") / "run"
    _cli_ok(["run", "diagevo", "-c", str(SMOKE), *toy_overrides, *SMALL, "--run-dir", str(rd)], rd.parent / "log")
    Run.open(rd)  # as the resumed victim is opened: cuts nothing from a finished run
    return rd, json.loads((rd / "summary.json").read_text())


@pytest.mark.slow
def test_smoke_run_artefacts_and_metrics(smoke_ref):
    rd, summary = smoke_ref
    assert summary["recipe"] == "diagevo" and len(summary["rounds"]) == 2
    for t in (1, 2):
        d = rd / f"round_{t:02d}"
        for f in (
            "candidates.jsonl",
            "pool.jsonl",
            "kept.jsonl",
            "optimisation.jsonl",
            "diagnoses.jsonl",
            "memory.json",
            "challenger_questions.jsonl",
            "eval/items_toy.jsonl",
        ):
            assert (d / f).is_file(), f
        ErrorMemory.load(d / "memory.json").check()
    r1 = summary["rounds"][0]
    for key in (
        "challenger/epsilon",
        "pool/labelled",
        "pool/kept",
        "memory/causes",
        "memory/next_epsilon",
        "memory/diagnoser_success_rate",
        "phase/solver/seconds",
    ):
        assert key in r1, key
    pool = [json.loads(x) for x in (rd / "round_01" / "pool.jsonl").read_text().splitlines()]
    assert r1["pool/labelled"] == len(pool) and r1["pool/kept"] == sum(p["kept"] for p in pool)
    cands = [json.loads(x) for x in (rd / "round_01" / "candidates.jsonl").read_text().splitlines()]
    assert len(cands) == 32 and r1["pool/generated"] == 32
    assert pool, "the default toy base labelled no question in round 1"
    # the dual filter keeps a subset of the absolute one on the same pool
    assert 0 < r1["pool/kept_dual"] <= r1["pool/kept_absolute"] <= r1["pool/kept_none"]
    metrics = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    assert any("phase/challenger/rollouts" in m for m in metrics)
    assert any("memory/F_t" in m for m in metrics)
    assert "final" in summary["eval"] and "base" in summary["eval"]
    # promotion evidence (memory.promotion_p1=updated, the default): every targeted candidate of
    # the round re-measured with the solver after the round's update, the mean logged
    for t in (1, 2):
        pool = [json.loads(x) for x in (rd / f"round_{t:02d}" / "pool.jsonl").read_text().splitlines()]
        targeted = [p for p in pool if p["meta"]["cause_ids"]]
        rem = [json.loads(x) for x in (rd / f"round_{t:02d}" / "promotion_p1.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rem] == [p["id"] for p in targeted]
        assert all(r["p1_construction"] == p["p1"] and 0.0 <= r["p1_updated"] <= 1.0 for r, p in zip(rem, targeted))
        rt = summary["rounds"][t - 1]
        assert rt["memory/targeted_questions"] == len(rem)
        assert rt["memory/promotions"] == len([x for x in rt["memory/promoted_ids"].split(",") if x])
        if rem:
            assert rt["memory/targeted_p1_mean"] == pytest.approx(
                sum(r["p1_updated"] for r in rem) / len(rem), abs=1e-3
            )
            assert any("memory/targeted_p1_mean" in m and m["round"] == t for m in metrics)
    assert summary["rounds"][0]["memory/targeted_questions"] == 0  # round 1 plans from an empty memory
    assert summary["rounds"][1]["memory/targeted_questions"] > 0, "round 2 should target round-1 causes"


# Several switches per run (each switch still runs and is checked; 3 runs instead of 6). One
# round is enough to exercise a switch; the LLM diagnoser run doubles as the 'construction'
# promotion-source run.
ABLATIONS = [
    ["challenger.frozen=true", "memory.schedule=explore_only"],
    ["memory.schedule=targeted_only", "memory.stitching=random_pair", "pool.voting.filter=none"],
    ["filter=absolute", "challenger.reward.kind=rzero", "memory.stitching=off"],
]


@pytest.mark.slow
@pytest.mark.parametrize("ovs", ABLATIONS, ids=lambda o: ",".join(o))
def test_ablations_run(tmp_path, toy_overrides, ovs):
    s = _run(tmp_path / "run", toy_overrides + TINY + ovs)
    r = s["rounds"][0]
    if "challenger.frozen=true" in ovs:
        assert r["challenger/skipped"] is True and r["challenger/rollouts"] == 0
    else:
        assert r["challenger/rollouts"] > 0
    if "memory.schedule=explore_only" in ovs:
        assert r["pool/targeted_share"] == 0.0
    pool = [json.loads(x) for x in (tmp_path / "run" / "round_01" / "pool.jsonl").read_text().splitlines()]
    kept = sum(p["kept"] for p in pool)
    if "pool.voting.filter=none" in ovs:
        assert kept == r["pool/kept_none"] == sum(p["label"] is not None for p in pool)
    if "challenger.reward.kind=rzero" in ovs:  # min(p1, 1-p1) minus a repetition penalty; -1 minus it if malformed
        recs = [
            json.loads(x)
            for x in (tmp_path / "run" / "round_01" / "challenger_questions.jsonl").read_text().splitlines()
        ]
        assert any(r["question"] for r in recs)
        assert all(r["reward"] <= (min(r["p1"], 1 - r["p1"]) + 1e-9 if r["question"] else -1.0) for r in recs)
    if "filter=absolute" in ovs:
        assert kept == r["pool/kept_absolute"] and all(0.3 <= p["p1"] <= 0.8 for p in pool if p["kept"])


@pytest.mark.slow
def test_llm_diagnoser_end_to_end_on_toy_model(tmp_path, toy_overrides):
    """The tiny model cannot write JSON: every diagnosis is garbage, parsed, counted, skipped."""
    rd = tmp_path / "run"
    s = _run(
        rd,
        toy_overrides
        + TINY
        + ["diagnoser.kind=llm", "diagnoser.max_new_tokens=40", "memory.promotion_p1=construction"],
    )
    r = s["rounds"][0]
    assert r["memory/diagnoser_calls"] == r["memory/diagnoses_attempted"] > 0
    assert r["memory/diagnoser_ok"] + r["memory/diagnoser_garbage"] == r["memory/diagnoser_calls"]
    assert r["memory/causes"] == r["memory/diagnoser_ok"] - r["memory/duplicates"] - r["memory/matched_known"]
    assert not (rd / "round_01" / "promotion_p1.jsonl").exists()  # construction p1: nothing re-measured


# the smoke sizes of configs/diagevo_smoke.yaml (+ TINY), for presets that start from full sizes
SMOKE_SIZES = [
    "challenger.steps=1",
    "challenger.prompts_per_step=8",
    "challenger.group_size=2",
    "challenger.reward.samples=4",
    "pool.voting.samples=4",
    "solver.prompts_per_step=8",
    "solver.group_size=4",
    "eval.samples=0",
    "run.progress=false",
    "run.threads=1",
    *TINY,
]


@pytest.mark.slow
def test_rzero_preset_loads_and_runs_without_memory(tmp_path, toy_overrides):
    cfg = load_config("diagevo", ROOT / "configs" / "rzero.yaml")
    v = cfg.pool.voting
    assert (cfg.challenger.reward.kind, cfg.memory.schedule, v.filter, cfg.rounds) == (
        "rzero",
        "explore_only",
        "absolute",
        3,
    )
    assert (v.band.low, v.band.high, cfg.memory.enabled) == (0.3, 0.8, False)
    rd = tmp_path / "run"
    s = _run(rd, toy_overrides + SMOKE_SIZES, base=ROOT / "configs" / "rzero.yaml")
    r = s["rounds"][0]
    assert r["memory/skipped"] is True and r["memory/causes"] == 0 and r["memory/rollouts"] == 0
    assert r["pool/targeted_share"] == 0.0 and r["challenger/rollouts"] > 0
    assert (rd / "round_01" / "diagnoses.jsonl").read_text() == ""
    assert not (rd / "round_01" / "promotion_p1.jsonl").exists()
    assert ErrorMemory.load(rd / "round_01" / "memory.json").causes == {}


def _state_done(rd: Path) -> list[str]:
    try:
        return [p["key"] for p in json.loads((rd / "state.json").read_text())["phases"]]
    except (OSError, json.JSONDecodeError, KeyError):
        return []


@pytest.mark.slow
def test_kill9_resume_matches_uninterrupted_run(tmp_path, toy_overrides, smoke_ref):
    """The CLI run is killed with SIGKILL once 01/pool is marked done (inside 01/solver or later),
    resumed with ``coevolve resume``, and must equal the uninterrupted smoke run, also made
    through the CLI, file for file. No time limit on reaching the kill point: a loaded machine is
    slow, not wrong (the per-test timeout names a run that hangs)."""
    ref = smoke_ref[0]
    victim = tmp_path / "victim"
    log = tmp_path / "log"
    proc = _cli(["run", "diagevo", "-c", str(SMOKE), *toy_overrides, *SMALL, "--run-dir", str(victim)], log)
    while "01/pool" not in _state_done(victim):
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_at_kill = _state_done(victim)
    assert "02/eval" not in done_at_kill
    assert (victim / "config.yaml").read_text() == (ref / "config.yaml").read_text()
    _cli_ok(["resume", str(victim)], log)
    for t in (1, 2):
        for f in (
            "kept.jsonl",
            "optimisation.jsonl",
            "promotion_p1.jsonl",
            "diagnoses.jsonl",
            "memory.json",
            "eval/items_toy.jsonl",
        ):
            a = (ref / f"round_{t:02d}" / f).read_text()
            b = (victim / f"round_{t:02d}" / f).read_text()
            assert a == b, f"round {t} {f} differs after kill -9 + resume (killed after {done_at_kill})"
    a, b = (json.loads((d / "summary.json").read_text()) for d in (ref, victim))
    strip = lambda rows: [{k: v for k, v in x.items() if "seconds" not in k} for x in rows]  # noqa: E731
    assert a["eval"] == b["eval"] and strip(a["rounds"]) == strip(b["rounds"])
    assert _metrics(victim) == _metrics(ref)  # nothing logged twice, nothing lost


@pytest.mark.slow
def test_adaptive_pool_vote_counts_the_answers_drawn(tmp_path, toy_overrides):
    """pool.voting.estimator=adaptive (cap 16, one interim look at 8, 80 %): each pool row says how
    many answers its vote rests on, and the pool phase's rollouts are the writes plus those."""
    ovs = [
        "pool.voting.estimator=adaptive",
        "pool.voting.samples=16",
        "pool.voting.sequential.stages=[8]",
        "pool.voting.sequential.confidence=0.8",
    ]
    _run(tmp_path / "run", toy_overrides + TINY + ovs)
    run = Run.open(tmp_path / "run")
    pool = run.read_jsonl("round_01/pool.jsonl")
    assert pool and all(p["n"] in (8, 16) and len(p["answers"]) == p["n"] for p in pool)
    assert any(p["n"] == 8 for p in pool)  # unanimous votes are decided after 8 at 80 %
    from coevolve.run import Phase

    assert run.result(Phase("pool", 1)).rollouts == 32 + sum(p["n"] for p in pool)
