"""Hugging Face ``generate`` rollout backend (the CPU / toy default, and a GPU fallback).

Why our own wrapper instead of calling ``generate`` at each call site: GRPO needs exact token
ids (prompt without padding, completion cut after the first EOS), reproducible seeded
sampling, raw-distribution log-probs, and large ``prompts x n`` batches split into chunks. Those
details are easy to get subtly wrong (left padding, position ids, tokenizers without a pad
token, transformers 5 ``GenerationConfig`` defaults being ``None``), so they live here once.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from coevolve.engine.base import (
    SamplerError,
    cut_completion,
    decode_ids,
    eos_ids,
    freeze_module,
    prompt_seeds,
    resolve_seed_scope,
    validate_params,
)
from coevolve.errors import ModelLoadError
from coevolve.rl.grpo import sequence_logprobs
from coevolve.rl.learner import pack_rows
from coevolve.types import Completion, SamplingParams, Stop


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"``/None -> cuda when available, else cpu."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"`` -> bf16 on cuda, fp32 on cpu (CPU bf16 matmuls are slow and imprecise)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "fp16": torch.float16,
        "float16": torch.float16,
        "fp32": torch.float32,
        "float32": torch.float32,
    }
    if dtype not in table:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(table)}")
    return table[dtype]


ADAPTER_CONFIG = "adapter_config.json"


def _model_folder(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model path {p} does not exist")
    if not p.is_dir() or not ((p / "config.json").is_file() or (p / ADAPTER_CONFIG).is_file()):
        raise ModelLoadError(f"{p} is not a Hugging Face model folder (no config.json)")
    try:
        name = "config.json" if (p / "config.json").is_file() else ADAPTER_CONFIG
        meta = json.loads((p / name).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{p / name} is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ModelLoadError(f"{p / name}: expected a JSON object, got {type(meta).__name__}")
    return p.resolve()


def _adapter_base(p: Path) -> Path:
    """The base model folder a LoRA adapter checkpoint was trained from."""
    base = json.loads((p / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise ModelLoadError(
            f"{p} is a LoRA adapter whose base model {base!r} is not a local folder; "
            "export a merged model with `coevolve export`"
        )
    return Path(base)


def load_tokenizer(path: str | Path) -> Any:
    """The folder's tokenizer, set to left padding (batched generation) with EOS as pad token
    when it has none. Raises ``ModelLoadError`` naming the path."""
    from transformers import AutoTokenizer

    p = _model_folder(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(p))
    except Exception as e:  # noqa: BLE001 - re-raised as a clear, user-facing error
        raise ModelLoadError(f"could not load the tokenizer of {p}: {type(e).__name__}: {e}") from e
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str | Path, device: str | torch.device = "auto", dtype: str | torch.dtype = "auto"
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer (``load_tokenizer``) from a local Hugging Face folder,
    or from a LoRA adapter checkpoint (``adapter_config.json``): its base model with the adapter
    merged in, so every checkpoint of a run loads the same way.

    Raises ``ModelLoadError`` naming the path for a missing folder, a folder without
    ``config.json``, a broken ``config.json`` or any loading failure.
    """
    from transformers import AutoModelForCausalLM

    p = _model_folder(path)
    adapter = not (p / "config.json").is_file()
    tokenizer = load_tokenizer(p)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(_adapter_base(p) if adapter else p), dtype=dt)
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(p)).merge_and_unload()
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised as a clear, user-facing error
        raise ModelLoadError(f"could not load model from {p}: {type(e).__name__}: {e}") from e
    model.to(dev)
    return model, tokenizer


@contextlib.contextmanager
def _eval_no_grad(model: Any) -> Iterator[None]:
    """Sampling runs in eval mode without autograd; the caller's train/eval mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch for the duration of a call without disturbing the caller's global RNG."""
    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):
        torch.manual_seed(seed)
        yield


class _StopStrings:
    """Stop a row once its generated text ends in a stop string, so ``generate`` does not run on
    to the budget (the exact cut is ``cut_completion``'s). Checks the last few tokens only: a
    token decodes to at least one character, so ``len(stop) + 1`` tokens cover any stop string
    (transformers' own ``StopStringCriteria`` cannot read every tokenizer's vocabulary)."""

    def __init__(self, sampler: HFSampler, strings: Sequence[str], prompt_len: int) -> None:
        self.sampler, self.strings, self.prompt_len = sampler, tuple(strings), prompt_len
        self.window = max(len(s) for s in strings) + 1

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: Any) -> Tensor:
        tail = input_ids[:, self.prompt_len :][:, -self.window :].tolist()  # (B, <= window)
        done = [any(s in self.sampler.decode(row) for s in self.strings) for row in tail]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class _InverseCdfDraw:
    """``engine.token_draw="inverse-cdf"``: the last logits processor of a greedy ``generate``, which
    draws each row's token from softmax(scores) by one uniform u ~ U[0, 1) (torch's default
    generator, so a seeded call repeats): the token i with c_{i-1} <= u c_V < c_i, c the cumulative
    probabilities. It returns 0 at the drawn token and -inf elsewhere, so greedy's argmax takes it.
    torch.multinomial draws V exponentials per row instead (its cost grows with the vocabulary)."""

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        cdf_BV = torch.softmax(scores.float(), dim=-1).cumsum_(dim=-1)  # (B, V)
        u_B1 = torch.rand((scores.shape[0], 1), device=scores.device) * cdf_BV[:, -1:]  # (B, 1)
        tok_B1 = torch.searchsorted(cdf_BV, u_B1, right=True).clamp_(max=scores.shape[-1] - 1)  # (B, 1)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, tok_B1, 0.0)


PREFIX_CACHE_MIN_TOKENS = 8
"""A shared prefix shorter than this is prefilled with the rows (the extra forward pass of the
prefix would cost more than it saves)."""


def _forward_params(model: Any) -> Any:
    import inspect

    return inspect.signature(model.forward).parameters


def _cache_kwarg(model: Any) -> str:
    """The name under which this transformers takes a KV cache (5.x renames ``past_key_values``)."""
    return "cache" if "cache" in _forward_params(model) else "past_key_values"


class HFSampler:
    """``Sampler`` over a Hugging Face causal LM using ``model.generate``.

    ``max_batch`` caps the number of sequences (prompt copies) per ``generate`` call; sequences
    are sorted by prompt length first so chunks need little padding. ``max_batch_tokens`` (when
    set) also caps the KV-cache tokens of a call, rows x (longest prompt + max_new_tokens): with
    a 4k answer budget the cache, not the row count, is what fills the GPU. ``logprob_batch`` caps the
    rows per log-prob forward pass. The sampler shares the module with the learner, so
    ``sync_weights`` is a no-op (a vLLM sampler pushes weights there).

    ``seed_scope="call"`` (default) draws a whole call from one RNG stream, all prompts batched
    together. ``"prompt"`` (``engine.seed_scope``) generates each prompt's ``n`` rows as their own
    group from their own seed (``prompt_seeds``): a group has one prompt length, so no padding and
    no other prompt touches its floats, and any split of a call (over Ray actors, or batches)
    gives identical token ids (for the same ``max_batch`` / ``max_batch_tokens``: a group larger
    than a chunk is drawn chunk after chunk). It costs one ``generate`` per prompt instead of per
    chunk.
    """

    @classmethod
    def require(cls, engine: Any) -> None:
        """Nothing to check: the hf engine needs only what coevolve installs."""

    @classmethod
    def for_model(cls, engine: Any, model: Any, tokenizer: Any, owner: Any = None) -> HFSampler:
        """A sampler over ``model`` itself (a learner's module: ``sync_weights`` has nothing to do)."""
        return cls(
            model,
            tokenizer,
            max_batch=engine.max_batch,
            max_batch_tokens=engine.max_batch_tokens,
            seed_scope=resolve_seed_scope(engine),
            prefix_cache=bool(getattr(engine, "prefix_caching", None)),  # None: off on hf
            token_draw=getattr(engine, "token_draw", "multinomial"),
        )

    @classmethod
    def load(cls, engine: Any, path: str, device: str = "auto", dtype: str = "auto", owner: Any = None) -> HFSampler:
        """A read-only sampler over the model folder (or LoRA adapter checkpoint) ``path``."""
        model, tokenizer = load_model(path, device=device, dtype=dtype)
        return cls.for_model(engine, freeze_module(model), tokenizer)

    def pinned(self, model: Any) -> HFSampler:
        """A sampler that keeps serving the weights ``model`` has now while ``model`` trains on:
        a frozen deep copy of the module (one more copy of the weights on its device)."""
        return HFSampler(
            freeze_module(copy.deepcopy(model)),
            self.tokenizer,
            max_batch=self.max_batch,
            max_batch_tokens=self.max_batch_tokens,
            logprob_batch=self.logprob_batch,
            seed_scope=self.seed_scope,
            prefix_cache=self.prefix_cache,
            token_draw=self.token_draw,
        )

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch: int = 256,
        device: str | torch.device | None = None,
        logprob_batch: int = 64,
        max_batch_tokens: int | None = None,
        seed_scope: str = "call",
        prefix_cache: bool = False,
        token_draw: str = "multinomial",
    ) -> None:
        if seed_scope not in ("call", "prompt"):
            raise SamplerError(f"HFSampler: seed_scope must be 'call' or 'prompt', got {seed_scope!r}")
        if token_draw not in ("multinomial", "inverse-cdf"):
            raise SamplerError(f"HFSampler: token_draw must be 'multinomial' or 'inverse-cdf', got {token_draw!r}")
        self.token_draw = token_draw
        self.seed_scope = seed_scope
        self.prefix_cache = bool(prefix_cache)
        if max_batch < 1:
            raise SamplerError(f"HFSampler: max_batch must be >= 1, got {max_batch}")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise SamplerError(f"HFSampler: max_batch_tokens must be >= 1, got {max_batch_tokens}")
        self.max_batch_tokens = max_batch_tokens
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = int(max_batch)
        self.progress: Callable[[int], None] | None = None  # told each chunk's rows (a phase's progress bar)
        self.logprob_batch = max(1, int(logprob_batch))
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.eos_ids = eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]

    def sync_weights(self, model: Any) -> None:
        """Make the sampler use the learner's current weights. No-op when the module is shared
        (the usual case); a different module (e.g. the learner wrapped it) is adopted."""
        if model is not self.model:
            self.model = model

    # ------------------------------------------------------------------ helpers
    def encode(self, prompt: str) -> list[int]:
        """Token ids the model is conditioned on (special tokens as the tokenizer adds them:
        BOS for the toy tokenizer, nothing for Qwen3)."""
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Decode without special tokens (EOS/pad/BOS) but keeping plain added tokens such as
        ``<think>``; no clean-up of spaces, so char-level text round-trips exactly."""
        return decode_ids(self.tokenizer, ids)

    def _left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.long)  # (B, L)
        mask = torch.zeros((len(seqs), L), dtype=torch.long)  # (B, L)
        for i, s in enumerate(seqs):
            if s:
                ids[i, L - len(s) :] = torch.tensor(list(s), dtype=torch.long)
                mask[i, L - len(s) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _generation_config(self, params: SamplingParams) -> Any:
        from transformers import GenerationConfig

        common: dict[str, Any] = dict(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eos_ids + [t for t in params.stop.token_ids if t not in self.eos_ids],
            pad_token_id=self.pad_id,
            num_beams=1,
            repetition_penalty=1.0,
        )
        if params.temperature == 0 or self.token_draw == "inverse-cdf":  # the latter draws in _processors
            return GenerationConfig(do_sample=False, **common)
        # transformers 5 defaults top_k/top_p to None and then fills them from the model's
        # generation_config (Qwen3: top_k=20, top_p=0.95); pass neutral values explicitly.
        return GenerationConfig(
            do_sample=True,
            temperature=float(params.temperature),
            top_k=int(params.top_k),
            top_p=float(params.top_p),
            **common,
        )

    def _processors(self, params: SamplingParams) -> Any:
        """``token_draw="inverse-cdf"`` at T > 0: transformers' own temperature / top-k / top-p
        warpers (in its order, where they act), then ``_InverseCdfDraw``; else none (generate's own)."""
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        if params.temperature == 0 or self.token_draw != "inverse-cdf":
            return LogitsProcessorList()
        warpers: list[Any] = [TemperatureLogitsWarper(float(params.temperature))] if params.temperature != 1.0 else []
        if params.top_k > 0:
            warpers.append(TopKLogitsWarper(int(params.top_k)))
        if params.top_p < 1.0:
            warpers.append(TopPLogitsWarper(float(params.top_p)))
        return LogitsProcessorList([*warpers, _InverseCdfDraw()])

    def _generate_chunk(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[int]]:
        """Raw generated ids per row (right-padded region, not yet cut)."""
        from transformers import StoppingCriteriaList

        cached = self._shared_prefix(prompt_ids) if self.prefix_cache else None
        if cached is None:
            ids, mask = self._left_pad(prompt_ids)  # (B, L)
            extra: dict[str, Any] = {}
        else:
            ids, mask, extra = cached
        stops = StoppingCriteriaList(
            [_StopStrings(self, params.stop.strings, ids.shape[1])] if params.stop.strings else []
        )
        processors = self._processors(params)
        if processors:
            extra = {**extra, "logits_processor": processors}
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=self._generation_config(params),
            stopping_criteria=stops,
            **extra,
        )  # (B, L + new)
        if self.progress is not None:
            self.progress(len(prompt_ids))
        return out[:, ids.shape[1] :].tolist()

    def _shared_prefix(self, prompt_ids: list[list[int]]) -> tuple[Tensor, Tensor, dict[str, Any]] | None:
        """``prefix_cache``: the longest prefix common to every row (few-shot examples, the system
        text, or a whole prompt sampled n times) runs once, its KV cache repeated for the B rows;
        rows become [prefix | padding | own suffix] (masked padding, positions from the mask, so
        each row's positions are those of its unpadded prompt). None when the shared prefix is too
        short to pay for itself."""
        from transformers import DynamicCache

        first = prompt_ids[0]
        n = min(len(p) for p in prompt_ids) - 1  # at least one token per row left to prefill
        k = 0
        while k < n and all(p[k] == first[k] for p in prompt_ids):
            k += 1
        if k < PREFIX_CACHE_MIN_TOKENS:
            return None
        B, S = len(prompt_ids), max(len(p) - k for p in prompt_ids)
        ids = torch.full((B, k + S), self.pad_id, dtype=torch.long)  # (B, k + S)
        mask = torch.zeros((B, k + S), dtype=torch.long)  # (B, k + S)
        ids[:, :k] = torch.tensor(first[:k], dtype=torch.long)
        mask[:, :k] = 1
        for i, p in enumerate(prompt_ids):
            ids[i, k + S - (len(p) - k) :] = torch.tensor(p[k:], dtype=torch.long)
            mask[i, k + S - (len(p) - k) :] = 1
        cache = DynamicCache()
        kw = _cache_kwarg(self.model)
        extra = {"logits_to_keep": 1} if "logits_to_keep" in _forward_params(self.model) else {}
        self.model(
            input_ids=ids[:1, :k].to(self.device), use_cache=True, **{kw: cache}, **extra
        )  # (1, k) prefill, once
        cache.batch_repeat_interleave(B)
        return ids.to(self.device), mask.to(self.device), {kw: cache}

    def _cut(self, gen: list[int], stop: Stop) -> tuple[list[int], str, str | int | None]:
        """(completion ids, finish reason, stop reason): ``cut_completion`` with this model's EOS."""
        return cut_completion(gen, stop, self.eos_ids, self.decode)

    def completion_logprobs(self, prompt_ids: list[list[int]], comp_ids: list[list[int]]) -> list[list[float]]:
        """log p(completion token) under the raw model distribution, by one batched forward
        pass per ``logprob_batch`` rows (left-padded prompts, right-padded completions)."""
        result: list[list[float]] = []
        for s in range(0, len(prompt_ids), self.logprob_batch):
            P = prompt_ids[s : s + self.logprob_batch]
            C = comp_ids[s : s + self.logprob_batch]
            T = max(1, max(len(c) for c in C))
            p_ids, p_mask = self._left_pad(P)  # (B, Lp)
            c_ids = torch.full((len(C), T), self.pad_id, dtype=torch.long)  # (B, T)
            c_mask = torch.zeros((len(C), T), dtype=torch.long)  # (B, T)
            for i, c in enumerate(C):
                if c:
                    c_ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
                    c_mask[i, : len(c)] = 1
            c_ids, c_mask = c_ids.to(self.device), c_mask.to(self.device)
            input_ids = torch.cat([p_ids, c_ids], dim=1)  # (B, Lp + T)
            attn = torch.cat([p_mask, c_mask], dim=1)  # (B, Lp + T)
            lp = sequence_logprobs(self.model, input_ids, attn, c_mask).float().cpu()  # (B, T)
            for i, c in enumerate(C):
                result.append(lp[i, : len(c)].tolist())
        return result

    def _chunks(self, order: list[int], prompt_lens: list[int], max_new: int) -> list[list[int]]:
        """Consecutive runs of ``order``: at most ``max_batch`` rows and, with
        ``max_batch_tokens``, rows x (longest prompt + max_new) KV tokens (``pack_rows``)."""
        if self.max_batch_tokens is None:
            return [order[s : s + self.max_batch] for s in range(0, len(order), self.max_batch)]
        return pack_rows(order, [n + max_new for n in prompt_lens], self.max_batch, self.max_batch_tokens)

    # ------------------------------------------------------------------ API
    def _encode_call(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[int]]:
        validate_params(n, params)
        if isinstance(prompts, str):
            raise SamplerError("sample: prompts must be a sequence of strings, not one string")
        encoded = [self.encode(p) for p in prompts]
        for i, e in enumerate(encoded):
            if not e:
                raise SamplerError(
                    f"sample: prompt {i} encodes to zero tokens and the tokenizer adds no BOS; "
                    "cannot condition on an empty prompt"
                )
        return encoded

    def _completion(
        self, prompt_ids: list[int], cut: tuple[list[int], str, str | int | None], logprobs: list[float] | None
    ) -> Completion:
        ids, reason, why = cut
        return Completion(
            text=self.decode(ids),
            token_ids=ids,
            prompt_ids=list(prompt_ids),
            finish_reason=reason,
            logprobs=logprobs,
            stop_reason=why,
        )  # type: ignore[arg-type]

    def sample_seeded(
        self, prompts: Sequence[str], n: int, params: SamplingParams, seeds: Sequence[int | None]
    ) -> list[list[Completion]]:
        """Per-prompt sampling (``seed_scope="prompt"``) with the seeds given: prompt ``i``'s
        ``n`` rows are generated as one group (chunked by ``max_batch`` / ``max_batch_tokens``)
        under ``seeds[i]``. A pool sends each actor its share of a call with the seeds of the
        whole call, so occurrence counts stay those of the call."""
        encoded = self._encode_call(prompts, n, params)
        if len(seeds) != len(encoded):
            raise SamplerError(f"sample_seeded: {len(seeds)} seeds for {len(encoded)} prompts")
        result: list[list[Completion]] = []
        with _eval_no_grad(self.model):
            for e, seed in zip(encoded, seeds):
                with _seeded(seed, self.device):
                    gen: list[list[int]] = []
                    for chunk in self._chunks(list(range(n)), [len(e)] * n, params.max_new_tokens):
                        gen += self._generate_chunk([e] * len(chunk), params)
                    cut = [self._cut(g, params.stop) for g in gen]
                    lps = (
                        self.completion_logprobs([e] * n, [c[0] for c in cut]) if params.return_logprobs else [None] * n
                    )
                result.append([self._completion(e, c, lp) for c, lp in zip(cut, lps)])
        return result

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        """``n`` completions per prompt; outer list follows ``prompts``, inner holds the n samples."""
        if self.seed_scope == "prompt":
            return self.sample_seeded(prompts, n, params, prompt_seeds(params.seed, list(prompts)))
        encoded = self._encode_call(prompts, n, params)
        # one row per (prompt, sample); sorted by prompt length (stable) to reduce padding
        rows = [(pi, k) for pi in range(len(prompts)) for k in range(n)]
        order = sorted(range(len(rows)), key=lambda r: len(encoded[rows[r][0]]))
        gen_rows: dict[int, list[int]] = {}
        with _eval_no_grad(self.model), _seeded(params.seed, self.device):
            for chunk in self._chunks(order, [len(encoded[pi]) for pi, _ in rows], params.max_new_tokens):
                outs = self._generate_chunk([encoded[rows[r][0]] for r in chunk], params)
                for r, g in zip(chunk, outs):
                    gen_rows[r] = g
            cut = [self._cut(gen_rows[r], params.stop) for r in range(len(rows))]
            logprobs: list[list[float]] | None = None
            if params.return_logprobs and rows:
                logprobs = self.completion_logprobs([encoded[pi] for pi, _ in rows], [c[0] for c in cut])
        result: list[list[Completion]] = [[] for _ in prompts]
        for r, (pi, _) in enumerate(rows):
            result[pi].append(self._completion(encoded[pi], cut[r], None if logprobs is None else logprobs[r]))
        return result
