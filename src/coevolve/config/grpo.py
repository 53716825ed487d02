"""Config of the ``grpo`` recipe: the papers' "Full Data" baseline (GRPO on labelled data)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coevolve.config.sections import RecipeConfig
from coevolve.schema import SolverPhase


class GRPOConfig(RecipeConfig):
    recipe: Literal["grpo"] = "grpo"
    solver: SolverPhase = Field(
        default_factory=lambda: SolverPhase(steps=80, prompts_per_step=16, group_size=8),
        description="Solver GRPO (toy: 80 steps x 16 prompts x 8 samples).",
    )
