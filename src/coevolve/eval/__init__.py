"""Evaluation: greedy pass@1 / mean@k on held-out sets, benchmark registry, result tables and
the run report. See docs/CONTRACTS.md (eval)."""

from __future__ import annotations

from coevolve.eval.benchmarks import BENCHMARKS, GROUPS, Benchmark, load_tasks, resolve_benches
from coevolve.eval.core import EvalResult, evaluate_tasks
from coevolve.eval.harness import (
    compare,
    evaluate_benchmark,
    evaluate_suite,
    format_table,
    rich_table,
    run_eval,
)

__all__ = [
    "BENCHMARKS",
    "GROUPS",
    "Benchmark",
    "EvalResult",
    "compare",
    "evaluate_benchmark",
    "evaluate_suite",
    "evaluate_tasks",
    "format_table",
    "load_tasks",
    "resolve_benches",
    "rich_table",
    "run_eval",
]
