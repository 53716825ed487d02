"""Typed records shared by every layer.

These are plain dataclasses with no behaviour beyond (de)serialisation, so that rollout,
curriculum, memory and recipes can pass data to each other without importing one another, and
the two interfaces they meet through: ``Sampler`` (rollouts) and ``AnswerGrader`` (grading and
voting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass
class Task:
    """One question with (optionally) a reference answer.

    ``answer`` is the gold label for real/toy data and ``None`` for generated questions before
    pseudo-labelling. ``features`` carries world-specific metadata (toy: level, carries, ...).
    """

    id: str
    question: str
    answer: str | None = None
    source: str = ""
    features: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(
            id=str(d["id"]),
            question=str(d["question"]),
            answer=None if d.get("answer") is None else str(d["answer"]),
            source=str(d.get("source", "")),
            features=dict(d.get("features") or {}),
        )


@dataclass(frozen=True)
class Stop:
    """Where a completion ends besides the model's EOS: the first of ``strings`` to appear (kept
    in the completion, so ``</question>`` can still be parsed) or of ``token_ids`` (a chat
    template's end-of-turn token)."""

    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()


@dataclass
class SamplingParams:
    """Decoding parameters for one ``Sampler.sample`` call.

    ``temperature == 0`` means greedy decoding (then ``n`` must be 1 to be meaningful).
    ``top_k == 0`` and ``top_p == 1.0`` disable those filters (pure temperature sampling).
    ``stop`` ends a completion early (see ``Stop``); every sampler honours it.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    seed: int | None = None
    return_logprobs: bool = False
    stop: Stop = field(default_factory=Stop)


@dataclass
class Completion:
    """One sampled continuation of one prompt.

    ``prompt_ids`` are the exact ids the model was conditioned on (no padding) and
    ``token_ids`` the generated ids up to and including the token that stopped it (EOS, a stop
    token, or the last token of a stop string), no padding. ``finish_reason`` is "stop" or
    "length" (the budget ran out); ``stop_reason`` says what stopped it: the stop string, the
    token id, or None. ``logprobs[i]`` is log p(token_ids[i]) under the sampling policy *before*
    temperature / top-k / top-p (the raw model distribution), present with ``return_logprobs``.
    """

    text: str
    token_ids: list[int]
    prompt_ids: list[int]
    finish_reason: Literal["stop", "length"] = "stop"
    logprobs: list[float] | None = None
    stop_reason: str | int | None = None


@dataclass
class Vote:
    """Majority vote over N answers (unparseable answers count in the denominator).

    ``label`` is the representative answer of the largest cluster (None when no answer parsed),
    ``p1`` its share of N, ``p2`` the share of the second largest cluster (0 when none),
    ``cluster_of[i]`` the cluster index of answer i (-1 for unparseable), ``sizes`` the cluster
    sizes sorted descending (cluster 0 is the majority).
    """

    label: str | None
    p1: float
    p2: float
    n: int
    cluster_of: list[int]
    sizes: list[int]

    def agrees(self, i: int) -> bool:
        """True when answer ``i`` is in the majority cluster."""
        return self.label is not None and self.cluster_of[i] == 0


@runtime_checkable
class Sampler(Protocol):
    """Generates ``n`` completions for each prompt: the one rollout interface.

    Backends: ``coevolve.engine.HFSampler`` (and, behind the same protocol, other engines), built
    by ``coevolve.engine.make_sampler``. ``tokenizer`` is the Hugging Face tokenizer the sampler
    encodes prompts with. ``sync_weights(model)`` makes the sampler serve ``model``'s current
    weights: an explicit call after each learner step (a no-op where sampler and learner share
    the module).
    """

    tokenizer: Any

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        """Return one list per prompt (same order), each holding ``n`` completions."""
        ...

    def sync_weights(self, model: Any) -> None: ...


@runtime_checkable
class AnswerGrader(Protocol):
    """Answer equivalence, grading and voting (``coevolve.answers.Grader``).

    ``grade(gold, completion)`` extracts the completion's final answer and compares it with the
    gold; ``vote`` clusters answers and returns the majority (None counts in the denominator).
    The batch forms exist so that a pool of grading processes can work on many at once.
    """

    def is_equiv(self, gold: str | None, pred: str | None) -> bool: ...

    def grade(self, gold: str, completion: str) -> bool: ...

    def vote(self, answers: list[str | None]) -> Vote: ...

    def grade_batch(self, golds: Sequence[str], completions: Sequence[str]) -> list[bool]: ...

    def vote_batch(self, groups: Sequence[list[str | None]]) -> list[Vote]: ...
