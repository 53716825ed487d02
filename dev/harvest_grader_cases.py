"""Harvest published grader test cases into ``tests/data/grader_cases_published.jsonl``.

Reads the parametrised (gold, pred, expected) cases of two maintained graders' test suites from
local checkouts, without importing or running them (the files are parsed with ``ast``):

* huggingface/Math-Verify (Apache-2.0): ``tests/test_all.py``, ``test_boxed.py``,
  ``test_numina_cases.py``, ``test_open_thoughts.py``, ``test_strict.py``, ``test_yujianll.py``;
* huggingface/lighteval (MIT): ``tests/unit/metrics/test_extractive_match.py`` (its math tests;
  the multiple-choice letter tests are left out: coevolve grades letters with ``extract_choice``).

Each row is normalised to ``{"id", "gold", "pred", "expected", "source", "licence", "config"}``:
``id`` is ``<repo>/<path>::<test>[<index in the parametrize list>]`` (stable for a given commit),
``source`` is ``<owner>/<repo>@<commit>:<path>::<test>``, ``config`` records the settings the
upstream test ran with (``match_types``, ``language``, and any non-default ``precision``,
``strict`` or ``allow_set_relation_comp``).

Selection: only cases at the settings coevolve's grader has (float rounding to 6 places, strict
variable comparison, no set/relation cross-comparison) are kept -- a case whose expected verdict
depends on a setting we do not have would test the setting, not the reading; each kept
(gold, pred, expected) appears once (lighteval repeats many Math-Verify cases; the first source wins).
The dropped cases are counted on stdout.

Usage: ``python dev/harvest_grader_cases.py --math-verify DIR --lighteval DIR [--out PATH]``
(DIR: a git checkout or bare repository; the commit read is its HEAD).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MATH_VERIFY_FILES = (
    "tests/test_all.py",
    "tests/test_boxed.py",
    "tests/test_numina_cases.py",
    "tests/test_open_thoughts.py",
    "tests/test_strict.py",
    "tests/test_yujianll.py",
)
LIGHTEVAL_FILES = ("tests/unit/metrics/test_extractive_match.py",)
SKIP_TESTS = {"test_extraction_abc", "test_multilingual_extraction_abc"}  # letter choices, not math
DEFAULTS = {"precision": 6, "strict": True, "allow_set_relation_comp": False}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def literal(node: ast.AST) -> Any:
    """A parametrize value: a Python literal, ``Language.X`` (-> "x"), or an f-string of math.sqrt."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Language":
        return node.attr.lower()
    if isinstance(node, (ast.List, ast.Tuple)):
        return [literal(e) for e in node.elts]
    if isinstance(node, ast.JoinedStr):  # f"{math.sqrt(17):.15f}" / f"$\\sqrt{{17}}$" (Math-Verify test_all)
        return eval(compile(ast.Expression(node), "<case>", "eval"), {"math": __import__("math")})  # noqa: S307
    return ast.literal_eval(node)


def call_kwargs(fn: ast.FunctionDef) -> dict[str, Any]:
    """Keyword settings of the test body's ``compare_strings(...)`` / ``verify(parse(...))`` call."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "compare_strings":
            out: dict[str, Any] = {}
            for kw in node.keywords:
                if isinstance(kw.value, ast.Name):  # a parameter of the test: read per case
                    out[kw.arg] = ("param", kw.value.id)
                else:
                    out[kw.arg] = literal(kw.value)
            for i, arg in enumerate(node.args[2:]):  # compare_strings(gold, pred, language, match_types)
                name = ("language", "match_types")[i]
                out[name] = ("param", arg.id) if isinstance(arg, ast.Name) else literal(arg)
            return out
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "verify":
            return {"match_types": "defaults"}  # plain parse()/verify() with Math-Verify's defaults
    return {}


def cases_of(src: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(test name, index, {param: value, settings...}) for every parametrised case of ``src``."""
    tree = ast.parse(src)
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name in SKIP_TESTS:
            continue
        settings = call_kwargs(fn)
        for dec in fn.decorator_list:
            if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", None) == "parametrize"):
                continue
            names = [n.strip() for n in literal(dec.args[0]).split(",")]
            for idx, row in enumerate(dec.args[1].elts):
                values = dict(zip(names, literal(row)))
                case = {k: (values[v[1]] if isinstance(v, tuple) else v) for k, v in settings.items()}
                case.update(values)
                yield fn.name, idx, case


def harvest(repo: Path, name: str, files: tuple[str, ...], licence: str) -> tuple[list[dict], list[str]]:
    commit = git(repo, "rev-parse", "HEAD").strip()
    owner_repo = "huggingface/" + name
    rows, dropped = [], []
    for path in files:
        for test, idx, case in cases_of(git(repo, "show", f"HEAD:{path}")):
            expected = case.get("expected", case.get("result"))
            cid = f"{name}/{path}::{test}[{idx}]"
            off = {k: case[k] for k in DEFAULTS if k in case and case[k] != DEFAULTS[k]}
            if off:
                dropped.append(f"{cid} ({', '.join(f'{k}={v}' for k, v in off.items())})")
                continue
            config: dict[str, Any] = {"match_types": case.get("match_types", ["latex", "expr"])}
            if case.get("language", "english") != "english":
                config["language"] = case["language"]
            rows.append(
                {
                    "id": cid,
                    "gold": str(case["gold"]),
                    "pred": str(case["pred"]),
                    "expected": bool(expected),
                    "source": f"{owner_repo}@{commit}:{path}::{test}",
                    "licence": licence,
                    "config": config,
                }
            )
    return rows, dropped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--math-verify", type=Path, required=True, help="checkout of huggingface/Math-Verify")
    ap.add_argument("--lighteval", type=Path, required=True, help="checkout of huggingface/lighteval")
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/data/grader_cases_published.jsonl"
    )
    args = ap.parse_args()
    rows: list[dict] = []
    dropped: list[str] = []
    for repo, name, files, lic in (
        (args.math_verify, "Math-Verify", MATH_VERIFY_FILES, "Apache-2.0"),
        (args.lighteval, "lighteval", LIGHTEVAL_FILES, "MIT"),
    ):
        got, off = harvest(repo, name, files, lic)
        rows += got
        dropped += off
    seen: set[tuple[str, str, bool]] = set()
    kept, dupes = [], 0
    for r in rows:
        key = (r["gold"], r["pred"], r["expected"])
        if key in seen:
            dupes += 1
            continue
        seen.add(key)
        kept.append(r)
    with args.out.open("w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(
        f"{len(kept)} cases written to {args.out} ({dupes} repeats dropped, "
        f"{len(dropped)} dropped for settings coevolve does not have)"
    )
    for d in dropped:
        print(f"  dropped {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
