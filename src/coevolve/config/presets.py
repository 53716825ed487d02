"""Config presets shipped inside the package: ``-c NAME`` / ``--preset NAME`` instead of a path.

Two folders of the installed package hold them:

* ``coevolve/configs/real/`` — the real-model presets (``real/grpo``, ``real/d2evo``,
  ``real/diagevo``, ``real/rzero``, ``real/lora_8b``); the recipe's own one is layered under
  every real-model run by ``build_config``;
* ``coevolve/presets/`` — the repository's ``configs/`` folder (a link in a source checkout,
  copied into the wheel): the toy presets (``grpo``, ``d2evo``, ``diagevo``, ``rzero``, the
  smoke configs, ``toy_scarce/*``) and every preset added there later.

A name resolves by the model it will run on: with a real ``model.path`` the ``real/`` version of
a preset comes first (``-c rzero`` is then ``real/rzero``: R-Zero at its own scale), with the
toy model the toy one (``rzero``: R-Zero at toy scale). ``real/NAME`` or ``toy_scarce/NAME`` names
one version explicitly.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from coevolve.config.load import is_toy_model, parse_override
from coevolve.errors import ConfigError, did_you_mean

SUFFIXES = (".yaml", ".yml")


def preset_roots() -> list[Path]:
    """The package folders that hold presets, in lookup order (the real presets' folder first)."""
    pkg = resources.files("coevolve")
    return [Path(str(pkg.joinpath(name))) for name in ("configs", "presets") if pkg.joinpath(name).is_dir()]


def is_preset_name(name: str | Path) -> bool:
    """A ``-c`` value that names a preset rather than a file: no YAML suffix and no such file."""
    return not str(name).endswith(SUFFIXES) and not Path(name).exists()


def list_presets() -> list[str]:
    """Every preset name (``rzero``, ``real/rzero``, ``toy_scarce/grpo`` ...), sorted."""
    names: set[str] = set()
    for root in preset_roots():
        for f in [*root.glob("*.yaml"), *root.glob("*/*.yaml")]:
            names.add(f.relative_to(root).with_suffix("").as_posix())
    return sorted(names)


def find_preset(name: str, real: bool) -> Path:
    """The file of preset ``name``: for a real model ``real/<name>`` first, then ``<name>``."""
    stem = name.removesuffix(".yaml").strip("/")
    candidates = ([f"real/{stem}"] if real and not stem.startswith("real/") else []) + [stem]
    for cand in candidates:
        for root in preset_roots():
            f = root / f"{cand}.yaml"
            if f.is_file():
                return f
    known = list_presets()
    raise ConfigError(
        f"config {name!r} is neither a file nor a preset shipped with coevolve{did_you_mean(stem, known)} "
        f"(presets: {', '.join(known)})"
    )


def preset_label(path: Path) -> str:
    """How a preset file is named to the user (``real/rzero``)."""
    for root in preset_roots():
        try:
            return path.relative_to(root).with_suffix("").as_posix()
        except ValueError:
            continue
    return str(path)


def real_model_given(files: list[dict[str, Any]], overrides: list[str]) -> bool:
    """Whether ``model.path`` (last set by ``overrides``, else by the files) is a real model, read
    before any preset is chosen: the preset's version (toy or ``real/``) depends on it."""
    path = None
    for data in files:
        model = data.get("model")
        if isinstance(model, dict) and "path" in model:
            path = model["path"]
    for ov in overrides:
        if ov.split("=", 1)[0].strip() == "model.path" and "=" in ov:
            path = parse_override(ov)[1]
    return bool(path) and not is_toy_model(str(path))


__all__ = ["find_preset", "is_preset_name", "list_presets", "preset_label", "preset_roots", "real_model_given"]
