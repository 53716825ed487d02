"""What every recipe sets up the same way: the run's world, grader and roles, the evaluation
phase, and the summary. Recipes compose these; the algorithms live in the library."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.config.base import RecipeConfig
from coevolve.engine import HFSampler, freeze_sampler, load_model, load_tokenizer, make_sampler
from coevolve.eval.suite import evaluate_suite
from coevolve.loop import ParkedSampler, Role, TrainResult, grpo_train, sampling_params
from coevolve.prompts import StopKind
from coevolve.rl.learner import OPTIM_FILE, Learner
from coevolve.run import SUMMARY_FILE, Phase, PhaseContext, PhaseRecord, PhaseResult, Run, derive_seed
from coevolve.run.compute import MeteredSampler, cumulative, unmetered
from coevolve.run.files import TMP_SUFFIX, atomic_write_json
from coevolve.run.trackers import make_trackers
from coevolve.schema import GRPOPhase, WriterReward
from coevolve.types import AnswerGrader, Sampler, SamplingParams
from coevolve.verl.parquet import RewardSpec
from coevolve.world import CHECKPOINT_META, CHECKPOINT_META_FORMAT, World, base_model_path, make_world



@dataclass
class Setup:
    """One run's shared parts: config, run folder, world, grader and the base model folder."""

    cfg: RecipeConfig
    run: Run
    world: World
    grader: AnswerGrader
    base: Path

    def role(self, name: str) -> Role:
        """Load a trainable role from the base model; resume from its latest checkpoint."""
        cfg = self.cfg
        model, tok = load_model(str(self.base), device=cfg.model.device, dtype=cfg.model.dtype)
        ref = None
        if cfg.learner.beta_kl > 0:
            ref, _ = load_model(str(self.base), device=cfg.model.device, dtype=cfg.model.dtype)
            ref.eval()
        learner = Learner(model, cfg.learner, ref_model=ref, tokenizer=tok)
        ckpt = self.run.checkpoint(name)
        if ckpt is not None:
            learner.load(ckpt)
        role = Role(name, learner.model, tok, self.metered(make_sampler(cfg.engine, learner.model, tok)), learner)
        role.offload()  # masters / optimizer state wait in CPU memory until the role's first update (GPU only)
        return role

    def frozen(self, role: Role) -> Sampler:
        """A sampler over a frozen copy of ``role``'s current weights (a scorer that must not
        move while the role trains): ``engine.freeze_sampler``; on a GPU an hf copy waits in CPU
        memory between calls (``ParkedSampler``) so it does not sit beside the learner's state."""
        sampler = freeze_sampler(self.cfg.engine, unmetered(role.sampler), role.model, role.tokenizer)
        dev = role.learner.device
        if isinstance(sampler, HFSampler) and dev.type == "cuda" and role.learner.cfg.offload_when_idle:
            return self.metered(ParkedSampler(sampler, sampler.model, dev))
        return self.metered(sampler)

    def metered(self, sampler: Sampler) -> Sampler:
        """``sampler`` counting its completions into the running phase's compute
        (``coevolve.run.compute``); every sampler a recipe draws from goes through here."""
        return MeteredSampler(sampler, self.run.meter)

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
            meta = {"format": CHECKPOINT_META_FORMAT, "world": self.world.name,
                    "chat_template": self.cfg.model.chat_template, "role": role.name,
                    "recipe": self.cfg.recipe, "tag": tag}
            atomic_write_json(staging / CHECKPOINT_META, meta)
        except BaseException:  # a full disk: no half checkpoint stays behind (a kill's is removed by Run.open)
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(path, ignore_errors=True)  # a rerun of the phase (killed after the rename, before its mark)
        os.replace(staging, path)
        return {role.name: path}

    def train(self, role: Role, phase: GRPOPhase, *, verl_reward: RewardSpec, writer: Any = None,
              **kw: Any) -> TrainResult:
        """A GRPO phase on the configured ``backend``: ``loop.grpo_train`` (local) or
        ``verl.phase.verl_grpo_train`` (verl, rewarded by ``verl_reward``, the same rule as
        ``kw["reward"]`` in a form verl's reward workers can apply; a writer's phase also
        passes its ``verl.phase.WriterPhase``, built by ``writer_phase``)."""
        if self.cfg.backend.kind == "local":
            return grpo_train(role, phase, **kw)
        from coevolve.verl.phase import verl_grpo_train

        if self.cfg.engine.kind == "ray":
            from coevolve.engine import ray as engine_ray

            engine_ray.release()  # verl's trainer gets the idle rollout actors' GPUs; the next sample call restarts them
        kw.pop("progress", None)
        kw.pop("reward")
        return verl_grpo_train(role, phase, cfg=self.cfg, reward=verl_reward, writer=writer, **kw)

    def writer_phase(self, solver: Role, reward: WriterReward, seed: int, ns: str, audit: Any) -> Any:
        """A writer's ``verl.phase.WriterPhase`` (None on the local backend): its reward workers
        vote with ``solver``'s weights at the start of the phase (the frozen solver), drawing with
        the local reward's seed parts (``derive_seed(seed, ns, step, ...)``); ``audit`` turns a
        step's ``WriterBatch`` into the local reward's ``Observed``."""
        if self.cfg.backend.kind == "local":
            return None
        from coevolve.toy.prompts import ToyPrompter
        from coevolve.verl.phase import WriterPhase
        from coevolve.verl.writer import WriterSpec, sampling_dict

        cfg = self.cfg
        prompter = ({"kind": "toy"} if isinstance(self.world.prompter, ToyPrompter) else
                    {"kind": "chat", "chat_template": cfg.model.chat_template, "enable_thinking": cfg.model.enable_thinking})
        spec = WriterSpec(reward=reward.model_dump(mode="json"), seed=seed, ns=ns, params=sampling_dict(self.params(None)),
                          prompter=prompter, rep_tokenizer=self.rep_tokenizer(reward),
                          batch_prompts=cfg.sampling.batch_prompts, engine=cfg.engine.model_dump(mode="json"),
                          device=cfg.model.device, dtype=cfg.model.dtype)
        return WriterPhase(solver, spec, self.world.prompter.parse_question, audit)

    def params(self, seed: int | None, phase: GRPOPhase | None = None, kind: StopKind = "answer") -> SamplingParams:
        """Decoding parameters of a phase: the run's sampling section, the phase's own cap and
        temperature, and where this world's prompts of ``kind`` stop."""
        return sampling_params(self.cfg.sampling, seed, phase, self.world.prompter.stop(kind))

    def rep_tokenizer(self, reward: WriterReward) -> str:
        return self.world.rep_tokenizer if reward.rep_tokenizer == "auto" else reward.rep_tokenizer


def setup(cfg: RecipeConfig, run: Run, grader: AnswerGrader) -> Setup:
    run.bind(seed=cfg.run.seed, keep_checkpoints=cfg.run.keep_checkpoints, say=run.say)
    run.resume_only = (OPTIM_FILE,)
    run.metrics.attach(make_trackers(cfg.run.trackers, run.path, run.metrics.count(), run_id=run_tracker_id(run),
                                     name=run.path.name, project=cfg.run.wandb_project, mode=cfg.run.wandb_mode,
                                     config=cfg.model_dump(mode="json")))
    base = base_model_path(cfg.model, run.say, cfg.data)
    return Setup(cfg, run, make_world(cfg, load_tokenizer(base), run.say), grader, base)


def phase_eval(s: Setup, solver: Role, phase: Phase) -> PhaseRecord:
    """Held-out accuracy of the solver (every recipe's evaluation, base and after rounds): the
    configured benchmarks, or the world's, through the one evaluation driver; per-item records
    and ``results.json`` in ``<phase folder>/eval/``. The same eval seed every time, so sampled
    accuracy compares identical draws."""
    e = s.cfg.eval

    def fn(ctx: PhaseContext) -> PhaseResult:
        cache = base_eval_cache(s, phase)
        res = load_cached_eval(cache, ctx.dir / "eval") if cache is not None else None
        if res is not None:
            ctx.say(f"[eval] {ctx.phase.key}: the built-in base's evaluation with these settings, from {cache}")
        else:
            res = evaluate_suite(
                solver.sampler, s.world.prompter, e.benches or list(s.world.default_benches), grader=s.grader,
                samples=e.samples, max_new_tokens=e.max_new_tokens, seed=derive_seed(s.cfg.run.seed, "eval"),
                limit=e.limit, data_dir=Path(e.data_dir) if e.data_dir else None, bench_tasks=s.world.bench_tasks,
                out_dir=ctx.dir / "eval", progress=s.cfg.run.progress)
            if cache is not None:
                save_cached_eval(ctx.dir / "eval", cache)
        scores = {b: {k: r[k] for k in ("greedy", "sampled", "n", "score", "metric", "by_group")}
                  for b, r in res["benchmarks"].items()}
        ctx.log({f"eval/{b}/{k}": v for b, r in scores.items() for k, v in r.items()
                 if k in ("greedy", "sampled") and v is not None})
        ctx.say(f"[eval] {ctx.phase.key}: " + "; ".join(
            f"{b}: greedy {r['greedy']:.3f}" + (f", sampled {r['sampled']:.3f}" if r["sampled"] is not None else "")
            for b, r in scores.items()))
        return PhaseResult({"eval": scores}, rollouts=res["rollouts"])

    return s.run.phase(phase, fn)


def base_eval_cache(s: Setup, phase: Phase) -> Path | None:
    """Where the base evaluation of a built-in base (toy or skill, ``model.path`` unset) is kept
    for every run that evaluates it identically: same base folder, world, eval settings, eval seed,
    engine and threads. Why: every run of a study starts from the same cached base, and its base
    evaluation (thousands of held-out items, greedy and sampled) would be recomputed bit for bit
    by each of them. None for a real model and for every later evaluation."""
    if phase.stage != "base" or s.cfg.model.path is not None:
        return None
    import hashlib
    import json

    cfg = s.cfg
    key = {"world": s.world.name, "eval": cfg.eval.model_dump(mode="json", exclude={"every_round"}),
           "seed": derive_seed(cfg.run.seed, "eval"), "engine": cfg.engine.kind, "dtype": cfg.model.dtype,
           "device": cfg.model.device, "threads": cfg.run.threads,
           "data": (cfg.data.skill.model_dump(mode="json", include={"deficits", "base_steps", "base_seed",
                                                                     "heldout_per_stratum"})
                    if s.world.name == "skill" else cfg.data.exclude_heldout)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return s.base / "eval_cache" / digest


def load_cached_eval(cache: Path, out_dir: Path) -> dict[str, Any] | None:
    """The cached ``results.json`` (its files copied into ``out_dir``), None on a miss."""
    import json

    if not (cache / "results.json").is_file():
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in cache.iterdir():
        shutil.copyfile(f, out_dir / f.name)
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))


def save_cached_eval(src: Path, cache: Path) -> None:
    """Copy an evaluation folder into the cache, whole or not at all (staging folder + rename; a
    concurrent writer of the same entry wrote the same files)."""
    staging = cache.with_name(f".{cache.name}{TMP_SUFFIX}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, staging)
        if not cache.exists():
            os.replace(staging, cache)
    except OSError:
        pass  # a read-only cache folder: the run is unaffected, the next one evaluates again
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def eval_due(cfg: RecipeConfig, t: int, rounds: int) -> bool:
    """Evaluate after round ``t``? Every round, or only the last with ``eval.every_round=false``."""
    return cfg.eval.every_round or t == rounds


def write_summary(run: Run, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summary.json`` from the phase records: ``ok`` / ``problems`` (phases that should have
    trained and did not), evaluations (base, per round, final), one row of scalar figures per
    round, the figures of the final stage, total wall time."""
    recs = run.state.records()
    evals: dict[str, Any] = {"rounds": {}}
    by_round: dict[int, dict[str, Any]] = {}
    final: dict[str, Any] = {}
    for r in recs:
        if r.name == "eval" and r.stage == "base":
            evals["base"] = r.values.get("eval", {})
        elif r.name == "eval" and r.round is not None:
            evals["rounds"][str(r.round)] = r.values.get("eval", {})
        scalars = {f"{r.name}/{k}": v for k, v in r.values.items() if isinstance(v, (int, float, str, bool)) or v is None}
        if r.round is not None:
            row = by_round.setdefault(r.round, {"round": r.round})
            row.update({f"phase/{r.name}/seconds": round(r.seconds, 2), f"{r.name}/rollouts": r.rollouts, **scalars})
        elif r.stage == "final":
            final.update({f"{r.name}/rollouts": r.rollouts, **scalars})
    if evals["rounds"]:
        evals["final"] = evals["rounds"][max(evals["rounds"], key=int)]
    problems = [{"phase": r.key, "problem": r.problem} for r in recs if r.problem]
    summary = {
        "recipe": run.state.recipe,
        "ok": not problems,
        "problems": problems,
        "eval": evals,
        "rounds": [by_round[t] for t in sorted(by_round)],
        "final": final,
        "rollouts": sum(r.rollouts for r in recs),
        "compute": _compute_totals(recs),
        "wall_seconds": round(sum(r.seconds for r in recs), 1),
        **(extra or {}),
    }
    atomic_write_json(run.path / SUMMARY_FILE, summary)
    return summary


def _compute_totals(recs: list[PhaseRecord]) -> dict[str, dict[str, int]] | None:
    """The run's total training and evaluation compute (``coevolve.run.compute``); None for a
    run whose older phases were recorded without it."""
    points = cumulative(recs)
    if not points:
        return None
    return {"train": points[-1].train.to_dict(), "eval": points[-1].eval.to_dict()}


def finish(s: Setup, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summary and the run report (``report/``: plots and report.md), the last step of a recipe."""
    from coevolve.eval.report import write_report

    summary = write_summary(s.run, {**(extra or {}), **s.world.run_summary(s.run.path)})
    s.run.metrics.close()
    s.run.say(f"[report] {write_report(s.run.path)}")
    return summary


def run_tracker_id(run: Run) -> str:
    """One W&B run per run folder, the same id on every resume (stored in state.json)."""
    if "tracker_id" not in run.state.data:
        run.state.data["tracker_id"] = derive_seed(int(run.state.data.get("created", 0) * 1000), str(run.path.name))
        run.state.save()
    return f"{run.path.name}-{run.state.data['tracker_id']:08x}"
