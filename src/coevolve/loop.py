"""The local training backend (``backend=local``): the GRPO loop every role shares (solver,
D²Evo questioner, DiagEvo challenger), behind ``training.Trainer`` as ``LocalTrainer``.

One step: draw prompts -> sample a group per prompt -> ``reward_fn(step, tasks, completions)``
-> learner update -> weight sync -> ``StepBook``. Reward functions get everything they need as
arguments and return what they observed (``Observed``: batch scalars and per-completion audit
records); the book logs the scalars under the phase's namespace and keeps the records, so no
step counter or audit list lives in a closure. Also the roles (``Role``: a model shared by its
sampler and learner) and the decoding of a phase (``sampling_params``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coevolve.rl.learner import Learner, RolloutGroup
from coevolve.run import PhaseContext, derive_seed, random_states, set_random_states
from coevolve.run.compute import Compute
from coevolve.run.files import atomic_write_json
from coevolve.schema import GRPOPhase
from coevolve.training import (  # Observed, TrainResult, labelled_reward: also importable from here
    Observed,
    RewardFn,
    StepBook,
    TrainRequest,
    TrainResult,
    book_file,
    labelled_reward,
    local_reward,
    zero_variance_groups,
)
from coevolve.types import AnswerGrader, Completion, Sampler, SamplingParams, Stop, Task


@dataclass
class Role:
    """A trainable policy: one model shared by its sampler and its learner."""

    name: str
    model: Any
    tokenizer: Any
    sampler: Sampler
    learner: Learner

    def sync(self) -> None:
        """Make the sampler serve the learner's new weights (explicit, after every update)."""
        self.sampler.sync_weights(self.model)

    def save(self, path: Path) -> Path:
        return self.learner.save(path, self.tokenizer)

    def offload(self, weights: bool = False) -> None:
        """Free the GPU of what this role does not need while it is not training: its fp32
        masters and optimizer state (they return at its next update), and with ``weights`` its
        weights too (a role that will not even sample before ``onload``). Only with
        ``learner.offload_when_idle`` (default) and a role on a GPU: a no-op on CPU."""
        if not self.learner.cfg.offload_when_idle or self.learner.device.type == "cpu":
            return
        self.learner.offload_state()
        if weights:
            self.learner.move_weights("cpu")
        _release_cached_memory(self.learner.device)

    def onload(self) -> None:
        """The role's weights back on its device (before it samples or trains again)."""
        if self.learner.device.type != "cpu":
            self.learner.move_weights(self.learner.device)


def _release_cached_memory(device: Any) -> None:
    """Hand blocks freed by an offload back to the driver, so a colocated engine (or the next
    allocation of another size) can use them rather than the caching allocator keeping them."""
    import torch

    if getattr(device, "type", None) == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


class ParkedSampler:
    """A sampler whose model waits in CPU memory between ``sample`` calls and visits ``device``
    only while sampling: D²Evo's frozen scorer is a full second copy of the solver that must not
    hold GPU memory while the learner steps. Costs one host<->device copy of the weights per call
    (~1 s for a 4B bf16 model), small next to the call's generation."""

    def __init__(self, inner: Sampler, model: Any, device: Any) -> None:
        self.inner, self.model, self.device = inner, model, device
        self.tokenizer = inner.tokenizer
        model.to("cpu")
        _release_cached_memory(device)

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        self.model.to(self.device)
        try:
            return self.inner.sample(prompts, n, params)
        finally:
            self.model.to("cpu")
            _release_cached_memory(self.device)

    def sync_weights(self, model: Any) -> None:
        self.inner.sync_weights(model)


class PhaseParkedSampler:
    """A frozen model folder's HF sampler whose model waits in CPU memory except in the phases
    that sample from it: moved to ``device`` at its first call of a phase, back to CPU when the run
    loop parks idle roles before the next phase (``park``). One host<->device copy per phase that
    uses it, not per call (DiagEvo's diagnoser answers hundreds of small duplicate checks in one
    memory phase); between those phases its GPU memory is free for the learner and the engine."""

    def __init__(self, inner: Any, model: Any, device: Any) -> None:
        self.inner, self.model, self.device = inner, model, device
        self.tokenizer = inner.tokenizer
        self.on_device = True
        self.park()

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        if not self.on_device:
            self.model.to(self.device)
            self.on_device = True
        return self.inner.sample(prompts, n, params)

    def park(self) -> None:
        if self.on_device:
            self.model.to("cpu")
            self.on_device = False
            _release_cached_memory(self.device)

    def sync_weights(self, model: Any) -> None:
        self.inner.sync_weights(model)


class ShuffledPasses:
    """Batches drawn by shuffled passes over a fixed set: every question once per pass, a new
    shuffle when a pass is used up (DiagEvo's kept set is small and should be covered evenly)."""

    def __init__(self, items: Sequence[Task], rng: random.Random) -> None:
        self.items, self.rng = list(items), rng
        self.queue: list[Task] = []

    def take(self, k: int) -> list[Task]:
        out = []
        while len(out) < k:
            if not self.queue:
                self.queue.extend(self.rng.sample(self.items, len(self.items)))
            out.append(self.queue.pop())
        return out


def sampling_params(
    sampling: Any, seed: int | None, phase: GRPOPhase | None = None, stop: Stop | None = None, **over: Any
) -> SamplingParams:
    """Decoding parameters from the ``sampling`` section, with a phase's own temperature /
    completion cap where it sets them, the prompt kind's ``stop``, and explicit overrides last."""
    kw: dict[str, Any] = dict(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_new_tokens=sampling.max_new_tokens,
        seed=seed,
        stop=stop or Stop(),
    )
    if phase is not None:
        kw.update(
            {
                k: v
                for k, v in (("temperature", phase.temperature), ("max_new_tokens", phase.max_new_tokens))
                if v is not None
            }
        )
    kw.update(over)
    return SamplingParams(**kw)


def grpo_train(
    role: Role,
    phase: GRPOPhase,
    *,
    batches: Callable[[int], list[Task]],
    prompt: Callable[[Task], str],
    reward: RewardFn,
    params: SamplingParams,
    ctx: PhaseContext,
    ns: str,
    progress: bool = True,
    rollouts_file: Path | None = None,
    save_every: int = 0,
) -> TrainResult:
    """``phase.steps`` GRPO updates of ``role`` (``grpo_step``); step s samples with seed
    ``derive_seed(ctx.seed, "rollout", s)``. Every step is booked by ``StepBook`` (rollouts file,
    metrics under ``ns/``, trained tokens in ``ctx.compute``) and shown on the progress bar
    (``step_postfix``); the book is saved at the end (``training.book_file``).

    A continued phase (``ctx.prior``: ``coevolve resume RUN solver.steps=N``) starts from its
    book at step k = the steps it had: the role was loaded from the phase's checkpoint
    (weights, optimiser state, step count), the batches of steps 0..k-1 are drawn again and
    dropped (a recipe's draws are sequential), and step k on is what a run of N steps made at
    once does (with ``learner.lr_schedule=constant``; another schedule's horizon is the phase's
    steps, so the extension refuses it). The schedule starts at the phase's first step
    (``Learner.begin_phase``), at step k for a continued phase.

    With ``save_every`` = k > 0, after every k-th step but the last a mid-phase save (``save_step``:
    learner, book, rollouts file's length, random states); a phase resumed from it (``ctx.saved``)
    goes on at the next step as an uninterrupted one does, earlier draws replayed as above."""
    from tqdm import tqdm

    before = ctx.compute.total
    start, prior = _resume(role, ctx, phase, ns)
    role.learner.begin_phase(phase.steps, start)
    try:
        with StepBook(ctx, ns, rollouts_file, role.learner.cfg.epochs_per_batch, prior) as book:
            _replay_draws(batches, start, prior)
            bar = tqdm(range(start, phase.steps), desc=ns, disable=not progress, leave=False, dynamic_ncols=True)
            for step in bar:
                tasks = batches(step)
                prompts = [prompt(t) for t in tasks]
                params_s = replace(params, seed=derive_seed(ctx.seed, "rollout", step))
                comps, rewards, observed, update, timings = grpo_step(
                    role, phase, step, tasks, prompts, reward, params_s
                )
                book.step(step, tasks, prompts, comps, rewards, update, observed, timings)
                bar.set_postfix(step_postfix(rewards, observed), refresh=False)
                if save_every and (step + 1) % save_every == 0 and step + 1 < phase.steps:
                    save_step(role, book, step + 1, _spent(ctx, before), ctx)
    finally:
        role.offload()  # its masters and optimizer state leave the GPU until its next update
    atomic_write_json(book_file(ctx.dir, ns), book.state(phase.steps, _spent(ctx, before)))
    return book.result(phase.steps)


def _replay_draws(batches: Callable[[int], list[Task]], start: int, prior: dict[str, Any] | None) -> None:
    """The draws of the steps already done, so step ``start`` draws as a phase run at once does;
    then, for a phase resumed from a mid-phase save, the random generators as they were at it."""
    for step in range(start):
        batches(step)
    if start and prior is not None and "random" in prior:
        set_random_states(prior["random"])


GRPO_SAVE = "grpo"
"""The ``kind`` of a GRPO phase's mid-phase save (its ``saved.json``)."""
LEARNER_SAVE = "learner"
"""The learner's folder (``Learner.save``) inside a GRPO phase's mid-phase save."""


def save_step(role: Role, book: StepBook, steps: int, spent: dict[str, int], ctx: PhaseContext) -> None:
    """A GRPO phase's mid-phase save after ``steps`` steps: the learner, the book (what the steps
    booked and the ``spent`` compute; the rollouts file's length, flushed to disk) and the
    process's random states (``run.random_states``)."""

    def write(folder: Path) -> dict[str, Any]:
        role.learner.save(folder / LEARNER_SAVE)
        book_now = {**book.state(steps, spent), "rollouts_bytes": book.flush(), "random": random_states()}
        return {"kind": GRPO_SAVE, "book": book_now}

    ctx.mid_save(write)


def _spent(ctx: PhaseContext, before: Compute) -> dict[str, int]:
    return {k: v - before.to_dict()[k] for k, v in ctx.compute.total.to_dict().items()}


def _resume(role: Role, ctx: PhaseContext, phase: GRPOPhase, ns: str) -> tuple[int, dict[str, Any] | None]:
    """Where a phase starts and the book it starts from: its mid-phase save (``ctx.saved``: the
    learner loaded from it, the sampler synced), a continued phase's book, or step 0."""
    if ctx.saved is None or ctx.saved.get("kind") != GRPO_SAVE:
        return _continue(ctx, phase, ns), ctx.prior
    book = ctx.saved["book"]
    role.learner.load(Path(ctx.saved["dir"]) / LEARNER_SAVE)
    role.sync()
    ctx.compute.total += Compute.from_dict(book["compute"])
    ctx.say(f"[{ns}] resumed at step {book['steps']} of {phase.steps} from its mid-phase save")
    return int(book["steps"]), book


def grpo_step(
    role: Role,
    phase: GRPOPhase,
    step: int,
    tasks: list[Task],
    prompts: list[str],
    reward: RewardFn,
    params: SamplingParams,
) -> tuple[list[list[Completion]], list[list[float]], Observed, dict[str, Any], dict[str, float]]:
    """One GRPO step: a group of ``phase.group_size`` completions per prompt, their rewards, the
    learner's update on the groups, the sampler synced to the new weights. Returns the
    completions, rewards (B, G), what the reward observed, the update's metrics and the step's
    generation and learning seconds."""
    t0 = time.perf_counter()
    comps = role.sampler.sample(prompts, phase.group_size, params)
    t_gen = time.perf_counter() - t0
    rewards, observed = reward(step, tasks, comps)
    t1 = time.perf_counter()
    update = role.learner.step(
        [RolloutGroup(c[0].prompt_ids, [x.token_ids for x in c], list(r)) for c, r in zip(comps, rewards)]
    )
    role.sync()
    timings = {"gen_seconds": round(t_gen, 4), "learn_seconds": round(time.perf_counter() - t1, 4)}
    return comps, rewards, observed, update, timings


def _continue(ctx: PhaseContext, phase: GRPOPhase, ns: str) -> int:
    """The step a phase starts at: 0, or a continued phase's steps so far (its compute counted)."""
    if ctx.prior is None:
        return 0
    ctx.compute.total += Compute.from_dict(ctx.prior["compute"])
    ctx.say(f"[{ns}] continued at step {ctx.prior['steps']} of {phase.steps}")
    return int(ctx.prior["steps"])


def step_postfix(rewards: Sequence[Sequence[float]], observed: Observed) -> dict[str, str]:
    """What the progress bar shows after a step: mean reward, accuracy (``acc_mean``, or DiagEvo's
    ``match_rate``) where the reward measures one, and the share of groups with zero variance.

    >>> step_postfix([[1.0, 0.0], [1.0, 1.0]], Observed({"acc_mean": 0.75}))
    {'reward': '0.750', 'acc': '0.750', 'zero_std': '0.50'}
    """
    flat = [x for r in rewards for x in r]
    out = {"reward": f"{sum(flat) / max(1, len(flat)):.3f}"}
    acc = observed.metrics.get("acc_mean", observed.metrics.get("match_rate"))
    if acc is not None:
        out["acc"] = f"{acc:.3f}"
    groups = [r for r in rewards if len(r)]
    out["zero_std"] = f"{zero_variance_groups(groups) / max(1, len(groups)):.2f}"
    return out


class LocalTrainer:
    """``backend=local``: coevolve's own learner in this process (the reference). The reward is
    evaluated on whole steps (``training.local_reward``)."""

    def __init__(self, grader: AnswerGrader, progress: bool, save_rollouts: bool, save_every: int = 0) -> None:
        self.grader, self.progress, self.save_rollouts, self.save_every = grader, progress, save_rollouts, save_every

    @classmethod
    def from_config(cls, cfg: Any, engine: Any, grader: AnswerGrader) -> LocalTrainer:
        return cls(grader, cfg.run.progress, cfg.run.save_rollouts, cfg.run.save_every)

    def train(self, role: Role, req: TrainRequest, ctx: PhaseContext) -> TrainResult:
        return grpo_train(
            role,
            req.phase,
            batches=req.batches,
            prompt=req.prompt,
            reward=local_reward(req.reward, self.grader, req.writer),
            params=req.params,
            ctx=ctx,
            ns=req.ns,
            progress=self.progress,
            rollouts_file=ctx.dir / f"{req.ns}_rollouts.jsonl" if self.save_rollouts else None,
            save_every=self.save_every,
        )


__all__ = [
    "LocalTrainer",
    "Observed",
    "ParkedSampler",
    "PhaseParkedSampler",
    "RewardFn",
    "Role",
    "ShuffledPasses",
    "TrainResult",
    "grpo_step",
    "grpo_train",
    "save_step",
    "step_postfix",
    "labelled_reward",
    "sampling_params",
]
