"""Tests for the adaptive (sequential) estimators: the stopping rule as a pure function against
slow references (numerical integration, exact enumeration vs seeded simulation), and the
adaptive difficulty / vote estimators on a fake sampler."""

from __future__ import annotations

import math
import random

import pytest
from pydantic import ValidationError

import coevolve.curriculum as C
from coevolve.config.d2evo import D2EvoConfig
from coevolve.curriculum import sequential as S
from coevolve.errors import ConfigError
from coevolve.schema import Band, Sequential, Voting
from coevolve.types import SamplingParams, Task
from test_curriculum import FakePrompter, FakeSampler, G, box

BAND = Band(low=0.4, high=0.8)


def slow_beta_cdf(x: float, a: float, b: float, steps: int = 100_000) -> float:
    """I_x(a, b) by the midpoint rule on the density (the slow reference). For a < 1 the density
    is unbounded at 0, so there the variable is u = t^a (P = ∫_0^{x^a} (1 - u^{1/a})^{b-1} du /
    (a·B(a, b))), whose integrand is bounded."""
    logb = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    if a >= 1:
        h = x / steps
        return (
            sum(((i + 0.5) * h) ** (a - 1) * (1 - (i + 0.5) * h) ** (b - 1) for i in range(steps)) * h / math.exp(logb)
        )
    h = x**a / steps
    return sum((1.0 - ((i + 0.5) * h) ** (1.0 / a)) ** (b - 1.0) for i in range(steps)) * h / (a * math.exp(logb))


@pytest.mark.parametrize(
    "x,a,b", [(0.4, 1.0, 1.0), (0.8, 9.0, 1.0), (0.4, 0.5, 4.5), (0.3, 2.5, 7.25), (0.8, 17.4, 2.6), (0.1, 1.0, 30.0)]
)
def test_beta_cdf_matches_integration(x: float, a: float, b: float) -> None:
    assert S.beta_cdf(x, a, b) == pytest.approx(slow_beta_cdf(x, a, b), abs=2e-5)


def test_beta_cdf_integer_is_binomial_tail() -> None:
    for a in range(1, 12):
        for b in range(1, 12):
            for x in (0.2, 0.4, 0.8):
                m = a + b - 1
                tail = sum(math.comb(m, j) * x**j * (1 - x) ** (m - j) for j in range(a, m + 1))
                assert S.beta_cdf(x, a, b) == pytest.approx(tail, abs=1e-12)


def test_band_decision_against_slow_posterior() -> None:
    """Every (k, n) up to 32: the decision equals the rule evaluated with the integrated posterior."""
    slow = {}
    for n in (4, 8, 16, 32):
        for k in range(n + 1):
            a, b = 1 + k, 1 + n - k
            below, above = slow_beta_cdf(0.4, a, b, 4000), 1 - slow_beta_cdf(0.8, a, b, 4000)
            side = S.point_side(k, n, BAND)
            mass = {"below": below, "above": above, "inside": 1 - below - above}[side]
            if abs(mass - 0.95) > 1e-3:  # skip knife-edge cases the coarse integral cannot settle
                slow[(k, n)] = side if mass >= 0.95 else None
    for (k, n), want in slow.items():
        assert S.band_decision(k, n, BAND, 0.95) == want, (k, n)
    # the cases the module docstring promises: 0/8 stops below, 8/8 does not stop, 16/16 stops above
    assert S.band_decision(0, 8, BAND, 0.95) == "below"
    assert S.band_decision(8, 8, BAND, 0.95) is None and S.band_decision(16, 16, BAND, 0.95) == "above"
    assert S.band_decision(0, 4, BAND, 0.95) is None  # 0.6^5 = 0.078 > 0.05


def test_band_decision_agrees_with_point_estimate() -> None:
    """A strong prior can never stop a question on the side its own answers contradict."""
    strong_low = (1.0, 40.0)  # last round: never solved
    assert S.band_decision(3, 4, BAND, 0.95, strong_low) is None  # 3/4 = 0.75 is inside: no 'below' stop
    assert S.band_decision(0, 4, BAND, 0.95, strong_low) == "below"


def simulate(p: float, schedule: list[int], confidence: float, reps: int, seed: int) -> tuple[float, float, float]:
    rng = random.Random(seed)
    truth = S.true_side(p, BAND)
    early = wrong = used = 0
    for _ in range(reps):
        k = n = 0
        verdict = None
        for j, cap in enumerate(schedule):
            k += sum(rng.random() < p for _ in range(cap - n))
            n = cap
            last = j == len(schedule) - 1
            verdict = S.point_side(k, n, BAND) if last else S.band_decision(k, n, BAND, confidence)
            if verdict is not None:
                early += (not last) and verdict != truth
                break
        wrong += verdict != truth
        used += n
    return early / reps, wrong / reps, used / reps


@pytest.mark.parametrize("p", [0.0, 0.1, 0.4, 0.75, 0.8, 0.95, 1.0])
def test_staged_outcome_matches_simulation(p: float) -> None:
    schedule, reps = [4, 8, 16, 32], 4000
    exact = S.staged_outcome(p, schedule, BAND, 0.95)
    early, wrong, used = simulate(p, schedule, 0.95, reps, seed=int(p * 100))
    tol = 4 * math.sqrt(0.25 / reps)
    assert exact.early_error == pytest.approx(early, abs=tol)
    assert exact.error == pytest.approx(wrong, abs=tol)
    assert exact.expected_samples == pytest.approx(used, abs=0.5)


def test_stated_error_rates() -> None:
    """The figures docs/difficulty.md states for the defaults (uniform prior, δ = 0.05, 4/8/16/32)."""
    sched = [4, 8, 16, 32]
    grid = [i / 100 for i in range(101)]
    early = {p: S.staged_outcome(p, sched, BAND, 0.95).early_error for p in grid}
    assert 0.07 < max(early.values()) < 0.073 and max(early, key=early.get) == 0.4
    assert max(e for p, e in early.items() if 0.45 <= p <= 0.8) < 0.033
    assert all(e < 1e-6 for p, e in early.items() if p <= 0.3 or p >= 0.85)
    # total error: never more than 0.01 above the fixed N = 32 estimator's, at any p
    assert all(S.staged_outcome(p, sched, BAND, 0.95).error <= S.fixed_error(p, 32, BAND) + 0.01 for p in grid)
    assert S.staged_outcome(0.0, sched, BAND, 0.95).expected_samples == 8
    assert S.staged_outcome(1.0, sched, BAND, 0.95).expected_samples == 16


def test_estimate_difficulty_adaptive_stops_decided_questions() -> None:
    script = {"zero": [box("2")], "one": [box("1")], "mid": [box("1"), box("2")], "edge": [box("1")] * 3 + [box("2")]}
    tasks = [Task(q, q, "1") for q in script]
    seq = Sequential(stages=[4, 8, 16], confidence=0.95)
    s = FakeSampler(script)
    recs = C.estimate_difficulty_adaptive(
        s, FakePrompter(), tasks, 32, SamplingParams(seed=3), G, BAND, seq, batch_prompts=64
    )
    by = {r.task_id: r for r in recs}
    assert (by["zero"].n, by["zero"].correct, by["zero"].decision) == (8, 0, "below")
    assert (by["one"].n, by["one"].correct, by["one"].decision) == (16, 16, "above")
    assert (by["mid"].n, by["mid"].correct, by["mid"].decision) == (32, 16, "cap")  # 0.5: inside, needs the cap
    assert by["edge"].n == 32 and by["edge"].pass_rate == 0.75 and by["edge"].decision == "cap"
    assert len(by["mid"].answers) == 32 and by["zero"].difficulty == 100.0
    # one batched call per stage over the open questions, stage j seeded seed + j·stride
    st = C.sampling.STAGE_SEED_STRIDE
    assert s.calls == [(4, 4, 3), (4, 4, 3 + st), (3, 8, 3 + 2 * st), (2, 16, 3 + 3 * st)]
    assert sum(r.n for r in recs) == 8 + 16 + 32 + 32 < 4 * 32
    # decided questions are classified as their verdict says; anchors still come from k / n
    assert [r.task_id for r in C.mine_anchors(recs, BAND)] == ["mid", "edge"]
    assert C.PassRecord.from_dict(by["zero"].to_dict()) == by["zero"]


def test_estimate_difficulty_adaptive_carry_prior() -> None:
    script = {"zero": [box("2")], "one": [box("1")]}
    tasks = [Task(q, q, "1") for q in script]
    seq = Sequential(stages=[4, 8, 16], confidence=0.95)
    prev = {"zero": C.PassRecord.from_counts(tasks[0], 0, 32), "one": C.PassRecord.from_counts(tasks[1], 32, 32)}
    priors = [C.carry_prior(prev[t.id], seq, 0.5) for t in tasks]
    assert priors == [(1.0, 17.0), (17.0, 1.0)]
    recs = C.estimate_difficulty_adaptive(
        FakeSampler(script), FakePrompter(), tasks, 32, SamplingParams(seed=0), G, BAND, seq, priors=priors
    )
    assert [r.n for r in recs] == [4, 4]  # last round's extremes are checked with one stage
    assert C.carry_prior(None, seq, 0.5) == (1.0, 1.0)
    with pytest.raises(ConfigError):
        C.carry_prior(prev["zero"], seq, -1.0)


def test_fixed_record_has_no_decision_field() -> None:
    rec = C.estimate_difficulty(
        FakeSampler({"q": [box("1")]}), FakePrompter(), [Task("t", "q", "1")], 4, SamplingParams(seed=1), G
    )[0]
    assert "decision" not in rec.to_dict() and rec.n == 4


def test_vote_decision_rules() -> None:
    # unanimous: p1 = 1 is above the band; 8/8 is not yet sure (1 - 0.8^9 < 0.95), 16/16 is
    assert S.vote_decision([8], 8, BAND, 1.6, "absolute", 0.95) is None
    assert S.vote_decision([16], 16, BAND, 1.6, "absolute", 0.95) == "fail"
    # a 4/4 tie between two answers fails the ratio test p1 >= 1.6 p2 only when sure
    assert S.vote_decision([2, 2], 4, BAND, 1.6, "dual", 0.95) is None
    assert S.vote_decision([8, 8], 16, BAND, 1.6, "dual", 0.95) is None  # r = 0.5 vs t = 0.615: not sure yet
    # decided by the ratio posterior alone (the band posterior is undecided in both cases, so the
    # absolute filter waits): r = m1 / (m1 + m2) against t = 1.6 / 2.6 = 0.615
    assert S.vote_decision([30, 30], 60, BAND, 1.6, "absolute", 0.95) is None  # P(q1 < 0.4) = 0.057
    assert S.vote_decision([30, 30], 60, BAND, 1.6, "dual", 0.95) == "fail"  # P(r < t) = 0.967
    assert S.vote_decision([24, 24], 48, BAND, 1.6, "dual", 0.95) == "fail"  # P(r < t) = 0.9501: just sure
    assert S.vote_decision([20, 20], 40, BAND, 1.6, "dual", 0.95) is None  # P(r < t) = 0.934: not yet
    # a pass needs both posteriors: the band is sure (inside 0.987) but r = 0.625 sits on t
    assert S.vote_decision([20, 12], 32, BAND, 1.6, "absolute", 0.95) == "pass"
    assert S.vote_decision([20, 12], 32, BAND, 1.6, "dual", 0.95) is None
    assert S.vote_decision([20, 4], 32, BAND, 1.6, "dual", 0.95) == "pass"  # r = 0.83: sure above t
    # nothing to decide without a filter
    assert S.vote_decision([16], 16, BAND, 1.6, "none", 0.95) is None


def test_label_questions_adaptive_uses_fewer_answers() -> None:
    script = {"easy": [box("7")], "split": [box("1"), box("1"), box("2"), box("3")]}
    voting = Voting(
        samples=32, filter="absolute", band=BAND, estimator="adaptive", sequential=Sequential(stages=[4, 8, 16])
    )
    s = FakeSampler(script)
    votes = C.label_questions_adaptive(s, FakePrompter(), list(script), voting, SamplingParams(seed=5), G)
    assert votes[0].n == 16 and votes[0].p1 == 1.0 and votes[0].label == "7"  # fails the band once sure
    assert votes[1].n == 32 and votes[1].p1 == 0.5  # inside the band: drawn to the cap (cannot pass early)
    fixed = C.label_questions(FakeSampler(script), FakePrompter(), list(script), 32, SamplingParams(seed=5), G)
    assert [(v.label, v.p1) for v in fixed] == [("7", 1.0), ("1", 0.5)]
    assert sum(v.n for v in votes) < sum(v.n for v in fixed)


def test_stages_must_lie_below_the_cap() -> None:
    with pytest.raises(ValidationError):
        Sequential(stages=[8, 4])
    with pytest.raises(ValidationError):
        Voting(samples=8, estimator="adaptive", sequential=Sequential(stages=[4, 8]))
    Voting(samples=8, sequential=Sequential(stages=[4, 8]))  # fixed: the stages are not used
    with pytest.raises(ValidationError):
        D2EvoConfig.model_validate({"difficulty": {"estimator": "adaptive", "samples": 16}})
    assert D2EvoConfig().difficulty.estimator == "fixed" and D2EvoConfig().buffer.voting.estimator == "fixed"


def test_propose_questions_adaptive_vote_counts_drawn_answers() -> None:
    """DiagEvo pool construction with the adaptive vote: a unanimous question stops once it surely
    fails the band, a split one is drawn to the cap; rollouts count the answers actually drawn."""
    script = {
        "w0": ["<question>easy</question>"],
        "w1": ["<question>split</question>"],
        "easy": [box("3")],
        "split": [box("1"), box("1"), box("2"), box("4")],
    }
    voting = Voting(
        samples=32,
        filter="dual",
        band=Band(low=0.3, high=0.8),
        tau=1.6,
        estimator="adaptive",
        sequential=Sequential(stages=[4, 8, 16]),
    )
    pool = C.propose_questions(
        FakeSampler(script),
        ["w0", "w1"],
        [{}, {}],
        prompter=FakePrompter(),
        solver=FakeSampler(script),
        voting=voting,
        grader=G,
        write_params=SamplingParams(seed=1),
        vote_params=SamplingParams(seed=2),
        batch_prompts=64,
        id_prefix="g-",
    )
    assert [v.n for v in pool.votes] == [16, 32]
    assert [c.status for c in pool.candidates] == ["filtered", "kept"]  # split: p1 = 0.5 >= 1.6 x 0.25
    assert pool.rollouts == 2 + 16 + 32
