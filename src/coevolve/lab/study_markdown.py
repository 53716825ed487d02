"""The study's markdown (``docs/results/study.md``) and its JSON (``study.json``) from the figures of
``coevolve.lab.study``: one function per section, ``render_markdown`` joins them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from coevolve.lab.stats import CONFIDENCE, Interval
from coevolve.lab.study import (
    CURRICULUM_KEYS,
    ORACLE_FILTERS,
    VARIANTS,
    CellResult,
    ClaimResult,
    Separation,
    VariantStats,
)
from coevolve.run.compute import COUNTERS

PCT = int(CONFIDENCE * 100)


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _ci(i: Interval | None, nd: int = 3, signed: bool = False) -> str:
    if i is None or i.mean is None:
        return "-"
    m = f"{i.mean:+.{nd}f}" if signed else f"{i.mean:.{nd}f}"
    if i.low is None:
        return f"{m} (n=1)"
    lo, hi = (f"{i.low:+.{nd}f}", f"{i.high:+.{nd}f}") if signed else (f"{i.low:.{nd}f}", f"{i.high:.{nd}f}")
    return f"{m} [{lo}, {hi}]"


def _big(x: float) -> str:
    return f"{x:.3g}" if x >= 1e4 else f"{x:.0f}"


def runs_table(results: Sequence[CellResult]) -> list[str]:
    """One row per finished run: accuracy, wall time, compute and the curriculum means."""
    head = [
        "variant",
        "seed",
        "base greedy",
        "greedy",
        "sampled",
        "wall s",
        "rollouts",
        "trained tokens",
        "labels",
        *(k.split("/")[1] if k != "solver/reward_mean" else "solver reward" for k in CURRICULUM_KEYS),
    ]
    out = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    for r in results:
        out.append(
            f"| {r.variant} | {r.seed} | {_f(r.base_greedy)} | {_f(r.greedy)} | {_f(r.sampled)} | "
            f"{_f(r.wall_seconds, 0)} | {_big(r.compute.rollouts)} | {_big(r.compute.trained_tokens)} | "
            f"{r.compute.labels} | "
            + " | ".join(_f(r.curriculum.get(k), 1 if k != "solver/reward_mean" else 3) for k in CURRICULUM_KEYS)
            + " |"
        )
    return out


def variants_table(sel: Sequence[VariantStats]) -> list[str]:
    """One row per variant: its intervals, seed sd, binomial se, the paired Δ to its reference and
    the paper's figure."""
    head = ["variant", "seeds", "greedy", "sampled", "sd (greedy)", "binomial se", "Δ greedy vs", "Δ sampled", "paper"]
    out = ["| " + " | ".join(head) + " |", "|---|---|---:|---:|---:|---:|---|---:|---|"]
    for s in sel:
        out.append(
            f"| {s.variant} | {','.join(map(str, s.seeds))} | {_ci(s.greedy)} | {_ci(s.sampled)} | "
            f"{_f(s.greedy.sd, 4)} | {_f(s.binomial_se, 4)} | "
            f"{(s.versus + ': ' + _ci(s.diff_greedy, signed=True)) if s.versus else '-'} | "
            f"{_ci(s.diff_sampled, signed=True)} | {VARIANTS[s.variant].paper} |"
        )
    return out


def _head(setting: Sequence[str], command: str) -> list[str]:
    return [
        "# Multi-seed study: methods, paper ablations and the papers' claims",
        "",
        f"Written by `{command}` from the run folders (every figure also in `study.json`); "
        "rerun that command to update this file rather than edit it.",
        "",
        "## Setting",
        "",
        *setting,
        "",
        f"Intervals are {PCT} % t-intervals over seeds; `Δ vs` is the paired difference to the named variant on "
        "the same seeds and held-out set. `sd` is the seed-to-seed standard deviation of greedy accuracy, "
        "`binomial se` the held-out set's own standard error sqrt(p(1-p)/N) at the mean.",
        "",
    ]


def _methods(stats: Sequence[VariantStats], sep: Sequence[Separation]) -> list[str]:
    """The main methods, their separation, then the ablations (Δ vs the full method)."""
    main = [s for s in stats if VARIANTS[s.variant].main]
    abl = [s for s in stats if not VARIANTS[s.variant].main]
    L = ["## Main methods (held-out accuracy at the end of the run)", "", *variants_table(main), ""]
    for sp in sep:
        L += [
            f"Separation of the main methods on {sp.metric} accuracy: best {sp.best} - worst {sp.worst} = "
            f"{_ci(sp.diff, signed=True)} over {sp.diff.n} paired seeds, paired se {_f(sp.diff.se, 4)}: "
            f"{_f(sp.ratio, 1)} standard errors; unpaired (each method's own seed se): "
            f"{_f(sp.ratio_unpaired, 1)} (quote the unpaired figure: seeds pair nothing between recipes).",
            "",
        ]
    if abl:
        L += [
            "## Ablations (Δ vs the full method: negative = the ablation lowers accuracy)",
            "",
            *variants_table(abl),
            "",
        ]
    return L


def _oracle(stats: Sequence[VariantStats]) -> list[str]:
    orc = [s for s in stats if s.oracle_agreement]
    if not orc:
        return []
    return [
        "## Pseudo-label oracle agreement (mean over rounds and seeds)",
        "",
        "Share of generated questions whose pseudo-label (majority vote) equals the oracle's answer, "
        "for the questions each filter keeps from the same candidates (`kept` = the run's own filter).",
        "",
        "| variant | " + " | ".join(ORACLE_FILTERS) + " |",
        "|---|" + "---:|" * len(ORACLE_FILTERS),
        *(f"| {s.variant} | " + " | ".join(_f(s.oracle_agreement.get(m)) for m in ORACLE_FILTERS) + " |" for s in orc),
        "",
    ]


def _compute(stats: Sequence[VariantStats], figure: str | None) -> list[str]:
    """Mean compute per variant, then the accuracy-vs-compute figure."""
    L = [
        "## Compute at the end of the run (mean over seeds)",
        "",
        "Training compute spent before the final held-out evaluation (evaluations and D²Evo's report-only "
        "re-measure of the pool after it excluded): the x of each run's last point in the figure below.",
        "",
        "| variant | " + " | ".join(COUNTERS) + " |",
        "|---|" + "---:|" * len(COUNTERS),
        *(f"| {s.variant} | " + " | ".join(_big(s.compute[k]) for k in COUNTERS) + " |" for s in stats),
        "",
    ]
    if figure:
        L += [
            "## Held-out accuracy against compute (main methods, every seed)",
            "",
            f"![accuracy vs compute]({figure})",
            "",
        ]
    return L


def _claims(verdicts: Sequence[ClaimResult]) -> list[str]:
    L = [
        "## The papers' claims",
        "",
        f"Rule: the paired {PCT} % interval of (claimed better - claimed worse) above 0 = reproduced, below 0 = "
        "not reproduced, containing 0 = not distinguishable; fewer than 2 paired seeds = not run. Greedy held-out "
        "accuracy, except the filter claims (oracle agreement of the kept pseudo-labels, filters compared on the "
        "same candidate pools of the full DiagEvo runs). One configuration for every claim.",
        "",
        "The verdict is on greedy accuracy (declared before the runs); the same rule on sampled accuracy (mean "
        "over the eval samples per question, less noisy per seed) is shown beside it.",
        "",
        "| claim | better - worse | seeds | paired Δ greedy [95 % CI] | verdict | paired Δ sampled [95 % CI] | "
        "on sampled | paper |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for v in verdicts:
        L.append(
            f"| {v.claim.text} | {v.claim.better} - {v.claim.worse} | {v.diff.n} | "
            f"{_ci(v.diff, signed=True)} | **{v.verdict}** | {_ci(v.diff_sampled, signed=True)} | "
            f"{v.verdict_sampled or '-'} | {v.claim.paper} |"
        )
    L.append("")
    return L


def _tail(notes: Sequence[str], results: Sequence[CellResult], missing: Sequence[str]) -> list[str]:
    """The notes, every run and every cell not run (each only when there is one)."""
    L = ["## Notes", "", *notes, ""] if notes else []
    if results:
        L += [
            "## Every run",
            "",
            "Curriculum columns: mean over rounds of D²Evo's anchors and buffer (real / "
            "generated), DiagEvo's kept questions, and the solver's mean training reward.",
            "",
            *runs_table(results),
            "",
        ]
    if missing:
        L += ["## Not run", "", *(f"- {m}" for m in missing), ""]
    return L


def render_markdown(
    stats: Sequence[VariantStats],
    verdicts: Sequence[ClaimResult],
    missing: Sequence[str],
    setting: Sequence[str],
    figure: str | None,
    notes: Sequence[str] = (),
    results: Sequence[CellResult] = (),
    sep: Sequence[Separation] = (),
    command: str = "coevolve study",
) -> str:
    """``docs/results/study.md``: setting, main methods, ablations, oracle agreement, compute,
    the figure, the claims table, every run, and every cell not run. ``command`` (the line that
    rewrites it) heads the file: it is generated, never edited by hand."""
    return "\n".join(
        [
            *_head(setting, command),
            *_methods(stats, sep),
            *_oracle(stats),
            *_compute(stats, figure),
            *_claims(verdicts),
            *_tail(notes, results, missing),
        ]
    )


def study_json(
    results: Sequence[CellResult],
    stats: Sequence[VariantStats],
    verdicts: Sequence[ClaimResult],
    missing: Sequence[str],
    setting: Sequence[str],
) -> dict[str, Any]:
    """Every figure of the study as plain JSON."""
    return {
        "setting": list(setting),
        "cells": [r.to_dict() for r in results],
        "variants": [asdict(s) for s in stats],
        "claims": [
            {
                **asdict(v.claim),
                "diff": v.diff.to_dict(),
                "verdict": v.verdict,
                "diff_sampled": v.diff_sampled.to_dict() if v.diff_sampled else None,
                "verdict_sampled": v.verdict_sampled,
            }
            for v in verdicts
        ],
        "missing": list(missing),
    }
