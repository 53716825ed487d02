"""Config building blocks shared by every layer: the strict base model and the value types that
several recipes use under one name (a pass-rate band, a GRPO phase, a writer reward, a vote).

Why here and not in ``coevolve.config``: library modules (the learner, the memory, the
curriculum) take these sections as their typed arguments, and the recipe configs are built from
them, so they sit below both. One concept, one definition: the band check, for example, exists
only in ``Band``.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from coevolve.errors import CoevolveError
from coevolve.models import resolve_model_path

BAND_TOLERANCE = 1e-9
"""Pass rates are ratios of small integers; 2/5 must count as 0.4 however it was computed."""


def in_band(x: float, low: float, high: float) -> bool:
    """``low <= x <= high`` with ``BAND_TOLERANCE``: the one band test of the project.

    >>> in_band(2 / 5, 0.4, 0.8), in_band(0.81, 0.4, 0.8)
    (True, False)
    """
    return low - BAND_TOLERANCE <= x <= high + BAND_TOLERANCE


VLLM_SHARE = {"coevolve": 0.3, "verl": 0.6}
"""``engine.gpu_memory_utilization`` when unset: coevolve's engines share a GPU with the local
learner's state (TRL's colocate default); verl's rollout engines with verl's sharded FSDP actor."""


def vllm_share(engine: Any, where: str = "coevolve") -> float:
    """The GPU share of a vLLM engine of the run: ``engine.gpu_memory_utilization``, else the
    default of ``where`` ("coevolve" or "verl", ``VLLM_SHARE``)."""
    share = getattr(engine, "gpu_memory_utilization", None)
    return float(share) if share is not None else VLLM_SHARE[where]


def verl_micro_batch(rows: int, world: int, cap: int) -> int | None:
    """verl's ``ppo_micro_batch_size_per_gpu`` for a GRPO step of ``rows`` rollouts over ``world``
    GPUs: the largest divisor of each GPU's share ``rows / world`` that is at most ``cap``
    (``learner.micro_batch_size``), so verl's check that a GPU's mini-batch splits into whole
    micro-batches holds; None when ``rows`` does not divide over the GPUs at all.

    >>> verl_micro_batch(640, 8, 64), verl_micro_batch(640, 7, 64), verl_micro_batch(256, 8, 64)
    (40, None, 32)
    """
    if world < 1 or rows % world:
        return None
    share = rows // world
    return max(d for d in range(1, min(cap, share) + 1) if share % d == 0)


def nearest_dividing(target: int, ok: Any, limit: int) -> list[int]:
    """The values closest to ``target`` (one below, one above, within 1..``limit``) for which
    ``ok(value)`` holds, nearest first: what a refusal offers instead of a value that does not divide.

    >>> nearest_dividing(7, lambda g: 640 % g == 0, 64)
    [8, 5]
    """
    below = next((v for v in range(target - 1, 0, -1) if ok(v)), None)
    above = next((v for v in range(target + 1, limit + 1) if ok(v)), None)
    found = [v for v in (below, above) if v is not None]
    return sorted(found, key=lambda v: (abs(v - target), v))


def _model_path(path: str | None) -> str | None:
    try:
        return resolve_model_path(path)
    except CoevolveError as e:
        raise ValueError(str(e)) from None  # pydantic then names the field and where its value came from


ModelPath = Annotated[str | None, AfterValidator(_model_path)]
"""A Hugging Face model folder, a built-in model name (``smollm2``) that stands for its cache
folder, or a Hub id (``Qwen/Qwen3-4B-Base``) that stands for its snapshot folder in the local
Hugging Face cache (``coevolve.models.resolve_model_path``)."""


def scalar_kinds(annotation: Any) -> set[Any]:
    """The plain types a field annotation admits at its top level (``int | None`` -> {int,
    NoneType}; a ``Literal`` counts as ``Literal``; a list as ``list``)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(scalar_kinds(a) for a in typing.get_args(annotation)))
    if origin is typing.Annotated:
        return scalar_kinds(typing.get_args(annotation)[0])
    if origin is Literal:
        return {Literal}
    return {origin or annotation}


INT_LIMIT = 2**63 - 1
"""Our bound on every integer of a config: what torch, numpy and the file formats hold."""


def exact_scalar(annotation: Any, value: Any) -> Any:
    """``value`` as the config takes it for a field of type ``annotation``, with pydantic's two
    lax coercions that hide a mistake turned around: a boolean is not a number (``solver.steps=
    true`` must not become 1 step), and a number is text where text is asked for (``run.name=
    2024`` is the name "2024"). Lists are checked item by item (``data.toy_levels=[true]``).

    >>> exact_scalar(str | None, 2024)
    '2024'
    >>> exact_scalar(int, True)
    Traceback (most recent call last):
    ...
    ValueError: a number is needed here, got the boolean True
    """
    kinds = scalar_kinds(annotation)
    if isinstance(value, bool):
        if kinds & {int, float} and bool not in kinds:
            raise ValueError(f"a number is needed here, got the boolean {value}")
        return value
    if isinstance(value, int) and abs(value) > INT_LIMIT:
        raise ValueError(f"an integer of {len(str(abs(value)))} digits; a config integer is at most 2**63 - 1")
    if isinstance(value, (int, float)) and str in kinds and not kinds & {int, float, bool, Literal}:
        return str(value)
    if isinstance(value, list) and list in kinds:
        inner = [a for a in typing.get_args(annotation) if typing.get_origin(a) is list] or [annotation]
        args = typing.get_args(inner[0])
        if args:
            return [exact_scalar(args[0], v) for v in value]
    return value


class Strict(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated, and
    values keep their kind (``exact_scalar``: no boolean counts as a number, a number given for
    a text field is that text).

    ``RENAMED`` maps a field's former name to its name now: a saved config or an override that
    still uses the old name sets the new field (one concept keeps one name; old run folders and
    command lines keep working)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    RENAMED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.RENAMED and any(old in data for old in cls.RENAMED):
            data = dict(data)
            for old, new in cls.RENAMED.items():
                if old in data:
                    value = data.pop(old)
                    data.setdefault(new, value)
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _exact_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else exact_scalar(field.annotation, value)


class Band(Strict):
    """A closed pass-rate interval ``[low, high]`` (inclusive, with a 1e-9 tolerance).

    Used for D²Evo's anchor band and plateau (τ_l, τ_u), the buffer's keep band and DiagEvo's
    absolute filter (p_low, p_high).

    >>> Band(low=0.4, high=0.8).contains(2 / 5), Band(low=0.4, high=0.8).contains(0.81)
    (True, False)
    """

    low: float = Field(0.4, ge=0, le=1, description="Lower edge (inclusive).")
    high: float = Field(0.8, ge=0, le=1, description="Upper edge (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> Band:
        if self.low > self.high:
            raise ValueError(f"band low={self.low} must be <= high={self.high}")
        return self

    def contains(self, x: float) -> bool:
        return in_band(x, self.low, self.high)


class GRPOPhase(Strict):
    """One GRPO training phase of a role (solver, questioner, challenger).

    ``max_new_tokens`` / ``temperature`` of None inherit the run's ``sampling`` section, so a
    phase states only where it departs from the rollout defaults (writers write short questions).
    """

    steps: int = Field(40, ge=0, description="GRPO updates in the phase (0 = skip the phase).")
    prompts_per_step: int = Field(16, ge=1, description="Prompts per update.")
    group_size: int = Field(8, ge=2, description="Samples per prompt, the GRPO group G.")
    max_new_tokens: int | None = Field(None, ge=1, description="Completion cap (None = sampling.max_new_tokens).")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature (None = sampling.temperature).")


class SolverPhase(GRPOPhase):
    """Solver GRPO with the labelled reward ``R = α·acc + (1-α)·fmt``."""

    alpha: float = Field(
        0.9,
        ge=0,
        le=1,
        description="R = α·acc + (1-α)·format (paper); α = 0.9 is our default, as R-Zero (the paper gives no α).",
    )


class WriterReward(Strict):
    """How a question writer (D²Evo questioner, DiagEvo challenger) is rewarded.

    The frozen solver answers each generated question ``samples`` times; x = p1, the share
    of answers in the majority cluster (unparseable answers count as disagreeing). ``plateau`` is
    D²Evo's ``r_diff(x)`` on ``band`` with decay ``a`` behind a format gate; ``rzero`` is R-Zero's
    ``min(x, 1-x)`` minus a BLEU-cluster repetition penalty.
    """

    RENAMED = {"solver_samples": "samples"}

    kind: Literal["plateau", "rzero"] = Field("plateau", description="'plateau' (D²Evo) or 'rzero' (R-Zero).")
    band: Band = Field(
        default_factory=Band, description="Plateau edges τ_l, τ_u (our default: the anchor band 0.4-0.8)."
    )
    a: float = Field(2.0, ge=1, description="Plateau decay exponent a >= 1 (our default: 2).")
    samples: int = Field(
        8,
        ge=1,
        description="Frozen-solver answers per generated question, N_v (our default: 8); formerly solver_samples.",
    )
    rep_tokenizer: Literal["auto", "whitespace", "char"] = Field(
        "auto", description="BLEU tokens of the R-Zero repetition penalty; auto = the world's (char for the toy world)."
    )
    rep_threshold: float = Field(
        0.5, gt=0, le=1, description="R-Zero BLEU-distance clustering threshold (R-Zero: 0.5)."
    )

    @model_validator(mode="after")
    def _plateau_band(self) -> WriterReward:
        if self.kind == "plateau" and not (0.0 < self.band.low and self.band.high < 1.0):
            raise ValueError(
                f"plateau reward needs 0 < band.low and band.high < 1, got {self.band.low}, {self.band.high}"
            )
        return self


FilterMode = Literal["dual", "absolute", "none"]

Estimator = Literal["fixed", "adaptive"]
"""How many solver answers a question gets: ``fixed`` = always N (the papers); ``adaptive`` =
in stages, stopping a question once its verdict is decided (``Sequential``)."""


class Sequential(Strict):
    """Stages and stopping confidence of the adaptive estimator (``estimator: adaptive``).

    A question gets ``stages[0]`` answers, then is topped up to ``stages[1]``, ... and finally to
    the section's ``samples`` (the cap), each stage one batched sampler call over the questions
    still undecided. After each interim stage a question stops when the Beta posterior
    ``Beta(prior_a + k, prior_b + n - k)`` puts at least ``confidence`` on one side of the
    decision (rule and error rate: ``coevolve.curriculum.sequential``, docs/difficulty.md).
    """

    stages: list[int] = Field(
        default_factory=lambda: [4, 8, 16],
        description="Cumulative answers per question at "
        "each interim look (strictly increasing, all below the cap `samples`).",
    )
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1,
        description="Stop a question when the posterior probability of its verdict is >= this (1 - delta).",
    )
    prior_a: float = Field(1.0, gt=0, description="Beta prior pseudo-successes (1, 1 = uniform).")
    prior_b: float = Field(1.0, gt=0, description="Beta prior pseudo-failures (1, 1 = uniform).")

    @model_validator(mode="after")
    def _increasing(self) -> Sequential:
        if not self.stages or self.stages[0] < 1 or any(b <= a for a, b in zip(self.stages, self.stages[1:])):
            raise ValueError(f"sequential.stages must be strictly increasing positive counts, got {self.stages}")
        return self

    def schedule(self, cap: int) -> list[int]:
        """Cumulative answers per stage, ending at ``cap``: ``stages + [cap]``."""
        if self.stages[-1] >= cap:
            raise ValueError(f"sequential.stages {self.stages} must all lie below the cap samples={cap}")
        return [*self.stages, cap]


class Voting(Strict):
    """Pseudo-labels by majority vote and the confidence filter on them.

    The solver answers each generated question ``samples`` times; the majority answer is the
    label, p1 its share, p2 the runner-up's. ``absolute`` keeps ``p1`` in ``band``; ``dual`` also
    needs ``p1 >= tau·p2`` (DiagEvo); ``none`` keeps every labelled question.
    """

    samples: int = Field(8, ge=1, description="Solver answers per question for the vote (N).")
    filter: FilterMode = Field("dual", description="'dual' (DiagEvo), 'absolute' (band only) or 'none'.")
    band: Band = Field(default_factory=Band, description="Absolute filter on p1.")
    tau: float = Field(1.6, ge=0, description="Relative filter: keep when p1 >= tau·p2 (DiagEvo: 1.6).")
    estimator: Estimator = Field(
        "fixed",
        description="'fixed' = `samples` answers per question (the papers); "
        "'adaptive' = stop drawing once the filter's verdict is decided (`sequential`).",
    )
    sequential: Sequential = Field(
        default_factory=Sequential, description="Stages and confidence of 'adaptive' (the cap is `samples`)."
    )

    @model_validator(mode="after")
    def _stages_below_cap(self) -> Voting:
        if self.estimator == "adaptive":
            self.sequential.schedule(self.samples)
        return self


class Probe(Strict):
    """The fixed probe set the solver answers after every round (and once before round 1) for
    the label-free round signals (``coevolve.eval.signals``; docs/stopping.md). Drawn once at
    the run's start from the training source (never the held-out evaluation items, never
    D²Evo's candidate pool) and saved in the run folder as ``probe.jsonl``; nothing trains on
    it. Not in either paper: our addition for the checkpoint choice both leave to hand."""

    size: int = Field(
        32,
        ge=0,
        description="Probe questions (0 = no probe: no signals, run.select=last only). "
        "32 x 8 answers cost a toy DiagEvo round about 3% more rollouts.",
    )
    samples: int = Field(
        8,
        ge=1,
        description="Solver answers per probe question (T=1, the run's sampling), voted "
        "like the pseudo-labels (p1, entropy, agreement).",
    )


__all__ = [
    "BAND_TOLERANCE",
    "Band",
    "ModelPath",
    "VLLM_SHARE",
    "in_band",
    "nearest_dividing",
    "verl_micro_batch",
    "vllm_share",
    "Estimator",
    "Probe",
    "FilterMode",
    "GRPOPhase",
    "Sequential",
    "SolverPhase",
    "Strict",
    "Voting",
    "WriterReward",
]
