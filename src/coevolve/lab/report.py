"""Run report: PNG plots and a markdown summary for any recipe's run folder.

Why one generic reporter: every recipe logs through the same run-folder conventions
(docs/CONTRACTS.md: ``metrics.jsonl`` with namespaced keys, ``summary.json``, ``round_NN/*.jsonl``),
so a single reader can plot whatever series a run actually has (D²Evo curricula, DiagEvo memory,
plain GRPO rewards) and skip the rest. The folder is read by ``coevolve.lab.run_view``, the
figures drawn by ``coevolve.lab.plots``; this module writes the markdown around them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.curriculum.difficulty import histogram_labels, pass_rate_histogram
from coevolve.eval.signals import rank_correlation
from coevolve.lab.compare import compute_table
from coevolve.lab.plots import Plot, make_plots
from coevolve.lab.run_view import (
    FINAL,
    RunData,
    compute_curve,
    eval_series,
    grader_totals,
    load_run,
    number,
    per_step,
    phase_totals,
    round_of,
    signal_series,
    true_accuracy,
)
from coevolve.run.compute import CUT_OFF_WARN
from coevolve.run.files import atomic_write_text


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


def _signals_section(data: RunData) -> list[str]:
    """Probe signals by round with held-out accuracy, each signal's rank correlation with it
    over the rounds (base included), and the round run.select chose."""
    sig = signal_series(data)
    if not sig:
        return []
    truth = true_accuracy(data)
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
    rounds = sorted({round_of(r) for r in data.rows if r.get("round") is not None})
    if rounds:
        facts.append(f"rounds {min(rounds)}–{max(rounds)}")
    if number(s.get("wall_seconds")) is not None:
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
    rows = [(b, r) for b, r in final.items() if isinstance(r, dict) and number(r.get("score_std")) is not None]
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
    keys = sorted({k for r in rows for k, v in r.items() if k != "round" and (number(v) is not None)})
    if not rows or not keys:
        return []
    out = [
        "## Per round",
        "",
        "| figure | " + " | ".join(f"round {r.get('round')}" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    out += [f"| `{k}` | " + " | ".join(_fmt(number(r.get(k))) for r in rows) + " |" for k in keys]
    return out + [""]


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
