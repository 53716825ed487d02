"""Multi-seed study: the variant grid (methods × paper ablations), its statistics and the verdicts
on the papers' claims. ``coevolve study`` (``coevolve.lab.study_cli``) runs the grid and writes the
markdown; each ablation is defined once, in ``VARIANTS`` here.

Statistics (pure functions, tested against slow references in ``tests/test_study.py``):

    mean    x̄ = (1/n) Σ x_i,     sd s = sqrt(Σ (x_i - x̄)² / (n - 1)),     se = s / sqrt(n)
    95 % t-interval           x̄ ± t_{0.975, n-1} · s / sqrt(n)                   (n >= 2)
    paired difference         d_i = a_i - b_i over the seeds both variants ran, then the
                              t-interval of the d_i (same held-out set, same seeds: the seed's
                              own luck cancels, so this is the comparison, not two intervals)
    held-out binomial se      sqrt(p (1 - p) / N)      (N held-out questions, p the accuracy)
    claim rule                the paired 95 % interval of (claimed-better - claimed-worse)
                              lies above 0: reproduced; below 0: not reproduced; contains 0:
                              not distinguishable; fewer than 2 paired seeds: not run

Why seeds and not the held-out set's binomial error as the yardstick: two runs on the same
held-out set share its sampling error, and the seed-to-seed spread (init of sampling, order of
batches) is what separates two methods' runs (toy_scarce: sd ≈ 0.006 against a binomial se of
≈ 0.021 for N = 500).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scipy.stats import t as student_t

from coevolve.errors import CoevolveError
from coevolve.run.compute import COUNTERS, EVAL_PHASE, Compute

CONFIDENCE = 0.95
"""Coverage of every interval in the study."""


class StudyError(CoevolveError):
    """A study spec that names an unknown variant or a run folder the study cannot read."""


# ----------------------------------------------------------------------------------------------
# the grid


@dataclass(frozen=True)
class Variant:
    """One cell family of the grid: a recipe, the preset file it starts from (a file name looked
    up in the preset folder: ``grpo.yaml``, ``d2evo.yaml``, ``diagevo.yaml``, ``rzero.yaml``), the
    overrides that make it this variant, the variant it is compared with (``reference``: the
    full method for an ablation, None for a reference itself) and the paper's figure for it."""

    name: str
    recipe: str
    config: str
    overrides: tuple[str, ...] = ()
    reference: str | None = None
    paper: str = ""
    main: bool = False


def _abl(method: str, short: str, overrides: Sequence[str], paper: str) -> Variant:
    return Variant(f"{method}.{short}", method, f"{method}.yaml", tuple(overrides), method, paper)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("grpo", "grpo", "grpo.yaml", (), None, "full-data GRPO (19K labels): 49.28 (4B math)", main=True),
        Variant("d2evo", "d2evo", "d2evo.yaml", (), None, "D²Evo (0.1K labels): 51.35 (4B math)", main=True),
        Variant("diagevo", "diagevo", "diagevo.yaml", (), None, "DiagEvo: 72.3 (8B math)", main=True),
        Variant(
            "rzero",
            "diagevo",
            "rzero.yaml",
            (),
            None,
            "R-Zero: 46.91 (4B math, D²Evo table); 67.8 (8B, DiagEvo)",
            main=True,
        ),
        # D²Evo paper ablations (Qwen3-4B-Base math avg; full 51.35) and one of ours
        _abl("d2evo", "no_questioner", ["questioner=false"], "47.94"),
        _abl("d2evo", "no_share_weights", ["share_weights=false"], "49.99"),
        _abl("d2evo", "no_synthesis", ["synthesis=false"], "48.71"),
        _abl("d2evo", "random_anchors", ["anchor_selection=random"], "49.22"),
        _abl("d2evo", "rzero_reward", ["questioner_reward=rzero"], "ours: R-Zero's questioner reward"),
        _abl(
            "d2evo",
            "checked",
            ["label_verifier=checker"],
            "the paper's label check (GPT-5.2), a perfect checker standing in: wrong labels dropped",
        ),
        # DiagEvo paper ablations (Qwen3-8B math avg; full 72.3) and ours
        _abl("diagevo", "frozen_challenger", ["challenger.frozen=true"], "68.5 (-3.8)"),
        _abl("diagevo", "explore_only", ["memory.schedule=explore_only"], "69.5"),
        _abl("diagevo", "targeted_only", ["memory.schedule=targeted_only"], "70.1"),
        _abl("diagevo", "no_filter", ["pool.voting.filter=none"], "69.4"),
        _abl("diagevo", "absolute_filter", ["pool.voting.filter=absolute"], "70.9"),
        _abl("diagevo", "random_pair", ["memory.stitching=random_pair"], "71.3 (same-node +1.0)"),
        _abl("diagevo", "no_stitching", ["memory.stitching=off"], "-"),
        _abl(
            "diagevo",
            "no_memory",
            ["memory.enabled=false", "memory.schedule=explore_only"],
            "ours: no error memory (free exploration, no diagnosis)",
        ),
        _abl("diagevo", "llm_diagnoser", ["diagnoser.kind=llm"], "+1 math from 4B to 235B diagnoser"),
        _abl("diagevo", "rzero_reward", ["challenger.reward.kind=rzero"], "ours: R-Zero's challenger reward"),
        # the skill world's positive controls and label-budget axis (coevolve.lab.skill_study; preset configs/skill,
        # whose labelled set is L = 256: data.limit overrides give grpo 4L and 16L)
        Variant(
            "control.uniform",
            "grpo",
            "grpo.yaml",
            ("data.limit=null",),
            None,
            "ours: fresh gold draws, every skill (positive control)",
        ),
        Variant(
            "control.targeted",
            "grpo",
            "grpo.yaml",
            ("data.limit=null", "data.skill.focus=[sub,mul,div]"),
            None,
            "ours: fresh gold draws of the deficient skills only (positive control)",
        ),
        Variant(
            "control.random_anchors",
            "d2evo",
            "d2evo.yaml",
            ("questioner=false", "anchor_selection=random"),
            None,
            "ours: gold anchors drawn at random, no questioner (positive control; its pair is d2evo.no_questioner)",
        ),
        Variant("grpo.4L", "grpo", "grpo.yaml", ("data.limit=1024",), None, "ours: GRPO with 4L labels"),
        Variant("grpo.16L", "grpo", "grpo.yaml", ("data.limit=4096",), None, "ours: GRPO with 16L labels"),
    ]
}
"""Every variant the study knows, main methods first; ablations are named ``method.short``."""


def ablations(method: str) -> dict[str, Variant]:
    """``{short name: variant}`` of one method, the full method as ``full`` (the ablation
    scripts' grid)."""
    out = {"full": VARIANTS[method]}
    out.update({v.name.split(".", 1)[1]: v for v in VARIANTS.values() if v.reference == method})
    return out


def select_variants(only: Iterable[str] = (), methods: Iterable[str] = ()) -> list[Variant]:
    """The variants of a study in ``VARIANTS`` order: those named in ``only`` plus every variant of
    the ``methods`` (a method and its ablations); everything when both are empty. Raises
    ``StudyError`` on an unknown name."""
    only, methods = [n for n in only if n], [m for m in methods if m]
    unknown = [n for n in [*only, *methods] if n not in VARIANTS]
    if unknown:
        raise StudyError(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if not only and not methods:
        return list(VARIANTS.values())
    keep = set(only) | {v.name for v in VARIANTS.values() if v.name in methods or v.reference in methods}
    return [v for v in VARIANTS.values() if v.name in keep]


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a variant at a seed, in ``path`` (``out/<variant>/seed<k>``)."""

    variant: Variant
    seed: int
    path: Path


def expand_grid(variants: Sequence[Variant], seeds: Sequence[int], out: Path) -> list[Cell]:
    """Cells in run order: seed-major (every variant at seed 0, then at seed 1, ...), so that a
    study cut short has paired seeds for as many variants as possible."""
    return [Cell(v, s, Path(out) / v.name / f"seed{s}") for s in seeds for v in variants]


def cell_status(path: Path) -> str:
    """``finished`` (state.json says finished and summary.json holds a final evaluation),
    ``unfinished`` (a run folder to resume), ``empty`` (no folder, or one with no state.json)."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "empty"
    if state.get("status") == "finished":
        try:
            summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return "unfinished"
        if (summary.get("eval") or {}).get("final"):
            return "finished"
    return "unfinished"


def run_command(cell: Cell, preset: Path, overrides: Sequence[str], python: str = "python") -> list[str]:
    """The CLI command that advances ``cell``: ``coevolve resume`` for an unfinished folder, else
    ``coevolve run`` of the variant's preset file with the study's overrides, then the variant's
    (they win), then the seed. None of these is needed for a finished cell (the caller skips it)."""
    if cell_status(cell.path) == "unfinished":
        return [python, "-m", "coevolve", "resume", str(cell.path), "run.progress=false"]
    return [
        python,
        "-m",
        "coevolve",
        "run",
        cell.variant.recipe,
        "-c",
        str(Path(preset) / cell.variant.config),
        "--run-dir",
        str(cell.path),
        "run.progress=false",
        *overrides,
        *cell.variant.overrides,
        f"run.seed={cell.seed}",
    ]


# ----------------------------------------------------------------------------------------------
# statistics


def t_cdf_abs(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` >= 1 (``scipy.stats.t``)."""
    if df < 1:
        raise StudyError(f"t distribution needs df >= 1, got {df}")
    return float(2.0 * student_t.cdf(abs(t), df) - 1.0)


def t_quantile(conf: float, df: int) -> float:
    """The two-sided critical value t with P(|T| <= t) = ``conf`` (e.g. t_{0.975, df} for conf =
    0.95; ``scipy.stats.t.ppf``)."""
    if not 0 < conf < 1:
        raise StudyError(f"confidence must be in (0, 1), got {conf}")
    return float(student_t.ppf((1.0 + conf) / 2.0, df))


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values with its ``conf`` t-interval [low, high] (None for n < 2), the sample
    sd and the standard error sd/sqrt(n)."""

    n: int
    mean: float | None
    sd: float | None
    se: float | None
    low: float | None
    high: float | None
    conf: float = CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def t_interval(xs: Sequence[float], conf: float = CONFIDENCE) -> Interval:
    """x̄ ± t_{(1+conf)/2, n-1} · s/sqrt(n) (module doc); n = 1 gives the mean alone, n = 0 nothing."""
    n = len(xs)
    if n == 0:
        return Interval(0, None, None, None, None, None, conf)
    mean = sum(xs) / n
    if n == 1:
        return Interval(1, mean, None, None, None, None, conf)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    se = sd / math.sqrt(n)
    h = t_quantile(conf, n - 1) * se
    return Interval(n, mean, sd, se, mean - h, mean + h, conf)


def paired_difference(a: dict[int, float], b: dict[int, float], conf: float = CONFIDENCE) -> Interval:
    """t-interval of d_s = a_s - b_s over the seeds s present in both (module doc)."""
    return t_interval([a[s] - b[s] for s in sorted(set(a) & set(b))], conf)


def binomial_se(p: float, n: int) -> float:
    """Standard error of an accuracy p measured on n independent questions: sqrt(p(1-p)/n)."""
    if n <= 0:
        raise StudyError(f"binomial se needs n >= 1 questions, got {n}")
    return math.sqrt(p * (1 - p) / n)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t; a non-integer ``df`` (Welch) is floored (at least 1), which widens
    intervals and raises p-values: conservative."""
    h = t_cdf_abs(abs(t), _int_df(df)) / 2
    return 0.5 + h if t >= 0 else 0.5 - h


def _int_df(df: float) -> int:
    """A Welch df as the integer the closed-form t distribution takes: floored (conservative), at
    least 1, capped at 1000 (t_1000 is the normal to 0.1 %); 1e-9 absorbs rounding (4.0000000001 or 3.9999999999)."""
    return max(1, int(math.floor(min(df, 1000.0) + 1e-9)))


def welch_df(terms: Sequence[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of variance terms ``(v_i, df_i)``:
    (Σ v_i)² / Σ (v_i² / df_i); ``inf`` when every term is 0."""
    num = sum(v for v, _ in terms) ** 2
    den = sum(v * v / d for v, d in terms if v > 0 and d > 0)
    return num / den if den > 0 else math.inf


@dataclass(frozen=True)
class Difference:
    """A difference of means (``a - b``) with its two variance terms: ``se_seed`` (run-to-run
    variation, from the seeds) and ``se_item`` (the held-out items are a sample too: the variance of
    the per-item differences over items, ``item_variance``), ``se`` = sqrt(se_seed² + se_item²),
    Welch–Satterthwaite ``df``, the ``conf`` t-interval [low, high] and the two-sided ``p`` of
    "no difference". ``kind``: ``welch`` (unpaired: different recipes share no training randomness)
    or ``paired`` (an ablation within a recipe: seed s of both runs starts alike). ``n``: seeds
    (pairs for ``paired``, the smaller arm for ``welch``); ``n_items``: held-out items of the
    item term (0: left out)."""

    kind: str
    n: int
    mean: float | None
    se: float | None
    se_seed: float | None
    se_item: float
    df: float | None
    low: float | None
    high: float | None
    p: float | None
    n_items: int = 0
    conf: float = CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}


def _finish(
    kind: str,
    n: int,
    mean: float,
    seed_terms: Sequence[tuple[float, float]],
    item_var: float,
    n_items: int,
    conf: float,
) -> Difference:
    terms = [*seed_terms, *([(item_var, max(1, n_items - 1))] if item_var > 0 else [])]
    var = sum(v for v, _ in terms)
    se_seed = math.sqrt(sum(v for v, _ in seed_terms))
    if var <= 0:
        return Difference(kind, n, mean, 0.0, se_seed, 0.0, math.inf, mean, mean, 0.0 if mean else 1.0, n_items, conf)
    se = math.sqrt(var)
    df = welch_df(terms)
    h = t_quantile(conf, _int_df(df)) * se
    p = 2 * (1 - t_cdf(abs(mean) / se, df))
    return Difference(
        kind, n, mean, se, se_seed, math.sqrt(max(item_var, 0.0)), df, mean - h, mean + h, p, n_items, conf
    )


def welch_difference(
    a: Sequence[float], b: Sequence[float], item_var: float = 0.0, n_items: int = 0, conf: float = CONFIDENCE
) -> Difference:
    """Unpaired difference mean(a) - mean(b) of two recipes' per-seed results (module doc):

        se² = s_a²/n_a + s_b²/n_b + item_var,   df by Welch–Satterthwaite over the three terms

    (``item_var`` with N - 1 df, N = ``n_items``). Fewer than 2 seeds in an arm: no interval."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        mean = (sum(a) / na - sum(b) / nb) if na and nb else None
        return Difference("welch", min(na, nb), mean, None, None, 0.0, None, None, None, None, n_items, conf)
    ia, ib = t_interval(list(a)), t_interval(list(b))
    terms = [(ia.sd**2 / na, na - 1), (ib.sd**2 / nb, nb - 1)]
    return _finish("welch", min(na, nb), ia.mean - ib.mean, terms, item_var, n_items, conf)


def paired_items_difference(
    a: dict[int, float], b: dict[int, float], item_var: float = 0.0, n_items: int = 0, conf: float = CONFIDENCE
) -> Difference:
    """Paired difference over the seeds both ran, d_s = a_s - b_s (an ablation within a recipe):

    se² = s_d²/n + item_var,   df by Welch–Satterthwaite over the two terms."""
    seeds = sorted(set(a) & set(b))
    d = [a[s] - b[s] for s in seeds]
    if len(d) < 2:
        return Difference(
            "paired", len(d), (d[0] if d else None), None, None, 0.0, None, None, None, None, n_items, conf
        )
    i = t_interval(d)
    return _finish("paired", len(d), i.mean, [(i.sd**2 / len(d), len(d) - 1)], item_var, n_items, conf)


def item_variance(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], paired: bool = False) -> float:
    """The item term of a difference: the variance over held-out items of the *true* per-item
    difference, divided by the number of items N (what resampling the items would add).

    ``a[s][j]`` is seed s's score on item j (0/1 greedy, or the item's sampled accuracy); ``b``
    likewise, same items in the same order. Per item, δ_j = mean_s a_sj - mean_s b_sj (``paired``:
    mean_s (a_sj - b_sj) over seed pairs). The observed spread of the δ_j also holds each item's
    run-to-run noise, which the seed term already counts; it is removed by the method of moments:

        v_item = max(0, var_j(δ_j) - mean_j(w_j)) / N,
        w_j = s²_{a,j}/n_a + s²_{b,j}/n_b   (paired: s²_{d,j}/n)

    (sample variances over seeds, ddof 1). Needs 2+ seeds per arm (else the noise cannot be
    separated and the raw var_j(δ_j)/N is returned: an upper bound)."""
    if not a or not b:
        return 0.0
    n_items = len(a[0])
    if any(len(r) != n_items for r in [*a, *b]) or n_items < 2:
        raise StudyError(f"item_variance: every run needs the same {n_items} (>= 2) items")

    def mv(rows: Sequence[Sequence[float]], j: int) -> tuple[float, float]:
        xs = [r[j] for r in rows]
        m = sum(xs) / len(xs)
        return m, (sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else 0.0

    deltas, noise = [], []
    if paired:
        if len(a) != len(b):
            raise StudyError(f"item_variance(paired): {len(a)} and {len(b)} seeds; pass the common seeds in order")
        diffs = [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
        for j in range(n_items):
            m, w = mv(diffs, j)
            deltas.append(m)
            noise.append(w)
        enough = len(a) > 1
    else:
        for j in range(n_items):
            (ma, wa), (mb, wb) = mv(a, j), mv(b, j)
            deltas.append(ma - mb)
            noise.append(wa + wb)
        enough = len(a) > 1 and len(b) > 1
    md = sum(deltas) / n_items
    var = sum((x - md) ** 2 for x in deltas) / (n_items - 1)
    if enough:
        var = max(0.0, var - sum(noise) / n_items)
    return var / n_items


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence): sort the m
    p-values ascending, p'_(i) = max_{k <= i} min(1, (m - k + 1) p_(k)). None (a claim not run)
    stays None and does not count in m."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])  # type: ignore[arg-type, return-value]
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for k, i in enumerate(idx):
        running = max(running, min(1.0, (m - k) * float(pvalues[i])))  # type: ignore[arg-type]
        out[i] = running
    return out


@functools.lru_cache(maxsize=4096)
def _crit(alpha: float, df: int) -> float:
    return t_quantile(1 - alpha, df)


def power(
    effect: float,
    sd: float,
    n: int,
    item_var: float = 0.0,
    alpha: float = 0.05,
    paired: bool = False,
    sims: int = 20_000,
    seed: int = 0,
) -> float:
    """Power of the study's own two-sided level-``alpha`` test (``welch_difference``, or
    ``paired_items_difference`` with ``paired``) of a true difference ``effect`` with ``n`` seeds
    per arm, by simulation (``sims`` draws, seeded: a pure function). ``sd`` is the seed sd of one
    run's metric (``paired``: of a seed pair's difference), ``item_var`` the item term
    (``item_variance``; it does not shrink with seeds): each simulated study draws the held-out
    items' shift of the true difference, N(0, item_var), and the runs' seed noise, N(0, sd²).
    Why simulated: with 2-5 seeds the usual shifted-t shortcut is off by up to 0.07."""
    if n < 2:
        return 0.0
    import numpy as np

    rng = np.random.default_rng(seed)
    shift = rng.normal(0.0, math.sqrt(item_var), sims) if item_var > 0 else np.zeros(sims)
    if paired:
        d = effect + shift[:, None] + rng.normal(0.0, sd, (sims, n))  # (S, n)
        seed_terms = [(d.var(axis=1, ddof=1) / n, n - 1)]
        mean = d.mean(axis=1)
    else:
        a = effect + shift[:, None] + rng.normal(0.0, sd, (sims, n))  # (S, n)
        b = rng.normal(0.0, sd, (sims, n))  # (S, n)
        seed_terms = [(a.var(axis=1, ddof=1) / n, n - 1), (b.var(axis=1, ddof=1) / n, n - 1)]
        mean = a.mean(axis=1) - b.mean(axis=1)
    terms = [*seed_terms, *([(np.full(sims, item_var), 10**6 - 1)] if item_var > 0 else [])]
    var = sum(v for v, _ in terms)
    den = sum(v * v / k for v, k in terms)
    df = np.where(den > 0, var * var / np.where(den > 0, den, 1.0), 1000.0)
    k = np.clip(np.floor(np.minimum(df, 1000.0) + 1e-9), 1, 1000).astype(int)
    crit = np.array([_crit(alpha, int(x)) for x in range(1, int(k.max()) + 1)])[k - 1]
    t = np.abs(mean) / np.sqrt(np.where(var > 0, var, np.inf))
    return float(np.mean(t > crit))


def seeds_for_power(
    effect: float,
    sd: float,
    item_var: float = 0.0,
    alpha: float = 0.05,
    target: float = 0.8,
    paired: bool = False,
    max_seeds: int = 50,
) -> int | None:
    """The fewest seeds per arm (>= 2) at which ``power`` reaches ``target``; None when even
    ``max_seeds`` do not (the item term alone can make an effect undetectable on these items)."""
    for n in range(2, max_seeds + 1):
        if power(effect, sd, n, item_var, alpha, paired) >= target:
            return n
    return None


REPRODUCED, NOT_REPRODUCED, NOT_DISTINGUISHABLE, NOT_RUN = (
    "reproduced",
    "not reproduced",
    "not distinguishable",
    "not run",
)


def claim_verdict(diff: Interval) -> str:
    """The claim rule (module doc) on the paired interval of (claimed better - claimed worse)."""
    if diff.n < 2 or diff.low is None or diff.high is None:
        return NOT_RUN
    if diff.low > 0:
        return REPRODUCED
    if diff.high < 0:
        return NOT_REPRODUCED
    return NOT_DISTINGUISHABLE


# ----------------------------------------------------------------------------------------------
# run folders -> results


@dataclass(frozen=True)
class CellResult:
    """What the study reads from one finished run folder: final held-out ``greedy`` / ``sampled``
    accuracy on ``bench`` over ``n`` questions, base accuracy, the run's training ``compute`` at
    its end, wall seconds, and the mean over rounds of the oracle agreement of the pseudo-labels
    per filter (``none`` / ``absolute`` / ``dual`` on the same candidates, and ``kept``: the
    filter the run used; empty when the run has no generated questions with an oracle)."""

    variant: str
    seed: int
    bench: str
    n: int
    greedy: float
    sampled: float | None
    base_greedy: float | None
    compute: Compute
    wall_seconds: float | None
    oracle_agreement: dict[str, float] = field(default_factory=dict)
    curriculum: dict[str, float] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False)
    world: dict[str, Any] = field(default_factory=dict, compare=False)  # summary.json's world section (skill world)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "compute": self.compute.to_dict(),
            "path": None if self.path is None else str(self.path),
        }


ORACLE_FILTERS = ("none", "absolute", "dual", "kept")

CURRICULUM_KEYS = (
    "anchors/anchors",
    "buffer/buffer_real",
    "buffer/buffer_generated",
    "pool/kept",
    "solver/reward_mean",
)
"""Per-round figures of what each solver phase trained on (mean over rounds in the per-run table):
real anchors and generated questions in D²Evo's buffer, questions DiagEvo's filter kept, and the
solver's mean training reward; they explain accuracy differences that compute alone does not."""


def _round_mean(rounds: Sequence[dict[str, Any]], keys: Sequence[str]) -> float | None:
    vals = [
        float(r[k])
        for r in rounds
        for k in keys
        if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
    ]
    return sum(vals) / len(vals) if vals else None


def read_cell(variant: str, seed: int, path: Path) -> CellResult:
    """The ``CellResult`` of a finished run folder (summary.json); ``StudyError`` naming the file
    when it lacks a final evaluation."""
    spath = Path(path) / "summary.json"
    try:
        s = json.loads(spath.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise StudyError(f"{spath}: unreadable ({e})") from e
    final = (s.get("eval") or {}).get("final") or {}
    if not final:
        raise StudyError(f"{spath}: no eval.final (the run did not finish)")
    bench = next(iter(final))
    f, base = final[bench], ((s.get("eval") or {}).get("base") or {}).get(bench) or {}
    rounds = s.get("rounds") or []
    oracle = {
        m: v
        for m in ORACLE_FILTERS
        if (v := _round_mean(rounds, (f"pool/oracle_acc_{m}", f"buffer/oracle_acc_{m}"))) is not None
    }
    curriculum = {k: v for k in CURRICULUM_KEYS if (v := _round_mean(rounds, (k,))) is not None}
    return CellResult(
        variant,
        seed,
        bench,
        int(f.get("n") or 0),
        float(f["greedy"]),
        f.get("sampled"),
        base.get("greedy"),
        _compute_at_final_eval(Path(path), s),
        s.get("wall_seconds"),
        oracle,
        curriculum,
        Path(path),
        s.get("skill_world") or {},
    )


def _compute_at_final_eval(path: Path, summary: dict[str, Any]) -> Compute:
    """Training compute spent before the run's last held-out evaluation (the x of its last point in
    the accuracy-vs-compute figure): phases after it (D²Evo's report-only re-measure of the pool,
    ``final/difficulty``) measure, they do not train. From state.json's phase records; the
    summary's total when they carry no compute."""
    try:
        phases = json.loads((path / "state.json").read_text(encoding="utf-8")).get("phases") or []
    except (OSError, json.JSONDecodeError):
        phases = []
    last = max((i for i, p in enumerate(phases) if p.get("name") == EVAL_PHASE), default=None)
    if last is None or any(p.get("compute") is None for p in phases[: last + 1]):
        return Compute.from_dict(((summary.get("compute") or {}).get("train")) or {})
    total = Compute()
    for p in phases[: last + 1]:
        if p.get("name") != EVAL_PHASE:
            total += Compute.from_dict(p["compute"])
    return total


def read_results(cells: Sequence[Cell]) -> tuple[list[CellResult], list[str]]:
    """Results of the finished cells, and the ``variant seedK: status`` of the others."""
    out, missing = [], []
    for c in cells:
        st = cell_status(c.path)
        if st == "finished":
            out.append(read_cell(c.variant.name, c.seed, c.path))
        else:
            missing.append(f"{c.variant.name} seed{c.seed}: {'not run' if st == 'empty' else 'unfinished'}")
    return out, missing


# ----------------------------------------------------------------------------------------------
# aggregation


@dataclass(frozen=True)
class VariantStats:
    """Per variant over its seeds: greedy and sampled t-intervals, the paired difference to its
    reference (or, for the main methods, to full-label grpo) on greedy and sampled, the held-out
    binomial se at its mean greedy accuracy, mean compute and oracle agreement."""

    variant: str
    seeds: list[int]
    greedy: Interval
    sampled: Interval
    versus: str | None
    diff_greedy: Interval | None
    diff_sampled: Interval | None
    heldout_n: int
    binomial_se: float | None
    compute: dict[str, float]
    oracle_agreement: dict[str, float]


def _by_seed(results: Sequence[CellResult], variant: str, key: str) -> dict[int, float]:
    return {r.seed: float(getattr(r, key)) for r in results if r.variant == variant and getattr(r, key) is not None}


def variant_stats(results: Sequence[CellResult], variant: Variant) -> VariantStats | None:
    """``VariantStats`` of one variant (None when no seed of it finished). A main method other
    than grpo is compared with full-label grpo; an ablation with its full method."""
    mine = [r for r in results if r.variant == variant.name]
    if not mine:
        return None
    versus = variant.reference or (None if variant.name == "grpo" else "grpo")
    g, sm = _by_seed(results, variant.name, "greedy"), _by_seed(results, variant.name, "sampled")
    dg = paired_difference(g, _by_seed(results, versus, "greedy")) if versus else None
    ds = paired_difference(sm, _by_seed(results, versus, "sampled")) if versus else None
    gi = t_interval(list(g.values()))
    n = mine[0].n
    comp = {k: sum(getattr(r.compute, k) for r in mine) / len(mine) for k in COUNTERS}
    oracle = {
        m: sum(r.oracle_agreement[m] for r in mine if m in r.oracle_agreement)
        / sum(m in r.oracle_agreement for r in mine)
        for m in ORACLE_FILTERS
        if any(m in r.oracle_agreement for r in mine)
    }
    return VariantStats(
        variant.name,
        sorted(g),
        gi,
        t_interval(list(sm.values())),
        versus,
        dg,
        ds,
        n,
        binomial_se(gi.mean, n) if gi.mean is not None and n else None,
        comp,
        oracle,
    )


@dataclass(frozen=True)
class Separation:
    """The best and the worst main method by mean accuracy on ``metric``, their paired difference on
    the common seeds, ``ratio`` = mean paired difference / its standard error, and
    ``ratio_unpaired`` = (mean_best - mean_worst) / sqrt(se_best² + se_worst²) with each method's own
    seed standard error (the quotable one: seeds pair nothing between recipes)."""

    best: str
    worst: str
    diff: Interval
    ratio: float | None
    metric: str = "greedy"
    ratio_unpaired: float | None = None


def separation(results: Sequence[CellResult], names: Sequence[str], metric: str = "greedy") -> Separation | None:
    """``Separation`` on ``metric`` (greedy / sampled) over the variants ``names`` that have at least
    2 seeds (None when fewer than two such variants)."""
    means = {n: t_interval(list(_by_seed(results, n, metric).values())) for n in names}
    ok = sorted((i.mean, n) for n, i in means.items() if i.n >= 2 and i.mean is not None)
    if len(ok) < 2:
        return None
    worst, best = ok[0][1], ok[-1][1]
    d = paired_difference(_by_seed(results, best, metric), _by_seed(results, worst, metric))
    ratio = d.mean / d.se if d.se and d.mean is not None else None
    b, w = means[best], means[worst]
    se = math.sqrt((b.se or 0.0) ** 2 + (w.se or 0.0) ** 2)
    return Separation(best, worst, d, ratio, metric, (b.mean - w.mean) / se if se else None)


@dataclass(frozen=True)
class Claim:
    """One direction a paper claims: ``better`` beats ``worse`` on held-out greedy accuracy (or, for
    ``metric="oracle"``, the dual filter's pseudo-labels agree with the oracle more often than
    ``worse``'s filter on the same candidates of ``better``'s runs)."""

    text: str
    better: str
    worse: str
    paper: str
    metric: str = "greedy"


def claims() -> list[Claim]:
    """The directions METHODS.md claims, each as a paired comparison."""
    out = [
        Claim("D²Evo beats the R-Zero-style baseline", "d2evo", "rzero", "51.35 vs 46.91 (4B math)"),
        Claim(
            "D²Evo beats GRPO on the same labelled set (the preset's labels: a fraction only where grpo gets more)",
            "d2evo",
            "grpo",
            "51.35 (0.1K labels) vs 49.28 (19K)",
        ),
        Claim("DiagEvo beats the R-Zero-style baseline", "diagevo", "rzero", "72.3 vs 67.8 (8B math)"),
    ]
    for v in VARIANTS.values():
        if v.reference and not v.paper.startswith(("ours", "-", "+")):
            out.append(Claim(f"ablation {v.name} lowers accuracy", v.reference, v.name, f"{v.paper}"))
    out += [
        Claim(
            "the dual filter raises pseudo-label accuracy over no filter (label precision)",
            "dual",
            "none",
            "no filter 69.4 vs 72.3",
            "oracle",
        ),
        Claim(
            "the dual filter raises pseudo-label accuracy over the absolute filter alone (label precision)",
            "dual",
            "absolute",
            "absolute only 70.9 vs 72.3; oracle agreement 72% -> 75%",
            "oracle",
        ),
        Claim("memory-guided targeting beats free exploration", "diagevo", "diagevo.explore_only", "72.3 vs 69.5"),
        Claim("memory-guided targeting beats no memory at all", "diagevo", "diagevo.no_memory", "(R-Zero has none)"),
        Claim("same-node stitching beats random pairs", "diagevo", "diagevo.random_pair", "+1.0"),
    ]
    return out


@dataclass(frozen=True)
class ClaimResult:
    """A claim's paired interval on its metric, the verdict, and (accuracy claims) the paired
    interval on sampled accuracy for context (the verdict is greedy's)."""

    claim: Claim
    diff: Interval
    verdict: str
    diff_sampled: Interval | None = None
    verdict_sampled: str | None = None


def judge_claims(results: Sequence[CellResult]) -> list[ClaimResult]:
    """Every claim's paired interval and verdict (``claim_verdict``). Oracle claims pair the filters
    within the full DiagEvo runs (same candidate pools), per seed."""
    out = []
    for c in claims():
        if c.metric == "oracle":
            runs = [r for r in results if r.variant == "diagevo"]
            a = {r.seed: r.oracle_agreement[c.better] for r in runs if c.better in r.oracle_agreement}
            b = {r.seed: r.oracle_agreement[c.worse] for r in runs if c.worse in r.oracle_agreement}
        else:
            a, b = _by_seed(results, c.better, "greedy"), _by_seed(results, c.worse, "greedy")
        d = paired_difference(a, b)
        ds = (
            None
            if c.metric == "oracle"
            else paired_difference(_by_seed(results, c.better, "sampled"), _by_seed(results, c.worse, "sampled"))
        )
        out.append(ClaimResult(c, d, claim_verdict(d), ds, None if ds is None else claim_verdict(ds)))
    return out


# ----------------------------------------------------------------------------------------------
# markdown


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
    pct = int(CONFIDENCE * 100)
    L = [
        "# Multi-seed study: methods, paper ablations and the papers' claims",
        "",
        f"Written by `{command}` from the run folders (every figure also in `study.json`); "
        "rerun that command to update this file rather than edit it.",
        "",
        "## Setting",
        "",
        *setting,
        "",
        f"Intervals are {pct} % t-intervals over seeds; `Δ vs` is the paired difference to the named variant on "
        "the same seeds and held-out set. `sd` is the seed-to-seed standard deviation of greedy accuracy, "
        "`binomial se` the held-out set's own standard error sqrt(p(1-p)/N) at the mean.",
        "",
    ]

    def rows(sel: Sequence[VariantStats]) -> list[str]:
        head = [
            "variant",
            "seeds",
            "greedy",
            "sampled",
            "sd (greedy)",
            "binomial se",
            "Δ greedy vs",
            "Δ sampled",
            "paper",
        ]
        out = ["| " + " | ".join(head) + " |", "|---|---|---:|---:|---:|---:|---|---:|---|"]
        for s in sel:
            out.append(
                f"| {s.variant} | {','.join(map(str, s.seeds))} | {_ci(s.greedy)} | {_ci(s.sampled)} | "
                f"{_f(s.greedy.sd, 4)} | {_f(s.binomial_se, 4)} | "
                f"{(s.versus + ': ' + _ci(s.diff_greedy, signed=True)) if s.versus else '-'} | "
                f"{_ci(s.diff_sampled, signed=True)} | {VARIANTS[s.variant].paper} |"
            )
        return out

    main = [s for s in stats if VARIANTS[s.variant].main]
    abl = [s for s in stats if not VARIANTS[s.variant].main]
    L += ["## Main methods (held-out accuracy at the end of the run)", "", *rows(main), ""]
    for sp in sep:
        L += [
            f"Separation of the main methods on {sp.metric} accuracy: best {sp.best} - worst {sp.worst} = "
            f"{_ci(sp.diff, signed=True)} over {sp.diff.n} paired seeds, paired se {_f(sp.diff.se, 4)}: "
            f"{_f(sp.ratio, 1)} standard errors; unpaired (each method's own seed se): "
            f"{_f(sp.ratio_unpaired, 1)} (quote the unpaired figure: seeds pair nothing between recipes).",
            "",
        ]
    if abl:
        L += ["## Ablations (Δ vs the full method: negative = the ablation lowers accuracy)", "", *rows(abl), ""]
    orc = [s for s in stats if s.oracle_agreement]
    if orc:
        L += [
            "## Pseudo-label oracle agreement (mean over rounds and seeds)",
            "",
            "Share of generated questions whose pseudo-label (majority vote) equals the oracle's answer, "
            "for the questions each filter keeps from the same candidates (`kept` = the run's own filter).",
            "",
            "| variant | " + " | ".join(ORACLE_FILTERS) + " |",
            "|---|" + "---:|" * len(ORACLE_FILTERS),
        ]
        L += [
            f"| {s.variant} | " + " | ".join(_f(s.oracle_agreement.get(m)) for m in ORACLE_FILTERS) + " |" for s in orc
        ]
        L.append("")
    L += [
        "## Compute at the end of the run (mean over seeds)",
        "",
        "Training compute spent before the final held-out evaluation (evaluations and D²Evo's report-only "
        "re-measure of the pool after it excluded): the x of each run's last point in the figure below.",
        "",
        "| variant | " + " | ".join(COUNTERS) + " |",
        "|---|" + "---:|" * len(COUNTERS),
    ]
    L += [f"| {s.variant} | " + " | ".join(_big(s.compute[k]) for k in COUNTERS) + " |" for s in stats]
    L.append("")
    if figure:
        L += [
            "## Held-out accuracy against compute (main methods, every seed)",
            "",
            f"![accuracy vs compute]({figure})",
            "",
        ]
    L += [
        "## The papers' claims",
        "",
        f"Rule: the paired {pct} % interval of (claimed better - claimed worse) above 0 = reproduced, below 0 = "
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
    if notes:
        L += ["## Notes", "", *notes, ""]
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
    return "\n".join(L)


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
