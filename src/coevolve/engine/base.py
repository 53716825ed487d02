"""The sampling interface every rollout backend implements.

Recipes, curriculum and evaluation only talk to a ``Sampler``: an HF ``generate`` backend for the
CPU/toy default (``coevolve.engine.hf.HFSampler``) and, later, a vLLM backend on GPU. Keeping the
protocol this small is what makes the backends swappable.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from coevolve.errors import CoevolveError
from coevolve.types import Completion, SamplingParams


class SamplerError(CoevolveError):
    """Bad arguments to a sampler (e.g. ``n < 1``, negative temperature)."""


@runtime_checkable
class Sampler(Protocol):
    """Generates ``n`` completions for each prompt.

    ``tokenizer`` is the Hugging Face tokenizer the sampler encodes prompts with; callers use it
    to build training batches from the returned ``prompt_ids`` / ``token_ids``.
    """

    tokenizer: Any

    def sample(
        self, prompts: Sequence[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        """Return one list per prompt (same order), each holding ``n`` completions."""
        ...


def validate_params(n: int, params: SamplingParams) -> None:
    """Reject sampling parameters that would silently do something else than asked."""
    if n < 1:
        raise SamplerError(f"sample: n must be >= 1, got n={n}")
    if params.temperature < 0:
        raise SamplerError(f"SamplingParams.temperature must be >= 0, got {params.temperature}")
    if not 0.0 < params.top_p <= 1.0:
        raise SamplerError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < 0:
        raise SamplerError(f"SamplingParams.top_k must be >= 0 (0 = off), got {params.top_k}")
    if params.max_new_tokens < 1:
        raise SamplerError(
            f"SamplingParams.max_new_tokens must be >= 1, got {params.max_new_tokens}"
        )
