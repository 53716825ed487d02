"""Recipe ``grpo``: the papers' "Full Data" baseline.

Train the solver with GRPO on labelled data (the toy world by default: fresh problems every
step; or any JSONL of question/answer rows) with reward ``α·acc + (1-α)·format`` (α = 0.9, R-Zero's;
the papers give no α), then evaluate base and final solver.

Phases (``RECIPE``): ``base/eval`` -> ``01/solver`` -> ``01/eval``; each is resumable (see
``coevolve.run``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from coevolve.config.grpo import GRPOConfig
from coevolve.loop import Role
from coevolve.recipes.declare import Recipe, Step, Work, train_work
from coevolve.recipes.evaluation import BASE_EVAL, ROUND_EVAL
from coevolve.recipes.setup import Setup
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult
from coevolve.training import RewardSpec, TrainRequest
from coevolve.types import Task


@dataclass
class GRPO:
    """What the phases share: the run's Setup and the solver."""

    s: Setup
    solver: Role


def phase_solver(p: GRPO, phase: Phase) -> PhaseRecord:
    """GRPO on labelled questions drawn fresh every step (the Full-Data baseline)."""
    s, solver, t = p.s, p.solver, phase.round
    sp = s.cfg.solver  # type: ignore[attr-defined]

    def fn(ctx: PhaseContext) -> PhaseResult:
        rng = random.Random(ctx.seed)
        labelled: set[str] = set()  # distinct training questions: one gold label each (compute ``labels``)

        def batch(step: int) -> list[Task]:
            tasks = s.world.draw(rng, sp.prompts_per_step)
            labelled.update(t.id for t in tasks)
            return tasks

        res = s.train(
            solver,
            TrainRequest(
                sp,
                "solver",
                batch,
                lambda task: s.world.prompter.solver(task.question),
                s.params(ctx.seed, sp),
                RewardSpec("solver", sp.alpha),
            ),
            ctx,
        )
        ctx.compute.labelled(len(labelled))
        ctx.say(f"[solver] mean reward {res.reward_mean:.3f} over {res.steps} steps")
        return PhaseResult(
            {
                "reward_mean": round(res.reward_mean, 4),
                "steps": res.steps,
                "updates": res.updates,
                "zero_variance": res.zero_variance,
            },
            res.rollouts,
            s.save(solver, f"r{t:02d}"),
            res.problem,
        )

    return s.run.phase(phase, fn)


def solver_work(cfg: GRPOConfig, toy: bool) -> Work:
    return train_work("solver", "solver", cfg.solver, cfg.sampling, "answer", "answers")


RECIPE = Recipe(
    "grpo",
    roles=lambda cfg: ("solver",),
    build=lambda s, roles: GRPO(s, roles["solver"]),
    needs_labels=True,
    steps=(BASE_EVAL, Step("solver", phase_solver, work=solver_work), ROUND_EVAL),
)
