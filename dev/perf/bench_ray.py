"""engine=ray on CPU: start-up of a Ray actor pool, per-call overhead against in-process
sampling, memory per actor, and token-id equality with ``HFSampler(seed_scope="prompt")``.

Prompts are toy held-out questions through the toy prompter, on the cached toy base model
(``$COEVOLVE_CACHE``). Times are wall-clock medians of ``--reps`` calls (10x that for the tiny call) after one warm-up;
the pool's start-up is ``make_sampler`` (``ray.init`` + placement group + actors + the first
weight slot) and is reported split into its parts. Memory: each actor process's resident set
(``/proc/<pid>/status`` VmRSS, the pool runs on this machine) once a slot is loaded.

``--compare RUN_A RUN_B`` compares two run folders instead (an ``engine=ray`` run and an
``engine=hf engine.seed_scope=prompt`` run of the same config and seed): every JSONL artefact
(rollouts, pools, buffers, difficulty, eval items) byte for byte, ``eval/results.json``, and
``summary.json`` with its timing fields (``seconds``, ``wall``) left out; prints the held-out
accuracies of both.

Usage::

    PYTHONPATH=src python dev/perf/bench_ray.py [--actors 2] [--prompts 32] [--n 8] [--reps 3]
    PYTHONPATH=src python dev/perf/bench_ray.py --compare RUN_A RUN_B
    # on a GPU machine (untested here): vllm actors, one per GPU, a real model
    PYTHONPATH=src python dev/perf/bench_ray.py --model /path/to/Qwen3-4B-Base --actors 0 \
        --actor-engine vllm --device auto --max-new 1024 --prompts 256

"equal prompts" compares the pool with an in-process ``HFSampler(seed_scope="prompt")``: exact
for ``hf`` actors on the same device type; ``vllm`` actors draw differently (other kernels and
RNG), so there it only says how many agree by chance.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    fn()  # warm-up (first-call allocations, lazy imports)
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _untimed(x: Any) -> Any:
    """``x`` without timing fields (wall-clock seconds differ between any two runs)."""
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if "seconds" not in k and "wall" not in k and k != "time"}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def compare(a: Path, b: Path) -> bool:
    files = sorted(
        {p.relative_to(a) for p in a.rglob("*") if p.suffix == ".jsonl" or p.name == "results.json"}
        - {Path("metrics.jsonl")}
    )
    same = True
    for rel in files:
        if rel.suffix == ".json":  # results.json: its wall-clock fields differ between any two runs
            eq = (b / rel).is_file() and _untimed(json.loads((a / rel).read_text())) == _untimed(
                json.loads((b / rel).read_text())
            )
        else:
            eq = (b / rel).is_file() and (a / rel).read_bytes() == (b / rel).read_bytes()
        same &= eq
        how = "without timing fields" if rel.suffix == ".json" else "byte for byte"
        print(f"{'same' if eq else 'DIFFERENT':<10} {rel} ({(a / rel).stat().st_size} bytes, {how})")
    sa, sb = (json.loads((r / "summary.json").read_text()) for r in (a, b))
    eq = _untimed(sa) == _untimed(sb)
    same &= eq
    print(f"{'same' if eq else 'DIFFERENT':<10} summary.json without timing fields")
    for name, s in (("A", sa), ("B", sb)):
        ev = s["eval"]
        accs = [("base", ev["base"])] + [(f"r{k}", v) for k, v in sorted(ev["rounds"].items())]
        print(
            f"{name} held-out toy greedy / sampled: "
            + ", ".join(f"{k} {v['toy']['greedy']:.4f}/{v['toy']['sampled']:.4f}" for k, v in accs)
        )
    print(f"{len(files)} artefact files + summary: {'ALL EQUAL' if same else 'DIFFERENCES'}")
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"))
    ap.add_argument(
        "--actors", type=int, default=2, help="engine.ray.num_actors (0 = Ray's default: one per GPU group, 2 on CPU)"
    )
    ap.add_argument("--actor-engine", choices=["hf", "vllm"], default="hf", help="engine.ray.actor_engine (vllm: GPU)")
    ap.add_argument("--tp", type=int, default=1, help="engine.tensor_parallel_size")
    ap.add_argument("--model", default=None, help="HF model folder (default: the cached toy base)")
    ap.add_argument("--device", default="cpu", help="device of the in-process reference samplers (auto on a GPU box)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of this process (actors use cpus_per_actor)")
    args = ap.parse_args()
    if args.compare:
        raise SystemExit(0 if compare(*args.compare) else 1)
    torch.set_num_threads(args.threads)

    import ray

    from coevolve.config.base import EngineConfig
    from coevolve.engine import Engine, HFSampler, load_model
    from coevolve.engine import ray as engine_ray
    from coevolve.types import SamplingParams
    from coevolve.world.toy import ensure_base
    from coevolve.world.toy.world import ToyWorld

    base = args.model or ensure_base(None)
    model, tok = load_model(str(base), device=args.device)
    world = ToyWorld()
    tasks = world.draw(random.Random(0), args.prompts)
    prompts = [world.prompter.solver(t.question) for t in tasks]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new, seed=1234)
    stop = world.prompter.stop("answer")
    params.stop = stop
    print(
        f"model {base} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f} M params), "
        f"{args.prompts} prompts x {args.n}, max_new_tokens {args.max_new}, {args.actors} actors, "
        f"driver threads {args.threads}"
    )

    engine = EngineConfig(
        kind="ray",
        tensor_parallel_size=args.tp,
        ray={"num_actors": args.actors or None, "actor_engine": args.actor_engine},
    )
    t0 = time.perf_counter()
    run_engine = Engine(engine)
    started = engine_ray._init_ray(engine)
    t1 = time.perf_counter()
    pool = run_engine.shared("ray-pool", lambda: engine_ray.RayPool.start(engine))
    pool.started_ray = started
    t2 = time.perf_counter()
    sampler = run_engine.sampler(model, tok)
    t3 = time.perf_counter()
    print(
        f"start-up: ray.init {t1 - t0:.2f} s + placement group and {len(pool.actors)} actors {t2 - t1:.2f} s "
        f"+ first weight slot {t3 - t2:.2f} s = {t3 - t0:.2f} s"
    )
    pids = ray.get([a.pid.remote() for a in pool.actors])
    print("memory per actor (VmRSS, one toy slot): " + ", ".join(f"{rss_mib(p):.0f} MiB" for p in pids))

    t_rt, _ = timed(lambda: ray.get([a.pid.remote() for a in pool.actors]), 20)
    print(f"round trip of a no-op call to every actor: {t_rt * 1000:.1f} ms (median of 20)")

    local_prompt = HFSampler(model, tok, seed_scope="prompt")
    local_call = HFSampler(model, tok)
    rows = []
    for label, ps, n in (("big", prompts, args.n), ("tiny", prompts[:1], 1)):
        reps = args.reps if label == "big" else 10 * args.reps  # tiny calls: more reps against noise
        t_pool, out_pool = timed(lambda ps=ps, n=n: sampler.sample(ps, n, params), reps)
        t_lp, out_lp = timed(lambda ps=ps, n=n: local_prompt.sample(ps, n, params), reps)
        t_lc, _ = timed(lambda ps=ps, n=n: local_call.sample(ps, n, params), reps)
        same = sum([c.token_ids for c in a] == [c.token_ids for c in b] for a, b in zip(out_pool, out_lp))
        rows.append((label, len(ps), n, t_pool, t_lp, t_lc, same))
    print(
        f"{'call':<6}{'prompts x n':>12}{'pool s':>9}{'hf prompt s':>13}{'hf call s':>11}{'pool - hf prompt':>18}"
        f"{'equal prompts':>15}"
    )
    for label, np_, n, tp, tlp, tlc, same in rows:
        print(
            f"{label:<6}{f'{np_} x {n}':>12}{tp:>9.3f}{tlp:>13.3f}{tlc:>11.3f}{tp - tlp:>+18.3f}{f'{same}/{np_}':>15}"
        )

    t4 = time.perf_counter()
    sampler.sync_weights(model)
    print(f"weight sync (broadcast, {len(pool.actors)} actors): {time.perf_counter() - t4:.3f} s")
    t5 = time.perf_counter()
    run_engine.close()
    print(f"shutdown: {time.perf_counter() - t5:.2f} s")


if __name__ == "__main__":
    main()
