"""The study's statistics: pure functions over per-seed (and per-item) results, tested against slow
references in ``tests/test_study.py``.

    mean    x̄ = (1/n) Σ x_i,     sd s = sqrt(Σ (x_i - x̄)² / (n - 1)),     se = s / sqrt(n)
    95 % t-interval           x̄ ± t_{0.975, n-1} · s / sqrt(n)                   (n >= 2)
    paired difference         d_i = a_i - b_i over the seeds both variants ran, then the
                              t-interval of the d_i (same held-out set, same seeds: the seed's
                              own luck cancels, so this is the comparison, not two intervals)
    held-out binomial se      sqrt(p (1 - p) / N)      (N held-out questions, p the accuracy)
    claim rule                the paired 95 % interval of (claimed-better - claimed-worse)
                              lies above 0: reproduced; below 0: not reproduced; contains 0:
                              not distinguishable; fewer than 2 paired seeds: not run

What comes from scipy and what does not: the t distribution (cdf, quantiles) is
``scipy.stats.t``. Written here, for these reasons: Welch–Satterthwaite over more than two
variance terms (the item term is a third; ``scipy.stats.ttest_ind`` takes two samples only, and
``tests/test_study.py`` checks ours against it where they coincide); Holm (scipy has only
Benjamini-Hochberg / -Yekutieli, ``false_discovery_control``); the power of the study's own test
(a vectorised simulation of that test with its floored df and item shift: ``scipy.stats.power``
would run the same simulation through a callback, one resample at a time).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import t as student_t

from coevolve.errors import CoevolveError

CONFIDENCE = 0.95
"""Coverage of every interval in the study."""


class StudyError(CoevolveError):
    """A study spec that names an unknown variant, a run folder the study cannot read, or a
    statistic asked of data it is not defined on."""


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


def item_variance_bootstrap(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], paired: bool = False, reps: int = 500, seed: int = 0
) -> float:
    """The item term (``item_variance``'s quantity) by a bootstrap over items x seeds, without the
    moment estimator's truncation at 0: each of ``reps`` replicates (seeded: a pure function)
    draws the N items with replacement and, per arm (``paired``: per seed pair), the distinct
    seeds of a with-replacement draw (at least 2, so the run-to-run noise is still separable and
    the replicate's moment estimate stays unbiased); the term is the replicates' mean of

        max(0, var_j(δ*_j) - mean_j(w*_j)) / N      (``item_variance`` on the replicate)

    Why: with 3-8 seeds the moment estimate often falls below 0 and is cut to 0, although the items
    almost surely differ; the bootstrap mean is positive whenever the data cannot rule an item
    spread out, and close to the moment estimate where that is well above its own noise. One seed
    in an arm: the raw var_j(δ_j)/N (an upper bound), as ``item_variance``."""
    if not a or not b:
        return 0.0
    import numpy as np

    A, B = np.asarray(a, dtype=float), np.asarray(b, dtype=float)  # (Sa, N), (Sb, N)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[1] or A.shape[1] < 2:
        raise StudyError(f"item_variance_bootstrap: every run needs the same (>= 2) items, got {A.shape}, {B.shape}")
    if paired:
        if A.shape[0] != B.shape[0]:
            raise StudyError(f"item_variance_bootstrap(paired): {A.shape[0]} and {B.shape[0]} seeds")
        arms = [A - B]
    else:
        arms = [A, B]
    if any(x.shape[0] < 2 for x in arms):
        return item_variance(a, b, paired)
    rng = np.random.default_rng(seed)
    n = A.shape[1]

    def seeds(k: int) -> np.ndarray:
        while True:
            s = np.unique(rng.integers(0, k, k))
            if len(s) >= 2:
                return s

    est = np.empty(reps)
    for r in range(reps):
        items = rng.integers(0, n, n)
        rows = [x[seeds(x.shape[0])][:, items] for x in arms]  # (s, N) each
        means = [x.mean(axis=0) for x in rows]
        delta = means[0] - means[1] if len(rows) == 2 else means[0]  # (N,)
        noise = sum(x.var(axis=0, ddof=1) / x.shape[0] for x in rows)  # (N,)
        est[r] = max(0.0, float(delta.var(ddof=1) - noise.mean())) / n
    return float(est.mean())


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
