"""What every rollout backend shares: argument checks, its error type, and how generated ids
become a completion (``decode_ids``, ``cut_completion``).

The ``Sampler`` protocol itself is defined once, in ``coevolve.types``; recipes, curriculum and
evaluation only talk to it, which is what makes the backends swappable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from coevolve.errors import CoevolveError
from coevolve.run import derive_seed
from coevolve.types import SamplingParams, Stop


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
        raise SamplerError(f"SamplingParams.max_new_tokens must be >= 1, got {params.max_new_tokens}")


def prompt_seeds(seed: int | None, prompts: Sequence[str]) -> list[int | None]:
    """Per-prompt seeds of one call (``engine.seed_scope=prompt``):

        seed_i = derive_seed(seed, prompts[i], #{j < i : prompts[j] == prompts[i]})

    i.e. the call seed, the prompt text and the occurrence of that text so far in the call.
    A prompt's draws then depend on nothing else in the call, so a call split over actors or
    batches in any way gives the same samples; a repeated prompt still gets fresh draws.
    None when the call is unseeded."""
    if seed is None:
        return [None] * len(prompts)
    seen: dict[str, int] = {}
    out: list[int | None] = []
    for p in prompts:
        k = seen.get(p, 0)
        seen[p] = k + 1
        out.append(derive_seed(seed, p, k))
    return out


def resolve_seed_scope(engine: Any) -> str:
    """``engine.seed_scope`` resolved: unset means 'prompt' for ray (a pool only reproduces
    in-process sampling with per-prompt seeds) and 'call' otherwise (the historical draws)."""
    scope = getattr(engine, "seed_scope", None)
    return scope if scope is not None else ("prompt" if engine.kind == "ray" else "call")


def freeze_module(model: Any) -> Any:
    """``model`` in eval mode with no parameter requiring a gradient (a read-only sampler's)."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def unwrap_peft(model: Any) -> Any:
    """The Hugging Face model under a PEFT (LoRA) wrapper, or ``model`` itself: what has the
    config, generation config and Hugging Face weight names an engine is built from."""
    return model.get_base_model() if hasattr(model, "peft_config") and hasattr(model, "get_base_model") else model


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """All ids that end a completion: the tokenizer's EOS plus the model's generation EOS ids
    (Qwen3 chat models stop on both ``<|im_end|>`` and ``<|endoftext|>``)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gc = getattr(model, "generation_config", None)
    g_eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if isinstance(g_eos, int):
        g_eos = [g_eos]
    for e in g_eos or []:
        if int(e) not in ids:
            ids.append(int(e))
    if not ids:
        raise SamplerError("tokenizer has no eos_token_id and the model's generation_config has none")
    return ids


def decode_ids(tokenizer: Any, ids: Sequence[int]) -> str:
    """Completion text of ``ids``: special tokens (EOS/pad/BOS) dropped, plain added tokens such as
    ``<think>`` kept, no clean-up of spaces, so char-level text round-trips exactly. Every
    backend decodes through this one function, so their texts agree token for token."""
    special = set(tokenizer.all_special_ids)
    kept = [i for i in ids if i not in special]
    return tokenizer.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def cut_completion(
    gen: list[int], stop: Stop, end_ids: Sequence[int], decode: Callable[[Sequence[int]], str]
) -> tuple[list[int], str, str | int | None]:
    """(completion ids, finish reason, stop reason) of generated ids ``gen``: up to and including
    the first end token (an id of ``end_ids`` or ``stop.token_ids``), or the shortest prefix whose
    text holds a stop string, whichever comes first; anything after (padding, or tokens an engine
    generated past the stop) is dropped. Shared by every backend so that a stop means the same
    ids everywhere."""
    end = set(end_ids) | set(stop.token_ids)
    ids, reason, why = gen, "length", None
    for j, t in enumerate(gen):
        if t in end:
            ids, reason, why = gen[: j + 1], "stop", t
            break
    if stop.strings:
        body = ids[:-1] if reason == "stop" else ids
        text = decode(body)
        hits = [(text.find(s), s) for s in stop.strings if s in text]
        if hits:
            first = min(hits)[1]
            lo, hi = 1, len(body)  # the shortest prefix whose text contains ``first``
            while lo < hi:
                mid = (lo + hi) // 2
                if first in decode(body[:mid]):
                    hi = mid
                else:
                    lo = mid + 1
            return body[:lo], "stop", first
    return ids, reason, why
