"""Evaluation: greedy pass@1 / mean@k on held-out sets (``core``), the benchmark registry
(``benchmarks``) and the one suite driver used by recipes and ``coevolve eval`` (``suite``)."""

from __future__ import annotations

from coevolve.eval.benchmarks import BENCHMARKS, GROUPS, Benchmark, load_tasks, resolve_benches
from coevolve.eval.core import EvalResult, evaluate_tasks
from coevolve.eval.suite import evaluate_benchmark, evaluate_suite, format_table, load_results

__all__ = [
    "BENCHMARKS",
    "GROUPS",
    "Benchmark",
    "EvalResult",
    "evaluate_benchmark",
    "evaluate_suite",
    "evaluate_tasks",
    "format_table",
    "load_results",
    "load_tasks",
    "resolve_benches",
]
