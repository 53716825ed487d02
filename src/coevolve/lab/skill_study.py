"""The skill-world study (``configs/skill/``, docs/results/skill_study.md): positive controls,
the papers' claims per stratum, their power, and the verdicts (its markdown:
``coevolve.lab.skill_study_markdown``).

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
    "in_stratum",
    "item_scores",
    "judge",
    "arm_means",
    "power_notes",
    "power_plan",
    "realised_power",
    "seed_sd",
    "stratum_skills",
]
