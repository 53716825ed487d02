"""How well each round-selection rule picks the round with the best true held-out accuracy.

Reads finished D²Evo / DiagEvo run folders (their probe signals and per-round evaluations in
summary.json), applies every rule of ``coevolve.eval.signals`` after the fact (the same pure
functions a run with ``run.select`` / ``run.stop_patience`` uses), and prints a markdown table:
per rule and run, the round it picks, whether that round has the best held-out accuracy of
rounds 1..T (the oracle's choice), and the accuracy lost against the oracle; then per rule the
share of runs where it picked the best round and the mean loss, beside "keep the last round".

    python dev/stopping_table.py RUN_DIR [RUN_DIR ...] [--bench toy] [--kind greedy] [--patience 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from coevolve.eval.signals import (  # noqa: E402
    SIGNALS,
    oracle_regret,
    parse_select,
    rank_correlation,
    select_round,
    stop_round,
)


def load(run_dir: Path, bench: str, kind: str) -> tuple[dict[int, dict[str, Any]], dict[int, float]]:
    """(round -> probe figures, round 0 = base) and (round -> held-out accuracy) from a run's
    finished phases (state.json): an unfinished run gives the rounds it has evaluated so far."""
    state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    probes = {p["round"] or 0: p["values"] for p in state["phases"] if p["name"] == "probe"}
    acc = {
        p["round"] or 0: p["values"]["eval"][bench][kind]
        for p in state["phases"]
        if p["name"] == "eval" and p["stage"] != "final"
    }
    probes = {t: v for t, v in probes.items() if t in acc}  # a round counts once it is evaluated
    return probes, acc


def rules(patience: int) -> list[tuple[str, str, int | None]]:
    """(label, run.select, run.stop_patience) of every rule compared."""
    out = [("last", "last", None)] + [(f"best {s}", f"best_signal:{s}", None) for s in SIGNALS]
    out += [
        (f"stop p1 (k={patience}), last", "last", patience),
        (f"stop p1 (k={patience}), best p1", "best_signal:p1", patience),
    ]
    return out


def choose(select: str, patience: int | None, probes: dict[int, dict[str, Any]], last: int) -> int:
    """The round a run with these settings would have exported."""
    rule = parse_select(select)
    watched = rule if rule.kind != "last" else parse_select("best_signal:p1")
    series = {t: v.get(watched.signal) for t, v in probes.items()}
    stop = stop_round(series, watched.direction, patience)
    end = min(last, stop) if stop is not None else last
    return select_round(rule, series, end)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--bench", default="toy")
    ap.add_argument("--kind", default="greedy", choices=["greedy", "sampled"])
    ap.add_argument("--patience", type=int, default=2)
    args = ap.parse_args()
    data = {d.name: load(d, args.bench, args.kind) for d in args.runs}
    print(f"Held-out {args.bench} {args.kind} accuracy by round (0 = base), oracle round in bold:\n")
    width = max(len(a) for _, a in data.values())
    print("| run | " + " | ".join(f"r{t}" for t in range(width)) + " |")
    print("|---|" + "---:|" * width)
    for name, (_, acc) in data.items():
        best = max(v for t, v in acc.items() if t >= 1)
        print(
            f"| {name} | "
            + " | ".join(
                (f"**{acc[t]:.3f}**" if t >= 1 and acc[t] >= best else f"{acc[t]:.3f}") if t in acc else "–"
                for t in range(width)
            )
            + " |"
        )
    print("\nSpearman correlation of each signal with held-out accuracy over rounds 0..T:\n")
    sigs = ["p1", "entropy", "parsed", "agreement", "answer_tokens", "question_chars", "accuracy", "pass_rate"]
    print("| run | " + " | ".join(sigs) + " |")
    print("|---|" + "---:|" * len(sigs))
    for name, (probes, acc) in data.items():
        cells = []
        for s in sigs:
            ts = [t for t in sorted(probes) if probes[t].get(s) is not None and t in acc]
            rho = rank_correlation([probes[t][s] for t in ts], [acc[t] for t in ts])
            cells.append("–" if rho is None else f"{rho:+.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nPer rule: round chosen / picked the oracle round (✓) / accuracy lost vs the oracle (points):\n")
    print("| rule | " + " | ".join(data) + " | picked best | mean loss | vs last |")
    print("|---|" + "---|" * len(data) + "---:|---:|---|")
    base_loss = None
    for label, select, patience in rules(args.patience):
        cells, hits, losses = [], 0, []
        for _name, (probes, acc) in data.items():
            last = max(acc)
            t = choose(select, patience, probes, last)
            hit, lost = oracle_regret(t, acc)
            hits += hit
            losses.append(lost)
            cells.append(f"r{t} {'✓' if hit else '✗'} {100 * lost:.1f}")
        mean = sum(losses) / len(losses)
        if base_loss is None:
            base_loss = mean
        verdict = (
            "–"
            if label == "last"
            else ("better" if mean < base_loss - 1e-12 else "same" if abs(mean - base_loss) <= 1e-12 else "worse")
        )
        print(f"| {label} | " + " | ".join(cells) + f" | {hits}/{len(data)} | {100 * mean:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
