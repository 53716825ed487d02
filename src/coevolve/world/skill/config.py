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
