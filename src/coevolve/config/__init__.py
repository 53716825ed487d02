"""Recipe configs. ``load_config(recipe, file, overrides)`` is the single entry point."""

from __future__ import annotations

import importlib
from pathlib import Path

from coevolve.config.base import RecipeConfig, build_config, dump_yaml, read_yaml
from coevolve.errors import ConfigError

# recipe name -> (config class, the recipe's declaration ``recipes.declare.Recipe``); imported
# lazily so one broken recipe cannot break the CLI.
RECIPES: dict[str, tuple[str, str]] = {
    "grpo": ("coevolve.config.grpo:GRPOConfig", "coevolve.recipes.grpo:RECIPE"),
    "d2evo": ("coevolve.config.d2evo:D2EvoConfig", "coevolve.recipes.d2evo:RECIPE"),
    "diagevo": ("coevolve.config.diagevo:DiagEvoConfig", "coevolve.recipes.diagevo:RECIPE"),
}


def _resolve(ref: str):
    mod, _, name = ref.partition(":")
    return getattr(importlib.import_module(mod), name)


def config_class(recipe: str) -> type[RecipeConfig]:
    if recipe not in RECIPES:
        raise ConfigError(f"unknown recipe {recipe!r} (known: {', '.join(RECIPES)})")
    try:
        return _resolve(RECIPES[recipe][0])
    except ModuleNotFoundError as e:
        raise ConfigError(f"recipe {recipe!r} is not available in this build ({e})") from None


def recipe_of(recipe: str):
    """The recipe's declaration (``recipes.declare.Recipe``): its phases, roles and work, from
    which the run loop, the phase list and the cost model are derived."""
    config_class(recipe)
    return _resolve(RECIPES[recipe][1])


def load_config(recipe: str | None, file: str | Path | None = None, overrides: list[str] | None = None) -> RecipeConfig:
    """Load a recipe config: defaults <- YAML file <- key=value overrides. The recipe name comes
    from the argument or the file's ``recipe`` key; they must agree."""
    data = read_yaml(file) if file else {}
    file_recipe = data.get("recipe")
    if recipe and file_recipe and recipe != file_recipe:
        raise ConfigError(f"config file {file} is for recipe {file_recipe!r}, not {recipe!r}")
    name = recipe or file_recipe
    if not name:
        raise ConfigError(f"config file {file} has no 'recipe' key and no recipe was given")
    data["recipe"] = name
    origin = str(file) if file else "defaults"
    return build_config(config_class(name), data, list(overrides or []), origin)


def load_saved_config(recipe: str, file: Path, overrides: list[str], force: bool = False) -> tuple[RecipeConfig, list[str]]:
    """A run folder's saved config for ``coevolve resume``, and the fields dropped to load it.

    A config that no longer validates (this coevolve renamed, removed or narrowed a field) is
    refused with the fields listed; with ``force`` those fields are dropped instead and take this
    version's defaults, and their names are returned so the caller can say so."""
    try:
        return load_config(recipe, file, overrides), []
    except ConfigError as e:
        if not force:
            raise ConfigError(f"the run's saved config no longer validates with this coevolve: {e}\n"
                              "resume with --force to drop these fields (they take this version's defaults), "
                              "or start a new run") from None
    data = read_yaml(file)
    data["recipe"] = recipe
    dropped: list[str] = []
    return build_config(config_class(recipe), data, list(overrides), str(file), dropped=dropped), dropped


__all__ = ["RECIPES", "RecipeConfig", "config_class", "recipe_of", "load_config", "load_saved_config",
           "dump_yaml"]
