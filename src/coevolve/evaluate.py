"""``coevolve eval``: a saved or served model evaluated as a run of its world evaluates.

The driver (``coevolve.eval.suite.evaluate_suite``) measures any sampler and knows no world; this
module, above the worlds and the config, picks what a model's world asks for: its prompts
(``world_of_model``), its default benchmarks and its evaluation defaults (``WORLDS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coevolve.answers import Grader
from coevolve.config.base import EngineConfig, EvalConfig, real_preset
from coevolve.engine.remote import RemoteSolver, check_served_model, redacted
from coevolve.errors import DataError
from coevolve.eval.benchmarks import load_tasks, resolve_benches
from coevolve.eval.suite import evaluate_suite
from coevolve.prompts.chat import ChatPrompter
from coevolve.reward_function import FunctionGrader, check_function
from coevolve.run import derive_seed
from coevolve.world import WORLDS, read_checkpoint_meta, world_of_model
from coevolve.world.real import RealWorld


def run_eval(world: str) -> Any:
    """The evaluation section (``EvalConfig``) a run in ``world`` has unless told otherwise, from
    the world's table (``coevolve.world.facts.WORLDS``): the config's defaults in the toy world, the
    skill presets' in the skill world (4 samples, 80 tokens), the SmolLM2 arith presets' in the
    arith world (greedy, 48 tokens), the real-model preset's otherwise (greedy, mean@32 on AIME /
    AMC, 4096 tokens), so ``coevolve eval`` measures a model as its runs do."""

    fields = WORLDS[world].eval
    return EvalConfig.model_validate(real_preset("grpo").get("eval", {}) if fields is None else dict(fields))


def evaluate_model(
    model: str | Path | None,
    benches: Sequence[str] | None,
    *,
    out_dir: Path,
    limit: int | None = None,
    samples: int | None = None,
    max_new_tokens: int | None = None,
    data_dir: Path | None = None,
    chat_template: bool | None = None,
    seed: int | None = None,
    batch_size: int = 256,
    samples_by_bench: dict[str, int] | None = None,
    progress: bool = True,
    engine: str = "hf",
    endpoint: str | None = None,
    served_model: str | None = None,
    concurrency: int = 16,
    repeats: int | None = None,
    reward_function: str | None = None,
    api_key_env: str | None = None,
    timeout: float = 300.0,
    deadline: float | None = 600.0,
) -> dict[str, Any]:
    """What ``coevolve eval`` runs: a saved model (a base model, a checkpoint, an exported folder)
    loaded with ``engine`` (hf or vllm), or a model served at ``endpoint`` (OpenAI-compatible, its
    name ``served_model``; its key in the environment variable ``api_key_env``, each request
    ``timeout`` seconds an attempt and ``deadline`` in all), prompted as its world does
    (``world_of_model``: a served model's folder ``model`` gives its prompt form and tokenizer; without it the prompts are plain text), graded
    by the run's grader (``reward_function``: a run's ``reward.function``); ``out_dir`` gets the
    results. ``samples``, ``max_new_tokens``, ``repeats``
    (evaluation runs, mean ± std) and ``seed`` None = what a run of the model's world evaluates
    with (``run_eval``; the seed of a run with run.seed=0)."""

    check_eval_inputs(model, benches, repeats, reward_function)
    served = {"api_key_env": api_key_env, "timeout": timeout, "deadline": deadline}
    sampler, world = _eval_model(model, chat_template, batch_size, engine, endpoint, served_model, concurrency, served)
    defaults = run_eval(world.name)
    samples = defaults.samples if samples is None else samples
    max_new_tokens = defaults.max_new_tokens if max_new_tokens is None else max_new_tokens
    repeats = defaults.repeats if repeats is None else repeats
    seed = derive_seed(0, "eval") if seed is None else seed
    meta = {
        **dict(model=None if model is None else str(model), world=world.name, chat_template=world.chat_template),
        "engine": "endpoint" if endpoint else engine,
        **({"endpoint": redacted(endpoint), "served_model": sampler.model} if endpoint else {}),
    }
    with FunctionGrader(reward_function) if reward_function else Grader() as grader:
        return evaluate_suite(
            sampler, world.prompter, list(benches or world.default_benches), grader=grader, samples=samples,
            max_new_tokens=max_new_tokens, seed=seed, limit=limit, data_dir=data_dir, bench_tasks=world.bench_tasks,
            out_dir=out_dir, samples_by_bench=samples_by_bench, progress=progress, meta=meta, repeats=repeats,
        )  # fmt: skip


def check_eval_inputs(
    model: str | Path | None, benches: Sequence[str] | None, repeats: int | None, reward_function: str | None
) -> None:
    """What ``evaluate_model`` refuses before spending minutes loading a model: a repeat count
    below 1, a benchmark typo or an absent benchmark file, a grading function that does not load,
    a damaged or newer ``coevolve.json``."""
    if repeats is not None and repeats < 1:
        raise DataError(f"--repeats must be >= 1 (evaluation runs), got {repeats}")
    for b in resolve_benches(benches) if benches else []:
        if b.source is not None:
            load_tasks(b)
    if reward_function:
        check_function(reward_function)
    if model is not None:
        read_checkpoint_meta(model)


def _eval_model(
    model: str | Path | None,
    chat_template: bool | None,
    batch_size: int,
    engine: str,
    endpoint: str | None,
    served_model: str | None,
    concurrency: int,
    served: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """(sampler, world) of ``evaluate_model``: a served model, or a folder loaded by ``engine``."""
    from coevolve.engine import (  # lazy: a test monkeypatches coevolve.engine.load_sampler
        load_sampler,
        load_tokenizer,
    )

    if endpoint is None:
        if model is None:
            raise DataError("give --model (a model folder) or --endpoint URL (a served model)")
        sampler = load_sampler(EngineConfig(kind=engine, max_batch=batch_size), str(model))
        return sampler, world_of_model(model, sampler.tokenizer, chat_template)

    what, hint = "evaluation server", "--endpoint; is the server running and reachable?"
    served = served or {}
    asked = {"api_key_env": served.get("api_key_env"), "deadline": served.get("deadline")}
    timeout = min(30.0, served.get("timeout", 30.0))  # a list of names: no generation to wait for
    name = check_served_model(endpoint, served_model, timeout, what=what, field="--served-model", hint=hint, **asked)
    sampler = RemoteSolver(endpoint, name, workers=concurrency, what=what, hint=hint, **served)
    if model is not None:
        return sampler, world_of_model(model, load_tokenizer(model), chat_template)
    if chat_template:
        raise DataError(
            "--chat-template with --endpoint needs --model: the served model's folder, whose tokenizer "
            "renders the chat prompts as in training"
        )

    return sampler, RealWorld(ChatPrompter(None, use_chat_template=False), [], "none", False)
