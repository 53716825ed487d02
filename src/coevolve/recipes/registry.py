"""The recipe registry: each recipe's name and its declaration (``recipes.declare.Recipe``), from
which the run loop, the phase list and the cost model are derived."""

from __future__ import annotations

import importlib

from coevolve.config import config_class
from coevolve.recipes.declare import Recipe

RECIPES: dict[str, str] = {
    "grpo": "coevolve.recipes.grpo:RECIPE",
    "d2evo": "coevolve.recipes.d2evo:RECIPE",
    "diagevo": "coevolve.recipes.diagevo:RECIPE",
}
"""Recipe name -> its declaration, imported on first use: a recipe module loads torch and its
library, which ``coevolve --help`` and the config loader do not need (measured start-up cost)."""


def recipe_of(recipe: str) -> Recipe:
    """The recipe's declaration; an unknown name is refused as the config loader refuses it
    (``config.config_class``: the known names, a did-you-mean)."""
    config_class(recipe)
    mod, _, name = RECIPES[recipe].partition(":")
    return getattr(importlib.import_module(mod), name)


__all__ = ["RECIPES", "recipe_of"]
