"""A recipe declared once: its phases in paper order, each with when it runs, which roles it
needs on the device and the work it does.

Every recipe module states one table::

    RECIPE = Recipe("d2evo", roles=d2evo_roles, build=build, steps=(
        Step("eval", phase_eval, stage="base", work=eval_work),
        Step("difficulty", phase_difficulty, work=difficulty_work),
        Step("anchors", phase_anchors),
        Step("questioner", phase_questioner, when=questioner_enabled, uses=("questioner",), work=questioner_work),
        ...
    ))

and everything that must agree with it is derived from it, never written again:

- ``Recipe.schedule(cfg)`` / ``Recipe.phase_list(cfg)``: the phases a run goes through, in
  order (base steps, then every round's steps, then final steps; a step whose ``when`` is false
  for a phase is not in the list). The resume check compares this list with the one saved in
  ``state.json`` (``recipes.check_phase_list``).
- the run loop (``recipes.runner.run_recipe``): runs exactly the scheduled phases, parking the
  roles a phase does not ``use`` in CPU memory first (``Role.offload``; a no-op on CPU);
- the cost model (``coevolve.plan``): ``Recipe.work(cfg, toy)`` gives each step's ``Work`` and
  how many phases run it; ``Recipe.roles(cfg)`` the roles with their own model and learner.

This module holds only the declaration's types (no model, no engine): the cost model reads it
without starting anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from coevolve.run import Phase

PromptKind = Literal["answer", "question", "diagnosis"]
"""What a prompt asks for, so the cost model can assume its length: a solver's question, a
writer's instructions (anchor or memory causes), or a diagnosis (a question with two answers)."""

FROZEN_SOLVER = "frozen solver copy"
"""The role name of rollouts drawn from a frozen copy of the solver (D²Evo's scorer with shared
weights): a second copy of the weights, not a role with a learner."""

FROZEN_DIAGNOSER = "frozen diagnoser"
"""The role name of rollouts drawn from DiagEvo's frozen diagnosis model (``diagnoser.model_path``,
loaded by the engine like a judge): weights of their own, no learner. The cost model assumes the
solver's shape (the paper pairs a 4B diagnoser with 4B and 8B solvers)."""

FROZEN_ROLES = (FROZEN_SOLVER, FROZEN_DIAGNOSER)
"""Rollout roles served by frozen weights beside the trained roles (one more copy on the device)."""

Stage = Literal["base", "round", "final"]


@dataclass(frozen=True)
class Rollouts:
    """Completions one role draws in a phase: ``rows`` in all, in sampler calls of ``prompts``
    prompts x ``n`` completions, each prompt of kind ``prompt``, capped at ``max_new`` tokens."""

    role: str
    what: str
    rows: int
    prompts: int
    n: int
    prompt: PromptKind
    max_new: int


@dataclass(frozen=True)
class Training:
    """The GRPO updates of a phase: ``steps`` updates of ``prompts`` prompts x ``group``
    completions each, set by the config section ``section`` (named by the cost model's advice)."""

    role: str
    section: str
    steps: int
    prompts: int
    group: int
    prompt: PromptKind
    max_new: int

    @property
    def rows_per_step(self) -> int:
        return self.prompts * self.group


@dataclass(frozen=True)
class Work:
    """What one run of a phase generates and trains (caps: every completion at its limit)."""

    rollouts: tuple[Rollouts, ...] = ()
    train: Training | None = None
    note: str = ""

    @property
    def empty(self) -> bool:
        return not self.rollouts and self.train is None


WorkFn = Callable[[Any, bool], Work]
"""``work(cfg, toy) -> Work``: ``toy`` says whether the model is the toy one (prompt lengths,
the world's default benchmarks and diagnoser follow it)."""


def always(cfg: Any, phase: Phase) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One phase of a recipe: ``run(parts, phase)`` does it (``parts``: what the recipe's
    ``build`` made: the Setup, the roles, shared objects); ``stage`` places it before the rounds
    (``base``), in every round or after them (``final``); ``when(cfg, phase)`` drops it where an
    ablation switch or the evaluation schedule says so; ``uses`` names the roles besides the
    solver whose weights it needs on the device; ``work(cfg, toy)`` declares its rollouts and
    updates for the cost model (None: it samples and trains nothing)."""

    name: str
    run: Callable[[Any, Phase], Any]
    stage: Stage = "round"
    when: Callable[[Any, Phase], bool] = always
    uses: tuple[str, ...] = ()
    work: WorkFn | None = None

    def phase(self, t: int | None) -> Phase:
        return Phase(self.name, t) if self.stage == "round" else Phase(self.name, None, self.stage)


@dataclass(frozen=True)
class Recipe:
    """A recipe: its name, its steps in paper order, the roles with their own model and learner
    (``roles(cfg)``, in the order they are built), ``build(setup, roles)`` -> the object every
    step receives, whether it trains on labelled data (``needs_labels``), and ``summary(parts)``:
    extra figures for summary.json at the end."""

    name: str
    steps: tuple[Step, ...]
    roles: Callable[[Any], tuple[str, ...]]
    build: Callable[[Any, dict[str, Any]], Any]
    needs_labels: bool = False
    summary: Callable[[Any], dict[str, Any]] | None = None

    def schedule(self, cfg: Any) -> list[tuple[Phase, Step]]:
        """Every phase of a run of ``cfg`` with the step that does it, in the order they run."""
        rounds = int(getattr(cfg, "rounds", 1))
        out: list[tuple[Phase, Step]] = []
        for stage, times in (("base", [None]), ("round", range(1, rounds + 1)), ("final", [None])):
            for t in times:
                for step in self.steps:
                    if step.stage == stage and step.when(cfg, step.phase(t)):
                        out.append((step.phase(t), step))
        return out

    def phase_list(self, cfg: Any) -> list[Phase]:
        """The phases a run of ``cfg`` goes through, in order (saved in state.json)."""
        return [p for p, _ in self.schedule(cfg)]

    def work(self, cfg: Any, toy: bool) -> list[tuple[Step, int, Work]]:
        """Each step that samples or trains, with how many phases run it: steps of one name (a
        base and a round evaluation, a round and a final difficulty measure) count together, in
        the order of a round (then base, then final)."""
        counts: dict[str, int] = {}
        first: dict[str, Step] = {}
        for _phase, step in self.schedule(cfg):
            counts[step.name] = counts.get(step.name, 0) + 1
            first.setdefault(step.name, step)
        order = [s.name for s in self.steps if s.stage == "round"] + [s.name for s in self.steps]
        out = []
        for name in dict.fromkeys(order):
            step = first.get(name)
            if step is None or step.work is None:
                continue
            work = step.work(cfg, toy)
            if not work.empty:
                out.append((step, counts[name], work))
        return out


def phase_cap(phase: Any, sampling: Any) -> int:
    """The completion cap of a phase section: its own ``max_new_tokens``, else the run's."""
    return int(getattr(phase, "max_new_tokens", None) or sampling.max_new_tokens)


def train_work(
    role: str, section: str, phase: Any, sampling: Any, prompt: PromptKind, what: str, *scoring: Rollouts
) -> Work:
    """A GRPO phase of ``role`` set by config section ``section``: its rollouts (``what``), the
    rollouts its reward draws (``scoring``, per rollout row: see ``scored_by``) and its updates;
    nothing when ``phase.steps`` is 0."""
    if phase.steps == 0:
        return Work()
    rows = phase.prompts_per_step * phase.group_size
    cap = phase_cap(phase, sampling)
    own = Rollouts(role, what, phase.steps * rows, phase.prompts_per_step, phase.group_size, prompt, cap)
    return Work(
        (own, *scoring), Training(role, section, phase.steps, phase.prompts_per_step, phase.group_size, prompt, cap)
    )


def scored_by(role: str, phase: Any, sampling: Any, samples: int) -> Rollouts:
    """The frozen solver's answers that score a writer's GRPO phase: ``samples`` answers per
    written question, in sampler calls of ``sampling.batch_prompts`` questions."""
    rows = phase.steps * phase.prompts_per_step * phase.group_size
    return Rollouts(
        role,
        f"{samples} answers per question",
        rows * samples,
        sampling.batch_prompts,
        samples,
        "answer",
        sampling.max_new_tokens,
    )


__all__ = [
    "FROZEN_DIAGNOSER",
    "FROZEN_ROLES",
    "FROZEN_SOLVER",
    "PromptKind",
    "Recipe",
    "Rollouts",
    "Stage",
    "Step",
    "Training",
    "Work",
    "WorkFn",
    "always",
    "train_work",
    "phase_cap",
    "scored_by",
]
