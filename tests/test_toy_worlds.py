"""Named toy worlds: the fixed labelled set (``data.limit`` in the toy world) and the
``configs/toy_scarce`` preset built on it (docs/results/toy_worlds.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import yaml

from coevolve.config import load_config
from coevolve.errors import DataError
from coevolve.run import Run
from coevolve.world.toy import heldout_questions, labelled_set

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SCARCE = ROOT / "configs" / "toy_scarce"


def test_labelled_set_is_fixed_distinct_and_outside_the_heldout_set():
    a, b = labelled_set(64), labelled_set(64)
    assert [t.question for t in a] == [t.question for t in b]  # no hidden state: same arguments, same labels
    qs = [t.question for t in a]
    assert len(qs) == 64 and len(set(qs)) == 64
    assert not set(qs) & heldout_questions()
    assert {t.features["level"] for t in a} == {1, 2, 3, 4}
    assert [t.question for t in labelled_set(64, seed=1)] != qs
    assert {t.features["level"] for t in labelled_set(30, levels=[1, 2])} == {1, 2}
    assert all(t.answer == str(eval(t.question)) for t in a)  # gold labels (toy questions are Python arithmetic)
    # L1 has 255 problems, 125 of them held out: 131 distinct ones cannot be found
    with pytest.raises(DataError, match="data.limit"):
        labelled_set(131, levels=[1])


def test_world_with_a_limit_draws_only_from_the_set_and_defaults_draw_fresh():
    from coevolve.world import make_world

    said: list[str] = []
    world = make_world(load_config("grpo", None, ["data.limit=16"]), None, said.append)
    fixed = {t.question for t in labelled_set(16)}
    rng = random.Random(5)
    drawn = {t.question for _ in range(20) for t in world.draw(rng, 16)}
    assert drawn == fixed and "fixed labelled set of 16" in said[0]
    assert {t.question for t in world.pool(random.Random(0), 400)} == fixed
    fresh = make_world(load_config("grpo"), None, said.append)
    assert fresh.tasks is None and len({t.question for t in fresh.draw(random.Random(5), 64)} - fixed) > 40


def test_toy_scarce_presets_load_and_share_one_world():
    files = {f.stem: f for f in sorted(SCARCE.glob("*.yaml"))}
    assert set(files) == {"grpo", "d2evo", "diagevo", "rzero"}
    cfgs = {name: load_config(None, f) for name, f in files.items()}
    assert {c.data.limit for c in cfgs.values()} == {64} and {c.data.limit_seed for c in cfgs.values()} == {0}
    assert {(c.eval.heldout_size, c.eval.samples) for c in cfgs.values()} == {(500, 8)}
    # methods are their shipped defaults: only the world's lines differ from configs/<recipe>.yaml
    for name, cfg in cfgs.items():
        base = load_config(None, ROOT / "configs" / f"{name}.yaml")
        mine, theirs = cfg.model_dump(), base.model_dump()
        for d in (mine, theirs):
            d.pop("data"), d.pop("eval")
        assert mine == theirs, name
        assert base.data.limit is None  # the default world is unchanged
    assert yaml.safe_load((SCARCE / "rzero.yaml").read_text())["recipe"] == "diagevo"


@pytest.mark.slow
def test_grpo_trains_only_on_the_labelled_set_and_counts_its_labels(tmp_path, toy_overrides_30):
    from coevolve.recipes import execute

    cfg = load_config(
        "grpo",
        SCARCE / "grpo.yaml",
        [
            "data.limit=6",
            "solver.steps=3",
            "solver.prompts_per_step=4",
            "solver.group_size=2",
            "eval.heldout_size=8",
            "eval.samples=0",
            "run.progress=false",
            "sampling.max_new_tokens=24",
            "eval.max_new_tokens=24",
            *toy_overrides_30,
        ],
    )
    summary = execute(cfg, tmp_path / "r")
    run = Run.open(tmp_path / "r")
    trained = {r["prompt"] for r in run.read_jsonl("round_01/solver_rollouts.jsonl")}
    allowed = {f"Q:{t.question}=\nA:" for t in labelled_set(6)}
    assert trained <= allowed and len(trained) == 6  # 12 draws of a 6-question set: every one, passes over it
    assert summary["compute"]["train"]["labels"] == 6


def test_heldout_size_beyond_the_l1_family_is_refused_not_searched_forever():
    from coevolve.errors import ConfigError
    from coevolve.world.toy import heldout_tasks

    assert len(heldout_tasks(1020)) == 1020
    with pytest.raises(DataError, match="eval.heldout_size=1021"):
        heldout_tasks(1021)
    with pytest.raises(ConfigError, match="heldout_size"):
        load_config("grpo", None, ["eval.heldout_size=2000"])
