"""Chunked sampling: the one place where many prompts are split into sampler calls (curriculum
phases and evaluation alike).

Why chunks: a phase that measures hundreds of questions N times each would otherwise build one
giant batch; a chunk of ``batch_prompts`` prompts keeps memory bounded and still gives the
engine large batches. Why a seed per chunk: with a fixed seed, chunk c must not replay chunk
0's random stream. The scheme is ``seed + c`` (c = 0, 1, ...), so the first chunk uses the
caller's seed unchanged. Staged sampling (``sample_staged``, the adaptive estimators) gives
stage j the seed ``seed + j · STAGE_SEED_STRIDE`` and chunks within it ``+ c`` on top, so stage 0
uses the caller's seeds unchanged, a staged run is reproducible from its seed alone, and no two
(stage, chunk) pairs share a stream while a stage has fewer than ``STAGE_SEED_STRIDE`` chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from coevolve.answers import extract_answer
from coevolve.errors import CoevolveError, ConfigError
from coevolve.types import Completion, Sampler, SamplingParams


class CurriculumError(CoevolveError, ValueError):
    """Inconsistent curriculum inputs (empty sample groups, values out of range)."""


def answer_text(c: Completion) -> str:
    """The text of ``c`` that may be read for an answer: the whole text, except that a completion
    cut off by ``max_new_tokens`` (``finish_reason == "length"``) counts only when its answer
    box closed before the cut; otherwise "" (a non-answer). Without this, the free-text reading
    would take a number from the middle of a cut-off derivation as the final answer."""
    if c.finish_reason == "length" and extract_answer(c.text, fallback=False) is None:
        return ""
    return c.text


def completion_answer(c: Completion) -> str | None:
    """The final answer ``c`` states, or None (the one place completions become answers:
    votes, pass records, probes)."""
    return extract_answer(answer_text(c))


def chunk_params(params: SamplingParams, chunk: int) -> SamplingParams:
    """``params`` with the seed of chunk ``chunk`` (``seed + chunk``; unseeded stays unseeded)."""
    return params if params.seed is None else replace(params, seed=params.seed + chunk)


def sample_chunked(
    sampler: Sampler,
    prompts: Sequence[str],
    n: int,
    params: SamplingParams,
    batch_prompts: int,
    progress: str | None = None,
) -> list[list[Completion]]:
    """``n`` completions for each prompt, one ``sampler.sample`` call per ``batch_prompts``
    prompts, the shape of every answer checked (a backend that drops a prompt must fail here,
    not misalign rewards later). ``progress``: a progress bar of that name over the chunks."""
    if n < 1:
        raise CurriculumError(f"number of samples per prompt must be >= 1, got {n}")
    if batch_prompts < 1:
        raise ConfigError(f"batch_prompts must be >= 1, got {batch_prompts}")
    out: list[list[Completion]] = []
    starts: Any = range(0, len(prompts), batch_prompts)
    if progress is not None and len(starts) > 1:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=progress, unit="batch")
    for c, start in enumerate(starts):
        chunk = list(prompts[start : start + batch_prompts])
        groups = sampler.sample(chunk, n, chunk_params(params, c))
        if len(groups) != len(chunk) or any(len(g) != n for g in groups):
            raise CurriculumError(
                f"sampler returned {len(groups)} groups of sizes {[len(g) for g in groups]} "
                f"for {len(chunk)} prompts x {n} samples"
            )
        out.extend(groups)
    return out


STAGE_SEED_STRIDE = 1 << 16
"""Seed distance between stages of ``sample_staged`` (more chunks than this per stage would
reuse a later stage's seeds: 65,536 chunks of ``batch_prompts`` prompts)."""

StopFn = Callable[[list[int], list[list[Completion]]], list[bool]]
"""``stop(open_indices, groups)``: for each still-open prompt (its index and all its completions
so far), whether it is decided and needs no more completions."""


def stage_params(params: SamplingParams, stage: int) -> SamplingParams:
    """``params`` with the base seed of stage ``stage`` (``seed + stage · STAGE_SEED_STRIDE``)."""
    return params if params.seed is None else replace(params, seed=params.seed + stage * STAGE_SEED_STRIDE)


def sample_staged(
    sampler: Sampler,
    prompts: Sequence[str],
    schedule: Sequence[int],
    params: SamplingParams,
    batch_prompts: int,
    stop: StopFn,
) -> list[list[Completion]]:
    """Completions in stages: every prompt is topped up to ``schedule[j]`` completions at stage
    j, one ``sample_chunked`` pass over the prompts still open (so each stage is batched like a
    fixed call); after every stage but the last, ``stop`` closes the decided prompts. Returns
    each prompt's completions (between ``schedule[0]`` and ``schedule[-1]`` of them)."""
    if not schedule or schedule[0] < 1 or any(b <= a for a, b in zip(schedule, schedule[1:])):
        raise ConfigError(f"stage schedule must be strictly increasing positive counts, got {list(schedule)}")
    groups: list[list[Completion]] = [[] for _ in prompts]
    open_idx = list(range(len(prompts)))
    done = 0
    for j, n in enumerate(schedule):
        if not open_idx:
            break
        new = sample_chunked(sampler, [prompts[i] for i in open_idx], n - done, stage_params(params, j), batch_prompts)
        for i, g in zip(open_idx, new):
            groups[i].extend(g)
        done = n
        if j < len(schedule) - 1:
            closed = stop(open_idx, [groups[i] for i in open_idx])
            if len(closed) != len(open_idx):
                raise CurriculumError(f"stop() returned {len(closed)} verdicts for {len(open_idx)} open prompts")
            open_idx = [i for i, c in zip(open_idx, closed) if not c]
    return groups
