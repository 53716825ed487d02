"""Why a toy-world run ends where it does: held-out accuracy by problem kind, what the solver
trained on, and (D²Evo) which pool questions the difficulty band let through.

The toy world knows every question's level, operator and carries/borrows, so a final accuracy
can be taken apart into the skills that moved and those that did not; this is how
docs/results/toy_worlds.md explains why the default world ranks full-label GRPO above D²Evo.
Reads only run folders (``base/eval``, ``round_NN/eval``, ``solver_rollouts.jsonl``,
``difficulty.jsonl``, ``buffer.jsonl``, ``summary.json``); trains nothing.

    PYTHONPATH=src python scripts/toy_world_facts.py RUN [RUN ...] [--md facts.md] [--png by_kind.png]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coevolve.world.toy import make_problem, oracle, parse_toy_question

KINDS = ("L1 a*b", "L1 a+b", "L1 a-b", "L2 +", "L2 - no borrow", "L2 - borrow", "L3", "L4")
"""Problem kinds, finer than levels where the default world's methods differ: L1 products are
facts (a held-out product is never seen in training, so it cannot be learned), L2 subtraction
with a borrow is the sub-skill the difficulty band leaves out."""


def kind(question: str) -> str | None:
    """The kind of a toy question (None when it is not a valid one)."""
    q = parse_toy_question(question)
    if q is None:
        return None
    f = make_problem(q).features
    if f["level"] == 1:
        return f"L1 a{f['op']}b"
    if f["level"] == 2:
        return "L2 +" if f["op"] == "+" else ("L2 - borrow" if f["borrows"] else "L2 - no borrow")
    return f"L{f['level']}"


def _jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _question_of_prompt(prompt: str) -> str:
    return prompt.removeprefix("Q:").split("=\n", 1)[0]


@dataclass(frozen=True)
class EvalByKind:
    """Greedy held-out accuracy of one evaluation, in total and per kind (correct, items)."""

    greedy: float
    sampled: float
    by_kind: dict[str, tuple[int, int]]


def eval_by_kind(folder: Path) -> EvalByKind:
    rows = list(_jsonl(folder / "items_toy.jsonl"))
    ok, n = Counter(), Counter()
    for r in rows:
        k = kind(r["question"])
        n[k] += 1
        ok[k] += bool(r["correct"])
    sampled = sum(r.get("sampled_acc") or 0.0 for r in rows) / len(rows)
    return EvalByKind(sum(ok.values()) / len(rows), sampled, {k: (ok[k], n[k]) for k in KINDS if n[k]})


@dataclass(frozen=True)
class TrainingMix:
    """The solver's GRPO groups over the whole run: share per kind, distinct questions, and the
    groups that carried no gradient (all samples wrong, or all right)."""

    groups: int
    distinct: int
    share: dict[str, float]
    all_wrong: float
    all_right: float


def training_mix(run: Path) -> TrainingMix | None:
    rows = [r for f in sorted(run.glob("round_*/solver_rollouts.jsonl")) for r in _jsonl(f)]
    if not rows:
        return None
    kinds = Counter(kind(_question_of_prompt(r["prompt"])) for r in rows)
    right = [[x > 0.5 for x in r["rewards"]] for r in rows]  # reward α·acc + (1-α)·fmt: > 0.5 iff correct
    return TrainingMix(
        len(rows),
        len({r["prompt"] for r in rows}),
        {k: kinds[k] / len(rows) for k in KINDS},
        sum(not any(a) for a in right) / len(rows),
        sum(all(a) for a in right) / len(rows),
    )


def band_table(run: Path, low: float, high: float) -> list[str]:
    """D²Evo: per round, each kind's pool questions below / in / above the band, and the buffer's
    real and generated questions of that kind (with the generated ones' pseudo-label accuracy)."""
    out = []
    for d in sorted(run.glob("round_*")):
        if not (d / "difficulty.jsonl").is_file():
            continue
        pos = Counter()
        for r in _jsonl(d / "difficulty.jsonl"):
            side = "below" if r["pass_rate"] < low else ("in" if r["pass_rate"] <= high else "above")
            pos[(kind(r["question"]), side)] += 1
        buf, good = Counter(), Counter()
        for r in _jsonl(d / "buffer.jsonl") if (d / "buffer.jsonl").is_file() else []:
            origin = r["features"].get("origin", "?")
            buf[(kind(r["question"]), origin)] += 1
            good[(kind(r["question"]), origin)] += oracle(r["question"]) == r["answer"]
        for k in KINDS:
            g = buf[(k, "generated")]
            out.append(
                f"| {d.name} | {k} | {pos[(k, 'below')]} / {pos[(k, 'in')]} / {pos[(k, 'above')]} | "
                f"{buf[(k, 'real')]} | {g} | {good[(k, 'generated')] / g:.2f} |"
                if g
                else f"| {d.name} | {k} | {pos[(k, 'below')]} / {pos[(k, 'in')]} / {pos[(k, 'above')]} | "
                f"{buf[(k, 'real')]} | 0 | – |"
            )
    return out


def compute_totals(run: Path) -> dict[str, dict[str, int]] | None:
    """The run's compute totals: summary.json's, else the last ``compute/*`` row of metrics.jsonl
    (runs whose summary was written before it held them); None when neither has them."""
    if (run / "summary.json").is_file():
        c = json.loads((run / "summary.json").read_text()).get("compute")
        if c:
            return c
    out: dict[str, dict[str, int]] = {}
    for row in _jsonl(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []:
        for k, v in row.items():
            if k.startswith("compute/"):
                _, part, name = k.split("/")
                out.setdefault(part, {})[name] = v
    return out if {"train", "eval"} <= set(out) else None


def final_eval_dir(run: Path) -> Path:
    evals = sorted(run.glob("round_*/eval/items_toy.jsonl"))
    if not evals:
        raise SystemExit(f"{run}: no round_NN/eval/items_toy.jsonl (not a finished toy run folder)")
    return evals[-1].parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--md", type=Path, help="write the tables here (default: print)")
    ap.add_argument("--png", type=Path, help="bar chart of final held-out accuracy per kind")
    ap.add_argument("--band", nargs=2, type=float, default=(0.4, 0.8), metavar=("LOW", "HIGH"))
    a = ap.parse_args()

    lines = ["| run | greedy | sampled | " + " | ".join(KINDS) + " |", "|---|---|---|" + "---|" * len(KINDS)]
    finals: dict[str, EvalByKind] = {}
    base = eval_by_kind(a.runs[0] / "base" / "eval")
    for name, ev in [("base", base)] + [(r.name, eval_by_kind(final_eval_dir(r))) for r in a.runs]:
        finals[name] = ev
        cells = [f"{ev.by_kind[k][0]}/{ev.by_kind[k][1]}" if k in ev.by_kind else "–" for k in KINDS]
        lines.append(f"| {name} | {ev.greedy:.3f} | {ev.sampled:.3f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| run | groups | distinct questions | all wrong | all right | " + " | ".join(KINDS) + " |",
        "|---|---|---|---|---|" + "---|" * len(KINDS),
    ]
    for r in a.runs:
        m = training_mix(r)
        if m is not None:
            lines.append(
                f"| {r.name} | {m.groups} | {m.distinct} | {m.all_wrong:.2f} | {m.all_right:.2f} | "
                + " | ".join(f"{m.share[k]:.2f}" for k in KINDS)
                + " |"
            )
    lines += [
        "",
        "| run | train rollouts | generated tokens | trained tokens | labels | eval rollouts |",
        "|---|---|---|---|---|---|",
    ]
    for r in a.runs:
        c = compute_totals(r)
        if c:
            t = c["train"]
            lines.append(
                f"| {r.name} | {t['rollouts']} | {t['generated_tokens']} | {t['trained_tokens']} | "
                f"{t['labels']} | {c['eval']['rollouts']} |"
            )
        else:
            lines.append(f"| {r.name} | (no compute counters: run made before they existed) | | | | |")
    for r in a.runs:
        rows = band_table(r, *a.band)
        if rows:
            lines += [
                "",
                f"{r.name}: pool below / in / above the band [{a.band[0]}, {a.band[1]}] and the buffer",
                "",
                "| round | kind | pool below / in / above | buffer real | buffer generated | pseudo-label acc |",
                "|---|---|---|---|---|---|",
                *rows,
            ]
    text = "\n".join(lines) + "\n"
    if a.md:
        a.md.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    if a.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(10, 3.6))
        width = 0.8 / len(finals)
        for i, (name, ev) in enumerate(finals.items()):
            ys = [ev.by_kind[k][0] / ev.by_kind[k][1] if k in ev.by_kind else 0.0 for k in KINDS]
            ax.bar([j + i * width for j in range(len(KINDS))], ys, width, label=f"{name} ({ev.greedy:.3f})")
        ax.set_xticks(
            [j + 0.4 - width / 2 for j in range(len(KINDS))],
            [f"{k}\n(n={base.by_kind.get(k, (0, 0))[1]})" for k in KINDS],
            fontsize=8,
        )
        ax.set_ylabel("held-out greedy accuracy")
        ax.set_ylim(0, 1.22)  # room above the bars for the legend
        ax.legend(fontsize=8, loc="upper center", ncol=min(len(finals), 4))
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
