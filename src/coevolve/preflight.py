"""Checks before any work starts or any folder is made: a run that cannot be meaningful is refused
with the field to change named (paths that do not exist, data that cannot give questions, a chat
template that is not there, a device or a verl that is not here, an engine that is not installed,
answer budgets that cut answers before their final answer, labelled data missing, a model that
does not fit the device: ``coevolve.plan``, a skill base that fails its premise gate:
``data.skill.gate``); a frozen model the run's vLLM engine cannot serve is
named, with how it will run instead (``engine.servable``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.config.base import RecipeConfig, is_toy_model
from coevolve.data.sources import GENERATED, check_source
from coevolve.engine import check_engine, load_tokenizer
from coevolve.engine.servable import unservable_frozen
from coevolve.errors import ConfigError, DataError, ModelLoadError
from coevolve.extras import check_extras
from coevolve.jsonl import iter_jsonl
from coevolve.plan import preflight_problems
from coevolve.prompts.chat import ChatPrompter
from coevolve.recipes.registry import recipe_of
from coevolve.reward_function import check_function
from coevolve.rl.learner import OPTIM_FILE, STATE_JSON
from coevolve.schema import WriterReward
from coevolve.world import base_model_path, read_checkpoint_meta
from coevolve.world.facts import WORLDS, world_of_config
from coevolve.world.skill.gate import check_base_gate
from coevolve.world.skill.problems import DeficitProfile


def preflight(cfg: RecipeConfig, say: Callable[[str], None] = print) -> list[str]:
    """Cheap checks before any work starts or any folder is made. Missing paths and engines are
    errors; settings that cannot give a meaningful run (``budget_problems``, the memory plan) are
    refused too, unless ``run.preflight=warn`` (``coevolve run --force``): then they are printed as
    warnings and returned, and the run goes ahead. ``coevolve plan`` makes every refusal of these
    that does not depend on this machine (``plan_checks``)."""
    check_extras(cfg)  # first: before a built-in model is built or anything is loaded
    check_diagnoser(cfg)
    check_model_paths(cfg, say)
    check_skill_gate(cfg, say)
    check_inputs(cfg, check_data(cfg))
    check_engine(cfg.engine)
    for field, path, differs in unservable_frozen(cfg):
        say(
            f"note: {field}={path}: the vLLM engine built for model.path cannot serve it ({'; '.join(differs[:4])}); "
            f"it runs on hf on {cfg.model.device}, in CPU memory between the phases that use it (coevolve plan "
            "counts it there)"
        )
    # the last: does it fit (coevolve.plan)
    problems = refuse_or_warn(cfg, budget_problems(cfg) + backend_problems(cfg) + preflight_problems(cfg), say)
    absent = absent_general_benches(cfg)
    if absent:
        say(
            f"note: no data file for {', '.join(absent)} (eval.data_dir or $COEVOLVE_DATA): the evaluation will skip "
            "them, saying so, unless the Hugging Face hub is reachable; their group averages then cover the rest"
        )
    return problems


def plan_checks(cfg: RecipeConfig, say: Callable[[str], None] = print) -> list[str]:
    """``coevolve plan``'s share of the preflight: every refusal of the settings themselves (the
    diagnoser, the settings that cannot give a meaningful run: ``budget_problems``,
    ``backend_problems``), made as ``coevolve run`` makes it, so a plan that says "fits" is of a
    run that starts. Not here: what lives on the machine the run starts on (files, extras,
    engines, devices, tokenizers), since a plan is often made elsewhere."""
    check_diagnoser(cfg)
    return refuse_or_warn(cfg, budget_problems(cfg) + backend_problems(cfg), say)


def refuse_or_warn(cfg: RecipeConfig, problems: list[str], say: Callable[[str], None]) -> list[str]:
    """``problems`` refused in one message (``run.preflight=refuse``), or printed as warnings."""
    if problems and cfg.run.preflight == "refuse":
        raise ConfigError(
            "this run cannot be meaningful:\n  "
            + "\n  ".join(problems)
            + "\n(to run it anyway: coevolve run --force, or run.preflight=warn)"
        )
    for p in problems:
        say(f"warning (run.preflight=warn): {p}")
    return problems


def check_model_paths(cfg: RecipeConfig, say: Callable[[str], None]) -> None:
    """``model.path`` and every section's ``model_path`` / ``judge_model_path`` are Hugging Face
    model folders here (a built-in name built offline, once; a Hub id from the local cache)."""
    from coevolve.warmstart import ensure_model  # lazy: pulls scipy

    paths = [("model.path", cfg.model.path)] + [
        (f"{name}.{field}", getattr(getattr(cfg, name), field, None))
        for name in type(cfg).model_fields
        for field in ("model_path", "judge_model_path")
        if isinstance(getattr(getattr(cfg, name), field, None), str)
    ]
    for where, p in paths:
        if p is None or (where == "diagnoser.model_path" and cfg.diagnosis_model_path() is None):  # type: ignore[attr-defined]
            continue
        ensure_model(p, say)  # a built-in model name (model.path=smollm2) is built offline, once
        if not Path(p).exists():
            hint = (
                (
                    "; download it where the Hub is reachable (`hf download " + p + "` fills the local Hugging Face "
                    "cache) or give its folder, or set diagnoser.self_diagnosis=true to let the solver diagnose its "
                    "own failures (a deviation from the paper)"
                )
                if where == "diagnoser.model_path"
                else ""
            )
            raise ModelLoadError(
                f"{where}: model path {p} does not exist"
                + (" here nor in the local Hugging Face cache" + hint if hint else "")
            )
        if not (Path(p) / "config.json").is_file():
            raise ModelLoadError(f"{where}: {p} is not a Hugging Face model folder (no config.json)")


def check_skill_gate(cfg: RecipeConfig, say: Callable[[str], None]) -> None:
    """A skill-world run's base passes its premise gate (``coevolve.world.skill.gate``;
    ``data.skill.gate``): the built-in skill base (built here when not cached, as the run would
    build it, so that a refused run leaves nothing behind) or ``model.path`` when it is a skill base
    folder (``skill_build.json``). A checkpoint of a skill run is not re-gated: its base was."""
    sk = cfg.data.skill
    if cfg.data.source != "skill" or sk.gate == "ignore":
        return
    from coevolve.world.skill.pretrain import BUILD_FILE  # lazy: pulls transformers, torch

    base = Path(cfg.model.path) if cfg.model.path else base_model_path(cfg.model, say, cfg.data)
    f = base / BUILD_FILE
    if not f.is_file():
        return
    info = json.loads(f.read_text(encoding="utf-8"))
    profile = DeficitProfile.of(info.get("profile") or sk.deficits)  # the rates the base was built with
    check_base_gate(base, info, profile, sk.gate_thresholds, sk.gate, say)


def absent_general_benches(cfg: RecipeConfig) -> list[str]:
    """The general benchmarks the run evaluates whose data is not here (they are not shipped)."""
    from coevolve.eval.benchmarks import find_data_file  # lazy: pulls scipy

    data_dir = Path(cfg.eval.data_dir) if cfg.eval.data_dir else None
    return [b.name for b in evaluated_benches(cfg) if b.category == "general" and find_data_file(b, data_dir) is None]


def real_world(cfg: RecipeConfig) -> bool:
    """A real model on real (or no) data: neither the toy model nor the arith / skill worlds."""
    return cfg.model.path is not None and not is_toy_model(cfg.model.path) and cfg.data.source not in ("arith", "skill")


def check_diagnoser(cfg: RecipeConfig) -> None:
    """DiagEvo on a real model diagnoses with a frozen instruct model (the paper: Qwen3-4B-Instruct-
    2507), not the policy under training: refuse a run that names none unless self-diagnosis is
    chosen explicitly. The toy, arith and skill worlds keep their own diagnosers."""
    if cfg.recipe != "diagevo" or not real_world(cfg) or not cfg.memory.enabled:  # type: ignore[attr-defined]
        return
    d = cfg.diagnoser  # type: ignore[attr-defined]
    if d.kind != "trace" and d.model_path is None and not d.self_diagnosis:
        raise ConfigError(
            "diagnoser.model_path: a real-model DiagEvo run diagnoses its failures with a frozen instruct model "
            "(the paper: Qwen3-4B-Instruct-2507) and none is set; set diagnoser.model_path=<model folder or cached Hub "
            "id> (e.g. Qwen/Qwen3-4B-Instruct-2507), or diagnoser.self_diagnosis=true to let the solver under "
            "training diagnose its own failures (a deviation from the paper)"
        )


def check_data(cfg: RecipeConfig) -> list[Any]:
    """What a run reads, wherever it runs: the labelled data (every row, as the run will read
    them; returned), the reward function and the user's benchmark files."""
    tasks = check_source(cfg.data)[0] if cfg.data.source not in GENERATED else []
    check_reward(cfg)
    check_user_benches(cfg)
    return tasks


def check_inputs(cfg: RecipeConfig, tasks: list[Any] | None = None) -> None:
    """Where a run runs, tried now rather than after its folder exists: the chat template, the
    questions against the model's context (``tasks``: ``check_data``'s, read when not given), the
    device, verl's interpreter and a checkpoint to start from."""
    tasks = check_data(cfg) if tasks is None else tasks
    real = cfg.model.path is not None and not is_toy_model(cfg.model.path)
    if real and cfg.model.chat_template:
        if not getattr(load_tokenizer(cfg.model.path), "chat_template", None):
            raise ConfigError(
                f"model.chat_template=true but the tokenizer of {cfg.model.path} has no chat template "
                "(a base model: set model.chat_template=false, its prompts are plain text)"
            )
    if real and tasks and not cfg.data.drop_too_long:
        check_context(cfg, tasks)
    check_device(cfg.model.device)
    if cfg.backend.kind == "verl":
        check_verl(cfg.backend.verl)
    if cfg.learner.resume_from_checkpoint:
        check_resume_checkpoint(cfg)


def check_reward(cfg: RecipeConfig) -> None:
    """``reward.function`` loads and scores a probe with one number (``reward_function``); verl's
    reward workers grade with their own math grader, so it needs ``backend=local``."""
    if not cfg.reward.function:
        return

    if cfg.backend.kind != "local":
        raise ConfigError(
            f"reward.function with backend={cfg.backend.kind}: verl's reward workers grade with the math grader; "
            "use backend=local"
        )
    check_function(cfg.reward.function)


def check_user_benches(cfg: RecipeConfig) -> None:
    """A user's benchmark file in ``eval.benches`` is read now, every row, as the evaluation will."""
    from coevolve.eval.benchmarks import load_tasks  # lazy: pulls scipy

    for b in evaluated_benches(cfg):
        if b.source is not None:
            load_tasks(b)


def check_context(cfg: RecipeConfig, tasks: list[Any]) -> None:
    """Refuse labelled questions the model cannot take: a rendered solver prompt plus the answer
    budget over the model's context, the first such row named (``data.drop_too_long`` drops them)."""
    from coevolve.world.real import answer_budget, model_context, too_long, too_long_message  # lazy: pulls scipy

    context = model_context(cfg)
    if context is None:
        return
    prompter = ChatPrompter(
        load_tokenizer(cfg.model.path),
        use_chat_template=cfg.model.chat_template,
        enable_thinking=cfg.model.enable_thinking,
        prompts=cfg.prompts,
    )
    over = too_long(tasks, prompter, context[0], answer_budget(cfg)[0])
    if over:
        raise DataError(too_long_message(cfg, over, context))


def check_resume_checkpoint(cfg: RecipeConfig) -> None:
    """``learner.resume_from_checkpoint`` names a coevolve checkpoint this run's solver can start
    from: weights, optimiser state and step present, trained in this run's world, with the same
    ``learner.lora`` (the trainable parameters themselves are compared when it is loaded)."""
    import json

    field = f"learner.resume_from_checkpoint={cfg.learner.resume_from_checkpoint}"
    d = Path(cfg.learner.resume_from_checkpoint).expanduser()
    if not d.is_dir():
        raise ConfigError(f"{field}: no such folder (a run's checkpoint: RUN/checkpoints/solver_rNN)")
    if cfg.backend.kind != "local":
        raise ConfigError(
            f"{field}: backend={cfg.backend.kind} trains with its own optimiser; starting from a "
            "checkpoint's optimiser state needs backend=local (for the weights alone: model.path)"
        )
    missing = [f for f in (OPTIM_FILE, STATE_JSON) if not (d / f).is_file()]
    if missing:
        raise ConfigError(
            f"{field}: the folder has no {' or '.join(missing)}, so no optimiser state to start from (an "
            "older checkpoint of the run keeps only its weights: use the newest, or model.path for the "
            "weights alone)"
        )
    world = world_of_config(cfg).name
    trained_in = read_checkpoint_meta(d).get("world")
    if trained_in is not None and trained_in != world:
        raise ConfigError(
            f"{field}: the checkpoint was trained in the {trained_in} world, this run is in the {world} "
            "world (model.path and data.source decide it)"
        )
    saved_lora = bool(json.loads((d / STATE_JSON).read_text(encoding="utf-8")).get("config", {}).get("lora", False))
    if saved_lora != cfg.learner.lora:
        raise ConfigError(
            f"{field}: the checkpoint was trained with learner.lora={str(saved_lora).lower()}, this run "
            f"has learner.lora={str(cfg.learner.lora).lower()}: its optimiser state is for other "
            "parameters"
        )


def check_device(device: str) -> None:
    """``model.device`` names a device this machine has (``cuda:N`` within its GPU count)."""
    if device in ("auto", "cpu"):
        return
    import torch

    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= n:
            raise ConfigError(
                f"model.device={device}: this machine has {n} CUDA device(s)"
                + ("; use model.device=cpu or auto" if n == 0 else f" (cuda:0..cuda:{n - 1})")
            )
    elif device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("model.device=mps: no Apple GPU (MPS) here; use model.device=cpu or auto")


def check_verl(verl: Any) -> None:
    """``backend=verl`` needs verl importable by ``backend.verl.python`` (unless ``backend.verl.main``
    names the trainer command itself)."""
    import subprocess
    import sys

    if verl.main:
        return
    py = verl.python or sys.executable
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('verl') else 3)"
    try:
        res = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"backend=verl: backend.verl.python={py} cannot be run ({e})") from None
    if res.returncode == 3:
        raise ConfigError(
            f"backend=verl: verl is not installed for {py}; install it there (docs/verl.md) or point "
            "backend.verl.python at the interpreter of verl's environment"
        )
    if res.returncode != 0:
        raise ConfigError(f"backend=verl: backend.verl.python={py} failed: {res.stderr.strip()[-300:]}")


MIN_REAL_ANSWER_TOKENS = 256
"""A real model's step-by-step answer to a math question runs to hundreds of tokens; a training
budget below this cuts most answers before their ``\\boxed{}`` (pass rates ~0, nothing to learn)."""
MIN_REAL_QUESTION_TOKENS = 64


def evaluated_benches(cfg: RecipeConfig) -> list[Any]:
    """The benchmarks the run will evaluate: ``eval.benches``, or the world's default
    (``WORLDS``: toy, skill, arith, math7 for a real model). A toy or skill model given as
    ``model.path`` on real data is measured with the toy set's lengths: it cannot write a math
    solution at any budget, so the real benchmarks' solution lengths would refuse every such run."""
    from coevolve.eval.benchmarks import resolve_benches  # lazy: pulls scipy

    facts = world_of_config(cfg)
    if facts.name == "real" and is_toy_model(cfg.model.path):
        facts = WORLDS["toy"]
    return resolve_benches(cfg.eval.benches or facts.default_benches)


def expected_answer_tokens(bench: Any, data_dir: str | None) -> int:
    """Typical solution length of ``bench`` in tokens: measured on its data when ``eval.data_dir``
    supplies the file and its rows carry a worked ``solution`` (median characters / 4, doubled:
    a model reasoning step by step writes more than a reference solution), else the registry's
    figure (``Benchmark.answer_tokens``)."""
    from coevolve.eval.benchmarks import find_data_file  # lazy: pulls scipy

    path = find_data_file(bench, Path(data_dir)) if data_dir else None
    if path is None:
        return bench.answer_tokens
    lengths = []
    for _, row in iter_jsonl(path):
        sol = row.get("solution")
        if isinstance(sol, str) and sol.strip():
            lengths.append(len(sol))
        if len(lengths) >= 2000:
            break
    if not lengths:
        return bench.answer_tokens
    lengths.sort()
    return max(16, 2 * lengths[len(lengths) // 2] // 4)


def budget_problems(cfg: RecipeConfig) -> list[str]:
    """Settings that cannot produce a meaningful run, each naming the field to change: an eval
    budget far below the typical solution length of the benchmarks evaluated, and (real models)
    training answer or question budgets that would cut most outputs."""
    out = []
    real = cfg.model.path is not None and not is_toy_model(cfg.model.path)
    need = {b.name: expected_answer_tokens(b, cfg.eval.data_dir) for b in evaluated_benches(cfg)}
    short = {b: n for b, n in need.items() if cfg.eval.max_new_tokens < n // 2}
    if short:
        out.append(
            f"eval.max_new_tokens={cfg.eval.max_new_tokens} is far below the typical solution length on "
            + ", ".join(f"{b} (~{n} tokens)" for b, n in short.items())
            + f": answers would be cut before their final answer; set eval.max_new_tokens >= {max(short.values())}"
        )
    if real:
        from coevolve.eval.benchmarks import get  # lazy: pulls scipy

        # the training answers are the world's: arith's are short, a real dataset's are math solutions
        answer = get("arith").answer_tokens if cfg.data.source == "arith" else MIN_REAL_ANSWER_TOKENS
        if cfg.sampling.max_new_tokens < answer:
            out.append(
                f"sampling.max_new_tokens={cfg.sampling.max_new_tokens}: a real model's answers need "
                f">= {answer} tokens here (the real presets use 4096)"
            )
        recipe = recipe_of(cfg.recipe)
        for _step, _, work in recipe.work(cfg, toy=False):  # the writers' phases, as the recipe declares them
            tr = work.train
            cap = getattr(getattr(cfg, tr.section), "max_new_tokens", None) if tr is not None else None
            if tr is not None and tr.prompt == "question" and cap is not None and cap < MIN_REAL_QUESTION_TOKENS:
                out.append(
                    f"{tr.section}.max_new_tokens={cap}: a real model needs >= {MIN_REAL_QUESTION_TOKENS} "
                    "tokens to write a question"
                )
        if cfg.data.source == "toy" and recipe.needs_labels:
            out.append(
                f"data.source: the {cfg.recipe} recipe on a real model needs labelled questions; give a JSONL / "
                "JSONL.gz file (e.g. data.source=.../math_train12k/train.jsonl.gz) or data.source=arith"
            )
    return out


def backend_problems(cfg: RecipeConfig) -> list[str]:
    """Rewards the configured backend cannot compute as stated: under ``backend=verl`` a reward
    with a term over the whole batch (R-Zero's repetition penalty; ``batch_level_terms``)."""
    if cfg.backend.kind != "verl":
        return []
    out = [
        f"{f}=rzero with backend=verl: R-Zero's repetition penalty clusters the whole batch and verl's reward "
        "workers score one sample at a time; use backend=local, or reward kind plateau"
        for f in batch_level_terms(cfg)
    ]
    return out


def batch_level_terms(cfg: RecipeConfig) -> list[str]:
    """The reward sections of ``cfg``'s training phases whose reward has a term over the whole
    batch (R-Zero's repetition penalty), as ``section.reward.kind`` field names: verl's reward
    workers score one sample at a time and cannot compute it."""
    out = []
    for _, _, work in recipe_of(cfg.recipe).work(cfg, toy=True):
        section = getattr(cfg, work.train.section, None) if work.train is not None else None
        reward = getattr(section, "reward", None)
        if isinstance(reward, WriterReward) and reward.kind == "rzero":
            out.append(f"{work.train.section}.reward.kind")  # type: ignore[union-attr]
    return out
