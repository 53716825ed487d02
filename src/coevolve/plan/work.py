"""What a recipe's phases generate and train, as the cost model counts it: ``PhaseWork`` per
phase (rollouts by role, in sampler calls of how many rows; GRPO updates and their rows), read
from the recipe's own declaration (``recipes.declare``: each step's ``Work`` and how many phases
run it), never restated here. This module only adds the cost model's assumptions: prompt lengths
and how ``engine.max_batch`` chunks a sampler call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coevolve.recipes.registry import recipe_of

PROMPT_TOKENS = {
    "toy": {"answer": 32, "question": 64, "diagnosis": 64},
    "real": {"answer": 384, "question": 512, "diagnosis": 768},
    "arith": {"answer": 144, "question": 512, "diagnosis": 768},
}
"""Assumed prompt lengths: toy prompts are ~30-60 characters (char tokenizer); a real math
question with instructions and chat template ~150-400 tokens, a writer prompt (anchor question,
answer, difficulty or memory causes) up to ~500, a diagnosis prompt (a question and two answers)
twice a question's. Assumed, conservative. The arith world's answer prompt (a one-line sum with
the system text, the smollm2 preset's two worked turns and SmolLM2's chat template) is 131 tokens
(measured: dev/perf/bench_plan_rates.py), rounded up."""


@dataclass(frozen=True)
class Gen:
    """Rollouts one role generates in a phase, in sampler calls of ``call_rows`` rows."""

    role: str
    what: str
    rows: int
    call_rows: int
    prompt: int
    max_new: int
    full_call: int = 0  # rows of one sampler call before engine.max_batch chunks it (a Ray pool splits these)


@dataclass(frozen=True)
class Train:
    """GRPO updates of one role in a phase."""

    role: str
    steps: int
    rows_per_step: int
    prompt: int
    max_new: int
    section: str = "solver"  # the config section that sets it (named by the advice)
    kind: str = "answer"  # what its prompts ask for: "answer" (a solver) or "question" (a writer)
    group: int = 1  # rows per prompt (G): learner.share_prompt runs a group's prompt once


@dataclass(frozen=True)
class PhaseWork:
    name: str
    times: int  # how often the phase runs (rounds)
    gens: tuple[Gen, ...] = ()
    train: Train | None = None
    note: str = ""
    uses: tuple[str, ...] = ()  # roles besides the solver whose weights the phase keeps on the device

    @property
    def rollouts(self) -> int:
        return self.times * sum(g.rows for g in self.gens)

    @property
    def gen_tokens_cap(self) -> int:
        return self.times * sum(g.rows * g.max_new for g in self.gens)

    @property
    def train_tokens_cap(self) -> int:
        t = self.train
        return 0 if t is None else self.times * t.steps * t.rows_per_step * t.max_new


def phases(cfg: Any, toy: bool) -> list[PhaseWork]:
    """The recipe's phases that sample or train, with their rollouts (caps: every completion at
    its token cap), from the recipe's declaration (``Recipe.work``)."""
    tokens = PROMPT_TOKENS["toy" if toy else "arith" if cfg.data.source == "arith" else "real"]
    mb = cfg.engine.max_batch
    out = []
    for step, times, work in recipe_of(cfg.recipe).work(cfg, toy):
        gens = tuple(
            Gen(
                r.role,
                r.what,
                r.rows,
                max(1, min(mb, r.prompts * r.n)),
                tokens[r.prompt],
                r.max_new,
                full_call=r.prompts * r.n,
            )
            for r in work.rollouts
        )
        tr = work.train
        train = (
            None
            if tr is None
            else Train(
                tr.role,
                tr.steps,
                tr.rows_per_step,
                tokens[tr.prompt],
                tr.max_new,
                section=tr.section,
                kind=tr.prompt,
                group=tr.group,
            )
        )
        out.append(PhaseWork(step.name, times, gens, train, work.note, uses=step.uses))
    return out


def trainable_roles(cfg: Any) -> list[str]:
    """Roles with their own model and learner, in the order the recipe builds them."""
    return list(recipe_of(cfg.recipe).roles(cfg))
