"""The GRPO training loop every role shares (solver, D²Evo questioner, DiagEvo challenger).

One step: draw prompts -> sample a group per prompt -> ``reward_fn(step, tasks, completions)``
-> learner update -> weight sync -> log. Reward functions get everything they need as
arguments and return what they observed (``Observed``: batch scalars and per-completion audit
records); the loop logs the scalars under the phase's namespace and writes the records, so no
step counter or audit list lives in a closure.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from coevolve.rewards import solver_rewards
from coevolve.rl.learner import Learner, RolloutGroup
from coevolve.run import PhaseContext, derive_seed
from coevolve.run.faults import fault_point
from coevolve.run.files import json_line
from coevolve.schema import GRPOPhase
from coevolve.types import AnswerGrader, Completion, Sampler, SamplingParams, Stop, Task


@dataclass
class Observed:
    """What a reward function saw in one step: batch scalars, audit records, and the rollouts
    it drew itself (a writer's reward samples the frozen solver)."""

    metrics: dict[str, float] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    rollouts: int = 0


RewardFn = Callable[[int, list[Task], list[list[Completion]]], tuple[list[list[float]], Observed]]
"""``reward_fn(step, tasks, completions) -> (rewards, observed)``; rewards are (B, G)."""


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


@dataclass
class TrainResult:
    """A finished GRPO phase: mean reward, updates, policy rollouts, rollouts drawn by the
    reward function, and every audit record (tagged with its step)."""

    reward_mean: float
    steps: int
    rollouts: int
    reward_rollouts: int
    records: list[dict[str, Any]]
    updates: int = 0  # steps that changed the weights (a step whose groups all had zero variance does not)

    @property
    def problem(self) -> str | None:
        """Why the phase trained nothing, when it should have."""
        if self.steps > 0 and self.updates == 0:
            return (f"all {self.steps} steps had zero reward variance in every group (every answer equally right or "
                    "wrong): nothing was learned; check the answer budget, the prompts and the difficulty band")
        return None


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


def sampling_params(sampling: Any, seed: int | None, phase: GRPOPhase | None = None, stop: Stop | None = None,
                    **over: Any) -> SamplingParams:
    """Decoding parameters from the ``sampling`` section, with a phase's own temperature /
    completion cap where it sets them, the prompt kind's ``stop``, and explicit overrides last."""
    kw: dict[str, Any] = dict(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                              max_new_tokens=sampling.max_new_tokens, seed=seed, stop=stop or Stop())
    if phase is not None:
        kw.update({k: v for k, v in (("temperature", phase.temperature), ("max_new_tokens", phase.max_new_tokens))
                   if v is not None})
    kw.update(over)
    return SamplingParams(**kw)


def labelled_reward(alpha: float, grader: AnswerGrader) -> RewardFn:
    """Solver reward ``α·acc + (1-α)·fmt`` against each task's answer (gold or pseudo-label)."""

    def reward(step: int, tasks: list[Task], comps: list[list[Completion]]) -> tuple[list[list[float]], Observed]:
        texts = [c.text for g in comps for c in g]
        golds = [t.answer or "" for t, g in zip(tasks, comps) for _ in g]
        correct = [bool(t) and ok for t, ok in zip(golds, grader.grade_batch(golds, texts))]
        flat, bd = solver_rewards(texts, correct, alpha)
        rewards, i = [], 0
        for g in comps:
            rewards.append(flat[i : i + len(g)])
            i += len(g)
        return rewards, Observed({"acc_mean": float(bd["acc_mean"]), "format_mean": float(bd["format_mean"])})

    return reward


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
) -> TrainResult:
    """``phase.steps`` GRPO updates of ``role``; step s samples with seed ``derive_seed(ctx.seed,
    "rollout", s)``. Every rollout batch goes to ``rollouts_file`` (rewritten from scratch when
    the phase restarts) and every step's metrics to the run's log under ``ns/``; the tokens each
    update trained on go to ``ctx.compute`` (``trained_tokens``)."""
    from tqdm import tqdm

    fh = open(rollouts_file, "w", encoding="utf-8") if rollouts_file is not None else None  # noqa: SIM115
    seen: list[float] = []
    records: list[dict[str, Any]] = []
    rollouts = reward_rollouts = updates = 0
    try:
        for step in tqdm(range(phase.steps), desc=ns, disable=not progress, leave=False, dynamic_ncols=True):
            t0 = time.perf_counter()
            tasks = batches(step)
            prompts = [prompt(t) for t in tasks]
            comps = role.sampler.sample(prompts, phase.group_size, replace(params, seed=derive_seed(ctx.seed, "rollout", step)))
            t_gen = time.perf_counter() - t0
            rewards, observed = reward(step, tasks, comps)
            t1 = time.perf_counter()
            m = role.learner.step([RolloutGroup(c[0].prompt_ids, [x.token_ids for x in c], list(r))
                                   for c, r in zip(comps, rewards)])
            role.sync()
            updates += int(not m.get("skipped"))
            if not m.get("skipped"):  # trained tokens: the update's completion tokens, once per epoch
                ctx.compute.trained(int(m["n_tokens"]) * role.learner.cfg.epochs_per_batch)
            t_learn = time.perf_counter() - t1
            seen.extend(x for r in rewards for x in r)
            rollouts += sum(len(c) for c in comps)
            reward_rollouts += observed.rollouts
            records.extend({"step": step, **r} for r in observed.records)
            ctx.log({**{f"{ns}/{k}": v for k, v in {**m, **observed.metrics}.items() if isinstance(v, (int, float))},
                     f"{ns}/gen_seconds": round(t_gen, 4), f"{ns}/learn_seconds": round(t_learn, 4)}, step=step)
            if fh is not None:
                fault_point("rollouts")
                fh.writelines(_rollout_rows(step, tasks, prompts, comps, rewards))
    finally:
        if fh is not None:
            fh.close()
        role.offload()  # its masters and optimizer state leave the GPU until its next update
    return TrainResult(sum(seen) / max(1, len(seen)), phase.steps, rollouts, reward_rollouts, records, updates)


def _rollout_rows(step: int, tasks: Sequence[Task], prompts: Sequence[str], comps: Sequence[Sequence[Completion]],
                  rewards: Sequence[Sequence[float]]) -> list[str]:
    return [json_line({"step": step, "task_id": t.id, "prompt": p, "label": t.answer,
                       "completions": [x.text for x in c], "rewards": list(r)})
            for t, p, c, r in zip(tasks, prompts, comps, rewards)]
