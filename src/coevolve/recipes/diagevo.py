"""Recipe ``diagevo``: DiagEvo, diagnosis-guided self-evolution via a hierarchical error memory.
Label-free: no labelled data enters training; labels exist only for evaluation and, where the
world has an oracle (the toy world), for measuring pseudo-label accuracy and target hits.

Two separate models, one frozen while the other trains: the challenger writes questions, the
solver answers them. Every round t = 1..rounds runs five resumable phases (``coevolve.run``):

1. ``TT/challenger`` — plans from the memory of round t-1 (explore with prob ε, else an Active
   cause e ~ p(e) = f(e)/F_t, stitched with a Mastered sibling); the frozen solver answers every
   generated question N_v times; GRPO on the challenger with the plateau reward on p1 (or R-Zero's).
2. ``TT/pool`` — the updated challenger writes the candidate pool; N construction answers per
   question give ŷ (majority), p1, p2; dual-confidence filter. Oracle agreement of the labels is
   measured on the same pool under all three filters (none / absolute / dual).
3. ``TT/solver`` — GRPO on the kept questions, G fresh responses, reward +1 / -1 for matching ŷ.
4. ``TT/memory`` — diagnose one (r⁻, r⁺) pair per kept question, file the causes, promote,
   merge nodes; the memory is saved to ``round_TT/memory.json`` (the input of round t+1).
5. ``TT/eval`` — held-out accuracy of the solver.

Every phase reads its inputs from the run folder (previous artefacts + latest checkpoints) and
writes its outputs atomically before being marked done, so ``kill -9`` + ``coevolve resume``
reproduces an uninterrupted run exactly and the memory is never half-updated.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Callable

import numpy as np

from coevolve.answers import make_grader
from coevolve.config.diagevo import DiagEvoConfig
from coevolve.curriculum import label_questions, parse_yes_no, propose_questions, score_writer_batch
from coevolve.curriculum.proposals import WriterBatch
from coevolve.engine import load_sampler
from coevolve.loop import Observed, RewardFn, Role, ShuffledPasses
from coevolve.memory.cli import MEMORY_FILE
from coevolve.memory.diagnose import Diagnoser, DiagnoserStats, LLMDiagnoser, clip_middle
from coevolve.memory.maintain import KeptQuestion, maintain_memory, targeted_p1_by_cause, targeted_questions
from coevolve.memory.store import ErrorMemory
from coevolve.recipes.common import Setup, eval_due, finish, phase_eval, setup
from coevolve.rewards import signed_match_rewards
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult, Run, derive_seed
from coevolve.errors import RunStateError
from coevolve.types import AnswerGrader, Completion, SamplingParams, Task
from coevolve.verl.parquet import RewardSpec


def load_memory(run: Run, t: int) -> ErrorMemory:
    """The memory after round ``t`` (empty before round 1)."""
    if t <= 0:
        return ErrorMemory()
    p = run.path / f"round_{t:02d}" / MEMORY_FILE
    if not p.is_file():
        raise RunStateError(f"{p}: missing memory of round {t} although its phase is done")
    return ErrorMemory.load(p)


def _mean(v: list[float]) -> float | None:
    return sum(v) / len(v) if v else None


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


class Diagnosis:
    """The diagnosis model of stage 4 and the embedder of the memory, built on first use (the
    MiniLM import costs ~5 s, and a resumed run may not reach a memory phase)."""

    def __init__(self, s: Setup, solver: Role) -> None:
        self.s, self.solver = s, solver

    @property
    def kind(self) -> str:
        k = self.s.cfg.diagnoser.kind
        return self.s.world.default_diagnoser if k == "auto" else k

    @functools.cached_property
    def embedder(self) -> Any:
        from coevolve.memory.embed import make_embedder

        return make_embedder(self.s.cfg.memory.embedder, device="cpu")

    @functools.cached_property
    def sampler_prompter(self) -> tuple[Any, Any]:
        d, s = self.s.cfg.diagnoser, self.s
        if d.model_path is None:
            return self.solver.sampler, s.world.prompter
        sampler = s.metered(load_sampler(s.cfg.engine, d.model_path, s.cfg.model.device, s.cfg.model.dtype))
        return sampler, s.world.prompter_for(sampler.tokenizer)

    @functools.cached_property
    def diagnoser(self) -> Diagnoser:
        d = self.s.cfg.diagnoser
        if self.kind == "trace":
            return self.s.world.trace_diagnoser()
        sampler, prompter = self.sampler_prompter
        def prompt(q: str, lab: str, bad: str, good: str) -> str:
            cut = [clip_middle(t, d.max_field_chars) for t in (q, lab, bad, good)]
            return prompter.diagnoser(*cut)

        return LLMDiagnoser(sampler, prompt,
                            SamplingParams(temperature=d.temperature, max_new_tokens=d.max_new_tokens,
                                           stop=prompter.stop("answer")))

    def confirm(self, seed: int) -> Callable[[str, str], bool] | None:
        """Yes/no duplicate confirmation by the diagnosis model (llm diagnoser, when enabled)."""
        if not self.s.cfg.memory.confirm_duplicates or self.kind != "llm":
            return None
        sampler, prompter = self.sampler_prompter
        params = SamplingParams(temperature=0.0, max_new_tokens=8, seed=seed, stop=prompter.stop("answer"))
        return lambda a, b: parse_yes_no(sampler.sample([prompter.confirm(a, b)], 1, params)[0][0].text) is True


def _epsilon(cfg: DiagEvoConfig, mem: ErrorMemory) -> float:
    return {"mixed": mem.epsilon(cfg.memory.k), "explore_only": 1.0, "targeted_only": 0.0}[cfg.memory.schedule]


def challenger_reward(s: Setup, solver: Role, mem: ErrorMemory, seed: int) -> RewardFn:
    """The writer reward on the frozen solver's p1 (``score_writer_batch``), with the records of
    ``challenger_audit``."""
    ch, prompter = s.cfg.challenger, s.world.prompter
    audit = challenger_audit(s, mem)

    def reward(step: int, tasks: list[Task], comps: list[list[Completion]]) -> tuple[list[list[float]], Observed]:
        wb = score_writer_batch(comps, parse=prompter.parse_question, scorer=solver.sampler, prompter=prompter,
                                reward=ch.reward, grader=s.grader,
                                params=s.params(derive_seed(seed, "solve", step)),
                                batch_prompts=s.cfg.sampling.batch_prompts, rep_tokenizer=s.rep_tokenizer(ch.reward))
        return wb.rewards, audit(step, tasks, comps, wb)

    return reward


def challenger_audit(s: Setup, mem: ErrorMemory) -> Callable[[int, list[Task], list[list[Completion]], WriterBatch], Observed]:
    """Per question whether it exercises the cause it was targeted at (where the world can tell),
    and the batch figures; shared by both backends (verl rebuilds ``wb`` from its dumps)."""

    def audit(step: int, tasks: list[Task], comps: list[list[Completion]], wb: WriterBatch) -> Observed:
        records = []
        for task, qs, xs, rs in zip(tasks, wb.questions, wb.x, wb.rewards):
            plan = task.features["plan"]
            for q, x, r in zip(qs, xs, rs):
                shows = s.world.shows_causes(q, [mem.causes[c] for c in plan["cause_ids"]]) if q and plan["cause_ids"] else None
                records.append({"mode": plan["mode"], "cause_ids": plan["cause_ids"], "question": q, "p1": x,
                                "reward": r, "shows_target": shows})
        hits = [float(r["shows_target"][0]) for r in records if r["shows_target"] is not None]
        extra = {"targeted_share": _mean([float(bool(t.features["plan"]["cause_ids"])) for t in tasks]) or 0.0,
                 **({"target_hit_rate": _mean(hits)} if hits else {})}
        return Observed({**wb.metrics(), **extra}, records, wb.rollouts)

    return audit


def phase_challenger(s: Setup, challenger: Role, solver: Role, t: int) -> PhaseRecord:
    """Stage 1: challenger GRPO against the frozen solver (skipped when challenger.frozen)."""
    cfg, ch = s.cfg, s.cfg.challenger

    def fn(ctx: PhaseContext) -> PhaseResult:
        mem = load_memory(s.run, t - 1)
        eps = _epsilon(cfg, mem)
        if ch.frozen or ch.steps == 0:
            ctx.say("[challenger] frozen (ablation): no update")
            return PhaseResult({"skipped": True, "epsilon": eps})
        rng = np.random.default_rng(ctx.seed)

        def batches(step: int) -> list[Task]:
            plans = mem.sample_plan(rng, ch.prompts_per_step, cfg.memory.stitching, cfg.memory.schedule, cfg.memory.k)
            return [Task(f"r{t:02d}-ch{step:03d}-{i:03d}", s.world.prompter.challenger(p.cause_texts),
                         features={"plan": p.to_dict()}) for i, p in enumerate(plans)]

        res = s.train(challenger, ch, verl_reward=RewardSpec("writer", grader_timeout=cfg.run.grader_timeout),
                      writer=s.writer_phase(solver, ch.reward, ctx.seed, "solve", challenger_audit(s, mem)), batches=batches, prompt=lambda task: task.question,
                         reward=challenger_reward(s, solver, mem, ctx.seed), params=s.params(ctx.seed, ch, "question"),
                         ctx=ctx, ns="challenger", progress=cfg.run.progress,
                         rollouts_file=ctx.dir / "challenger_rollouts.jsonl" if cfg.run.save_rollouts else None)
        s.run.write_jsonl(ctx.dir / "challenger_questions.jsonl", res.records)
        hits = [float(r["shows_target"][0]) for r in res.records if r["shows_target"] is not None]
        values = {"reward_mean": round(res.reward_mean, 4), "epsilon": round(eps, 4),
                  "well_formed": round(_mean([float(r["question"] is not None) for r in res.records]) or 0.0, 4),
                  "target_hit_rate": None if not hits else round(_mean(hits) or 0.0, 4),
                  "updates": res.updates, "challenger_rollouts": res.rollouts, "solver_rollouts": res.reward_rollouts}
        ctx.say(f"[challenger] ε={eps:.3f} reward {values['reward_mean']:.3f}, well-formed {values['well_formed']:.2f}"
                + (f", target hit {values['target_hit_rate']:.2f}" if hits else ""))
        return PhaseResult(values, res.rollouts + res.reward_rollouts, s.save(challenger, f"r{t:02d}"), res.problem)

    return s.run.phase(Phase("challenger", t), fn)


def phase_pool(s: Setup, challenger: Role, solver: Role, t: int) -> PhaseRecord:
    """Stage 2: the challenger writes the candidate pool from memory plans; N construction
    answers vote ŷ, p1, p2; the dual-confidence filter keeps the training set."""
    cfg, pc = s.cfg, s.cfg.pool

    def fn(ctx: PhaseContext) -> PhaseResult:
        mem = load_memory(s.run, t - 1)
        plans = mem.sample_plan(np.random.default_rng(ctx.seed), pc.size, cfg.memory.stitching, cfg.memory.schedule,
                                cfg.memory.k)
        pool = propose_questions(
            challenger.sampler, [s.world.prompter.challenger(p.cause_texts) for p in plans],
            [{"mode": p.mode, "cause_ids": p.cause_ids, "round": t} for p in plans], prompter=s.world.prompter,
            solver=solver.sampler, voting=pc.voting, grader=s.grader,
            write_params=s.params(derive_seed(ctx.seed, "write"), cfg.challenger, "question"),
            vote_params=s.params(derive_seed(ctx.seed, "construct")),
            batch_prompts=cfg.sampling.batch_prompts, id_prefix=f"r{t:02d}-q", excluded=s.world.excluded(),
            oracle=s.world.oracle if s.world.knows_truth else None)
        for v in pool.votes:
            ids = v.meta["cause_ids"]
            v.meta["shows_target"] = s.world.shows_causes(v.question, [mem.causes[c] for c in ids]) if ids else None
        s.run.write_jsonl(ctx.dir / "candidates.jsonl", [c.to_dict() for c in pool.candidates])
        s.run.write_jsonl(ctx.dir / "pool.jsonl", pool.rows())
        s.run.write_jsonl(ctx.dir / "kept.jsonl", [r for r in pool.rows() if r["kept"]])
        hits = [float(v.meta["shows_target"][0]) for v in pool.votes if v.meta["shows_target"] is not None]
        values = {**{k: v for k, v in pool.stats().items() if k != "rollouts"},
                  "targeted_share": round(_mean([float(bool(p.cause_ids)) for p in plans]) or 0.0, 4),
                  "target_hit_rate": None if not hits else round(_mean(hits) or 0.0, 4)}
        ctx.log({f"curriculum/{k}": v for k, v in values.items() if isinstance(v, (int, float))})
        ctx.say(f"[pool] {len(plans)} prompts -> {values['labelled']} candidates -> kept {values['kept']} "
                f"({pc.voting.filter}); oracle agreement none/absolute/dual: "
                + "/".join(_fmt(values[f"oracle_acc_{m}"]) for m in ("none", "absolute", "dual")))
        return PhaseResult(values, pool.rollouts)

    return s.run.phase(Phase("pool", t), fn)


def match_reward(grader: AnswerGrader) -> RewardFn:
    """DiagEvo solver reward: +1 when the answer matches the pseudo-label ŷ, else -1; records the
    G responses and their matches per question (the diagnosis input) and, where the world knows
    the truth, how often the responses are actually correct."""

    def reward(step: int, tasks: list[Task], comps: list[list[Completion]]) -> tuple[list[list[float]], Observed]:
        texts = [[c.text for c in g] for g in comps]
        match = grader.grade_batch([t.answer or "" for t, g in zip(tasks, texts) for _ in g], [x for g in texts for x in g])
        with_oracle = [(t, g) for t, g in zip(tasks, texts) if t.features.get("oracle") is not None]
        truth = grader.grade_batch([t.features["oracle"] for t, g in with_oracle for _ in g],
                                   [x for _, g in with_oracle for x in g])
        rewards, records, i = [], [], 0
        for task, g in zip(tasks, texts):
            m = [bool(v) for v in match[i : i + len(g)]]
            i += len(g)
            rewards.append(signed_match_rewards(m)[0])
            records.append({"id": task.id, "question": task.question, "label": task.answer,
                            "targets": task.features["targets"], "responses": g, "matches": m})
        metrics = {"match_rate": _mean([float(v) for v in match]) or 0.0}
        if truth:
            metrics["oracle_acc"] = _mean([float(v) for v in truth]) or 0.0
        return rewards, Observed(metrics, records)

    return reward


def phase_solver(s: Setup, solver: Role, t: int) -> PhaseRecord:
    """Stage 3: solver GRPO on the kept questions in shuffled passes (reward ±1 for ŷ)."""
    cfg, sc = s.cfg, s.cfg.solver

    def fn(ctx: PhaseContext) -> PhaseResult:
        tasks = [Task(r["id"], r["question"], r["label"], "generated",
                      {"oracle": r["meta"].get("oracle"), "targets": r["meta"].get("cause_ids", [])})
                 for r in s.run.read_jsonl(ctx.dir / "kept.jsonl")]
        if not tasks or sc.steps == 0:
            s.run.write_jsonl(ctx.dir / "optimisation.jsonl", [])
            ctx.say("[solver] nothing kept: no update")
            return PhaseResult({"skipped": True},
                               problem="the filter kept no question: the solver was not trained" if not tasks else None)
        passes = ShuffledPasses(tasks, random.Random(ctx.seed))
        res = s.train(solver, sc, verl_reward=RewardSpec("match", grader_timeout=cfg.run.grader_timeout),
                      batches=lambda step: passes.take(min(sc.prompts_per_step, len(tasks))),
                         prompt=lambda task: s.world.prompter.solver(task.question), reward=match_reward(s.grader),
                         params=s.params(ctx.seed, sc), ctx=ctx, ns="solver", progress=cfg.run.progress,
                         rollouts_file=ctx.dir / "solver_rollouts.jsonl" if cfg.run.save_rollouts else None)
        first: dict[str, dict[str, Any]] = {}
        for r in res.records:  # the G fresh responses of a question's first batch feed the diagnosis
            first.setdefault(r["id"], {k: v for k, v in r.items() if k != "step"})
        s.run.write_jsonl(ctx.dir / "optimisation.jsonl", [first[k] for k in sorted(first)])
        ctx.say(f"[solver] mean reward {res.reward_mean:.3f} over {res.steps} steps on {len(tasks)} kept questions")
        return PhaseResult({"reward_mean": round(res.reward_mean, 4), "questions_trained": len(first), "updates": res.updates},
                           res.rollouts, s.save(solver, f"r{t:02d}"), res.problem)

    return s.run.phase(Phase("solver", t), fn)


def remeasure_targeted(s: Setup, solver: Role, ctx: PhaseContext, pool_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Promotion evidence under ``memory.promotion_p1=updated``: re-answer every targeted
    candidate of the round with the solver *after* this round's GRPO (``pool.voting.samples``
    answers each, seeded from the memory phase's seed) and vote again; writes
    ``promotion_p1.jsonl`` (construction vs updated p1 and label) and returns id -> updated p1."""
    rows = targeted_questions(pool_rows)
    votes = label_questions(solver.sampler, s.world.prompter, [r["question"] for r in rows], s.cfg.pool.voting.samples,
                            s.params(derive_seed(ctx.seed, "promotion")), s.grader,
                            s.cfg.sampling.batch_prompts)
    out = [{"id": r["id"], "cause_ids": r["meta"]["cause_ids"], "mode": r["meta"].get("mode"), "kept": r.get("kept"),
            "question": r["question"], "p1_construction": r["p1"], "label_construction": r["label"],
            "p1_updated": v.p1, "p2_updated": v.p2, "label_updated": v.label} for r, v in zip(rows, votes)]
    s.run.write_jsonl(ctx.dir / "promotion_p1.jsonl", out)
    return {r["id"]: float(r["p1_updated"]) for r in out}


def _promotion_stats(rows: list[dict[str, Any]], remeasured: dict[str, float] | None) -> dict[str, float]:
    """Mean p1 of the round's targeted questions (updated and construction), for the log."""
    targeted = targeted_questions(rows)
    construction = [float(r["p1"]) for r in targeted]
    p1 = [remeasured[r["id"]] for r in targeted] if remeasured is not None else construction
    out: dict[str, float] = {"targeted_questions": len(p1)}
    if p1:
        out.update(targeted_p1_mean=_mean(p1) or 0.0, targeted_p1_construction_mean=_mean(construction) or 0.0)
    return out


def phase_memory(s: Setup, solver: Role, diag: Diagnosis, t: int) -> PhaseRecord:
    """Stage 4: diagnose (r-, r+) pairs, file causes, promote, merge; save ``memory.json``."""
    cfg, m = s.cfg, s.cfg.memory

    def fn(ctx: PhaseContext) -> PhaseResult:
        mem = load_memory(s.run, t - 1)
        if not m.enabled:  # R-Zero-style baseline: no diagnosis, the memory stays empty
            s.run.write_jsonl(ctx.dir / "diagnoses.jsonl", [])
            mem.save(ctx.dir / MEMORY_FILE)
            ctx.say("[memory] disabled (memory.enabled=false): no diagnosis")
            return PhaseResult({"skipped": True, **mem.stats(m.k)})
        kept = [KeptQuestion(r["question"], r["label"], list(r["targets"]), r["responses"], r["matches"], id=r["id"])
                for r in s.run.read_jsonl(ctx.dir / "optimisation.jsonl")]
        rows = s.run.read_jsonl(ctx.dir / "pool.jsonl")
        remeasured = remeasure_targeted(s, solver, ctx, rows) if m.promotion_p1 == "updated" else None
        diag.diagnoser.stats = DiagnoserStats()
        res = maintain_memory(mem, kept, diag.diagnoser, diag.embedder, t, m,
                              targeted_p1_by_cause(rows, m.promotion_p1, remeasured), np.random.default_rng(ctx.seed),
                              diag.confirm(ctx.seed),
                              reference_p1=targeted_p1_by_cause(rows, "construction") if remeasured is not None else None)
        checkable = s.world.knows_truth and diag.kind == "llm"  # does the model name the cause the trace shows?
        agree = [float(s.world.true_cause(r["question"], r["bad"], r["good"]) == r["diagnosis"]["cause"])
                 for r in res.records if checkable and r["diagnosis"] is not None]
        stats = {**res.stats, **_promotion_stats(rows, remeasured),
                 **({"diagnosis_oracle_agreement": _mean(agree)} if agree else {}),
                 **{f"diagnoser_{k}": v for k, v in diag.diagnoser.stats.as_dict().items()}}
        stats = {k: round(v, 4) if isinstance(v, float) else v for k, v in stats.items()}
        s.run.write_jsonl(ctx.dir / "diagnoses.jsonl", res.records)
        mem.save(ctx.dir / MEMORY_FILE)
        ctx.log({f"memory/{k}": v for k, v in stats.items() if isinstance(v, (int, float))})
        ctx.say(f"[memory] {stats['diagnoses_ok']}/{stats['diagnoses_attempted']} diagnoses ok, {stats['new_causes']} new "
                f"causes, promoted {res.promoted}, re-activated {res.reactivated}; {stats['causes']} causes under "
                f"{stats['nodes']} nodes ({stats['active']} active / {stats['mastered']} mastered), next ε={stats['next_epsilon']:.3f}")
        rollouts = (diag.diagnoser.stats.calls if diag.kind == "llm" else 0) + len(remeasured or {}) * cfg.pool.voting.samples
        return PhaseResult({**stats, "promoted_ids": ",".join(res.promoted), "reactivated_ids": ",".join(res.reactivated)},
                           rollouts)

    return s.run.phase(Phase("memory", t), fn)


def plan(cfg: DiagEvoConfig) -> list[Phase]:
    """The phases ``run`` goes through, in order (kept in state.json; a resume refuses a change)."""
    phases = [Phase.base("eval")]
    for t in range(1, cfg.rounds + 1):
        phases += [Phase(n, t) for n in ("challenger", "pool", "solver", "memory",
                                          *(["eval"] if eval_due(cfg, t, cfg.rounds) else []))]
    return phases


def run(cfg: DiagEvoConfig, run: Run) -> dict[str, Any]:
    """Base eval, then ``cfg.rounds`` rounds of challenger -> pool -> solver -> memory -> eval."""
    with make_grader(cfg.run.grader_timeout, cfg.run.grader_workers) as grader:
        s = setup(cfg, run, grader)
        solver, challenger = s.role("solver"), s.role("challenger")
        diag = Diagnosis(s, solver)
        phase_eval(s, solver, Phase.base("eval"))
        for t in range(1, cfg.rounds + 1):
            challenger.onload()  # writes questions in stages 1-2 (parked in CPU memory since the last round)
            phase_challenger(s, challenger, solver, t)
            phase_pool(s, challenger, solver, t)
            challenger.offload(weights=True)  # idle until the next round: the GPU is the solver's
            phase_solver(s, solver, t)
            phase_memory(s, solver, diag, t)
            if eval_due(cfg, t, cfg.rounds):
                phase_eval(s, solver, Phase("eval", t))
        final = load_memory(run, cfg.rounds)
        run.write_json("memory.json", final.to_dict())
        return finish(s, {"memory": final.stats(cfg.memory.k)})


__all__ = ["run", "plan", "load_memory"]
