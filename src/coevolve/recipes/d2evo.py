"""Recipe ``d2evo``: D²Evo, dual difficulty-aware self-evolution (ICML 2026, arXiv 2605.17037).

The paper's four steps of round t = 1..T, as resumable phases (``coevolve.run``) with
artefacts in ``round_NN/``, declared once in ``RECIPE`` (end of file):

1. difficulty estimation and anchor mining, two phases:
   ``difficulty`` — the frozen current solver samples N answers per candidate real question
   (``difficulty.jsonl``: correct count, pass rate, difficulty per question; with
   ``difficulty.estimator=adaptive`` fewer for questions decided early, each row's ``n`` says how
   many — docs/difficulty.md);
   ``anchors`` — keep low <= pass rate <= high (or a random draw of the same size: ablation);
2. ``questioner`` — GRPO of the questioner on anchor prompts, reward format gate × plateau
   r_diff(x) (or R-Zero's), x = agreement of N_v frozen-solver answers
   (``questioner_generated.jsonl``: every generated question with its x and reward);
3. ``buffer`` — the updated questioner writes candidate questions; majority-vote pseudo-labels
   by the previous-round solver π_S^{t-1} (the model that measured the anchors: one difficulty
   scale); keep x in the band; optional label verifier; union with the anchors (``candidates.jsonl``,
   ``pool.jsonl``, ``buffer.jsonl``);
4. ``solver`` — GRPO on the buffer with α·acc + (1-α)·format;

then ``eval`` (held-out accuracy; also ``base/eval`` before round 1). Each phase reads its inputs
from the previous phases' files (also in an uninterrupted run), so a resumed run follows exactly
the same path as one that was never killed. ``final/difficulty`` re-measures the candidate pool
with the final solver, for the last histogram.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.config.d2evo import D2EvoConfig
from coevolve.curriculum import (
    LabelVerifier,
    PassRecord,
    build_hybrid_buffer,
    carry_prior,
    estimate_difficulty,
    estimate_difficulty_adaptive,
    make_verifier,
    mine_anchors,
    normalize_question,
    pass_rate_histogram,
    propose_questions,
    random_anchors,
)
from coevolve.curriculum.proposals import WriterBatch
from coevolve.errors import RunStateError
from coevolve.loop import Role
from coevolve.recipes.declare import FROZEN_SOLVER, Recipe, Rollouts, Step, Work, phase_cap, scored_by, train_work
from coevolve.recipes.evaluation import BASE_EVAL, ROUND_EVAL
from coevolve.recipes.probe import BASE_PROBE, ROUND_PROBE
from coevolve.recipes.setup import Setup
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult, derive_seed
from coevolve.training import Observed, RewardSpec, TrainRequest
from coevolve.types import Completion, Task

POOL_ROWS_IF_UNKNOWN = 12000
"""``difficulty.pool_size=None`` means every dataset row: the cost model assumes math_train12k's size."""


@dataclass
class D2Evo:
    """What the phases share: the run's Setup, the solver, the questioner (the solver itself with
    shared weights; None in the 'w/o Questioner' ablation) and the fixed candidate pool."""

    s: Setup
    solver: Role
    questioner: Role | None
    pool: list[Task]
    judge_model: Any = None  # buffer.judge_model_path's sampler and prompter, loaded at the first buffer phase

    def judge(self) -> tuple[Any, Any]:
        """The label verifier's judge and its prompter: the solver, or ``buffer.judge_model_path``
        loaded once for the run (as DiagEvo keeps its diagnosis model)."""
        b, s = self.s.cfg.buffer, self.s
        if b.verifier != "judge" or b.judge_model_path is None:
            return self.solver.sampler, s.world.prompter
        if self.judge_model is None:
            sampler = s.load(b.judge_model_path)
            self.judge_model = (sampler, s.world.prompter_for(sampler.tokenizer))
        return self.judge_model


def build(s: Setup, roles: dict[str, Role]) -> D2Evo:
    q, solver = s.cfg.questioner, roles["solver"]
    questioner = roles.get("questioner", solver) if q.enabled else None
    pool = s.world.pool(random.Random(derive_seed(s.cfg.run.seed, "pool")), s.cfg.difficulty.pool_size)
    return D2Evo(s, solver, questioner, pool)


def roles(cfg: D2EvoConfig) -> tuple[str, ...]:
    """The solver, and a questioner of its own in the 'w/o share weight' ablation."""
    q = cfg.questioner
    return ("solver", "questioner") if q.enabled and not q.share_weights else ("solver",)


def _anchors(s: Setup, t: int) -> list[PassRecord]:
    return [PassRecord.from_dict(d) for d in s.run.read_jsonl(f"round_{t:02d}/anchors.jsonl")]


def _previous_difficulty(s: Setup, phase: Phase) -> dict[str, PassRecord]:
    """Last measurement of the pool before ``phase`` (round t-1's, or round T's for the final
    one), by task id; empty in round 1."""
    t = s.cfg.rounds + 1 if phase.round is None else phase.round
    if t <= 1:
        return {}
    rows = s.run.read_jsonl(f"round_{t - 1:02d}/difficulty.jsonl")
    return {r.task_id: r for r in map(PassRecord.from_dict, rows)}


def phase_difficulty(p: D2Evo, phase: Phase) -> PhaseRecord:
    """Step 1, difficulty estimation: N samples per candidate question from the frozen current
    solver (no update); with ``difficulty.estimator=adaptive`` in stages, each question stopping
    once its band membership is decided (optionally with last round's counts as prior,
    ``difficulty.carry``)."""
    s, d = p.s, p.s.cfg.difficulty

    def fn(ctx: PhaseContext) -> PhaseResult:
        recs = _estimate(p, phase, ctx)
        s.run.write_jsonl(ctx.dir / "difficulty.jsonl", [r.to_dict() for r in recs])
        if phase.round == 1:  # the pool is fixed for the run: its gold labels are first read here
            ctx.compute.labelled(len(recs))
        hist = pass_rate_histogram([r.pass_rate for r in recs])
        mean = sum(r.pass_rate for r in recs) / max(1, len(recs))
        rollouts = sum(r.n for r in recs)
        ctx.log(
            {
                "curriculum/pool_size": len(recs),
                "curriculum/pass_rate_mean": round(mean, 4),
                **{f"curriculum/hist/{k}": v for k, v in hist.items()},
            }
        )
        values: dict[str, Any] = {"pool_size": len(recs), "pass_rate_mean": round(mean, 4), "histogram": hist}
        if d.estimator == "fixed":
            ctx.say(
                f"[difficulty] {phase.key}: {len(recs)} questions x {d.samples}, mean pass rate {mean:.3f}, "
                f"histogram {hist}"
            )
            return PhaseResult(values, rollouts=rollouts)
        stops = {k: sum(r.decision == k for r in recs) for k in ("below", "inside", "above", "cap")}
        values.update(samples_mean=round(rollouts / max(1, len(recs)), 3), stopped=stops)
        ctx.log(
            {
                "curriculum/samples_mean": values["samples_mean"],
                **{f"curriculum/stopped/{k}": v for k, v in stops.items()},
            }
        )
        ctx.say(
            f"[difficulty] {phase.key}: {len(recs)} questions, {rollouts} answers (mean "
            f"{values['samples_mean']:.1f} of {d.samples}; stopped {stops}), mean pass rate {mean:.3f}, "
            f"histogram {hist}"
        )
        return PhaseResult(values, rollouts=rollouts)

    return s.run.phase(phase, fn)


def _estimate(p: D2Evo, phase: Phase, ctx: PhaseContext) -> list[PassRecord]:
    """The pool's pass records: ``difficulty.samples`` answers each (``fixed``), or in stages until
    each question's band membership is decided (``adaptive``, last round's counts as prior)."""
    s, solver, pool = p.s, p.solver, p.pool
    cfg, d = s.cfg, s.cfg.difficulty
    if d.estimator == "fixed":
        return estimate_difficulty(
            solver.sampler, s.world.prompter, pool, d.samples, s.params(ctx.seed), s.grader, cfg.sampling.batch_prompts
        )
    prev = _previous_difficulty(s, phase) if d.carry > 0 else {}
    return estimate_difficulty_adaptive(
        solver.sampler,
        s.world.prompter,
        pool,
        d.samples,
        s.params(ctx.seed),
        s.grader,
        d.band,
        d.sequential,
        cfg.sampling.batch_prompts,
        priors=[carry_prior(prev.get(t.id), d.sequential, d.carry) for t in pool],
    )


def phase_anchors(p: D2Evo, phase: Phase) -> PhaseRecord:
    """Step 1, anchor mining: anchors D_real^mid = the pool's questions in the band (or a random
    draw of the same size: ablation 'w/ random anchor data')."""
    s, t, d = p.s, phase.round, p.s.cfg.difficulty

    def fn(ctx: PhaseContext) -> PhaseResult:
        rng = random.Random(ctx.seed)
        recs = [PassRecord.from_dict(r) for r in s.run.read_jsonl(ctx.dir / "difficulty.jsonl")]
        band = mine_anchors(recs, d.band)
        anchors = band if d.selection == "band" else random_anchors(recs, len(band), rng)
        if d.max_anchors is not None and len(anchors) > d.max_anchors:
            anchors = rng.sample(anchors, d.max_anchors)
        s.run.write_jsonl(ctx.dir / "anchors.jsonl", [a.to_dict() for a in anchors])
        s.run.write_json(
            ctx.dir / "pool_histogram.json",
            {
                "pool": pass_rate_histogram([r.pass_rate for r in recs]),
                "band": d.band.model_dump(),
                "anchors": pass_rate_histogram([a.pass_rate for a in anchors]),
            },
        )
        prev = {a.task_id for a in _anchors(s, t - 1)} if t > 1 else set()
        ids = {a.task_id for a in anchors}
        values = {
            "anchors": len(anchors),
            "band": len(band),
            "entered": len(ids - prev),
            "left": len(prev - ids),
            "anchor_pass_rate_mean": round(sum(a.pass_rate for a in anchors) / max(1, len(anchors)), 4),
        }
        ctx.log({f"curriculum/{k}": v for k, v in values.items()})
        ctx.say(
            f"[anchors] round {t}: {len(anchors)} anchors ({d.selection}; band holds {len(band)}), "
            f"+{values['entered']} / -{values['left']} vs previous round"
        )
        if not anchors:
            ctx.say(
                "[anchors] warning: no anchors this round: the questioner is skipped and the buffer holds nothing real"
            )
        return PhaseResult(values)

    return s.run.phase(phase, fn)


def questioner_audit(step: int, tasks: list[Task], comps: list[list[Completion]], wb: WriterBatch) -> Observed:
    """One audit record per completion (its anchor, x, label, reward, whether it copies the
    anchor) and the batch figures; shared by both backends (verl rebuilds ``wb`` from its dumps)."""
    records = []
    for task, g, qs, xs, rs, bs in zip(tasks, comps, wb.questions, wb.x, wb.rewards, wb.in_band):
        for c, pq, x, r, b in zip(g, qs, xs, rs, bs):
            vote = wb.votes.get(pq) if pq is not None else None
            records.append(
                {
                    "anchor_id": task.id,
                    "anchor": task.question,
                    "anchor_difficulty": task.features["difficulty"],
                    "completion": c.text,
                    "question": pq,
                    "well_formed": pq is not None,
                    "x": x,
                    "label": None if vote is None else vote.label,
                    "reward": r,
                    "in_band": b,
                    "copy_of_anchor": pq is not None and normalize_question(pq) == normalize_question(task.question),
                }
            )
    copies = sum(r["copy_of_anchor"] for r in records) / max(1, len(records))
    return Observed({**wb.metrics(), "copies": copies}, records, wb.rollouts)


def phase_questioner(p: D2Evo, phase: Phase) -> PhaseRecord:
    """Step 2: questioner GRPO on anchor prompts (anchor question, answer, difficulty)."""
    s, solver, questioner, t = p.s, p.solver, p.questioner, phase.round
    assert questioner is not None  # scheduled only with questioner.enabled
    q, prompter = s.cfg.questioner, s.world.prompter

    def fn(ctx: PhaseContext) -> PhaseResult:
        anchors = [r.to_task() for r in _anchors(s, t)]
        if not anchors or q.steps == 0:
            s.run.write_jsonl(ctx.dir / "questioner_generated.jsonl", [])
            return PhaseResult(
                {"steps": 0, "skipped": "no anchors" if not anchors else "steps=0"},
                problem=None if anchors else "no anchors in the band: the questioner was not trained",
            )
        scorer = s.frozen(solver) if questioner is solver and q.frozen_scorer else solver.sampler
        rng = random.Random(ctx.seed)
        res = s.train(
            questioner,
            TrainRequest(
                q,
                "questioner",
                batches=lambda step: rng.choices(anchors, k=q.prompts_per_step),
                prompt=lambda a: prompter.questioner(a.question, a.answer or "", a.features["difficulty"]),
                params=s.params(ctx.seed, q, "question"),
                reward=RewardSpec("writer"),
                writer=s.writer_scoring(solver, scorer, q.reward, ctx.seed, "verify", questioner_audit),
            ),
            ctx,
        )
        s.run.write_jsonl(ctx.dir / "questioner_generated.jsonl", res.records)
        ok = [r for r in res.records if r["well_formed"]]
        values = {
            "reward_mean": round(res.reward_mean, 4),
            "well_formed": round(len(ok) / max(1, len(res.records)), 4),
            "in_band": round(sum(r["in_band"] for r in ok) / max(1, len(ok)), 4),
            "copies": round(sum(r["copy_of_anchor"] for r in res.records) / max(1, len(res.records)), 4),
            "steps": res.steps,
            "updates": res.updates,
            "rollouts_generate": res.rollouts,
            "rollouts_verify": res.reward_rollouts,
        }
        ctx.say(
            f"[questioner] round {t}: reward {values['reward_mean']:.3f}, well-formed {values['well_formed']}, "
            f"in band {values['in_band']}"
        )
        return PhaseResult(values, res.rollouts + res.reward_rollouts, s.save(questioner, f"r{t:02d}q"), res.problem)

    return s.run.phase(phase, fn)


def previous_solver(p: D2Evo, t: int) -> Any:
    """π_S^{t-1}, the frozen solver that measured round ``t``'s anchors and scored its questioner:
    the model that labels and filters the generated questions, so real and generated questions
    share one difficulty scale (D²Evo step 3). With a separate questioner (or none) the solver's
    weights have not moved since the difficulty phase; with shared weights the questioner's GRPO
    moved them, so π_S^{t-1} is read back from its folder by the engine (as a judge is): the base
    model in round 1, else the solver's checkpoint of round t-1 (``run.keep_checkpoints >= 2``
    keeps it beside the questioner's)."""
    s = p.s
    if p.questioner is not p.solver:
        return p.solver.sampler
    path = s.base if t == 1 else s.run.checkpoint_dir(p.solver.name, f"r{t - 1:02d}")
    if not Path(path).is_dir():
        raise RunStateError(
            f"{path}: the solver of round {t - 1} (π_S^(t-1)), which labels round {t}'s generated "
            "questions, is missing; run.keep_checkpoints must be >= 2"
        )
    return s.load(str(path))


def _verifier(p: D2Evo) -> LabelVerifier:
    s, b = p.s, p.s.cfg.buffer
    judge, prompter = p.judge()
    return make_verifier(
        b.verifier,
        oracle=s.world.oracle if s.world.knows_truth else None,
        grader=s.grader,
        judge=judge,
        prompter=prompter,
        max_new_tokens=b.judge_max_new_tokens,
    )


def phase_buffer(p: D2Evo, phase: Phase) -> PhaseRecord:
    """Step 3: the updated questioner writes questions from anchors; vote, band filter, optional
    verifier (``propose_questions``); D_hybrid = anchors ∪ kept generated questions."""
    s, questioner, t = p.s, p.questioner, phase.round
    cfg, b, prompter = s.cfg, s.cfg.buffer, s.world.prompter

    def fn(ctx: PhaseContext) -> PhaseResult:
        rng = random.Random(ctx.seed)
        anchor_recs = _anchors(s, t)
        anchors = [r.to_task() for r in anchor_recs]
        kept, stats, rollouts = [], {}, 0
        if questioner is not None and b.synthesis and b.generate > 0 and anchors:
            chosen = rng.choices(anchors, k=b.generate)
            verifier = _verifier(p)
            labeller = previous_solver(p, t)
            pool = propose_questions(
                questioner.sampler,
                [prompter.questioner(a.question, a.answer or "", a.features["difficulty"]) for a in chosen],
                [{"anchor_id": a.id, "anchor": a.question} for a in chosen],
                prompter=prompter,
                solver=labeller,
                voting=b.voting,
                grader=s.grader,
                write_params=s.params(derive_seed(ctx.seed, "generate"), cfg.questioner, "question"),
                vote_params=s.params(derive_seed(ctx.seed, "label")),
                batch_prompts=cfg.sampling.batch_prompts,
                id_prefix=f"gen-r{t:02d}-",
                banned=frozenset(normalize_question(a.question) for a in anchors),
                excluded=s.world.excluded(),
                oracle=s.world.oracle if s.world.knows_truth else None,
                verifier=verifier,
            )
            s.run.write_jsonl(ctx.dir / "candidates.jsonl", [c.to_dict() for c in pool.candidates])
            s.run.write_jsonl(ctx.dir / "pool.jsonl", pool.rows())
            kept, stats = pool.kept, pool.stats()
            rollouts = pool.rollouts + verifier.rollouts
            ctx.compute.labelled(verifier.labels)  # a perfect checker reads a gold answer per label
        buffer = build_hybrid_buffer(anchor_recs, kept, round_idx=t)
        s.run.write_jsonl(ctx.dir / "buffer.jsonl", [x.to_dict() for x in buffer])
        values = {
            **{k: v for k, v in stats.items() if k != "rollouts"},
            "buffer_real": sum(x.features["origin"] == "real" for x in buffer),
            "buffer_generated": sum(x.features["origin"] == "generated" for x in buffer),
        }
        ctx.log({f"curriculum/buffer/{k}": v for k, v in values.items() if v is not None})
        ctx.say(
            f"[buffer] round {t}: {values['buffer_real']} real + {values['buffer_generated']} generated "
            f"(generated {stats.get('generated', 0)}, labelled {stats.get('labelled', 0)}, "
            f"pseudo-label acc {stats.get('oracle_acc_kept')})"
        )
        return PhaseResult(values, rollouts)

    return s.run.phase(phase, fn)


def phase_solver(p: D2Evo, phase: Phase) -> PhaseRecord:
    """Step 4: solver GRPO on the hybrid buffer, α·acc + (1-α)·format (label = real answer for
    anchors, pseudo-label for generated questions)."""
    s, solver, t = p.s, p.solver, phase.round
    sp = s.cfg.solver

    def fn(ctx: PhaseContext) -> PhaseResult:
        rng = random.Random(ctx.seed)
        buffer = [Task.from_dict(d) for d in s.run.read_jsonl(ctx.dir / "buffer.jsonl")]
        if not buffer or sp.steps == 0:
            ctx.say(f"[solver] round {t}: nothing to train on (buffer {len(buffer)}, steps {sp.steps})")
            return PhaseResult(
                {"steps": 0, "reward_mean": None, "buffer": len(buffer)},
                problem="the hybrid buffer is empty: the solver was not trained" if not buffer else None,
            )
        k = sp.prompts_per_step
        res = s.train(
            solver,
            TrainRequest(
                sp,
                "solver",
                batches=lambda step: rng.sample(buffer, k) if len(buffer) >= k else rng.choices(buffer, k=k),
                prompt=lambda x: s.world.prompter.solver(x.question),
                params=s.params(ctx.seed, sp),
                reward=RewardSpec("solver", sp.alpha),
            ),
            ctx,
        )
        ctx.say(
            f"[solver] round {t}: mean reward {res.reward_mean:.3f} over {res.steps} steps on {len(buffer)} questions"
        )
        return PhaseResult(
            {
                "reward_mean": round(res.reward_mean, 4),
                "steps": res.steps,
                "updates": res.updates,
                "zero_variance": res.zero_variance,
                "buffer": len(buffer),
            },
            res.rollouts,
            s.save(solver, f"r{t:02d}"),
            res.problem,
        )

    return s.run.phase(phase, fn)


# -------------------------------------------------------------------------------------- work
def difficulty_work(cfg: D2EvoConfig, toy: bool) -> Work:
    d, s = cfg.difficulty, cfg.sampling
    pool = d.pool_size or cfg.data.limit or POOL_ROWS_IF_UNKNOWN
    return Work(
        (
            Rollouts(
                "solver",
                f"{d.samples} answers x {pool} pool questions",
                pool * d.samples,
                s.batch_prompts,
                d.samples,
                "answer",
                s.max_new_tokens,
            ),
        )
    )


def _writer_role(cfg: D2EvoConfig) -> str:
    return "solver" if cfg.questioner.share_weights else "questioner"


def questioner_work(cfg: D2EvoConfig, toy: bool) -> Work:
    q = cfg.questioner
    scorer = FROZEN_SOLVER if q.share_weights and q.frozen_scorer else "solver"
    return train_work(
        _writer_role(cfg),
        "questioner",
        q,
        cfg.sampling,
        "question",
        "questions",
        scored_by(scorer, q, cfg.sampling, q.reward.samples),
    )


def buffer_work(cfg: D2EvoConfig, toy: bool) -> Work:
    q, b, s = cfg.questioner, cfg.buffer, cfg.sampling
    if not (q.enabled and b.synthesis and b.generate > 0):
        return Work()
    labeller = FROZEN_SOLVER if q.share_weights else "solver"  # π_S^{t-1} (previous_solver)
    return Work(
        (
            Rollouts(_writer_role(cfg), "questions", b.generate, s.batch_prompts, 1, "question", phase_cap(q, s)),
            Rollouts(
                labeller,
                f"{b.voting.samples} votes per question by π_S^(t-1)",
                b.generate * b.voting.samples,
                s.batch_prompts,
                b.voting.samples,
                "answer",
                s.max_new_tokens,
            ),
        )
    )


def solver_work(cfg: D2EvoConfig, toy: bool) -> Work:
    return train_work("solver", "solver", cfg.solver, cfg.sampling, "answer", "answers")


RECIPE = Recipe(
    "d2evo",
    roles=roles,
    build=build,
    needs_labels=True,
    steps=(
        BASE_EVAL,
        BASE_PROBE,
        Step("difficulty", phase_difficulty, work=difficulty_work),
        Step("anchors", phase_anchors),
        Step(
            "questioner",
            phase_questioner,
            when=lambda cfg, ph: cfg.questioner.enabled,
            uses=("questioner",),
            work=questioner_work,
        ),
        Step("buffer", phase_buffer, uses=("questioner",), work=buffer_work),
        Step("solver", phase_solver, work=solver_work),
        ROUND_PROBE,
        ROUND_EVAL,
        Step(
            "difficulty",
            phase_difficulty,
            stage="final",
            when=lambda cfg, ph: cfg.difficulty.measure_final,
            work=difficulty_work,
        ),
    ),
)
