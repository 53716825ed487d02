"""Solver GRPO step time: coevolve (HFSampler + Learner) vs TRL ``GRPOTrainer``, at two scales.

Scales (the same batch, prompts, lengths and seeds for both trainers):

- ``toy``: the toy-world prototype's GRPO step, 16 prompts x 8 answers of <= 48 tokens on the toy
  base model (fp32, 0.54 M parameters, vocabulary 104), fresh toy problems each step;
- ``smollm2``: SmolLM2-135M-Instruct (vocabulary 49,152), 8 prompts x 8 answers of <= 48 tokens from
  the arith world, rendered as the ``smollm2/grpo`` preset renders them (system text, two worked
  examples as chat turns, chat template: ~120 prompt tokens). coevolve runs the preset's engine and
  learner sections (bf16 weights with fp32 masters, prefix caching, ``share_prompt``, chunked
  log-probs); TRL gets the model folder with its own defaults (loaded in fp32, ``bf16=True`` autocast;
  ``--trl-dtype bfloat16`` loads it in bf16 instead).

Both: T=1, top_k=0, top_p=1, lr 3e-5, beta 0, eps 0.2/0.28, token-mean (TRL ``loss_type="dapo"``), no
vLLM, no gradient checkpointing (TRL's default is on: it would only slow TRL), reward = exact match of
the last ``\\boxed{}`` with the oracle. Each trainer runs in its own process (so peak RSS is its own);
``--rounds R`` alternates them back to back, R times, and prints each round's ratio (robust to the load
of a shared machine) with ``uptime``'s load average. A step is split into sampling (the generate call:
coevolve ``HFSampler.sample``, TRL ``GRPOTrainer._generate``) and learning (everything else of the step:
rewards, log-probs, loss, backward, optimizer). The first step of each process is a warm-up, excluded.
Wall and CPU time (``time.process_time``: at one thread it counts what the process computed, not the
time it waited for a core) are both printed, with ratios of each.

Usage::

    PYTHONPATH=src python dev/perf/bench_grpo_step.py [--scales toy,smollm2] [--steps 4] [--rounds 2] \
        [--threads 1] [--no-trl] [--profile] [--set engine.token_draw=inverse-cdf]

``--profile`` prints a cProfile (cumulative) and a torch.profiler op table of coevolve's last step.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
SCALES = {"toy": (16, 8, 48), "smollm2": (8, 8, 48)}  # prompts, answers per prompt, max new tokens
LR = 3e-5


def reward(text: str, answer: str) -> float:
    """1 when the last ``\\boxed{...}`` equals the oracle answer."""
    found = BOXED.findall(text)
    return 1.0 if found and found[-1].strip() == answer else 0.0


@dataclass
class World:
    """What both trainers get at one scale: the model (or its folder), the prompts per step."""

    model: Any
    tok: Any
    path: str
    data: list[list[tuple[str, str]]]  # per step: (prompt text, oracle answer) for each prompt
    cfg: Any = None  # the coevolve preset (smollm2)


def load_world(scale: str, steps: int, dtype: str | None = None) -> World:
    from coevolve.engine import load_model

    n_prompts = SCALES[scale][0]
    rng = random.Random(0)
    if scale == "toy":
        from coevolve.world.toy import ToyPrompter, ensure_base, sample_tasks

        path = str(ensure_base())
        model, tok = load_model(path, device="cpu", dtype="fp32")
        pr = ToyPrompter()
        data = [[(pr.solver(t.question), str(t.answer)) for t in sample_tasks(rng, n_prompts)] for _ in range(steps)]
        return World(model, tok, path, data)
    from coevolve.config import load_config
    from coevolve.models import ensure_smollm2
    from coevolve.world import make_world

    cfg = load_config("grpo", ["smollm2/grpo"])
    path = str(ensure_smollm2())
    model, tok = load_model(path, device="cpu", dtype=dtype or cfg.model.dtype)
    world = make_world(cfg, tok, lambda s: None)
    data = [
        [(world.prompter.solver(t.question), str(t.answer)) for t in world.draw(rng, n_prompts)] for _ in range(steps)
    ]
    return World(model, tok, path, data, cfg)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def overridden(section: Any, name: str, sets: list[str]) -> Any:
    """``section`` (a config model) with the ``--set name.key=value`` overrides that name it."""
    import yaml

    upd = {}
    for kv in sets:
        key, _, value = kv.partition("=")
        head, _, field = key.partition(".")
        if head == name:
            upd[field] = yaml.safe_load(value)
    return type(section).model_validate({**section.model_dump(), **upd}) if upd else section


def run_coevolve(scale: str, steps: int, profile: bool, sets: list[str]) -> dict:
    from coevolve.config.base import EngineConfig
    from coevolve.engine import HFSampler
    from coevolve.rl import Learner, LearnerConfig, RolloutGroup
    from coevolve.types import SamplingParams, Stop

    w = load_world(scale, steps)
    _, G, max_new = SCALES[scale]
    if w.cfg is None:  # toy: the toy grpo defaults, one micro-batch
        engine = overridden(EngineConfig(max_batch=256), "engine", sets)
        lcfg = overridden(LearnerConfig(lr=LR, micro_batch_size=len(w.data[0]) * G), "learner", sets)
        stop = Stop()
    else:  # the preset's engine and learner sections
        engine = overridden(w.cfg.engine, "engine", sets)
        lcfg = overridden(w.cfg.learner.model_copy(update={"lr": LR}), "learner", sets)
        from coevolve.world import make_world

        stop = make_world(w.cfg, w.tok, lambda s: None).prompter.stop("answer")
    sampler = HFSampler.for_model(engine, w.model, w.tok)
    learner = Learner(w.model, lcfg, tokenizer=w.tok)
    out: dict[str, list[float]] = {"sample": [], "learn": [], "tokens": [], "reward": [], "steps": []}
    out.update(sample_cpu=[], learn_cpu=[])

    def step(i: int, batch: list[tuple[str, str]]) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        outs = sampler.sample(
            [p for p, _ in batch],
            G,
            SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new, seed=i, stop=stop),
        )
        c1, t1 = time.process_time(), time.perf_counter()
        groups = [
            RolloutGroup(o[0].prompt_ids, [c.token_ids for c in o], [reward(c.text, a) for c in o])
            for o, (_, a) in zip(outs, batch)
        ]
        m = learner.step(groups)
        c2, t2 = time.process_time(), time.perf_counter()
        out["sample"].append(t1 - t0)
        out["learn"].append(t2 - t1)
        out["sample_cpu"].append(c1 - c0)
        out["learn_cpu"].append(c2 - c1)
        out["tokens"].append(sum(len(c.token_ids) for o in outs for c in o))
        out["reward"].append(m["reward_mean"])
        out["steps"].append(max(len(c.token_ids) for o in outs for c in o))  # decode steps the call ran

    for i, batch in enumerate(w.data[:-1] if profile else w.data):
        step(i, batch)
    if profile:
        print_profile(lambda: step(len(w.data) - 1, w.data[-1]))
    out["peak_rss_mib"] = peak_rss_mib()
    out["rates"] = plan_rates(w.model, lcfg, out, len(w.data[0]), G, max_new, "toy" if w.cfg is None else "arith")
    return out


def plan_rates(model: Any, lcfg: Any, out: dict, n_prompts: int, G: int, max_new: int, world: str) -> dict[str, float]:
    """The measured steps in the terms of ``coevolve plan``'s CPU rates (``coevolve.plan.devices``),
    counted as the plan counts them: a sampler call runs every row to the cap (``max_new`` decode
    steps; the toy's calls end earlier, when their last row does), giving the decode rate (2 x
    parameters x rows FLOP a step) and the cost per row and step; the learner's rate by
    ``train_flops`` and its time per token pass and layer, with the plan's own token counts (its
    assumed prompt length, completions at ``COMPLETION_FILL`` of the cap), so the plan gives back the
    measured time at this shape. From CPU time (one thread: the wall time of a core of its own)."""
    from coevolve.plan.shapes import ModelShape
    from coevolve.plan.timing import train_flops, train_tokens
    from coevolve.plan.work import PROMPT_TOKENS, Train

    k = slice(1, None) if len(out["sample"]) > 1 else slice(None)
    shape = ModelShape.from_config(model.config.to_dict())
    rows, steps = n_prompts * G, max_new * len(out["steps"][k])
    sample, learn = sum(out["sample_cpu"][k]), sum(out["learn_cpu"][k])  # CPU time: what a quiet core takes
    t = Train("solver", 1, rows, PROMPT_TOKENS[world]["answer"], max_new, group=G)
    n = len(out["learn"][k])
    return {
        "decode_tflops": 2 * shape.n_params * rows * steps / sample / 1e12,
        "us_per_row_step": sample / (rows * steps) * 1e6,
        "learn_tflops": n * train_flops(t, 1, shape, lcfg, False) / learn / 1e12,
        "learn_us_per_token_layer": learn / (n * train_tokens(t, 1, lcfg.share_prompt) * shape.layers) * 1e6,
    }


def print_profile(fn: Any) -> None:
    """cProfile (cumulative, top 40) and torch.profiler's op table (self CPU, top 30) of ``fn``."""
    import cProfile
    import io
    import pstats

    import torch
    from torch.profiler import ProfilerActivity, profile

    pr = cProfile.Profile()
    pr.enable()
    fn()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40)
    print(s.getvalue(), file=sys.stderr)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)
    del torch


def run_trl(scale: str, steps: int, trl_dtype: str | None) -> dict:
    import warnings

    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    warnings.filterwarnings("ignore")
    w = load_world(scale, steps, dtype="fp32")
    n_prompts, G, max_new = SCALES[scale]
    # each prompt G times in a row: TRL's RepeatSampler (no shuffle) then draws exactly our batches
    rows = [{"prompt": p, "answer": a} for batch in w.data for p, a in batch]

    def acc(prompts: list[str], completions: list[str], answer: list[str], **kw: Any) -> list[float]:
        return [reward(c, a) for c, a in zip(completions, answer)]

    out: dict[str, Any] = {"step": [], "sample": [], "tokens": [], "reward": [], "step_cpu": [], "sample_cpu": []}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.c0, self.t0 = time.process_time(), time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            out["step"].append(time.perf_counter() - self.t0)
            out["step_cpu"].append(time.process_time() - self.c0)

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "reward" in logs:
                out["reward"].append(float(logs["reward"]))
                out["tokens"].append(float(logs["completions/mean_length"]) * n_prompts * G)

    toy = scale == "toy"
    with tempfile.TemporaryDirectory() as tmp:
        # toy: one micro-batch of the whole batch (as coevolve's); smollm2: micro-batches of 8 rows, as the
        # preset's learner (the whole 64-row batch's fp32 logits, 64 x ~170 x 49,152, do not fit our machine)
        mb = n_prompts * G if toy else 8
        extra: dict[str, Any] = {"bf16": False} if toy else {}
        if trl_dtype and not toy:
            extra["model_init_kwargs"] = {"dtype": trl_dtype}
        cfg = GRPOConfig(
            output_dir=tmp,
            per_device_train_batch_size=mb,
            gradient_accumulation_steps=n_prompts * G // mb,
            num_generations=G,
            max_completion_length=max_new,
            learning_rate=LR,
            lr_scheduler_type="constant",
            gradient_checkpointing=False,
            use_cpu=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            beta=0.0,
            loss_type="dapo",
            epsilon=0.2,
            epsilon_high=0.28,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            max_steps=steps,
            seed=0,
            shuffle_dataset=False,
            disable_tqdm=True,
            **extra,
        )
        trainer = GRPOTrainer(
            model=w.model if toy else w.path,
            reward_funcs=[acc],
            args=cfg,
            train_dataset=Dataset.from_list(rows),
            processing_class=w.tok,
            callbacks=[Timer()],
        )
        del w.model
        trainer.remove_callback(PrinterCallback)
        gen = trainer._generate

        def timed_generate(prompts: list) -> Any:
            c0, t0 = time.process_time(), time.perf_counter()
            r = gen(prompts)
            out["sample"].append(time.perf_counter() - t0)
            out["sample_cpu"].append(time.process_time() - c0)
            return r

        trainer._generate = timed_generate
        trainer.train()
    if len(out["step"]) != len(out["sample"]):
        raise SystemExit(f"TRL: {len(out['step'])} optimizer steps but {len(out['sample'])} generate calls")
    out["learn"] = [s - g for s, g in zip(out.pop("step"), out["sample"])]
    out["learn_cpu"] = [s - g for s, g in zip(out.pop("step_cpu"), out["sample_cpu"])]
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def summary(r: dict) -> dict:
    """Means over the steps after the first (the warm-up)."""
    k = slice(1, None) if len(r["sample"]) > 1 else slice(None)
    s, lrn = statistics.mean(r["sample"][k]), statistics.mean(r["learn"][k])
    s_cpu, lrn_cpu = statistics.mean(r["sample_cpu"][k]), statistics.mean(r["learn_cpu"][k])
    toks = statistics.mean(r["tokens"][k])
    return {
        "sample": s,
        "learn": lrn,
        "total": s + lrn,
        "sample_cpu": s_cpu,
        "learn_cpu": lrn_cpu,
        "total_cpu": s_cpu + lrn_cpu,
        "tokens": toks,
        "sample_tok_s": toks / s,
        "step_tok_s": toks / (s + lrn),
        "reward": statistics.mean(r["reward"]) if r["reward"] else float("nan"),
        "rss": r["peak_rss_mib"],
        "rates": r.get("rates"),
    }


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    if args.worker == "coevolve":
        r = run_coevolve(args.scale, args.steps, args.profile, args.set)
    else:
        r = run_trl(args.scale, args.steps, args.trl_dtype)
    print("RESULT " + json.dumps(r), flush=True)


def spawn(who: str, scale: str, args: argparse.Namespace, sets: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--worker", who, "--scale", scale, "--steps", str(args.steps)]
    cmd += ["--threads", str(args.threads)] + (["--profile"] if args.profile and who == "coevolve" else [])
    cmd += ["--trl-dtype", args.trl_dtype] if args.trl_dtype else []
    cmd += [f"--set={kv}" for kv in sets]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if args.profile and who == "coevolve":
        print(
            p.stderr[max(0, p.stderr.find("   Ordered by") - 200) :] if "Ordered by" in p.stderr else p.stderr[-3000:]
        )
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"{who} {scale} failed (rc {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return summary(json.loads(lines[-1][len("RESULT ") :]))


def line(who: str, s: dict) -> str:
    text = (
        f"    {who:9s} sampling {s['sample']:7.3f} s | learning {s['learn']:7.3f} s | step {s['total']:7.3f} s | "
        f"{s['tokens']:6.0f} completion tokens: {s['sample_tok_s']:6.0f} tok/s sampling, {s['step_tok_s']:6.0f} "
        f"tok/s step | peak RSS {s['rss']:6.0f} MiB | reward {s['reward']:.3f}"
        f"\n      CPU time: sampling {s['sample_cpu']:7.3f} s | learning {s['learn_cpu']:7.3f} s | "
        f"step {s['total_cpu']:7.3f} s"
    )
    r = s.get("rates")
    if r:
        text += (
            f"\n      plan rates (CPU time): decode {r['decode_tflops']:.4f} TFLOP/s = {r['us_per_row_step']:.1f} us per row and "
            f"decode step (every call to the cap); learner {r['learn_tflops']:.4f} TFLOP/s as the plan counts = "
            f"{r['learn_us_per_token_layer']:.1f} us per token pass and layer"
        )
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="toy,smollm2", help="comma list of: " + ", ".join(SCALES))
    ap.add_argument("--steps", type=int, default=4, help="steps per process (the first is a warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="coevolve then TRL, back to back, this many times")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--profile", action="store_true", help="print coevolve's profile of its last step")
    ap.add_argument("--trl-dtype", default=None, help="TRL's model dtype (smollm2; default: TRL's own, fp32)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        help="coevolve's engine./learner. settings on top of the scale's (e.g. engine.token_draw=inverse-cdf)",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="also run coevolve with these comma-separated settings each round (e.g. engine.token_draw=inverse-cdf)",
    )
    ap.add_argument("--worker", choices=("coevolve", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--scale", choices=tuple(SCALES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    variants = [("coevolve", args.set)] + [
        (f"coevolve+{i + 1}", args.set + v.split(",")) for i, v in enumerate(args.variant)
    ]
    for i, v in enumerate(args.variant):
        print(f"coevolve+{i + 1}: coevolve with {v}")
    for scale in [s.strip() for s in args.scales.split(",") if s.strip()]:
        n, G, max_new = SCALES[scale]
        print(
            f"[{scale}] {n} prompts x {G} answers <= {max_new} tokens, {args.steps} steps a process "
            f"(first excluded), {args.threads} thread(s)"
            + (f"; coevolve with {', '.join(args.set)}" if args.set else ""),
            flush=True,
        )
        ratios: dict[str, list[float]] = {}
        for rnd in range(args.rounds):
            load = os.getloadavg()
            print(f"  round {rnd + 1} (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})", flush=True)
            runs = []
            for name, sets in variants:
                runs.append((name, spawn("coevolve", scale, args, sets)))
                print(line(name, runs[-1][1]), flush=True)
            if not args.no_trl:
                runs.append(("TRL", spawn("trl", scale, args, [])))
                print(line("TRL", runs[-1][1]), flush=True)
            t = runs[-1][1]
            for name, c in runs:
                part = "sampling" if c["sample"] >= c["learn"] else "learning"
                share = max(c["sample"], c["learn"]) / c["total"]
                vs = ""
                if not args.no_trl and name != "TRL":
                    vs = (
                        f"; / TRL: step {c['total'] / t['total']:.2f}x, sampling {c['sample'] / t['sample']:.2f}x, "
                        f"learning {c['learn'] / t['learn']:.2f}x (CPU time: step {c['total_cpu'] / t['total_cpu']:.2f}x, "
                        f"sampling {c['sample_cpu'] / t['sample_cpu']:.2f}x, learning {c['learn_cpu'] / t['learn_cpu']:.2f}x)"
                    )
                    ratios.setdefault(name, []).append(c["total"] / t["total"])
                    ratios.setdefault(name + " (CPU time)", []).append(c["total_cpu"] / t["total_cpu"])
                print(f"    {name}: {part} dominates ({share:.0%} of the step){vs}", flush=True)
        for name, rs in ratios.items():
            print(f"  [{scale}] {name} / TRL step time, median of {len(rs)} round(s): {statistics.median(rs):.2f}x")


if __name__ == "__main__":
    main()
