"""``coevolve memory RUN_DIR [--round N]``: print a DiagEvo run's error memory as a tree.

The recipe writes the memory after every round's maintenance phase to
``round_NN/memory.json`` (atomically); this reads the latest one (or round N) and renders
skill nodes -> causes with their state, frequency and the ε / p(e) the next round uses.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from coevolve.errors import RunStateError
from coevolve.memory.store import MEMORY_FILE, ErrorMemory, render_tree


def memory_rounds(run_dir: Path) -> list[int]:
    """Rounds of ``run_dir`` that hold a saved memory, ascending."""
    out = []
    for p in Path(run_dir).glob(f"round_*/{MEMORY_FILE}"):
        m = re.fullmatch(r"round_(\d+)", p.parent.name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def _k_from_config(run_dir: Path) -> float:
    """The run's ε constant k (``memory.k`` in config.yaml), 1.0 when absent."""
    p = Path(run_dir) / "config.yaml"
    try:
        cfg = yaml.safe_load(p.read_text(encoding="utf-8")) if p.is_file() else None
    except yaml.YAMLError:
        return 1.0
    try:
        return float(((cfg or {}).get("memory") or {}).get("k", 1.0))
    except (AttributeError, TypeError, ValueError):
        return 1.0


def memory_command(run_dir: str | Path, round_number: int | None = None) -> str:
    """The rendered memory of round ``round_number`` (default: the latest round that has one).
    Raises ``RunStateError`` naming the folder when there is no memory to show."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunStateError(f"{run_dir}: no such run folder")
    rounds = memory_rounds(run_dir)
    if not rounds:
        raise RunStateError(
            f"{run_dir}: no round_NN/{MEMORY_FILE} yet (not a DiagEvo run, or round 1 "
            "has not finished its memory phase)"
        )
    r = rounds[-1] if round_number is None else round_number
    if r not in rounds:
        raise RunStateError(f"{run_dir}: round {r} has no memory (available: {', '.join(map(str, rounds))})")
    mem = ErrorMemory.load(run_dir / f"round_{r:02d}" / MEMORY_FILE)
    head = f"{run_dir} - memory after round {r}" + (" (latest)" if r == rounds[-1] else "")
    return head + "\n" + render_tree(mem, next_epsilon=True, k=_k_from_config(run_dir))
