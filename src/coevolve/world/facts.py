"""What each world is, as one table (``WORLDS``) read without building a world.

Planning a run, checking it before it starts, evaluating a saved model and rebuilding a world's
prompts inside a verl reward worker all need a few class-level facts of the run's world, long
before (or without) its questions, held-out set or tokenizer exist. They read them here, so the
cost model, preflight, ``coevolve eval`` and verl cannot disagree about a world: the default
benchmarks, the evaluation a run of the world does unless told otherwise, the built-in base model
and the prompter. The world classes take their ``default_benches`` from this table too.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from coevolve.errors import ConfigError

WorldName = Literal["toy", "skill", "real", "arith"]


@dataclass(frozen=True)
class WorldFacts:
    """The class-level facts of one world."""

    name: WorldName
    default_benches: tuple[str, ...]
    """What a run evaluates when ``eval.benches`` is unset."""
    eval: Mapping[str, Any] | None
    """``EvalConfig`` fields a run of this world evaluates with (its presets' ``eval`` section:
    ``coevolve eval`` measures a model as its runs do); None = the real-model preset's."""
    base_model: Literal["toy", "skill"] | None
    """The built-in base a run starts from when ``model.path`` is unset; None: ``model.path``."""
    prompter: str | None
    """``module:Class`` of the world's own prompter (built without arguments: its formats are
    fixed by the base's pretraining); None: a real model's ``ChatPrompter`` (tokenizer, chat
    template and the run's ``prompts``)."""


ARITH_ANSWER_TOKENS = 48
"""Answer budget of an arith evaluation: the answers of configs/smollm2/ run ~25 tokens."""

WORLDS: Mapping[str, WorldFacts] = MappingProxyType(
    {
        "toy": WorldFacts("toy", ("toy",), {}, "toy", "coevolve.world.toy.prompts:ToyPrompter"),
        # configs/skill/*.yaml: sampled accuracy (mean of 4 answers) is the declared metric
        "skill": WorldFacts(
            "skill",
            ("skill",),
            {"samples": 4, "max_new_tokens": 80},
            "skill",
            "coevolve.world.skill.prompts:SkillPrompter",
        ),
        "arith": WorldFacts("arith", ("arith",), {"samples": 0, "max_new_tokens": ARITH_ANSWER_TOKENS}, None, None),
        "real": WorldFacts("real", ("math7",), None, None, None),
    }
)


def world_name(model_path: Any, source: str) -> WorldName:
    """The world of a run with ``model.path`` and ``data.source``, the one ``make_world`` builds:
    the skill world whatever the model, the toy world without a model path, then the arith world
    or a real model's data."""
    if source == "skill":
        return "skill"
    if model_path is None:
        return "toy"
    return "arith" if source == "arith" else "real"


def world_of_config(cfg: Any) -> WorldFacts:
    """The facts of the world a recipe config describes (``world_name``)."""
    return WORLDS[world_name(cfg.model.path, cfg.data.source)]


def world_prompter(name: str) -> Any:
    """A new instance of the prompter of the world ``name`` (a world whose prompter takes no
    arguments: toy, skill); a clear error for a world whose prompter needs a tokenizer."""
    facts = WORLDS.get(name)
    if facts is None or facts.prompter is None:
        known = [n for n, f in WORLDS.items() if f.prompter]
        raise ConfigError(f"the {name} world's prompter is rebuilt from a tokenizer, not by name (by name: {known})")
    module, cls = facts.prompter.split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = [
    "ARITH_ANSWER_TOKENS",
    "WORLDS",
    "WorldFacts",
    "WorldName",
    "world_name",
    "world_of_config",
    "world_prompter",
]
