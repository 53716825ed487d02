"""The Hydra override list that runs one coevolve GRPO phase as ``verl.trainer.main_ppo``.

Every field of the phase, the learner and ``backend.verl`` that has a verl counterpart is mapped
here, so a verl phase trains with the local learner's settings wherever verl can express them
(docs/verl.md lists the differences that remain). Key names are verl 0.9.1's
(``verl/trainer/config/ppo_trainer.yaml``); the verl lane checks the list with verl's own
config composition and ``validate_config``. ``backend.verl.extra_overrides`` come last, and
Hydra keeps the last value of a key, so a user can override any of these.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.errors import ConfigError
from coevolve.schema import verl_micro_batch, vllm_share

DUAL_CLIP_OFF = 1e9
"""``clip_ratio_c`` that never binds: the local learner has no dual clip (verl's default is 3)."""

REWARD_FN_NAME = "compute_score"


@dataclass(frozen=True)
class PhasePaths:
    """Where a verl phase's inputs and outputs live (all under the phase's work folder)."""

    model: Path  # HF folder of the role's weights at the start of the phase
    train_file: Path  # parquet rows (coevolve.verl.parquet)
    checkpoints: Path  # trainer.default_local_dir
    rollouts: Path  # trainer.rollout_data_dir (one <step>.jsonl per step)
    reward_module: Path  # coevolve/verl/reward.py


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    return hydra_quoted(str(v)) if isinstance(v, (str, Path)) else str(v)


_PLAIN = re.compile(r"[\w./:@+-]*", re.ASCII)


def hydra_quoted(text: str) -> str:
    """``text`` as one Hydra override value that OmegaConf resolves back to ``text``: plain
    when it is only word characters and ``./:@+-``, else single-quoted with quotes escaped,
    backslashes before a quote, the end or ``${`` doubled, and ``${`` escaped, so a run folder
    named ``a=b,c``, ``it's`` or ``${x}`` is neither split nor interpolated."""
    if _PLAIN.fullmatch(text):
        return text
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    body = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", body)
    return f"'{body}'"


def default_commands(verl: Any) -> tuple[list[str], list[str]]:
    """``backend.verl.main`` / ``merger``, or verl's modules run by ``backend.verl.python``."""
    py = verl.python or sys.executable
    main = list(verl.main) if verl.main else [py, "-m", "verl.trainer.main_ppo"]
    merger = list(verl.merger) if verl.merger else [py, "-m", "verl.model_merger"]
    for name, cmd in (("backend.verl.main", main), ("backend.verl.merger", merger)):
        if not cmd or not all(isinstance(c, str) and c for c in cmd):
            raise ConfigError(f"{name}: must be a non-empty list of command words, got {cmd!r}")
    return main, merger


def phase_overrides(
    *,
    phase: Any,
    learner: Any,
    verl: Any,
    engine: Any,
    temperature: float,
    top_p: float,
    top_k: int,
    max_new_tokens: int,
    max_prompt_tokens: int,
    paths: PhasePaths,
    experiment: str,
    seed: int,
) -> list[str]:
    """``key=value`` overrides of ``main_ppo`` for one GRPO phase.

    ``phase`` is the ``GRPOPhase`` (steps, prompts_per_step, group_size), ``learner`` the run's
    ``LearnerConfig``, ``verl`` its ``VerlBackendConfig``, ``engine`` its ``EngineConfig`` (the
    rollout engines' tensor parallelism and GPU share, the run's Ray cluster); decoding values
    are the phase's resolved ones (``loop.sampling_params``); ``seed`` seeds verl's rollout
    engine (the phase's ``derive_seed(ctx.seed, "rollout")``, so a rerun of the phase draws the
    same). One optimiser step per rollout batch (``ppo_mini_batch_size = train_batch_size``)
    times ``epochs_per_batch``, as the local learner."""
    micro = _micro_batch(phase, learner, verl)
    kv = [
        ("algorithm.adv_estimator", "grpo"),
        ("algorithm.norm_adv_by_std_in_grpo", learner.scale_std),
        ("algorithm.use_kl_in_reward", False),
        *_data(phase, paths, max_prompt_tokens, max_new_tokens),
        *_actor(phase, learner, paths, micro),
        *_rollout(phase, verl, engine, temperature, top_p, top_k, seed, micro),
        ("reward.custom_reward_function.path", str(paths.reward_module)),
        ("reward.custom_reward_function.name", REWARD_FN_NAME),
        *_trainer(phase, verl, paths, experiment),
    ]
    if learner.gradient_checkpointing is not None:  # None = coevolve's auto; verl's default is on
        kv.append(("actor_rollout_ref.model.enable_gradient_checkpointing", learner.gradient_checkpointing))
    if learner.max_tokens_per_micro_batch:  # micro-batches by tokens (verl: dynamic batch size; rollout / ref follow)
        kv += [
            ("actor_rollout_ref.actor.use_dynamic_bsz", True),
            ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", learner.max_tokens_per_micro_batch),
        ]
    address = getattr(getattr(engine, "ray", None), "address", None)
    if address:  # the run's Ray cluster (engine.ray.address): verl's job joins it too
        kv.append(("+ray_kwargs.ray_init.address", address))
    return [f"{k}={_fmt(v)}" for k, v in kv] + list(verl.extra_overrides)


def _micro_batch(phase: Any, learner: Any, verl: Any) -> int:
    """verl's micro-batch per GPU for the phase's rollouts over ``nnodes x n_gpus_per_node``; a
    ``ConfigError`` for what verl cannot run (LoRA, rollouts that do not divide over the GPUs)."""
    if learner.lora:
        raise ConfigError(
            "backend=verl: learner.lora is not mapped to verl yet (use backend=local, or set verl's "
            "actor_rollout_ref.model.lora_rank in backend.verl.extra_overrides)"
        )
    world = verl.nnodes * verl.n_gpus_per_node
    micro = verl_micro_batch(phase.prompts_per_step * phase.group_size, world, learner.micro_batch_size)
    if micro is None:  # the run's preflight refuses this first (coevolve.plan.layouts.verl_batch_problems)
        raise ConfigError(
            f"backend=verl: prompts_per_step x group_size = {phase.prompts_per_step * phase.group_size} "
            f"rollouts per step must divide over the {world} GPUs of backend.verl.nnodes x n_gpus_per_node"
        )
    return micro


def _data(phase: Any, paths: PhasePaths, max_prompt_tokens: int, max_new_tokens: int) -> list[tuple[str, Any]]:
    """The phase's rows in order (no shuffle), one step = ``prompts_per_step`` rows."""
    return [
        ("data.train_files", str(paths.train_file)),
        ("data.val_files", str(paths.train_file)),
        ("data.train_batch_size", phase.prompts_per_step),
        ("data.max_prompt_length", max_prompt_tokens),
        ("data.max_response_length", max_new_tokens),
        ("data.shuffle", False),
        ("data.filter_overlong_prompts", False),
        ("data.truncation", "error"),
    ]


def _actor(phase: Any, learner: Any, paths: PhasePaths, micro: int) -> list[tuple[str, Any]]:
    """The local learner's optimiser and loss, as verl's actor: its aggregation (token-mean, or
    textbook GRPO's seq-mean-token-mean), its clip, no dual clip, KL as a loss term only when
    ``learner.beta_kl > 0``."""
    return [
        ("actor_rollout_ref.model.path", str(paths.model)),
        ("actor_rollout_ref.actor.optim.lr", learner.lr),
        ("actor_rollout_ref.actor.optim.weight_decay", learner.weight_decay),
        ("actor_rollout_ref.actor.optim.betas", list(learner.betas)),
        ("actor_rollout_ref.actor.grad_clip", learner.grad_clip),
        ("actor_rollout_ref.actor.clip_ratio_low", learner.eps_low),
        ("actor_rollout_ref.actor.clip_ratio_high", learner.eps_high),
        ("actor_rollout_ref.actor.clip_ratio_c", DUAL_CLIP_OFF),
        (
            "actor_rollout_ref.actor.loss_agg_mode",
            {"token-mean": "token-mean", "seq-mean": "seq-mean-token-mean"}[learner.loss_agg],
        ),
        ("actor_rollout_ref.actor.entropy_coeff", 0.0),
        ("actor_rollout_ref.actor.use_kl_loss", learner.beta_kl > 0),
        ("actor_rollout_ref.actor.kl_loss_coef", learner.beta_kl),
        ("actor_rollout_ref.actor.kl_loss_type", "low_var_kl"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", phase.prompts_per_step),
        ("actor_rollout_ref.actor.ppo_epochs", learner.epochs_per_batch),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", micro),
    ]


def _rollout(
    phase: Any, verl: Any, engine: Any, temperature: float, top_p: float, top_k: int, seed: int, micro: int
) -> list[tuple[str, Any]]:
    """The phase's decoding, group size and seed; the rollout engines' tensor parallelism and GPU
    share are the run's engine settings (``engine.tensor_parallel_size``, ``vllm_share``)."""
    return [
        ("actor_rollout_ref.rollout.name", verl.rollout),
        ("actor_rollout_ref.rollout.n", phase.group_size),
        ("actor_rollout_ref.rollout.temperature", temperature),
        ("actor_rollout_ref.rollout.top_p", top_p),
        ("actor_rollout_ref.rollout.top_k", top_k if top_k > 0 else -1),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", int(getattr(engine, "tensor_parallel_size", 1))),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", vllm_share(engine, "verl")),
        ("actor_rollout_ref.rollout.seed", seed),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", micro),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", micro),
    ]


def _trainer(phase: Any, verl: Any, paths: PhasePaths, experiment: str) -> list[tuple[str, Any]]:
    """One epoch of ``phase.steps`` steps on ``nnodes x n_gpus_per_node``, one checkpoint at the end,
    rollouts dumped per step, no validation, no resume of an earlier job."""
    return [
        ("trainer.total_epochs", 1),
        ("trainer.total_training_steps", phase.steps),
        ("trainer.nnodes", verl.nnodes),
        ("trainer.n_gpus_per_node", verl.n_gpus_per_node),
        ("trainer.default_local_dir", str(paths.checkpoints)),
        ("trainer.rollout_data_dir", str(paths.rollouts)),
        ("trainer.save_freq", phase.steps),
        ("trainer.test_freq", -1),
        ("trainer.val_before_train", False),
        ("trainer.resume_mode", "disable"),
        ("trainer.logger", ["console", "file"]),
        ("trainer.project_name", "coevolve"),
        ("trainer.experiment_name", experiment),
    ]
