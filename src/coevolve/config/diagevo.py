"""Config of the ``diagevo`` recipe: DiagEvo, diagnosis-guided self-evolution with a
hierarchical error memory. Label-free: no labelled data is used in training.

Ablation switches of the paper (Qwen3-8B math avg, full 72.3), each one field, also reachable
by a flat alias:

| paper ablation                        | field                                   | flat alias |
|---------------------------------------|-----------------------------------------|------------|
| frozen challenger (-3.8)              | ``challenger.frozen=true``              | ``challenger_frozen`` |
| pure exploration (69.5)               | ``memory.schedule=explore_only``        | ``schedule`` |
| pure targeted (70.1)                  | ``memory.schedule=targeted_only``       | ``schedule`` |
| no filter (69.4) / absolute only (70.9)| ``pool.voting.filter=none|absolute``   | ``filter`` |
| random pairing (-1.0 vs same node)    | ``memory.stitching=random_pair`` (``off``: none) | ``stitching`` |
| diagnosis model (paper: frozen Qwen3-4B-Instruct-2507) | ``diagnoser.model_path``; ``diagnoser.self_diagnosis=true`` (deviation); ``diagnoser.kind=llm|trace`` | ``diagnoser`` |
| R-Zero-style baseline (no memory)     | ``--preset rzero`` (``memory.enabled=false``, rzero reward, absolute filter; ``real/rzero`` on a real model) | |
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from coevolve.config.sections import RecipeConfig
from coevolve.errors import CoevolveError
from coevolve.memory.maintain import MemoryConfig
from coevolve.models import resolve_model_path
from coevolve.schema import Band, GRPOPhase, Probe, Strict, Voting, WriterReward


class ChallengerSection(GRPOPhase):
    """Stage 1: challenger generation and GRPO update against the frozen solver."""

    frozen: bool = Field(False, description="Ablation 'frozen challenger': never update the challenger (paper: -3.8).")
    reward: WriterReward = Field(
        default_factory=WriterReward,
        description="Difficulty reward on the frozen solver's "
        "p1: plateau (our default, as D²Evo) or R-Zero's (the paper builds on R-Zero).",
    )


class PoolSection(Strict):
    """Stage 2: candidate pool, pseudo-labels by vote, dual-confidence filter."""

    size: int = Field(512, ge=1, description="Challenger prompts written for the candidate pool (one question each).")
    voting: Voting = Field(
        default_factory=lambda: Voting(samples=8, filter="dual", band=Band(low=0.3, high=0.8), tau=1.6),
        description="N construction responses per candidate; dual filter p_low <= p1 <= p_high (our default 0.3 / 0.8, "
        "R-Zero's band) and p1 >= τ·p2 (paper: τ = 1.6).",
    )


class DiagnoserSection(Strict):
    """Stage 4's diagnosis model. The paper's is a frozen instruct model (Qwen3-Instruct-2507, 4B by
    default; 4B to 235B compared, with little difference between those instruct diagnosers), not
    the policy under training: a real-model run names it (``model_path``), or chooses
    ``self_diagnosis=true`` as a stated deviation (preflight refuses neither set)."""

    kind: Literal["auto", "trace", "llm"] = Field(
        "auto",
        description="'trace' (toy rule-based trace diagnosis), 'llm' (prompted model), 'auto' = the world's "
        "default (trace in the toy world, llm otherwise).",
    )
    model_path: str | None = Field(
        None,
        description="HF folder, built-in name (smollm2) or cached Hub id of the "
        "separate, frozen diagnosis model (llm; paper: Qwen3-4B-Instruct-2507), served by the "
        "run's engine like every frozen model. None = the current solver (self-diagnosis).",
    )
    self_diagnosis: bool = Field(
        False,
        description="Deviation (ours): the solver under training diagnoses its own failures instead of a frozen "
        "instruct model; diagnoser.model_path is then not used. A real-model run needs model_path or this set true.",
    )

    @field_validator("model_path", mode="after")
    @classmethod
    def _resolve(cls, v: str | None) -> str | None:
        """A folder, built-in name or cached Hub id resolves now (as ``ModelPath``); a Hub id not in
        the local cache stays as written, so the real preset's named diagnoser does not stop
        ``coevolve config`` / ``plan`` on a machine without it: preflight refuses the run instead,
        saying how to get it or what to set."""
        try:
            return resolve_model_path(v)
        except CoevolveError:
            return v

    max_new_tokens: int = Field(256, ge=1, description="Diagnosis completion cap (toy model: 64 is plenty).")
    temperature: float = Field(0.0, ge=0, description="Diagnosis sampling temperature (0 = greedy).")
    max_field_chars: int = Field(
        12_000,
        ge=200,
        description="Each model-written text put into a diagnosis prompt (question, label, failed and "
        "successful solution) is cut to this many characters, its start and end kept: the prompt stays bounded "
        "(and inside the diagnosis model's context) however long an output is.",
    )


class DiagEvoConfig(RecipeConfig):
    ALIASES = {
        "challenger_frozen": "challenger.frozen",
        "schedule": "memory.schedule",
        "filter": "pool.voting.filter",
        "stitching": "memory.stitching",
        "diagnoser": "diagnoser.kind",
    }

    recipe: Literal["diagevo"] = "diagevo"
    rounds: int = Field(5, ge=1, description="Self-evolution rounds t (paper: best at round 5).")
    challenger: ChallengerSection = Field(
        default_factory=lambda: ChallengerSection(
            steps=5, prompts_per_step=32, group_size=4, max_new_tokens=24, temperature=1.0
        ),
        description="Challenger GRPO (toy: 5 steps x 32 memory plans x 4 questions; toy questions are < 20 chars).",
    )
    pool: PoolSection = Field(default_factory=PoolSection)
    solver: GRPOPhase = Field(
        default_factory=lambda: GRPOPhase(steps=40, prompts_per_step=16, group_size=8),
        description="Stage 3: solver GRPO on the kept questions, G fresh responses, reward +1 / -1 for matching ŷ.",
    )
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    diagnoser: DiagnoserSection = Field(default_factory=DiagnoserSection)
    probe: Probe = Field(default_factory=Probe, description="Round signals on a fixed probe set (docs/stopping.md).")

    def diagnosis_model_path(self) -> str | None:
        """The frozen diagnosis model's folder, or None when no model is loaded for diagnosis: the
        solver diagnoses (self-diagnosis, or no model named), the trace diagnoser does, or there is
        no memory (the R-Zero-style baseline). The one reading of ``diagnoser`` for the recipe,
        preflight and the plan."""
        d = self.diagnoser
        return None if d.self_diagnosis or d.kind == "trace" or not self.memory.enabled else d.model_path
