"""Config of the ``diagevo`` recipe: DiagEvo, diagnosis-guided self-evolution with a
hierarchical error memory (METHODS §2). Label-free: no labelled data is used in training.

Ablation switches of the paper (Qwen3-8B math avg, full 72.3), each one field:

| paper ablation                        | field                                   |
|---------------------------------------|-----------------------------------------|
| frozen challenger (-3.8)              | ``challenger.frozen=true``              |
| pure exploration (69.5)               | ``memory.schedule=explore_only``        |
| pure targeted (70.1)                  | ``memory.schedule=targeted_only``       |
| no filter (69.4) / absolute only (70.9)| ``pool.filter=none`` / ``pool.filter=absolute`` |
| random pairing (-1.0 vs same node)    | ``memory.stitching=random_pair`` (``off``: no stitching) |
| diagnosis model                       | ``diagnoser.kind=llm|trace``, ``diagnoser.model_path`` |
| R-Zero-style baseline (no memory)     | ``configs/rzero.yaml`` (``memory.enabled=false``, rzero reward, absolute filter) |

The flat names ``challenger_frozen``, ``schedule``, ``filter``, ``stitching`` and ``diagnoser``
(``diagnoser=llm``) are accepted as aliases of these fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from coevolve.config.base import RecipeConfig, Strict


class ChallengerSection(Strict):
    """Stage 1: challenger generation and GRPO update against the frozen solver."""

    frozen: bool = Field(False, description="Ablation 'frozen challenger': never update the challenger (paper: -3.8).")
    steps: int = Field(5, ge=0, description="Challenger GRPO steps per round (prototype questioner: 5).")
    prompts_per_step: int = Field(32, ge=1, description="Challenger prompts (memory plans) per GRPO step (prototype: 32).")
    group_size: int = Field(4, ge=2, description="Questions sampled per challenger prompt, the GRPO group (prototype: 4).")
    solver_samples: int = Field(8, ge=1, description="Frozen-solver answers per generated question to measure p1 for the reward (N_v, our default 8).")
    reward: Literal["plateau", "rzero"] = Field(
        "plateau", description="Difficulty reward: 'plateau' on p1 (our default, D2Evo §1) or 'rzero' (min(p,1-p) minus a BLEU repetition penalty)."
    )
    tau_l: float = Field(0.4, gt=0, lt=1, description="Plateau lower edge τ_l (D2Evo default 0.4).")
    tau_u: float = Field(0.8, gt=0, lt=1, description="Plateau upper edge τ_u (D2Evo default 0.8).")
    a: float = Field(2.0, ge=1, description="Plateau decay exponent a (our default 2).")
    rzero_tokenizer: Literal["auto", "whitespace", "char"] = Field(
        "auto", description="BLEU tokenisation of the R-Zero repetition penalty ('auto': char in the toy world, whitespace otherwise)."
    )
    rzero_threshold: float = Field(0.5, gt=0, le=1, description="R-Zero repetition clustering distance threshold (R-Zero: 0.5).")
    max_new_tokens: int = Field(24, ge=1, description="Challenger completion cap (toy questions are < 20 chars; real models need ~512).")
    temperature: float = Field(1.0, ge=0, description="Challenger sampling temperature.")


class PoolSection(Strict):
    """Stage 2: candidate pool, pseudo-labels by vote, dual-confidence filter."""

    size: int = Field(512, ge=1, description="Challenger prompts written for the candidate pool (one question each; prototype ~500).")
    construction_samples: int = Field(8, ge=1, description="N construction responses per candidate (prototype: 8).")
    filter: Literal["dual", "absolute", "none"] = Field(
        "dual", description="'dual' (paper), 'absolute' (band only, ablation 70.9) or 'none' (ablation 69.4)."
    )
    p_low: float = Field(0.3, ge=0, le=1, description="Absolute filter lower bound p_low on p1 (our default 0.3, R-Zero's band).")
    p_high: float = Field(0.8, ge=0, le=1, description="Absolute filter upper bound p_high on p1 (our default 0.8).")
    tau: float = Field(1.6, ge=0, description="Relative filter: keep when p1 >= tau * p2 (paper: 1.6).")
    drop_heldout: bool = Field(True, description="Toy world: drop candidates that are held-out evaluation questions.")


class SolverSection(Strict):
    """Stage 3: solver GRPO on the kept questions, reward +1 / -1 for agreeing with ŷ."""

    steps: int = Field(40, ge=0, description="Solver GRPO steps per round (prototype: 40).")
    prompts_per_step: int = Field(16, ge=1, description="Kept questions per step (prototype: 16), drawn by shuffled passes.")
    group_size: int = Field(8, ge=2, description="G fresh optimisation responses per question (prototype: 8).")


class MemorySection(Strict):
    """Stage 4 and the scheduling of the next round (METHODS §2)."""

    enabled: bool = Field(
        True, description="Stage 4 on/off. false: no diagnosis, no re-measurement, the memory stays empty (so every "
        "schedule explores freely) - the R-Zero-style baseline (configs/rzero.yaml), where diagnosis would be pure cost."
    )
    schedule: Literal["mixed", "explore_only", "targeted_only"] = Field(
        "mixed", description="'mixed' (ε-scheduled, paper), 'explore_only' (ablation 69.5), 'targeted_only' (ablation 70.1)."
    )
    stitching: Literal["same_node", "random_pair", "off"] = Field(
        "same_node", description="Cross-state stitching: Mastered sibling of the same node (paper), random Mastered cause (ablation, -1.0), or none."
    )
    k: float = Field(1.0, gt=0, description="ε_{t+1} = F_1/(F_1 + F_t/k); the paper finds k insensitive (our default 1).")
    theta_up: float = Field(0.8, gt=0, le=1, description="Promotion: Active -> Mastered when targeted questions reach mean p1 >= θ_up (our default 0.8).")
    min_targeted: int = Field(3, ge=1, description="Targeted candidate questions a cause needs in a round before it can be promoted (our default).")
    promotion_p1: Literal["updated", "construction"] = Field(
        "updated",
        description="Which p1 of the round's targeted candidate questions promotion compares with θ_up: 'updated' (default; "
        "re-measured in the memory phase with the solver AFTER this round's GRPO, pool.construction_samples answers each: "
        "the solver has reached θ_up) or 'construction' (the pool's p1 from the frozen solver BEFORE the update; cheaper).",
    )
    embedder: Literal["minilm", "hash"] = Field(
        "minilm", description="Cause embeddings: all-MiniLM-L6-v2 offline (needs the 'embed' extra) or 'hash' (a char-n-gram hash, for tests only)."
    )
    match_threshold: float = Field(0.85, ge=-1, le=1, description="Cosine for e_new to match a cause in E_known(x).")
    retrieve_k: int = Field(5, ge=1, description="Similar known causes retrieved for duplicate confirmation.")
    dup_threshold: float = Field(0.9, ge=-1, le=1, description="Cosine above which a retrieved cause is a duplicate (MiniLM: distinct toy causes <= 0.79).")
    confirm_duplicates: bool = Field(False, description="Ask the diagnoser model yes/no for candidates above confirm_min_sim (llm diagnoser only).")
    confirm_min_sim: float = Field(0.6, ge=-1, le=1, description="Lowest cosine of a candidate the diagnoser model is asked about.")
    node_threshold: float = Field(0.7, ge=-1, le=1, description="Cosine (skill name vs node name) to file a new cause under an existing node (distinct toy skills <= 0.54).")
    merge_threshold: float = Field(0.85, ge=-1, le=1, description="Round-end merge of skill nodes whose centroids reach this cosine (distinct toy nodes <= 0.61).")
    @field_validator("stitching", mode="before")
    @classmethod
    def _off(cls, v: object) -> object:
        """YAML reads a bare ``off`` as False; ``memory.stitching=off`` must still mean 'off'."""
        return "off" if v is False else v

    max_pairs_per_question: int = Field(1, ge=1, description="(r-, r+) pairs diagnosed per kept question (paper: one).")
    max_diagnoses_per_round: int = Field(64, ge=1, description="Diagnosis budget per round (cost grows linearly with calls).")


class DiagnoserSection(Strict):
    kind: Literal["auto", "trace", "llm"] = Field(
        "auto", description="'trace' (toy rule-based trace diagnosis), 'llm' (prompted model), 'auto' = trace in the toy world, llm otherwise."
    )
    model_path: str | None = Field(None, description="HF folder of a separate diagnosis model (llm); None = the current solver.")
    max_new_tokens: int = Field(256, ge=1, description="Diagnosis completion cap (toy model: 64 is plenty).")
    temperature: float = Field(0.0, ge=0, description="Diagnosis sampling temperature (0 = greedy).")
    template: str | None = Field(
        None, description="Prompt template with {question} {label} {bad} {good}; None = the paper-style default (a short one in the toy world)."
    )


class DiagEvoConfig(RecipeConfig):
    # The issue's / paper's flat ablation names, as aliases of the section fields.
    ALIASES = {
        "challenger_frozen": "challenger.frozen",
        "schedule": "memory.schedule",
        "filter": "pool.filter",
        "stitching": "memory.stitching",
        "diagnoser": "diagnoser.kind",
    }

    recipe: Literal["diagevo"] = "diagevo"
    rounds: int = Field(5, ge=1, description="Self-evolution rounds t (paper: best at round 5).")
    challenger: ChallengerSection = Field(default_factory=ChallengerSection)
    pool: PoolSection = Field(default_factory=PoolSection)
    solver: SolverSection = Field(default_factory=SolverSection)
    memory: MemorySection = Field(default_factory=MemorySection)
    diagnoser: DiagnoserSection = Field(default_factory=DiagnoserSection)

    @model_validator(mode="after")
    def _bands(self) -> "DiagEvoConfig":
        from coevolve.errors import ConfigError

        if not self.pool.p_low <= self.pool.p_high:
            raise ConfigError(f"pool.p_low ({self.pool.p_low}) must be <= pool.p_high ({self.pool.p_high})")
        if not self.challenger.tau_l <= self.challenger.tau_u:
            raise ConfigError(f"challenger.tau_l ({self.challenger.tau_l}) must be <= challenger.tau_u ({self.challenger.tau_u})")
        return self
