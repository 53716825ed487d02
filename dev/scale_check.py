"""The figures ``dev/scale_check.sh`` prints on a machine with GPUs (docs/scale.md, section 6).

Two subcommands, each printing a table and one ``RESULT {json}`` line to paste into an issue:

``sample``: difficulty-style sampling through the engine the overrides select (``engine=ray
engine.ray.actor_engine=vllm`` for the pool, ``engine=vllm`` for one in-process engine to compare
with): start-up (building the sampler, and the pool's actors, up to its first one-token call),
per-call overhead (median of one-prompt, one-token calls), and rollout throughput (P questions x n
answers at T=1, generated tokens per second of wall time). Questions come from ``--data`` (a
JSONL(.gz) with a ``question`` field) or are synthetic; ``--model toy`` uses the toy base model,
which is enough to smoke-test this script on a CPU.

``run-summary RUN``: per GRPO step of a run folder's ``metrics.jsonl``, the generation and
learning seconds and the rollout tokens per second (mean completion length x rollouts per step /
generation seconds), plus verl's own timing / throughput metrics when a verl phase passed them on.

Usage::

    PYTHONPATH=src python dev/scale_check.py sample --model /models/Qwen3-0.6B --data D.jsonl.gz \
        --prompts 64 --n 8 --max-new-tokens 512 engine=ray engine.ray.actor_engine=vllm
    PYTHONPATH=src python dev/scale_check.py run-summary runs/scale-check-grpo
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path
from typing import Any


def _questions(data: str | None, count: int) -> list[str]:
    if not data:
        return [f"Question {i}: what is {17 * i + 3} + {29 * i + 5}? Answer:" for i in range(count)]
    opener = gzip.open if data.endswith(".gz") else open
    out: list[str] = []
    with opener(data, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(str(json.loads(line)["question"]))
            if len(out) == count:
                break
    return out


def sample(args: argparse.Namespace) -> dict[str, Any]:
    from coevolve.config import load_config
    from coevolve.engine import load_sampler
    from coevolve.types import SamplingParams

    path = args.model
    if path == "toy":
        from coevolve.world.toy.pretrain import ensure_base

        path = str(ensure_base())
    engine = load_config("grpo", None, list(args.overrides)).engine
    questions = _questions(args.data, args.prompts)
    t0 = time.perf_counter()
    sampler = load_sampler(engine, path)
    sampler.sample(questions[:1], 1, SamplingParams(max_new_tokens=1, seed=0))
    startup = time.perf_counter() - t0
    calls = []
    for i in range(args.calls):
        t = time.perf_counter()
        sampler.sample(questions[:1], 1, SamplingParams(max_new_tokens=1, seed=1 + i))
        calls.append(time.perf_counter() - t)
    t = time.perf_counter()
    groups = sampler.sample(
        questions, args.n, SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed)
    )
    wall = time.perf_counter() - t
    tokens = sum(len(c.token_ids) for g in groups for c in g)
    if hasattr(sampler, "close"):
        sampler.close()
    res = {
        "engine": engine.kind,
        "actor_engine": engine.ray.actor_engine if engine.kind == "ray" else None,
        "model": path,
        "startup_s": round(startup, 2),
        "call_overhead_s": round(statistics.median(calls), 4),
        "prompts": len(questions),
        "n": args.n,
        "max_new_tokens": args.max_new_tokens,
        "rollouts": len(questions) * args.n,
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1) if wall > 0 else None,
    }
    print(
        f"engine {res['engine']}{' (' + res['actor_engine'] + ' actors)' if res['actor_engine'] else ''}: "
        f"start-up {res['startup_s']} s, per-call overhead {res['call_overhead_s']} s (median of {args.calls}), "
        f"{res['rollouts']} rollouts / {tokens} tokens in {res['wall_s']} s = {res['tokens_per_s']} tokens/s"
    )
    return res


def run_summary(args: argparse.Namespace) -> dict[str, Any]:
    rows = [
        json.loads(line)
        for line in (Path(args.run) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    phases = {r["phase"]: r for r in rows if any(k.startswith("phase/") and k.endswith("/seconds") for k in r)}
    steps = []
    for r in rows:
        ns = r.get("phase")
        gen, learn = r.get(f"{ns}/gen_seconds"), r.get(f"{ns}/learn_seconds")
        if r.get("step") is None or gen is None:
            continue
        ph = phases.get(ns, {})
        n_steps = sum(1 for x in rows if x.get("phase") == ns and x.get(f"{ns}/gen_seconds") is not None)
        per_step = (ph.get(f"phase/{ns}/rollouts") or 0) / max(1, n_steps)
        tok = r.get(f"{ns}/completion_len_mean", 0.0) * per_step
        verl = {k: v for k, v in r.items() if "timing_s" in k or "perf/" in k or "throughput" in k}
        steps.append(
            {
                "phase": ns,
                "round": r.get("round"),
                "step": r["step"],
                "gen_s": gen,
                "learn_s": learn,
                "rollout_tokens_per_s": round(tok / gen, 1) if gen else None,
                **verl,
            }
        )
    for s in steps:
        print("  ".join(f"{k}={v}" for k, v in s.items()))
    for ns, ph in phases.items():
        print(f"phase {ns}: {ph.get(f'phase/{ns}/seconds')} s, {ph.get(f'phase/{ns}/rollouts')} rollouts")
    return {
        "run": args.run,
        "steps": steps,
        "phases": {
            ns: {"seconds": ph.get(f"phase/{ns}/seconds"), "rollouts": ph.get(f"phase/{ns}/rollouts")}
            for ns, ph in phases.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="sampler start-up, per-call overhead and rollout tokens/s")
    s.add_argument("--model", required=True, help="HF model folder, or 'toy'")
    s.add_argument("--data", help="JSONL(.gz) with a 'question' field (default: synthetic questions)")
    s.add_argument("--prompts", type=int, default=64)
    s.add_argument("--n", type=int, default=8)
    s.add_argument("--max-new-tokens", type=int, default=512)
    s.add_argument("--calls", type=int, default=5, help="one-token calls for the per-call overhead")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("overrides", nargs="*", help="engine overrides as for `coevolve run` (engine=ray ...)")
    r = sub.add_parser("run-summary", help="step times and rollout tokens/s of a run folder")
    r.add_argument("run")
    args = ap.parse_args()
    res = sample(args) if args.cmd == "sample" else run_summary(args)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
