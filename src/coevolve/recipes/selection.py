"""Round selection and early stopping from the probe's figures: which round ``run.select`` picks,
where ``run.stop_patience`` ends the rounds, which checkpoint is pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.config.sections import RecipeConfig
from coevolve.eval.signals import SelectRule, parse_select, select_round, stop_round
from coevolve.recipes.setup import Setup
from coevolve.run import Phase, Run


def probe_values(run: Run) -> dict[int, dict[str, Any]]:
    """Round -> the probe's figures, from the finished phases (round 0: the base model)."""
    return {
        r.round or 0: r.values
        for r in run.state.records()
        if r.name == "probe" and (r.round is not None or r.stage == "base")
    }


def watched_signal(cfg: RecipeConfig) -> SelectRule:
    """The rule whose signal early stopping watches: ``run.select``'s, p1 under ``last``."""
    rule = parse_select(cfg.run.select)
    return rule if rule.kind != "last" else SelectRule("best_signal", "p1")


def selection_pin(s: Setup, phase: Phase, values: dict[str, Any]) -> dict[str, Path]:
    """The solver checkpoint to keep beyond ``run.keep_checkpoints``: this round's, when
    ``run.select`` (not ``last``) picks it among the rounds probed so far."""
    rule = parse_select(s.cfg.run.select)
    if rule.kind == "last" or phase.round is None:
        return {}
    series = {t: v.get(rule.signal) for t, v in probe_values(s.run).items() if t >= 1}
    series[phase.round] = values.get(rule.signal)
    if select_round(rule, series, phase.round)[0] != phase.round:
        return {}
    ckpt = s.run.checkpoint("solver")
    return {"solver": ckpt} if ckpt is not None else {}


def stopped_after(cfg: RecipeConfig, run: Run) -> int | None:
    """The round after which ``run.stop_patience`` ends the run (None: it runs every round)."""
    if not cfg.run.stop_patience:
        return None
    rule = watched_signal(cfg)
    series = {t: v.get(rule.signal) for t, v in probe_values(run).items()}
    return stop_round(series, rule.direction, cfg.run.stop_patience)


def selection(cfg: RecipeConfig, run: Run) -> dict[str, Any] | None:
    """summary.json's ``selection``: the rule, the round it picks among the rounds run, why,
    the signal by round, and where early stopping ended the run. None for a run without rounds."""
    rounds = sorted({r.round for r in run.state.records() if r.round is not None})
    if not rounds:
        return None
    rule = parse_select(cfg.run.select)
    probes = probe_values(run)
    watched = rule if rule.kind != "last" else watched_signal(cfg) if cfg.run.stop_patience else None
    series = {t: probes.get(t, {}).get(watched.signal) for t in sorted(probes)} if watched else {}
    chosen, why = select_round(rule, series, rounds[-1])
    stop = stopped_after(cfg, run)
    if stop is not None:
        why += (
            f"; stopped after round {stop}: {watched.signal} had not improved for "  # type: ignore[union-attr]
            f"{cfg.run.stop_patience} round(s) (run.stop_patience)"
        )
    return {
        "rule": str(rule),
        "round": chosen,
        "why": why,
        "stopped_after": stop,
        "checkpoint": probes.get(chosen, {}).get("checkpoint"),
        **({"signal": watched.signal, "values": {str(t): v for t, v in series.items()}} if watched else {}),
    }
