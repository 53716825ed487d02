"""The self-evolving methods' premise, per round, from a run's round rows (summary.json's ``premise``).

Why: D²Evo and DiagEvo train on majority-vote labels; they can only help when those labels are
right clearly more often than not (the papers: 65-75 %), when questions sit in the difficulty
band, and when GRPO groups carry signal. A null result on a base where this fails says nothing
about the method, so every run shows the three figures, round by round:

- ``kept_label_accuracy``: the kept pseudo-labels right against the world's oracle (D²Evo's
  buffer, DiagEvo's / R-Zero's kept pool; None without an oracle or without pseudo-labels);
- ``in_band``: the share of the writer's well-formed questions in the band (D²Evo's questioner;
  DiagEvo's pool: the share of labelled questions the absolute band keeps);
- ``zero_variance``: the share of the solver's GRPO groups whose rewards were all equal.
"""

from __future__ import annotations

from typing import Any

PREMISE_FLOOR = 0.5
"""Round-1 kept-label accuracy below which a run warns (ours: a vote right less often than not)."""

_KEPT = ("buffer/oracle_acc_kept", "pool/oracle_acc_kept")


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for k in keys:
        if isinstance(row.get(k), (int, float)) and not isinstance(row.get(k), bool):
            return float(row[k])
    return None


def _in_band(row: dict[str, Any]) -> float | None:
    if (v := _first(row, ("questioner/in_band",))) is not None:
        return v
    kept, labelled = row.get("pool/kept_absolute"), row.get("pool/labelled")
    if isinstance(kept, int) and isinstance(labelled, int) and labelled > 0:
        return round(kept / labelled, 4)
    return None


def premise_rows(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per round: ``round``, ``kept_label_accuracy``, ``in_band``, ``zero_variance``.

    >>> premise_rows([{"round": 1, "buffer/oracle_acc_kept": 0.4, "questioner/in_band": 0.5,
    ...                "solver/zero_variance": 0.25}])
    [{'round': 1, 'kept_label_accuracy': 0.4, 'in_band': 0.5, 'zero_variance': 0.25}]
    """
    return [
        {
            "round": r["round"],
            "kept_label_accuracy": _first(r, _KEPT),
            "in_band": _in_band(r),
            "zero_variance": _first(r, ("solver/zero_variance",)),
        }
        for r in rounds
    ]


def premise_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """A warning when round 1's kept labels are right less than ``PREMISE_FLOOR`` of the time.

    >>> premise_warnings([{"round": 1, "kept_label_accuracy": 0.36}])[0][:60]
    'round 1: kept pseudo-labels right 36.0 % of the time (below '
    """
    first = next((r for r in rows if r["round"] == 1), None)
    acc = None if first is None else first["kept_label_accuracy"]
    if acc is None or acc >= PREMISE_FLOOR:
        return []
    return [
        f"round 1: kept pseudo-labels right {100 * acc:.1f} % of the time (below {100 * PREMISE_FLOOR:.0f} %): "
        "the majority vote is wrong more often than right on this base, so the self-evolving methods train on "
        "mostly wrong labels and a null result says nothing about them (a stronger or warm-started base, e.g. "
        "model.path=smollm2-arith)"
    ]


__all__ = ["PREMISE_FLOOR", "premise_rows", "premise_warnings"]
