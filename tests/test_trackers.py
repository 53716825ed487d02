"""Live metrics: TensorBoard event files and an offline W&B run carry the same namespaced keys as
metrics.jsonl, against one global training step, one run per run folder, and a resumed run continues
the same curves (what the interrupted phase logged is dropped, as in metrics.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config

torch.set_num_threads(1)
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

TINY = [
    "solver.steps=2",
    "solver.prompts_per_step=4",
    "solver.group_size=4",
    "eval.heldout_size=8",
    "eval.samples=0",
    "run.progress=false",
    "sampling.max_new_tokens=40",
    "eval.max_new_tokens=40",
    "run.trackers=[jsonl,tensorboard,wandb]",
]


def _tb_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
def test_tensorboard_and_wandb_follow_metrics_jsonl_across_a_resume(tmp_path, monkeypatch, toy_overrides_30):
    cfg = load_config("grpo", None, TINY + toy_overrides_30)
    import coevolve.loop as loop
    from coevolve.recipes import execute

    real = loop.local_reward
    calls = {"n": 0}

    def crashing(spec, grader, writer=None):
        fn = real(spec, grader, writer)

        def reward(step, tasks, comps):
            calls["n"] += 1
            if calls["n"] == 2:  # the interrupted phase logged its first step, then dies
                raise KeyboardInterrupt
            return fn(step, tasks, comps)

        return reward

    monkeypatch.setattr(loop, "local_reward", crashing)
    with pytest.raises(KeyboardInterrupt):
        execute(cfg, tmp_path / "run")
    monkeypatch.setattr(loop, "local_reward", real)
    execute(cfg, tmp_path / "run")  # resume in the same folder
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    tb = _tb_scalars(tmp_path / "run")
    x = [sum(1 for r in rows[:i] if "step" in r) for i in range(len(rows))]  # training steps before the row
    for key in ("solver/reward_mean", "solver/loss", "eval/toy/greedy", "phase/solver/seconds"):
        want = [(x[i], float(r[key])) for i, r in enumerate(rows) if key in r]
        got = [(s, v) for s, v in tb[key]]
        assert [s for s, _ in got] == [s for s, _ in want], key  # interrupted steps purged, no duplicates
        assert all(abs(a - b) < 1e-6 for (_, a), (_, b) in zip(got, want)), key
    assert [s for s, _ in tb["eval/toy/greedy"]] == [0, 2] and [s for s, _ in tb["solver/reward_mean"]] == [0, 1]
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) >= 2 and all(p.name.endswith(f"run-{state['tracker_id']:08x}") for p in runs)  # one W&B run id
