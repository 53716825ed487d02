"""The skill-world study's declarations as data (``docs/results/skill_world.md`` declares them
before the runs; ``coevolve.lab.skill_study`` judges them): the labelled-set size, the primary
metric, the frontier strata, the level and the seed counts, and every claim with its stratum,
comparison and family."""

from __future__ import annotations

from dataclasses import dataclass

LABELS = 256
"""L: the labelled set of the skill preset (data.limit of configs/skill/grpo.yaml and d2evo.yaml)."""

PRIMARY_METRIC = "sampled"
"""The declared metric: sampled accuracy (mean over the eval samples at T = 1). Why not greedy:
the soft deficits are bug *rates* below one half, which greedy decoding hides by construction
(the base's greedy answer follows the majority procedure); docs/results/skill_world.md measures
both. Greedy is reported beside every verdict."""

FRONTIER: tuple[str, ...] = ("sub@5", "mul@1", "mul@3", "mul@4", "div@2")
"""The ``skill@depth`` strata just below D²Evo's band at the base: sampled accuracy in [0.15, 0.45)
in the base's evaluation on the preset's 1,190 held-out items (seed 0's eval draw; 170 items),
where a difficulty-aware curriculum should move the frontier. Fixed from that measurement before
any run of the anchors control or of a method (docs/results/skill_world.md)."""

ALPHA = 0.05

CONTROL_SEEDS = 3
"""Seeds per arm of the positive controls (0-2), fixed before the power plan exists."""


@dataclass(frozen=True)
class DeclaredClaim:
    key: str
    text: str
    better: str
    worse: str
    paper: str
    stratum: str
    comparison: str  # "welch" | "paired"
    family: str  # "control" | "paper"
    metric: str = PRIMARY_METRIC
    control: str = ""  # the control whose effect sizes its power (power_plan)


CLAIMS: tuple[DeclaredClaim, ...] = (
    DeclaredClaim(
        "C1",
        "targeted gold practice beats uniform gold practice on the deficient skills",
        "control.targeted",
        "control.uniform",
        "positive control (ours)",
        "deficient",
        "welch",
        "control",
    ),
    DeclaredClaim(
        "C2",
        "in-band gold anchors beat random gold anchors at the frontier",
        "d2evo.no_questioner",
        "control.random_anchors",
        "positive control (ours)",
        "frontier",
        "welch",
        "control",
    ),
    DeclaredClaim(
        "M1",
        "D²Evo beats GRPO on the same L labels",
        "d2evo",
        "grpo",
        "51.35 vs 49.28 (4B math)",
        "all",
        "welch",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "M1b",
        "D²Evo with L labels beats GRPO with 4L",
        "d2evo",
        "grpo.4L",
        "0.1K vs 19K labels: 51.35 vs 49.28",
        "all",
        "welch",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "M1c",
        "D²Evo with L labels beats GRPO with 16L",
        "d2evo",
        "grpo.16L",
        "0.1K vs 19K labels: 51.35 vs 49.28",
        "all",
        "welch",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "M2",
        "D²Evo beats the R-Zero-style baseline",
        "d2evo",
        "rzero",
        "51.35 vs 46.91",
        "all",
        "welch",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "G1",
        "DiagEvo beats the R-Zero-style baseline on the deficient skills",
        "diagevo",
        "rzero",
        "72.3 vs 67.8",
        "deficient",
        "welch",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "B2",
        "memory-guided targeting beats free exploration on the deficient skills",
        "diagevo",
        "diagevo.explore_only",
        "72.3 vs 69.5",
        "deficient",
        "paired",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "A4",
        "band anchors beat random anchors at the frontier",
        "d2evo",
        "d2evo.random_anchors",
        "51.35 vs 49.22",
        "frontier",
        "paired",
        "paper",
        control="C2",
    ),
    DeclaredClaim(
        "A1",
        "the questioner helps at the frontier",
        "d2evo",
        "d2evo.no_questioner",
        "51.35 vs 47.94",
        "frontier",
        "paired",
        "paper",
        control="C2",
    ),
    DeclaredClaim(
        "A3",
        "synthetic questions help",
        "d2evo",
        "d2evo.no_synthesis",
        "51.35 vs 48.71",
        "all",
        "paired",
        "paper",
        control="C2",
    ),
    DeclaredClaim(
        "B3",
        "the ε mix beats targeting only on the deficient skills",
        "diagevo",
        "diagevo.targeted_only",
        "72.3 vs 70.1",
        "deficient",
        "paired",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "B1",
        "training the challenger helps",
        "diagevo",
        "diagevo.frozen_challenger",
        "72.3 vs 68.5",
        "all",
        "paired",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "B4",
        "the dual filter beats no filter",
        "diagevo",
        "diagevo.no_filter",
        "72.3 vs 69.4",
        "all",
        "paired",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "B5",
        "the dual filter beats the absolute filter",
        "diagevo",
        "diagevo.absolute_filter",
        "72.3 vs 70.9",
        "all",
        "paired",
        "paper",
        control="C1",
    ),
    DeclaredClaim(
        "B6",
        "same-node stitching beats random pairs on the deficient skills",
        "diagevo",
        "diagevo.random_pair",
        "+1.0",
        "deficient",
        "paired",
        "paper",
        control="C1",
    ),
    # declared after D²Evo's seed 0 (its kept pseudo-labels were right for 42-48 % of its generated
    # questions) and before any run of d2evo.checked: the paper's pipeline checks every label (GPT-5.2)
    DeclaredClaim(
        "V1",
        "D²Evo with the paper's label check beats GRPO on the same L labels",
        "d2evo.checked",
        "grpo",
        "51.35 vs 49.28 (with GPT-5.2's check)",
        "all",
        "welch",
        "label check",
        control="C1",
    ),
    DeclaredClaim(
        "V2",
        "the label check helps D²Evo",
        "d2evo.checked",
        "d2evo",
        "- (not an ablation of the paper)",
        "all",
        "paired",
        "label check",
        control="C1",
    ),
)
"""Every claim of the skill study, in priority order (controls, then the papers' main comparisons
and the ablations whose mechanism the world hosts)."""
