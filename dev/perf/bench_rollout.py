"""Rollout throughput: ``hf`` (HFSampler, Hugging Face ``generate``) and ``vllm`` (VLLMSampler,
in-process vLLM) side by side in one run: same model, same prompts, same n, same token budget,
same seed, T=1. Prints one table row per (model, engine): generated tokens, seconds, tokens/s and
vllm's speed-up over hf; the vLLM engine start (and weight push) is timed separately and a
warm-up call is made first, so the figure is steady-state sampling.

Models: ``toy`` (the cached toy base, solver prompts), ``smollm2`` (SmolLM2-135M-Instruct with its
chat template, arithmetic questions as chats) or any local Hugging Face folder (plain-text
arithmetic prompts). Device: cuda when present (bf16), else cpu (fp32, as the samplers default).

``--preset smollm2/grpo`` renders the prompts as that preset's solver does (system text, its worked
examples as chat turns, chat template: every prompt shares a ~100-token prefix) from the arith world,
and takes the preset's ``engine.prefix_caching`` and ``model.dtype`` (both engines): the GRPO rollout
of a real run. ``--prefix-caching`` / ``--dtype`` set them by hand.

Usage (vLLM installed, e.g. the vLLM lane's environment)::

    python dev/perf/bench_rollout.py [--models toy,smollm2] [--prompts 128] [--n 8] \
        [--max-new-tokens 64] [--threads N] [--engines hf,vllm] [--preset smollm2/grpo]

Defaults per model when not given: toy 128 prompts x 8 x 64 tokens, smollm2 32 x 4 x 128.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from typing import Any

import torch

from coevolve.config.base import EngineConfig
from coevolve.engine import load_model, make_sampler, resolve_device
from coevolve.types import SamplingParams

DEFAULTS = {"toy": (128, 8, 64), "smollm2": (32, 4, 128)}
FALLBACK = (64, 8, 256)


@dataclass
class Row:
    model: str
    engine: str
    prompts: int
    n: int
    max_new: int
    tokens: int
    seconds: float
    start: float | None = None

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def model_and_prompts(
    name: str, count: int, device: str, dtype: str, preset: Any = None
) -> tuple[Any, Any, list[str], str]:
    """(model, tokenizer, prompts, folder) for ``name``: toy, smollm2 or a folder; with ``preset``
    (a loaded recipe config) the prompts are its solver's, over questions of its world."""
    from coevolve.world.toy import ToyPrompter, ensure_base, sample_tasks

    if preset is not None and name != "toy":
        from coevolve.models import ensure_smollm2
        from coevolve.world import make_world

        path = str(ensure_smollm2()) if name == "smollm2" else name
        model, tok = load_model(path, device=device, dtype=dtype)
        world = make_world(preset, tok, lambda s: None)
        return model, tok, [world.prompter.solver(t.question) for t in world.draw(random.Random(0), count)], path
    tasks = sample_tasks(random.Random(0), count)
    if name == "toy":
        path = str(ensure_base())
        model, tok = load_model(path, device=device, dtype=dtype)
        return model, tok, [ToyPrompter().solver(t.question) for t in tasks], path
    if name == "smollm2":
        from coevolve.models import ensure_smollm2

        path = str(ensure_smollm2())
    else:
        path = name
    model, tok = load_model(path, device=device, dtype=dtype)
    questions = [f"What is {t.question.rstrip('=')}? Think step by step, then give the answer." for t in tasks]
    if getattr(tok, "chat_template", None):
        prompts = [
            tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in questions
        ]
    else:
        prompts = [f"Question: {q}\nAnswer:" for q in questions]
    return model, tok, prompts, path


def measure(sampler: Any, prompts: list[str], n: int, params: SamplingParams) -> tuple[int, float]:
    """(generated tokens, seconds) of one ``sample`` call."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = sampler.sample(prompts, n, params)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return sum(len(c.token_ids) for g in out for c in g), time.perf_counter() - t0


def bench_model(name: str, args: argparse.Namespace, device: str, dtype: str) -> list[Row]:
    count, n, max_new = DEFAULTS.get(name, FALLBACK)
    count, n, max_new = args.prompts or count, args.n or n, args.max_new_tokens or max_new
    model, tok, prompts, _ = model_and_prompts(name, count, device, dtype, args.preset_cfg)
    model.eval()
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new, seed=args.seed)
    if args.preset_cfg is not None:
        from coevolve.world import make_world

        params.stop = make_world(args.preset_cfg, tok, lambda s: None).prompter.stop("answer")
    label = "smollm2" if name == "smollm2" else ("toy" if name == "toy" else name.rstrip("/").split("/")[-1])
    rows = []
    for engine in args.engines:
        cfg = EngineConfig(
            kind=engine,
            max_batch=args.max_batch,
            kv_cache_gib=args.kv_cache_gib,
            gpu_memory_utilization=args.gpu_memory_utilization,
            prefix_caching=args.prefix_caching,
            token_draw=args.token_draw,
        )
        t0 = time.perf_counter()
        sampler = make_sampler(cfg, model, tok)
        start = time.perf_counter() - t0
        measure(sampler, prompts[: max(1, len(prompts) // 8)], 1, params)  # warm-up (kernels, allocator)
        tokens, seconds = measure(sampler, prompts, n, params)
        rows.append(Row(label, engine, len(prompts), n, max_new, tokens, seconds, start if engine == "vllm" else None))
        print(
            f"  {label:10s} {engine:5s} {tokens:8d} tokens in {seconds:7.2f} s = {tokens / seconds:9.0f} tokens/s",
            flush=True,
        )
        close = getattr(sampler, "close", None)
        if close is not None:
            close()
    return rows


def table(rows: list[Row], device: str, dtype: str, threads: int, prefix: Any = None, draw: str = "multinomial") -> str:
    head = (
        f"device {device}, dtype {dtype}, torch threads {threads}, T=1, prefix caching {prefix}, hf token draw {draw}\n\n"
        "| model | engine | prompts x n | max new | tokens | seconds | tokens/s | vs hf | engine start s |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    hf = {r.model: r.tps for r in rows if r.engine == "hf"}
    lines = [head]
    for r in rows:
        vs = f"{r.tps / hf[r.model]:.1f}x" if r.model in hf and r.engine != "hf" else ""
        start = f"{r.start:.1f}" if r.start is not None else ""
        lines.append(
            f"| {r.model} | {r.engine} | {r.prompts} x {r.n} | {r.max_new} | {r.tokens} | {r.seconds:.2f} | "
            f"{r.tps:.0f} | {vs} | {start} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="toy,smollm2", help="comma list: toy, smollm2, or model folders")
    ap.add_argument("--engines", default="hf,vllm", help="comma list of engines to compare")
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--max-batch", type=int, default=256, help="engine.max_batch (both engines)")
    ap.add_argument("--kv-cache-gib", type=float, default=None, help="engine.kv_cache_gib (vllm)")
    ap.add_argument(
        "--gpu-memory-utilization", type=float, default=0.5, help="engine.gpu_memory_utilization (vllm, CUDA)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--preset", default=None, help="render prompts as this recipe preset's solver (e.g. smollm2/grpo)")
    ap.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument(
        "--token-draw", default="multinomial", choices=("multinomial", "inverse-cdf"), help="engine.token_draw (hf)"
    )
    ap.add_argument("--dtype", default=None, help="model dtype (default: the preset's, else bf16 on CUDA, fp32 on CPU)")
    args = ap.parse_args()
    args.preset_cfg = None
    if args.preset:
        from coevolve.config import load_config

        args.preset_cfg = load_config(None, [args.preset])
        if args.prefix_caching is None:
            args.prefix_caching = args.preset_cfg.engine.prefix_caching
        args.dtype = args.dtype or args.preset_cfg.model.dtype
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = str(resolve_device(args.device))
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    rows: list[Row] = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        print(f"[{name}]", flush=True)
        rows += bench_model(name, args, device, dtype)
    print()
    print(table(rows, device, dtype, torch.get_num_threads(), args.prefix_caching, args.token_draw))


if __name__ == "__main__":  # vLLM may spawn helper processes: keep module import side-effect free
    main()
