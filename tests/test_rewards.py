"""Tests for coevolve.rewards: formulas at band edges, format rule, BLEU + clustering against a
slow from-the-definition reference (and sklearn when installed)."""

from __future__ import annotations

import doctest
import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest

import coevolve.rewards as R
from coevolve.errors import CoevolveError, ConfigError


def test_doctests() -> None:
    res = doctest.testmod(R)
    assert res.attempted > 5 and res.failed == 0


# ---------------------------------------------------------------- format / solver


@pytest.mark.parametrize(
    "text,ok",
    [
        ("<think>7+8=15 3+5+1=9</think>\\boxed{95}", True),
        ("<think></think>\\boxed{95}", True),
        ("<think>a</think> so \\boxed{\\frac{1}{2}} done", True),
        ("\\boxed{95}", False),  # no think
        ("<think>a\\boxed{95}", False),  # unclosed think
        ("\\boxed{95}<think>a</think>", False),  # box before think
        ("<think>a</think>\\boxed{95", False),  # unbalanced
        ("<think>a</think>\\boxed{ }", False),  # empty box
        ("<think>a</think><think>b</think>\\boxed{1}", False),  # two think blocks
        ("</think><think>\\boxed{1}", False),  # reversed tags
    ],
)
def test_format_ok(text: str, ok: bool) -> None:
    assert R.format_ok(text) is ok


def test_solver_rewards_alpha_mix() -> None:
    comps = ["<think>x</think>\\boxed{5}", "\\boxed{5}", "<think>x</think>\\boxed{6}", "<think>x</think>\\boxed{5}"]
    r, b = R.solver_rewards(comps, [True, True, False, False], alpha=0.9)
    assert r == pytest.approx([1.0, 0.9, 0.1, 0.1])
    assert b["acc"] == [1.0, 1.0, 0.0, 0.0] and b["format"] == [1.0, 0.0, 1.0, 1.0]
    assert b["mean"] == pytest.approx(sum(r) / 4)
    r1, _ = R.solver_rewards(comps, [True, True, False, True], alpha=1.0)
    assert r1 == [1.0, 1.0, 0.0, 1.0]
    # the function's own default is the papers' α = 0.9 (the config's default, asserted in test_config)
    assert R.solver_rewards(comps, [True, True, False, False])[0] == pytest.approx([1.0, 0.9, 0.1, 0.1])
    with pytest.raises(ConfigError):
        R.solver_rewards(comps, [True] * 4, alpha=1.5)
    with pytest.raises(CoevolveError):
        R.solver_rewards(comps, [True] * 3)


def test_signed_match() -> None:
    r, b = R.signed_match_rewards([True, False])
    assert r == [1.0, -1.0] and b["mean"] == 0.0


# ---------------------------------------------------------------- plateau / questioner


def test_plateau_band_edges_and_decay() -> None:
    assert R.plateau(0.4) == 1.0 and R.plateau(0.8) == 1.0 and R.plateau(0.6) == 1.0
    assert R.plateau(2 / 5) == 1.0 and R.plateau(4 / 5) == 1.0
    assert R.plateau(0.0) == 0.0 and R.plateau(1.0) == 0.0
    assert R.plateau(0.2) == pytest.approx(0.25)  # (0.2/0.4)^2
    assert R.plateau(0.9) == pytest.approx(0.25)  # (0.1/0.2)^2
    assert R.plateau(0.3, a=1.0) == pytest.approx(0.75)
    assert R.plateau(0.3, a=3.0) == pytest.approx(0.75**3)
    # continuity at both edges and monotone outside
    assert R.plateau(0.4 - 1e-9) == pytest.approx(1.0, abs=1e-6)
    assert R.plateau(0.8 + 1e-9) == pytest.approx(1.0, abs=1e-6)
    xs = np.linspace(0, 0.4, 20)
    assert all(R.plateau(a) <= R.plateau(b) for a, b in zip(xs, xs[1:]))
    xs = np.linspace(0.8, 1.0, 20)
    assert all(R.plateau(a) >= R.plateau(b) for a, b in zip(xs, xs[1:]))


def test_plateau_rejects_bad_params() -> None:
    with pytest.raises(ConfigError):
        R.plateau(0.5, tau_l=0.9, tau_u=0.8)
    with pytest.raises(ConfigError):
        R.plateau(0.5, a=0.5)
    with pytest.raises(CoevolveError):
        R.plateau(1.2)
    with pytest.raises(CoevolveError):
        R.plateau(float("nan"))


def test_questioner_rewards_format_gate() -> None:
    r, b = R.questioner_rewards([True, False, True, True], [0.8, 0.5, 1.0, 0.35])
    assert r == pytest.approx([1.0, 0.0, 0.0, (0.35 / 0.4) ** 2])
    assert b["format"] == [1.0, 0.0, 1.0, 1.0]
    assert b["in_band"] == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(CoevolveError):
        R.questioner_rewards([True], [None])
    with pytest.raises(CoevolveError):
        R.questioner_rewards([True, True], [0.5])


def test_uncertainty() -> None:
    assert R.uncertainty(0.5) == 0.5
    assert R.uncertainty(0.3) == pytest.approx(0.3)
    assert R.uncertainty(0.7) == pytest.approx(0.3)
    assert R.uncertainty(1.0) == 0.0
    for p in np.linspace(0, 1, 11):
        assert R.uncertainty(p) == pytest.approx(0.5 * (1 - abs(2 * p - 1)))


# ---------------------------------------------------------------- BLEU + clustering vs slow reference


def _slow_bleu(ref: list[str], hyp: list[str]) -> float:
    """BLEU written directly from the nltk definition (uniform 4-gram weights, method1 eps 0.1)."""
    if not hyp:
        return 0.0
    ps = []
    for n in range(1, 5):
        hg = [tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1)]
        rg = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
        used: Counter = Counter()
        match = 0
        for g in hg:
            if used[g] < rg[g]:
                used[g] += 1
                match += 1
        if n == 1 and match == 0:
            return 0.0
        den = max(1, len(hg))
        ps.append((0.1 / den) if match == 0 else match / den)
    bp = 1.0 if len(hyp) > len(ref) else math.exp(1 - len(ref) / len(hyp))
    return bp * math.exp(sum(0.25 * math.log(p) for p in ps))


def _slow_clusters(dist: np.ndarray, thr: float) -> list[frozenset[int]]:
    """Average linkage recomputed from member lists at every step (no Lance-Williams)."""
    clusters = [[i] for i in range(len(dist))]
    while len(clusters) > 1:
        best = None
        for a, b in itertools.combinations(range(len(clusters)), 2):
            d = np.mean([dist[i, j] for i in clusters[a] for j in clusters[b]])
            if best is None or d < best[0]:
                best = (d, a, b)
        assert best is not None
        if not best[0] < thr:
            break
        _, a, b = best
        clusters[a] = clusters[a] + clusters[b]
        del clusters[b]
    return [frozenset(c) for c in clusters]


def _partition(labels: list[int]) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(lab, set()).add(i)
    return {frozenset(g) for g in groups.values()}


def _random_questions(rng: random.Random, k: int) -> list[str]:
    vocab = "what is the sum of two and three primes less than ten find x if".split()
    base = [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 10))) for _ in range(max(2, k // 4))]
    out = []
    for _ in range(k):
        words = rng.choice(base).split()
        for _ in range(rng.randint(0, 3)):  # small edits -> near duplicates
            words[rng.randrange(len(words))] = rng.choice(vocab)
        out.append(" ".join(words))
    return out


def test_bleu_matches_slow_reference() -> None:
    rng = random.Random(0)
    qs = _random_questions(rng, 30) + ["", "a", "a b"]
    for a, b in itertools.product(qs, repeat=2):
        assert R.sentence_bleu(a.split(), b.split()) == pytest.approx(_slow_bleu(a.split(), b.split()), abs=1e-12)
    assert R.sentence_bleu([], []) == 0.0


def test_bleu_known_value() -> None:
    # hyp shorter than ref: brevity penalty exp(1 - 5/4); p1 = 4/4, p2 = 3/3, p3 = 2/2, p4 = 1/1
    assert R.sentence_bleu("a b c d e".split(), "a b c d".split()) == pytest.approx(math.exp(1 - 5 / 4))
    # no 4-gram match: method1 gives 0.1 / 1
    v = R.sentence_bleu("a b c x".split(), "a b c d".split())
    assert v == pytest.approx(math.exp(0.25 * (math.log(3 / 4) + math.log(2 / 3) + math.log(1 / 2) + math.log(0.1))))


def test_distance_matrix_uses_rzero_orientation() -> None:
    qs = ["a b c d e f", "a b c"]
    d = R.bleu_distance_matrix(qs)
    # i=0 is the hypothesis, j=1 the reference: hyp longer -> BP=1, p1=3/6
    assert d[0, 1] == d[1, 0] == pytest.approx(1 - R.sentence_bleu("a b c".split(), "a b c d e f".split()))
    assert d[0, 0] == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_clustering_matches_slow_reference(seed: int) -> None:
    rng = random.Random(seed)
    qs = _random_questions(rng, 24)
    dist = R.bleu_distance_matrix(qs)
    fast = _partition(R.average_linkage_clusters(dist, 0.5))
    slow = set(_slow_clusters(dist, 0.5))
    assert fast == slow
    assert len(fast) < len(qs)  # the generator makes near duplicates: the test is not vacuous


@pytest.mark.parametrize("seed", range(4))
def test_clustering_matches_sklearn(seed: int) -> None:
    sk = pytest.importorskip("sklearn.cluster")
    rng = random.Random(100 + seed)
    qs = _random_questions(rng, 40)
    dist = R.bleu_distance_matrix(qs)
    labels = sk.AgglomerativeClustering(
        n_clusters=None, metric="precomputed", linkage="average", distance_threshold=0.5
    ).fit_predict(dist)
    assert _partition(R.average_linkage_clusters(dist, 0.5)) == _partition(list(labels))


def test_repetition_penalty_shares() -> None:
    qs = ["find the sum of two primes", "find the sum of two primes", "find the sum of two primes", "what is x"]
    assert R.repetition_penalty(qs) == pytest.approx([0.75, 0.75, 0.75, 0.25])
    assert R.repetition_penalty([]) == []
    # char-level: whitespace sees '12+34=' and '12+35=' as different single tokens
    toy = ["12+34=", "12+35=", "987-6="]
    assert R.repetition_penalty(toy, "whitespace") == pytest.approx([1 / 3] * 3)
    char = R.repetition_penalty(toy, "char")
    assert char[0] == char[1] == pytest.approx(2 / 3) and char[2] == pytest.approx(1 / 3)
    with pytest.raises(ConfigError):
        R.repetition_penalty(toy, "bpe")  # type: ignore[arg-type]


def test_rzero_rewards_as_coded() -> None:
    qs = ["find the sum of two primes", "find the sum of two primes", "what is x", None]
    r, b = R.rzero_rewards([True, True, True, False], [0.5, 0.5, 1.0, None], qs)
    assert b["repetition"] == pytest.approx([0.5, 0.5, 0.25, 0.25])
    assert r == pytest.approx([0.0, 0.0, -0.25, -1.25])  # no clamp at 0
    with pytest.raises(CoevolveError):
        R.rzero_rewards([True], [0.5, 0.5], ["a"])
