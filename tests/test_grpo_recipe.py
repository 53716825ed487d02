"""The grpo recipe end to end on a tiny toy base: artefacts, summary, resume, JSONL data with
broken rows, and the real-model path (toy model folder + JSONL of question/answer rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.errors import DataError
from coevolve.run import Phase, Run

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # grpo runs end to end

TINY = [
    "solver.steps=2",
    "solver.prompts_per_step=4",
    "solver.group_size=4",
    "eval.heldout_size=12",
    "eval.samples=2",
    "run.progress=false",
    "sampling.max_new_tokens=40",
    "eval.max_new_tokens=40",
]


def _run(tmp: Path, toy: list[str], extra: list[str]) -> tuple[dict, Run]:
    from coevolve.lab.report import write_report
    from coevolve.recipes import execute

    summary = execute(load_config("grpo", None, TINY + toy + extra), tmp, report=write_report)
    return summary, Run.open(tmp)


def test_grpo_toy_artefacts_and_resume(tmp_path, toy_overrides_30):
    summary, run = _run(tmp_path / "r", toy_overrides_30, [])
    ev = summary["eval"]
    for tag in ("base", "final"):
        assert set(ev[tag]["toy"]) >= {"greedy", "sampled"}
        assert 0.0 <= ev[tag]["toy"]["greedy"] <= 1.0
    rows = run.read_jsonl("round_01/solver_rollouts.jsonl")
    assert len(rows) == 2 * 4 and all(len(r["completions"]) == 4 and len(r["rewards"]) == 4 for r in rows)
    assert all(r["label"] is not None for r in rows)
    ckpt = run.checkpoint("solver")
    assert (ckpt / "config.json").exists() and (ckpt / "tokenizer.json").exists()
    meta = json.loads((ckpt / "coevolve.json").read_text())
    assert meta["world"] == "toy" and meta["provenance"]["libraries"]["torch"] == torch.__version__
    prov = json.loads((run.path / "provenance.json").read_text())
    assert prov["created"]["coevolve"] and prov["created"]["libraries"]["transformers"] and prov["resumed"] == []
    steps = [m for m in run.metrics.rows() if m.get("phase") == "solver" and "step" in m]
    assert [m["step"] for m in steps] == [0, 1]
    assert all("solver/frac_zero_std" in m and "solver/loss" in m and "solver/acc_mean" in m for m in steps)
    assert [r.key for r in run.state.records()] == ["base/eval", "01/solver", "01/eval"]
    items = run.read_jsonl("round_01/eval/items_toy.jsonl")
    assert len(items) == 12 and (run.path / "round_01" / "eval" / "results.json").exists()
    assert (run.path / "report" / "report.md").exists() and summary["rollouts"] > 0
    # resuming a finished run does nothing and returns the same summary
    from coevolve.recipes import execute

    again = execute(load_config("grpo", run.path / "config.yaml"), run.path)
    assert again["eval"] == summary["eval"]
    assert len(Run.open(run.path).metrics.rows()) == len(run.metrics.rows())


def test_grpo_on_jsonl_with_broken_rows(tmp_path, toy_overrides_30):
    data = tmp_path / "d.jsonl"
    good = [{"question": f"{a}+{b}", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (5, 6), (7, 1)]]
    lines = (
        [json.dumps(r) for r in good[:2]]
        + ["{broken", json.dumps({"question": "2+2"})]
        + [json.dumps(r) for r in good[2:]]
    )
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"d.jsonl:3"):
        _run(tmp_path / "a", toy_overrides_30, [f"data.source={data}"])
    summary, run = _run(tmp_path / "b", toy_overrides_30, [f"data.source={data}", "data.on_error=skip"])
    labels = {r["label"] for r in run.read_jsonl("round_01/solver_rollouts.jsonl")}
    assert labels <= {"3", "7", "11", "8"}


def test_grpo_real_model_path(tmp_path, toy_overrides_30, toy_base_30):
    """A model folder given by path (the toy model stands in for a real HF checkpoint)."""
    folder = toy_base_30
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"question": f"{a}+{a}", "answer": str(2 * a)}) + "\n" for a in range(1, 9)))
    summary, run = _run(
        tmp_path / "r", toy_overrides_30, [f"model.path={folder}", f"data.source={data}", "eval.benches=[toy]"]
    )
    assert "toy" in summary["eval"]["final"]
    assert run.done(Phase("solver", 1)) and run.done(Phase("eval", 1))
    first = run.read_jsonl("round_01/solver_rollouts.jsonl")[0]
    assert first["prompt"].startswith("Please reason step by step")  # the papers' prompt, not the toy's
    items = run.read_jsonl("round_01/eval/items_toy.jsonl")
    assert items[0]["prompt"] == first["prompt"].replace(first["prompt"].split("\n\n")[1], items[0]["question"])
