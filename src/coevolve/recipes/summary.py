"""The run's end: ``summary.json`` from the phase records (``write_summary``) and the report
(``finish``, the last step of a recipe)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.recipes.premise import premise_rows, premise_warnings
from coevolve.recipes.selection import selection
from coevolve.recipes.setup import Setup
from coevolve.run import SUMMARY_FILE, PhaseRecord, Run
from coevolve.run.compute import Compute, cumulative
from coevolve.run.files import atomic_write_json
from coevolve.world.skill.gate import round_one_check


def cut_off_shares(recs: list[PhaseRecord]) -> dict[str, float]:
    """summary.json's ``cut_off``: per phase key, the share of its completions cut off by the
    token budget (``coevolve.run.compute``), for the phases that sampled."""
    out = {}
    for r in recs:
        share = None if r.compute is None else Compute.from_dict(r.compute).cut_off_share()
        if share is not None:
            out[r.key] = round(share, 4)
    return out


def write_summary(run: Run, extra: dict[str, Any] | None = None, gate: Any = None) -> dict[str, Any]:
    """``summary.json`` from the phase records: ``ok`` / ``problems`` (phases that should have
    trained and did not), evaluations (base, per round, final), one row of scalar figures per
    round, the figures of the final stage, total wall time. ``gate`` (a skill-world run's
    ``data.skill.gate_thresholds``) adds the premise gate's second half, judged on round 1's
    kept-label accuracy, as ``skill_world.premise_gate_round1``."""
    recs = run.state.records()
    evals: dict[str, Any] = {"rounds": {}}
    by_round: dict[int, dict[str, Any]] = {}
    final: dict[str, Any] = {}
    for r in recs:
        if r.name == "eval" and r.stage == "base":
            evals["base"] = r.values.get("eval", {})
        elif r.name == "eval" and r.round is not None:
            evals["rounds"][str(r.round)] = r.values.get("eval", {})
        scalars = {
            f"{r.name}/{k}": v for k, v in r.values.items() if isinstance(v, (int, float, str, bool)) or v is None
        }
        if r.round is not None:
            row = by_round.setdefault(r.round, {"round": r.round})
            row.update({f"phase/{r.name}/seconds": round(r.seconds, 2), f"{r.name}/rollouts": r.rollouts, **scalars})
        elif r.stage == "final":
            final.update({f"{r.name}/rollouts": r.rollouts, **scalars})
    chosen = (extra or {}).get("selection") or {}
    if evals["rounds"]:  # the round run.select picks (summary "selection"), else the last evaluated
        evals["final"] = evals["rounds"].get(str(chosen.get("round")), evals["rounds"][max(evals["rounds"], key=int)])
    problems = [{"phase": r.key, "problem": r.problem} for r in recs if r.problem]
    rows = [by_round[t] for t in sorted(by_round)]
    premise = premise_rows(rows)
    warnings = premise_warnings(premise)
    if gate is not None:
        extra = _gate_round_one(premise, gate, extra, warnings)
    summary = {
        "recipe": run.state.recipe,
        "ok": not problems,
        "problems": problems,
        "eval": evals,
        "rounds": rows,
        "premise": premise,
        "warnings": warnings,
        "final": final,
        "rollouts": sum(r.rollouts for r in recs),
        "compute": _compute_totals(recs),
        "cut_off": cut_off_shares(recs),
        "wall_seconds": round(sum(r.seconds for r in recs), 1),
        **(extra or {}),
    }
    atomic_write_json(run.path / SUMMARY_FILE, summary)
    return summary


def _gate_round_one(
    premise: list[dict[str, Any]], gate: Any, extra: dict[str, Any] | None, warnings: list[str]
) -> dict[str, Any]:
    """``extra`` with ``skill_world.premise_gate_round1`` (round 1's kept-label accuracy against
    the gate); a failed check adds a warning to ``warnings`` unless one is there already."""
    first = next((r["kept_label_accuracy"] for r in premise if r["round"] == 1), None)
    check = round_one_check(first, gate)
    extra = {**(extra or {})}
    extra["skill_world"] = {**(extra.get("skill_world") or {}), "premise_gate_round1": check}
    if check["passed"] is False and not warnings:  # below one half is warned above already
        warnings.append(
            f"round 1: kept pseudo-labels right {100 * first:.1f} % of the time, below the skill base's premise "
            f"gate ({100 * gate.kept_label_min:.0f} %, data.skill.gate_thresholds.kept_label_min)"
        )
    return extra


def _compute_totals(recs: list[PhaseRecord]) -> dict[str, dict[str, int]] | None:
    """The run's total training and evaluation compute (``coevolve.run.compute``); None for a
    run whose older phases were recorded without it."""
    points = cumulative(recs)
    if not points:
        return None
    return {"train": points[-1].train.to_dict(), "eval": points[-1].eval.to_dict()}


def finish(
    s: Setup, extra: dict[str, Any] | None = None, report: Callable[[Path], Path] | None = None
) -> dict[str, Any]:
    """Summary and the run report (``report``: ``report/`` with plots and report.md, written by
    the caller's writer), the last step of a recipe."""
    sel = selection(s.cfg, s.run)
    if sel is not None:
        s.run.say(f"[select] round {sel['round']}: {sel['why']}")
    summary = write_summary(
        s.run,
        {**(extra or {}), **s.world.run_summary(s.run.path), **({"selection": sel} if sel is not None else {})},
        gate=s.cfg.data.skill.gate_thresholds if s.world.name == "skill" else None,
    )
    for warning in summary["warnings"]:
        s.run.say(f"warning: {warning}")
    s.run.metrics.close()
    if report is not None:
        s.run.say(f"[report] {report(s.run.path)}")
    return summary
