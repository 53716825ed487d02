"""Run the D²Evo ablations (``coevolve.eval.study.ablations("d2evo")``) one after another, one seed each, and
print / save a comparison table (held-out greedy and sampled accuracy per round, anchors, buffer
real/generated, pseudo-label accuracy, wall time, rollouts per phase kind) as ablations.json / .md.

    python scripts/d2evo_ablations.py --config configs/d2evo.yaml --out runs/d2evo_ablations
    python scripts/d2evo_ablations.py --config configs/d2evo_smoke.yaml --only full,no_questioner

For several seeds with intervals and the papers' claims, use `coevolve study` (same variants).
Each variant is an ordinary run folder under --out (resumable with `coevolve resume`); a variant
whose folder already holds a finished run is not re-run, so the script itself can be restarted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from coevolve.config import load_config  # noqa: E402
from coevolve.eval.study import ablations  # noqa: E402
from coevolve.recipes import execute  # noqa: E402


def run_variant(name: str, config: Path, overrides: list[str], out: Path) -> Path:
    """Run (or resume, or skip when finished) one variant in ``out/name``; returns the folder."""
    execute(load_config("d2evo", config, overrides), out / name, skip_finished=True)
    return out / name


def variant_row(name: str, path: Path) -> dict[str, Any]:
    """One table row from a finished run folder: held-out accuracy per round, curriculum figures,
    wall time and rollouts per phase kind (from state.json, base eval and final re-measure included)."""
    s = json.loads((path / "summary.json").read_text())
    state = json.loads((path / "state.json").read_text())  # read-only: no Run.open (it may truncate)
    ev = s["eval"]
    bench = next(iter(ev.get("final") or ev.get("base") or {}), None)
    acc = lambda e: {
        "greedy": (e or {}).get(bench, {}).get("greedy"),
        "sampled": (e or {}).get(bench, {}).get("sampled"),
    }  # noqa: E731
    rounds = s["rounds"]
    # rollouts per phase kind over rounds 1..T (the method's own cost); held-out evals and the
    # report-only final re-measure of the pool are counted apart
    rollouts: dict[str, int] = {}
    for ph in state["phases"]:
        kind = ph["name"] if ph["round"] is not None else f"{ph['stage']}/{ph['name']}"
        rollouts[kind] = rollouts.get(kind, 0) + int(ph["rollouts"])
    total = sum(v for k, v in rollouts.items() if "/" not in k and k != "eval")
    return {
        "variant": name,
        "bench": bench,
        "base": acc(ev.get("base")),
        "rounds": {str(r["round"]): acc((ev.get("rounds") or {}).get(str(r["round"]))) for r in rounds},
        "final": acc(ev.get("final")),
        "anchors": [r.get("anchors/anchors") for r in rounds],
        "buffer_real": [r.get("buffer/buffer_real") for r in rounds],
        "buffer_generated": [r.get("buffer/buffer_generated") for r in rounds],
        "pseudo_label_acc": [r.get("buffer/oracle_acc_kept") for r in rounds],
        "wall_seconds": s.get("wall_seconds"),
        "rollouts": rollouts,
        "rollouts_total": total,  # rounds 1..T without held-out eval
        "rollouts_eval": sum(v for k, v in rollouts.items() if k.endswith("eval")),
        "difficulty_share": round(rollouts.get("difficulty", 0) / total, 4) if total else None,
    }


def _f(x: Any, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per variant; per-round lists are written r1/r2/r3."""
    n = max((len(r["rounds"]) for r in rows), default=0)
    head = (
        ["variant", "base g/s"]
        + [f"r{t} g/s" for t in range(1, n + 1)]
        + [
            "final greedy",
            "final sampled",
            "anchors",
            "buffer real/gen",
            "pseudo-label acc",
            "wall s",
            "rollouts r1..T (difficulty share)",
        ]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["variant"], f"{_f(r['base']['greedy'])} / {_f(r['base']['sampled'])}"]
        cells += [
            f"{_f(r['rounds'].get(str(t), {}).get('greedy'))} / {_f(r['rounds'].get(str(t), {}).get('sampled'))}"
            for t in range(1, n + 1)
        ]
        cells += [
            _f(r["final"]["greedy"]),
            _f(r["final"]["sampled"]),
            "/".join(_f(a) for a in r["anchors"]),
            " ".join(f"{_f(a)}/{_f(b)}" for a, b in zip(r["buffer_real"], r["buffer_generated"])),
            "/".join(_f(x, 2) for x in r["pseudo_label_acc"]),
            _f(r["wall_seconds"], 0),
            f"{r['rollouts_total']} ({_f(r['difficulty_share'], 2)})",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "d2evo.yaml")
    ap.add_argument("--out", type=Path, default=Path("runs") / "d2evo_ablations")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for every variant")
    a = ap.parse_args()
    variants = {k: list(v.overrides) for k, v in ablations("d2evo").items()}
    names = [n for n in a.only.split(",") if n] or list(variants)
    unknown = [n for n in names if n not in variants]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {list(variants)}")
    rows = []
    for n in names:
        path = run_variant(n, a.config, [*a.overrides, *variants[n], f"run.seed={a.seed}", "run.progress=false"], a.out)
        rows.append(variant_row(n, path))
        print(json.dumps(rows[-1]), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "ablations.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = table(rows)
    (a.out / "ablations.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
