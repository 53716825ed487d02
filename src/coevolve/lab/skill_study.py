"""The skill-world study (``configs/skill/``, docs/results/skill_study.md): positive controls,
the papers' claims per stratum, their power, and the verdicts.

Declared before the runs (``CLAIMS`` in ``coevolve.lab.studies.skill``, and the markdown's declaration section are written from the
same list): for each claim the two variants, the held-out stratum and metric it is judged on,
how the two arms are compared, and the family its multiple-comparison correction runs over.

    stratum     which held-out items count (``in_stratum``): ``all``; ``deficient`` / ``soft`` /
                ``hard`` / ``clean`` (the focal skill's injected rate); ``frontier`` (the
                (skill, depth) strata of ``FRONTIER``, just below the difficulty band at the base)
    comparison  ``welch`` between recipes or data (no shared training randomness: unpaired);
                ``paired`` for an ablation within a recipe (seed s of both runs starts alike)
    item term   both: the items are a sample too (``stats.item_variance_bootstrap``: a bootstrap
                over items x seeds, not cut to 0), added to the seed term
                (``stats.welch_difference`` / ``paired_items_difference``)
    rule        Holm-adjusted two-sided p < 0.05 within the claim's family (``control``:
                the positive controls; ``paper``: every paper claim that ran; ``label check``:
                D²Evo with the paper's label check, declared later): the sign says
                reproduced (better > worse) or reversed; otherwise not distinguishable, with
                the 95 % interval as the bound on the effect

The power calculation (``power_plan``) takes each control's effect and item term on the claim's
stratum and asks how many seeds a claim needs to detect half of that effect (a method that
realises half of an oracle curriculum's gain) with 80 % power at the Bonferroni level of the
claim's family (Holm's first step: conservative). The seed sd is the claim's own arms' when a
pilot of them ran (2+ seeds per arm): the self-play arms vary 2-3x more from seed to seed than the
gold-label control arms, so a plan from the controls' sd under-sizes them; without a pilot it
falls back to the control's arms, with a note saying so. A control whose difference is not
positive sizes nothing (a failed control has no effect to take half of). Every null verdict
carries its realised power (``realised_power``): the power of its own test at the effect of
interest with the seeds run and the sd and item term its arms showed.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from coevolve.lab.run_view import eval_items
from coevolve.lab.stats import (
    Difference,
    StudyError,
    holm,
    item_variance_bootstrap,
    paired_items_difference,
    power,
    seeds_for_power,
    t_interval,
    welch_difference,
)
from coevolve.lab.studies.skill import ALPHA, CLAIMS, CONTROL_SEEDS, FRONTIER, LABELS, PRIMARY_METRIC, DeclaredClaim
from coevolve.lab.study import CellResult
from coevolve.world.skill.problems import DEFICITS, SKILLS, make_problem

# ----------------------------------------------------------------------------------------------
# strata of held-out items


@functools.lru_cache(maxsize=65536)
def _depth(question: str) -> int:
    return make_problem(question).depth


def stratum_skills(stratum: str, profile: Any = None) -> tuple[str, ...] | None:
    """The focal skills of a named skill group (None for ``all`` / ``frontier``)."""
    pr = profile or DEFICITS
    groups = {"deficient": pr.deficient, "soft": pr.soft, "hard": pr.hard, "clean": pr.clean}
    if stratum in groups:
        return groups[stratum]
    if stratum in SKILLS:
        return (stratum,)
    if stratum in ("all", "frontier"):
        return None
    raise StudyError(f"unknown stratum {stratum!r}: all, frontier, deficient, soft, hard, clean or a skill")


def in_stratum(item: dict[str, Any], stratum: str, frontier: Sequence[str] = FRONTIER, profile: Any = None) -> bool:
    """Whether a held-out item record (``items_skill.jsonl``: ``group`` = focal skill) counts."""
    if stratum == "all":
        return True
    if stratum == "frontier":
        return f"{item.get('group')}@{_depth(item['question'])}" in frontier
    return item.get("group") in (stratum_skills(stratum, profile) or ())


@functools.lru_cache(maxsize=256)
def _items(path: str, which: str = "final") -> tuple[tuple[str, float, float], ...]:
    items = eval_items(Path(path), which)
    if items is None:
        raise StudyError(f"{path}: no per-item records of a {which} skill evaluation")
    return tuple(
        (json.dumps([r["question"], r.get("group")]), float(r["correct"]), float(r.get("sampled_acc", r["correct"])))
        for r in items
    )


def _has_items(cell: CellResult, which: str) -> bool:
    """Whether a cell's folder has the per-item records of that evaluation (read once: cached)."""
    try:
        return cell.path is not None and bool(_items(str(cell.path), which))
    except StudyError:
        return False


def item_scores(
    cell: CellResult, stratum: str, metric: str, frontier: Sequence[str] = FRONTIER, which: str = "final"
) -> dict[str, float]:
    """``{item key: score}`` of a finished skill cell on one stratum (greedy 0/1 or sampled accuracy),
    of its final evaluation or (``which="base"``) of the base model's."""
    if cell.path is None:
        raise StudyError(f"{cell.variant} seed{cell.seed}: no run folder to read items from")
    out = {}
    for key, g, smp in _items(str(cell.path), which):
        q, group = json.loads(key)
        if in_stratum({"question": q, "group": group}, stratum, frontier):
            out[key] = g if metric == "greedy" else smp
    return out


# ----------------------------------------------------------------------------------------------
# judging


@dataclass(frozen=True)
class Verdict:
    claim: DeclaredClaim
    diff: Difference
    secondary: Difference  # the same comparison on the other metric (greedy <-> sampled)
    mean_better: float | None
    mean_worse: float | None
    p_holm: float | None = None
    verdict: str = "not run"
    n_items: int = 0
    arms: tuple[int, int] = (0, 0)  # seeds run of the better and the worse variant
    power: float | None = None  # a null verdict's realised power at the effect of interest (realised_power)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": asdict(self.claim),
            "diff": self.diff.to_dict(),
            "secondary": self.secondary.to_dict(),
            "mean_better": self.mean_better,
            "mean_worse": self.mean_worse,
            "p_holm": self.p_holm,
            "verdict": self.verdict,
            "n_items": self.n_items,
            "arms": list(self.arms),
            "power": self.power,
        }


def compare(
    results: Sequence[CellResult],
    better: str,
    worse: str,
    stratum: str,
    metric: str,
    comparison: str,
    frontier: Sequence[str] = FRONTIER,
) -> tuple[Difference, float | None, float | None, int]:
    """The difference better - worse on one stratum and metric: per-seed means over the stratum's
    items, the seed term (Welch or paired) plus the item term from the per-item scores."""
    a = {r.seed: item_scores(r, stratum, metric, frontier) for r in results if r.variant == better}
    b = {r.seed: item_scores(r, stratum, metric, frontier) for r in results if r.variant == worse}
    if not a or not b:
        return welch_difference([], []), None, None, 0
    keys = sorted(set.intersection(*(set(x) for x in [*a.values(), *b.values()])))
    if not keys:
        raise StudyError(f"{better} vs {worse}: no common held-out items in stratum {stratum!r}")
    ma = {s: sum(x[k] for k in keys) / len(keys) for s, x in a.items()}
    mb = {s: sum(x[k] for k in keys) / len(keys) for s, x in b.items()}
    if comparison == "paired":
        common = sorted(set(a) & set(b))
        iv = (
            item_variance_bootstrap(
                [[a[s][k] for k in keys] for s in common], [[b[s][k] for k in keys] for s in common], paired=True
            )
            if len(common) >= 1
            else 0.0
        )
        d = paired_items_difference(ma, mb, iv, len(keys))
    else:
        iv = item_variance_bootstrap(
            [[x[k] for k in keys] for x in a.values()], [[x[k] for k in keys] for x in b.values()]
        )
        d = welch_difference(list(ma.values()), list(mb.values()), iv, len(keys))
    return d, t_interval(list(ma.values())).mean, t_interval(list(mb.values())).mean, len(keys)


def judge(
    results: Sequence[CellResult], claims: Sequence[DeclaredClaim] = CLAIMS, frontier: Sequence[str] = FRONTIER
) -> list[Verdict]:
    """Every claim's difference on its declared stratum and metric, Holm within its family, verdict."""
    rows = []
    for c in claims:
        other = "greedy" if c.metric == "sampled" else "sampled"
        d, ma, mb, n = compare(results, c.better, c.worse, c.stratum, c.metric, c.comparison, frontier)
        d2, _, _, _ = compare(results, c.better, c.worse, c.stratum, other, c.comparison, frontier)
        arms = tuple(len({r.seed for r in results if r.variant == v}) for v in (c.better, c.worse))
        rows.append(Verdict(c, d, d2, ma, mb, n_items=n, arms=arms))
    for fam in dict.fromkeys(c.family for c in claims):
        idx = [i for i, r in enumerate(rows) if r.claim.family == fam]
        adj = holm([rows[i].diff.p for i in idx])
        for i, p in zip(idx, adj):
            r = rows[i]
            if p is None or r.diff.mean is None:
                v = "not run"
            elif p < ALPHA:
                v = "reproduced" if r.diff.mean > 0 else "reversed"
            else:
                v = "not distinguishable"
            rows[i] = Verdict(r.claim, r.diff, r.secondary, r.mean_better, r.mean_worse, p, v, r.n_items, r.arms)
    return rows


# ----------------------------------------------------------------------------------------------
# power


@dataclass(frozen=True)
class PowerRow:
    claim: str
    control: str
    effect: float | None  # the effect of interest: half the control's effect (None: the control is not positive)
    sd: float | None  # seed sd given to ``power``: of one run (welch), of a seed pair's difference (paired)
    item_var: float  # the control's item term on the claim's stratum
    alpha: float
    seeds: int | None  # per arm for 80 % power; None = unreachable with <= 50 seeds
    sd_from: str = "control"  # "pilot": the claim's own arms (2+ seeds each); "control": the control's arms


def arm_means(
    results: Sequence[CellResult], variant: str, stratum: str, metric: str, frontier: Sequence[str] = FRONTIER
) -> dict[int, float]:
    """``{seed: mean score on the stratum}`` of one variant's finished cells."""
    return {
        r.seed: t_interval(list(item_scores(r, stratum, metric, frontier).values())).mean  # type: ignore[misc]
        for r in results
        if r.variant == variant
    }


def seed_sd(
    results: Sequence[CellResult],
    better: str,
    worse: str,
    stratum: str,
    metric: str,
    comparison: str,
    frontier: Sequence[str] = FRONTIER,
    both: bool = True,
) -> float | None:
    """The seed sd two arms show on a stratum, as ``power`` takes it: welch, the pooled sd of one
    run, sqrt(mean of the arms' s²); paired, the sd of the seed pairs' differences. None with fewer
    than 2 seeds in an arm (or 2 pairs); ``both=False`` pools the arms that have 2+ seeds."""
    a, b = (arm_means(results, v, stratum, metric, frontier) for v in (better, worse))
    if comparison == "paired":
        common = sorted(set(a) & set(b))
        return t_interval([a[s] - b[s] for s in common]).sd if len(common) >= 2 else None
    if both and (len(a) < 2 or len(b) < 2):
        return None
    sds = [t_interval(list(x.values())).sd for x in (a, b) if len(x) >= 2]
    return (sum(s * s for s in sds) / len(sds)) ** 0.5 if sds else None  # type: ignore[operator]


def power_plan(
    results: Sequence[CellResult],
    claims: Sequence[DeclaredClaim] = CLAIMS,
    fraction: float = 0.5,
    frontier: Sequence[str] = FRONTIER,
) -> list[PowerRow]:
    """Seeds per arm for each paper claim (module doc): the claim's control, measured on the
    claim's own stratum and metric, gives the effect (× ``fraction``, when positive) and the item
    term; the seed sd is the claim's own arms' (a pilot: ``seed_sd``), else the pooled sd of the
    control's two arms (``sd_from="control"``); the level is 0.05 / (claims of the family)."""
    controls = {c.key: c for c in claims if c.family == "control"}
    out = []
    for c in (c for c in claims if c.family != "control"):
        alpha = ALPHA / sum(x.family == c.family for x in claims)
        ctl = controls.get(c.control)
        if ctl is None:
            out.append(PowerRow(c.key, c.control, None, None, 0.0, alpha, None))
            continue
        d, _, _, n = compare(results, ctl.better, ctl.worse, c.stratum, c.metric, "welch", frontier)
        if d.mean is None or d.se_seed is None:
            out.append(PowerRow(c.key, ctl.key, None, None, 0.0, alpha, None))
            continue
        paired = c.comparison == "paired"
        sd = seed_sd(results, c.better, c.worse, c.stratum, c.metric, c.comparison, frontier)
        sd_from = "pilot"
        if sd is None:
            sd_from = "control"
            sd = seed_sd(results, ctl.better, ctl.worse, c.stratum, c.metric, "welch", frontier, both=False)
            # a paired ablation's pair difference has at most the sd of a difference of two runs (no correlation)
            sd = sd * (2**0.5) if sd is not None and paired else sd
        # a control that did not come out positive has no effect to take a fraction of
        effect = d.mean * fraction if d.mean > 0 else None
        iv = d.se_item**2
        seeds = seeds_for_power(effect, sd, iv, alpha, paired=paired) if sd and effect is not None else None
        out.append(PowerRow(c.key, ctl.key, effect, sd, iv, alpha, seeds, sd_from))
    return out


def power_notes(plan: Sequence[PowerRow]) -> list[str]:
    """One line per claim whose plan could not use a pilot of its own arms or has no effect to size."""
    out = []
    for r in plan:
        if r.effect is None and r.sd is not None:
            out.append(f"- {r.claim}: its control {r.control} is not positive, so it sizes nothing (no seed count)")
        elif r.sd_from == "control" and r.sd is not None:
            out.append(
                f"- {r.claim}: no pilot of its own arms (fewer than 2 seeds per arm): the seed sd is the control "
                f"{r.control}'s arms', which can be several times smaller than a self-play arm's; the seed count "
                "is a lower bound"
            )
    return out


def realised_power(
    results: Sequence[CellResult],
    verdicts: Sequence[Verdict],
    plan: Sequence[PowerRow],
    frontier: Sequence[str] = FRONTIER,
) -> list[Verdict]:
    """Each null verdict ("not distinguishable") with its realised power: ``power`` of its own
    test at the plan's effect of interest and level, with the seeds it ran (pairs, or the smaller
    arm), the seed sd its arms showed (``seed_sd``) and its own item term. Others unchanged."""
    rows = {r.claim: r for r in plan}
    out = []
    for v in verdicts:
        row = rows.get(v.claim.key)
        c = v.claim
        if v.verdict != "not distinguishable" or row is None or row.effect is None:
            out.append(v)
            continue
        sd = seed_sd(results, c.better, c.worse, c.stratum, c.metric, c.comparison, frontier)
        pw = (
            power(row.effect, sd, v.diff.n, v.diff.se_item**2, row.alpha, paired=c.comparison == "paired")
            if sd is not None
            else None
        )
        out.append(replace(v, power=pw))
    return out


# ----------------------------------------------------------------------------------------------
# markdown


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
    "ALPHA",
    "CLAIMS",
    "CONTROL_SEEDS",
    "DeclaredClaim",
    "FRONTIER",
    "LABELS",
    "PRIMARY_METRIC",
    "PowerRow",
    "Verdict",
    "compare",
    "declaration_table",
    "in_stratum",
    "item_scores",
    "judge",
    "memory_table",
    "group_missing",
    "arm_means",
    "power_notes",
    "power_plan",
    "power_table",
    "realised_power",
    "render",
    "run_time_line",
    "seed_sd",
    "seeds_cell",
    "strata_table",
    "stratum_skills",
    "verdict_table",
]
