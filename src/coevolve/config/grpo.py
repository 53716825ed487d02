"""Config of the ``grpo`` recipe: the papers' "Full Data" baseline (GRPO on labelled data)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coevolve.config.base import RecipeConfig, Strict


class SolverSection(Strict):
    steps: int = Field(80, ge=1, description="GRPO steps (prototype: 80 steps, 54% -> 72% greedy).")
    prompts_per_step: int = Field(16, ge=1, description="Questions per GRPO step (prototype: 16).")
    group_size: int = Field(8, ge=2, description="Samples per question, G (prototype: 8).")
    alpha: float = Field(0.9, ge=0, le=1, description="Reward = alpha*acc + (1-alpha)*format (R-Zero / D2Evo: 0.9).")


class GRPOConfig(RecipeConfig):
    recipe: Literal["grpo"] = "grpo"
    solver: SolverSection = Field(default_factory=SolverSection)
