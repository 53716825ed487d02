"""A ``World``: where a run's questions, prompts and ground truth come from.

The recipes never ask "is this the toy world?": they ask the world. Two worlds exist:

* ``ToyWorld`` — the built-in arithmetic world: fresh labelled problems on every draw, a fixed
  held-out set, an exact oracle for any question (so pseudo-label accuracy and target hits are
  measured, not estimated), rule-based diagnosis from step traces, char-level prompts;
* ``RealWorld`` — a real model and a JSONL of labelled questions: no oracle, the benchmark
  registry for evaluation, the papers' prompts, an LLM diagnoser.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence

from coevolve.memory.diagnose import Diagnoser
from coevolve.memory.store import Cause
from coevolve.prompts import Prompter
from coevolve.types import Task


class World(Protocol):
    name: Literal["toy", "real"]
    prompter: Prompter
    default_benches: tuple[str, ...]
    default_diagnoser: Literal["trace", "llm"]
    rep_tokenizer: Literal["char", "whitespace"]
    chat_template: bool
    knows_truth: bool  # an oracle for every question and cause: accuracies are measured, not estimated

    def draw(self, rng: random.Random, n: int) -> list[Task]:
        """``n`` labelled training questions (the grpo baseline's data)."""
        ...

    def pool(self, rng: random.Random, size: int | None) -> list[Task]:
        """A fixed candidate pool of labelled questions (D²Evo's real data), distinct texts."""
        ...

    def excluded(self) -> frozenset[str]:
        """Normalised questions that must never be trained on (evaluation items)."""
        ...

    def oracle(self, question: str) -> str | None:
        """The exact answer of any question, when the world knows it (toy), else None."""
        ...

    def bench_tasks(self, bench: str, data_dir: Path | None, limit: int | None) -> list[Task] | None:
        """Tasks of a benchmark the world owns (the toy held-out set); None = use the registry."""
        ...

    def prompter_for(self, tokenizer: Any) -> Prompter:
        """Prompts for another model of this run (a judge, a diagnoser) with its tokenizer."""
        ...

    def trace_diagnoser(self) -> Diagnoser:
        """Rule-based diagnosis from step traces (toy world only)."""
        ...

    def shows_causes(self, question: str, causes: Sequence[Cause]) -> list[bool] | None:
        """Whether ``question`` exercises each cause (None when the world cannot tell)."""
        ...

    def true_cause(self, question: str, bad: str, good: str) -> str | None:
        """The cause a perfect diagnoser would name for this (r-, r+) pair (toy world only)."""
        ...


def base_model_path(model_cfg: Any, say: Callable[[str], None]) -> Path:
    """The configured HF folder, or the toy base model (built once and cached)."""
    if model_cfg.path:
        return Path(model_cfg.path)
    from coevolve.toy import ensure_base

    cache = Path(model_cfg.toy_cache) if model_cfg.toy_cache else None
    say(f"toy base model (steps={model_cfg.toy_steps}, seed={model_cfg.toy_seed}): building or reusing the cache")
    return ensure_base(cache, steps=model_cfg.toy_steps, seed=model_cfg.toy_seed)


def make_world(cfg: Any, tokenizer: Any, say: Callable[[str], None]) -> World:
    """The world a recipe config describes: the toy world when ``model.path`` is unset (fresh
    problems, or a JSONL of toy problems as ``data.source``), else a real model with
    ``data.source`` (a JSONL file, or no labelled data for label-free recipes)."""
    if cfg.model.path is None:
        from coevolve.world.real import load_labelled
        from coevolve.world.toy import ToyWorld

        tasks = load_labelled(cfg.data, say) if cfg.data.source != "toy" else None
        return ToyWorld(levels=tuple(cfg.data.toy_levels), heldout_size=cfg.eval.heldout_size,
                        exclude_heldout=cfg.data.exclude_heldout, tasks=tasks)
    from coevolve.world.real import RealWorld

    return RealWorld.from_config(cfg, tokenizer, say)




def world_of_model(path: str | Path, tokenizer: Any, chat_template: bool | None = None, heldout_size: int = 500) -> World:
    """The world a saved model belongs to, for evaluating it with the prompts it was trained on:
    a checkpoint's ``coevolve.json`` says so; a toy base has ``toy_build.json``; anything else is
    a real model (chat template off unless asked: base models continue plain text)."""
    import json

    p = Path(path)
    meta: dict[str, Any] = {}
    if (p / "coevolve.json").is_file():
        meta = json.loads((p / "coevolve.json").read_text(encoding="utf-8"))
    if meta.get("world") == "toy" or (not meta and (p / "toy_build.json").is_file()):
        from coevolve.world.toy import ToyWorld

        return ToyWorld(heldout_size=heldout_size)
    from coevolve.prompts.chat import ChatPrompter
    from coevolve.world.real import RealWorld

    use_chat = bool(meta.get("chat_template", False)) if chat_template is None else chat_template
    return RealWorld(ChatPrompter(tokenizer, use_chat_template=use_chat), [], "none", use_chat)


__all__ = ["World", "base_model_path", "make_world", "world_of_model"]
