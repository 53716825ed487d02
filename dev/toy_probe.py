"""Measure a toy base model: held-out greedy/sampled accuracy, pass-rate band, direct-style share,
questioner validity and challenger focus-following (the figures ``build_base`` records).

Usage:
  PYTHONPATH=src python dev/toy_probe.py --model PATH          # re-measure a saved base
  PYTHONPATH=src python dev/toy_probe.py --build DIR --steps 600 --seed 0   # build + measure
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="a saved toy base folder to measure")
    ap.add_argument("--build", type=Path, help="build a new base into this folder first")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevolve.world.toy.measure import measure
    from coevolve.world.toy.pretrain import build_base

    if args.build is not None:
        t0 = time.time()
        path = build_base(args.build, steps=args.steps, seed=args.seed, eval_samples=args.samples)
        print(f"built {path} in {time.time() - t0:.1f}s")
        print((path / "toy_build.json").read_text())
        return
    if args.model is None:
        ap.error("give --model PATH or --build DIR")
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    t0 = time.time()
    figs = measure(model, tok, samples=args.samples, seed=args.seed)
    figs["measure_seconds"] = round(time.time() - t0, 1)
    print(json.dumps(figs, indent=2))


if __name__ == "__main__":
    main()
