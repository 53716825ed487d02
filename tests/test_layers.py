"""dev/layers.py: the layer figures read the import graph as they say (a fixture package)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))

import layers  # noqa: E402


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "coevolve" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def test_figures_count_cycles_arrows_up_and_lazy_imports(tmp_path):
    body = "\n".join(f"    x = {i}" for i in range(60))
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "eval/__init__.py": "",
            "eval/suite.py": "def f():\n    from coevolve.config.base import X\n",  # eval -> config: up, lazy
            "eval/core.py": "def g():\n    from coevolve.types import (  # lazy: a reason\n        T,\n    )\n",
            "config/__init__.py": "",
            "config/base.py": "from coevolve.eval.suite import f\n",  # down, and a cycle with the line above
            "run/__init__.py": "from coevolve.run import a\n",
            "run/a.py": "from coevolve.run.b import g\n",
            "run/b.py": f"from coevolve.run.a import h\n\n\ndef long():\n{body}\n",
            "types.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from coevolve.config import base\n",
        },
    )
    found = layers.figures(root)
    assert found["package cycles"] == ["config <-> eval"]
    assert found["file circles"] == [
        "coevolve.config.base <-> coevolve.eval.suite",
        "coevolve.run.a <-> coevolve.run.b",
    ]
    assert found["up"] == ["coevolve/eval/suite.py:2 eval -> config"]  # TYPE_CHECKING imports are no arrow
    assert found["inner"] == ["coevolve/eval/suite.py:2 coevolve.config.base"]  # no reason given
    assert found["lazy"] == ["coevolve/eval/core.py:2 coevolve.types (a reason)"]
    assert found["long"] == ["coevolve/run/b.py:4 long 61"] and found["near"] == []


def test_every_package_of_coevolve_is_on_a_floor():
    found = layers.figures(ROOT / "src")  # raises SystemExit naming a package on no floor
    assert set(found) >= {"package cycles", "file circles", "up", "long", "near", "big", "lazy", "inner"}


def test_each_world_is_its_own_home_and_the_factory_sits_above_them():
    assert [layers.package(f"coevolve.world.{m}") for m in ("toy.world", "skill.causes", "arith_steps", "real")] == [
        "world.toy",
        "world.skill",
        "world.arith",
        "world.real",
    ]
    assert layers.package("coevolve.world") == "world" and layers.package("coevolve.world.facts") == "world.facts"
    assert layers.floor_of("world.facts") < layers.floor_of("world.toy") < layers.floor_of("world")
