"""``coevolve compare RUN...``: one table of finished runs — method, seed, base model, base and
final score per benchmark, and compute — as markdown (scores in %) and CSV (fractions).

Everything comes from each run folder's ``summary.json`` (evaluations, compute) and
``config.yaml`` (recipe, seed, model, ablation switches), read as saved by the run-folder view
(``lab.run_view.read_saved_run``): a run made by another coevolve version compares as long as those
two files are there.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.data.sources import field_value
from coevolve.errors import ConfigError, DataError
from coevolve.eval.suite import AVERAGE_ORDER, load_results, pct
from coevolve.lab.run_view import read_saved_run
from coevolve.models import hub_id_of
from coevolve.run import CONFIG_FILE, STATE_FILE, Phase
from coevolve.run.files import atomic_write_text
from coevolve.run.state import PhaseState


@dataclass
class RunRow:
    """One run of the table."""

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


def table(rows: list[RunRow]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of the comparison; scores as fractions, None where a run lacks one."""
    benches = benches_of(rows)
    head = ["run", "method", "settings", "seed", "model"]
    for b in benches:
        head += [f"{b} base", f"{b} final", f"{b} delta"]
    head += ["train rollouts", "train generated tokens", "trained tokens", "eval rollouts", "wall seconds", "ok"]
    body = []
    for r in rows:
        line: list[Any] = [r.run, r.method, r.settings, r.seed, r.model]
        for b in benches:
            base, final = r.base.get(b), r.final.get(b)
            line += [base, final, None if base is None or final is None else final - base]
        train, ev = r.compute.get("train") or {}, r.compute.get("eval") or {}
        line += [
            train.get("rollouts"),
            train.get("generated_tokens"),
            train.get("trained_tokens"),
            ev.get("rollouts"),
            r.wall_seconds,
            r.ok,
        ]
        body.append(line)
    return head, body


def to_markdown(head: list[str], body: list[list[Any]]) -> str:
    """The table in markdown: scores in % (deltas signed), counts with thousands separators."""

    def cell(h: str, v: Any) -> str:
        if v is None or v == "":
            return "–"
        if h.endswith((" base", " final")):
            return f"{100.0 * v:.1f}"
        if h.endswith(" delta"):
            return f"{100.0 * v:+.1f}"
        if isinstance(v, bool):
            return "yes" if v else "**no**"
        if isinstance(v, int):
            return f"{v:,}"
        if isinstance(v, float):
            return f"{v:,.0f}"
        return str(v)

    numeric = {i for i, h in enumerate(head) if i >= 5}
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---:" if i in numeric else "---" for i in range(len(head))) + "|",
    ]
    lines += ["| " + " | ".join(cell(h, v) for h, v in zip(head, row)) + " |" for row in body]
    return "\n".join(lines) + "\n"


def to_csv(head: list[str], body: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    w.writerows([["" if v is None else v for v in row] for row in body])
    return buf.getvalue()


def compare_runs(run_dirs: list[Path], out_dir: Path | None = None) -> tuple[str, list[Path]]:
    """The markdown table of ``run_dirs`` and, with ``out_dir``, ``compare.md`` and
    ``compare.csv`` written there (the files returned)."""
    if not run_dirs:
        raise DataError("compare: give one or more run folders")
    head, body = table([read_run(d) for d in run_dirs])
    md = to_markdown(head, body)
    files: list[Path] = []
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in (("compare.md", md), ("compare.csv", to_csv(head, body))):
            atomic_write_text(out_dir / name, text)
            files.append(out_dir / name)
    return md, files


__all__ = ["RunRow", "compare_runs", "method_of", "read_run", "settings_of", "table", "to_csv", "to_markdown"]


# ``coevolve eval --compare``: result folders of ``coevolve eval`` or run folders, side by side


def is_run_folder(path: Path) -> bool:
    """A coevolve run folder (``state.json`` and ``config.yaml``), as opposed to a result folder."""
    return (Path(path) / STATE_FILE).is_file() and (Path(path) / CONFIG_FILE).is_file()


def run_results(run_dir: Path) -> dict[str, Any]:
    """The ``results.json`` of a run folder's last finished evaluation (``<phase>/eval/``)."""
    recs = [r for r in PhaseState.load(Path(run_dir) / STATE_FILE).records() if r.name == "eval"]
    if not recs:
        raise DataError(f"{run_dir}: run folder without a finished evaluation (no eval phase in {STATE_FILE})")
    last = recs[-1]
    return load_results(Path(run_dir) / Phase(last.name, last.round, last.stage).folder / "eval")


def load_compared(path: Path) -> dict[str, Any]:
    """``--compare`` input: a result folder (or results.json) of ``coevolve eval``, or a run
    folder (its last evaluation); anything else is a DataError saying which is expected."""
    p = Path(path)
    if is_run_folder(p):
        return run_results(p)
    if (p / "results.json").is_file() or (p.is_file() and p.name.endswith(".json")):
        return load_results(p)
    raise DataError(
        f"{p}: neither a result folder of `coevolve eval` (no results.json) nor a run folder "
        "(no state.json + config.yaml)"
    )


def compare_results(dirs: list[Path]) -> str:
    """Markdown table putting several result folders or run folders (their last evaluation)
    side by side (scores in %).

    Columns are the folder names (made unique with their parent when needed), plus
    "Δ last−first" when there are two or more; rows are the union of benchmarks in order of
    first appearance, then the averages. A cell is "–" where a run lacks that benchmark.
    """
    if not dirs:
        raise DataError("compare: no result folders given")
    runs = [load_compared(d) for d in dirs]
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
        rows.append((b, [r["benchmarks"][b]["score"] if b in r["benchmarks"] else None for r in runs]))
    for cat in AVERAGE_ORDER:
        vals = [r.get("averages", {}).get(cat) for r in runs]
        if any(v is not None for v in vals):
            rows.append((f"**avg {cat}**", vals))
    delta = len(runs) >= 2
    head = "| benchmark | " + " | ".join(names) + (" | Δ last−first |" if delta else " |")
    sep = "|---|" + "---:|" * (len(names) + (1 if delta else 0))
    out = [head, sep]
    for label, vals in rows:
        cells = [pct(v) for v in vals]
        if delta:
            a, z = vals[0], vals[-1]
            cells.append("–" if a is None or z is None else f"{100.0 * (z - a):+.1f}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
