"""The premise gate of a skill base: whether the base realises the world's design, so that a
self-evolving method run on it tests the method and not a coin-flip majority.

Judged on the figures the base's build measured (``pretrain.measure``, recorded in
``skill_build.json`` beside the gate's result), against ``GateThresholds`` (``data.skill.gate_thresholds``):

    soft_greedy          greedy accuracy on the soft-deficit stratum        >= soft_greedy_min
    soft_sampled         sampled accuracy on the soft-deficit stratum       in [soft_sampled_min, soft_sampled_max]
    bug_rate.<skill>     measured bug rate of each deficient skill          |measured - injected| <= bug_rate_tolerance
    nonbug_error.<skill> steps of each deficient skill that go wrong        <= nonbug_error_max
                         otherwise than by its bug

The gate's second half, round-1 kept-label oracle accuracy >= ``kept_label_min`` (D²Evo's buffer,
DiagEvo's dual filter), needs a run: a first round measures it (``round_one_check``, in the run's
summary ``skill_world.premise_gate_round1``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coevolve.errors import ConfigError
from coevolve.world.skill.config import GateThresholds
from coevolve.world.skill.problems import DeficitProfile

ROUND_ONE = (
    "round-1 kept-label oracle accuracy >= {:.2f} (D²Evo's buffer, DiagEvo's dual filter): measured by a run's "
    "first round, not by the build (summary.json skill_world.premise_gate_round1)"
)


def _check(figure: str, value: float | None, lo: float | None, hi: float | None, **extra: Any) -> dict[str, Any]:
    ok = value is not None and (lo is None or value >= lo - 1e-12) and (hi is None or value <= hi + 1e-12)
    return {"figure": figure, "value": value, "min": lo, "max": hi, **extra, "passed": ok}


def premise_gate(
    figures: Mapping[str, Any], profile: DeficitProfile, th: GateThresholds = GateThresholds()
) -> dict[str, Any] | None:
    """The gate's result on a build's measured ``figures``: ``passed`` and one check per figure
    (value, bounds, passed); None when the figures lack what the gate reads (a base measured
    before the gate existed, or without samples).

    >>> from coevolve.world.skill.problems import DEFICITS
    >>> figs = {"strata": {"soft": {"greedy": 0.9, "sampled": 0.65}},
    ...         "bug_rate": {"sub": 0.33, "mul": 0.36, "div": 0.7},
    ...         "nonbug_error_rate": {"sub": 0.02, "mul": 0.08, "div": 0.01}}
    >>> g = premise_gate(figs, DEFICITS)
    >>> g["passed"], [c["figure"] for c in g["checks"] if not c["passed"]]
    (False, ['nonbug_error.mul'])
    """
    soft = (figures.get("strata") or {}).get("soft") or {}
    bug, nonbug = figures.get("bug_rate"), figures.get("nonbug_error_rate")
    if "greedy" not in soft or "sampled" not in soft or bug is None or nonbug is None:
        return None
    checks = [
        _check("soft_greedy", soft["greedy"], th.soft_greedy_min, None),
        _check("soft_sampled", soft["sampled"], th.soft_sampled_min, th.soft_sampled_max),
    ]
    for s in profile.deficient:
        r = profile.rate(s)
        checks.append(
            _check(
                f"bug_rate.{s}",
                bug.get(s),
                round(max(0.0, r - th.bug_rate_tolerance), 6),  # 0.35 + 0.05 recorded as 0.4, not 0.39999999999999997
                round(r + th.bug_rate_tolerance, 6),
                injected=r,
            )
        )
    checks += [_check(f"nonbug_error.{s}", nonbug.get(s), None, th.nonbug_error_max) for s in profile.deficient]
    return {
        "passed": all(c["passed"] for c in checks),
        "checks": checks,
        "thresholds": th.model_dump(),
        "second_half": ROUND_ONE.format(th.kept_label_min),
    }


def _bounds(c: Mapping[str, Any]) -> str:
    lo, hi = c.get("min"), c.get("max")
    if lo is not None and hi is not None:
        return f"{lo:.2f}-{hi:.2f}"
    return f">= {lo:.2f}" if lo is not None else f"<= {hi:.2f}"


def failed_figures(gate: Mapping[str, Any]) -> str:
    """The failed checks in one phrase: ``soft_greedy 0.553 (needs >= 0.85); ...``."""
    return "; ".join(
        f"{c['figure']} {'not measured' if c['value'] is None else format(c['value'], '.3f')} (needs {_bounds(c)})"
        for c in gate["checks"]
        if not c["passed"]
    )


def base_gate_problem(base: Path, info: Mapping[str, Any], profile: DeficitProfile, th: GateThresholds) -> str | None:
    """One line on why the skill base at ``base`` (its ``skill_build.json`` read as ``info``)
    fails the gate under ``th``, or None when it passes."""
    gate = premise_gate(info.get("figures") or {}, profile, th)
    if gate is None:
        return (
            f"the skill base {base} has no premise-gate record (built before the gate existed or measured without "
            "samples): rebuild it, or measure it (scripts/skill_base_curve.py --measure-only)"
        )
    if gate["passed"]:
        return None
    return f"the skill base {base} fails its premise gate: {failed_figures(gate)}"


def check_base_gate(
    base: Path,
    info: Mapping[str, Any],
    profile: DeficitProfile,
    th: GateThresholds,
    mode: str,
    say: Callable[[str], None],
) -> None:
    """``data.skill.gate``: 'refuse' raises a ``ConfigError`` naming the failed figures, 'warn'
    prints them, 'ignore' does nothing."""
    if mode == "ignore":
        return
    problem = base_gate_problem(base, info, profile, th)
    if problem is None:
        return
    if mode == "refuse":
        raise ConfigError(
            f"data.skill.gate=refuse: {problem} (a base that passes: more pretraining, data.skill.base_steps, or a "
            "world it can learn; to run on this one anyway: data.skill.gate=warn)"
        )
    say(f"warning (data.skill.gate=warn): {problem}; a null result on it says little about the methods")


def round_one_check(kept_label_accuracy: float | None, th: GateThresholds = GateThresholds()) -> dict[str, Any]:
    """The gate's second half from a run's round 1: its kept pseudo-labels' oracle accuracy
    against ``kept_label_min`` (``passed`` None when the round kept no labels or has no oracle).

    >>> round_one_check(0.46)["passed"], round_one_check(None)["passed"]
    (False, None)
    """
    c = _check("kept_label_accuracy", kept_label_accuracy, th.kept_label_min, None)
    return {**c, "passed": None if kept_label_accuracy is None else c["passed"]}


__all__ = ["base_gate_problem", "check_base_gate", "failed_figures", "premise_gate", "round_one_check"]
