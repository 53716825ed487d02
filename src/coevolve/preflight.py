"""Checks before any work starts or any folder is made: a run that cannot be meaningful is refused
with the field to change named (paths that do not exist, data that cannot give questions, a chat
template that is not there, a device or a verl that is not here, an engine that is not installed,
answer budgets that cut answers before their final answer, labelled data missing, a model that
does not fit the device: ``coevolve.plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.config.base import RecipeConfig, is_toy_model
from coevolve.engine import check_engine
from coevolve.errors import ConfigError, ModelLoadError
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
    check_inputs(cfg)
    check_engine(cfg.engine)
    problems = budget_problems(cfg) + preflight_problems(cfg)  # preflight_problems: does it fit in memory (coevolve.plan)
    if problems:
        raise ConfigError("this run cannot be meaningful:\n  " + "\n  ".join(problems))


def check_inputs(cfg: RecipeConfig) -> None:
    """What a run reads and where it runs, read or tried now rather than after its folder exists:
    the labelled data (every row, as the run will read them), the chat template, the device,
    and verl's interpreter."""
    from coevolve.data.sources import GENERATED, check_source

    if cfg.data.source not in GENERATED:
        check_source(cfg.data)
    real = cfg.model.path is not None and not is_toy_model(cfg.model.path)
    if real and cfg.model.chat_template:
        from coevolve.engine import load_tokenizer

        if not getattr(load_tokenizer(cfg.model.path), "chat_template", None):
            raise ConfigError(f"model.chat_template=true but the tokenizer of {cfg.model.path} has no chat template "
                              "(a base model: set model.chat_template=false, its prompts are plain text)")
    check_device(cfg.model.device)
    if cfg.backend.kind == "verl":
        check_verl(cfg.backend.verl)


def check_device(device: str) -> None:
    """``model.device`` names a device this machine has (``cuda:N`` within its GPU count)."""
    if device in ("auto", "cpu"):
        return
    import torch

    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= n:
            raise ConfigError(f"model.device={device}: this machine has {n} CUDA device(s)"
                              + ("; use model.device=cpu or auto" if n == 0 else f" (cuda:0..cuda:{n - 1})"))
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
        raise ConfigError(f"backend=verl: verl is not installed for {py}; install it there (docs/verl.md) or point "
                          "backend.verl.python at the interpreter of verl's environment")
    if res.returncode != 0:
        raise ConfigError(f"backend=verl: backend.verl.python={py} failed: {res.stderr.strip()[-300:]}")


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
    benches = resolve_benches(cfg.eval.benches or (["math7"] if real else ["toy"]))
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
