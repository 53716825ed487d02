"""Property check of the answer grader: no false "equal" on random pairs with an exactly known relation.

Pairs come from ``coevolve.answers.exprgen`` (integers, fractions, decimals, powers, sums,
products, nested ``\\frac``, perfect-square roots, long sums ``a+1+…+1``, intervals; the relation
is decided by exact ``Fraction`` arithmetic). Each pair goes through the reward path: a model
output stating ``pred`` is graded against ``gold`` with ``grade_batch`` (extraction, cheap path,
over-limit rule, math-verify worker under its timeout), spread over ``--workers`` graders. The
output is written in each of ``--forms`` (``exprgen.OUTPUT_FORMS``):

* ``boxed``: ``so the result is \\boxed{pred}``;
* ``statement``: ``The answer is $pred$.`` (an answer statement, no box);
* ``sentence``: ``We work it out step by step. So the result is pred.`` (the final sentence, plain text).

Prints, per form: false "equal" on the non-equal pairs (must be 0), the false-"not equal" rate on
the equal pairs, both per family, the grader counters (timeouts, over-limit answers), and wall
time. Exit status 1 when any false "equal" is found.

Usage: ``PYTHONPATH=src python dev/grader_property.py [--unequal 10000] [--equal 2000] [--seed 0] [--workers 2] [--forms boxed,statement,sentence]``
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from coevolve.answers import make_grader
from coevolve.answers.exprgen import OUTPUT_FORMS as FORMS
from coevolve.answers.exprgen import generate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unequal", type=int, default=10_000, help="non-equal pairs (default 10,000)")
    ap.add_argument("--equal", type=int, default=2_000, help="equal pairs (default 2,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="math-verify worker processes")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-call math-verify budget, seconds")
    ap.add_argument("--show", type=int, default=10, help="print up to this many wrong verdicts of each kind")
    ap.add_argument(
        "--forms",
        default="boxed,statement,sentence",
        help="how each output states its answer, comma-separated: " + ", ".join(FORMS),
    )
    args = ap.parse_args()

    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    unknown = [f for f in forms if f not in FORMS]
    if unknown or not forms:
        ap.error(f"--forms: unknown form(s) {unknown}; choose from {', '.join(FORMS)}")
    pairs = generate(args.unequal, args.equal, args.seed)
    found = 0
    for form in forms:
        found += check(pairs, form, args)
    return 1 if found else 0


def check(pairs: list, form: str, args: argparse.Namespace) -> int:
    """Grade every pair written in ``form``; print the figures; return the number of false "equal"."""
    golds = [p.gold for p in pairs]
    outputs = [FORMS[form].format(p.pred) for p in pairs]
    t0 = time.perf_counter()
    with make_grader(timeout=args.timeout, workers=args.workers) as grader:
        verdicts = grader.grade_batch(golds, outputs)
        stats = grader.stats
    wall = time.perf_counter() - t0

    tot: collections.Counter[tuple[str, bool]] = collections.Counter()
    wrong: collections.Counter[tuple[str, bool]] = collections.Counter()
    false_equal, false_unequal = [], []
    for p, v in zip(pairs, verdicts):
        tot[p.family, p.equal] += 1
        if v != p.equal:
            wrong[p.family, p.equal] += 1
            (false_unequal if p.equal else false_equal).append(p)
    n_un = sum(n for (_, eq), n in tot.items() if not eq)
    n_eq = sum(n for (_, eq), n in tot.items() if eq)
    print(
        f"form {form!r}: seed {args.seed}, {len(pairs)} pairs, {args.workers} worker(s), timeout {args.timeout:g}s, "
        f"{wall:.1f}s wall ({1000 * wall / len(pairs):.1f} ms/pair)"
    )
    print(f"non-equal pairs: {n_un}   false 'equal': {len(false_equal)}")
    print(
        f"equal pairs:     {n_eq}   false 'not equal': {len(false_unequal)} "
        f"({100 * len(false_unequal) / max(n_eq, 1):.2f}%)"
    )
    print(f"{'family':16s} {'relation':9s} {'pairs':>6s} {'wrong':>6s}")
    for fam, eq in sorted(tot):
        print(f"{fam:16s} {'equal' if eq else 'unequal':9s} {tot[fam, eq]:6d} {wrong[fam, eq]:6d}")
    print(
        f"grader: calls={stats.calls} cheap={stats.cheap_hits} worker_calls={stats.worker_calls} "
        f"timeouts={stats.timeouts} errors={stats.errors} over_limit={stats.too_long} restarts={stats.restarts}"
    )
    for label, rows in (("FALSE EQUAL", false_equal), ("false not-equal", false_unequal)):
        for p in rows[: args.show]:
            print(f"  {label} [{p.family}] gold={p.gold[:80]!r} pred={p.pred[:120]!r}")
    return len(false_equal)


if __name__ == "__main__":
    sys.exit(main())
