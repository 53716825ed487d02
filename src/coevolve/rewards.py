"""Reward functions for every role (solver, D²Evo questioner, R-Zero / DiagEvo challenger).

All functions are pure: they take already-measured quantities (completions, labels, pass rates,
parse flags) and return rewards, so the recipes decide *what* to sample and this module only
decides *how to score it*. Every batch-level function has the same shape::

    fn(...) -> tuple[list[float], Breakdown]

where ``Breakdown`` maps a component name to its per-item values (same length as the rewards)
or to a batch scalar (``"mean"``). The recipes log the breakdown under their metric namespace.

Why these shapes (D²Evo, arXiv 2605.17037; DiagEvo; R-Zero, Chengsong-Huang/R-Zero @ 5699329):

* solver: ``R = α·acc + (1-α)·fmt`` (D²Evo's form; α = 0.9 is our default, R-Zero ``math.py``'s — D²Evo gives none);
* D²Evo questioner: format gate × plateau ``r_diff(x)`` — flat 1 inside the band
  [τ_l, τ_u] and a polynomial decay of order ``a`` outside it;
* R-Zero challenger: ``min(p̂, 1-p̂) − |C_k|/B`` with BLEU-distance clustering;
* DiagEvo solver: ±1 for agreeing with the pseudo-label.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from coevolve.errors import CoevolveError, ConfigError
from coevolve.schema import in_band

Breakdown = dict[str, "list[float] | float"]
"""Per-component values of a reward batch: lists aligned with the rewards, or batch scalars."""

Tokenizer = Callable[[str], list[str]]
"""``tokenize(text) -> tokens`` used by BLEU."""


class RewardInputError(CoevolveError, ValueError):
    """Reward inputs that do not line up (different lengths, values outside [0, 1])."""


# --------------------------------------------------------------------------------------------
# format


def _boxed_end(text: str, start: int) -> int | None:
    """Index just past the ``}`` closing the ``\\boxed{`` whose ``{`` is at ``start - 1``."""
    depth = 1
    i = start
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def format_ok(text: str) -> bool:
    """True when ``text`` reasons inside ``<think>…</think>`` and then gives a ``\\boxed{}`` answer.

    This is R-Zero's / D²Evo's R_fmt (``<think>.*</think>.*\\boxed{.*}``), made stricter in one
    way: the boxed braces must balance and the box must be non-empty, because an unbalanced
    ``\\boxed{`` is exactly the malformed output the format reward exists to discourage.
    Exactly one ``<think>`` block is allowed so that a model cannot pad reasoning outside it.

    >>> format_ok("<think>7+8=15</think>\\\\boxed{15}")
    True
    >>> format_ok("<think></think>\\\\boxed{95}")
    True
    >>> format_ok("\\\\boxed{15}")
    False
    >>> format_ok("<think>x</think>\\\\boxed{1")
    False
    >>> format_ok("<think>x</think> the answer is \\\\boxed{}")
    False
    """
    if text.count("<think>") != 1 or text.count("</think>") != 1:
        return False
    open_i = text.index("<think>")
    close_i = text.index("</think>")
    if close_i < open_i:
        return False
    tail = text[close_i + len("</think>") :]
    for m in re.finditer(r"\\boxed\{", tail):
        end = _boxed_end(tail, m.end())
        if end is not None and tail[m.end() : end - 1].strip():
            return True
    return False


# --------------------------------------------------------------------------------------------
# solver


def solver_rewards(
    completions: Sequence[str], correct: Sequence[bool], alpha: float = 0.9
) -> tuple[list[float], Breakdown]:
    """``R = α·acc + (1-α)·fmt`` per completion (D²Evo step 4, R-Zero ``math.py``).

    ``correct[i]`` says whether completion i's final answer matches its label (the gold answer
    for anchors, the pseudo-label for generated questions), as graded by the caller
    (``coevolve.answers.Grader.grade_batch``); a question without a label is never correct.

    >>> r, b = solver_rewards(["<think>a</think>\\\\boxed{3}", "\\\\boxed{3}", "<think></think>\\\\boxed{4}"],
    ...                       [True, True, False], alpha=0.9)
    >>> [round(v, 2) for v in r]
    [1.0, 0.9, 0.1]
    >>> b["acc"], b["format"]
    ([1.0, 1.0, 0.0], [1.0, 0.0, 1.0])
    """
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"solver reward: alpha must be in [0, 1], got {alpha}")
    if len(completions) != len(correct):
        raise RewardInputError(f"solver_rewards: {len(completions)} completions but {len(correct)} verdicts")
    acc = [float(bool(c)) for c in correct]
    fmt = [float(format_ok(c)) for c in completions]
    rewards = [alpha * a + (1.0 - alpha) * f for a, f in zip(acc, fmt)]
    return rewards, {
        "acc": acc,
        "format": fmt,
        "mean": _mean(rewards),
        "acc_mean": _mean(acc),
        "format_mean": _mean(fmt),
    }


def signed_match_rewards(matches: Sequence[bool]) -> tuple[list[float], Breakdown]:
    """DiagEvo solver reward: +1 when the answer matches the pseudo-label ŷ(x), else −1.

    The signed form (rather than 1/0) matters only for logging: GRPO's group normalisation makes
    it equivalent to a 0/1 reward, but the paper reports it this way.

    >>> signed_match_rewards([True, False, True])[0]
    [1.0, -1.0, 1.0]
    """
    r = [1.0 if m else -1.0 for m in matches]
    return r, {"match": [float(bool(m)) for m in matches], "mean": _mean(r)}


# --------------------------------------------------------------------------------------------
# D²Evo questioner


def _check_band(tau_l: float, tau_u: float, a: float) -> None:
    if not (0.0 < tau_l <= tau_u < 1.0):
        raise ConfigError(f"plateau reward: need 0 < tau_l <= tau_u < 1, got tau_l={tau_l}, tau_u={tau_u}")
    if a < 1.0:
        raise ConfigError(f"plateau reward: decay exponent a must be >= 1, got {a}")


def plateau(x: float, tau_l: float = 0.4, tau_u: float = 0.8, a: float = 2.0) -> float:
    """D²Evo difficulty reward r_diff(x) (step 2).

    1 on [τ_l, τ_u]; ``(x/τ_l)^a`` below; ``((1-x)/(1-τ_u))^a`` above. Flat inside the band so
    the questioner is not pushed to one "ideal" pass rate, continuous at both edges so GRPO still
    sees a gradient from slightly-too-easy or slightly-too-hard questions.

    >>> plateau(0.4), plateau(0.8), plateau(0.6)
    (1.0, 1.0, 1.0)
    >>> plateau(0.2), plateau(0.0), plateau(1.0)
    (0.25, 0.0, 0.0)
    >>> round(plateau(0.9), 4)
    0.25
    """
    _check_band(tau_l, tau_u, a)
    if not (0.0 <= x <= 1.0) or math.isnan(x):
        raise RewardInputError(f"plateau reward: pass rate x must be in [0, 1], got {x}")
    if x < tau_l:
        return (x / tau_l) ** a
    if x > tau_u:
        return ((1.0 - x) / (1.0 - tau_u)) ** a
    return 1.0


def questioner_rewards(
    parsed_ok: Sequence[bool], x: Sequence[float | None], tau_l: float = 0.4, tau_u: float = 0.8, a: float = 2.0
) -> tuple[list[float], Breakdown]:
    """D²Evo questioner reward R_comp = 1[exactly one well-formed <question>] · r_diff(x).

    ``x[i]`` is the solver agreement (pass rate) measured for question i; it is ignored (and may
    be None / NaN) when ``parsed_ok[i]`` is False, because a malformed output never got solved.

    >>> r, b = questioner_rewards([True, True, False], [0.5, 0.2, None])
    >>> r
    [1.0, 0.25, 0.0]
    >>> b["in_band"]
    [1.0, 0.0, 0.0]
    """
    _check_band(tau_l, tau_u, a)
    if len(parsed_ok) != len(x):
        raise RewardInputError(f"questioner_rewards: {len(parsed_ok)} parse flags but {len(x)} pass rates")
    rewards: list[float] = []
    band: list[float] = []
    for ok, xi in zip(parsed_ok, x):
        if not ok:
            rewards.append(0.0)
            band.append(0.0)
            continue
        if xi is None:
            raise RewardInputError("questioner_rewards: a well-formed question has no pass rate")
        rewards.append(plateau(float(xi), tau_l, tau_u, a))
        band.append(float(in_band(float(xi), tau_l, tau_u)))
    fmt = [float(bool(ok)) for ok in parsed_ok]
    return rewards, {"format": fmt, "in_band": band, "mean": _mean(rewards), "format_mean": _mean(fmt)}


# --------------------------------------------------------------------------------------------
# R-Zero challenger


def uncertainty(p: float) -> float:
    """R-Zero's uncertainty reward min(p̂, 1-p̂) (= ½(1 − |2p̂ − 1|)), maximal at p̂ = ½.

    >>> uncertainty(0.5), uncertainty(0.9), uncertainty(0.0)
    (0.5, 0.09999999999999998, 0.0)
    """
    if not (0.0 <= p <= 1.0):
        raise RewardInputError(f"uncertainty: p must be in [0, 1], got {p}")
    return min(p, 1.0 - p)


def whitespace_tokens(text: str) -> list[str]:
    """``str.split()``: R-Zero's BLEU tokenisation (natural-language questions)."""
    return text.split()


def char_tokens(text: str) -> list[str]:
    """Non-space characters: for char-level worlds (``37+58=``) a whole question is one
    whitespace token, so whitespace BLEU would be all-or-nothing."""
    return [c for c in text if not c.isspace()]


def get_tokenizer(name: Literal["whitespace", "char"] | Tokenizer) -> Tokenizer:
    """Resolve a tokeniser by name (config value) or pass a callable through."""
    if callable(name):
        return name
    if name == "whitespace":
        return whitespace_tokens
    if name == "char":
        return char_tokens
    raise ConfigError(f"repetition penalty: unknown tokenizer {name!r} (expected 'whitespace' or 'char')")


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(reference: Sequence[str], hypothesis: Sequence[str], max_n: int = 4, epsilon: float = 0.1) -> float:
    """Sentence BLEU with uniform weights and smoothing method1, as ``nltk`` computes it.

    Equivalent to ``nltk.translate.bleu_score.sentence_bleu([reference], hypothesis,
    smoothing_function=SmoothingFunction().method1)`` (nltk 3.9, R-Zero's pinned version):

    * modified n-gram precision p_n = clipped matches / max(1, hypothesis n-grams);
    * if there is no unigram match at all the score is 0 (nltk returns early);
    * method1 replaces a zero numerator by ε = 0.1 over the *unreduced* denominator;
    * brevity penalty 1 if c > r, 0 if c = 0, else exp(1 - r/c);
    * BLEU = BP · exp(Σ ¼ log p_n).

    >>> sentence_bleu("a b c d".split(), "a b c d".split())
    1.0
    >>> sentence_bleu("a b".split(), "c d".split())
    0.0
    """
    hyp_len, ref_len = len(hypothesis), len(reference)
    nums: list[int] = []
    dens: list[int] = []
    for n in range(1, max_n + 1):
        hyp_counts = _ngrams(hypothesis, n)
        ref_counts = _ngrams(reference, n)
        nums.append(sum(min(c, ref_counts[g]) for g, c in hyp_counts.items()))
        dens.append(max(1, sum(hyp_counts.values())))
    if nums[0] == 0:
        return 0.0
    if hyp_len > ref_len:
        bp = 1.0
    elif hyp_len == 0:
        bp = 0.0
    else:
        bp = math.exp(1.0 - ref_len / hyp_len)
    logs = 0.0
    for num, den in zip(nums, dens):
        p = (num + epsilon) / den if num == 0 else num / den
        logs += (1.0 / max_n) * math.log(p)
    return bp * math.exp(logs)


def bleu_distance_matrix(texts: Sequence[str], tokenizer: Tokenizer = whitespace_tokens) -> np.ndarray:
    """``D[i, j] = 1 − BLEU`` exactly as R-Zero fills it: for i < j the score is
    ``BLEU(reference=texts[j], hypothesis=texts[i])`` mirrored to ``D[j, i]``; diagonal 0.

    BLEU is asymmetric (brevity penalty), so the (i < j → hyp = i) convention is part of the
    equivalence. Returns a (B, B) float64 matrix.
    """
    toks = [tokenizer(t) for t in texts]
    b = len(texts)
    dist = np.zeros((b, b), dtype=np.float64)  # (B, B)
    for i in range(b):
        for j in range(i + 1, b):
            d = 1.0 - sentence_bleu(toks[j], toks[i])
            dist[i, j] = dist[j, i] = d
    return dist


def average_linkage_clusters(dist: np.ndarray, threshold: float = 0.5) -> list[int]:
    """Agglomerative clustering, average linkage, stop when the closest pair is ≥ ``threshold``.

    Same partition as ``sklearn.cluster.AgglomerativeClustering(n_clusters=None,
    metric="precomputed", linkage="average", distance_threshold=threshold)`` (sklearn merges while
    the linkage distance is strictly below the threshold; average linkage has no inversions, so
    the cut partition does not depend on the merge order of ties). Cluster-distance updates use the
    Lance-Williams rule d(k, i∪j) = (n_i·d(k,i) + n_j·d(k,j)) / (n_i + n_j). O(B³) in numpy,
    fine for the few hundred questions per step that a recipe scores.

    Returns a cluster label per row, numbered by first appearance.
    """
    b = dist.shape[0]
    if dist.shape != (b, b):
        raise RewardInputError(f"distance matrix must be square, got shape {dist.shape}")
    if b == 0:
        return []
    d = dist.astype(np.float64).copy()  # (B, B) cluster-to-cluster distances, inactive = inf
    np.fill_diagonal(d, np.inf)
    size = np.ones(b, dtype=np.int64)  # (B,)
    owner = list(range(b))  # row -> representative cluster index
    active = np.ones(b, dtype=bool)
    while active.sum() > 1:
        flat = int(np.argmin(d))
        i, j = divmod(flat, b)
        if not d[i, j] < threshold:
            break
        if j < i:
            i, j = j, i
        merged = (size[i] * d[i] + size[j] * d[j]) / (size[i] + size[j])  # (B,)
        d[i, :] = merged
        d[:, i] = merged
        d[i, i] = np.inf
        d[j, :] = np.inf
        d[:, j] = np.inf
        size[i] += size[j]
        active[j] = False
        owner = [i if o == j else o for o in owner]
    relabel: dict[int, int] = {}
    return [relabel.setdefault(o, len(relabel)) for o in owner]


def repetition_penalty(
    questions: Sequence[str | None],
    tokenizer: Literal["whitespace", "char"] | Tokenizer = "whitespace",
    threshold: float = 0.5,
) -> list[float]:
    """R-Zero's repetition penalty r_rep(x_i) = |C_k(i)| / B (λ = 1).

    Clusters the whole batch by 1 − BLEU (see ``bleu_distance_matrix`` and
    ``average_linkage_clusters``: together they reproduce ``caller_penalty.py``'s nltk +
    sklearn code) and charges each question the share of the batch in its cluster, so a batch of
    near-copies is penalised even when each copy is individually well calibrated. ``None``
    (unparsed) questions enter as ``""`` like in R-Zero. ``tokenizer="char"`` is for char-level
    worlds.

    >>> repetition_penalty(["what is one plus two", "what is one plus two", "name a prime above ten"])
    [0.6666666666666666, 0.6666666666666666, 0.3333333333333333]
    """
    texts = ["" if q is None else q for q in questions]
    if not texts:
        return []
    labels = average_linkage_clusters(bleu_distance_matrix(texts, get_tokenizer(tokenizer)), threshold)
    counts = Counter(labels)
    return [counts[lab] / len(texts) for lab in labels]


def rzero_rewards(
    parsed_ok: Sequence[bool],
    p_hat: Sequence[float | None],
    questions: Sequence[str | None],
    tokenizer: Literal["whitespace", "char"] | Tokenizer = "whitespace",
    threshold: float = 0.5,
) -> tuple[list[float], Breakdown]:
    """R-Zero challenger reward exactly as coded (``caller_penalty.py``), no clamp at 0:

    ``r_i = min(p̂_i, 1-p̂_i) − r_rep(x_i)`` when parsed, else ``−1 − r_rep(x_i)``.

    >>> r, b = rzero_rewards([True, True, False], [0.5, 0.9, None], ["a b c d e", "f g h i j", None])
    >>> [round(v, 4) for v in r]
    [0.1667, -0.2333, -1.3333]
    """
    if not (len(parsed_ok) == len(p_hat) == len(questions)):
        raise RewardInputError(
            f"rzero_rewards: lengths differ (parsed_ok={len(parsed_ok)}, p_hat={len(p_hat)}, questions={len(questions)})"
        )
    rep = repetition_penalty([q if ok else "" for ok, q in zip(parsed_ok, questions)], tokenizer, threshold)
    unc: list[float] = []
    rewards: list[float] = []
    for ok, p, r in zip(parsed_ok, p_hat, rep):
        if ok:
            if p is None:
                raise RewardInputError("rzero_rewards: a parsed question has no p_hat")
            u = uncertainty(float(p))
            unc.append(u)
            rewards.append(u - r)
        else:
            unc.append(0.0)
            rewards.append(-1.0 - r)
    fmt = [float(bool(ok)) for ok in parsed_ok]
    return rewards, {"uncertainty": unc, "repetition": rep, "format": fmt, "mean": _mean(rewards)}


def _mean(v: Sequence[float]) -> float:
    return float(sum(v) / len(v)) if v else 0.0
