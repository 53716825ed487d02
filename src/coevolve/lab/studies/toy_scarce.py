"""The toy_scarce study's claims as data (``docs/results/study.md``): the directions METHODS.md
claims, each judged as a paired comparison by ``coevolve.lab.study.judge_claims``. Between the
method claims and the mechanism claims the study adds one claim per paper ablation of
``VARIANTS`` (``coevolve.lab.study.claims``)."""

from __future__ import annotations

from dataclasses import dataclass


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


METHOD_CLAIMS: tuple[Claim, ...] = (
    Claim("D²Evo beats the R-Zero-style baseline", "d2evo", "rzero", "51.35 vs 46.91 (4B math)"),
    Claim(
        "D²Evo beats GRPO on the same labelled set (the preset's labels: a fraction only where grpo gets more)",
        "d2evo",
        "grpo",
        "51.35 (0.1K labels) vs 49.28 (19K)",
    ),
    Claim("DiagEvo beats the R-Zero-style baseline", "diagevo", "rzero", "72.3 vs 67.8 (8B math)"),
)
"""The three methods' claims against the baselines."""

MECHANISM_CLAIMS: tuple[Claim, ...] = (
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
)
"""DiagEvo's filter, memory and stitching claims (the filter claims on oracle agreement)."""
