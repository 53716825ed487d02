"""What every rollout backend shares: argument checks and its error type.

The ``Sampler`` protocol itself is defined once, in ``coevolve.types``; recipes, curriculum and
evaluation only talk to it, which is what makes the backends swappable.
"""

from __future__ import annotations

from coevolve.errors import CoevolveError
from coevolve.types import SamplingParams


class SamplerError(CoevolveError):
    """Bad arguments to a sampler (e.g. ``n < 1``, negative temperature)."""


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
