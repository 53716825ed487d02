"""``coevolve config RECIPE --describe``: every field of a resolved config with its value (the
recipe's default, or what the presets, files and overrides made it), its type, its flat alias
and its description, the paper's defaults named as the paper's and our own choices as ours.

The text comes from the config models' own ``Field(description=...)``: one place documents a
field, for the code, this command and the error messages alike.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

from coevolve.config.load import all_aliases
from coevolve.config.sections import RecipeConfig

_PAPER = re.compile(r"\bpaper", re.IGNORECASE)
_OURS = re.compile(r"\bours\b|\bour (default|choice|option|addition)|not in the paper", re.IGNORECASE)


def origin_of(description: str) -> str:
    """Whose default a field's description says its value is: "paper", "ours", "paper; ours"
    (a field with a paper part and a part the paper leaves open) or "" (engineering settings)."""
    tags = [t for t, rx in (("paper", _PAPER), ("ours", _OURS)) if rx.search(description)]
    return "; ".join(tags)


def type_name(annotation: Any) -> str:
    """A field's type as a user writes it: ``int | None``, ``'band' | 'random'``, ``list[str]``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _section(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _value(v: Any) -> str:
    text = repr(v.model_dump(mode="json") if isinstance(v, BaseModel) else v)
    return text if len(text) <= 100 else text[:97] + "..."


def field_rows(model: BaseModel, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted name, value, type, description) of every leaf field of ``model``, in its order; a
    section with a description of its own comes first as (name, "", "section", description)."""
    rows = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        desc = " ".join((info.description or "").split())
        if _section(info.annotation) is not None and isinstance(value, BaseModel):
            rows += [(prefix + name, "", "section", desc)] if desc else []
            rows += field_rows(value, f"{prefix}{name}.")
            continue
        rows.append((prefix + name, _value(value), type_name(info.annotation), desc))
    return rows


def describe(cfg: RecipeConfig) -> str:
    """The text of ``coevolve config RECIPE --describe``: a section heading per config section,
    then per field ``name = value  (type)`` with its alias and whose default, and its description."""
    aliases: dict[str, list[str]] = {}
    for alias, target in all_aliases(type(cfg)).items():
        aliases.setdefault(target, []).append(alias)
    lines = [
        f"# {cfg.recipe}: every field, its value here (the recipe's default unless a preset, file or override "
        "set it), type and description",
        "# [paper] = the paper's value or setting, [ours] = a choice the paper leaves open (ours)",
    ]
    section = None
    for name, value, typ, desc in field_rows(cfg):
        head = name.split(".")[0] if "." in name else ""
        if head != section:
            section = head
            lines.append(f"\n[{head}]" if head else "")
        tag = f"  [{origin_of(desc)}]" if origin_of(desc) else ""
        also = f"  alias: {', '.join(aliases[name])}" if name in aliases else ""
        lines.append(f"{name}: (section){tag}{also}" if typ == "section" else f"{name} = {value}  ({typ}){tag}{also}")
        if desc:
            lines.append(f"    {desc}")
    return "\n".join(lines) + "\n"


__all__ = ["describe", "field_rows", "origin_of", "type_name"]
