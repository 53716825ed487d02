"""The layer figures of ``src/coevolve``, read from its import graph and its syntax trees.

    python dev/layers.py --figures [--root SRC] [--list]

Prints, one line each: package cycles, file circles, arrows back up (an import from a floor to a
higher one, by ``FLOORS`` below), functions over 60 lines, functions at 55-60 lines, modules over
600 lines, and coevolve imports inside functions: with a ``# lazy: <reason>`` comment on the
import (an import cycle, a heavy or optional dependency, a measured start-up cost, a test that
monkeypatches the attribute) and without one. ``--list`` names every item after its count.

Every ``from coevolve... import`` / ``import coevolve...`` is an arrow, at module level or inside
a function (a lazy import is still a dependency), except those under ``if TYPE_CHECKING:``
(annotations only). A function's length runs from its ``def`` line to its last line, docstring
included. A package is the first name under ``coevolve``, except under ``world/``: each world's home
(``world.toy``, ``world.skill``, ``world.arith``, ``world.real``) and the table of their facts
(``world.facts``) count as their own, ``world`` is the factory that decides and builds one.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"

FLOORS: tuple[tuple[str, ...], ...] = (
    ("types", "errors", "faults", "jsonl", "__init__", "bench_data"),
    ("models", "schema"),
    ("rewards", "reward_function", "data", "answers", "prompts", "run", "extras", "provenance"),
    ("rl", "engine"),
    ("curriculum", "memory"),
    ("training", "loop", "verl"),
    ("eval",),
    ("world.facts",),
    ("world.toy", "world.skill", "world.arith", "world.real"),
    ("world",),
    ("config",),
    ("recipes", "plan"),
    ("evaluate", "export", "preflight", "warmstart", "lab", "cli", "__main__"),
)
"""The floors from the bottom up (the library, then eval, the worlds, config, the recipes, the
commands and the lab): an import from a package to one on a higher floor is an arrow back up."""

LONG, NEAR, BIG = 60, 55, 600
LAZY = "# lazy:"


def floor_of(pkg: str) -> int:
    for i, names in enumerate(FLOORS):
        if pkg in names:
            return i
    raise SystemExit(f"dev/layers.py: package {pkg!r} is on no floor; add it to FLOORS")


def package(module: str) -> str:
    """``coevolve.world.toy.problems`` -> ``world.toy``; ``coevolve.world.arith_steps`` ->
    ``world.arith``; ``coevolve.eval.suite`` -> ``eval``."""
    parts = module.split(".")[1:] or ["__init__"]
    if parts[0] == "world" and len(parts) > 1:
        return f"world.{parts[1].removesuffix('_steps')}"
    return parts[0]


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }


def _in_functions(tree: ast.AST) -> set[int]:
    return {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if n is not f
    }


def imports_of(tree: ast.AST, me: str) -> list[tuple[str, bool, int, int]]:
    """(imported coevolve module, inside a function?, first line, last line) of every import but
    TYPE_CHECKING's."""
    tc, inner = _type_checking_nodes(tree), _in_functions(tree)
    out = []
    for n in ast.walk(tree):
        if id(n) in tc:
            continue
        if isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:  # relative: from the importing module's package
                pkg = me.split(".")[: -n.level] if not me.endswith("__init__") else me.split(".")
                base = ".".join([*pkg, base] if base else pkg)
            if base.startswith("coevolve"):
                out.append((base, id(n) in inner, n.lineno, n.end_lineno))
        elif isinstance(n, ast.Import):
            out += [(a.name, id(n) in inner, n.lineno, n.end_lineno) for a in n.names if a.name.startswith("coevolve")]
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def figures(root: Path) -> dict[str, list[str]]:
    pkg_graph: dict[str, set[str]] = defaultdict(set)
    file_graph: dict[str, set[str]] = defaultdict(set)
    found: dict[str, list[str]] = {k: [] for k in ("up", "long", "near", "big", "lazy", "inner")}
    base = root / "coevolve"
    modules = {module_name(p, root) for p in base.rglob("*.py")}
    for path in sorted(base.rglob("*.py")):
        me = module_name(path, root)
        rel = path.relative_to(root)
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
        lines = src.count("\n")
        if lines > BIG:
            found["big"].append(f"{rel} {lines}")
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = f.end_lineno - f.lineno + 1
                if n > LONG:
                    found["long"].append(f"{rel}:{f.lineno} {f.name} {n}")
                elif n >= NEAR:
                    found["near"].append(f"{rel}:{f.lineno} {f.name} {n}")
        a = package(me)
        text = src.splitlines()
        for target, inner, line, end in imports_of(tree, me):
            while target not in modules and "." in target:  # `from coevolve.x import name`: the module x
                target = target.rsplit(".", 1)[0]
            if target != me:
                file_graph[me].add(target)
            b = package(target)
            if inner:
                why = [ln.split(LAZY, 1)[1].strip() for ln in text[line - 1 : end] if LAZY in ln]
                if why:
                    found["lazy"].append(f"{rel}:{line} {target} ({why[0]})")
                else:
                    found["inner"].append(f"{rel}:{line} {target}")
            if b != a:
                pkg_graph[a].add(b)
                if floor_of(b) > floor_of(a):
                    found["up"].append(f"{rel}:{line} {a} -> {b}")
    found["package cycles"] = [" <-> ".join(c) for c in cycles(pkg_graph)]
    found["file circles"] = [" <-> ".join(c) for c in cycles(file_graph)]
    return found


LABELS = (
    ("package cycles", "package cycles"),
    ("file circles", "file circles"),
    ("up", "arrows back up"),
    ("long", f"functions over {LONG} lines"),
    ("near", f"functions at {NEAR}-{LONG} lines"),
    ("big", f"modules over {BIG} lines"),
    ("lazy", f"coevolve imports inside functions with a `{LAZY}` reason"),
    ("inner", "coevolve imports inside functions without one"),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", action="store_true", help="print the figures (the only mode)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the folder holding coevolve/ (default: src/)")
    ap.add_argument("--list", action="store_true", help="name every item after its count")
    a = ap.parse_args(argv)
    if not a.figures:
        ap.print_help()
        return 2
    found = figures(a.root)
    for key, label in LABELS:
        print(f"{label}: {len(found[key])}")
        if a.list or key in ("package cycles", "file circles", "up"):
            for item in found[key]:
                print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
