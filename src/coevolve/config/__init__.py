"""Recipe configs. ``load_config(recipe, files, overrides)`` is the single entry point."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from coevolve.config.load import DEFAULTS, Layer, build_config, dump_yaml, read_yaml
from coevolve.config.presets import find_preset, is_preset_name, preset_label, real_model_given
from coevolve.config.sections import RecipeConfig
from coevolve.errors import ConfigError, did_you_mean

CONFIGS: dict[str, str] = {
    "grpo": "coevolve.config.grpo:GRPOConfig",
    "d2evo": "coevolve.config.d2evo:D2EvoConfig",
    "diagevo": "coevolve.config.diagevo:DiagEvoConfig",
}
"""Recipe name -> its config class, imported lazily so one broken recipe cannot break the CLI (the
recipes' declarations are named by their own registry, ``recipes.registry.RECIPES``)."""


def config_class(recipe: str) -> type[RecipeConfig]:
    if recipe not in CONFIGS:
        raise ConfigError(f"unknown recipe {recipe!r}{did_you_mean(recipe, CONFIGS)} (known: {', '.join(CONFIGS)})")
    mod, _, name = CONFIGS[recipe].partition(":")
    try:
        return getattr(importlib.import_module(mod), name)
    except ModuleNotFoundError as e:
        raise ConfigError(f"recipe {recipe!r} is not available in this build ({e})") from None


def load_config(
    recipe: str | None,
    file: str | Path | Sequence[str | Path] | None = None,
    overrides: list[str] | None = None,
    presets: Sequence[str] = (),
) -> RecipeConfig:
    """Load a recipe config: defaults <- ``presets`` <- YAML files in order <- key=value overrides.

    ``file`` is one config file or several (``-c a.yaml -c b.yaml``: later files win, key by
    key); a name that is not a file is a preset shipped with coevolve (``-c rzero``, the same as
    ``--preset rzero``; ``coevolve.config.presets``). The recipe name comes from the argument or
    the files' ``recipe`` key; they must agree."""
    names = [] if file is None else [file] if isinstance(file, (str, Path)) else list(file)
    overrides = list(overrides or [])
    files = {str(n): read_yaml(n) for n in names if not is_preset_name(n)}
    real = real_model_given(list(files.values()), overrides)
    layers: list[Layer] = []
    for name in [*presets, *names]:
        if str(name) in files:
            layers.append((f"config file {name}", files[str(name)]))
        else:
            path = find_preset(str(name), real)
            layers.append((f"preset {preset_label(path)}", read_yaml(path)))
    name = recipe
    for where, data in layers:
        file_recipe = data.get("recipe")
        if file_recipe and name and file_recipe != name:
            raise ConfigError(f"{where} is for recipe {file_recipe!r}, not {name!r}")
        name = name or file_recipe
    if not name:
        what = ", ".join(where for where, _ in layers) or "no config file"
        raise ConfigError(f"{what}: no 'recipe' key and no recipe was given")
    layers.insert(0, (DEFAULTS, {"recipe": name}))
    return build_config(config_class(name), layers, overrides)


def _validates(recipe: str, file: Path) -> bool:
    try:
        load_config(recipe, file, [])
    except ConfigError:
        return False
    return True


def load_saved_config(
    recipe: str, file: Path, overrides: list[str], force: bool = False
) -> tuple[RecipeConfig, list[str]]:
    """A run folder's saved config for ``coevolve resume``, and the fields dropped to load it.

    A config that no longer validates (this coevolve renamed, removed or narrowed a field) is
    refused with the fields listed; with ``force`` those fields are dropped instead and take this
    version's defaults, and their names are returned so the caller can say so."""
    try:
        return load_config(recipe, file, overrides), []
    except ConfigError as e:
        if overrides and _validates(recipe, file):
            raise  # the saved config is sound: the command line's value is what is wrong (the error names it)
        if not force:
            raise ConfigError(
                f"the run's saved config no longer validates with this coevolve: {e}\n"
                "resume with --force to drop these fields (they take this version's defaults), "
                "or start a new run"
            ) from None
    data = read_yaml(file)
    data["recipe"] = recipe
    dropped: list[str] = []
    return build_config(
        config_class(recipe), [(f"config file {file}", data)], list(overrides), dropped=dropped
    ), dropped


__all__ = ["CONFIGS", "RecipeConfig", "config_class", "load_config", "load_saved_config", "dump_yaml", "find_preset"]
