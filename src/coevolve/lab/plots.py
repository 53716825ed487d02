"""The run report's figures: PNG plots of whatever series a run folder has (``make_plots``), and
the accuracy-against-compute figure the report and the study draw (``plot_compute``, its points
as CSV). Drawn on ``matplotlib.figure.Figure`` objects (Agg canvas), never through pyplot, so
nothing global is touched and it runs headless."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.lab.run_view import (
    FINAL,
    ComputePoint,
    RunData,
    compute_curve,
    eval_series,
    pass_rate_hists,
    per_round,
    per_step,
    phase_totals,
    signal_series,
    true_accuracy,
)
from coevolve.run.compute import COUNTERS
from coevolve.run.files import atomic_write_text

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


def _signal_plot(data: RunData, out_dir: Path) -> list[Plot]:
    """Each probe signal by round (left axis) beside held-out accuracy (right axis, dashed)."""
    sig = signal_series(data)
    if not sig:
        return []
    truth = true_accuracy(data)
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
