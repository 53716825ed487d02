"""``coevolve memory RUN_DIR [--round N]``: print a DiagEvo run's error memory as a tree.

The recipe writes the memory after every round's maintenance phase to
``round_NN/memory.json`` (atomically); this reads the latest one (or round N), through the
run-folder view, and renders skill nodes -> causes with their state, frequency and the ε / p(e)
the next round uses.
"""

from __future__ import annotations

from pathlib import Path

from coevolve.errors import DataError, RunStateError
from coevolve.lab.run_view import memory_rounds, read_config
from coevolve.memory.store import MEMORY_FILE, ErrorMemory, render_tree


def _k_from_config(run_dir: Path) -> float:
    """The run's ε constant k (``memory.k`` in config.yaml), 1.0 when absent."""
    try:
        cfg = read_config(run_dir)
    except DataError:
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
    saved = memory_rounds(run_dir)
    rounds = list(saved)
    if not rounds:
        raise RunStateError(
            f"{run_dir}: no round_NN/{MEMORY_FILE} yet (not a DiagEvo run, or round 1 "
            "has not finished its memory phase)"
        )
    r = rounds[-1] if round_number is None else round_number
    if r not in rounds:
        raise RunStateError(f"{run_dir}: round {r} has no memory (available: {', '.join(map(str, rounds))})")
    mem = ErrorMemory.load(saved[r])
    head = f"{run_dir} - memory after round {r}" + (" (latest)" if r == rounds[-1] else "")
    return head + "\n" + render_tree(mem, next_epsilon=True, k=_k_from_config(run_dir))
