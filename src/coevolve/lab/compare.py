"""One compare table for every side-by-side view of runs: ``coevolve compare RUN...`` (a row per
run: method, seed, base model, base and final score per benchmark, and compute; markdown with scores
in % and CSV with fractions), ``coevolve eval --compare`` (a row per benchmark, a column per result
or run folder) and the accuracy-against-compute table of the report and of ``eval --compare``.

Each table is its records and its columns (``Column``: header, kind, how to read the cell); one
builder (``build``) makes the rows and one renderer (``markdown_lines``, with ``to_csv`` for the raw
values) formats the cells by their column's kind. A run folder is read through the run-folder view
(``lab.run_view``): ``coevolve compare`` from its ``summary.json`` and ``config.yaml`` as saved (a
run made by another coevolve version compares as long as those two files are there), ``eval
--compare`` from the ``results.json`` of the evaluation the summary calls final, so the two show
the same final score of a run.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coevolve.data.sources import field_value
from coevolve.errors import ConfigError, DataError
from coevolve.eval.suite import AVERAGE_ORDER, load_results
from coevolve.lab.plots import plot_compute, write_compute_points
from coevolve.lab.run_view import (
    ComputePoint,
    compute_curve,
    final_results,
    is_run_folder,
    load_run,
    read_saved_run,
    run_recipe,
)
from coevolve.models import hub_id_of
from coevolve.run.compute import COUNTERS
from coevolve.run.files import atomic_write_text


@dataclass
class RunRow:
    """One compared run or result folder: a record of the compare tables."""

    run: str
    method: str
    seed: int | None
    model: str
    settings: str  # ablation switches set away from the recipe's defaults, "alias=value"
    base: dict[str, float] = field(default_factory=dict)
    final: dict[str, float] = field(default_factory=dict)
    compute: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float | None = None
    ok: bool = True
    averages: dict[str, float] = field(default_factory=dict)  # per category (``eval --compare``'s avg rows)


def method_of(cfg: dict[str, Any]) -> str:
    """The method a saved config runs: its recipe, or ``rzero`` for the R-Zero-style baseline
    (the diagevo recipe with R-Zero's challenger reward and no error memory)."""
    recipe = str(cfg.get("recipe", "?"))
    if (
        recipe == "diagevo"
        and field_value(cfg, "challenger.reward.kind") == "rzero"
        and field_value(cfg, "memory.enabled") is False
    ):
        return "rzero"
    return recipe


def settings_of(cfg: dict[str, Any]) -> str:
    """The paper-ablation switches (the recipe's flat aliases) a saved config sets away from the
    recipe's defaults, as ``alias=value`` ("" when none, or for a recipe this version lacks)."""
    from coevolve.config import config_class  # lazy: pulls torch
    from coevolve.config.base import all_aliases  # lazy: pulls torch

    try:
        cls = config_class(str(cfg.get("recipe")))
    except ConfigError:
        return ""
    default = cls(recipe=cfg["recipe"]).model_dump(mode="json")
    if field_value(cfg, "model.path"):  # a real model's defaults are its preset's
        from coevolve.config.base import deep_merge, real_preset  # lazy: pulls torch

        default = deep_merge(default, real_preset(str(cfg["recipe"])))
    out = []
    for alias, target in all_aliases(cls).items():
        if alias in ("engine", "backend"):  # where it ran, not what it computed
            continue
        have, want = field_value(cfg, target), field_value(default, target)
        if (
            have is not None
            and have != want
            and not (method_of(cfg) == "rzero" and alias in ("schedule", "stitching", "filter"))
        ):
            out.append(f"{alias}={have}")
    return " ".join(out)


def _model_name(cfg: dict[str, Any]) -> str:
    path = field_value(cfg, "model.path")
    if not path:
        return "toy"
    return hub_id_of(path) or Path(str(path)).name


def read_run(run_dir: Path) -> RunRow:
    """A finished (or at least summarised) run folder as a table row; ``DataError`` naming what
    is missing otherwise."""
    run_dir = Path(run_dir)
    summary, cfg = read_saved_run(run_dir)
    ev = summary.get("eval") or {}

    def scores(block: Any) -> dict[str, float]:
        return {b: float(r["score"]) for b, r in (block or {}).items() if isinstance(r, dict) and "score" in r}

    return RunRow(
        run=run_dir.name,
        method=method_of(cfg),
        seed=field_value(cfg, "run.seed"),
        model=_model_name(cfg),
        settings=settings_of(cfg),
        base=scores(ev.get("base")),
        final=scores(ev.get("final")),
        compute=summary.get("compute") or {},
        wall_seconds=summary.get("wall_seconds"),
        ok=bool(summary.get("ok", True)),
    )


def benches_of(rows: list[RunRow]) -> list[str]:
    """Every benchmark any run evaluated, in order of first appearance."""
    out: list[str] = []
    for r in rows:
        out.extend(b for b in [*r.base, *r.final] if b not in out)
    return out


# ---------------------------------------------------------------------------------------------
# the table: records, columns, one builder, one renderer

Kind = Literal["label", "score", "delta", "count", "figure"]
"""How a column's cells read: ``label`` (left-aligned text), ``score`` (a fraction shown in %),
``delta`` (a difference of fractions, signed points), ``count`` (thousands separators, yes / **no**
for a flag), ``figure`` (as logged: 4 significant digits for a float)."""


@dataclass(frozen=True)
class Column:
    """A column of a compare table: its header, its kind, and the cell it reads from a record."""

    name: str
    kind: Kind
    get: Callable[[Any], Any]


@dataclass(frozen=True)
class Table:
    """A built compare table: headers, kinds and the rows of raw values (None where a record
    lacks one)."""

    head: list[str]
    kinds: list[Kind]
    body: list[list[Any]]


def build(records: Sequence[Any], columns: Sequence[Column]) -> Table:
    """The rows of a compare table: one per record, a cell per column."""
    return Table([c.name for c in columns], [c.kind for c in columns], [[c.get(r) for c in columns] for r in records])


def cell(kind: Kind, v: Any) -> str:
    """A cell as markdown shows it (``–`` where there is no value)."""
    if v is None or v == "":
        return "–"
    if kind == "score":
        return f"{100.0 * v:.1f}"
    if kind == "delta":
        return f"{100.0 * v:+.1f}"
    if kind == "figure":
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}"
    return str(v)


def markdown_lines(t: Table) -> list[str]:
    """The table in markdown, one line per row; labels left-aligned, numbers right-aligned."""
    lines = ["| " + " | ".join(t.head) + " |", "|" + "|".join("---" if k == "label" else "---:" for k in t.kinds) + "|"]
    return lines + ["| " + " | ".join(cell(k, v) for k, v in zip(t.kinds, row)) + " |" for row in t.body]


def to_markdown(t: Table) -> str:
    return "\n".join(markdown_lines(t)) + "\n"


def to_csv(t: Table) -> str:
    """The table as CSV: raw values (scores as fractions), empty where there is none."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(t.head)
    w.writerows([["" if v is None else v for v in row] for row in t.body])
    return buf.getvalue()


def _delta(a: float | None, z: float | None) -> float | None:
    return None if a is None or z is None else z - a


# ---------------------------------------------------------------------------------------------
# ``coevolve compare``: a row per run


def run_columns(benches: list[str]) -> list[Column]:
    """``coevolve compare``'s columns: the run's facts, base / final / delta per benchmark, compute."""

    def train(key: str) -> Callable[[RunRow], Any]:
        return lambda r: (r.compute.get("train") or {}).get(key)

    cols = [
        Column("run", "label", lambda r: r.run),
        Column("method", "label", lambda r: r.method),
        Column("settings", "label", lambda r: r.settings),
        Column("seed", "label", lambda r: r.seed),
        Column("model", "label", lambda r: r.model),
    ]
    for b in benches:
        cols += [
            Column(f"{b} base", "score", lambda r, b=b: r.base.get(b)),
            Column(f"{b} final", "score", lambda r, b=b: r.final.get(b)),
            Column(f"{b} delta", "delta", lambda r, b=b: _delta(r.base.get(b), r.final.get(b))),
        ]
    return cols + [
        Column("train rollouts", "count", train("rollouts")),
        Column("train generated tokens", "count", train("generated_tokens")),
        Column("trained tokens", "count", train("trained_tokens")),
        Column("eval rollouts", "count", lambda r: (r.compute.get("eval") or {}).get("rollouts")),
        Column("wall seconds", "count", lambda r: r.wall_seconds),
        Column("ok", "count", lambda r: r.ok),
    ]


def table(rows: list[RunRow]) -> Table:
    """``coevolve compare``'s table of ``rows``; scores as fractions, None where a run lacks one."""
    return build(rows, run_columns(benches_of(rows)))


def compare_runs(run_dirs: list[Path], out_dir: Path | None = None) -> tuple[str, list[Path]]:
    """The markdown table of ``run_dirs`` and, with ``out_dir``, ``compare.md`` and
    ``compare.csv`` written there (the files returned)."""
    if not run_dirs:
        raise DataError("compare: give one or more run folders")
    t = table([read_run(d) for d in run_dirs])
    md = to_markdown(t)
    files: list[Path] = []
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in (("compare.md", md), ("compare.csv", to_csv(t))):
            atomic_write_text(out_dir / name, text)
            files.append(out_dir / name)
    return md, files


# ---------------------------------------------------------------------------------------------
# ``coevolve eval --compare``: result folders of ``coevolve eval`` or run folders, a row per benchmark


def load_compared(path: Path) -> RunRow:
    """``--compare`` input as a table record (scores and averages in ``final``, ``averages``): a
    result folder (or results.json) of ``coevolve eval``, or a run folder (the evaluation its
    summary calls final: ``lab.run_view.final_results``); anything else is a DataError saying
    which is expected."""
    p = Path(path)
    if is_run_folder(p):
        res = final_results(p)
    elif (p / "results.json").is_file() or (p.is_file() and p.name.endswith(".json")):
        res = load_results(p)
    else:
        raise DataError(
            f"{p}: neither a result folder of `coevolve eval` (no results.json) nor a run folder "
            "(no state.json + config.yaml)"
        )
    scores = {b: r["score"] for b, r in res["benchmarks"].items()}
    return RunRow(
        run=p.name, method="", seed=None, model="", settings="", final=scores, averages=res.get("averages", {})
    )


def folder_names(dirs: list[Path]) -> list[str]:
    """Column names of the compared folders: their names, made unique with their parent when needed."""
    names = [Path(d).name or str(d) for d in dirs]
    if len(set(names)) < len(names):
        names = [f"{Path(d).parent.name}/{Path(d).name}" for d in dirs]
    if len(set(names)) < len(names):
        names = [str(d) for d in dirs]
    return names


def compare_results(dirs: list[Path]) -> str:
    """Markdown table putting several result folders or run folders (the evaluation each run's
    summary calls final) side by side (scores in %).

    Columns are the folder names (made unique with their parent when needed), plus
    "Δ last−first" when there are two or more; rows are the union of benchmarks in order of
    first appearance, then the averages. A cell is "–" where a run lacks that benchmark.
    """
    if not dirs:
        raise DataError("compare: no result folders given")
    runs = [load_compared(d) for d in dirs]
    records = [(b, [r.final.get(b) for r in runs]) for b in benches_of(runs)]
    for cat in AVERAGE_ORDER:
        vals = [r.averages.get(cat) for r in runs]
        if any(v is not None for v in vals):
            records.append((f"**avg {cat}**", vals))
    cols = [Column("benchmark", "label", lambda rec: rec[0])]
    cols += [Column(name, "score", lambda rec, i=i: rec[1][i]) for i, name in enumerate(folder_names(dirs))]
    if len(runs) >= 2:
        cols.append(Column("Δ last−first", "delta", lambda rec: _delta(rec[1][0], rec[1][-1])))
    return to_markdown(build(records, cols))


# ---------------------------------------------------------------------------------------------
# accuracy against compute (the report, and ``eval --compare`` over run folders)


def compute_table(curves: dict[str, list[ComputePoint]]) -> list[str]:
    """Markdown lines of every (compute, accuracy) point: one row per run, evaluation, benchmark;
    the training counters cumulative, the eval columns the evaluation compute so far."""
    points = [(run, p) for run, pts in curves.items() for p in pts]
    cols = [
        Column("run", "label", lambda rp: rp[0]),
        Column("phase", "label", lambda rp: rp[1].key),
        Column("bench", "label", lambda rp: rp[1].bench),
        Column("greedy", "figure", lambda rp: rp[1].greedy),
        Column("sampled", "figure", lambda rp: rp[1].sampled),
        *(Column(k, "figure", lambda rp, k=k: getattr(rp[1].train, k)) for k in COUNTERS),
        *(
            Column(f"eval {k}", "figure", lambda rp, k=k: getattr(rp[1].eval, k))
            for k in ("rollouts", "generated_tokens")
        ),
    ]
    return markdown_lines(build(points, cols))


def compare_compute(run_dirs: list[Path], out_dir: Path) -> tuple[list[Path], list[str]]:
    """``coevolve eval --compare`` over run folders: one figure of held-out accuracy against each
    compute counter with a line per run (labelled ``folder (recipe)``), the points as CSV and
    markdown in ``out_dir``. Returns (files written, notes on runs without counters)."""
    curves: dict[str, list[ComputePoint]] = {}
    notes = []
    for d in run_dirs:
        data = load_run(Path(d))
        recipe = run_recipe(Path(d))
        name = f"{Path(d).name} ({recipe})" if recipe else Path(d).name
        curve = compute_curve(data, name)
        if curve is None:
            notes.append(f"{d}: no compute counters (a run made before coevolve recorded them); left out of the plot")
        elif curve:
            curves[name] = curve
    if not curves:
        return [], notes
    out_dir = Path(out_dir)
    plot = plot_compute(curves, out_dir)
    csv_path = write_compute_points(curves, out_dir / "accuracy_vs_compute.csv")
    md = out_dir / "accuracy_vs_compute.md"
    atomic_write_text(
        md,
        "\n".join(
            [
                "# Held-out accuracy against compute",
                "",
                f"![{plot.title}]({plot.file})",
                "",
                *compute_table(curves),
                *(f"- {n}" for n in notes),
                "",
            ]
        ),
    )
    return [out_dir / plot.file, csv_path, md], notes


__all__ = [
    "Column",
    "RunRow",
    "Table",
    "build",
    "compare_compute",
    "compare_results",
    "compare_runs",
    "compute_table",
    "load_compared",
    "markdown_lines",
    "method_of",
    "read_run",
    "settings_of",
    "table",
    "to_csv",
    "to_markdown",
]
