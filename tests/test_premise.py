"""The methods' premise in every run: kept-label accuracy, band share, zero-variance groups per round."""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from types import SimpleNamespace

import coevolve.recipes.premise as P
from coevolve.lab.report import _premise_section
from coevolve.recipes import summary
from coevolve.run import Phase, PhaseResult, Run
from coevolve.training import StepBook


def test_doctests() -> None:
    assert doctest.testmod(P).failed == 0


def test_step_book_counts_groups_without_signal() -> None:
    logged: list[dict] = []
    ctx = SimpleNamespace(compute=SimpleNamespace(trained=lambda n: None), log=lambda m, step=None: logged.append(m))
    obs = SimpleNamespace(rollouts=0, records=[], metrics={})
    with StepBook(ctx, "solver", None, 1) as book:
        book.step(0, [], [], [[], [], []], [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], {"skipped": True}, obs)
        book.step(1, [], [], [[]], [[0.5, 0.1]], {"skipped": True}, obs)
        assert book.result(2).zero_variance == 0.5  # 2 of 4 groups all-equal
        resumed = StepBook(ctx, "solver", None, 1, prior=book.state(2, {}))
    assert resumed.result(2).zero_variance == 0.5  # a continued phase keeps its count
    with StepBook(ctx, "solver", None, 1) as empty:
        assert empty.result(0).zero_variance is None


def _run(tmp_path: Path, kept: float) -> dict:
    run = Run.create(tmp_path / "run", "recipe: d2evo\n", "d2evo", say=lambda m: None)
    for t, acc in ((1, kept), (2, 0.8)):
        run.phase(Phase("questioner", t), lambda ctx: PhaseResult({"in_band": 0.5}, rollouts=1))
        run.phase(Phase("buffer", t), lambda ctx, a=acc: PhaseResult({"oracle_acc_kept": a}, rollouts=1))
        run.phase(Phase("solver", t), lambda ctx: PhaseResult({"zero_variance": 0.25}, rollouts=1))
    return summary.write_summary(run)


def test_summary_and_report_show_the_premise_and_warn_below_half(tmp_path: Path) -> None:
    s = _run(tmp_path / "bad", 0.36)
    assert s == json.loads((tmp_path / "bad" / "run" / "summary.json").read_text())
    assert s["premise"] == [
        {"round": 1, "kept_label_accuracy": 0.36, "in_band": 0.5, "zero_variance": 0.25},
        {"round": 2, "kept_label_accuracy": 0.8, "in_band": 0.5, "zero_variance": 0.25},
    ]
    (warning,) = s["warnings"]
    assert "round 1: kept pseudo-labels right 36.0 %" in warning
    md = "\n".join(_premise_section(s))
    assert "## Premise" in md and "**Warning:** round 1" in md and "| 1 | 36.0% | 50.0% | 25.0% |" in md
    good = _run(tmp_path / "good", 0.7)
    assert good["warnings"] == [] and "Warning" not in "\n".join(_premise_section(good))


def test_diagevo_pool_and_grpo_rows() -> None:
    rows = P.premise_rows(
        [
            {"round": 1, "pool/oracle_acc_kept": 0.625, "pool/kept_absolute": 16, "pool/labelled": 51},
            {"round": 1, "solver/zero_variance": 0.1},
        ]
    )
    assert rows[0] == {"round": 1, "kept_label_accuracy": 0.625, "in_band": 0.3137, "zero_variance": None}
    assert rows[1]["kept_label_accuracy"] is None and P.premise_warnings(rows[1:]) == []  # grpo: real labels
