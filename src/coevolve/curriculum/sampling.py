"""Chunked sampling: the one place where many prompts are split into sampler calls.

Why chunks: a phase that measures hundreds of questions N times each would otherwise build one
giant batch; a chunk of ``batch_prompts`` prompts keeps memory bounded and still gives the
engine large batches. Why a seed per chunk: with a fixed seed, chunk c must not replay chunk
0's random stream. The scheme is ``seed + c`` (c = 0, 1, ...), so the first chunk uses the
caller's seed unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from coevolve.errors import CoevolveError, ConfigError
from coevolve.types import Completion, Sampler, SamplingParams


class CurriculumError(CoevolveError, ValueError):
    """Inconsistent curriculum inputs (empty sample groups, values out of range)."""


def chunk_params(params: SamplingParams, chunk: int) -> SamplingParams:
    """``params`` with the seed of chunk ``chunk`` (``seed + chunk``; unseeded stays unseeded)."""
    return params if params.seed is None else replace(params, seed=params.seed + chunk)


def sample_chunked(
    sampler: Sampler, prompts: Sequence[str], n: int, params: SamplingParams, batch_prompts: int
) -> list[list[Completion]]:
    """``n`` completions for each prompt, one ``sampler.sample`` call per ``batch_prompts``
    prompts, the shape of every answer checked (a backend that drops a prompt must fail here,
    not misalign rewards later)."""
    if n < 1:
        raise CurriculumError(f"number of samples per prompt must be >= 1, got {n}")
    if batch_prompts < 1:
        raise ConfigError(f"batch_prompts must be >= 1, got {batch_prompts}")
    out: list[list[Completion]] = []
    for c, start in enumerate(range(0, len(prompts), batch_prompts)):
        chunk = list(prompts[start : start + batch_prompts])
        groups = sampler.sample(chunk, n, chunk_params(params, c))
        if len(groups) != len(chunk) or any(len(g) != n for g in groups):
            raise CurriculumError(
                f"sampler returned {len(groups)} groups of sizes {[len(g) for g in groups]} "
                f"for {len(chunk)} prompts x {n} samples"
            )
        out.extend(groups)
    return out
