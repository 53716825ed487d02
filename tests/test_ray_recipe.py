"""engine.kind=ray through a whole recipe (the ``ray`` lane: pytest -m ray).

A module of its own: a run with engine=ray ends its actor pool and the Ray it started when it
finishes, so it must not share a process-wide pool with the unit tests of tests/test_ray.py,
whatever order the two run in."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

torch.set_num_threads(1)


def test_recipe_round_equals_hf_prompt_scope(tmp_path, toy_overrides_30):
    """A grpo run with engine=ray writes the same rollouts, evaluation items and summary as
    engine=hf with engine.seed_scope=prompt (the pool serves every phase through ``Sampler``
    only)."""
    from coevolve.config import load_config
    from coevolve.recipes import execute

    tiny = [
        "solver.steps=2",
        "solver.prompts_per_step=3",
        "solver.group_size=4",
        "eval.heldout_size=8",
        "eval.samples=2",
        "run.progress=false",
        "sampling.max_new_tokens=24",
        "eval.max_new_tokens=24",
        "run.threads=1",
        *toy_overrides_30,
    ]
    pool_fields = ["engine.ray.num_actors=2", f"engine.ray.object_store_memory={100 * 2**20}"]
    runs = {}
    for name, extra in (("hf", ["engine=hf", "engine.seed_scope=prompt"]), ("ray", ["engine=ray"] + pool_fields)):
        runs[name] = tmp_path / name
        execute(load_config("grpo", None, tiny + extra), runs[name])
    files = sorted(p.relative_to(runs["hf"]) for p in runs["hf"].rglob("*.jsonl") if p.name != "metrics.jsonl")
    assert any("rollouts" in str(f) for f in files) and any("items_" in str(f) for f in files)
    for rel in files:
        assert (runs["ray"] / rel).read_bytes() == (runs["hf"] / rel).read_bytes(), rel
    ev = [json.loads((runs[n] / "summary.json").read_text())["eval"] for n in ("hf", "ray")]
    assert ev[0] == ev[1]
    assert (runs["ray"] / "checkpoints").is_dir()
    import ray

    assert not ray.is_initialized()  # the run's pool was closed with the run, and the Ray it started
