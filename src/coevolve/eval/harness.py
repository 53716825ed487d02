"""Run benchmark suites, write ``results.json`` + per-item files, and render result tables.

``evaluate_suite`` works on any ``Sampler`` (recipes call it with the policy they are training);
``run_eval`` is what ``coevolve eval`` calls: it loads a saved model first. Scores are stored
as fractions in [0, 1]; the tables show percentages.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from coevolve.errors import DataError
from coevolve.eval.benchmarks import (
    BENCHMARKS,
    Benchmark,
    bench_prompter,
    find_data_file,
    load_tasks,
    resolve_benches,
)
from coevolve.eval.core import EvalResult, evaluate_tasks
from coevolve.types import Task

AVERAGE_ORDER = ("math", "general", "toy", "overall")


def _samples_for(bench: Benchmark, samples: int, overrides: dict[str, int] | None) -> int:
    """k for mean@k: explicit per-benchmark override, else ``samples`` (-1 = bench default)."""
    if overrides and bench.name in overrides:
        return int(overrides[bench.name])
    return bench.default_samples if samples < 0 else samples


def evaluate_benchmark(
    sampler: Any,
    bench: Benchmark | str,
    *,
    prompter: Any | None = None,
    tasks: Sequence[Task] | None = None,
    data_dir: Path | None = None,
    limit: int | None = None,
    samples: int = 0,
    max_new_tokens: int = 1024,
    seed: int = 0,
    batch_size: int | None = None,
    chat_template: bool | None = None,
    progress: bool = False,
) -> EvalResult:
    """Evaluate one benchmark with its own prompt style, extraction and metric.

    ``prompter`` defaults to ``ToyPrompter()`` for the toy set and to
    ``EvalPrompter(sampler.tokenizer, chat_template)`` otherwise. ``samples=-1`` uses the
    benchmark's default k (32 for AIME/AMC, else 0). ``tasks`` overrides loading.
    """
    b = BENCHMARKS[bench] if isinstance(bench, str) else bench
    if tasks is None:
        tasks = load_tasks(b, data_dir, limit)
    elif limit is not None:
        tasks = list(tasks)[:limit]
    bp = bench_prompter(b, getattr(sampler, "tokenizer", None), chat_template, base=prompter)
    return evaluate_tasks(
        sampler,
        bp,
        tasks,
        samples=_samples_for(b, samples, None),
        max_new_tokens=max_new_tokens,
        seed=seed,
        progress=progress,
        group_key=b.group_key,
        batch_size=batch_size,
    )


def primary_metric(bench: Benchmark, result: EvalResult) -> tuple[str, float]:
    """(metric name, score) reported for a benchmark, following the papers' protocol.

    mean@k for benchmarks whose default protocol samples (AIME/AMC) when samples were drawn;
    greedy pass@1 everywhere else.
    """
    if bench.default_samples > 0 and result.sampled is not None:
        return f"mean@{result.samples}", result.sampled
    return "greedy", result.greedy


def averages(benchmarks: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Unweighted mean of the benchmark scores per category, and ``overall`` over all
    non-toy benchmarks (over the toy ones when only toy ran), as the papers average."""
    out: dict[str, float] = {}
    by_cat: dict[str, list[float]] = {}
    for row in benchmarks.values():
        by_cat.setdefault(row["category"], []).append(row["score"])
    for cat in ("math", "general", "toy"):
        if by_cat.get(cat):
            out[cat] = sum(by_cat[cat]) / len(by_cat[cat])
    real = [s for c, v in by_cat.items() if c != "toy" for s in v]
    pool = real or by_cat.get("toy", [])
    if pool:
        out["overall"] = sum(pool) / len(pool)
    return out


def evaluate_suite(
    sampler: Any,
    benches: Sequence[str],
    *,
    limit: int | None = None,
    samples: int = 0,
    max_new_tokens: int = 1024,
    seed: int = 0,
    data_dir: Path | None = None,
    chat_template: bool | None = None,
    batch_size: int | None = None,
    out_dir: Path | None = None,
    samples_by_bench: dict[str, int] | None = None,
    progress: bool = False,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate several benchmarks (groups allowed) and return the results dict.

    When ``out_dir`` is given, writes ``results.json`` and ``items_<bench>.jsonl`` there.
    Result layout: ``{"benchmarks": {name: {"category", "kind", "metric", "score", "n",
    "greedy", "sampled", "samples", "sampled_any", "by_group", "data", "seconds"}},
    "averages": {"math"|"general"|"toy"|"overall": score}, "config": {...}, "wall_seconds"}``.
    """
    t0 = time.time()
    resolved = resolve_benches(benches)
    rows: dict[str, dict[str, Any]] = {}
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
    for b in resolved:
        tb = time.time()
        k = _samples_for(b, samples, samples_by_bench)
        tasks = load_tasks(b, data_dir, limit)
        res = evaluate_benchmark(
            sampler, b, tasks=tasks, samples=k, max_new_tokens=max_new_tokens, seed=seed,
            batch_size=batch_size, chat_template=chat_template, progress=progress,
        )
        metric, score = primary_metric(b, res)
        src = find_data_file(b, data_dir)
        rows[b.name] = {
            "category": b.category,
            "kind": b.kind,
            "metric": metric,
            "score": score,
            **res.summary(),
            "data": str(src) if src else ("shipped" if b.shipped else b.kind),
            "seconds": round(time.time() - tb, 3),
        }
        if out_dir is not None:
            with open(out_dir / f"items_{b.name}.jsonl", "w", encoding="utf-8") as f:
                for rec in res.records:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    results: dict[str, Any] = {
        "benchmarks": rows,
        "averages": averages(rows),
        "config": {
            **(meta or {}),
            "benches": [b.name for b in resolved],
            "limit": limit,
            "samples": samples,
            "samples_by_bench": samples_by_bench or {},
            "max_new_tokens": max_new_tokens,
            "seed": seed,
            "chat_template": chat_template,
        },
        "wall_seconds": round(time.time() - t0, 3),
    }
    if out_dir is not None:
        (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def run_eval(
    model_path: str,
    benches: list[str],
    *,
    limit: int | None,
    samples: int,
    max_new_tokens: int,
    out_dir: Path,
    data_dir: Path | None,
    chat_template: bool | None,
    seed: int,
    batch_size: int,
    samples_by_bench: dict[str, int] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Load a saved model and evaluate it (what ``coevolve eval`` runs).

    Loads via ``coevolve.engine.load_model`` and samples through ``HFSampler`` with
    ``max_batch=batch_size``; writes ``out_dir/results.json`` and ``items_<bench>.jsonl``;
    returns the results dict (render it with ``format_table`` or ``rich_table``).
    ``samples=-1`` means each benchmark's default k (mean@32 on AIME/AMC, greedy elsewhere).
    """
    resolve_benches(benches)  # fail on a typo before spending minutes loading a model
    from coevolve.engine import HFSampler, load_model

    model, tokenizer = load_model(model_path)
    sampler = HFSampler(model, tokenizer, max_batch=batch_size)
    return evaluate_suite(
        sampler, benches, limit=limit, samples=samples, max_new_tokens=max_new_tokens,
        seed=seed, data_dir=data_dir, chat_template=chat_template, batch_size=None,
        out_dir=out_dir, samples_by_bench=samples_by_bench, progress=progress,
        meta={"model": str(model_path)},
    )


# ----------------------------------------------------------------------------------------------
# tables


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100.0 * x:.1f}"


def format_table(results: dict[str, Any]) -> str:
    """Markdown table of one results dict: a row per benchmark, then the averages (in %)."""
    lines = [
        "| benchmark | category | n | metric | score | greedy | mean@k |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for name, r in results["benchmarks"].items():
        k = f"{_pct(r['sampled'])} (k={r['samples']})" if r.get("sampled") is not None else "–"
        lines.append(
            f"| {name} | {r['category']} | {r['n']} | {r['metric']} | {_pct(r['score'])} "
            f"| {_pct(r['greedy'])} | {k} |"
        )
    for cat in AVERAGE_ORDER:
        if cat in results.get("averages", {}):
            lines.append(f"| **avg {cat}** | | | | **{_pct(results['averages'][cat])}** | | |")
    return "\n".join(lines) + "\n"


def rich_table(results: dict[str, Any]) -> Any:
    """The same table as a ``rich.table.Table`` for terminal output."""
    from rich.table import Table

    t = Table(title="coevolve eval")
    for col in ("benchmark", "category", "n", "metric", "score", "greedy", "mean@k"):
        t.add_column(col, justify="right" if col in ("n", "score", "greedy", "mean@k") else "left")
    for name, r in results["benchmarks"].items():
        k = f"{_pct(r['sampled'])} (k={r['samples']})" if r.get("sampled") is not None else "–"
        t.add_row(name, r["category"], str(r["n"]), r["metric"], _pct(r["score"]),
                  _pct(r["greedy"]), k)
    for cat in AVERAGE_ORDER:
        if cat in results.get("averages", {}):
            t.add_row(f"avg {cat}", "", "", "", _pct(results["averages"][cat]), "", "",
                      style="bold")
    return t


def load_results(path: Path) -> dict[str, Any]:
    """``results.json`` from a result folder (or the file itself); DataError names the file."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise DataError(f"{p}: no results.json (run `coevolve eval --out` there first)") from e
    except json.JSONDecodeError as e:
        raise DataError(f"{p}:{e.lineno}: invalid JSON ({e.msg})") from e
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), dict):
        raise DataError(f"{p}: field 'benchmarks' missing or not an object")
    return data


def compare(dirs: list[Path]) -> str:
    """Markdown table putting several result folders side by side (scores in %).

    Columns are the folder names (made unique with their parent when needed), plus
    "Δ last−first" when there are two or more; rows are the union of benchmarks in order of
    first appearance, then the averages. A cell is "–" where a run lacks that benchmark.
    """
    if not dirs:
        raise DataError("compare: no result folders given")
    runs = [load_results(d) for d in dirs]
    names = [Path(d).name or str(d) for d in dirs]
    if len(set(names)) < len(names):
        names = [f"{Path(d).parent.name}/{Path(d).name}" for d in dirs]
    if len(set(names)) < len(names):
        names = [str(d) for d in dirs]
    benches: list[str] = []
    for r in runs:
        benches.extend(b for b in r["benchmarks"] if b not in benches)
    rows: list[tuple[str, list[float | None]]] = []
    for b in benches:
        rows.append((b, [r["benchmarks"][b]["score"] if b in r["benchmarks"] else None
                         for r in runs]))
    for cat in AVERAGE_ORDER:
        vals = [r.get("averages", {}).get(cat) for r in runs]
        if any(v is not None for v in vals):
            rows.append((f"**avg {cat}**", vals))
    delta = len(runs) >= 2
    head = "| benchmark | " + " | ".join(names) + (" | Δ last−first |" if delta else " |")
    sep = "|---|" + "---:|" * (len(names) + (1 if delta else 0))
    out = [head, sep]
    for label, vals in rows:
        cells = [_pct(v) for v in vals]
        if delta:
            a, z = vals[0], vals[-1]
            cells.append("–" if a is None or z is None else f"{100.0 * (z - a):+.1f}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
