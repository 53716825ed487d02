"""The one evaluation driver: benchmark suites for the recipes' eval phases and ``coevolve eval``.

``evaluate_suite`` works on any ``Sampler`` and the world's ``Prompter`` (recipes call it with
the policy they are training, the CLI with a loaded model), writes ``results.json`` +
``items_<bench>.jsonl`` and returns the results dict. Scores are stored as fractions in [0, 1];
the tables show percentages. With ``repeats`` R > 1 (``eval.repeats``, ``coevolve eval
--repeats``) every benchmark, category average and group is reported as mean ± sample std (ddof 1)
over R evaluation runs of the one model; the mean is the headline ``score``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from coevolve.errors import DataError
from coevolve.eval.benchmarks import (
    GROUPS,
    Benchmark,
    build_prompts,
    find_data_file,
    grader_for,
    load_tasks,
    resolve_benches,
)
from coevolve.eval.core import EvalResult, evaluate_tasks, mean_std
from coevolve.prompts import Prompter
from coevolve.run.files import atomic_write_json, atomic_write_jsonl
from coevolve.types import AnswerGrader, Sampler, Task

AVERAGE_ORDER = ("math", "general", "user", "toy", "overall")
BenchTasks = Callable[[str, "Path | None", "int | None"], "list[Task] | None"]
"""``world.bench_tasks(name, data_dir, limit)``: a world's own benchmark, or None (registry)."""


def _samples_for(bench: Benchmark, samples: int, overrides: dict[str, int] | None) -> int:
    """k for mean@k: explicit per-benchmark override, else ``samples`` (-1 = bench default)."""
    if overrides and bench.name in overrides:
        return int(overrides[bench.name])
    return bench.default_samples if samples < 0 else samples


def primary_metric(bench: Benchmark, result: EvalResult) -> tuple[str, float]:
    """(metric name, score) reported for a benchmark, following R-Zero's protocol
    (DiagEvo's for AMC): mean@k for benchmarks whose default protocol samples (AIME/AMC) when
    samples were drawn; greedy pass@1 everywhere else."""
    if bench.default_samples > 0 and result.sampled is not None:
        return f"mean@{result.samples}", result.sampled
    return "greedy", result.greedy


def score_runs(row: dict[str, Any]) -> list[float]:
    """A benchmark row's score in each evaluation run: ``score_runs`` when it was evaluated
    several times, else its one score."""
    return list(row.get("score_runs") or [row["score"]])


def run_scores(bench: Benchmark, result: EvalResult, repeats: int) -> list[float]:
    """The primary metric of each of ``repeats`` evaluation runs: each run's mean@k when the
    metric is sampled; the one greedy score in every run otherwise (greedy decoding is
    deterministic, evaluated once)."""
    if bench.default_samples > 0 and result.sampled is not None and result.sampled_runs is not None:
        return list(result.sampled_runs)
    return [primary_metric(bench, result)[1]] * repeats


def spread(per_run: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Mean ± sample std (ddof 1) over runs of an unweighted average: ``per_run[i]`` is member
    i's score in each run; the run-level average is taken first, then its spread over runs."""
    runs = [sum(m[r] for m in per_run) / len(per_run) for r in range(len(per_run[0]))]
    return {"runs": runs, "std": mean_std(runs)[1]}


def averages(benchmarks: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Unweighted mean of the benchmark scores per category, and ``overall`` over all
    non-toy benchmarks (over the toy ones when only toy ran), as the papers average."""
    out: dict[str, float] = {}
    by_cat: dict[str, list[float]] = {}
    for row in benchmarks.values():
        by_cat.setdefault(row["category"], []).append(row["score"])
    for cat in AVERAGE_ORDER[:-1]:
        if by_cat.get(cat):
            out[cat] = sum(by_cat[cat]) / len(by_cat[cat])
    real = [s for c, v in by_cat.items() if c != "toy" for s in v]
    pool = real or by_cat.get("toy", [])
    if pool:
        out["overall"] = sum(pool) / len(pool)
    return out


def averages_std(benchmarks: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The sample std (ddof 1) over evaluation runs of each of ``averages``' values (same keys),
    for rows evaluated several times."""
    by_cat: dict[str, list[list[float]]] = {}
    for row in benchmarks.values():
        by_cat.setdefault(row["category"], []).append(score_runs(row))
    out: dict[str, float | None] = {}
    for cat in AVERAGE_ORDER[:-1]:
        if by_cat.get(cat):
            out[cat] = spread(by_cat[cat])["std"]
    real = [s for c, v in by_cat.items() if c != "toy" for s in v]
    pool = real or by_cat.get("toy", [])
    if pool:
        out["overall"] = spread(pool)["std"]
    return out


def group_averages(requested: Sequence[str], benchmarks: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each requested benchmark group (``GROUPS``: a paper's protocol such as ``diagevo_math5``)
    with the unweighted mean of its members' scores, over those that ran (``n`` of ``of``).

    >>> group_averages(["d2evo_general3"], {"mmlu_pro": {"score": 0.5}, "bbeh": {"score": 0.1}})
    {'d2evo_general3': {'score': 0.3, 'n': 2, 'of': 3, 'missing': ['supergpqa']}}
    """
    out: dict[str, dict[str, Any]] = {}
    for raw in requested:
        for name in (p.strip() for p in str(raw).split(",")):
            if name not in GROUPS or name in out:
                continue
            ran = [benchmarks[b]["score"] for b in GROUPS[name] if b in benchmarks]
            out[name] = {
                "score": round(sum(ran) / len(ran), 6) if ran else None,
                "n": len(ran),
                "of": len(GROUPS[name]),
                "missing": [b for b in GROUPS[name] if b not in benchmarks],
            }
            runs = [score_runs(benchmarks[b]) for b in GROUPS[name] if b in benchmarks]
            if runs and len(runs[0]) > 1:  # evaluated several times: mean ± std over the runs
                sp = spread(runs)
                out[name].update(std=round(sp["std"], 6), score_runs=[round(x, 6) for x in sp["runs"]])
    return out


def evaluate_benchmark(
    sampler: Sampler,
    bench: Benchmark,
    tasks: Sequence[Task],
    prompter: Prompter,
    grader: AnswerGrader,
    *,
    max_new_tokens: int,
    samples: int = 0,
    seed: int = 0,
    batch_size: int | None = None,
    progress: bool = False,
    repeats: int = 1,
) -> EvalResult:
    """One benchmark with its own prompt form, extraction and metric (its sampled pass drawn
    ``repeats`` times, ``evaluate_tasks``)."""
    grade, extract = grader_for(bench, grader)
    return evaluate_tasks(
        sampler,
        tasks,
        build_prompts(bench, tasks, prompter),
        grade=grade,
        extract=extract,
        samples=samples,
        max_new_tokens=max_new_tokens,
        seed=seed,
        progress=progress,
        group_key=bench.group_key,
        batch_size=batch_size,
        stop=prompter.stop("answer"),
        repeats=repeats,
    )


def _tasks_or_skip(
    b: Benchmark,
    bench_tasks: BenchTasks | None,
    data_dir: Path | None,
    limit: int | None,
    skipped: dict[str, str],
    say: Callable[[str], None],
) -> list[Task] | None:
    """The world's own tasks for a benchmark it owns, else the benchmark's data file. A general
    benchmark whose data is absent is noted in ``skipped`` (None); absent math data raises."""
    tasks = bench_tasks(b.name, data_dir, limit) if bench_tasks is not None else None
    try:
        return tasks if tasks is not None else load_tasks(b, data_dir, limit)
    except DataError as e:
        if b.category != "general":  # math data ships with coevolve: its absence is a broken install
            raise
        # the general benchmarks are not shipped: evaluate the rest, say which is absent and why
        skipped[b.name] = str(e)
        say(f"[eval] {b.name} skipped, its data is absent: {e}")
        return None


def _bench_row(b: Benchmark, res: EvalResult, data_dir: Path | None, repeats: int, seconds: float) -> dict[str, Any]:
    """One benchmark's row of results.json (with R > 1 repeats: each run's score and their std)."""
    metric, score = primary_metric(b, res)
    src = b.source or (find_data_file(b, data_dir) if b.kind != "toy" else None)
    row = {
        "category": b.category,
        "kind": b.kind,
        "metric": metric,
        "score": score,
        **res.summary(),
        "data": str(src) if src else ("shipped" if b.shipped else b.kind),
        "seconds": seconds,
    }
    if repeats > 1:
        per_run = run_scores(b, res, repeats)
        row.update(repeats=repeats, score_runs=per_run, score_std=mean_std(per_run)[1])
    return row


def _suite_results(
    benches: Sequence[str],
    rows: dict[str, dict[str, Any]],
    skipped: dict[str, str],
    config: dict[str, Any],
    rollouts: int,
    wall_seconds: float,
    repeats: int,
) -> dict[str, Any]:
    """results.json: the benchmark rows, their averages and groups (with R > 1 repeats, the
    averages' std too), what was skipped and why, the settings and the cost. Layout:
    ``{"benchmarks": {name: {"category", "kind", "metric", "score", "n", "greedy", "sampled",
    "samples", "sampled_any", "by_group", "data", "seconds"}}, "averages": {...}, "config":
    {...}, "rollouts", "wall_seconds"}``. With ``repeats`` R > 1 (sampled metrics drawn R times,
    each with its own seed; greedy ones once, deterministic): each benchmark row adds
    ``"repeats"``, ``"score_runs"`` (its metric in each run) and ``"score_std"``, each group
    ``"std"`` and ``"score_runs"``, and ``"averages_std"`` sits beside ``"averages"`` — sample std
    (ddof 1) over the runs of the run-level value; ``"score"`` stays the mean."""
    return {
        "benchmarks": rows,
        "averages": averages(rows),
        **({"averages_std": averages_std(rows)} if repeats > 1 else {}),
        "groups": group_averages(benches, rows),
        "skipped": skipped,
        "config": config,
        "rollouts": rollouts,
        "wall_seconds": wall_seconds,
    }


def evaluate_suite(
    sampler: Sampler,
    prompter: Prompter,
    benches: Sequence[str],
    *,
    grader: AnswerGrader,
    max_new_tokens: int,
    samples: int = 0,
    seed: int = 0,
    limit: int | None = None,
    data_dir: Path | None = None,
    bench_tasks: BenchTasks | None = None,
    batch_size: int | None = None,
    out_dir: Path | None = None,
    samples_by_bench: dict[str, int] | None = None,
    progress: bool = False,
    meta: dict[str, Any] | None = None,
    say: Callable[[str], None] = print,
    repeats: int = 1,
) -> dict[str, Any]:
    """Evaluate several benchmarks (groups allowed; ``bench_tasks``: a world's own, the toy held-out
    set) and return the results dict (``_suite_results``), written with ``items_<bench>.jsonl`` to
    ``out_dir``. ``progress``: a bar over the benchmarks with the last score (``batch_size``: over calls)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    t0, resolved, rollouts = time.time(), resolve_benches(benches), 0
    rows: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    bar = tqdm(resolved, desc="eval", unit="bench", disable=not progress, leave=False, dynamic_ncols=True)
    for b in bar:
        tb, k = time.time(), _samples_for(b, samples, samples_by_bench)
        if (tasks := _tasks_or_skip(b, bench_tasks, data_dir, limit, skipped, say)) is None:
            continue
        bar.set_description(f"eval {b.name} ({len(tasks)} items)")
        res = evaluate_benchmark(
            sampler, b, tasks, prompter, grader, samples=k, max_new_tokens=max_new_tokens, seed=seed,
            batch_size=batch_size, progress=progress, repeats=repeats,
        )  # fmt: skip
        rollouts += res.n * (1 + k * repeats)
        rows[b.name] = _bench_row(b, res, data_dir, repeats, seconds=round(time.time() - tb, 3))
        bar.set_postfix({b.name: f"{100 * rows[b.name]['score']:.1f}"}, refresh=False)
        if out_dir is not None:
            atomic_write_jsonl(Path(out_dir) / f"items_{b.name}.jsonl", res.records)
    config = {
        **(meta or {}),
        **dict(benches=[b.name for b in resolved], limit=limit, samples=samples),
        **dict(samples_by_bench=samples_by_bench or {}, max_new_tokens=max_new_tokens, seed=seed),
        **({"repeats": repeats} if repeats > 1 else {}),
    }
    results = _suite_results(benches, rows, skipped, config, rollouts, round(time.time() - t0, 3), repeats)
    if out_dir is not None:
        atomic_write_json(Path(out_dir) / "results.json", results)
    return results


# ----------------------------------------------------------------------------------------------
# tables


def pct(x: float | None, std: float | None = None) -> str:
    """A fraction as a percentage, with ``± std`` (also in points) when a spread is given."""
    if x is None:
        return "–"
    return f"{100.0 * x:.1f}" + ("" if std is None else f" ± {100.0 * std:.1f}")


def format_table(results: dict[str, Any]) -> str:
    """Markdown table of one results dict: a row per benchmark, then the averages (in %);
    mean ± std over the evaluation runs when there were several (said under the table)."""
    lines = ["| benchmark | category | n | metric | score | greedy | mean@k |", "|---|---|---:|---|---:|---:|---:|"]
    for name, r in results["benchmarks"].items():
        k = f"{pct(r['sampled'], r.get('sampled_std'))} (k={r['samples']})" if r.get("sampled") is not None else "–"
        lines.append(
            f"| {name} | {r['category']} | {r['n']} | {r['metric']} | {pct(r['score'], r.get('score_std'))} "
            f"| {pct(r['greedy'])} | {k} |"
        )
    stds = results.get("averages_std", {})
    for cat in AVERAGE_ORDER:
        if cat in results.get("averages", {}):
            lines.append(f"| **avg {cat}** | | | | **{pct(results['averages'][cat], stds.get(cat))}** | | |")
    for name, g in results.get("groups", {}).items():
        part = "" if g["n"] == g["of"] else f" ({g['n']} of {g['of']}; absent: {', '.join(g['missing'])})"
        lines.append(f"| **avg {name}**{part} | | | | **{pct(g['score'], g.get('std'))}** | | |")
    repeats = results.get("config", {}).get("repeats", 1)
    if repeats > 1:
        lines += [
            "",
            f"Scores are mean ± sample std (ddof 1) over {repeats} evaluation runs with different sampling "
            "seeds; greedy metrics are deterministic, evaluated once (std 0).",
        ]
    return "\n".join(lines) + "\n"


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
