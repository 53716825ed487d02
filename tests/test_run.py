"""Run folder: atomic artefacts, phase state machine, metric truncation on resume."""

from __future__ import annotations

import json

import pytest

from coevolve.errors import RunStateError
from coevolve.run import RunDir, derive_seed


def test_phases_run_once_and_results_persist(tmp_path):
    run = RunDir.create(tmp_path / "r", "recipe: grpo\n", "grpo")
    calls = []

    def fn(seed):
        calls.append(seed)
        run.log({"x/y": 1}, round=1, phase="p")
        return {"n": 3}

    assert run.run_phase("01/p", fn, master_seed=0) == {"n": 3}
    run2 = RunDir.open(tmp_path / "r")
    assert run2.is_done("01/p")
    assert run2.run_phase("01/p", fn, master_seed=0) == {"n": 3}
    assert len(calls) == 1
    assert calls[0] == derive_seed(0, "01/p")


def test_interrupted_phase_metrics_are_cut_on_resume(tmp_path):
    run = RunDir.create(tmp_path / "r", "recipe: grpo\n", "grpo")
    run.run_phase("01/a", lambda s: {"k": 1}, master_seed=0)
    n_before = len(run.metrics())

    def crash(seed):
        run.log({"half/done": 1})
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.run_phase("01/b", crash, master_seed=0)
    assert len(run.metrics()) == n_before + 1
    run2 = RunDir.open(tmp_path / "r")
    assert len(run2.metrics()) == n_before
    assert not run2.is_done("01/b")


def test_checkpoint_pointer_moves_only_with_phase(tmp_path):
    run = RunDir.create(tmp_path / "r", "recipe: grpo\n", "grpo")
    for i in range(4):
        ck = run.checkpoint_path("solver", f"r{i}")
        ck.mkdir(parents=True)
        run.run_phase(f"{i:02d}/s", lambda s, ck=ck: {"checkpoints": {"solver": str(ck)}}, master_seed=0, keep_checkpoints=2)
    assert run.latest_checkpoint("solver") == run.checkpoint_path("solver", "r3")
    left = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert left == ["solver_r2", "solver_r3"]
    state = json.loads((tmp_path / "r" / "state.json").read_text())
    assert "checkpoints" not in state["phases"]["03/s"]["result"]


def test_create_refuses_existing_and_open_refuses_non_runs(tmp_path):
    RunDir.create(tmp_path / "r", "x: 1\n", "grpo")
    with pytest.raises(RunStateError, match="resume"):
        RunDir.create(tmp_path / "r", "x: 1\n", "grpo")
    with pytest.raises(RunStateError, match="not a coevolve run folder"):
        RunDir.open(tmp_path / "nothing")


def test_derive_seed_stable():
    assert derive_seed(0, "a") == derive_seed(0, "a") != derive_seed(1, "a")
