"""What a recipe's phases generate and train: ``PhaseWork`` per phase (rollouts by role, in
sampler calls of how many rows; GRPO updates and their rows), the input of the cost model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROMPT_TOKENS = {"toy": {"answer": 32, "question": 64}, "real": {"answer": 384, "question": 512}}
"""Assumed prompt lengths: toy prompts are ~30-60 characters (char tokenizer); a real math
question with instructions and chat template ~150-400 tokens, a writer prompt (anchor question,
answer, difficulty or memory causes) up to ~500. Assumed, conservative."""

DIAGEVO_KEPT_FRACTION = 0.3
"""Assumed share of DiagEvo's candidate pool that passes the dual filter (drives the diagnoses)."""

POOL_ROWS_IF_UNKNOWN = 12000
"""``difficulty.pool_size=None`` means every dataset row: assumed math_train12k's size."""

BENCH_ITEMS = {
    "gsm8k": 1319, "math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva": 272, "olympiadbench": 675,
    "mmlu_pro": 12032, "supergpqa": 300, "gpqa_diamond": 198, "bbeh": 4520, "bbeh_mini": 460,
}
"""Items per evaluation benchmark (the public test sets; supergpqa: the offline 300 sample)."""



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


@dataclass(frozen=True)
class PhaseWork:
    name: str
    times: int  # how often the phase runs (rounds)
    gens: tuple[Gen, ...] = ()
    train: Train | None = None
    note: str = ""

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


def _cap(phase: Any, sampling: Any) -> int:
    return int(getattr(phase, "max_new_tokens", None) or sampling.max_new_tokens)


def _eval_work(cfg: Any, toy: bool, prompt: int, times: int) -> PhaseWork:
    from coevolve.eval.benchmarks import resolve_benches

    e = cfg.eval
    benches = resolve_benches(e.benches or (["toy"] if toy else ["math7"]))
    rows = 0
    for b in benches:
        n = e.heldout_size if b.kind == "toy" else BENCH_ITEMS.get(b.name, 500)
        if e.limit is not None:
            n = min(n, e.limit)
        k = b.default_samples if e.samples == -1 else max(0, e.samples)
        rows += n * (1 + k)
    call = min(cfg.engine.max_batch, max(1, rows))
    return PhaseWork("eval", times, (Gen("solver", "benchmark answers", rows, call, prompt, e.max_new_tokens,
                                         full_call=max(1, rows)),),
                     note=", ".join(b.name for b in benches))


def phases(cfg: Any, toy: bool) -> list[PhaseWork]:
    """The recipe's phases with their rollouts (caps: every completion at its token cap)."""
    pt = PROMPT_TOKENS["toy" if toy else "real"]
    ans, qst = pt["answer"], pt["question"]
    s, mb = cfg.sampling, cfg.engine.max_batch

    def call(prompts: int, n: int) -> int:
        return max(1, min(mb, prompts * n))

    def gen(role: str, what: str, rows: int, prompts: int, n: int, prompt: int, max_new: int) -> Gen:
        """``rows`` rollouts in sampler calls of ``prompts`` x ``n`` (generated in chunks of ``engine.max_batch``)."""
        return Gen(role, what, rows, call(prompts, n), prompt, max_new, full_call=prompts * n)

    rounds = int(getattr(cfg, "rounds", 1))
    n_evals = 1 + (rounds if cfg.eval.every_round else 1) if cfg.recipe != "grpo" else 2
    out: list[PhaseWork] = []
    if cfg.recipe == "grpo":
        sp = cfg.solver
        rows = sp.prompts_per_step * sp.group_size
        out.append(PhaseWork("solver", 1, (gen("solver", "answers", sp.steps * rows,
                                               sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                             Train("solver", sp.steps, rows, ans, _cap(sp, s))))
    elif cfg.recipe == "d2evo":
        d, q, b, sp = cfg.difficulty, cfg.questioner, cfg.buffer, cfg.solver
        pool = d.pool_size or cfg.data.limit or POOL_ROWS_IF_UNKNOWN
        qrole = "solver" if q.share_weights else "questioner"
        out.append(PhaseWork("difficulty", rounds + int(d.measure_final),
                             (gen("solver", f"{d.samples} answers x {pool} pool questions", pool * d.samples,
                                  s.batch_prompts, d.samples, ans, s.max_new_tokens),)))
        if q.enabled and q.steps > 0:
            rows = q.prompts_per_step * q.group_size
            scorer = "frozen solver copy" if q.share_weights and q.frozen_scorer else "solver"
            out.append(PhaseWork("questioner", rounds, (
                gen(qrole, "questions", q.steps * rows, q.prompts_per_step, q.group_size, qst, _cap(q, s)),
                gen(scorer, f"{q.reward.solver_samples} answers per question", q.steps * rows * q.reward.solver_samples,
                    s.batch_prompts, q.reward.solver_samples, ans, s.max_new_tokens)),
                Train(qrole, q.steps, rows, qst, _cap(q, s))))
        if q.enabled and b.synthesis and b.generate > 0:
            out.append(PhaseWork("buffer", rounds, (
                gen(qrole, "questions", b.generate, s.batch_prompts, 1, qst, _cap(q, s)),
                gen("solver", f"{b.voting.samples} votes per question", b.generate * b.voting.samples,
                    s.batch_prompts, b.voting.samples, ans, s.max_new_tokens))))
        if sp.steps > 0:
            rows = sp.prompts_per_step * sp.group_size
            out.append(PhaseWork("solver", rounds, (gen("solver", "answers", sp.steps * rows,
                                                        sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                                 Train("solver", sp.steps, rows, ans, _cap(sp, s))))
    elif cfg.recipe == "diagevo":
        ch, pc, sp, dg, mem = cfg.challenger, cfg.pool, cfg.solver, cfg.diagnoser, cfg.memory
        if not ch.frozen and ch.steps > 0:
            rows = ch.prompts_per_step * ch.group_size
            out.append(PhaseWork("challenger", rounds, (
                gen("challenger", "questions", ch.steps * rows, ch.prompts_per_step, ch.group_size, qst, _cap(ch, s)),
                gen("solver", f"{ch.reward.solver_samples} answers per question", ch.steps * rows * ch.reward.solver_samples,
                    s.batch_prompts, ch.reward.solver_samples, ans, s.max_new_tokens)),
                Train("challenger", ch.steps, rows, qst, _cap(ch, s))))
        out.append(PhaseWork("pool", rounds, (
            gen("challenger", "candidate questions", pc.size, s.batch_prompts, 1, qst, _cap(ch, s)),
            gen("solver", f"{pc.voting.samples} construction answers", pc.size * pc.voting.samples,
                s.batch_prompts, pc.voting.samples, ans, s.max_new_tokens))))
        if sp.steps > 0:
            rows = sp.prompts_per_step * sp.group_size
            out.append(PhaseWork("solver", rounds, (gen("solver", "answers", sp.steps * rows,
                                                        sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                                 Train("solver", sp.steps, rows, ans, _cap(sp, s))))
        if mem.enabled:
            kept = max(1, int(pc.size * DIAGEVO_KEPT_FRACTION))
            llm = dg.kind == "llm" or (dg.kind == "auto" and not toy)
            gens = [gen("solver", "diagnoses", kept, s.batch_prompts, 1, 2 * ans, dg.max_new_tokens)] if llm else []
            if str(getattr(mem, "promotion_p1", "")) == "updated":
                gens.append(gen("solver", "promotion re-measure", kept * pc.voting.samples,
                                s.batch_prompts, pc.voting.samples, ans, s.max_new_tokens))
            out.append(PhaseWork("memory", rounds, tuple(gens),
                                 note=f"~{kept} kept questions assumed ({DIAGEVO_KEPT_FRACTION:.0%} of the pool)"))
    else:
        sp = getattr(cfg, "solver", None)
        if sp is not None:
            rows = sp.prompts_per_step * sp.group_size
            out.append(PhaseWork("solver", rounds, (gen("solver", "answers", sp.steps * rows,
                                                        sp.prompts_per_step, sp.group_size, ans, _cap(sp, s)),),
                                 Train("solver", sp.steps, rows, ans, _cap(sp, s))))
    out.append(_eval_work(cfg, toy, ans, n_evals))
    return out


def trainable_roles(cfg: Any) -> list[str]:
    """Roles with their own model and learner, in the order the recipe builds them."""
    if cfg.recipe == "d2evo" and cfg.questioner.enabled and not cfg.questioner.share_weights:
        return ["solver", "questioner"]
    if cfg.recipe == "diagevo":
        return ["solver", "challenger"]
    return ["solver"]

