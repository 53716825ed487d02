"""How long an ``engine=ray`` actor takes to build a slot from a config and a state dict: the way
actors do it (``module_from_state``: the module on the meta device, the state dict's tensors
handed to it) against building it with ``from_config`` (every weight randomly initialised) and
then loading the state dict. Both on the CPU, with the actor's torch thread count
(``engine.ray.cpus_per_actor``, default 1); the state dict is a host snapshot in ``--dtype``, as
a driver puts it in Ray's object store. Prints the median of ``--reps`` builds of each and checks
the two modules hold equal weights and buffers.

Usage::

    PYTHONPATH=src python dev/perf/bench_slot_build.py --model PATH [--dtype bfloat16] [--threads 1] [--reps 3]

``PATH``: a model folder (its config and weights are read; SmolLM2-135M-Instruct is built under
``$COEVOLVE_CACHE/models`` by the real-model tests).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model folder (config.json and weights)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (engine.ray.cpus_per_actor)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM

    from coevolve.engine import load_model
    from coevolve.engine.weights import host_snapshot, module_from_state

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model, _ = load_model(args.model, device="cpu", dtype=args.dtype)
    config = model.config

    def old() -> torch.nn.Module:
        m = AutoModelForCausalLM.from_config(config, dtype=dtype)
        m.load_state_dict(host_snapshot(model, dtype))
        return m.eval()

    def new() -> torch.nn.Module:
        return module_from_state(config, host_snapshot(model, dtype), dtype)

    def snapshot_only() -> None:
        host_snapshot(model, dtype)

    times: dict[str, list[float]] = {
        "state dict copy (in both)": [],
        "from_config + load_state_dict": [],
        "module_from_state (meta)": [],
    }
    built = {}
    for _ in range(args.reps):
        for name, fn in zip(times, (snapshot_only, old, new)):
            t = time.perf_counter()
            built[name] = fn()
            times[name].append(time.perf_counter() - t)
    a, b = built["from_config + load_state_dict"], built["module_from_state (meta)"]
    same = all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values())) and all(
        torch.equal(x, y) for (_, x), (_, y) in zip(a.named_buffers(), b.named_buffers())
    )
    n = sum(p.numel() for p in model.parameters())
    print(
        f"model {args.model}: {n / 1e6:.1f} M parameters, {args.dtype}, {args.threads} torch thread(s), "
        f"median of {args.reps}"
    )
    for name, ts in times.items():
        print(f"  {name:32s} {statistics.median(ts):7.2f} s")
    print(f"  equal weights and buffers: {same}")


if __name__ == "__main__":
    main()
