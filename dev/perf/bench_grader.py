"""Agreement, extraction speed and throughput of the answer grader.

Agreement: ``Grader.grade_pair`` against (gold, pred, expected) case sets, each printed on its own:
``tests/data/grader_cases_published.jsonl`` (the published test cases of Math-Verify and
lighteval, harvested by ``dev/harvest_grader_cases.py``) and ``tests/data/grader_cases.jsonl``
(Hendrycks MATH ``is_equiv``, Qwen2.5-Math ``math_equal`` and synthetic surface variants).
Optionally the same sets through plain math-verify with default settings, for comparison.

Extraction: microseconds per output of ``extract_answer`` (the reading behind reward, vote and
evaluation) over the case sets' texts and over generated arithmetic outputs in the forms a small
model writes (boxed, "The answer is X", a bare final sentence, a long unfinished one).

Throughput: per-call cost of the cheap path (integer answers, as in the toy world), of a vote over
16 integer answers, and of a math-verify worker call; and graded answers/s of ``grade_batch`` with
one worker and with a ``GraderPool`` of N workers on the same answers (``--workers N``).

Usage: ``PYTHONPATH=src python dev/perf/bench_grader.py [--cases PATH ...] [--misses] [--baseline] [--workers N]``
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import time
from pathlib import Path

from coevolve.answers import Grader, GraderPool, extract_answer
from coevolve.answers.worker import WORKER_MEMORY_MB

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


def load_cases(path: Path) -> list[dict]:
    """Rows with gold / pred / expected / source."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def agreement(grader: Grader, cases: list[dict], show_misses: bool) -> float:
    """Print overall and per-source agreement; return the overall fraction."""
    ok: collections.Counter[str] = collections.Counter()
    tot: collections.Counter[str] = collections.Counter()
    misses = []
    t0 = time.perf_counter()
    for c in cases:
        verdict = grader.grade_pair(c["gold"], c["pred"])
        src = c["source"].split("::")[0]
        tot[src] += 1
        if verdict == c["expected"]:
            ok[src] += 1
        else:
            misses.append(c)
    dt = time.perf_counter() - t0
    n_ok, n = sum(ok.values()), len(cases)
    print(f"agreement: {n_ok}/{n} = {100 * n_ok / n:.1f}%   ({dt:.1f}s, {1000 * dt / n:.1f} ms/case)")
    print(f"  disagreeing ids: {sorted(c.get('id', '?') for c in misses)}")
    for src in sorted(tot):
        print(f"  {src:48s} {ok[src]:4d}/{tot[src]:<4d} {100 * ok[src] / tot[src]:6.1f}%")
    if show_misses:
        for c in misses:
            print(f"  MISS [{c['source']}] expected={c['expected']} gold={c['gold'][:80]!r} pred={c['pred'][-80:]!r}")
    return n_ok / n


def baseline(cases: list[dict]) -> float:
    """Plain math-verify (default parse/verify settings, in-process) on the same cases."""
    from math_verify import parse, verify

    n_ok = 0
    for c in cases:
        try:
            v = bool(verify(parse(c["gold"]), parse(c["pred"])))
        except Exception:  # noqa: BLE001
            v = False
        n_ok += v == c["expected"]
    print(f"plain math-verify (defaults): {n_ok}/{len(cases)} = {100 * n_ok / len(cases):.1f}%")
    return n_ok / len(cases)


def arithmetic_outputs(n: int, seed: int = 0) -> list[str]:
    """Generated outputs of a small model on two-number arithmetic, in the forms it writes."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        op, val = rng.choice([("+", a + b), ("-", a - b), ("*", a * b)])
        form = i % 5
        if form == 0:
            out.append(f"<think>{a} {op} {b} = {val}</think> The answer is \\boxed{{{val}}}.")
        elif form == 1:
            out.append(f"To find {a} {op} {b}, we compute it step by step. The answer is {val}.")
        elif form == 2:
            out.append(f"Sure! Let's compute: {a} {op} {b} = {val}.")
        elif form == 3:
            out.append(f"Réponse : {val}")
        else:  # an unfinished long answer (the sampler's budget ran out)
            steps = " ".join(f"Then {a + k} {op} {b} = {val + k}." for k in range(40))
            out.append(f"Let me think about {a} {op} {b}. {steps} So the next step is")
    return out


def extraction(case_sets: list[list[dict]], rounds: int = 5) -> None:
    """Microseconds per output of ``extract_answer`` (the fastest of ``rounds`` passes: the
    machine is shared) on the cases' texts and on each form of the arithmetic outputs."""
    texts = [t for cases in case_sets for c in cases for t in (c["gold"], c["pred"])]
    arith = arithmetic_outputs(2000)
    corpora = {"case texts": texts, "arithmetic outputs, all forms": arith}
    for i, form in enumerate(("boxed", "'The answer is X.'", "bare final sentence", "'Réponse : X'", "unfinished")):
        corpora[f"arithmetic outputs, {form}"] = arith[i::5]
    for name, corpus in corpora.items():
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for t in corpus:
                extract_answer(t)
            best = min(best, (time.perf_counter() - t0) / len(corpus))
        mean_len = sum(map(len, corpus)) / len(corpus)
        print(f"extract_answer, {name} ({len(corpus)}, mean {mean_len:.0f} chars): {1e6 * best:.1f} us/output")


def throughput(grader: Grader) -> None:
    """Cheap-path, vote and worker per-call timings."""
    rng = random.Random(0)
    pairs = [(str(rng.randint(0, 99)), str(rng.randint(0, 99))) for _ in range(20000)]
    before = grader.stats.worker_calls
    t0 = time.perf_counter()
    for g, p in pairs:
        grader.is_equiv(g, p)
    dt = time.perf_counter() - t0
    assert grader.stats.worker_calls == before, "integer answers must not reach the worker"
    print(f"cheap path (integers): {1e6 * dt / len(pairs):.2f} us/call")
    votes = [[str(rng.randint(0, 5)) if rng.random() > 0.1 else None for _ in range(16)] for _ in range(2000)]
    t0 = time.perf_counter()
    for v in votes:
        grader.vote(v)
    dt = time.perf_counter() - t0
    print(f"vote over 16 integer answers: {1e6 * dt / len(votes):.1f} us/vote")
    mixed = ["\\frac{1}{2}", "0.5", "1/2", "\\dfrac12", "x=0.5", "\\sqrt{2}/2", None, "2^{-1}"]
    t0 = time.perf_counter()
    w0 = grader.stats.worker_calls
    grader.vote(mixed)
    dt = time.perf_counter() - t0
    print(f"vote over 8 mixed LaTeX answers: {1000 * dt:.1f} ms ({grader.stats.worker_calls - w0} worker calls)")
    mv = [("\\sqrt{8}", "2\\sqrt{2}"), ("(x+1)^2", "x^2+2x+1"), ("\\{1,2\\}", "\\{2,1\\}"), ("x-1", "1-x")]
    w0, s0 = grader.stats.worker_calls, grader.stats.worker_seconds
    t0 = time.perf_counter()
    for _ in range(10):
        for g, p in mv:
            grader.is_equiv(g, p)
    dt = time.perf_counter() - t0
    calls = grader.stats.worker_calls - w0
    print(
        f"math-verify path: {1000 * dt / (10 * len(mv)):.1f} ms/call end-to-end "
        f"({1000 * (grader.stats.worker_seconds - s0) / max(calls, 1):.1f} ms in the worker per request)"
    )


def pool_throughput(cases: list[dict], workers: list[int], repeat: int) -> None:
    """Graded answers/s of ``grade_batch`` over the regression set's (gold, boxed pred) pairs, for
    each worker count; checks that every count gives the same verdicts."""
    golds = [c["gold"] for c in cases] * repeat
    texts = [f"The answer is \\boxed{{{c['pred']}}}." for c in cases] * repeat
    ref = None
    print(f"grade_batch over {len(golds)} answers ({len(cases)} cases x {repeat}):")
    for w in workers:
        grader = Grader() if w == 1 else GraderPool(w)
        with grader:
            grader.grade_batch(golds[:w], texts[:w])  # start every worker outside the measurement
            t0 = time.perf_counter()
            verdicts = grader.grade_batch(golds, texts)
            dt = time.perf_counter() - t0
        ref = verdicts if ref is None else ref
        same = "same verdicts" if verdicts == ref else "DIFFERENT VERDICTS"
        print(f"  {w} worker(s): {len(golds) / dt:8.1f} answers/s  ({dt:.1f} s, {same})")


ADVERSARIAL = ("(x+1)^{99999}", "(x+1)^{99}")
"""An answer pair math-verify worked on until the memory limit (sympy expands the power: ~580 MB);
the grader's probe points now show the two differ in milliseconds."""
STILL_COSTLY = ("(x^2-1)^{99999}", "(x-1)^{99999}(x+1)^{99999}")
"""Equal functions, so the probe points agree and math-verify's algebra runs to the memory limit:
the cost of a straggler no rule catches (kill at the limit, fork a fresh worker)."""


def straggler_mix(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(golds, outputs): 60 % integers, 30 % fractions against decimals (both cheap path), 10 %
    roots (math-verify), each boxed in an output."""
    rng = random.Random(seed)
    golds, texts = [], []
    for i in range(n):
        a, b = rng.randint(1, 99), rng.choice([2, 4, 5, 8])
        gold, pred = [
            (str(a), str(a + (i % 3 == 0))),
            (f"\\frac{{{a}}}{{{b}}}", str(a / b)),
            (f"\\sqrt{{{4 * a}}}", f"2\\sqrt{{{a}}}"),
        ][0 if i % 10 < 6 else 1 if i % 10 < 9 else 2]
        golds.append(gold)
        texts.append(f"The answer is \\boxed{{{pred}}}.")
    return golds, texts


def straggler_throughput(
    workers: int, n: int, share: float, pair: tuple[str, str] = ADVERSARIAL, memory_mb: int = WORKER_MEMORY_MB
) -> None:
    """Wall time of ``grade_batch`` on ``workers`` graders over ``n`` answers (``straggler_mix``),
    without and with a ``share`` of adversarial answers ``pair`` at random places: how much a
    straggler slows a batch."""
    golds, texts = straggler_mix(n)
    bad = max(1, round(share * n))
    adv_golds, adv_texts = list(golds), list(texts)
    for k in random.Random(1).sample(range(n), bad):
        adv_golds[k], adv_texts[k] = pair[0], f"\\boxed{{{pair[1]}}}"
    walls = []
    for g_list, t_list in ((golds, texts), (adv_golds, adv_texts)):
        with GraderPool(workers, memory_mb=memory_mb) as pool:
            pool.grade_batch(golds[:workers], texts[:workers])
            t0 = time.perf_counter()
            pool.grade_batch(g_list, t_list)
            walls.append(time.perf_counter() - t0)
            st = pool.stats
        print(f"  {len(g_list)} answers: {walls[-1]:.1f} s (timeouts {st.timeouts}, restarts {st.restarts})")
    print(
        f"stragglers {pair[0]} vs {pair[1]}: {bad} of {n} ({100 * bad / n:.2f} %) on {workers} workers: "
        f"x{walls[1] / walls[0]:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--cases", type=Path, nargs="+", default=[DATA / "grader_cases_published.jsonl", DATA / "grader_cases.jsonl"]
    )
    ap.add_argument("--misses", action="store_true", help="list the disagreeing cases")
    ap.add_argument("--baseline", action="store_true", help="also score plain math-verify")
    ap.add_argument("--workers", type=int, default=0, help="also time grade_batch with 1 and N workers")
    ap.add_argument("--repeat", type=int, default=2, help="passes over the cases for the pool timing")
    ap.add_argument("--stragglers", type=int, default=0, help="also time N answers with 0.1 %% adversarial ones")
    args = ap.parse_args()
    case_sets = [load_cases(p) for p in args.cases]
    with Grader() as grader:
        t0 = time.perf_counter()
        grader.is_equiv("\\sqrt{4}", "2")  # start the worker outside the measurements
        print(f"worker start-up: {time.perf_counter() - t0:.2f}s")
        for path, cases in zip(args.cases, case_sets):
            print(f"== {path.name}")
            agreement(grader, cases, args.misses)
        extraction(case_sets)
        throughput(grader)
        print(f"stats: {grader.stats}")
    if args.baseline:
        for path, cases in zip(args.cases, case_sets):
            print(f"== {path.name}")
            baseline(cases)
    if args.workers > 1:
        pool_throughput([c for cases in case_sets for c in cases], [1, args.workers], args.repeat)
    if args.stragglers:
        for pair in (ADVERSARIAL, STILL_COSTLY):
            straggler_throughput(max(2, args.workers), args.stragglers, 0.001, pair)


if __name__ == "__main__":
    main()
