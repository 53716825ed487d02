"""What every recipe shares: the run loop derived from a recipe's declaration (``run_recipe``,
``place_roles``), the run's world, grader, engine, trainer and roles (``Setup``), the evaluation
phase and its work, and the summary. Recipes compose these; the algorithms live in the library."""

from __future__ import annotations

import os
import random
import shutil
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.config.base import RecipeConfig
from coevolve.engine import ENGINE_DIR, Engine, HFSampler, load_model, load_tokenizer
from coevolve.engine.servable import unservable
from coevolve.eval.benchmarks import resolve_benches
from coevolve.eval.signals import SelectRule, parse_select, select_round, stop_round
from coevolve.eval.suite import evaluate_suite
from coevolve.loop import ParkedSampler, PhaseParkedSampler, Role, sampling_params
from coevolve.prompts import StopKind
from coevolve.provenance import environment
from coevolve.recipes.declare import Recipe, Rollouts, Step, Work
from coevolve.recipes.premise import premise_rows, premise_warnings
from coevolve.reward_function import run_grader
from coevolve.rl.learner import Learner
from coevolve.run import SUMMARY_FILE, Phase, PhaseContext, PhaseRecord, PhaseResult, Run, derive_seed, seed_everything
from coevolve.run.compute import Compute, ComputeMeter, MeteredSampler, cumulative, unmetered
from coevolve.run.files import TMP_SUFFIX, atomic_write_json
from coevolve.schema import GRPOPhase, WriterReward
from coevolve.training import AuditFn, Trainer, TrainRequest, TrainResult, WriterRule, WriterScoring, make_trainer
from coevolve.types import AnswerGrader, Sampler, SamplingParams, Task
from coevolve.world import CHECKPOINT_META, CHECKPOINT_META_FORMAT, World, base_model_path, make_world, world_of_config


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
        """A GRPO phase of ``role`` on the configured backend (``training.make_trainer``)."""
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


def phase_eval(p: Any, phase: Phase) -> PhaseRecord:
    """Held-out accuracy of the solver (every recipe's evaluation, base and after rounds): the
    configured benchmarks, or the world's, through the one evaluation driver; per-item records
    and ``results.json`` in ``<phase folder>/eval/``. The same eval seed every time, so sampled
    accuracy compares identical draws. ``p``: a recipe's parts (its ``s`` and ``solver``)."""
    s, solver, e = p.s, p.solver, p.s.cfg.eval

    def fn(ctx: PhaseContext) -> PhaseResult:
        cache = base_eval_cache(s, phase)
        res = load_cached_eval(cache, ctx.dir / "eval", ctx.compute) if cache is not None else None
        if res is not None:
            ctx.say(f"[eval] {ctx.phase.key}: the built-in base's evaluation with these settings, from {cache}")
        else:
            res = evaluate_suite(
                solver.sampler,
                s.world.prompter,
                e.benches or list(s.world.default_benches),
                grader=s.grader,
                samples=e.samples,
                max_new_tokens=e.max_new_tokens,
                seed=derive_seed(s.cfg.run.seed, "eval"),
                limit=e.limit,
                data_dir=Path(e.data_dir) if e.data_dir else None,
                bench_tasks=s.world.bench_tasks,
                out_dir=ctx.dir / "eval",
                progress=s.cfg.run.progress,
                say=ctx.say,
                repeats=e.repeats,
            )
            if cache is not None:
                save_cached_eval(ctx.dir / "eval", cache, ctx.compute.total)
        scores = {
            b: {
                k: r[k]
                for k in ("greedy", "sampled", "n", "score", "metric", "by_group", "score_std", "repeats")
                if k in r
            }
            for b, r in res["benchmarks"].items()
        }
        ctx.log(
            {
                f"eval/{b}/{k}": v
                for b, r in scores.items()
                for k, v in r.items()
                if k in ("greedy", "sampled") and v is not None
            }
        )
        ctx.say(
            f"[eval] {ctx.phase.key}: "
            + "; ".join(
                f"{b}: greedy {r['greedy']:.3f}"
                + (f", sampled {r['sampled']:.3f}" if r["sampled"] is not None else "")
                + (
                    f" (score {r['score']:.3f} ± {r['score_std']:.3f} over {r['repeats']} runs)"
                    if "score_std" in r
                    else ""
                )
                for b, r in scores.items()
            )
        )
        return PhaseResult({"eval": scores}, rollouts=res["rollouts"])

    return s.run.phase(phase, fn)


def eval_due(cfg: RecipeConfig, phase: Phase) -> bool:
    """Evaluate after round ``phase.round``? Every round, or only the last with
    ``eval.every_round=false``."""
    return cfg.eval.every_round or phase.round == int(getattr(cfg, "rounds", 1))


def eval_work(cfg: RecipeConfig, toy: bool) -> Work:
    """An evaluation's answers: per benchmark (``eval.benches``, or the default of the config's
    world, the one the run evaluates) its items (``eval.heldout_size`` for the toy
    held-out set, ``Benchmark.items`` otherwise; at most ``eval.limit``) x (1 greedy +
    ``eval.samples`` x ``eval.repeats``: each evaluation run draws its own samples, the greedy
    pass runs once), in one sampler call."""
    e = cfg.eval
    benches = resolve_benches(e.benches or world_of_config(cfg).default_benches)
    rows = 0
    for b in benches:
        n = e.heldout_size if b.kind == "toy" else b.items
        if e.limit is not None:
            n = min(n, e.limit)
        k = b.default_samples if e.samples == -1 else max(0, e.samples)
        rows += n * (1 + k * e.repeats)
    return Work(
        (Rollouts("solver", "benchmark answers", rows, max(1, rows), 1, "answer", e.max_new_tokens),),
        note=", ".join(b.name for b in benches) + (f"; sampled x {e.repeats} evaluation runs" if e.repeats > 1 else ""),
    )


BASE_EVAL = Step("eval", phase_eval, stage="base", work=eval_work)
"""The evaluation of the base model every recipe starts with."""
ROUND_EVAL = Step("eval", phase_eval, when=eval_due, work=eval_work)
"""The evaluation after a round (every round, or only the last: ``eval_due``)."""


PROBE_FILE = "probe.jsonl"
"""The run's probe set (run folder root): drawn once, before round 1, read by every probe."""


def probe_set(s: Setup, parts: Any, phase: Phase) -> list[Task]:
    """The run's fixed probe set: read from ``probe.jsonl``, or drawn and saved there the first
    time: ``probe.size`` training questions, seeded from ``run.seed`` alone, never an evaluation
    item (``World.excluded``) nor one of D²Evo's candidate questions (``parts.pool``), so no
    phase trains on it. A world without training questions (label-free DiagEvo on a real model)
    freezes round 1's writer questions instead: well-formed ones the filter did not keep (the
    kept ones were trained on), drawn at round 1's probe; the base probe then has no questions.
    A world that cannot give that many distinct questions gives fewer."""
    from coevolve.curriculum import normalize_question
    from coevolve.errors import ConfigError

    path = s.run.path / PROBE_FILE
    if path.is_file():
        return [Task.from_dict(r) for r in s.run.read_jsonl(PROBE_FILE)]
    size = s.cfg.probe.size
    banned = set(s.world.excluded()) | {normalize_question(t.question) for t in getattr(parts, "pool", None) or ()}
    rng = random.Random(derive_seed(s.cfg.run.seed, "probe-set"))
    try:
        drawn = s.world.draw(rng, 3 * size)
    except ConfigError:  # no labelled training questions: the writer's questions of round 1
        if phase.round is None:
            return []
        rows = [
            r
            for r in s.run.read_jsonl("round_01/candidates.jsonl")
            if r.get("question") and r.get("status") in ("filtered", "no_label", "rejected")
        ]
        rng.shuffle(rows)
        drawn = [Task(str(r.get("vote_id") or ""), r["question"]) for r in rows]
    tasks: list[Task] = []
    for t in drawn:
        key = normalize_question(t.question)
        if key not in banned and len(tasks) < size:
            banned.add(key)
            tasks.append(Task(f"probe-{len(tasks):04d}", t.question, t.answer, "probe", t.features))
    s.run.write_jsonl(PROBE_FILE, [t.to_dict() for t in tasks])
    return tasks


def probe_due(cfg: RecipeConfig, phase: Phase) -> bool:
    """Probe the solver when the config has a probe (``probe.size`` > 0)."""
    probe = getattr(cfg, "probe", None)
    return probe is not None and probe.size > 0


def phase_probe(p: Any, phase: Phase) -> PhaseRecord:
    """The round's label-free signals (``coevolve.eval.signals``): the solver answers the fixed
    probe set ``probe.samples`` times each (the same seed every round, so rounds compare the
    same draws); answers are voted like pseudo-labels; where the probe has gold answers, also
    its accuracy. Writes ``probe_answers.jsonl``; logs ``probe/*``. Before round 1 (``base``)
    it draws the probe set and measures the base model, round 1's reference. When ``run.select``
    picks this round so far, its solver checkpoint is pinned (kept beyond ``run.keep_checkpoints``)."""
    from coevolve.curriculum.sampling import completion_answer, sample_chunked
    from coevolve.eval.signals import PROBE_PREFIX, probe_signals

    s, solver, pc = p.s, p.solver, p.s.cfg.probe

    def fn(ctx: PhaseContext) -> PhaseResult:
        tasks = probe_set(s, p, phase)
        groups = sample_chunked(
            solver.sampler,
            [s.world.prompter.solver(t.question) for t in tasks],
            pc.samples,
            s.params(derive_seed(s.cfg.run.seed, "probe")),
            s.cfg.sampling.batch_prompts,
        )
        answers = [[completion_answer(c) for c in g] for g in groups]
        votes = s.grader.vote_batch(answers)
        prev = _previous_probe(s, phase)
        agree = (
            None
            if prev is None
            else [
                v.label is not None and prev.get(t.id) is not None and s.grader.is_equiv(prev[t.id], v.label)
                for t, v in zip(tasks, votes)
            ]
        )
        gold = [t.answer for t in tasks]
        has_gold = bool(tasks) and all(g is not None for g in gold)
        correct = [[s.grader.is_equiv(g, a) for a in ans] for g, ans in zip(gold, answers)] if has_gold else None
        label_ok = [s.grader.is_equiv(g, v.label) for g, v in zip(gold, votes)] if has_gold else None
        if has_gold and phase.round is None and parse_select(s.cfg.run.select).signal in ("accuracy", "pass_rate"):
            ctx.compute.labelled(len(tasks))  # the probe's gold answers then choose the round: labels used
        written = (
            [r["question"] for r in s.run.read_jsonl(ctx.dir / "candidates.jsonl") if r.get("question")]
            if phase.round is not None and (ctx.dir / "candidates.jsonl").is_file()
            else []
        )
        signals = probe_signals(
            [list(v.sizes) for v in votes],
            [len(a) for a in answers],
            [[len(c.token_ids) for c in g] for g in groups],
            agree,
            correct,
            label_ok,
            [len(q) for q in written],
        )
        signals = {k: None if v is None else round(v, 4) for k, v in signals.items()}
        rows = [
            {
                "id": t.id,
                "question": t.question,
                "gold": t.answer,
                "label": v.label,
                "p1": v.p1,
                "sizes": list(v.sizes),
                "answers": a,
                "tokens": [len(c.token_ids) for c in g],
                **({"correct": c} if correct is not None else {}),
            }
            for t, v, a, g, c in zip(tasks, votes, answers, groups, correct or [None] * len(tasks))
        ]
        s.run.write_jsonl(ctx.dir / "probe_answers.jsonl", rows)
        ckpt = s.run.checkpoint("solver")  # the weights measured: what exporting this round means
        values: dict[str, Any] = {
            **signals,
            "questions": len(tasks),
            "checkpoint": None if ckpt is None else ckpt.relative_to(s.run.path).as_posix(),
        }
        if correct is not None:
            from coevolve.curriculum import pass_rate_histogram

            values["pass_hist"] = pass_rate_histogram([sum(c) / len(c) for c in correct if c])
        ctx.log(
            {f"{PROBE_PREFIX}{k}": v for k, v in signals.items() if v is not None}
            | {f"{PROBE_PREFIX}pass_hist/{k}": v for k, v in values.get("pass_hist", {}).items()}
        )
        ctx.say(
            f"[probe] {phase.key}: {len(tasks)} questions x {pc.samples}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in signals.items() if v is not None)
        )
        return PhaseResult(values, sum(len(g) for g in groups), pins=_selection_pin(s, phase, values))

    return s.run.phase(phase, fn)


def _previous_probe(s: Setup, phase: Phase) -> dict[str, str | None] | None:
    """Probe id -> majority label of the probe before ``phase`` (round t-1's, the base one for
    round 1); None when there is none (the base probe, or a previous probe not run)."""
    if phase.round is None:
        return None
    prev = Phase("probe", phase.round - 1) if phase.round > 1 else Phase("probe", None, "base")
    path = s.run.path / prev.folder / "probe_answers.jsonl"
    rows = s.run.read_jsonl(path) if s.run.done(prev) and path.is_file() else []
    return {r["id"]: r["label"] for r in rows} or None  # a base probe without questions: no reference


def probe_values(run: Run) -> dict[int, dict[str, Any]]:
    """Round -> the probe's figures, from the finished phases (round 0: the base model)."""
    return {
        r.round or 0: r.values
        for r in run.state.records()
        if r.name == "probe" and (r.round is not None or r.stage == "base")
    }


def watched_signal(cfg: RecipeConfig) -> SelectRule:
    """The rule whose signal early stopping watches: ``run.select``'s, p1 under ``last``."""
    rule = parse_select(cfg.run.select)
    return rule if rule.kind != "last" else SelectRule("best_signal", "p1")


def _selection_pin(s: Setup, phase: Phase, values: dict[str, Any]) -> dict[str, Path]:
    """The solver checkpoint to keep beyond ``run.keep_checkpoints``: this round's, when
    ``run.select`` (not ``last``) picks it among the rounds probed so far."""
    rule = parse_select(s.cfg.run.select)
    if rule.kind == "last" or phase.round is None:
        return {}
    series = {t: v.get(rule.signal) for t, v in probe_values(s.run).items() if t >= 1}
    series[phase.round] = values.get(rule.signal)
    if select_round(rule, series, phase.round)[0] != phase.round:
        return {}
    ckpt = s.run.checkpoint("solver")
    return {"solver": ckpt} if ckpt is not None else {}


def probe_work(cfg: RecipeConfig, toy: bool) -> Work:
    """A probe's answers: ``probe.size`` questions x ``probe.samples``."""
    pc = cfg.probe  # type: ignore[attr-defined]
    return Work(
        (
            Rollouts(
                "solver",
                f"{pc.samples} probe answers",
                pc.size * pc.samples,
                cfg.sampling.batch_prompts,
                pc.samples,
                "answer",
                cfg.sampling.max_new_tokens,
            ),
        )
    )


BASE_PROBE = Step("probe", phase_probe, stage="base", when=probe_due, work=probe_work)
"""The base model's probe (draws the probe set; round 1's reference)."""
ROUND_PROBE = Step("probe", phase_probe, when=probe_due, work=probe_work)
"""The probe after a round's training (label-free signals; docs/stopping.md)."""


def stopped_after(cfg: RecipeConfig, run: Run) -> int | None:
    """The round after which ``run.stop_patience`` ends the run (None: it runs every round)."""
    if not cfg.run.stop_patience:
        return None
    rule = watched_signal(cfg)
    series = {t: v.get(rule.signal) for t, v in probe_values(run).items()}
    return stop_round(series, rule.direction, cfg.run.stop_patience)


def selection(cfg: RecipeConfig, run: Run) -> dict[str, Any] | None:
    """summary.json's ``selection``: the rule, the round it picks among the rounds run, why,
    the signal by round, and where early stopping ended the run. None for a run without rounds."""
    rounds = sorted({r.round for r in run.state.records() if r.round is not None})
    if not rounds:
        return None
    rule = parse_select(cfg.run.select)
    probes = probe_values(run)
    watched = rule if rule.kind != "last" else watched_signal(cfg) if cfg.run.stop_patience else None
    series = {t: probes.get(t, {}).get(watched.signal) for t in sorted(probes)} if watched else {}
    chosen, why = select_round(rule, series, rounds[-1])
    stop = stopped_after(cfg, run)
    if stop is not None:
        why += (
            f"; stopped after round {stop}: {watched.signal} had not improved for "  # type: ignore[union-attr]
            f"{cfg.run.stop_patience} round(s) (run.stop_patience)"
        )
    return {
        "rule": str(rule),
        "round": chosen,
        "why": why,
        "stopped_after": stop,
        "checkpoint": probes.get(chosen, {}).get("checkpoint"),
        **({"signal": watched.signal, "values": {str(t): v for t, v in series.items()}} if watched else {}),
    }


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
            step.run(parts, phase)
        return finish(s, recipe.summary(parts) if recipe.summary is not None else None, report)


def place_roles(roles: dict[str, Role], uses: tuple[str, ...]) -> None:
    """Before a phase: the roles it ``uses`` back on their device, every other role but the
    solver parked in CPU memory (weights too: it will not even sample until a phase uses it).
    Acts only on a GPU with ``learner.offload_when_idle`` (``Role.offload`` / ``onload``)."""
    for name, role in roles.items():
        if name in uses:
            role.onload()
        elif name != "solver":
            role.offload(weights=True)


def base_eval_cache(s: Setup, phase: Phase) -> Path | None:
    """Where the base evaluation of a built-in base (toy or skill, ``model.path`` unset) is kept
    for every run that evaluates it identically: same base folder, world, eval settings, eval seed,
    engine and threads. Why: every run of a study starts from the same cached base, and its base
    evaluation (thousands of held-out items, greedy and sampled) would be recomputed bit for bit
    by each of them. None for a real model and for every later evaluation."""
    if phase.stage != "base" or s.cfg.model.path is not None or s.cfg.learner.resume_from_checkpoint:
        return None  # (a solver started from a checkpoint is not the built-in base)
    import hashlib
    import json

    cfg = s.cfg
    # repeats joins the key only when set, so the caches of single-run evaluations stay valid
    key = {
        "world": s.world.name,
        "eval": cfg.eval.model_dump(
            mode="json", exclude={"every_round"} | ({"repeats"} if cfg.eval.repeats == 1 else set())
        ),
        "seed": derive_seed(cfg.run.seed, "eval"),
        "engine": cfg.engine.kind,
        "dtype": cfg.model.dtype,
        "device": cfg.model.device,
        "threads": cfg.run.threads,
        "data": (
            cfg.data.skill.model_dump(
                mode="json", include={"deficits", "base_steps", "base_seed", "heldout_per_stratum"}
            )
            if s.world.name == "skill"
            else cfg.data.exclude_heldout
        ),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return s.base / "eval_cache" / digest


def load_cached_eval(cache: Path, out_dir: Path, meter: ComputeMeter) -> dict[str, Any] | None:
    """The cached ``results.json`` (its files copied into ``out_dir``), None on a miss. The
    evaluation's compute, saved with it, is counted again, so a run's compute does not depend
    on whether another run filled the cache first."""
    import json

    spent = _cache_compute(cache)
    if not (cache / "results.json").is_file() or not spent.is_file():
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in cache.iterdir():
        shutil.copyfile(f, out_dir / f.name)
    meter.total += Compute.from_dict(json.loads(spent.read_text(encoding="utf-8")))
    return json.loads((out_dir / "results.json").read_text(encoding="utf-8"))


def save_cached_eval(src: Path, cache: Path, spent: Compute) -> None:
    """Copy an evaluation folder into the cache, whole or not at all (staging folder + rename; a
    concurrent writer of the same entry wrote the same files), and beside it the compute it took."""
    staging = cache.with_name(f".{cache.name}{TMP_SUFFIX}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(_cache_compute(cache), spent.to_dict())
        shutil.copytree(src, staging)
        if not cache.exists():
            os.replace(staging, cache)
    except OSError:
        pass  # a read-only cache folder: the run is unaffected, the next one evaluates again
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _cache_compute(cache: Path) -> Path:
    """Where a cached evaluation's compute is kept: beside its folder, not in it (the folder's
    files are copied into the run's evaluation folder as they are)."""
    return cache.with_name(f"{cache.name}.compute.json")


BUDGET_FIELDS = {
    "solver": "solver.max_new_tokens",
    "questioner": "questioner.max_new_tokens",
    "challenger": "challenger.max_new_tokens",
    "memory": "diagnoser.max_new_tokens",
    "eval": "eval.max_new_tokens",
}
"""The config field each phase's own completion cap comes from; the other phases (the pool's
votes, difficulty, probe) sample with ``sampling.max_new_tokens`` (ours: names for the warning)."""


def cut_off_shares(recs: list[PhaseRecord]) -> dict[str, float]:
    """summary.json's ``cut_off``: per phase key, the share of its completions cut off by the
    token budget (``coevolve.run.compute``), for the phases that sampled."""
    out = {}
    for r in recs:
        share = None if r.compute is None else Compute.from_dict(r.compute).cut_off_share()
        if share is not None:
            out[r.key] = round(share, 4)
    return out


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
        scalars = {
            f"{r.name}/{k}": v for k, v in r.values.items() if isinstance(v, (int, float, str, bool)) or v is None
        }
        if r.round is not None:
            row = by_round.setdefault(r.round, {"round": r.round})
            row.update({f"phase/{r.name}/seconds": round(r.seconds, 2), f"{r.name}/rollouts": r.rollouts, **scalars})
        elif r.stage == "final":
            final.update({f"{r.name}/rollouts": r.rollouts, **scalars})
    chosen = (extra or {}).get("selection") or {}
    if evals["rounds"]:  # the round run.select picks (summary "selection"), else the last evaluated
        evals["final"] = evals["rounds"].get(str(chosen.get("round")), evals["rounds"][max(evals["rounds"], key=int)])
    problems = [{"phase": r.key, "problem": r.problem} for r in recs if r.problem]
    rows = [by_round[t] for t in sorted(by_round)]
    premise = premise_rows(rows)
    summary = {
        "recipe": run.state.recipe,
        "ok": not problems,
        "problems": problems,
        "eval": evals,
        "rounds": rows,
        "premise": premise,
        "warnings": premise_warnings(premise),
        "final": final,
        "rollouts": sum(r.rollouts for r in recs),
        "compute": _compute_totals(recs),
        "cut_off": cut_off_shares(recs),
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


def finish(
    s: Setup, extra: dict[str, Any] | None = None, report: Callable[[Path], Path] | None = None
) -> dict[str, Any]:
    """Summary and the run report (``report``: ``report/`` with plots and report.md, written by
    the caller's writer), the last step of a recipe."""
    sel = selection(s.cfg, s.run)
    if sel is not None:
        s.run.say(f"[select] round {sel['round']}: {sel['why']}")
    summary = write_summary(
        s.run, {**(extra or {}), **s.world.run_summary(s.run.path), **({"selection": sel} if sel is not None else {})}
    )
    for warning in summary["warnings"]:
        s.run.say(f"warning: {warning}")
    s.run.metrics.close()
    if report is not None:
        s.run.say(f"[report] {report(s.run.path)}")
    return summary
