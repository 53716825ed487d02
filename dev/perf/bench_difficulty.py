"""Adaptive vs fixed difficulty estimation (D²Evo step 1): rollouts, band-membership accuracy
against a high-N reference, and anchor overlap.

Estimators: ``fixed`` (N = 32 answers per question, the paper), ``adaptive`` (stages 4 -> 8 ->
16 -> 32, a question stops once its band membership is decided at 95 %; uniform Beta prior) and
``adaptive+carry`` (the same, with the previous measurement's counts at weight γ as the prior).
Each is compared with a reference: the band membership of the true pass rate (synthetic pools)
and of ``--ref-n`` answers (N = 256 by default; both pools).

Pools:

* ``synthetic``: 385 questions, pass rates drawn per question from ``Beta(k + ½, 32 - k + ½)``
  where k is the question's count in a saved d2evo run's ``difficulty.jsonl`` (rounds 1-3 and
  the final measurement: the toy histograms), and a U-shaped real-data-like pool (40 % at p = 0,
  30 % at p = 1, 30 % from Beta(½, ½)); answers are Bernoulli draws, ``--reps`` repetitions.
  Carry prior: the saved run's previous-round counts (toy), an independent N = 32 draw of the
  same p (U-shaped: a solver that did not change, the favourable case).
  A second fixed-32 draw (another seed) shows how much two fixed estimates agree by chance.
* ``toy``: the run's real pool under the real solvers: the base model and the checkpoints
  ``checkpoints/solver_r01..`` of ``--run-dir`` (a run with ``run.keep_checkpoints`` large
  enough keeps every round's); carry prior = the run's own previous measurement.

Usage::

    PYTHONPATH=src python dev/perf/bench_difficulty.py --run-dir RUN [--hist-run RUN] \
        [--ref-n 256] [--reps 10] [--solvers base,r01,r02,r03] [--skip-toy] [--carry 0.5]
    PYTHONPATH=src python dev/perf/bench_difficulty.py --compare RUN_FIXED RUN_ADAPTIVE
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.answers import extract_answer
from coevolve.curriculum import PassRecord, carry_prior, estimate_difficulty, estimate_difficulty_adaptive, mine_anchors
from coevolve.schema import Band, Sequential
from coevolve.types import Completion, SamplingParams, Task

BAND = Band(low=0.4, high=0.8)


class BernoulliSampler:
    """Answers prompt ``Q:<i>`` correctly ("1") with probability ``rates[i]``; each (call seed,
    prompt) pair has its own stream, so the draws are reproducible and independent across stages."""

    def __init__(self, rates: Sequence[float]):
        self.rates = list(rates)

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        out = []
        for p in prompts:
            i = int(p[2:])
            rng = random.Random(f"{params.seed}/{i}")
            out.append(
                [
                    Completion(
                        text="\\boxed{1}" if rng.random() < self.rates[i] else "\\boxed{0}", token_ids=[], prompt_ids=[]
                    )
                    for _ in range(n)
                ]
            )
        return out


class IndexPrompter:
    def solver(self, question: str) -> str:
        return f"Q:{question}"


class StringGrader:
    def grade_batch(self, golds: Sequence[str], completions: Sequence[str]) -> list[bool]:
        return [g == extract_answer(c) for g, c in zip(golds, completions)]


@dataclass
class Tally:
    """Sums over repetitions for one estimator on one pool."""

    rollouts: int = 0
    questions: int = 0
    agree_truth: int = 0
    agree_ref: int = 0
    jaccard_fixed: float = 0.0
    jaccard_ref: float = 0.0
    anchors: int = 0
    reps: int = 0

    def add(self, recs: list[PassRecord], truth: list[bool] | None, ref: list[bool], fixed_ids: set[str]) -> None:
        inside = [BAND.contains(r.pass_rate) for r in recs]
        ids = {r.task_id for r in mine_anchors(recs, BAND)}
        ref_ids = {r.task_id for r, b in zip(recs, ref) if b}
        self.rollouts += sum(r.n for r in recs)
        self.questions += len(recs)
        self.agree_truth += sum(a == b for a, b in zip(inside, truth)) if truth is not None else 0
        self.agree_ref += sum(a == b for a, b in zip(inside, ref))
        self.jaccard_fixed += jaccard(ids, fixed_ids)
        self.jaccard_ref += jaccard(ids, ref_ids)
        self.anchors += len(ids)
        self.reps += 1

    def row(self, name: str, fixed_rollouts: int, has_truth: bool) -> str:
        acc_t = f"{self.agree_truth / self.questions:.4f}" if has_truth else "  -   "
        return (
            f"  {name:<18} {self.rollouts / self.reps:>9.0f} {fixed_rollouts / max(1, self.rollouts):>6.2f}x "
            f"{self.rollouts / self.questions:>6.1f}  {acc_t}  {self.agree_ref / self.questions:.4f}  "
            f"{self.anchors / self.reps:>7.1f}  {self.jaccard_fixed / self.reps:.3f}  {self.jaccard_ref / self.reps:.3f}"
        )


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


HEADER = "  estimator           rollouts  saving  ans/q   acc(p)  acc(ref)  anchors  J(fixed) J(ref)"


def counts_of(path: Path) -> dict[str, tuple[int, int]]:
    return {d["task_id"]: (int(d["correct"]), int(d["n"])) for d in map(json.loads, path.read_text().splitlines())}


def measurements(run: Path) -> list[tuple[str, Path]]:
    """(label, difficulty.jsonl) of a d2evo run in order: round_01.., final."""
    out = [(p.parent.name, p) for p in sorted(run.glob("round_*/difficulty.jsonl"))]
    final = run / "final" / "difficulty.jsonl"
    return out + ([("final", final)] if final.exists() else [])


def estimators(seq: Sequential, carry: float) -> list[str]:
    return ["fixed", "adaptive"] + ([f"adaptive+carry{carry:g}"] if carry > 0 else [])


def run_pool(name: str, rates_of_rep: Any, prev_of_rep: Any, args: argparse.Namespace, seq: Sequential) -> None:
    """Synthetic pool: ``rates_of_rep(rep)`` -> pass rates; ``prev_of_rep(rep)`` -> carry counts or None."""
    # a second fixed-32 draw: how far two fixed estimates' anchor sets agree by chance alone
    tallies = {e: Tally() for e in ["fixed", "fixed, 2nd seed", *estimators(seq, args.carry)[1:]]}
    grader, prompter = StringGrader(), IndexPrompter()
    for rep in range(args.reps):
        rates = rates_of_rep(rep)
        tasks = [Task(str(i), str(i), "1") for i in range(len(rates))]
        sampler = BernoulliSampler(rates)
        truth = [BAND.contains(p) for p in rates]
        base = SamplingParams(seed=1_000 * rep)
        ref = estimate_difficulty(sampler, prompter, tasks, args.ref_n, SamplingParams(seed=base.seed + 3), grader, 512)
        ref_in = [BAND.contains(r.pass_rate) for r in ref]
        fixed = estimate_difficulty(sampler, prompter, tasks, 32, SamplingParams(seed=base.seed + 1), grader, 512)
        fixed_ids = {r.task_id for r in mine_anchors(fixed, BAND)}
        tallies["fixed"].add(fixed, truth, ref_in, fixed_ids)
        again = estimate_difficulty(sampler, prompter, tasks, 32, SamplingParams(seed=base.seed + 4), grader, 512)
        tallies["fixed, 2nd seed"].add(again, truth, ref_in, fixed_ids)
        adaptive = estimate_difficulty_adaptive(
            sampler, prompter, tasks, 32, SamplingParams(seed=base.seed + 2), grader, BAND, seq, 512
        )
        tallies["adaptive"].add(adaptive, truth, ref_in, fixed_ids)
        if args.carry > 0:
            prev = prev_of_rep(rep)
            priors = [
                carry_prior(None if prev is None else PassRecord.from_counts(t, *prev[i]), seq, args.carry)
                for i, t in enumerate(tasks)
            ]
            carried = estimate_difficulty_adaptive(
                sampler, prompter, tasks, 32, SamplingParams(seed=base.seed + 2), grader, BAND, seq, 512, priors=priors
            )
            tallies[f"adaptive+carry{args.carry:g}"].add(carried, truth, ref_in, fixed_ids)
    print(f"\n[synthetic] {name}: {len(rates)} questions x {args.reps} reps, reference N = {args.ref_n}")
    print(HEADER)
    fixed_rollouts = tallies["fixed"].rollouts
    for e, t in tallies.items():
        print(t.row(e, fixed_rollouts, True))


def synthetic(args: argparse.Namespace, seq: Sequential) -> None:
    meas = measurements(Path(args.hist_run))
    for j, (label, path) in enumerate(meas):
        counts = counts_of(path)
        ids = sorted(counts)
        prev = counts_of(meas[j - 1][1]) if j > 0 else None

        def rates_of_rep(rep: int, counts: dict = counts, ids: list = ids, label: str = label) -> list[float]:
            rng = random.Random(f"toy/{label}/{rep}")
            return [rng.betavariate(counts[i][0] + 0.5, counts[i][1] - counts[i][0] + 0.5) for i in ids]

        def prev_of_rep(rep: int, prev: Any = prev, ids: list = ids) -> Any:
            return None if prev is None else [prev[i] for i in ids]

        run_pool(f"toy histogram {label}", rates_of_rep, prev_of_rep, args, seq)

    def u_rates(rep: int) -> list[float]:
        rng = random.Random(f"u/{rep}")
        out = []
        for _ in range(385):
            u = rng.random()
            out.append(0.0 if u < 0.4 else 1.0 if u < 0.7 else rng.betavariate(0.5, 0.5))
        return out

    def u_prev(rep: int) -> list[tuple[int, int]]:
        rng = random.Random(f"u-prev/{rep}")
        return [(sum(rng.random() < p for _ in range(32)), 32) for p in u_rates(rep)]

    run_pool("U-shaped (40% p=0, 30% p=1, 30% Beta(.5,.5))", u_rates, u_prev, args, seq)


def toy(args: argparse.Namespace, seq: Sequential) -> None:
    """The run's pool under the base model and each kept solver checkpoint."""
    import torch

    from coevolve.answers import make_grader
    from coevolve.config import load_config
    from coevolve.engine import load_sampler
    from coevolve.loop import sampling_params
    from coevolve.world.toy import ToyPrompter, ensure_base

    torch.set_num_threads(args.threads)
    run = Path(args.run_dir)
    cfg = load_config("d2evo", run / "config.yaml")
    meas = dict(measurements(run))
    pool = [
        PassRecord.from_dict(d)
        for d in map(json.loads, (run / "round_01" / "difficulty.jsonl").read_text().splitlines())
    ]
    tasks = [Task(r.task_id, r.question, r.answer, features=r.features) for r in pool]
    prompter = ToyPrompter()
    # solver base was measured in round 1, solver r0t in round t+1 (or final): its carry prior is round t's counts
    plan = {"base": (str(ensure_base(steps=cfg.model.toy_steps, seed=cfg.model.toy_seed)), None)}
    for t in range(1, cfg.rounds + 1):
        plan[f"r{t:02d}"] = (str(run / "checkpoints" / f"solver_r{t:02d}"), meas.get(f"round_{t:02d}"))
    with make_grader(cfg.run.grader_timeout, cfg.run.grader_workers) as grader:
        for name in args.solvers.split(","):
            folder, prev_path = plan[name]
            if not Path(folder).exists():
                print(f"\n[toy] solver {name}: {folder} not kept, skipped")
                continue
            sampler = load_sampler(cfg.engine, folder, "cpu", "float32")

            def params(seed: int) -> SamplingParams:
                return sampling_params(cfg.sampling, seed, None, prompter.stop("answer"))

            t0 = time.perf_counter()
            ref = estimate_difficulty(
                sampler, prompter, tasks, args.ref_n, params(7_000), grader, cfg.sampling.batch_prompts
            )
            t_ref = time.perf_counter() - t0
            ref_in = [BAND.contains(r.pass_rate) for r in ref]
            names = ["fixed", *(["fixed, 2nd seed"] if args.toy_reps > 1 else []), *estimators(seq, args.carry)[1:]]
            tallies = {e: Tally() for e in names}
            t_fixed = t_adaptive = 0.0
            for rep in range(args.toy_reps):  # rep 0: seeds 7001 / 7002; rep r: + 10 r
                t0 = time.perf_counter()
                fixed = estimate_difficulty(
                    sampler, prompter, tasks, 32, params(7_001 + 10 * rep), grader, cfg.sampling.batch_prompts
                )
                t_fixed += time.perf_counter() - t0
                fixed_ids = {r.task_id for r in mine_anchors(fixed, BAND)}
                tallies["fixed"].add(fixed, None, ref_in, fixed_ids)
                if args.toy_reps > 1:
                    again = estimate_difficulty(
                        sampler, prompter, tasks, 32, params(7_004 + 10 * rep), grader, cfg.sampling.batch_prompts
                    )
                    tallies["fixed, 2nd seed"].add(again, None, ref_in, fixed_ids)
                t0 = time.perf_counter()
                adaptive = estimate_difficulty_adaptive(
                    sampler,
                    prompter,
                    tasks,
                    32,
                    params(7_002 + 10 * rep),
                    grader,
                    BAND,
                    seq,
                    cfg.sampling.batch_prompts,
                )
                t_adaptive += time.perf_counter() - t0
                tallies["adaptive"].add(adaptive, None, ref_in, fixed_ids)
                if args.carry > 0:
                    carried = adaptive  # no previous measurement (the base solver): the plain prior, same draw
                    if prev_path is not None:
                        prev = counts_of(prev_path)
                        priors = [
                            carry_prior(
                                PassRecord.from_counts(t, *prev[t.id]) if t.id in prev else None, seq, args.carry
                            )
                            for t in tasks
                        ]
                        carried = estimate_difficulty_adaptive(
                            sampler,
                            prompter,
                            tasks,
                            32,
                            params(7_002 + 10 * rep),
                            grader,
                            BAND,
                            seq,
                            cfg.sampling.batch_prompts,
                            priors=priors,
                        )
                    tallies[f"adaptive+carry{args.carry:g}"].add(carried, None, ref_in, fixed_ids)
            print(
                f"\n[toy] solver {name} ({folder}): {len(tasks)} questions x {args.toy_reps} draws, reference "
                f"N = {args.ref_n} ({sum(ref_in)} in band); seconds: reference {t_ref:.0f}, fixed {t_fixed:.1f}, "
                f"adaptive {t_adaptive:.1f}"
            )
            print(HEADER)
            for e, t in tallies.items():
                print(t.row(e, tallies["fixed"].rollouts, False))
            del sampler


def rule_table(seq: Sequential) -> None:
    """The exact law of the stopping rule per true pass rate (``staged_outcome``, no sampling)."""
    from coevolve.curriculum.sequential import fixed_error, staged_outcome

    sched = seq.schedule(32)
    print(f"\n[rule] exact, per true pass rate p (schedule {sched}, confidence {seq.confidence})")
    print("     p   E[answers]  P(early wrong)  P(wrong) adaptive  P(wrong) fixed-32")
    for p in [0.0, 0.05, 0.1, 0.2, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0]:
        o = staged_outcome(p, sched, BAND, seq.confidence, (seq.prior_a, seq.prior_b))
        print(
            f"  {p:4.2f}  {o.expected_samples:10.1f}  {o.early_error:14.4f}  {o.error:17.4f}  {fixed_error(p, 32, BAND):17.4f}"
        )
    grid = [i / 200 for i in range(201)]
    worst = max(
        grid, key=lambda p: staged_outcome(p, sched, BAND, seq.confidence, (seq.prior_a, seq.prior_b)).early_error
    )
    gap = max(
        staged_outcome(p, sched, BAND, seq.confidence, (seq.prior_a, seq.prior_b)).error - fixed_error(p, 32, BAND)
        for p in grid
    )
    print(
        f"  max P(early wrong) over p = {staged_outcome(worst, sched, BAND, seq.confidence, (seq.prior_a, seq.prior_b)).early_error:.4f} "
        f"at p = {worst}; max (P(wrong) adaptive - P(wrong) fixed-32) over p = {gap:.4f}"
    )


def compare_runs(paths: Sequence[str]) -> None:
    """Held-out accuracy per round and rollouts (difficulty separately) of finished d2evo runs
    (``summary.json``), e.g. one with each estimator, same seed."""
    print(
        "\n[runs] held-out greedy / sampled accuracy per round; rollouts of rounds 1..T (held-out evals and the "
        "final re-measure not counted), difficulty rollouts separately"
    )
    for path in paths:
        s = json.loads((Path(path) / "summary.json").read_text())
        evals = {
            "base": s["eval"]["base"],
            **{f"r{k}": v for k, v in sorted(s["eval"]["rounds"].items(), key=lambda x: int(x[0]))},
        }
        acc = " | ".join(f"{k}: {v['toy']['greedy']:.3f} / {v['toy']['sampled']:.4f}" for k, v in evals.items())
        phases = [k for k in s["rounds"][0] if k.endswith("/rollouts") and not k.startswith("eval/")]
        total = sum(r.get(k, 0) or 0 for r in s["rounds"] for k in phases)
        diff = [r["difficulty/rollouts"] for r in s["rounds"]]
        final = s.get("final", {}).get("difficulty/rollouts")
        secs = [r["phase/difficulty/seconds"] for r in s["rounds"]]
        print(
            f"  {path}\n    accuracy  {acc}\n    rollouts  rounds total {total}, difficulty {sum(diff)} "
            f"({' + '.join(map(str, diff))}; {sum(diff) / max(1, total):.1%} of the rounds), final re-measure "
            f"{final}, run total {s['rollouts']}; difficulty seconds {' + '.join(f'{x:.0f}' for x in secs)}, "
            f"wall {s['wall_seconds']:.0f} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", help="a d2evo run folder (toy pool, checkpoints, difficulty.jsonl per round)")
    ap.add_argument(
        "--hist-run", help="run whose difficulty.jsonl files give the synthetic toy histograms (default: --run-dir)"
    )
    ap.add_argument("--ref-n", type=int, default=256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--solvers", default="base,r01,r02,r03")
    ap.add_argument(
        "--toy-reps",
        type=int,
        default=1,
        help="draws of each estimator per toy solver against one "
        "reference (> 1 adds a second fixed-32 draw per repetition)",
    )
    ap.add_argument("--skip-toy", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--stages", default="4,8,16")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--carry", type=float, default=0.5, help="weight of the previous counts (0 = no carry variant)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--compare",
        nargs="+",
        metavar="RUN",
        help="only print held-out accuracy per round and rollouts of these finished d2evo runs",
    )
    args = ap.parse_args()
    args.hist_run = args.hist_run or args.run_dir
    if args.compare:
        compare_runs(args.compare)
        return
    seq = Sequential(stages=[int(x) for x in args.stages.split(",")], confidence=args.confidence)
    print(
        f"band [{BAND.low}, {BAND.high}]; fixed N = 32; adaptive stages {seq.stages} -> 32, confidence "
        f"{seq.confidence}, prior Beta({seq.prior_a:g}, {seq.prior_b:g}); carry γ = {args.carry:g}"
    )
    print(
        "columns: rollouts per pool, saving = fixed / this, mean answers per question, band-membership accuracy "
        "vs the true p and vs the N-answer reference, mean anchors, Jaccard of the anchor set with fixed-32's and "
        "with the reference's"
    )
    rule_table(seq)
    if not args.skip_synthetic:
        if not args.hist_run:
            ap.error("--hist-run or --run-dir is needed for the toy histograms")
        synthetic(args, seq)
    if not args.skip_toy:
        if not args.run_dir:
            ap.error("--run-dir is needed for the toy solvers")
        toy(args, seq)


if __name__ == "__main__":
    main()
