"""The evaluation step every recipe shares: held-out accuracy of the solver (``phase_eval``), when
it runs after a round (``eval_due``) and the answers it costs (``eval_work``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.config.sections import RecipeConfig
from coevolve.eval.benchmarks import resolve_benches
from coevolve.eval.suite import evaluate_suite
from coevolve.recipes.declare import Rollouts, Step, Work
from coevolve.recipes.eval_cache import base_eval_cache, load_cached_eval, save_cached_eval
from coevolve.recipes.setup import Setup
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult, derive_seed
from coevolve.types import Sampler
from coevolve.world import world_of_config


def phase_eval(p: Any, phase: Phase) -> PhaseRecord:
    """Held-out accuracy of the solver (every recipe's evaluation, base and after rounds): the
    configured benchmarks, or the world's, through the one evaluation driver; per-item records
    and ``results.json`` in ``<phase folder>/eval/``. The same eval seed every time, so sampled
    accuracy compares identical draws. ``p``: a recipe's parts (its ``s`` and ``solver``)."""
    s, solver = p.s, p.solver

    def fn(ctx: PhaseContext) -> PhaseResult:
        res = _evaluate(s, solver.sampler, phase, ctx)
        scores = {b: {k: r[k] for k in SCORE_KEYS if k in r} for b, r in res["benchmarks"].items()}
        ctx.log(
            {
                f"eval/{b}/{k}": v
                for b, r in scores.items()
                for k, v in r.items()
                if k in ("greedy", "sampled") and v is not None
            }
        )
        ctx.say(f"[eval] {ctx.phase.key}: " + "; ".join(_score_line(b, r) for b, r in scores.items()))
        return PhaseResult({"eval": scores}, rollouts=res["rollouts"])

    return s.run.phase(phase, fn)


SCORE_KEYS = ("greedy", "sampled", "n", "score", "metric", "by_group", "score_std", "repeats")
"""The figures of a benchmark's result that the phase record keeps (``results.json`` has all)."""


def _evaluate(s: Setup, sampler: Sampler, phase: Phase, ctx: PhaseContext) -> dict[str, Any]:
    """The evaluation's results: from the base-evaluation cache when it holds them, else run
    (and, for a built-in base, cached)."""
    e = s.cfg.eval
    cache = base_eval_cache(s, phase)
    res = load_cached_eval(cache, ctx.dir / "eval", ctx.compute, s.grader) if cache is not None else None
    if res is not None:
        ctx.say(f"[eval] {ctx.phase.key}: the built-in base's evaluation with these settings, from {cache}")
        return res
    counts0 = s.run.grader_counts()
    res = evaluate_suite(
        sampler,
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
        graded = {k: v - counts0.get(k, 0) for k, v in s.run.grader_counts().items()}
        save_cached_eval(ctx.dir / "eval", cache, ctx.compute.total, graded)
    return res


def _score_line(bench: str, r: dict[str, Any]) -> str:
    """``toy: greedy 0.625, sampled 0.594`` (and the mean ± std of repeated evaluation runs)."""
    line = f"{bench}: greedy {r['greedy']:.3f}" + (f", sampled {r['sampled']:.3f}" if r["sampled"] is not None else "")
    if "score_std" in r:
        line += f" (score {r['score']:.3f} ± {r['score_std']:.3f} over {r['repeats']} runs)"
    return line


def eval_due(cfg: RecipeConfig, phase: Phase) -> bool:
    """Evaluate after round ``phase.round``? Every round, or only the last with
    ``eval.every_round=false``."""
    return cfg.eval.every_round or phase.round == int(getattr(cfg, "rounds", 1))


def eval_work(cfg: RecipeConfig, toy: bool) -> Work:
    """An evaluation's answers: per benchmark (``eval.benches``, or the default of the config's
    world, the one the run evaluates) its items (``eval.heldout_size`` for a generated world's
    held-out set, toy or arith, which the world draws at that size; ``Benchmark.items`` otherwise; at most ``eval.limit``) x (1 greedy +
    ``eval.samples`` x ``eval.repeats``: each evaluation run draws its own samples, the greedy
    pass runs once), in one sampler call."""
    e = cfg.eval
    benches = resolve_benches(e.benches or world_of_config(cfg).default_benches)
    rows = 0
    for b in benches:
        held_out = b.kind == "toy" or (b.generator or "").endswith(":heldout_tasks")
        n = e.heldout_size if held_out else b.items
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
