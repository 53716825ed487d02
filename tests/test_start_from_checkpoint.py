"""A new run whose solver starts from a checkpoint folder with its optimiser state
(``learner.resume_from_checkpoint``, TRL's ``resume_from_checkpoint``): the learner takes the
saved AdamW moments, masters and step with this run's learning rate, an optimiser state of
another model is refused by name, the folder is checked before the run folder exists, and on
the toy world the new run's base evaluation measures the checkpoint and its first update
continues the checkpoint's step count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.errors import ConfigError, RunStateError
from coevolve.preflight import check_inputs
from coevolve.rl import Learner, LearnerConfig
from test_cli import cli
from test_learner_lifecycle import make_groups, make_model

torch.set_num_threads(1)


def test_loaded_optimiser_state_keeps_its_moments_and_takes_this_configs_lr(tmp_path: Path) -> None:
    a = Learner(make_model(seed=0), LearnerConfig(lr=1e-2))
    a.step(make_groups(seed=1))
    a.save(tmp_path / "ckpt")
    saved = {k: v.clone() for k, v in a.optimizer.state_dict()["state"][0].items()}
    a.close()

    b = Learner(make_model(seed=5), LearnerConfig(lr=5e-3, betas=(0.8, 0.9)))  # other weights, other settings
    b.load(tmp_path / "ckpt")
    assert b.step_count == 1
    assert all(g["lr"] == 5e-3 and g["betas"] == (0.8, 0.9) for g in b.optimizer.param_groups)
    loaded = b.optimizer.state_dict()["state"][0]
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())  # exp_avg, exp_avg_sq, step
    b.close()

    other = Learner(make_model(seed=0, vocab=48), LearnerConfig())  # same parameter names, other shapes
    with pytest.raises(
        RunStateError,
        match=r"its optimiser state is for another model \(model.embed_tokens.weight: "
        r"\(40, 32\) saved vs \(48, 32\) here\)",
    ):
        other.load(tmp_path / "ckpt")


def _checkpoint(path: Path, world: str = "toy", lora: bool = False, optimiser: bool = True) -> Path:
    path.mkdir(parents=True)
    (path / "learner_state.json").write_text(json.dumps({"step": 3, "config": {"lora": lora}}))
    if optimiser:
        (path / "learner_optim.pt").write_bytes(b"")
    (path / "coevolve.json").write_text(json.dumps({"format": 1, "world": world}))
    return path


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing", "no such folder"),
        ("no_optimiser", "the folder has no learner_optim.pt, so no optimiser state to start from"),
        ("real_world", "the checkpoint was trained in the real world, this run is in the toy world"),
        ("lora", "the checkpoint was trained with learner.lora=true, this run has learner.lora=false"),
    ],
)
def test_checkpoint_to_start_from_is_checked_before_the_run(tmp_path: Path, case: str, needle: str) -> None:
    ckpt = tmp_path / "ckpt"
    if case != "missing":
        _checkpoint(
            ckpt, world="real" if case == "real_world" else "toy", lora=case == "lora", optimiser=case != "no_optimiser"
        )
    cfg = load_config("grpo", None, [f"learner.resume_from_checkpoint={ckpt}"])
    with pytest.raises(ConfigError, match=f"learner.resume_from_checkpoint={ckpt}: {needle}"):
        check_inputs(cfg)


def test_a_refused_checkpoint_leaves_no_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = cli("run", "grpo", f"learner.resume_from_checkpoint={tmp_path / 'nowhere'}", "--run-dir", str(run))
    assert r.returncode == 2 and "learner.resume_from_checkpoint=" in r.stderr and "no such folder" in r.stderr, (
        r.stderr
    )
    assert not run.exists()


TINY = [
    "solver.prompts_per_step=4",
    "solver.group_size=4",
    "eval.heldout_size=12",
    "eval.samples=2",
    "sampling.max_new_tokens=40",
    "eval.max_new_tokens=40",
    "run.progress=false",
    "run.threads=1",
]


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")
def test_toy_run_starts_from_another_runs_checkpoint(tmp_path: Path) -> None:
    """A 1-step toy grpo run, then a new 1-step run from its solver checkpoint with another
    learning rate: the new run's base evaluation is the first run's final one (same weights,
    same evaluation seed), its update is the checkpoint's step 2 at the new rate."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli("run", "grpo", *TINY, "solver.steps=1", "--run-dir", str(first)).returncode == 0
    ckpt = first / "checkpoints" / "solver_r01"
    r = cli(
        "run",
        "grpo",
        *TINY,
        "solver.steps=1",
        "learner.lr=1e-5",
        f"learner.resume_from_checkpoint={ckpt}",
        "--run-dir",
        str(second),
    )
    assert r.returncode == 0, r.stderr
    state = {
        run: {p["key"]: p for p in json.loads((run / "state.json").read_text())["phases"]} for run in (first, second)
    }
    assert state[second]["base/eval"]["values"] == state[first]["01/eval"]["values"]
    assert json.loads((second / "checkpoints" / "solver_r01" / "learner_state.json").read_text())["step"] == 2
    rows = [json.loads(x) for x in (second / "metrics.jsonl").read_text().splitlines()]
    step = next(x for x in rows if x.get("phase") == "solver" and x.get("step") == 0)
    assert step["solver/step"] == 2.0 and step["solver/lr"] == 1e-5
