"""The parameter trace of a run's config through ``recipes.execute``: where the config object goes.

    python dev/trace_config.py [--recipe grpo] [--sections] [--list] [key=value ...]

Runs one small toy run of ``recipe`` (``solver.steps=2 eval.limit=8 run.threads=1`` plus the given
overrides) in a temporary folder under ``sys.settrace`` and follows the config object that
``load_config`` returned (with ``--sections`` also its sections: ``cfg.model``, ``cfg.eval``, ...),
by identity. A frame *holds* the config when one of its local names is bound to it at the call or
at the return, or its ``self.cfg`` is it. Calls and returns are counted once per pair of functions
(``module:function``), however often the run makes them. Printed, one line each:

- stays: coevolve modules with a frame holding the config;
- rooms: their packages (``dev/layers.py``'s ``package``);
- names: distinct (function, local name) pairs bound to it;
- calls down / calls across / calls up: calls from a holding frame to a holding frame in another
  module whose package is on a lower / the same / a higher floor (``dev/layers.py``'s ``FLOORS``);
- returns: returns from a holding frame to a holding caller in another module;
- climbs: those returns that go to a caller on a higher floor (the config went down a floor and
  came back up: the review's "returns to a higher floor").

``--list`` names every call up and climb, and every module with its functions that held the config.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layers import floor_of, package  # noqa: E402  (dev/layers.py, beside this file)


def module_of(filename: str) -> str | None:
    """``.../src/coevolve/recipes/setup.py`` -> ``coevolve.recipes.setup``; None outside coevolve."""
    parts = Path(filename).with_suffix("").parts
    if "coevolve" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("coevolve")
    return ".".join(parts[i:]).removesuffix(".__init__")


def trace(recipe: str, overrides: list[str], sections: bool = False) -> dict:
    from coevolve.config import load_config
    from coevolve.recipes import execute

    cfg = load_config(recipe, None, ["solver.steps=2", "eval.limit=8", "run.threads=1", *overrides])
    tracked = {id(cfg)}
    if sections:
        fields = type(cfg).model_fields
        tracked |= {id(getattr(cfg, f)) for f in fields if hasattr(type(getattr(cfg, f)), "model_fields")}
    names: dict[str, set[str]] = defaultdict(set)  # module -> function:name
    held: dict[int, bool] = {}
    calls: dict[str, dict[str, None]] = {"down": {}, "across": {}, "up": {}}  # ordered sets
    returns: dict[str, None] = {}
    climbs: dict[str, None] = {}

    def holding(frame) -> list[str]:
        loc = frame.f_locals
        out = [k for k, v in loc.items() if id(v) in tracked]
        try:  # the instance's own dict: a __getattr__ (a wrapper half built) is not run
            own = object.__getattribute__(loc["self"], "__dict__")
        except (KeyError, AttributeError, TypeError):
            own = {}
        if own.get("cfg") is cfg:
            out.append("self.cfg")
        return out

    def nearest_holder(frame):
        f = frame.f_back
        while f is not None and not held.get(id(f)):
            f = f.f_back
        return f

    def where(frame) -> str:
        return f"{module_of(frame.f_code.co_filename)}:{frame.f_code.co_name}"

    def local(frame, event, arg):
        if event == "return":
            mod = module_of(frame.f_code.co_filename)
            got = holding(frame)
            for n in got:
                names[mod].add(f"{frame.f_code.co_name}:{n}")
            if got and not held.get(id(frame)):
                held[id(frame)] = True
                note_call(frame, mod)
            if held.pop(id(frame), False):
                caller = nearest_holder(frame)
                cmod = None if caller is None else module_of(caller.f_code.co_filename)
                if caller is not None and cmod != mod:
                    returns[f"{where(frame)} -> {where(caller)}"] = None
                    if floor_of(package(cmod)) > floor_of(package(mod)):
                        climbs[f"{where(frame)} -> {where(caller)}"] = None
        return local

    def note_call(frame, mod):
        caller = nearest_holder(frame)
        if caller is None:
            return
        cmod = module_of(caller.f_code.co_filename)
        if cmod == mod:
            return
        a, b = floor_of(package(cmod)), floor_of(package(mod))
        kind = "down" if b < a else "up" if b > a else "across"
        calls[kind][f"{where(caller)} -> {where(frame)}"] = None

    def on_call(frame, event, arg):
        mod = module_of(frame.f_code.co_filename)
        if mod is None:
            return None
        got = holding(frame)
        for n in got:
            names[mod].add(f"{frame.f_code.co_name}:{n}")
        if got:
            held[id(frame)] = True
            note_call(frame, mod)
        frame.f_trace_lines = False
        return local

    with tempfile.TemporaryDirectory() as tmp:
        sys.settrace(on_call)
        try:
            execute(cfg, Path(tmp) / "run", new=True)
        finally:
            sys.settrace(None)
    return {"names": names, "calls": calls, "returns": returns, "climbs": climbs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="grpo")
    ap.add_argument("--sections", action="store_true", help="follow the config's sections too")
    ap.add_argument("--list", action="store_true", help="name the calls up, the climbs, the returns and the modules")
    ap.add_argument("overrides", nargs="*", help="key=value config overrides")
    a = ap.parse_args(argv)
    t = trace(a.recipe, a.overrides, a.sections)
    mods = sorted(t["names"])
    print(f"stays: {len(mods)}")
    print(f"rooms: {len({package(m) for m in mods})}")
    print(f"names: {sum(len(v) for v in t['names'].values())}")
    for kind in ("down", "across", "up"):
        print(f"calls {kind}: {len(t['calls'][kind])}")
    print(f"returns: {len(t['returns'])}")
    print(f"climbs: {len(t['climbs'])}")
    if a.list:
        for label, items in (("call up", t["calls"]["up"]), ("climb", t["climbs"]), ("return", t["returns"])):
            for item in items:
                print(f"  {label}: {item}")
        for m in mods:
            print(f"  {m}: {', '.join(sorted(t['names'][m]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
