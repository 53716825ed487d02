"""Run report: PNG plots and a markdown summary for any recipe's run folder.

Why one generic reporter: every recipe logs through the same run-folder conventions
(docs/CONTRACTS.md: ``metrics.jsonl`` with namespaced keys, ``summary.json``, ``round_NN/*.jsonl``),
so a single reader can plot whatever series a run actually has (D²Evo curricula, DiagEvo memory,
plain GRPO rewards) and skip the rest. Plots are drawn on ``matplotlib.figure.Figure`` objects
(Agg canvas), never through pyplot, so nothing global is touched and it runs headless.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from coevolve.curriculum.difficulty import histogram_labels, pass_rate_histogram
from coevolve.errors import DataError, RunStateError
from coevolve.jsonl import iter_jsonl
from coevolve.run import METRICS_FILE, STATE_FILE, SUMMARY_FILE
from coevolve.run.compute import COUNTERS, CUT_OFF_WARN, EVAL_PHASE, Compute, cumulative
from coevolve.run.files import atomic_write_text
from coevolve.run.state import PhaseRecord

_ROUND_DIR = re.compile(r"^round_(\d+)$")
FINAL = -1
"""Key of the pass rates measured after the last round (``final/difficulty.jsonl``)."""


@dataclass
class RunData:
    """Everything the report reads from a run folder.

    ``rows`` are the metrics.jsonl objects in file order; ``bad_lines`` the ``file:line`` of
    lines that were not JSON objects (e.g. the partial last line of a killed run), which the
    report lists instead of failing; ``difficulty`` maps round -> pass rates read from
    ``round_NN/difficulty.jsonl`` (``FINAL`` for ``final/difficulty.jsonl``); ``records`` the
    finished phases of ``state.json`` (empty when the folder has none or it is unreadable).
    """

    path: Path
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    difficulty: dict[int, list[float]] = field(default_factory=dict)
    bad_lines: list[str] = field(default_factory=list)
    records: list[PhaseRecord] = field(default_factory=list)


def _round_of(row: dict[str, Any]) -> int:
    r = row.get("round")
    try:
        return int(r) if r is not None else 0
    except (TypeError, ValueError):
        return 0


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def load_run(run_dir: Path) -> RunData:
    """Read metrics.jsonl, summary.json and round_NN/difficulty.jsonl from ``run_dir``.

    Raises ``RunStateError`` when the folder has neither metrics.jsonl nor summary.json and
    ``DataError`` (naming the file) when summary.json is not valid JSON.
    """
    run_dir = Path(run_dir)
    mpath, spath = run_dir / METRICS_FILE, run_dir / SUMMARY_FILE
    if not run_dir.is_dir() or (not mpath.exists() and not spath.exists()):
        raise RunStateError(f"{run_dir}: not a run folder (no {METRICS_FILE} or {SUMMARY_FILE})")
    bad: list[str] = []
    rows = [obj for _, obj in iter_jsonl(mpath, on_error="skip", problems=bad)] if mpath.exists() else []
    summary: dict[str, Any] = {}
    if spath.exists():
        try:
            loaded = json.loads(spath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{spath}:{e.lineno}: invalid JSON ({e.msg})") from e
        if not isinstance(loaded, dict):
            raise DataError(f"{spath}: expected a JSON object")
        summary = loaded
    difficulty: dict[int, list[float]] = {}
    folders = [(int(m.group(1)), d) for d in sorted(run_dir.iterdir()) if (m := _ROUND_DIR.match(d.name))]
    for rnd, d in folders + [(FINAL, run_dir / "final")]:
        if not (d / "difficulty.jsonl").is_file():
            continue
        rates = [
            v
            for _, obj in iter_jsonl(d / "difficulty.jsonl", on_error="skip", problems=bad)
            if (v := _num(obj.get("pass_rate"))) is not None
        ]
        if rates:
            difficulty[rnd] = rates
    return RunData(run_dir, rows, summary, difficulty, bad, _phase_records(run_dir / STATE_FILE, bad))


def _phase_records(path: Path, bad: list[str]) -> list[PhaseRecord]:
    """Finished phases from ``state.json``; a missing file gives none, an unreadable one is
    listed with the skipped lines (the report still draws what metrics.jsonl has)."""
    if not path.is_file():
        return []
    try:
        phases = json.loads(path.read_text(encoding="utf-8")).get("phases", [])
        names = {f.name for f in fields(PhaseRecord)}
        return [PhaseRecord(**{k: v for k, v in p.items() if k in names}) for p in phases]
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError) as e:
        bad.append(f"{path}: unreadable ({e})")
        return []


@dataclass(frozen=True)
class ComputePoint:
    """One evaluation of a run against the compute spent to reach it: held-out ``greedy`` /
    ``sampled`` accuracy on ``bench`` at phase ``key``, with the run's cumulative ``train``
    compute (every non-evaluation phase finished before it) and ``eval`` compute (evaluation
    phases up to and including it); see ``coevolve.run.compute`` for the counters."""

    run: str
    key: str
    bench: str
    greedy: float | None
    sampled: float | None
    train: Compute
    eval: Compute


def compute_curve(data: RunData, name: str | None = None) -> list[ComputePoint] | None:
    """Every held-out evaluation of the run with its cumulative compute, in finishing order;
    None when the run's phases carry no compute (made before the counters existed, or no
    state.json)."""
    points = cumulative(data.records) if data.records else None
    if points is None:
        return None
    label = name or data.path.name
    out = []
    for rec, pt in zip(data.records, points):
        if rec.name != EVAL_PHASE:
            continue
        ev = rec.values.get("eval") if isinstance(rec.values.get("eval"), dict) else {}
        for bench, vals in ev.items():
            if isinstance(vals, dict):
                out.append(
                    ComputePoint(
                        label, rec.key, bench, _num(vals.get("greedy")), _num(vals.get("sampled")), pt.train, pt.eval
                    )
                )
    return out


COUNTER_LABELS = {
    "rollouts": "rollouts (cumulative, training)",
    "generated_tokens": "generated tokens (cumulative, training)",
    "trained_tokens": "trained tokens (cumulative)",
    "labels": "gold labels used (cumulative)",
}


def plot_compute(curves: dict[str, list[ComputePoint]], out_dir: Path, file: str = "accuracy_vs_compute.png") -> Plot:
    """One figure, one panel per counter: greedy held-out accuracy against the run's cumulative
    training compute, one line per run (and benchmark, when a run has several)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = _figure(2, 2, width=5.2, height=3.6)
    for i, counter in enumerate(COUNTERS):
        ax = axes[i // 2][i % 2]
        for run, pts in curves.items():
            benches = list(dict.fromkeys(p.bench for p in pts))
            for bench in benches:
                xy = [(getattr(p.train, counter), p.greedy) for p in pts if p.bench == bench and p.greedy is not None]
                if xy:
                    ax.plot(
                        [x for x, _ in xy],
                        [y for _, y in xy],
                        marker="o",
                        label=run if len(benches) == 1 else f"{run} {bench}",
                    )
        ax.set_xlabel(COUNTER_LABELS[counter])
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))  # 10^5 tokens: no overlapping tick labels
        ax.set_ylabel("held-out greedy accuracy")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=8)
    fig.suptitle("Held-out accuracy against compute")
    _save(fig, out_dir / file)
    return Plot(file, "Held-out accuracy against compute", [f"compute/train/{k}" for k in COUNTERS])


def compute_table(curves: dict[str, list[ComputePoint]]) -> list[str]:
    """Markdown table of every (compute, accuracy) point: one row per run, evaluation, benchmark."""
    head = (
        "| run | phase | bench | greedy | sampled | "
        + " | ".join(COUNTERS)
        + " | "
        + " | ".join(f"eval {k}" for k in ("rollouts", "generated_tokens"))
        + " |"
    )
    out = [head, "|---|---|---|---:|---:|" + "---:|" * (len(COUNTERS) + 2)]
    for run, pts in curves.items():
        for p in pts:
            out.append(
                f"| {run} | {p.key} | {p.bench} | {_fmt(p.greedy)} | {_fmt(p.sampled)} | "
                + " | ".join(str(getattr(p.train, k)) for k in COUNTERS)
                + " | "
                + f"{p.eval.rollouts} | {p.eval.generated_tokens} |"
            )
    return out


def write_compute_points(curves: dict[str, list[ComputePoint]], path: Path) -> Path:
    """The points of ``plot_compute`` as CSV (run, phase, bench, greedy, sampled, train_* and
    eval_* counters), for replotting elsewhere."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "run",
            "phase",
            "bench",
            "greedy",
            "sampled",
            *(f"train_{k}" for k in COUNTERS),
            *(f"eval_{k}" for k in COUNTERS),
        ]
    )
    for pts in curves.values():
        for p in pts:
            w.writerow(
                [
                    p.run,
                    p.key,
                    p.bench,
                    p.greedy,
                    p.sampled,
                    *(getattr(p.train, k) for k in COUNTERS),
                    *(getattr(p.eval, k) for k in COUNTERS),
                ]
            )
    atomic_write_text(path, buf.getvalue())
    return path


# ----------------------------------------------------------------------------------------------
# series extraction


def per_round(rows: Iterable[dict[str, Any]], key: str, agg: str = "last") -> dict[int, float]:
    """round -> value of ``key`` (``last`` logged value or ``mean`` of the round's values)."""
    acc: dict[int, list[float]] = {}
    for r in rows:
        v = _num(r.get(key))
        if v is not None:
            acc.setdefault(_round_of(r), []).append(v)
    if agg == "mean":
        return {k: sum(v) / len(v) for k, v in sorted(acc.items())}
    return {k: v[-1] for k, v in sorted(acc.items())}


def per_step(rows: Iterable[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[int]]:
    """(cumulative update index, values, rounds) of every row that logs ``key``.

    Steps restart in each round in some recipes, so the x axis is the running count of rows
    with the key; rounds are returned so round boundaries can be drawn.
    """
    xs: list[int] = []
    ys: list[float] = []
    rs: list[int] = []
    for r in rows:
        v = _num(r.get(key))
        if v is not None:
            xs.append(len(xs))
            ys.append(v)
            rs.append(_round_of(r))
    return xs, ys, rs


def eval_series(data: RunData) -> dict[str, dict[int, float]]:
    """``"<bench>/<greedy|sampled>"`` -> {round: accuracy} from metrics, filled from summary.json.

    Base evaluation counts as round 0; summary ``final`` fills the run's last round when the
    metrics have no value there (metrics win when both exist).
    """
    out: dict[str, dict[int, float]] = {}
    for key in sorted({k for r in data.rows for k in r if k.startswith("eval/")}):
        parts = key.split("/")
        if len(parts) == 3:
            s = per_round(data.rows, key)
            if s:
                out[f"{parts[1]}/{parts[2]}"] = s
    ev = data.summary.get("eval") if isinstance(data.summary.get("eval"), dict) else {}
    staged: list[tuple[int | None, Any]] = [(0, ev.get("base"))]
    rounds = ev.get("rounds") if isinstance(ev.get("rounds"), dict) else {}
    for rk, val in rounds.items():
        try:
            staged.append((int(rk), val))
        except ValueError:
            continue
    staged.append((None, ev.get("final")))
    logged = [_round_of(r) for r in data.rows if r.get("round") is not None]
    last_round = max(logged + [int(r) for r, _ in staged if r is not None], default=0)
    for rnd, block in staged:
        if not isinstance(block, dict):
            continue
        for bench, vals in block.items():
            if not isinstance(vals, dict):
                continue
            for kind in ("greedy", "sampled"):
                v = _num(vals.get(kind))
                if v is None:
                    continue
                s = out.setdefault(f"{bench}/{kind}", {})
                if rnd is None:
                    s.setdefault(last_round, v)
                else:
                    s.setdefault(rnd, v)
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def pass_rate_hists(data: RunData) -> dict[int, tuple[list[float], list[float]]]:
    """round -> (counts, edges) from ``curriculum/pass_rate_hist`` (+ ``curriculum/hist_edges``),
    else from ``round_NN/difficulty.jsonl`` pass rates binned on [0, 1] in 10 bins."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for r in data.rows:
        counts = r.get("curriculum/pass_rate_hist")
        if not isinstance(counts, list) or not counts:
            continue
        c = [float(x) for x in counts if _num(x) is not None]
        edges = r.get("curriculum/hist_edges")
        if isinstance(edges, list) and len(edges) == len(c) + 1:
            e = [float(x) for x in edges]
        else:
            e = [i / len(c) for i in range(len(c) + 1)]
        out[_round_of(r)] = (c, e)
    for rnd, rates in data.difficulty.items():
        if rnd in out:
            continue
        e = [i / 10 for i in range(11)]
        c = [0.0] * 10
        for p in rates:
            c[min(9, max(0, int(p * 10)))] += 1
        out[rnd] = (c, e)
    return dict(sorted(out.items()))


def phase_totals(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """phase name -> {"seconds": total, "rollouts": total} summed over all rounds."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        for k, v in r.items():
            m = re.match(r"^phase/(.+)/(seconds|rollouts)$", k)
            val = _num(v)
            if m and val is not None:
                d = out.setdefault(m.group(1), {"seconds": 0.0, "rollouts": 0.0})
                d[m.group(2)] += val
    return out


GRADER_COUNTERS = ("timeouts", "errors", "refused", "memory", "calls", "worker_calls")
"""The grader counters each phase logs (``phase/<name>/grader_<counter>``, ``GraderStats.decided``)."""


def grader_totals(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """phase name -> {counter: total over all rounds} of the grader counters."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        for k, v in r.items():
            m = re.match(r"^phase/(.+)/grader_(\w+)$", k)
            val = _num(v)
            if m and val is not None and m.group(2) in GRADER_COUNTERS:
                d = out.setdefault(m.group(1), dict.fromkeys(GRADER_COUNTERS, 0))
                d[m.group(2)] += int(val)
    return out


def _grader_section(rows: list[dict[str, Any]]) -> list[str]:
    """Per phase, the verdicts the grader decided rather than the answer (all "not equal"): a
    math-verify call killed at ``run.grader_timeout``, a worker error, an answer refused by the
    over-limit rule. Shown only when one happened."""
    totals = grader_totals(rows)
    if not any(d["timeouts"] + d["errors"] + d["refused"] + d["memory"] for d in totals.values()):
        return []
    lines = [
        "## Rewards the grader decided",
        "",
        'Each is "not equal" whatever the answer: a timeout (`run.grader_timeout`), a worker error, '
        "an answer over the grader's length, nesting or exponent limit (refused), or a math-verify call "
        "past the worker's memory limit.",
        "",
        "| phase | timeouts | errors | refused | memory | comparisons | math-verify calls |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {d['timeouts']} | {d['errors']} | {d['refused']} | {d['memory']} | {d['calls']} "
        f"| {d['worker_calls']} |"
        for name, d in totals.items()
    ]
    return [*lines, ""]


# ----------------------------------------------------------------------------------------------
# plotting


def _figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.0) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=100)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _round_lines(ax: Any, series: dict[str, dict[int, float]], ylabel: str, title: str) -> None:
    for label, s in series.items():
        ax.plot(list(s.keys()), list(s.values()), marker="o", label=label)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1 or any(series):
        ax.legend(fontsize=8)


def _step_lines(ax: Any, rows: list[dict[str, Any]], keys: list[str], title: str) -> list[str]:
    drawn = []
    for key in keys:
        xs, ys, rs = per_step(rows, key)
        if not xs:
            continue
        ax.plot(xs, ys, label=key, linewidth=1.2)
        drawn.append(key)
        for i in range(1, len(rs)):
            if rs[i] != rs[i - 1]:
                ax.axvline(i - 0.5, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("update (cumulative; dotted = new round)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return drawn


@dataclass
class Plot:
    """One written figure: file name, title and the metric keys it shows."""

    file: str
    title: str
    keys: list[str]


PER_ROUND_PLOTS = [
    ("anchors.png", "Anchors per round", ["curriculum/anchors"], "last", "count"),
    (
        "in_band.png",
        "Share of generated questions inside the band",
        ["questioner/in_band", "challenger/in_band"],
        "mean",
        "share",
    ),
    (
        "pseudo_label_acc.png",
        "Pseudo-label accuracy vs oracle",
        ["curriculum/buffer/oracle_acc_kept", "curriculum/oracle_acc_kept"],
        "mean",
        "accuracy",
    ),
    (
        "memory.png",
        "Error-cause memory",
        ["memory/causes", "memory/nodes", "memory/active", "memory/mastered"],
        "last",
        "count",
    ),
    ("epsilon.png", "Exploration rate ε for the next round", ["memory/next_epsilon"], "last", "ε"),
]
"""(file, title, metric keys, how a round's values are folded, y label) of the per-round plots."""

STEP_PLOTS = [
    ("writer_reward.png", "Questioner / challenger reward", [["questioner/reward_mean", "challenger/reward_mean"]]),
    (
        "solver.png",
        "Solver reward and share of zero-variance groups",
        [["solver/reward_mean"], ["solver/frac_zero_std"]],
    ),
]
"""(file, title, panels of metric keys) of the per-step plots."""


def make_plots(data: RunData, out_dir: Path) -> list[Plot]:
    """Write one PNG per family of series present in the run; returns what was written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    present = {k for r in data.rows for k in r}
    plots: list[Plot] = []
    ev = eval_series(data)
    if ev:
        fig, ax = _figure()
        _round_lines(ax[0][0], ev, "accuracy", "Held-out accuracy per round (0 = base)")
        _save(fig, out_dir / "heldout_accuracy.png")
        plots.append(Plot("heldout_accuracy.png", "Held-out accuracy per round", [f"eval/{k}" for k in ev]))
    plots += _signal_plot(data, out_dir) + _hist_plot(data, out_dir, present) + _per_round_plots(data, out_dir, present)
    plots += _step_plots(data, out_dir, present) + _phase_plot(data, out_dir, present)
    curve = compute_curve(data)
    if curve:
        plots.append(plot_compute({data.path.name: curve}, out_dir))
        write_compute_points({data.path.name: curve}, out_dir / "accuracy_vs_compute.csv")
    return plots


def signal_series(data: RunData) -> dict[str, dict[int, float]]:
    """Probe signal -> {round: value} (round 0: the base model), from ``probe/<signal>`` rows."""
    from coevolve.eval.signals import PROBE_PREFIX, SIGNAL_ORDER

    out = {name: per_round(data.rows, PROBE_PREFIX + name) for name in SIGNAL_ORDER}
    return {k: v for k, v in out.items() if v}


def _true_accuracy(data: RunData) -> tuple[str, dict[int, float]] | None:
    """The held-out series the signals are drawn beside: the first greedy one."""
    ev = eval_series(data)
    name = next((k for k in ev if k.endswith("/greedy")), next(iter(ev), None))
    return None if name is None else (name, ev[name])


def _signal_plot(data: RunData, out_dir: Path) -> list[Plot]:
    """Each probe signal by round (left axis) beside held-out accuracy (right axis, dashed)."""
    sig = signal_series(data)
    if not sig:
        return []
    truth = _true_accuracy(data)
    cols = min(4, len(sig))
    nrows = math.ceil(len(sig) / cols)
    fig, axes = _figure(cols, nrows, width=3.4, height=2.8)
    for i, (name, ser) in enumerate(sig.items()):
        ax = axes[i // cols][i % cols]
        ax.plot(list(ser), list(ser.values()), marker="o", color="tab:blue")
        ax.set_title(f"probe {name}", fontsize=9)
        ax.set_xlabel("round (0 = base)", fontsize=8)
        if truth is not None:
            twin = ax.twinx()
            twin.plot(list(truth[1]), list(truth[1].values()), marker="s", linestyle="--", color="tab:red")
            twin.tick_params(labelsize=7, colors="tab:red")
    for j in range(len(sig), nrows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle("Probe signals (blue) and held-out accuracy" + (f" {truth[0]} (red, dashed)" if truth else ""))
    _save(fig, out_dir / "round_signals.png")
    return [
        Plot(
            "round_signals.png",
            "Probe signals by round beside held-out accuracy",
            [f"probe/{k}" for k in sig] + ([f"eval/{truth[0]}"] if truth else []),
        )
    ]


def _signals_section(data: RunData) -> list[str]:
    """Probe signals by round with held-out accuracy, each signal's rank correlation with it
    over the rounds (base included), and the round run.select chose."""
    from coevolve.eval.signals import rank_correlation

    sig = signal_series(data)
    if not sig:
        return []
    truth = _true_accuracy(data)
    rounds = sorted({t for ser in sig.values() for t in ser})
    head = ["round", *sig, *([f"held-out {truth[0]}"] if truth else [])]
    lines = [
        "## Round signals (probe set)",
        "",
        "Measured on the fixed probe set after every round (round 0: the base model); definitions in docs/stopping.md.",
        "",
        "| " + " | ".join(head) + " |",
        "|---:|" + "---:|" * (len(head) - 1),
    ]
    for t in rounds:
        cells = [_fmt(ser.get(t)) for ser in sig.values()] + ([_fmt(truth[1].get(t), True)] if truth else [])
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    if truth:
        corr = []
        for name, ser in sig.items():
            both = [t for t in ser if t in truth[1]]
            rho = rank_correlation([ser[t] for t in both], [truth[1][t] for t in both])
            corr.append(f"{name} {_fmt(None if rho is None else round(rho, 2))}")
        lines += ["", f"Spearman correlation with held-out {truth[0]} across rounds: " + ", ".join(corr) + "."]
    sel = data.summary.get("selection")
    if isinstance(sel, dict) and sel.get("round") is not None:
        lines += ["", f"Chosen round: **{sel['round']}** ({sel.get('why', '')})."]
    return lines + [""]


def _hist_plot(data: RunData, out_dir: Path, present: set[str]) -> list[Plot]:
    """The pass-rate histogram of the question pool after every round."""
    hists = pass_rate_hists(data)
    if not hists:
        return []
    n = len(hists)
    cols = min(4, n)
    nrows = math.ceil(n / cols)
    fig, axes = _figure(cols, nrows, width=3.2, height=2.6)
    for i, (rnd, (counts, edges)) in enumerate(hists.items()):
        ax = axes[i // cols][i % cols]
        widths = [edges[j + 1] - edges[j] for j in range(len(counts))]
        ax.bar(edges[:-1], counts, width=widths, align="edge", edgecolor="black")
        ax.set_title("after the last round" if rnd == FINAL else f"round {rnd}", fontsize=9)
        ax.set_xlabel("solver pass rate", fontsize=8)
    for j in range(n, nrows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle("Pass-rate histogram of the question pool")
    _save(fig, out_dir / "pass_rate_hist.png")
    return [
        Plot(
            "pass_rate_hist.png",
            "Pass-rate histograms per round",
            ["curriculum/pass_rate_hist"]
            if "curriculum/pass_rate_hist" in present
            else ["round_NN/difficulty.jsonl:pass_rate"],
        )
    ]


def _per_round_plots(data: RunData, out_dir: Path, present: set[str]) -> list[Plot]:
    plots = []
    for file, title, keys, agg, ylabel in PER_ROUND_PLOTS:
        series = {k: per_round(data.rows, k, agg) for k in keys if k in present}
        series = {k: v for k, v in series.items() if v}
        if not series:
            continue
        fig, ax = _figure()
        _round_lines(ax[0][0], series, ylabel, title)
        _save(fig, out_dir / file)
        plots.append(Plot(file, title, list(series)))
    return plots


def _step_plots(data: RunData, out_dir: Path, present: set[str]) -> list[Plot]:
    plots = []
    for file, title, panels in STEP_PLOTS:
        panels = [[k for k in p if k in present] for p in panels]
        panels = [p for p in panels if p]
        if not panels:
            continue
        fig, axes = _figure(1, len(panels), height=3.2)
        drawn: list[str] = []
        for i, keys in enumerate(panels):
            drawn += _step_lines(axes[i][0], data.rows, keys, title if i == 0 else "")
        if drawn:
            _save(fig, out_dir / file)
            plots.append(Plot(file, title, drawn))
    return plots


def _phase_plot(data: RunData, out_dir: Path, present: set[str]) -> list[Plot]:
    """Total time and rollouts per phase."""
    phases = phase_totals(data.rows)
    if not phases:
        return []
    names = list(phases)
    fig, axes = _figure(2, 1, width=max(4.0, 0.9 * len(names) + 2))
    for ax, kind in zip(axes[0], ("seconds", "rollouts")):
        ax.bar(names, [phases[n][kind] for n in names])
        ax.set_title(f"total {kind} per phase")
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    _save(fig, out_dir / "phases.png")
    return [Plot("phases.png", "Time and rollouts per phase", sorted(k for k in present if k.startswith("phase/")))]


# ----------------------------------------------------------------------------------------------
# markdown


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.1f}%" if pct else (f"{v:.4g}" if isinstance(v, float) else str(v))


KEY_NUMBERS = [
    "solver/reward_mean",
    "solver/frac_zero_std",
    "questioner/reward_mean",
    "challenger/reward_mean",
    "questioner/in_band",
    "curriculum/anchors",
    "curriculum/buffer/oracle_acc_kept",
    "curriculum/oracle_acc_kept",
    "memory/causes",
    "memory/nodes",
    "memory/active",
    "memory/mastered",
    "memory/next_epsilon",
]
"""Metrics whose first and last values report.md lists."""


def render_markdown(data: RunData, plots: list[Plot]) -> str:
    """report.md: run facts, base vs final accuracy, per-round eval table, plot list, key
    last values, and any malformed lines that were skipped."""
    lines = [f"# Run report: {data.path.name}", "", _facts(data), ""] + _premise_section(data.summary)
    lines += _accuracy_section(data) + ["## Plots", ""]
    if plots:
        for p in plots:
            lines += [
                f"### {p.title}",
                "",
                f"![{p.title}]({p.file})",
                "",
                "Series: " + ", ".join(f"`{k}`" for k in p.keys),
                "",
            ]
    else:
        lines += ["No plottable series found.", ""]
    lines += _signals_section(data) + _compute_section(data) + _cut_off_section(data.summary)
    lines += _grader_section(data.rows)
    lines += _histogram_table(data) + _rounds_table(data.summary)
    key_rows = []
    for k in KEY_NUMBERS:
        _, ys, _ = per_step(data.rows, k)
        if ys:
            key_rows.append(f"| `{k}` | {_fmt(ys[0])} | {_fmt(ys[-1])} | {len(ys)} |")
    if key_rows:
        lines += ["## Key numbers", "", "| metric | first | last | points |", "|---|---:|---:|---:|", *key_rows, ""]
    phases = phase_totals(data.rows)
    if phases:
        lines += ["## Phases", "", "| phase | seconds | rollouts |", "|---|---:|---:|"]
        lines += [f"| {name} | {d['seconds']:.1f} | {int(d['rollouts'])} |" for name, d in phases.items()] + [""]
    if data.bad_lines:
        lines += [
            "## Skipped malformed lines",
            "",
            *(f"- {b}" for b in data.bad_lines[:20]),
            *([f"- ... and {len(data.bad_lines) - 20} more"] if len(data.bad_lines) > 20 else []),
            "",
        ]
    return "\n".join(lines)


def _premise_section(summary: dict[str, Any]) -> list[str]:
    """The methods' premise per round (summary ``premise``: kept pseudo-label accuracy against the
    oracle, share in band, zero-variance groups) and its warnings, first: a run whose labels are
    mostly wrong says nothing about the method, and the reader should see that before the results."""
    rows = [r for r in summary.get("premise") or [] if any(r.get(k) is not None for k in PREMISE_KEYS)]
    warnings = [f"**Warning:** {w}" for w in summary.get("warnings") or []]
    if not rows and not warnings:
        return []
    table = ["| round | kept labels right | in band | zero-variance groups |", "|---:|---:|---:|---:|"]
    table += [f"| {r['round']} | " + " | ".join(_fmt(r.get(k), pct=True) for k in PREMISE_KEYS) + " |" for r in rows]
    return ["## Premise", "", *warnings, *([""] if warnings else []), *(table if rows else []), ""]


PREMISE_KEYS = ("kept_label_accuracy", "in_band", "zero_variance")


def _cut_off_section(summary: dict[str, Any]) -> list[str]:
    """Per phase, the share of its completions cut off by the token budget (summary ``cut_off``);
    a phase past ``CUT_OFF_WARN`` is marked, since its cut-off answers counted as non-answers."""
    shares = summary.get("cut_off") or {}
    if not shares:
        return []
    rows = [
        f"| {k} | {v:.1%} |{' over ' + format(CUT_OFF_WARN, '.0%') if v > CUT_OFF_WARN else ''} |"
        for k, v in shares.items()
    ]
    return ["## Cut off by the token budget", "", "| phase | share | |", "|---|---:|---|", *rows, ""]


def _facts(data: RunData) -> str:
    s = data.summary
    facts = []
    if s.get("recipe"):
        facts.append(f"recipe **{s['recipe']}**")
    rounds = sorted({_round_of(r) for r in data.rows if r.get("round") is not None})
    if rounds:
        facts.append(f"rounds {min(rounds)}–{max(rounds)}")
    if _num(s.get("wall_seconds")) is not None:
        facts.append(f"wall time {float(s['wall_seconds']) / 60:.1f} min")
    facts.append(f"{len(data.rows)} metric rows")
    return "; ".join(facts) + "."


def _accuracy_section(data: RunData) -> list[str]:
    """Base vs final held-out accuracy per series, and every round's."""
    ev = eval_series(data)
    if not ev:
        return []
    lines = ["## Held-out accuracy", "", "| series | base | final | Δ |", "|---|---:|---:|---:|"]
    for name, ser in ev.items():
        rs = sorted(ser)
        base, final = ser[rs[0]], ser[rs[-1]]
        lines.append(
            f"| {name} | {_fmt(base, True)} (r{rs[0]}) | {_fmt(final, True)} "
            f"(r{rs[-1]}) | {100 * (final - base):+.1f} |"
        )
    all_rounds = sorted({r for ser in ev.values() for r in ser})
    lines += ["", "Per round:", "", "| round | " + " | ".join(ev) + " |", "|---:|" + "---:|" * len(ev)]
    for r in all_rounds:
        lines.append(f"| {r} | " + " | ".join(_fmt(ser.get(r), True) for ser in ev.values()) + " |")
    return lines + [""] + _spread_lines(data.summary)


def _spread_lines(summary: dict[str, Any]) -> list[str]:
    """The last evaluation's score per benchmark as mean ± sample std over its evaluation runs
    (``eval.repeats`` > 1); nothing for a run evaluated once."""
    ev = summary.get("eval") if isinstance(summary.get("eval"), dict) else {}
    final = ev.get("final") if isinstance(ev.get("final"), dict) else {}
    rows = [(b, r) for b, r in final.items() if isinstance(r, dict) and _num(r.get("score_std")) is not None]
    if not rows:
        return []
    runs = rows[0][1].get("repeats", "several")
    return [
        f"Last evaluation, mean ± sample std (ddof 1) over {runs} evaluation runs (greedy metrics run once):",
        "",
        "| benchmark | metric | score |",
        "|---|---|---:|",
        *(f"| {b} | {r.get('metric', '')} | {100 * r['score']:.1f} ± {100 * r['score_std']:.1f}% |" for b, r in rows),
        "",
    ]


def _compute_section(data: RunData) -> list[str]:
    """Held-out accuracy against cumulative compute (``coevolve.run.compute``), or why not."""
    curve = compute_curve(data)
    if curve is None:
        return [
            "## Compute",
            "",
            "No compute counters in this run (made before coevolve recorded them, or no "
            "state.json): accuracy against compute is not available.",
            "",
        ]
    if not curve:
        return []
    return [
        "## Accuracy against compute",
        "",
        "Cumulative training compute when each evaluation ran (eval columns: evaluation compute so far); "
        "points also in `accuracy_vs_compute.csv`.",
        "",
        *compute_table({data.path.name: curve}),
        "",
    ]


def _histogram_table(data: RunData) -> list[str]:
    """Pool pass-rate histogram per round (measured by the solver entering the round) and after
    the last round, with the never-solved and always-solved bins apart."""
    if not data.difficulty:
        return []
    labels = histogram_labels()
    out = ["## Pool pass-rate histogram", "", "| when | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for rnd, rates in data.difficulty.items():
        h = pass_rate_histogram(min(1.0, max(0.0, r)) for r in rates)
        out.append(
            f"| {'after last round' if rnd == FINAL else f'round {rnd}'} | "
            + " | ".join(str(h[k]) for k in labels)
            + " |"
        )
    return out + [""]


def _rounds_table(summary: dict[str, Any]) -> list[str]:
    """Every scalar figure the phases recorded, one column per round (summary.json ``rounds``)."""
    rows = [r for r in summary.get("rounds", []) if isinstance(r, dict)]
    keys = sorted({k for r in rows for k, v in r.items() if k != "round" and (_num(v) is not None)})
    if not rows or not keys:
        return []
    out = [
        "## Per round",
        "",
        "| figure | " + " | ".join(f"round {r.get('round')}" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    out += [f"| `{k}` | " + " | ".join(_fmt(_num(r.get(k))) for r in rows) + " |" for k in keys]
    return out + [""]


def compare_compute(run_dirs: list[Path], out_dir: Path) -> tuple[list[Path], list[str]]:
    """``coevolve eval --compare`` over run folders: one figure of held-out accuracy against each
    compute counter with a line per run (labelled ``folder (recipe)``), the points as CSV and
    markdown in ``out_dir``. Returns (files written, notes on runs without counters)."""
    curves: dict[str, list[ComputePoint]] = {}
    notes = []
    for d in run_dirs:
        data = load_run(Path(d))
        recipe = data.summary.get("recipe") or _state_recipe(Path(d))
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


def _state_recipe(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8")).get("recipe", ""))
    except (OSError, json.JSONDecodeError, AttributeError):
        return ""


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report/`` (PNG plots + ``report.md``) and return the report.md path.

    Works for any recipe: only the series present in the run are plotted, and the markdown
    lists what was plotted plus the key numbers (base vs final held-out accuracy).
    """
    data = load_run(Path(run_dir))
    out = Path(run_dir) / "report"
    plots = make_plots(data, out)
    md = out / "report.md"
    atomic_write_text(md, render_markdown(data, plots))
    return md
