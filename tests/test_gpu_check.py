"""``benchmarks/gpu_check.py --dry-run``: the device check's own code path, on CPU with tiny
shapes, so the script a GPU machine runs cannot rot unseen. (The recipes part is the recipes'
own code, tested by their tests; it is left out here for time.)"""

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


def test_dry_run_prints_a_result_per_part_and_writes_the_json(gpu_check, tmp_path, capsys):
    rc = gpu_check.main(
        [
            "--dry-run",
            "--out",
            str(tmp_path),
            "--budget",
            "0",
            "--part",
            "rates",
            "--part",
            "learner",
            "--part",
            "numerics",
            "--part",
            "sampler",
        ]
    )
    lines = [
        json.loads(ln.removeprefix("RESULT "))
        for ln in capsys.readouterr().out.splitlines()
        if ln.startswith("RESULT ")
    ]
    assert [r["part"] for r in lines] == ["rates", "learner", "numerics", "sampler", "summary"]
    bad = [r for r in lines if not r["ok"]]
    assert rc == 0 and not bad, bad
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["part"] for r in saved["results"]] == ["rates", "learner", "numerics", "sampler"] and saved["dry_run"]
    learner = saved["results"][1]
    assert learner["micro_batches"] >= 3 and learner["checkpointing"] and learner["chunk"] == 16
    assert isinstance(learner["plan"], dict) and learner["plan"]["micro_batch_tokens"] > 0
    numerics = saved["results"][2]
    assert all(numerics["checks"].values()) and numerics["micro_batches"]["budget"] >= 3
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
