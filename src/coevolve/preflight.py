"""Checks before any work starts or any folder is made: a run that cannot be meaningful is refused
with the field to change named (paths that do not exist, an engine that is not installed, answer
budgets that cut answers before their final answer, labelled data missing, a model that does not
fit the device: ``coevolve.plan``)."""

from __future__ import annotations

from pathlib import Path

from coevolve.config.base import RecipeConfig, is_toy_model
from coevolve.engine import check_engine
from coevolve.errors import ConfigError, DataError, ModelLoadError
from coevolve.plan import preflight_problems


def preflight(cfg: RecipeConfig) -> None:
    """Cheap checks of the paths a run needs, before any work starts or any folder is made."""
    paths = [("model.path", cfg.model.path)] + [
        (f"{name}.{field}", getattr(getattr(cfg, name), field, None))
        for name in type(cfg).model_fields for field in ("model_path", "judge_model_path")
        if isinstance(getattr(getattr(cfg, name), field, None), str)]
    for where, p in paths:
        if p is None:
            continue
        if not Path(p).exists():
            raise ModelLoadError(f"{where}: model path {p} does not exist")
        if not (Path(p) / "config.json").is_file():
            raise ModelLoadError(f"{where}: {p} is not a Hugging Face model folder (no config.json)")
    if cfg.data.source not in ("toy", "skill") and not Path(cfg.data.source).is_file():
        raise DataError(f"data.source: dataset file {cfg.data.source} does not exist")
    check_engine(cfg.engine)
    problems = budget_problems(cfg) + preflight_problems(cfg)  # preflight_problems: does it fit in memory (coevolve.plan)
    if problems:
        raise ConfigError("this run cannot be meaningful:\n  " + "\n  ".join(problems))


MIN_REAL_ANSWER_TOKENS = 256
"""A real model's step-by-step answer to a math question runs to hundreds of tokens; a training
budget below this cuts most answers before their ``\\boxed{}`` (pass rates ~0, nothing to learn)."""
MIN_REAL_QUESTION_TOKENS = 64


def budget_problems(cfg: RecipeConfig) -> list[str]:
    """Settings that cannot produce a meaningful run, each naming the field to change: an eval
    budget far below the benchmarks' typical solution length, and (real models) training answer
    or question budgets that would cut most outputs."""
    from coevolve.eval.benchmarks import resolve_benches

    out = []
    real = cfg.model.path is not None and not is_toy_model(cfg.model.path)
    benches = resolve_benches(cfg.eval.benches or (["math7"] if real else ["skill"] if cfg.data.source == "skill"
                                                   else ["toy"]))
    short = [b for b in benches if cfg.eval.max_new_tokens < b.answer_tokens // 2]
    if short:
        need = max(b.answer_tokens for b in short)
        out.append(f"eval.max_new_tokens={cfg.eval.max_new_tokens} is far below the typical solution length on "
                   + ", ".join(f"{b.name} (~{b.answer_tokens} tokens)" for b in short)
                   + f": answers would be cut before their final answer; set eval.max_new_tokens >= {need}")
    if real:
        if cfg.sampling.max_new_tokens < MIN_REAL_ANSWER_TOKENS:
            out.append(f"sampling.max_new_tokens={cfg.sampling.max_new_tokens}: a real model's answers need "
                       f">= {MIN_REAL_ANSWER_TOKENS} tokens (the real presets use 4096)")
        for name in ("questioner", "challenger"):
            phase = getattr(cfg, name, None)
            cap = getattr(phase, "max_new_tokens", None)
            if cap is not None and cap < MIN_REAL_QUESTION_TOKENS:
                out.append(f"{name}.max_new_tokens={cap}: a real model needs >= {MIN_REAL_QUESTION_TOKENS} tokens "
                           "to write a question")
        if cfg.data.source == "toy" and cfg.recipe in ("grpo", "d2evo"):
            out.append(f"data.source: the {cfg.recipe} recipe on a real model needs labelled questions; give a JSONL / "
                       "JSONL.gz file (e.g. data.source=.../math_train12k/train.jsonl.gz)")
    return out
