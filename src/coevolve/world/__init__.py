"""A ``World``: where a run's questions, prompts and ground truth come from.

The recipes never ask "is this the toy world?": they ask the world. Three worlds exist:

* ``ToyWorld`` — the built-in arithmetic world: fresh labelled problems on every draw, a fixed
  held-out set, an exact oracle for any question (so pseudo-label accuracy and target hits are
  measured, not estimated), rule-based diagnosis from step traces, char-level prompts;
* ``SkillWorld`` — the built-in skill world (``data.source=skill``): chains of seven primitive
  procedures, a base model with known, injected deficits, per-skill held-out strata, and the
  run scored against that ground truth (``run_summary``);
* ``RealWorld`` — a real model and a JSONL of labelled questions: no oracle, the benchmark
  registry for evaluation, the configured prompts, an LLM diagnoser;
* ``ArithWorld`` — a real model on natural-language arithmetic (``data.source=arith``): fresh
  labelled problems, the held-out benchmark ``arith``, an exact oracle for any arithmetic
  question (so a real-model run measures pseudo-label accuracy and writer validity).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from coevolve.errors import ModelLoadError
from coevolve.memory.diagnose import Diagnoser
from coevolve.memory.store import Cause
from coevolve.prompts import Prompter
from coevolve.prompts.chat import ChatPrompter
from coevolve.prompts.spec import PromptsConfig
from coevolve.types import Task
from coevolve.world.facts import WORLDS, WorldFacts, world_name, world_of_config
from coevolve.world.skill.problems import DeficitProfile


class World(Protocol):
    name: Literal["toy", "skill", "real", "arith"]
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

    def run_summary(self, run_dir: Path) -> dict[str, Any]:
        """What the world can say about a finished run beyond accuracy ({} when nothing): the skill
        world scores it against its injected deficits. Merged into summary.json."""
        ...


def base_model_path(model_cfg: Any, say: Callable[[str], None], data_cfg: Any = None) -> Path:
    """The configured HF folder, or the built-in base of the world (``data.source``: the skill base
    for ``skill``, else the toy base), built once and cached."""
    if model_cfg.path:
        return Path(model_cfg.path)
    cache = Path(model_cfg.toy_cache) if model_cfg.toy_cache else None
    if WORLDS[world_name(None, data_cfg.source if data_cfg is not None else "toy")].base_model == "skill":
        from coevolve.world.skill.pretrain import ensure_skill_base  # lazy: pulls transformers, torch

        sk = data_cfg.skill
        say(
            f"skill base model (deficits {sk.deficits}, steps={sk.base_steps}, seed={sk.base_seed}): building or "
            "reusing the cache"
        )
        return ensure_skill_base(
            cache / "skill" if cache else None,
            steps=sk.base_steps,
            seed=sk.base_seed,
            profile=DeficitProfile.of(sk.deficits),
        )
    from coevolve.world.toy import ensure_base  # lazy: pulls transformers, torch

    say(f"toy base model (steps={model_cfg.toy_steps}, seed={model_cfg.toy_seed}): building or reusing the cache")
    return ensure_base(cache, steps=model_cfg.toy_steps, seed=model_cfg.toy_seed)


def make_world(cfg: Any, tokenizer: Any, say: Callable[[str], None]) -> World:
    """The world a recipe config describes: the toy world when ``model.path`` is unset (fresh
    problems, a fixed set of ``data.limit`` of them, or a JSONL of toy problems as
    ``data.source``); for a real model the arith world (``data.source=arith``) or ``data.source``
    as a JSONL file (or no labelled data for label-free recipes). ``data.source=skill``
    is the skill world whatever the model (its base, or a checkpoint of a skill run)."""
    name = world_name(cfg.model.path, cfg.data.source)
    if name == "skill":
        from coevolve.world.skill.world import SkillWorld  # lazy: pulls transformers, torch

        return SkillWorld.from_config(cfg, say)
    if name == "toy":
        from coevolve.world.real import load_labelled  # lazy: pulls scipy
        from coevolve.world.toy import LEVELS, labelled_set  # lazy: pulls transformers, torch
        from coevolve.world.toy.world import ToyWorld  # lazy: pulls transformers, torch

        levels = list(cfg.data.levels or LEVELS)
        tasks = load_labelled(cfg.data, say) if cfg.data.source != "toy" else None
        if tasks is None and cfg.data.limit is not None:
            tasks = labelled_set(cfg.data.limit, levels, cfg.data.limit_seed)
            say(
                f"[data] toy world: a fixed labelled set of {len(tasks)} problems (levels {levels}, "
                f"seed {cfg.data.limit_seed})"
            )
        return ToyWorld(
            levels=tuple(levels),
            heldout_size=cfg.eval.heldout_size,
            exclude_heldout=cfg.data.exclude_heldout,
            tasks=tasks,
            prompts=cfg.prompts,
        )

    prompter = ChatPrompter(
        tokenizer,
        use_chat_template=cfg.model.chat_template,
        enable_thinking=cfg.model.enable_thinking,
        prompts=cfg.prompts,
    )
    if name == "arith":
        from coevolve.world.arith import ArithWorld  # lazy: pulls scipy

        return ArithWorld.from_config(cfg, prompter, say)
    from coevolve.world.real import RealWorld  # lazy: pulls scipy

    return RealWorld.from_config(cfg, prompter, say)


CHECKPOINT_META = "coevolve.json"
"""Written into every checkpoint: which world and prompt form the model was trained with, so
``coevolve eval --model <checkpoint>`` prompts it the same way."""

CHECKPOINT_META_FORMAT = 1
"""Version of ``coevolve.json``. Files written before the field existed have the same keys and
read as format 1; a higher number (a newer coevolve) is refused rather than guessed at."""


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """A model folder's ``coevolve.json`` ({} when there is none), checked field by field.

    Every problem is a ``ModelLoadError`` naming the file and the field, raised before any
    weights are loaded: a broken or foreign meta file must not make ``eval`` prompt a model in
    the wrong world, nor end in a traceback after minutes of loading.
    """
    import json

    f = Path(path) / CHECKPOINT_META
    if not f.is_file():
        return {}
    try:
        meta = json.loads(f.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ModelLoadError(
            f"{f}: not UTF-8 (byte at offset {e.start}); the checkpoint's meta file is damaged"
        ) from None
    except json.JSONDecodeError as e:
        raise ModelLoadError(
            f"{f}:{e.lineno}: not valid JSON ({e.msg}); the checkpoint's meta file is damaged"
        ) from None
    except OSError as e:
        raise ModelLoadError(f"{f}: cannot read: {e.strerror or e}") from None
    if not isinstance(meta, dict):
        raise ModelLoadError(f"{f}: expected a JSON object, got {type(meta).__name__}")
    fmt = meta.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise ModelLoadError(f"{f}: field 'format' must be a positive integer, got {fmt!r}")
    if fmt > CHECKPOINT_META_FORMAT:
        raise ModelLoadError(
            f"{f}: format {fmt} was written by a newer coevolve (this one reads format "
            f"{CHECKPOINT_META_FORMAT}); evaluate it with that version"
        )
    if "world" in meta and meta["world"] not in ("toy", "skill", "real", "arith"):
        raise ModelLoadError(f"{f}: field 'world' must be 'toy', 'skill', 'real' or 'arith', got {meta['world']!r}")
    if "prompts" in meta:
        from pydantic import ValidationError

        try:
            PromptsConfig.model_validate(meta["prompts"])
        except ValidationError as e:
            first = e.errors()[0]
            raise ModelLoadError(f"{f}: field 'prompts.{'.'.join(map(str, first['loc']))}': {first['msg']}") from None
    if "chat_template" in meta and not isinstance(meta["chat_template"], (bool, type(None))):
        raise ModelLoadError(f"{f}: field 'chat_template' must be true, false or null, got {meta['chat_template']!r}")
    return meta


def world_of_model(
    path: str | Path, tokenizer: Any, chat_template: bool | None = None, heldout_size: int = 500
) -> World:
    """The world a saved model belongs to, for evaluating it with the prompts it was trained on:
    a checkpoint's ``coevolve.json`` says which world and which prompts (system texts, templates,
    example turns); a toy base has ``toy_build.json``; anything else is a real model with the
    default prompts (chat template off unless asked: base models continue plain text)."""
    p = Path(path)
    meta = read_checkpoint_meta(p)
    if meta.get("world") == "skill" or (not meta and (p / "skill_build.json").is_file()):
        from coevolve.world.skill.world import SkillWorld  # lazy: pulls transformers, torch

        return SkillWorld()
    if meta.get("world") == "toy" or (not meta and (p / "toy_build.json").is_file()):
        from coevolve.world.toy.world import ToyWorld  # lazy: pulls transformers, torch

        return ToyWorld(heldout_size=heldout_size)

    use_chat = bool(meta.get("chat_template", False)) if chat_template is None else chat_template
    prompts = PromptsConfig.model_validate(meta["prompts"]) if "prompts" in meta else PromptsConfig()
    prompter = ChatPrompter(
        tokenizer, use_chat_template=use_chat, enable_thinking=meta.get("enable_thinking"), prompts=prompts
    )
    if meta.get("world") == "arith":
        from coevolve.world.arith import ArithWorld  # lazy: pulls scipy

        return ArithWorld(prompter, use_chat, heldout_size=heldout_size)
    from coevolve.world.real import RealWorld  # lazy: pulls scipy

    return RealWorld(prompter, [], "none", use_chat)


__all__ = [
    "CHECKPOINT_META",
    "CHECKPOINT_META_FORMAT",
    "WORLDS",
    "World",
    "WorldFacts",
    "base_model_path",
    "make_world",
    "read_checkpoint_meta",
    "world_name",
    "world_of_config",
    "world_of_model",
]
