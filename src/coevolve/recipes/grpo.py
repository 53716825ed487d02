"""Recipe ``grpo``: the papers' "Full Data" baseline.

Train the solver with GRPO on a labelled dataset (the toy world by default: fresh problems every
step; or any JSONL of question/answer rows) with reward ``alpha*acc + (1-alpha)*format``
(alpha = 0.9, as R-Zero / D2Evo), then evaluate base and final solver on the held-out set.

Phases: ``base/eval`` -> ``01/solver`` -> ``01/eval``; each is resumable (see coevolve.run).
"""

from __future__ import annotations

import random
from typing import Any

from coevolve.config.grpo import GRPOConfig
from coevolve.recipes.common import (
    Role,
    build_prompter,
    build_role,
    build_task_source,
    grpo_train,
    phase_eval,
    sampling_params,
    say,
    write_summary,
)
from coevolve.run import RunDir
from coevolve.types import Completion, Task


def solver_reward_fn(alpha: float, timeout: float):
    """Reward ``alpha*acc + (1-alpha)*format`` against each task's reference answer."""
    from coevolve.answers import grade
    from coevolve.rewards import solver_rewards

    def fn(tasks: list[Task], comps: list[list[Completion]]):
        rewards, acc, fmt = [], [], []
        for t, cs in zip(tasks, comps):
            texts = [c.text for c in cs]
            r, bd = solver_rewards(texts, [t.answer or ""] * len(texts), alpha=alpha, grade_fn=lambda g, p: grade(g, p, timeout=timeout))
            rewards.append(r)
            acc.extend(bd["acc"])
            fmt.extend(bd["format"])
        n = max(1, len(acc))
        return rewards, {"acc_mean": sum(acc) / n, "format_mean": sum(fmt) / n}

    return fn


def phase_solver(run: RunDir, cfg: GRPOConfig, solver: Role, prompter, source, round: int) -> dict[str, Any]:
    key = f"{round:02d}/solver"

    def fn(seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        s = cfg.solver
        summary = grpo_train(
            role=solver,
            prompt_fn=lambda t: prompter.solver(t.question),
            next_batch=lambda step: source.draw(rng, s.prompts_per_step),
            reward_fn=solver_reward_fn(s.alpha, cfg.run.grader_timeout),
            steps=s.steps,
            group_size=s.group_size,
            params=sampling_params(cfg, seed),
            run=run,
            round=round,
            phase="solver",
            ns="solver",
            seed=seed,
            save_rollouts=cfg.run.save_rollouts,
            progress=cfg.run.progress,
            rollouts_file=run.round_dir(round) / "solver_rollouts.jsonl",
        )
        say(f"[solver] mean reward {summary['reward_mean']:.3f} over {s.steps} steps")
        return {**summary, "checkpoints": solver.save(run, f"r{round:02d}")}

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=round, log_fn=say, keep_checkpoints=cfg.run.keep_checkpoints)


def run(cfg: GRPOConfig, run: RunDir) -> dict[str, Any]:
    solver = build_role("solver", cfg, run)
    prompter = build_prompter(cfg, solver.tokenizer)
    source = build_task_source(cfg)
    phase_eval(run, cfg, solver, prompter, "base/eval", None)
    phase_solver(run, cfg, solver, prompter, source, 1)
    phase_eval(run, cfg, solver, prompter, "01/eval", 1)
    return write_summary(run)
