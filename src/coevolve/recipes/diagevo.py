"""Recipe ``diagevo``: DiagEvo, diagnosis-guided self-evolution via a hierarchical error memory.
Label-free: no labelled data enters training; labels exist only for evaluation and, where the
world has an oracle (the toy world), for measuring pseudo-label accuracy and target hits.

Two separate models, one frozen while the other trains: the challenger writes questions, the
solver answers them. Every round t = 1..rounds runs the paper's four stages and an evaluation as
resumable phases (``coevolve.run``), declared once in ``RECIPE`` (end of file):

1. ``TT/challenger`` — targets from the memory of round t-1 (explore with prob ε, else an Active
   cause e ~ p(e) = f(e)/F_t, stitched with a Mastered sibling); the frozen solver answers every
   generated question N_v times; GRPO on the challenger with the plateau reward on p1 (or R-Zero's).
2. ``TT/pool`` — the updated challenger writes the candidate pool; N construction answers per
   question give ŷ (majority), p1, p2; dual-confidence filter. Oracle agreement of the labels is
   measured on the same pool under all three filters (none / absolute / dual).
3. ``TT/solver`` — GRPO on the kept questions, G fresh responses, reward +1 / -1 for matching ŷ.
4. ``TT/memory`` — diagnose every failed optimisation response r⁻ of a kept question, paired
   with a successful r⁺ of the same question (batched calls to the frozen diagnosis model),
   file the causes, promote, merge nodes; the memory is saved to ``round_TT/memory.json`` (the input of round t+1).
5. ``TT/eval`` — held-out accuracy of the solver.

Every phase reads its inputs from the run folder (previous artefacts + latest checkpoints) and
writes its outputs atomically before being marked done, so ``kill -9`` + ``coevolve resume``
reproduces an uninterrupted run exactly and the memory is never half-updated.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from coevolve.config.diagevo import DiagEvoConfig
from coevolve.curriculum import label_questions, parse_yes_no, propose_questions
from coevolve.curriculum.proposals import WriterBatch
from coevolve.errors import RunStateError
from coevolve.loop import Role, ShuffledPasses
from coevolve.memory.diagnose import Diagnoser, DiagnoserStats, LLMDiagnoser, clip_middle
from coevolve.memory.embed import make_embedder
from coevolve.memory.maintain import KeptQuestion, maintain_memory, targeted_p1_by_cause, targeted_questions
from coevolve.memory.store import MEMORY_FILE, ErrorMemory
from coevolve.recipes.declare import FROZEN_DIAGNOSER, Recipe, Rollouts, Step, Work, phase_cap, scored_by, train_work
from coevolve.recipes.evaluation import BASE_EVAL, ROUND_EVAL
from coevolve.recipes.probe import BASE_PROBE, ROUND_PROBE
from coevolve.recipes.setup import Setup
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult, Run, derive_seed
from coevolve.training import Observed, RewardSpec, TrainRequest
from coevolve.types import Completion, SamplingParams, Task


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
        return make_embedder(self.s.cfg.memory.embedder, device="cpu")

    @functools.cached_property
    def sampler_prompter(self) -> tuple[Any, Any]:
        s = self.s
        path = s.cfg.diagnosis_model_path()
        if path is None:  # self-diagnosis (a stated deviation on real models; the toy worlds' llm option)
            return self.solver.sampler, s.world.prompter
        sampler = s.load(path)
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

        return LLMDiagnoser(
            sampler,
            prompt,
            SamplingParams(temperature=d.temperature, max_new_tokens=d.max_new_tokens, stop=prompter.stop("answer")),
        )

    def confirm(self, seed: int) -> Callable[[str, str], bool] | None:
        """Yes/no duplicate confirmation by the diagnosis model (llm diagnoser, when enabled)."""
        if not self.s.cfg.memory.confirm_duplicates or self.kind != "llm":
            return None
        sampler, prompter = self.sampler_prompter
        params = SamplingParams(temperature=0.0, max_new_tokens=CONFIRM_TOKENS, seed=seed, stop=prompter.stop("answer"))
        return lambda a, b: parse_yes_no(sampler.sample([prompter.confirm(a, b)], 1, params)[0][0].text) is True


CONFIRM_TOKENS = 8
"""Reply cap of a duplicate confirmation (yes / no)."""


def _epsilon(cfg: DiagEvoConfig, mem: ErrorMemory) -> float:
    return {"mixed": mem.epsilon(cfg.memory.k), "explore_only": 1.0, "targeted_only": 0.0}[cfg.memory.schedule]


def challenger_audit(
    s: Setup, mem: ErrorMemory
) -> Callable[[int, list[Task], list[list[Completion]], WriterBatch], Observed]:
    """Per question whether it exercises the cause it was targeted at (where the world can tell),
    and the batch figures; shared by both backends (verl rebuilds ``wb`` from its dumps)."""

    def audit(step: int, tasks: list[Task], comps: list[list[Completion]], wb: WriterBatch) -> Observed:
        records = []
        for task, qs, xs, rs in zip(tasks, wb.questions, wb.x, wb.rewards):
            target = task.features["target"]
            for q, x, r in zip(qs, xs, rs):
                shows = (
                    s.world.shows_causes(q, [mem.causes[c] for c in target["cause_ids"]])
                    if q and target["cause_ids"]
                    else None
                )
                records.append(
                    {
                        "mode": target["mode"],
                        "cause_ids": target["cause_ids"],
                        "question": q,
                        "p1": x,
                        "reward": r,
                        "shows_target": shows,
                    }
                )
        hits = [float(r["shows_target"][0]) for r in records if r["shows_target"] is not None]
        extra = {
            "targeted_share": _mean([float(bool(t.features["target"]["cause_ids"])) for t in tasks]) or 0.0,
            **({"target_hit_rate": _mean(hits)} if hits else {}),
        }
        return Observed({**wb.metrics(), **extra}, records, wb.rollouts)

    return audit


@dataclass
class DiagEvo:
    """What the phases share: the run's Setup, the solver, the challenger and the diagnosis
    model (built on first use)."""

    s: Setup
    solver: Role
    challenger: Role
    diag: Diagnosis


def build(s: Setup, roles: dict[str, Role]) -> DiagEvo:
    return DiagEvo(s, roles["solver"], roles["challenger"], Diagnosis(s, roles["solver"]))


def _challenger_batches(s: Setup, mem: ErrorMemory, t: int, rng: np.random.Generator) -> Callable[[int], list[Task]]:
    """A challenger step's prompts: ``challenger.prompts_per_step`` targets drawn from the memory
    (``memory.stitching`` / ``schedule`` / ``k``), each asking for a question that shows its causes."""
    cfg, ch = s.cfg, s.cfg.challenger

    def batches(step: int) -> list[Task]:
        targets = mem.sample_targets(rng, ch.prompts_per_step, cfg.memory.stitching, cfg.memory.schedule, cfg.memory.k)
        return [
            Task(
                f"r{t:02d}-ch{step:03d}-{i:03d}",
                s.world.prompter.challenger(target.cause_texts),
                features={"target": target.to_dict()},
            )
            for i, target in enumerate(targets)
        ]

    return batches


def phase_challenger(p: DiagEvo, phase: Phase) -> PhaseRecord:
    """Stage 1: challenger GRPO against the frozen solver (skipped when challenger.frozen)."""
    s, challenger, solver, t = p.s, p.challenger, p.solver, phase.round
    cfg, ch = s.cfg, s.cfg.challenger

    def fn(ctx: PhaseContext) -> PhaseResult:
        mem = load_memory(s.run, t - 1)
        eps = _epsilon(cfg, mem)
        if ch.frozen or ch.steps == 0:
            ctx.say("[challenger] frozen (ablation): no update")
            return PhaseResult({"skipped": True, "epsilon": eps})
        res = s.train(
            challenger,
            TrainRequest(
                ch,
                "challenger",
                batches=_challenger_batches(s, mem, t, np.random.default_rng(ctx.seed)),
                prompt=lambda task: task.question,
                params=s.params(ctx.seed, ch, "question"),
                reward=RewardSpec("writer"),
                writer=s.writer_scoring(solver, solver.sampler, ch.reward, ctx.seed, "solve", challenger_audit(s, mem)),
            ),
            ctx,
        )
        s.run.write_jsonl(ctx.dir / "challenger_questions.jsonl", res.records)
        hits = [float(r["shows_target"][0]) for r in res.records if r["shows_target"] is not None]
        values = {
            "reward_mean": round(res.reward_mean, 4),
            "epsilon": round(eps, 4),
            "well_formed": round(_mean([float(r["question"] is not None) for r in res.records]) or 0.0, 4),
            "target_hit_rate": None if not hits else round(_mean(hits) or 0.0, 4),
            "updates": res.updates,
            "challenger_rollouts": res.rollouts,
            "solver_rollouts": res.reward_rollouts,
        }
        ctx.say(
            f"[challenger] ε={eps:.3f} reward {values['reward_mean']:.3f}, well-formed {values['well_formed']:.2f}"
            + (f", target hit {values['target_hit_rate']:.2f}" if hits else "")
        )
        return PhaseResult(values, res.rollouts + res.reward_rollouts, s.save(challenger, f"r{t:02d}"), res.problem)

    return s.run.phase(phase, fn)


def phase_pool(p: DiagEvo, phase: Phase) -> PhaseRecord:
    """Stage 2: the challenger writes the candidate pool aimed at the memory's targets; N construction
    answers vote ŷ, p1, p2; the dual-confidence filter keeps the training set."""
    s, challenger, solver, t = p.s, p.challenger, p.solver, phase.round
    cfg, pc = s.cfg, s.cfg.pool

    def fn(ctx: PhaseContext) -> PhaseResult:
        mem = load_memory(s.run, t - 1)
        targets = mem.sample_targets(
            np.random.default_rng(ctx.seed), pc.size, cfg.memory.stitching, cfg.memory.schedule, cfg.memory.k
        )
        pool = propose_questions(
            challenger.sampler,
            [s.world.prompter.challenger(p.cause_texts) for p in targets],
            [{"mode": p.mode, "cause_ids": p.cause_ids, "round": t} for p in targets],
            prompter=s.world.prompter,
            solver=solver.sampler,
            voting=pc.voting,
            grader=s.grader,
            write_params=s.params(derive_seed(ctx.seed, "write"), cfg.challenger, "question"),
            vote_params=s.params(derive_seed(ctx.seed, "construct")),
            batch_prompts=cfg.sampling.batch_prompts,
            id_prefix=f"r{t:02d}-q",
            excluded=s.world.excluded(),
            oracle=s.world.oracle if s.world.knows_truth else None,
        )
        for v in pool.votes:
            ids = v.meta["cause_ids"]
            v.meta["shows_target"] = s.world.shows_causes(v.question, [mem.causes[c] for c in ids]) if ids else None
        s.run.write_jsonl(ctx.dir / "candidates.jsonl", [c.to_dict() for c in pool.candidates])
        s.run.write_jsonl(ctx.dir / "pool.jsonl", pool.rows())
        s.run.write_jsonl(ctx.dir / "kept.jsonl", [r for r in pool.rows() if r["kept"]])
        hits = [float(v.meta["shows_target"][0]) for v in pool.votes if v.meta["shows_target"] is not None]
        values = {
            **{k: v for k, v in pool.stats().items() if k != "rollouts"},
            "targeted_share": round(_mean([float(bool(p.cause_ids)) for p in targets]) or 0.0, 4),
            "target_hit_rate": None if not hits else round(_mean(hits) or 0.0, 4),
        }
        ctx.log({f"curriculum/{k}": v for k, v in values.items() if isinstance(v, (int, float))})
        ctx.say(
            f"[pool] {len(targets)} prompts -> {values['labelled']} candidates -> kept {values['kept']} "
            f"({pc.voting.filter}); oracle agreement none/absolute/dual: "
            + "/".join(_fmt(values[f"oracle_acc_{m}"]) for m in ("none", "absolute", "dual"))
        )
        return PhaseResult(values, pool.rollouts)

    return s.run.phase(phase, fn)


def phase_solver(p: DiagEvo, phase: Phase) -> PhaseRecord:
    """Stage 3: solver GRPO on the kept questions in shuffled passes (reward ±1 for ŷ)."""
    s, solver, t = p.s, p.solver, phase.round
    sc = s.cfg.solver

    def fn(ctx: PhaseContext) -> PhaseResult:
        tasks = [
            Task(
                r["id"],
                r["question"],
                r["label"],
                "generated",
                {"oracle": r["meta"].get("oracle"), "targets": r["meta"].get("cause_ids", [])},
            )
            for r in s.run.read_jsonl(ctx.dir / "kept.jsonl")
        ]
        if not tasks or sc.steps == 0:
            s.run.write_jsonl(ctx.dir / "optimisation.jsonl", [])
            ctx.say("[solver] nothing kept: no update")
            return PhaseResult(
                {"skipped": True},
                problem="the filter kept no question: the solver was not trained" if not tasks else None,
            )
        passes = ShuffledPasses(tasks, random.Random(ctx.seed))
        res = s.train(
            solver,
            TrainRequest(
                sc,
                "solver",
                batches=lambda step: passes.take(min(sc.prompts_per_step, len(tasks))),
                prompt=lambda task: s.world.prompter.solver(task.question),
                params=s.params(ctx.seed, sc),
                reward=RewardSpec("match"),
            ),
            ctx,
        )
        first: dict[str, dict[str, Any]] = {}
        for r in res.records:  # the G fresh responses of a question's first batch feed the diagnosis
            first.setdefault(r["id"], {k: v for k, v in r.items() if k != "step"})
        s.run.write_jsonl(ctx.dir / "optimisation.jsonl", [first[k] for k in sorted(first)])
        ctx.say(f"[solver] mean reward {res.reward_mean:.3f} over {res.steps} steps on {len(tasks)} kept questions")
        return PhaseResult(
            {
                "reward_mean": round(res.reward_mean, 4),
                "questions_trained": len(first),
                "updates": res.updates,
                "zero_variance": res.zero_variance,
            },
            res.rollouts,
            s.save(solver, f"r{t:02d}"),
            res.problem,
        )

    return s.run.phase(phase, fn)


def remeasure_targeted(s: Setup, solver: Role, ctx: PhaseContext, pool_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Promotion evidence under ``memory.promotion_p1=updated``: re-answer every targeted
    candidate of the round with the solver *after* this round's GRPO (``pool.voting.samples``
    answers each, seeded from the memory phase's seed) and vote again; writes
    ``promotion_p1.jsonl`` (construction vs updated p1 and label) and returns id -> updated p1."""
    rows = targeted_questions(pool_rows)
    votes = label_questions(
        solver.sampler,
        s.world.prompter,
        [r["question"] for r in rows],
        s.cfg.pool.voting.samples,
        s.params(derive_seed(ctx.seed, "promotion")),
        s.grader,
        s.cfg.sampling.batch_prompts,
    )
    out = [
        {
            "id": r["id"],
            "cause_ids": r["meta"]["cause_ids"],
            "mode": r["meta"].get("mode"),
            "kept": r.get("kept"),
            "question": r["question"],
            "p1_construction": r["p1"],
            "label_construction": r["label"],
            "p1_updated": v.p1,
            "p2_updated": v.p2,
            "label_updated": v.label,
        }
        for r, v in zip(rows, votes)
    ]
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


def _memory_stats(s: Setup, diag: Any, res: Any, rows: list[dict[str, Any]], remeasured: Any) -> dict[str, Any]:
    """The memory phase's figures (rounded to 4 places): the maintenance's, the promotion's, the
    diagnoser's, and, where the world knows the true cause and an LLM diagnoses, how often the
    diagnosis names it."""
    checkable = s.world.knows_truth and diag.kind == "llm"  # does the model name the cause the trace shows?
    agree = [
        float(s.world.true_cause(r["question"], r["bad"], r["good"]) == r["diagnosis"]["cause"])
        for r in res.records
        if checkable and r["diagnosis"] is not None
    ]
    stats = {
        **res.stats,
        **_promotion_stats(rows, remeasured),
        **({"diagnosis_oracle_agreement": _mean(agree)} if agree else {}),
        **{f"diagnoser_{k}": v for k, v in diag.diagnoser.stats.as_dict().items()},
    }
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in stats.items()}


def phase_memory(p: DiagEvo, phase: Phase) -> PhaseRecord:
    """Stage 4: diagnose (r-, r+) pairs, file causes, promote, merge; save ``memory.json``."""
    s, solver, diag, t = p.s, p.solver, p.diag, phase.round
    cfg, m = s.cfg, s.cfg.memory

    def fn(ctx: PhaseContext) -> PhaseResult:
        mem = load_memory(s.run, t - 1)
        if not m.enabled:  # R-Zero-style baseline: no diagnosis, the memory stays empty
            s.run.write_jsonl(ctx.dir / "diagnoses.jsonl", [])
            mem.save(ctx.dir / MEMORY_FILE)
            ctx.say("[memory] disabled (memory.enabled=false): no diagnosis")
            return PhaseResult({"skipped": True, **mem.stats(m.k)})
        kept = [
            KeptQuestion(r["question"], r["label"], list(r["targets"]), r["responses"], r["matches"], id=r["id"])
            for r in s.run.read_jsonl(ctx.dir / "optimisation.jsonl")
        ]
        rows = s.run.read_jsonl(ctx.dir / "pool.jsonl")
        remeasured = remeasure_targeted(s, solver, ctx, rows) if m.promotion_p1 == "updated" else None
        diag.diagnoser.stats = DiagnoserStats()
        res = maintain_memory(
            mem,
            kept,
            diag.diagnoser,
            diag.embedder,
            t,
            m,
            targeted_p1_by_cause(rows, m.promotion_p1, remeasured),
            np.random.default_rng(ctx.seed),
            diag.confirm(ctx.seed),
            reference_p1=targeted_p1_by_cause(rows, "construction") if remeasured is not None else None,
        )
        stats = _memory_stats(s, diag, res, rows, remeasured)
        s.run.write_jsonl(ctx.dir / "diagnoses.jsonl", res.records)
        mem.save(ctx.dir / MEMORY_FILE)
        ctx.log({f"memory/{k}": v for k, v in stats.items() if isinstance(v, (int, float))})
        ctx.say(
            f"[memory] {stats['diagnoses_ok']}/{stats['diagnoses_attempted']} diagnoses ok, {stats['new_causes']} new "
            f"causes, promoted {res.promoted}, re-activated {res.reactivated}; {stats['causes']} causes under "
            f"{stats['nodes']} nodes ({stats['active']} active / {stats['mastered']} mastered), next ε={stats['next_epsilon']:.3f}"
        )
        rollouts = (diag.diagnoser.stats.calls if diag.kind == "llm" else 0) + len(
            remeasured or {}
        ) * cfg.pool.voting.samples
        return PhaseResult(
            {**stats, "promoted_ids": ",".join(res.promoted), "reactivated_ids": ",".join(res.reactivated)}, rollouts
        )

    return s.run.phase(phase, fn)


def final_memory(p: DiagEvo) -> dict[str, Any]:
    """The memory after the last round, copied to the run folder's ``memory.json``, and its
    figures for summary.json."""
    cfg = p.s.cfg
    last = max(
        (r.round for r in p.s.run.state.records() if r.round is not None), default=0
    )  # < rounds after an early stop
    final = load_memory(p.s.run, last)
    p.s.run.write_json("memory.json", final.to_dict())
    return {"memory": final.stats(cfg.memory.k)}


# -------------------------------------------------------------------------------------- work
KEPT_FRACTION = 0.3
"""The cost model's assumed share of the candidate pool that passes the dual filter (it drives
the diagnoses)."""


def failed_per_question(cfg: DiagEvoConfig) -> float:
    """The cost model's assumed failed optimisation responses per kept question (each one a
    diagnosis): G x (1 - the middle of the pool's p1 band), a kept question's responses agreeing
    with ŷ about as often as its construction votes did; at most ``memory.max_pairs_per_question``."""
    band = cfg.pool.voting.band
    fails = cfg.solver.group_size * (1.0 - (band.low + band.high) / 2)
    cap = cfg.memory.max_pairs_per_question
    return fails if cap is None else min(float(cap), fails)


def challenger_work(cfg: DiagEvoConfig, toy: bool) -> Work:
    ch = cfg.challenger
    if ch.frozen:
        return Work()
    return train_work(
        "challenger",
        "challenger",
        ch,
        cfg.sampling,
        "question",
        "questions",
        scored_by("solver", ch, cfg.sampling, ch.reward.samples),
    )


def pool_work(cfg: DiagEvoConfig, toy: bool) -> Work:
    pc, s = cfg.pool, cfg.sampling
    return Work(
        (
            Rollouts(
                "challenger",
                "candidate questions",
                pc.size,
                s.batch_prompts,
                1,
                "question",
                phase_cap(cfg.challenger, s),
            ),
            Rollouts(
                "solver",
                f"{pc.voting.samples} construction answers",
                pc.size * pc.voting.samples,
                s.batch_prompts,
                pc.voting.samples,
                "answer",
                s.max_new_tokens,
            ),
        )
    )


def solver_work(cfg: DiagEvoConfig, toy: bool) -> Work:
    return train_work("solver", "solver", cfg.solver, cfg.sampling, "answer", "answers")


def memory_work(cfg: DiagEvoConfig, toy: bool) -> Work:
    mem, dg, pc, s = cfg.memory, cfg.diagnoser, cfg.pool, cfg.sampling
    if not mem.enabled:
        return Work()
    kept = max(1, int(pc.size * KEPT_FRACTION))
    fails = failed_per_question(cfg)
    calls = max(1, math.ceil(kept * fails))
    if mem.max_diagnoses_per_round is not None:
        calls = min(calls, mem.max_diagnoses_per_round)
    llm = dg.kind == "llm" or (dg.kind == "auto" and not toy)
    who = "solver" if cfg.diagnosis_model_path() is None else FROZEN_DIAGNOSER
    gens = (
        [
            Rollouts(
                who, "diagnoses (one per failed response)", calls, s.batch_prompts, 1, "diagnosis", dg.max_new_tokens
            )
        ]
        if llm
        else []
    )
    if llm and mem.confirm_duplicates:  # yes/no calls one at a time while causes are filed; at most retrieve_k each
        gens.append(
            Rollouts(
                who,
                f"duplicate confirmations (<= {mem.retrieve_k} per diagnosis)",
                calls * mem.retrieve_k,
                1,
                1,
                "diagnosis",
                CONFIRM_TOKENS,
            )
        )
    if mem.promotion_p1 == "updated":
        gens.append(
            Rollouts(
                "solver",
                "promotion re-measure",
                kept * pc.voting.samples,
                s.batch_prompts,
                pc.voting.samples,
                "answer",
                s.max_new_tokens,
            )
        )
    return Work(
        tuple(gens),
        note=f"~{kept} kept questions assumed ({KEPT_FRACTION:.0%} of the pool), "
        f"~{fails:.2g} failed responses each" + (f", {calls} diagnoses" if llm else ""),
    )


RECIPE = Recipe(
    "diagevo",
    roles=lambda cfg: ("solver", "challenger"),
    build=build,
    summary=final_memory,
    steps=(
        BASE_EVAL,
        BASE_PROBE,
        Step("challenger", phase_challenger, uses=("challenger",), work=challenger_work),
        Step("pool", phase_pool, uses=("challenger",), work=pool_work),
        Step("solver", phase_solver, work=solver_work),
        Step("memory", phase_memory, work=memory_work),
        ROUND_PROBE,
        ROUND_EVAL,
    ),
)


__all__ = ["RECIPE", "load_memory"]
