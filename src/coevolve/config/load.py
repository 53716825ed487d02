"""Loading a config: defaults <- real-model preset <- YAML files <- ``key=value`` overrides (dotted
paths), renamed and moved fields, aliases, validation errors that name the field and the layer
that set it, and the YAML a run folder keeps (``dump_yaml``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from coevolve.config.sections import RecipeConfig
from coevolve.errors import ConfigError, clip, did_you_mean, unparsable
from coevolve.schema import scalar_kinds

Layer = tuple[str, dict[str, Any]]
"""Config values and where they came from, as the user would name it ("config file a.yaml",
"command line (solver.steps=abc)"): an error names the layer that set the field."""

DEFAULTS = "defaults"


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _touches(layer: dict[str, Any], loc: tuple[Any, ...]) -> bool:
    """Does ``layer`` set the field at ``loc``, a field under it, or a scalar above it?"""
    node: Any = layer
    for part in loc:
        if not isinstance(part, str):  # a list index: the layer set the list
            return True
        if not isinstance(node, dict):
            return True
        if part not in node:
            return False
        node = node[part]
    return True


def origins(loc: tuple[Any, ...], layers: list[Layer]) -> list[str]:
    """Where the value at ``loc`` came from: every layer that sets it, the one that wins first;
    ``["defaults"]`` when none does."""
    hits = [where for where, layer in reversed(layers) if _touches(layer, loc)]
    return hits or [DEFAULTS]


def _section_fields(cls: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section at ``loc`` of ``cls`` ([] when ``loc`` is not a section)."""
    model: Any = cls
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return []
        model = fields[part].annotation
    return list(getattr(model, "model_fields", None) or ())


def validation_message(err: ValidationError, layers: list[Layer], cls: type[BaseModel] | None = None) -> str:
    """One line per failing field: the field, what is wrong, the value, and where it came from;
    an unknown key of ``cls`` with the nearest known one (did you mean)."""
    lines = []
    for e in err.errors():
        loc = _fmt_loc(e["loc"])
        where = " [from " + ", over ".join(origins(tuple(e["loc"]), layers)) + "]" if e["loc"] else ""
        if e["type"] == "extra_forbidden":
            parent = tuple(e["loc"][:-1])
            hint = did_you_mean(str(e["loc"][-1]), _section_fields(cls, parent), "".join(f"{p}." for p in parent))
            lines.append(f"{loc}: unknown key{hint}{where}")
            continue
        got = e.get("input")
        msg = e["msg"].removeprefix("Value error, ")
        shown = "got " in msg or (isinstance(got, str) and got in msg)  # the message already quotes the value
        got_s = "" if isinstance(got, dict) or not e["loc"] or shown else f" (got {clip(repr(got))})"
        lines.append(f"{loc}: {msg}{got_s}{where}" if loc else f"{msg}")
    if len(lines) == 1:
        return f"invalid config: {lines[0]}"
    return "invalid config:\n  " + "\n  ".join(lines)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], parsed value). Values are parsed as YAML scalars /
    flow lists, so ``x=3`` is an int, ``x=[1,2]`` a list, ``x=null`` None, ``x=abc`` a string."""
    if "=" not in text:
        raise ConfigError(f"override {clip(text)!r} is not of the form key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {clip(text)!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() != "" else ""
    except (yaml.YAMLError, ValueError, RecursionError):  # not YAML, an int over Python's 4300 digits, too deep:
        value = raw  # the text as typed, which a text field takes and any other field refuses by name
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str], cls: type[BaseModel]) -> dict[str, Any]:
    """Set each dotted override into the raw dict, checking that every path names a field."""
    for ov in overrides:
        path, value = parse_override(ov)
        model: Any = cls
        node = data
        for i, part in enumerate(path):
            fields = getattr(model, "model_fields", None)
            part = path[i] = getattr(model, "RENAMED", {}).get(part, part)  # a field's former name sets the field
            if fields is None or part not in fields:
                where = ".".join(path[: i + 1])
                known = ", ".join(sorted(fields)) if fields else "(not a section)"
                hint = did_you_mean(part, fields or (), ".".join(path[:i]) + "." if i else "")
                raise ConfigError(f"override {clip(ov)!r}: unknown key {where!r}{hint} (known here: {known})")
            if i == len(path) - 1:
                node[part] = as_typed(fields[part].annotation, ov, value)
            else:
                ann = fields[part].annotation
                model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
                child = node.get(part)
                if not isinstance(child, dict):
                    child = {}
                    node[part] = child
                node = child
    return data


def rename_fields(cls: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every key that is a section's former field name (``Strict.RENAMED``) under
    the field's name now, at any depth (before the defaults are merged under it)."""
    fields = getattr(cls, "model_fields", {})
    renamed = getattr(cls, "RENAMED", {})
    out: dict[str, Any] = {}
    for key, value in data.items():
        key = renamed.get(key, key)
        ann = fields[key].annotation if key in fields else None
        if isinstance(value, dict) and isinstance(ann, type) and issubclass(ann, BaseModel):
            value = rename_fields(ann, value)
        out[key] = value
    return out


def as_typed(annotation: Any, text: str, value: Any) -> Any:
    """An override's value for a text-only field is the text as typed (``run.name=007`` is
    "007", not the number 7 that YAML reads); any other field gets the YAML value."""
    kinds = scalar_kinds(annotation)
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and str in kinds
        and not kinds & {int, float, bool, Literal}
    ):
        return text.split("=", 1)[1].strip()
    return value


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a folder, not a YAML file")
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"config file {p}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"config file {p}:{line}:{col}: not UTF-8 (byte {raw[e.start]:#04x})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config file {p}{where} is not valid YAML: {getattr(e, 'problem', e)}") from None
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"config file {p}: {unparsable(e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p}: top level must be a mapping, got {type(data).__name__}")
    return data


def all_aliases(cls: type[RecipeConfig]) -> dict[str, str]:
    """The aliases of ``cls`` and of every recipe config it extends (a subclass's own
    ``ALIASES`` dict adds to, and may override, its bases'), so ``engine=vllm`` works in every
    recipe while each recipe keeps its own ablation names."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        out.update(vars(klass).get("ALIASES", {}))
    return out


def resolve_aliases(
    cls: type[RecipeConfig], data: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """Rewrite flat alias keys (YAML top level and overrides) to their dotted targets."""
    data = dict(data)
    out_over = list(overrides)
    for alias, target in all_aliases(cls).items():
        if alias in data and not isinstance(data[alias], dict):
            value = data.pop(alias)
            node = data
            *parents, leaf = target.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        out_over = [target + ov[len(alias) :] if ov.split("=", 1)[0].strip() == alias else ov for ov in out_over]
    return data, out_over


def move_fields(
    cls: type[RecipeConfig], data: dict[str, Any], overrides: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """``data`` and ``overrides`` with every field named at its former place (``MOVED``) set at
    its place now; two former places that disagree are a ``ConfigError`` naming both."""
    moved = getattr(cls, "MOVED", {})
    out_over = []
    for ov in overrides:
        key = ov.split("=", 1)[0].strip()
        out_over.append(moved[key] + ov[len(ov.split("=", 1)[0]) :] if key in moved else ov)
    data = dict(data)
    set_by: dict[str, str] = {}
    for old, new in moved.items():
        *parents, leaf = old.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        *nparents, nleaf = new.split(".")
        target = data
        for part in nparents:
            target = target.setdefault(part, {}) if isinstance(target.get(part, {}), dict) else target
        if new in set_by and target.get(nleaf) != value:
            raise ConfigError(
                f"{set_by[new]}={target.get(nleaf)!r} and {old}={value!r}: both are now {new}; give one value"
            )
        target[nleaf] = value
        set_by[new] = old
    return data, out_over


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, recursing into dicts present in both (neither is modified)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def is_toy_model(path: str | Path) -> bool:
    """A toy or skill base model folder (``toy_build.json`` / ``skill_build.json``) or a checkpoint of a
    run in one of those worlds (not a real model: no real-model preset, no real budgets)."""
    p = Path(path)
    if (p / "toy_build.json").is_file() or (p / "skill_build.json").is_file():
        return True
    meta = p / "coevolve.json"
    try:
        return meta.is_file() and yaml.safe_load(meta.read_text(encoding="utf-8")).get("world") in ("toy", "skill")
    except (yaml.YAMLError, AttributeError, OSError):
        return False


def real_preset(recipe: str) -> dict[str, Any]:
    """The recipe's shipped real-model preset (``coevolve/configs/real/<recipe>.yaml``), {} if none."""
    res = resources.files("coevolve").joinpath("configs", "real", f"{recipe}.yaml")
    if not res.is_file():
        return {}
    return yaml.safe_load(res.read_text(encoding="utf-8")) or {}


def build_config(
    cls: type[RecipeConfig], files: list[Layer], overrides: list[str], dropped: list[str] | None = None
) -> RecipeConfig:
    """Defaults <- real-model preset <- each file of ``files`` in order <- ``overrides``, validated.

    The recipe's own defaults (e.g. a questioner phase of 5 steps) are merged under the files, so
    a YAML section that sets one key keeps the recipe's values for the others. When ``model.path``
    is a real model (not a toy one), the recipe's real-model preset (R-Zero's sizes for a 4B base
    model, each paper's evaluation) goes under the files too: a real run gets real answer budgets, learning rate and eval
    protocol without restating them, and the toy defaults never reach it. A field that fails
    validation is reported with the layer that set it (``validation_message``).

    With a ``dropped`` list, fields that fail validation are removed (so they take the defaults)
    and their dotted names appended to it, instead of raising (``coevolve resume --force``)."""
    layers: list[Layer] = []
    data: dict[str, Any] = {}
    for where, raw in files:
        raw, _ = resolve_aliases(cls, raw, [])
        raw, _ = move_fields(cls, raw, [])
        raw = rename_fields(cls, raw)
        layers.append((where, raw))
        data = deep_merge(data, raw)
    typed = list(overrides)
    _, overrides = resolve_aliases(cls, {}, overrides)
    _, overrides = move_fields(cls, {}, overrides)
    for text, ov in zip(typed, overrides):  # one layer per override: an error names the one that set it
        layers.append((f"command line ({clip(text)})", apply_overrides({}, [ov], cls)))
    data = apply_overrides(data, overrides, cls)
    path = (data.get("model") or {}).get("path") if isinstance(data.get("model"), dict) else None
    if path and not is_toy_model(path):
        recipe = str(data.get("recipe", ""))
        preset = rename_fields(cls, real_preset(recipe))
        source = (data.get("data") or {}).get("source") if isinstance(data.get("data"), dict) else None
        if source == "arith" and isinstance(preset.get("eval"), dict):  # the preset's benchmarks are a math run's:
            preset["eval"] = {k: v for k, v in preset["eval"].items() if k != "benches"}  # arith evaluates arith
        layers.insert(0, (f"preset real/{recipe} (under every real model)", preset))
        data = deep_merge(preset, data)
    while True:
        try:
            return cls.model_validate(deep_merge(cls(recipe=data.get("recipe", "")).model_dump(), data))
        except ValidationError as e:
            if dropped is None or not _drop_invalid(data, e, dropped):
                raise ConfigError(validation_message(e, layers, cls)) from None


def _drop_invalid(data: dict[str, Any], err: ValidationError, dropped: list[str]) -> bool:
    """Remove from ``data`` the deepest key it holds on each failing field's path; False when
    nothing could be removed (an error of the whole config, or of a default value)."""
    removed = False
    for e in err.errors():
        loc = [p for p in e["loc"] if isinstance(p, str)]
        node: Any = data
        for i, part in enumerate(loc):
            if not isinstance(node, dict) or part not in node:
                break
            if i == len(loc) - 1 or not isinstance(node[part], dict):
                del node[part]
                dropped.append(".".join(loc[: i + 1]))
                removed = True
                break
            node = node[part]
    return removed


def dump_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
