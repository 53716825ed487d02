"""Sequential (adaptive) estimation: draw solver answers in stages and stop a question once its
verdict — in the band or not (D²Evo difficulty), passes the confidence filter or not (vote) — is
decided at a stated confidence.

Why: a question answered 0/8 or 16/16 correctly is, with high confidence, outside a [0.4, 0.8]
band; drawing the rest of N = 32 answers for it changes nothing but the bill.

**The rule** (``band_posterior`` / ``band_decision``). After ``n`` answers with ``k`` successes
the pass rate ``p`` has the posterior ``Beta(a + k, b + n - k)`` (prior ``Beta(a, b)``, uniform
by default; ``a, b`` may also carry the previous round's discounted counts). With ``I_x`` the
regularised incomplete beta function::

    P_below  = I_low(a + k, b + n - k)          P(p < low)
    P_above  = 1 - I_high(a + k, b + n - k)     P(p > high)
    P_inside = 1 - P_below - P_above

A question stops with verdict v ∈ {below, inside, above} when ``P_v >= 1 - δ`` and the point
estimate ``k / n`` falls on the same side (so the stored pass rate always agrees with the
verdict, and anchor mining on ``k / n`` is unchanged). Undecided at the cap: classified by
``k / n`` as the fixed estimator does.

**Error rate.** Bayesian: every stopped question is on the wrong side with posterior probability
<= δ, so under the prior at most a fraction δ of early verdicts are wrong. Frequentist, for a
question whose true pass rate is ``p``: ``staged_outcome(p, ...).early_error`` is the exact probability (sum
over all staged binomial paths) that the question stops early on the wrong side. With the
uniform prior, δ = 0.05 and stages 4, 8, 16 (cap 32) on [0.4, 0.8] it is at most 0.072 (at
p = 0.4, the band's edge, where fixed N = 32 is itself wrong 46 % of the time), at most 0.033
for 0.45 <= p <= 0.8 and below 1e-6 for p <= 0.3 or p >= 0.85; and an early wrong stop mostly happens on a
path where the full 32 answers would also have been wrong, so the total error exceeds fixed
N = 32's by at most 0.005 at any p (``fixed_error``; table: ``dev/perf/bench_difficulty.py``,
docs/difficulty.md). Cost: 8 answers at p = 0, 16 at p = 1, ~31 inside the band.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from scipy.special import betainc

from coevolve.errors import ConfigError
from coevolve.schema import Band, Sequential, in_band

Decision = Literal["below", "inside", "above"]


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularised incomplete beta ``I_x(a, b) = P(Beta(a, b) <= x)`` for real ``a, b > 0``
    (``scipy.special.betainc``).

    For integer ``a, b`` it equals the binomial tail ``P(Bin(a + b - 1, x) >= a)``.
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"beta_cdf needs a, b > 0, got a={a}, b={b}")
    return float(betainc(a, b, min(max(x, 0.0), 1.0)))


@dataclass(frozen=True)
class BandPosterior:
    """Posterior mass of the pass rate below, inside and above a band."""

    below: float
    inside: float
    above: float


def band_posterior(correct: float, n: float, band: Band, prior: tuple[float, float] = (1.0, 1.0)) -> BandPosterior:
    """``P(p < low)``, ``P(low <= p <= high)``, ``P(p > high)`` under ``Beta(a + k, b + n - k)``."""
    a, b = prior[0] + correct, prior[1] + n - correct
    below = beta_cdf(band.low, a, b)
    above = 1.0 - beta_cdf(band.high, a, b)
    return BandPosterior(below, max(0.0, 1.0 - below - above), above)


def point_side(correct: int, n: int, band: Band) -> Decision:
    """Which side of ``band`` the point estimate ``correct / n`` lies on (the fixed estimator's verdict)."""
    rate = correct / n
    if band.contains(rate):
        return "inside"
    return "below" if rate < band.low else "above"


def band_decision(
    correct: int, n: int, band: Band, confidence: float, prior: tuple[float, float] = (1.0, 1.0)
) -> Decision | None:
    """The verdict on which a question may stop after ``n`` answers, or None (draw more).

    Stops with v when ``P_v >= confidence`` (module docstring) and ``correct / n`` lies on side v.
    """
    post = band_posterior(correct, n, band, prior)
    side = point_side(correct, n, band)
    return side if getattr(post, side) >= confidence else None


@lru_cache(maxsize=4096)
def _binom_pmf(n: int, p: float) -> tuple[float, ...]:
    return tuple(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1))


def true_side(p: float, band: Band) -> Decision:
    return "inside" if band.contains(p) else "below" if p < band.low else "above"


@dataclass(frozen=True)
class StagedOutcome:
    """Exact law of the staged estimator for one true pass rate ``p``: probability of stopping
    early on the wrong side, of the final verdict being wrong, and the expected answers drawn."""

    early_error: float
    error: float
    expected_samples: float


def staged_outcome(
    p: float, schedule: Sequence[int], band: Band, confidence: float, prior: tuple[float, float] = (1.0, 1.0)
) -> StagedOutcome:
    """Enumerate every path of the staged estimator (cumulative answers ``schedule``, the last the
    cap) for a question of true pass rate ``p``: the distribution of successes among the still
    running paths is propagated stage by stage with binomial increments. Exact, no sampling."""
    truth = true_side(p, band)
    running = {0: 1.0}  # successes so far -> probability that the question is still undecided
    done_n = 0
    early_err = err = samples = 0.0
    for j, n in enumerate(schedule):
        pmf = _binom_pmf(n - done_n, p)
        nxt: dict[int, float] = {}
        for k0, w in running.items():
            for dk, q in enumerate(pmf):
                nxt[k0 + dk] = nxt.get(k0 + dk, 0.0) + w * q
        samples += sum(running.values()) * (n - done_n)
        done_n = n
        last = j == len(schedule) - 1
        running = {}
        for k, w in nxt.items():
            verdict = point_side(k, n, band) if last else band_decision(k, n, band, confidence, prior)
            if verdict is None:
                running[k] = w
            elif verdict != truth:
                err += w
                early_err += 0.0 if last else w
    return StagedOutcome(early_err, err, samples)


def fixed_error(p: float, n: int, band: Band) -> float:
    """Probability that the fixed estimator (``k / n`` of ``n`` answers) puts ``p`` on the wrong side."""
    truth = true_side(p, band)
    return sum(q for k, q in enumerate(_binom_pmf(n, p)) if point_side(k, n, band) != truth)


# --------------------------------------------------------------------------------------------
# vote: the confidence filter on p1 / p2


VoteDecision = Literal["pass", "fail"]


def vote_decision(
    sizes: Sequence[int],
    n: int,
    band: Band,
    tau: float,
    mode: str,
    confidence: float,
    prior: tuple[float, float] = (1.0, 1.0),
) -> VoteDecision | None:
    """The filter verdict on which a vote may stop after ``n`` answers (``sizes``: answer
    clusters, largest first), or None (draw more).

    Two posteriors, both Beta with ``prior``: the leader's share ``q1`` of all answers (counts
    ``m1`` of ``n``) against ``band``, and, for ``dual``, the leader's share of the two leading
    clusters ``r = m1 / (m1 + m2)`` against ``t = tau / (1 + tau)`` (``p1 >= tau·p2`` ⇔ ``r >= t``).

    * ``fail`` when the current point estimate fails the filter and one failing condition holds
      with posterior >= ``confidence`` (``q1`` below or above the band, or ``r < t``);
    * ``pass`` when the point estimate passes and every condition holds with posterior
      >= ``1 - (1 - confidence) / 2`` (Bonferroni over the two);
    * ``none`` mode: nothing to decide, never stops (the label would rest on fewer answers).

    Approximation: the leader is the leader of the answers so far; a later answer can promote
    another cluster, which the posterior on ``m1`` ignores (it only matters near a tie, where the
    ratio test keeps the question open).
    """
    if mode not in ("dual", "absolute"):
        return None
    m1 = sizes[0] if sizes else 0
    m2 = sizes[1] if len(sizes) > 1 else 0
    p1, p2 = m1 / n, m2 / n
    band_ok = in_band(p1, band.low, band.high)
    ratio_ok = mode != "dual" or p1 >= tau * p2 - 1e-12
    post = band_posterior(m1, n, band, prior)
    t = tau / (1.0 + tau)
    ratio_below = beta_cdf(t, prior[0] + m1, prior[1] + m2) if mode == "dual" else 0.0
    if m1 == 0 or not (band_ok and ratio_ok):
        if max(post.below, post.above, ratio_below) >= confidence:
            return "fail"
        return None
    half = 1.0 - (1.0 - confidence) / 2.0
    if post.inside >= half and (mode != "dual" or 1.0 - ratio_below >= half):
        return "pass"
    return None


def schedule_of(seq: Sequential, cap: int) -> list[int]:
    """The cumulative answers per stage for cap ``cap`` (``seq.stages + [cap]``), validated."""
    try:
        return seq.schedule(cap)
    except ValueError as e:
        raise ConfigError(str(e)) from None
