"""The skill-world study's markdown (docs/results/skill_study.md): the declaration, verdict,
power, strata, memory and run-time tables, and the page (``render``) from the figures
``coevolve.lab.skill_study`` computes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from coevolve.lab.skill_study import (
    PowerRow,
    Verdict,
    _has_items,
    item_scores,
    judge,
    power_notes,
    power_plan,
    realised_power,
)
from coevolve.lab.stats import Difference
from coevolve.lab.studies.skill import CLAIMS, CONTROL_SEEDS, FRONTIER, PRIMARY_METRIC, DeclaredClaim
from coevolve.lab.study import CellResult


def _pm(x: float | None, nd: int = 3, signed: bool = True) -> str:
    return "-" if x is None else (f"{x:+.{nd}f}" if signed else f"{x:.{nd}f}")


def _diff(d: Difference) -> str:
    if d.mean is None:
        return "-"
    if d.low is None:
        return f"{d.mean:+.3f} (n={d.n})"
    return f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def declaration_table(
    claims: Sequence[DeclaredClaim] = CLAIMS, seeds: dict[str, int | None] | None = None
) -> list[str]:
    """The declaration: one row per claim (written into the docs before the runs)."""
    L = [
        "| # | claim | better - worse | stratum | metric | comparison | family | seeds | paper |",
        "|---|---|---|---|---|---|---|---:|---|",
    ]
    for c in claims:
        n = "-" if seeds is None else (str(CONTROL_SEEDS) if c.family == "control" else str(seeds.get(c.key) or "-"))
        L.append(
            f"| {c.key} | {c.text} | {c.better} - {c.worse} | {c.stratum} | {c.metric} | {c.comparison} | "
            f"{c.family} | {n} | {c.paper} |"
        )
    return L


def seeds_cell(n: int, declared: int | None, family: str, arms: tuple[int, int] | None = None) -> str:
    """Seeds run per arm against the seeds the power plan asks for (controls: 3); "of >50" when
    the plan calls the claim unreachable. Arms run to different counts (one variant also serves
    another claim) read "8 + 14"; ``n`` is what the statistic used (pairs, or all of each arm)."""
    want = CONTROL_SEEDS if family == "control" else declared
    run = f"{arms[0]} + {arms[1]}" if arms is not None and arms[0] != arms[1] and min(arms) > 0 else str(n)
    return f"{run} of {want if want is not None else '>50'}"


def _power_cell(v: Verdict) -> str:
    """A null verdict's realised power, e.g. " (power 0.29)"; nothing for other verdicts."""
    return "" if v.power is None else f" (power {v.power:.2f})"


def verdict_table(verdicts: Sequence[Verdict], declared: dict[str, int | None] | None = None) -> list[str]:
    """One row per claim; ``declared`` (claim -> seeds per arm from the power plan) adds "n of N"
    to the seeds column, so an interval from fewer seeds than planned reads as such."""
    L = [
        "| # | claim | better - worse | stratum | seeds (run of planned) | better | worse | Δ [95 % CI] (primary) | "
        "se seed / item | Δ/se | Holm p | verdict | Δ on the other metric |",
        "|---|---|---|---|---:|---:|---:|---|---|---:|---:|---|---|",
    ]
    for v in verdicts:
        d = v.diff
        ratio = (d.mean / d.se) if d.mean is not None and d.se else None
        arms = None if d.kind == "paired" else v.arms
        n = str(d.n) if declared is None else seeds_cell(d.n, declared.get(v.claim.key), v.claim.family, arms)
        L.append(
            f"| {v.claim.key} | {v.claim.text} | {v.claim.better} - {v.claim.worse} | {v.claim.stratum} "
            f"({v.n_items} items) | {n} | {_pm(v.mean_better, signed=False)} | {_pm(v.mean_worse, signed=False)} | "
            f"{_diff(d)} | {_pm(d.se_seed, 4, False)} / {_pm(d.se_item, 4, False)} | "
            f"{'-' if ratio is None else f'{ratio:.1f}'} | {'-' if v.p_holm is None else f'{v.p_holm:.3g}'} | "
            f"**{v.verdict}**{_power_cell(v)} | {_diff(v.secondary)} |"
        )
    return L


def _seeds_cell(r: PowerRow) -> str:
    """A power row's seed count; without an effect or a seed sd (its control has fewer than two seeds
    per arm) there is nothing to size from, which is not the same as an unreachable effect."""
    if r.sd is None:
        return "- (control: < 2 seeds per arm)"
    if r.effect is None:
        return "- (control not positive)"
    return str(r.seeds) if r.seeds is not None else "unreachable (> 50)"


def power_table(rows: Sequence[PowerRow]) -> list[str]:
    L = [
        "| claim | control | effect of interest | seed sd (run; paired: pair) | sd from | item se | level | seeds per arm (80 % power) |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        L.append(
            f"| {r.claim} | {r.control} | {_pm(r.effect, 4, False)} | {_pm(r.sd, 4, False)} | "
            f"{r.sd_from if r.sd is not None else '-'} | {r.item_var**0.5:.4f} | {r.alpha:.4f} | {_seeds_cell(r)} |"
        )
    return L


def strata_table(
    results: Sequence[CellResult], variants: Sequence[str], frontier: Sequence[str] = FRONTIER
) -> list[str]:
    """Per variant, mean over seeds of greedy / sampled accuracy on each stratum, and compute; the
    first row is the base model (every run's base evaluation, averaged: one model, seeded draws)."""
    strata = ["all", "deficient", "soft", "hard", "clean", *(["frontier"] if frontier else [])]
    L = [
        "| variant | seeds | " + " | ".join(f"{x} g / s" for x in strata) + " | rollouts | labels | wall min |",
        "|---|---:|" + "---|" * len(strata) + "---:|---:|---:|",
    ]

    def means(mine: Sequence[CellResult], which: str) -> list[str]:
        cells = []
        for st_ in strata:
            g = [sum(x := list(item_scores(r, st_, "greedy", frontier, which).values())) / max(1, len(x)) for r in mine]
            sm = [
                sum(x := list(item_scores(r, st_, "sampled", frontier, which).values())) / max(1, len(x)) for r in mine
            ]
            cells.append(f"{sum(g) / len(g):.3f} / {sum(sm) / len(sm):.3f}")
        return cells

    based = [r for r in results if _has_items(r, "base")]
    if based:  # runs made before the base's per-item records have none
        L.append(f"| base | {len(based)} runs | " + " | ".join(means(based, "base")) + " | 0 | 0 | - |")
    for v in variants:
        mine = [r for r in results if r.variant == v]
        if not mine:
            continue
        roll = sum(r.compute.rollouts for r in mine) / len(mine)
        labels = sum(r.compute.labels for r in mine) / len(mine)
        wall = sum(r.wall_seconds or 0 for r in mine) / len(mine) / 60
        L.append(
            f"| {v} | {len(mine)} | " + " | ".join(means(mine, "final")) + f" | {roll:.3g} | {labels:.0f} | "
            f"{wall:.1f} |"
        )
    return L


def run_time_line(results: Sequence[CellResult]) -> str:
    """The study's cost: the runs' wall clocks summed (how many ran at once is the user's to say)."""
    total = sum(r.wall_seconds or 0 for r in results)
    return f"Run time: {len(results)} runs, {total / 3600:.2f} h summed over the runs' wall clocks."


def memory_table(results: Sequence[CellResult]) -> list[str]:
    """The error memory of each run that kept one, against the injected deficits."""
    L = [
        "| variant | seed | causes | precision | precision (failures) | recall (soft) | recall (all) | injected causes' "
        "state | top causes (failures) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        m = (r.world or {}).get("memory")
        if not m or not m.get("causes"):
            continue
        top = ", ".join(f"{c} {f}" for c, f in (m.get("top") or [])[:4])
        found = ", ".join(f"{c}: {s or 'absent'}" for c, s in (m.get("found") or {}).items())
        L.append(
            f"| {r.variant} | {r.seed} | {m['causes']} | {_pm(m.get('precision'), signed=False)} | "
            f"{_pm(m.get('precision_failures'), signed=False)} | {_pm(m.get('recall_soft'), signed=False)} | "
            f"{_pm(m.get('recall'), signed=False)} | {found} | {top} |"
        )
    return L


def group_missing(missing: Sequence[str]) -> list[str]:
    """``"v seedN: why"`` lines grouped per variant and reason: ``"v: seeds 3-6, 9 (why)"``."""
    groups: dict[tuple[str, str], list[int]] = {}
    other = []
    for m in missing:
        hit = re.fullmatch(r"(\S+) seed(\d+): (.*)", m)
        if hit:
            groups.setdefault((hit[1], hit[3]), []).append(int(hit[2]))
        else:
            other.append(m)
    out = []
    for (v, why), seeds in groups.items():
        seeds, spans = sorted(seeds), []
        for k in seeds:
            if spans and k == spans[-1][1] + 1:
                spans[-1][1] = k
            else:
                spans.append([k, k])
        text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
        out.append(f"{v}: seed{'s' if len(seeds) > 1 else ''} {text} ({why})")
    return out + other


def _head(setting: Sequence[str], frontier: Sequence[str], command: str) -> list[str]:
    return [
        "# Skill-world study: positive controls, power and the papers' claims",
        "",
        f"Written by `{command}` from the run folders (every figure also in `skill_study.json`; rerun "
        "that command to update this file rather than edit it); the rule, strata and seed counts were "
        "declared in [skill_world.md](skill_world.md) before the runs.",
        "",
        "## Setting",
        "",
        *setting,
        "",
        f"Primary metric: {PRIMARY_METRIC} accuracy on the claim's stratum; frontier strata: "
        f"{', '.join(frontier) or '(none declared)'}. Differences: Welch between recipes, paired within a recipe; "
        "both add the item term (the held-out items are a sample). Holm within each family, two-sided 0.05.",
        "",
    ]


def _body(
    results: Sequence[CellResult],
    claims: Sequence[DeclaredClaim],
    verdicts: Sequence[Verdict],
    plan: Sequence[PowerRow],
    frontier: Sequence[str],
) -> list[str]:
    """Declared claims, verdicts, power, accuracy by stratum and the run time."""
    seeds = {r.claim: r.seeds for r in plan}
    variants = list(dict.fromkeys(r.variant for r in results))
    return [
        "## Declared claims",
        "",
        *declaration_table(claims, seeds),
        "",
        "## Verdicts",
        "",
        *verdict_table(verdicts, seeds),
        "",
        "## Power (effect from the controls, seed sd from a pilot of the claim's arms where one ran)",
        "",
        *power_table(plan),
        "",
        *([*power_notes(plan), ""] if power_notes(plan) else []),
        "## Accuracy by stratum (mean over seeds; greedy / sampled)",
        "",
        *strata_table(results, variants, frontier),
        "",
        run_time_line(results),
        "",
    ]


def _tail(results: Sequence[CellResult], notes: Sequence[str], missing: Sequence[str]) -> list[str]:
    """The memory table, the notes and the cells not run (each only when there is one)."""
    mem = memory_table(results)
    L = ["## The error memory against the injected deficits", "", *mem, ""] if len(mem) > 2 else []
    if notes:
        L += ["## Notes", "", *notes, ""]
    if missing:
        L += ["## Not run", "", *(f"- {m}" for m in group_missing(missing)), ""]
    return L


def render(
    results: Sequence[CellResult],
    missing: Sequence[str],
    setting: Sequence[str],
    notes: Sequence[str] = (),
    claims: Sequence[DeclaredClaim] = CLAIMS,
    frontier: Sequence[str] = FRONTIER,
    command: str = "coevolve study --declaration skill",
) -> tuple[str, dict[str, Any]]:
    """The study's markdown and JSON from the finished cells; ``command`` (the line that rewrites
    them) heads the markdown."""
    plan = power_plan(results, claims, frontier=frontier)
    verdicts = realised_power(results, judge(results, claims, frontier), plan, frontier)
    md = [
        *_head(setting, frontier, command),
        *_body(results, claims, verdicts, plan, frontier),
        *_tail(results, notes, missing),
    ]
    data = {
        "setting": list(setting),
        "frontier": list(frontier),
        "metric": PRIMARY_METRIC,
        "verdicts": [v.to_dict() for v in verdicts],
        "power": [asdict(r) for r in plan],
        "cells": [r.to_dict() for r in results],
        "missing": list(missing),
    }
    return "\n".join(md), data


__all__ = [
    "declaration_table",
    "group_missing",
    "memory_table",
    "power_table",
    "render",
    "run_time_line",
    "seeds_cell",
    "strata_table",
    "verdict_table",
]
