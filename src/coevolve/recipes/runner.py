"""The run loop of every recipe, derived from its declaration (``run_recipe``), and where the roles
wait between phases (``place_roles``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.config.sections import RecipeConfig
from coevolve.engine import ENGINE_DIR, Engine
from coevolve.loop import Role
from coevolve.recipes.declare import Recipe, Step
from coevolve.recipes.selection import stopped_after
from coevolve.recipes.setup import setup
from coevolve.recipes.summary import finish
from coevolve.reward_function import run_grader
from coevolve.run import Run, derive_seed, seed_everything


def run_recipe(
    recipe: Recipe, cfg: RecipeConfig, run: Run, report: Callable[[Path], Path] | None = None
) -> dict[str, Any]:
    """The run loop of every recipe, derived from its declaration: the run's grader, engine,
    parts and roles, then every phase of ``recipe.schedule(cfg)`` in order (a finished phase is
    skipped by ``Run.phase``; before an unfinished one, the roles it does not use are parked:
    ``place_roles``), then the summary and, with ``report`` (``recipes.execute``'s), the report. The grader's workers and the engine's
    shared resources (an actor pool, a Ray it started) end with the run."""
    with run_grader(cfg) as grader, Engine(cfg.engine, scratch=run.path / ENGINE_DIR) as engine:
        s = setup(cfg, run, grader, engine)
        # the roles' random initialisation (LoRA adapters) follows run.seed, not whatever state the
        # process's generators were left in: a run in a process that ran others draws as a fresh one
        seed_everything(derive_seed(cfg.run.seed, "roles"))
        roles = {name: s.role(name) for name in recipe.roles(cfg)}
        parts = recipe.build(s, roles)
        for phase, step in recipe.schedule(cfg):
            stop = stopped_after(cfg, run)
            if stop is not None and phase.round is not None and phase.round > stop:
                continue  # run.stop_patience ended the rounds; the final stage still runs
            if not run.done(phase):
                place_roles(roles, step.uses)
                s.park()
                run.expect(bar_total(step, cfg))
            step.run(parts, phase)
        return finish(s, recipe.summary(parts) if recipe.summary is not None else None, report)


def bar_total(step: Step, cfg: RecipeConfig) -> int | None:
    """The answers a phase that samples without training draws by its declaration (``Step.work``:
    the total of its progress bar); None for a GRPO phase (its loop shows its steps) or one that
    samples nothing."""
    work = step.work(cfg, cfg.model.path is None) if step.work is not None else None
    if work is None or work.train is not None:
        return None
    return sum(r.rows for r in work.rollouts) or None


def place_roles(roles: dict[str, Role], uses: tuple[str, ...]) -> None:
    """Before a phase: the roles it ``uses`` back on their device, every other role but the
    solver parked in CPU memory (weights too: it will not even sample until a phase uses it).
    Acts only on a GPU with ``learner.offload_when_idle`` (``Role.offload`` / ``onload``)."""
    for name, role in roles.items():
        if name in uses:
            role.onload()
        elif name != "solver":
            role.offload(weights=True)
