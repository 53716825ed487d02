"""Recipe ``grpo``: the papers' "Full Data" baseline.

Train the solver with GRPO on labelled data (the toy world by default: fresh problems every
step; or any JSONL of question/answer rows) with reward ``α·acc + (1-α)·format`` (α = 0.9, as
R-Zero / D²Evo), then evaluate base and final solver.

Phases: ``base/eval`` -> ``01/solver`` -> ``01/eval``; each is resumable (see ``coevolve.run``).
"""

from __future__ import annotations

import random
from typing import Any

from coevolve.answers import make_grader
from coevolve.config.grpo import GRPOConfig
from coevolve.loop import Role, labelled_reward
from coevolve.recipes.common import Setup, finish, phase_eval, setup
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult, Run
from coevolve.types import Task
from coevolve.verl.parquet import RewardSpec


def phase_solver(s: Setup, solver: Role, t: int) -> PhaseRecord:
    """GRPO on labelled questions drawn fresh every step (the Full-Data baseline)."""
    cfg, sp = s.cfg, s.cfg.solver  # type: ignore[attr-defined]

    def fn(ctx: PhaseContext) -> PhaseResult:
        rng = random.Random(ctx.seed)
        labelled: set[str] = set()  # distinct training questions: one gold label each (compute ``labels``)

        def batch(step: int) -> list[Task]:
            tasks = s.world.draw(rng, sp.prompts_per_step)
            labelled.update(t.id for t in tasks)
            return tasks

        res = s.train(
            solver, sp, verl_reward=RewardSpec("solver", sp.alpha, cfg.run.grader_timeout), batches=batch,
            prompt=lambda task: s.world.prompter.solver(task.question), reward=labelled_reward(sp.alpha, s.grader),
            params=s.params(ctx.seed, sp), ctx=ctx, ns="solver", progress=cfg.run.progress,
            rollouts_file=ctx.dir / "solver_rollouts.jsonl" if cfg.run.save_rollouts else None)
        ctx.compute.labelled(len(labelled))
        ctx.say(f"[solver] mean reward {res.reward_mean:.3f} over {res.steps} steps")
        return PhaseResult({"reward_mean": round(res.reward_mean, 4), "steps": res.steps, "updates": res.updates},
                           res.rollouts, s.save(solver, f"r{t:02d}"), res.problem)

    return s.run.phase(Phase("solver", t), fn)


def plan(cfg: GRPOConfig) -> list[Phase]:
    """The phases ``run`` goes through, in order (kept in state.json; a resume refuses a change)."""
    return [Phase.base("eval"), Phase("solver", 1), Phase("eval", 1)]


def run(cfg: GRPOConfig, run: Run) -> dict[str, Any]:
    with make_grader(cfg.run.grader_timeout, cfg.run.grader_workers) as grader:
        s = setup(cfg, run, grader)
        solver = s.role("solver")
        phase_eval(s, solver, Phase.base("eval"))
        phase_solver(s, solver, 1)
        phase_eval(s, solver, Phase("eval", 1))
        return finish(s)
