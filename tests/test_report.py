"""Tests for coevolve.lab.report: a synthetic run folder in the documented layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.errors import RunStateError
from coevolve.lab.report import write_report
from coevolve.lab.run_view import eval_series, load_run, pass_rate_hists

PNG = b"\x89PNG\r\n\x1a\n"


def _write_run(root: Path, broken_tail: bool = False) -> Path:
    run = root / "d2evo-test"
    run.mkdir()
    rows = [
        {
            "round": 0,
            "phase": "eval",
            "step": 0,
            "time": 1.0,
            "eval/toy/greedy": 0.40,
            "eval/toy/sampled": 0.30,
            "phase/eval/seconds": 2.0,
        }
    ]
    for r in (1, 2, 3):
        for s in range(4):
            rows.append(
                {
                    "round": r,
                    "phase": "questioner",
                    "step": s,
                    "time": 2.0,
                    "questioner/reward_mean": 0.1 * r + 0.01 * s,
                    "questioner/in_band": 0.5 + 0.1 * r,
                }
            )
            rows.append(
                {
                    "round": r,
                    "phase": "solver",
                    "step": s,
                    "time": 3.0,
                    "solver/reward_mean": 0.3 + 0.05 * r,
                    "solver/frac_zero_std": 0.4 - 0.05 * r,
                }
            )
        rows.append(
            {
                "round": r,
                "phase": "curate",
                "step": 0,
                "time": 4.0,
                "curriculum/anchors": 10 * r,
                "curriculum/buffer/oracle_acc_kept": 0.8 + 0.02 * r,
                "curriculum/pass_rate_hist": [r, 2, 3, 4],
                "curriculum/hist_edges": [0, 0.25, 0.5, 0.75, 1.0],
                "memory/causes": 3 * r,
                "memory/nodes": 5 * r,
                "memory/active": 2 * r,
                "memory/mastered": r - 1,
                "memory/next_epsilon": 0.5 / r,
                "phase/curate/seconds": 1.5,
                "phase/curate/rollouts": 64,
            }
        )
        rows.append(
            {
                "round": r,
                "phase": "eval",
                "step": 0,
                "time": 5.0,
                "eval/toy/greedy": 0.40 + 0.05 * r,
                "phase/eval/seconds": 2.0,
            }
        )
    text = "".join(json.dumps(x) + "\n" for x in rows)
    if broken_tail:
        text += '{"round": 3, "solver/rew'  # a run killed mid-write
    (run / "metrics.jsonl").write_text(text)
    (run / "summary.json").write_text(
        json.dumps(
            {
                "recipe": "d2evo",
                "wall_seconds": 600,
                "eval": {
                    "base": {"toy": {"greedy": 0.4, "sampled": 0.3}},
                    "final": {"toy": {"greedy": 0.55, "sampled": 0.5}},
                    "rounds": {},
                },
                "rounds": [
                    {"round": 1, "anchors/anchors": 12, "solver/reward_mean": 0.42},
                    {"round": 2, "anchors/anchors": 9, "solver/reward_mean": 0.5},
                ],
            }
        )
    )
    (run / "round_01").mkdir()
    (run / "round_01" / "difficulty.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "pass_rate": i / 8}) + "\n" for i in range(9))
    )
    (run / "round_04").mkdir()  # only the file artefact: histogram from difficulty.jsonl
    (run / "round_04" / "difficulty.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "pass_rate": p}) + "\n" for i, p in enumerate([0.0, 0.05, 0.5, 1.0]))
    )
    return run


def test_report_writes_all_plots_and_key_numbers(tmp_path: Path) -> None:
    run = _write_run(tmp_path, broken_tail=True)
    md_path = write_report(run)
    assert md_path == run / "report" / "report.md"
    want = {
        "heldout_accuracy.png",
        "pass_rate_hist.png",
        "anchors.png",
        "in_band.png",
        "pseudo_label_acc.png",
        "memory.png",
        "epsilon.png",
        "writer_reward.png",
        "solver.png",
        "phases.png",
    }
    pngs = {p.name for p in (run / "report").glob("*.png")}
    assert pngs == want
    for name in want:
        assert (run / "report" / name).read_bytes()[:8] == PNG
    md = md_path.read_text()
    for name in want:
        assert f"]({name})" in md
    # base vs final: metrics rounds 0..3 (0.40 -> 0.55), summary final equals the last round
    assert "| toy/greedy | 40.0% (r0) | 55.0% (r3) | +15.0 |" in md
    # sampled only in base + summary final -> final fills the run's last round
    assert "| toy/sampled | 30.0% (r0) | 50.0% (r3) | +20.0 |" in md
    assert "recipe **d2evo**" in md and "metrics.jsonl:" in md  # broken tail line listed
    assert "| curate | 4.5 | 192 |" in md
    # the pool histogram from difficulty.jsonl (never-solved / always-solved bins apart) and the
    # per-round figures of summary.json
    assert "| round 4 | 1 | 1 | 0 | 1 | 0 | 0 | 1 |" in md
    assert "| `anchors/anchors` | 12 | 9 |" in md and "| `solver/reward_mean` | 0.42 | 0.5 |" in md


def test_series_helpers(tmp_path: Path) -> None:
    data = load_run(_write_run(tmp_path))
    ev = eval_series(data)
    assert ev["toy/greedy"] == pytest.approx({0: 0.40, 1: 0.45, 2: 0.50, 3: 0.55})
    hists = pass_rate_hists(data)
    assert sorted(hists) == [1, 2, 3, 4]
    assert hists[1] == ([1.0, 2.0, 3.0, 4.0], [0.0, 0.25, 0.5, 0.75, 1.0])  # metrics win over the file
    assert hists[4][0] == [2.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 1.0]  # from difficulty.jsonl, 1.0 in last bin


def test_report_only_plots_present_series(tmp_path: Path) -> None:
    run = tmp_path / "grpo-run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"round": 1, "phase": "solver", "step": s, "solver/reward_mean": s / 10}) + "\n"
            for s in range(5)
        )
    )
    md = write_report(run).read_text()
    assert {p.name for p in (run / "report").glob("*.png")} == {"solver.png"}
    assert "solver.png" in md and "Held-out accuracy" not in md


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunStateError, match="not a run folder"):
        write_report(tmp_path)
