"""The ``data.skill`` config section: the skill world's injected deficits, its base model, its
held-out set and what its labelled draws look like (``data.source=skill``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from coevolve.schema import Strict

SKILL_NAMES = (
    "add",
    "sub",
    "mul",
    "div",
    "rev",
    "max",
    "dsum",
)  # coevolve.world.skill.problems.SKILLS (no torch import here)


class GateThresholds(Strict):
    """The premise gate of a skill base (``coevolve.world.skill.gate``): what a base must measure
    for the self-evolving methods' premise to hold in this world (a majority vote right clearly more
    often than not on the soft deficits, deficits that are the injected ones). Defaults: the 2026-12-02
    science review of the skill study, section 4."""

    soft_greedy_min: float = Field(
        0.85,
        ge=0.0,
        le=1.0,
        description="Greedy accuracy on the soft-deficit stratum at least this (a solver with the injected "
        "rates has the right mode on ~96 % of those items; a base at 0.55 has a coin-flip majority there).",
    )
    soft_sampled_min: float = Field(
        0.6, ge=0.0, le=1.0, description="Sampled accuracy on the soft stratum at least this."
    )
    soft_sampled_max: float = Field(
        0.7,
        ge=0.0,
        le=1.0,
        description="... and at most this (above it the soft deficits are too rare to practise on).",
    )
    bug_rate_tolerance: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Each deficient skill's measured bug rate (taken / exercised steps, sampled traces) within "
        "this of its injected rate.",
    )
    nonbug_error_max: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Each deficient skill's steps (reached on the correct trace) that go wrong otherwise than by "
        "the injected bug: at most this share (such errors are deficits the ground truth does not name).",
    )
    kept_label_min: float = Field(
        0.70,
        ge=0.0,
        le=1.0,
        description="The gate's second half, measured by a run's first round rather than by the build: round-1 "
        "kept pseudo-labels right against the oracle at least this often (D²Evo's buffer, DiagEvo's dual filter; "
        "summary.json skill_world.premise_gate_round1).",
    )


class SkillWorldConfig(Strict):
    deficits: dict[str, float] = Field(
        default_factory=lambda: {"sub": 0.35, "mul": 0.35, "div": 0.7},
        description="Injected bug rate per skill in the base's pretraining traces (skills not named are clean): the "
        "ground truth runs are scored against. Default: two soft deficits (sub, mul at 0.35: the majority stays "
        "right) and one hard one (div at 0.7: the majority is wrong). A new profile builds a new base.",
    )
    base_steps: int = Field(
        1800,
        ge=1,
        description="Pretraining steps of the skill base (one schedule for every length, "
        "coevolve.world.skill.pretrain.lr_factor; the step count is chosen in docs/results/skill_world.md).",
    )
    base_seed: int = Field(0, description="Seed of the skill base's pretraining.")
    gate: Literal["refuse", "warn", "ignore"] = Field(
        "warn",
        description="What the preflight does with a skill base (the built-in one, or model.path with a "
        "skill_build.json) that fails its premise gate (gate_thresholds, judged on the figures its build "
        "measured) or has no gate record: 'refuse' refuses the run with the failed figures named, 'warn' prints "
        "them and runs, 'ignore' skips the check. Ours. Default 'warn' because the repository's default base "
        "(1,800 steps) fails the gate today (soft greedy 0.553, docs/results/skill_study.md): its results say "
        "little about the self-evolving methods; set 'refuse' for a study meant to test them.",
    )
    gate_thresholds: GateThresholds = Field(
        default_factory=GateThresholds, description="The premise gate's figures (GateThresholds)."
    )
    heldout_per_stratum: int = Field(
        100,
        ge=4,
        le=400,
        description="Held-out questions per (focal skill, depth) stratum (a quarter of it at depth "
        "1): 7 skills x 4.25 x this = 2,975 by default. Only the default set is kept out of the base's pretraining.",
    )
    focus: list[str] | None = Field(
        None,
        description="Skills that fresh labelled draws (data.limit unset: the grpo baseline's data) are drawn for, "
        "one focal skill per question, depth 1-5, the other steps clean (the held-out strata); None = every skill "
        "(the held-out mix). The positive control 'targeted' sets the deficient skills here.",
    )
    pool: Literal["ladder", "ushape", "strata"] = Field(
        "ladder",
        description="Distribution of a fixed labelled set (data.limit) and of D²Evo's candidate pool: "
        "'ladder' = 40 % trivial (one clean step), 40 % out of reach (five steps, three or more of them exercising "
        "a deficit), 20 % a difficulty ladder (depth 2-4 with one or two soft deficits, no hard one: the first rung "
        "sits in the band at the base, the second enters it as the solver improves) - the paper's argument for "
        "difficulty-aware anchors; 'ushape' = the same with a middle fifth of depth-2-4 strata of any focal skill "
        "(most of them easy: the band held 16 of 256 questions at the base); 'strata' = the held-out mix.",
    )

    @field_validator("deficits")
    @classmethod
    def _rates(cls, v: dict[str, float]) -> dict[str, float]:
        for s, r in v.items():
            if s not in SKILL_NAMES:
                raise ValueError(f"unknown skill {s!r}; skills: {', '.join(SKILL_NAMES)}")
            if not 0.0 <= float(r) <= 1.0:
                raise ValueError(f"rate of {s!r} is {r}: must be in [0, 1]")
        return v

    @field_validator("focus")
    @classmethod
    def _focus(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            bad = [s for s in v if s not in SKILL_NAMES]
            if bad or not v:
                raise ValueError(f"focus {v}: give one or more of {', '.join(SKILL_NAMES)}")
        return v
