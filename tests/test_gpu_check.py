"""``benchmarks/gpu_check.py --dry-run``: the device check's own code path, on CPU with tiny
shapes, every part, so the script a GPU machine runs cannot rot unseen; and the configs every
part builds, in milliseconds (a recipe whose config no longer validates fails here first)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("gpu_check", None)


def test_every_part_builds_its_configs(gpu_check, tmp_path):
    ctx = gpu_check.Ctx(gpu_check.DRY, tmp_path)
    built = gpu_check.part_configs(ctx)
    assert set(built) == {"learner", "offload", "wake", *(f"recipes/{r}" for r in gpu_check.RECIPES)}
    assert built["offload"].offload_optimizer and not built["learner"].offload_optimizer
    assert built["wake"].vllm_share is not None  # the share a vLLM engine would start and wake with
    assert built["recipes/d2evo"].run.keep_checkpoints >= 2  # D²Evo reads π_S^(t-1) from its checkpoint


@pytest.mark.slow
def test_the_dry_run_prints_a_result_per_part_and_writes_them(gpu_check, tmp_path, capsys):
    rc = gpu_check.main(["--dry-run", "--out", str(tmp_path), "--budget", "0"])
    lines = [
        json.loads(ln.removeprefix("RESULT "))
        for ln in capsys.readouterr().out.splitlines()
        if ln.startswith("RESULT ")
    ]
    parts = list(gpu_check.PARTS)
    assert parts == ["rates", "learner", "wake", "offload", "numerics", "lora", "sampler", "recipes"]
    assert [r["part"] for r in lines] == [*parts, "summary"]
    bad = [r for r in lines if not r["ok"]]
    assert rc == 0 and not bad, bad
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["part"] for r in saved["results"]] == parts and saved["dry_run"]
    assert [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()] == lines[:-1]
    res = {r["part"]: r for r in saved["results"]}
    learner = res["learner"]
    assert learner["micro_batches"] >= 3 and learner["checkpointing"] and learner["chunk"] == 16
    assert isinstance(learner["plan"], dict) and learner["plan"]["micro_batch_tokens"] > 0
    assert all(res["numerics"]["checks"].values()) and res["numerics"]["micro_batches"]["budget"] >= 3
    assert res["offload"]["masters_on"] == "cpu" and res["offload"]["micro_batches"] >= 2
    assert res["lora"]["checks"]["adapters_trained"] and res["lora"]["logits_rel_err"] < 2e-2
    assert res["wake"]["derived_share"] > 0
    assert all(res["recipes"][r]["ok"] for r in gpu_check.RECIPES), res["recipes"]
    assert saved["results"][0]["requirements"]["pydantic"] != "missing"


def test_a_failing_part_is_reported_and_the_next_one_runs(gpu_check, tmp_path, capsys, monkeypatch):
    def boom(ctx):
        raise RuntimeError("no such kernel")

    monkeypatch.setitem(gpu_check.PARTS, "rates", boom)
    rc = gpu_check.main(["--dry-run", "--out", str(tmp_path), "--part", "rates", "--part", "sampler"])
    lines = [
        json.loads(ln.removeprefix("RESULT "))
        for ln in capsys.readouterr().out.splitlines()
        if ln.startswith("RESULT ")
    ]
    assert rc == 1
    assert lines[0]["part"] == "rates" and not lines[0]["ok"] and "RuntimeError: no such kernel" in lines[0]["error"]
    assert lines[1]["part"] == "sampler" and lines[1]["ok"]
    assert lines[-1]["part"] == "summary" and not lines[-1]["ok"]


def test_parts_after_the_budget_are_skipped(gpu_check, tmp_path, capsys):
    rc = gpu_check.main(["--dry-run", "--out", str(tmp_path), "--budget", "1e-9", "--part", "rates"])
    line = json.loads(capsys.readouterr().out.splitlines()[0].removeprefix("RESULT "))
    assert rc == 1 and line == {"part": "rates", "ok": False, "error": "skipped: time budget spent"}
