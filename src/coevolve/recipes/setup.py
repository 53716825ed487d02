"""One run's shared parts (``Setup``): config, run folder, world, grader, base model, engine,
trainer, and how a role is loaded, frozen, checkpointed and trained; ``setup`` makes them."""

from __future__ import annotations

import os
import shutil
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from coevolve.config.sections import RecipeConfig
from coevolve.engine import Engine, HFSampler, load_model, load_tokenizer
from coevolve.engine.servable import unservable
from coevolve.loop import ParkedSampler, PhaseParkedSampler, Role, sampling_params
from coevolve.prompts import StopKind
from coevolve.provenance import environment
from coevolve.rl.learner import Learner
from coevolve.run import PhaseContext, Run
from coevolve.run.compute import MeteredSampler, unmetered
from coevolve.run.files import TMP_SUFFIX, atomic_write_json
from coevolve.schema import GRPOPhase, WriterReward
from coevolve.training import AuditFn, Trainer, TrainRequest, TrainResult, WriterRule, WriterScoring, make_trainer
from coevolve.types import AnswerGrader, Sampler, SamplingParams
from coevolve.world import CHECKPOINT_META, CHECKPOINT_META_FORMAT, World, base_model_path, make_world


@dataclass
class Setup:
    """One run's shared parts: config, run folder, world, grader, the base model folder, the
    rollout engine every sampler of the run comes from and the trainer of its GRPO phases."""

    cfg: RecipeConfig
    run: Run
    world: World
    grader: AnswerGrader
    base: Path
    engine: Engine
    trainer: Trainer
    parked: weakref.WeakSet[PhaseParkedSampler] = field(default_factory=weakref.WeakSet)

    def role(self, name: str) -> Role:
        """Load a trainable role from the base model; resume from its latest checkpoint (the
        solver of a new run: from ``learner.resume_from_checkpoint`` when set)."""
        cfg = self.cfg
        model, tok = load_model(str(self.base), device=cfg.model.device, dtype=cfg.model.dtype)
        ref = None
        if cfg.learner.beta_kl > 0:
            ref, _ = load_model(str(self.base), device=cfg.model.device, dtype=cfg.model.dtype)
            ref.eval()
        learner = Learner(model, cfg.learner, ref_model=ref, tokenizer=tok)
        ckpt = self.run.checkpoint(name)
        if ckpt is None and name == "solver" and cfg.learner.resume_from_checkpoint:
            ckpt = Path(cfg.learner.resume_from_checkpoint).expanduser()
        if ckpt is not None:
            learner.load(ckpt)
        role = Role(name, learner.model, tok, self.metered(self.engine.sampler(learner.model, tok)), learner)
        role.offload()  # masters / optimizer state wait in CPU memory until the role's first update (GPU only)
        return role

    def frozen(self, role: Role) -> Sampler:
        """A sampler over a frozen copy of ``role``'s current weights (a scorer that must not
        move while the role trains): ``Engine.frozen``; on a GPU an hf copy waits in CPU memory
        between calls (``ParkedSampler``) so it does not sit beside the learner's state."""
        sampler = self.engine.frozen(unmetered(role.sampler), role.model, role.tokenizer)
        dev = role.learner.device
        if isinstance(sampler, HFSampler) and dev.type == "cuda" and role.learner.cfg.offload_when_idle:
            return self.metered(ParkedSampler(sampler, sampler.model, dev))
        return self.metered(sampler)

    def load(self, path: str) -> Sampler:
        """A read-only sampler over the model folder ``path`` (a judge, a diagnoser, π_S^{t-1}): a
        weight version of the run's engine (``Engine.load``), or, when the run's vLLM engine
        cannot serve that model (``engine.servable.unservable``: preflight names it, the plan
        counts it), Hugging Face generate on the run's device. That copy waits in CPU memory
        between the phases that use it (``PhaseParkedSampler``), so it does not sit beside the
        learner or the engine; so does an hf engine's on a GPU with ``learner.offload_when_idle``."""
        cfg = self.cfg
        differs = unservable(cfg.engine, self.base, path)
        if differs:
            hf = cfg.engine.model_copy(update={"kind": "hf"})
            sampler = HFSampler.load(hf, path, cfg.model.device, cfg.model.dtype)
            self.run.say(f"{path}: served by hf, the vLLM engine cannot serve it ({'; '.join(differs[:3])})")
        else:
            sampler = unmetered(self.engine.load(path, cfg.model.device, cfg.model.dtype))
        idle = isinstance(sampler, HFSampler) and sampler.device.type == "cuda" and cfg.learner.offload_when_idle
        if differs or idle:
            sampler = PhaseParkedSampler(sampler, sampler.model, sampler.device)
            self.parked.add(sampler)
        return self.metered(sampler)

    def park(self) -> None:
        """Before a phase: every frozen folder model back in CPU memory until its next call."""
        for sampler in list(self.parked):
            sampler.park()

    def metered(self, sampler: Sampler) -> Sampler:
        """``sampler`` counting its completions into the running phase's compute
        (``coevolve.run.compute``); every sampler a recipe draws from goes through here."""
        return MeteredSampler(sampler, self.run.meter, self.run.journal)

    def save(self, role: Role, tag: str) -> dict[str, Path]:
        """Checkpoint ``role`` (a loadable model folder plus the world it was trained in); the
        result goes into the phase result so the resume point moves with the phase mark."""
        path = self.run.checkpoint_dir(role.name, tag)
        # Written whole into a staging folder, then renamed: a kill or a full disk mid-save never
        # leaves a half checkpoint (or a library's stray temp file) under the final name.
        staging = path.with_name(f".{path.name}{TMP_SUFFIX}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            role.save(staging)
            meta = {
                "format": CHECKPOINT_META_FORMAT,
                "world": self.world.name,
                "chat_template": self.cfg.model.chat_template,
                "enable_thinking": self.cfg.model.enable_thinking,
                "prompts": self.cfg.prompts.model_dump(mode="json"),
                "role": role.name,
                "recipe": self.cfg.recipe,
                "tag": tag,
                "provenance": environment(),  # the code and libraries that made these weights
            }
            atomic_write_json(staging / CHECKPOINT_META, meta)
        except BaseException:  # a full disk: no half checkpoint stays behind (a kill's is removed by Run.open)
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(path, ignore_errors=True)  # a rerun of the phase (killed after the rename, before its mark)
        os.replace(staging, path)
        return {role.name: path}

    def train(self, role: Role, req: TrainRequest, ctx: PhaseContext) -> TrainResult:
        """A GRPO phase of ``role`` on the configured backend (``training.make_trainer``). Its
        calls are not journaled (``run.journal``: they would not replay once the weights move);
        the local loop saves its learner instead (``run.save_every``)."""
        self.run.journal.stop()
        return self.trainer.train(role, req, ctx)

    def writer_scoring(
        self, solver: Role, scorer: Sampler, reward: WriterReward, seed: int, ns: str, audit: AuditFn
    ) -> WriterScoring:
        """A writer phase's scoring: ``scorer`` (the frozen solver the local loop votes with;
        ``solver``'s weights at the start of the phase for verl's workers) answers each written
        question ``reward.samples`` times with the run's decoding, seeded
        ``derive_seed(seed, ns, step)``; ``audit`` turns a step's ``WriterBatch`` into records."""
        rule = WriterRule(
            reward, seed, ns, self.params(None), self.rep_tokenizer(reward), self.cfg.sampling.batch_prompts
        )
        return WriterScoring(rule, solver, scorer, self.world.prompter, audit)

    def params(self, seed: int | None, phase: GRPOPhase | None = None, kind: StopKind = "answer") -> SamplingParams:
        """Decoding parameters of a phase: the run's sampling section, the phase's own cap and
        temperature, and where this world's prompts of ``kind`` stop."""
        return sampling_params(self.cfg.sampling, seed, phase, self.world.prompter.stop(kind))

    def rep_tokenizer(self, reward: WriterReward) -> str:
        return self.world.rep_tokenizer if reward.rep_tokenizer == "auto" else reward.rep_tokenizer


def setup(cfg: RecipeConfig, run: Run, grader: AnswerGrader, engine: Engine) -> Setup:
    """The parts of a run opened and bound by ``recipes.open_run``: the base model folder (the
    toy base built once when the config names none) and the world it implies."""
    base = base_model_path(cfg.model, run.say, cfg.data)
    run.budget_fields = BUDGET_FIELDS
    stats = getattr(grader, "stats", None)  # a Grader or GraderPool; verl's reward workers grade on their own
    if stats is not None and hasattr(stats, "decided"):
        run.grader_counts = lambda: grader.stats.decided()  # type: ignore[attr-defined]
    return Setup(
        cfg,
        run,
        make_world(cfg, load_tokenizer(base), run.say),
        grader,
        base,
        engine,
        make_trainer(cfg, engine, grader),
    )


BUDGET_FIELDS = {
    "solver": "solver.max_new_tokens",
    "questioner": "questioner.max_new_tokens",
    "challenger": "challenger.max_new_tokens",
    "memory": "diagnoser.max_new_tokens",
    "eval": "eval.max_new_tokens",
}
"""The config field each phase's own completion cap comes from; the other phases (the pool's
votes, difficulty, probe) sample with ``sampling.max_new_tokens`` (ours: names for the warning)."""
