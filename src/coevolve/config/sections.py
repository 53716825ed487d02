"""The config's section models: one pydantic model per section (model, data, sampling, engine,
backend, eval, reward, run) and ``RecipeConfig``, the fields and cross-field rules every recipe
shares. Loading them from YAML and ``key=value`` overrides is ``config.load``.

Why pydantic: it gives us unknown-key rejection (``extra="forbid"``), type coercion with
precise error locations, and ``Literal`` choices, so a malformed config fails with a message
that names the field instead of crashing an hour into a run.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from coevolve.engine.config import EngineConfig
from coevolve.errors import ConfigError
from coevolve.prompts.spec import PromptsConfig
from coevolve.rl.learner_config import LearnerConfig
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
    solver_api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the API key of the solver_url server "
        "(`vllm serve --api-key`), sent as a bearer token by the check and the reward workers, which "
        "inherit the variable; the key itself is in no config, spec file or log. None = no key.",
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
            from coevolve.eval.benchmarks import resolve_benches  # lazy: pulls scipy

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
    save_every: int = Field(
        0,
        ge=0,
        description="Mid-phase saves (ours; TRL's save_steps, verl's save_freq): every this many GRPO steps of a "
        "phase trained by backend=local (the learner, the phase's book, the random states), and every this many "
        "questions sampled by a phase that does not train (difficulty, buffer, evaluation ...: its sampler calls, "
        "replayed on resume); a resumed run goes on from the last save with the result of a run never "
        "interrupted. 0 = only the phase-boundary checkpoints.",
    )
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
        from coevolve.eval.signals import parse_select  # lazy: pulls scipy

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
