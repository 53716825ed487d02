"""The verdicts the grader, not the model, decided (timeouts, errors, refusals) are counted per
phase in metrics.jsonl and shown in the run report."""

from __future__ import annotations

from pathlib import Path

from coevolve.answers import Grader, GraderPool
from coevolve.lab.report import grader_totals, write_report
from coevolve.run import Phase, PhaseResult, Run


def test_timeouts_and_refusals_reach_metrics_and_report(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "r", "recipe: grpo\n", "grpo", seed=0, say=lambda m: None)
    with Grader(verify_fn="tests.test_answers:hang_on_marker", timeout=1.0, start_timeout=120.0) as g:
        run.grader_counts = g.stats.decided

        def grade(ctx):  # one math-verify call that hangs, one answer over the exponent limit, one plain
            assert not g.is_equiv("HANG \\sqrt{2}", "\\sqrt{2}")
            assert not g.is_equiv("9^{9^{9}}", "3")
            assert g.is_equiv("4", "4.0")
            return PhaseResult({})

        run.phase(Phase("solver", 1), grade)
        run.phase(Phase("eval", 1), lambda ctx: PhaseResult({}))
    rows = run.metrics.rows()
    assert rows[0]["phase/solver/grader_timeouts"] == 1 and rows[0]["phase/solver/grader_refused"] == 1
    assert rows[0]["phase/solver/grader_calls"] == 3 and rows[0]["phase/solver/grader_worker_calls"] == 1
    assert rows[1]["phase/eval/grader_timeouts"] == 0  # a phase logs what it added, not the run's total
    assert grader_totals(rows)["solver"]["timeouts"] == 1
    md = write_report(run.path).read_text(encoding="utf-8")
    assert "## Rewards the grader decided" in md and "| solver | 1 | 0 | 1 | 0 | 3 | 1 |" in md


def test_a_run_without_grader_decisions_has_no_grader_section(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "r", "recipe: grpo\n", "grpo", seed=0, say=lambda m: None)
    with GraderPool(1) as pool:
        run.grader_counts = lambda: pool.stats.decided()  # the pool sums its workers' counters at each call
        run.phase(Phase("solver", 1), lambda ctx: PhaseResult({"ok": pool.is_equiv("2", "2")}))
    assert run.metrics.rows()[0]["phase/solver/grader_calls"] == 1
    assert "grader decided" not in write_report(run.path).read_text(encoding="utf-8")
