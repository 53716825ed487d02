"""Self-play on a real LLM whose premise holds: SmolLM2-135M-Instruct warm-started on worked answers
of the two easiest arith levels (a cut-down ``coevolve model smollm2-arith``: 40 steps of 8), then
one D²Evo round of ``configs/smollm2_arith/d2evo.yaml`` cut to fit CI.

The mechanics tests of ``test_real_model.py`` run on the plain build, whose majority vote is wrong
more often than right; here the vote must be right (the buffer's kept pseudo-labels against the
oracle above a floor) and the solver's reward, on a fixed labelled set, must rise. Both read
figures the run records (summary.json's premise, metrics.jsonl); nothing is timed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.run import Run

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # a warm start and a D²Evo round of a 135M model: a few minutes
ROOT = Path(__file__).resolve().parents[1]
KEPT_FLOOR = 0.6  # the papers' majority votes are right 65-75 % of the time; below 0.5 the premise fails


@pytest.fixture(scope="module")
def warm(smollm2: Path, tmp_path_factory) -> Path:
    pytest.importorskip("trl")
    from coevolve.warmstart import WarmStartConfig, build_warm_start

    cfg = WarmStartConfig(
        base=str(smollm2), steps=40, batch_size=8, warmup_steps=4, levels=[1, 2], drift_share=0.0, variant_share=0.0
    )
    return build_warm_start(tmp_path_factory.mktemp("warm") / "smollm2-arith-ci", cfg, say=lambda _: None)


def test_d2evo_round_on_a_warm_started_model(warm: Path, tmp_path: Path) -> None:
    from coevolve.recipes import execute

    cfg = load_config(
        "d2evo",
        ROOT / "configs" / "smollm2_arith" / "d2evo.yaml",
        [
            f"model.path={warm}",
            "data.levels=[1,2]",
            "rounds=1",
            "difficulty.pool_size=16",
            "difficulty.samples=8",
            "questioner.steps=1",
            "questioner.prompts_per_step=4",
            "buffer.generate=16",
            "solver.steps=8",
            "solver.prompts_per_step=4",
            "solver.group_size=4",
            "learner.lr=3e-5",
            "sampling.max_new_tokens=64",
            "eval.benches=[arith]",
            "eval.limit=8",
            "eval.samples=0",
            "eval.max_new_tokens=64",
            "run.progress=false",
            "run.threads=1",
        ],
    )
    summary = execute(cfg, tmp_path / "run")
    kept = summary["premise"][0]["kept_label_accuracy"]
    assert kept is not None and kept >= KEPT_FLOOR, summary["premise"]
    rows = [r for r in Run.open(tmp_path / "run").read_jsonl("metrics.jsonl") if "solver/reward_mean" in r]
    rewards = [r["solver/reward_mean"] for r in rows]
    assert len(rewards) == 8
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3, rewards
