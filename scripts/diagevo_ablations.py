"""Run the DiagEvo ablation grid (``coevolve.eval.study.ablations("diagevo")``) one after another, one seed,
and print a table: held-out greedy/sampled accuracy, memory size (causes / nodes / mastered,
promotions and re-activations over the run), mean pseudo-label oracle agreement of the kept
questions, wall time. ``ablations.json`` also holds, per run and round, the oracle agreement of
the three filters (none / absolute / dual) on the same candidate pool.

    PYTHONPATH=src python scripts/diagevo_ablations.py [--base configs/diagevo.yaml] \
        [--out runs/diagevo_ablations] [--seed 0] \
        [--only full,no_filter] [extra key=value overrides applied to every run]

Finished runs are skipped, interrupted ones resumed, so the script itself can be re-run. For
several seeds with intervals and the papers' claims, use `coevolve study` (same variants).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="configs/diagevo.yaml")
    ap.add_argument("--out", default="runs/diagevo_ablations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated subset of the grid names")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = ap.parse_args(argv)

    from coevolve.config import load_config
    from coevolve.errors import CoevolveError
    from coevolve.eval.study import ablations
    from coevolve.recipes import execute

    grid = {k: list(v.overrides) for k, v in ablations("diagevo").items()}
    names = [n for n in grid if not args.only or n in args.only.split(",")]
    rows = []
    for name in names:
        ovs = [*(grid[name] or []), f"run.seed={args.seed}", "run.progress=false", *args.overrides]
        path = Path(args.out) / name
        try:
            summary = execute(load_config("diagevo", args.base, ovs), path, skip_finished=True)
        except CoevolveError as e:
            print(f"error in {name}: {e}", file=sys.stderr)
            return 2
        ev = summary["eval"]
        last = summary["rounds"][-1] if summary["rounds"] else {}
        pool_acc = [
            r.get("pool/oracle_acc_kept") for r in summary["rounds"] if r.get("pool/oracle_acc_kept") is not None
        ]
        filt = {m: [r.get(f"pool/oracle_acc_{m}") for r in summary["rounds"]] for m in ("none", "absolute", "dual")}
        rows.append(
            {
                "name": name,
                "base": ev.get("base", {}).get("toy", {}).get("greedy"),
                "greedy": ev.get("final", {}).get("toy", {}).get("greedy"),
                "sampled": ev.get("final", {}).get("toy", {}).get("sampled"),
                "causes": summary.get("memory", {}).get("causes"),
                "nodes": summary.get("memory", {}).get("nodes"),
                "mastered": summary.get("memory", {}).get("mastered"),
                "label_acc": sum(pool_acc) / len(pool_acc) if pool_acc else None,
                "promotions": sum(int(r.get("memory/promotions") or 0) for r in summary["rounds"]),
                "reactivations": sum(int(r.get("memory/reactivations") or 0) for r in summary["rounds"]),
                "seconds": summary.get("wall_seconds"),
                "kept_last": last.get("pool/kept"),
                "rounds": len(summary["rounds"]),
                "oracle_acc_by_filter": filt,
            }
        )
    fmt = lambda v: "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    cols = [
        "name",
        "rounds",
        "base",
        "greedy",
        "sampled",
        "label_acc",
        "causes",
        "nodes",
        "mastered",
        "promotions",
        "reactivations",
        "kept_last",
        "seconds",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(fmt(r[c]) for c in cols) + " |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "ablations.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
