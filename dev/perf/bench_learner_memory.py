"""Learner memory and speed with each issue-10 feature on and off, and ``coevolve plan``'s estimate
beside the measured peak.

CPU (always): SmolLM2-135M-Instruct in fp32 (the cached offline build), one GRPO learner step on
a synthetic batch (random token ids, every completion at the cap, rewards 0/1 so every group
trains). Each configuration runs in a fresh subprocess: load, build the learner, one tiny warm-up
step (allocates AdamW's m and v), reset the kernel's peak-RSS mark (``/proc/self/clear_refs``),
one measured step. **CPU peak** = VmHWM - VmRSS before the step (``/proc/self/status``), with
``MALLOC_MMAP_THRESHOLD_`` fixed so freed tensors go back to the kernel and are not silently
reused. The plan column is ``plan.role_memory(...).learner_transient`` for the same batch (the
step's gradients + activations + logits, or the optimizer's temporaries; the state is resident).

CUDA (where it exists; written, not run on the CPU machine): Qwen3-0.6B / 4B (full) and 8B
(LoRA) shapes with random weights in bf16, built from a config (no download). Peak =
``torch.cuda.max_memory_allocated`` over the measured step (weights and state included), next to
the plan's ``train_peak``. An out-of-memory configuration is reported as OOM.

Also prints the CPU rates ``coevolve.plan.DEVICES['cpu']`` uses (``--rates``): effective learner
FLOP/s and HF generate's per-layer decode floor.

Usage: ``PYTHONPATH=src python dev/perf/bench_learner_memory.py [--rows 4] [--prompt 32]
[--completion 224] [--threads 2] [--rates] [--cuda-only]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CPU_CONFIGS: dict[str, dict[str, Any]] = {
    # micro-batches of rows/2 rows unless a token budget is set: from the second micro-batch on every
    # fp32 gradient exists, which is the steady state of a real step (hundreds of rows)
    "baseline (all off)": dict(gradient_checkpointing=False, logprob_chunk_tokens=0),
    "+ checkpointing": dict(gradient_checkpointing=True, logprob_chunk_tokens=0),
    "+ chunked log-probs (128)": dict(gradient_checkpointing=False, logprob_chunk_tokens=128),
    "+ token budget (1 row)": dict(gradient_checkpointing=False, logprob_chunk_tokens=0, budget_rows=1),
    "all on": dict(gradient_checkpointing=True, logprob_chunk_tokens=128, budget_rows=1),
    "defaults (auto)": dict(),
}
CUDA_MODELS = {
    "qwen3-0.6b": dict(
        hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=3072, tie_word_embeddings=True
    ),
    "qwen3-4b": dict(
        hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, intermediate_size=9728, tie_word_embeddings=True
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        num_hidden_layers=36,
        num_attention_heads=32,
        intermediate_size=12288,
        tie_word_embeddings=False,
    ),
}
CUDA_CONFIGS: dict[str, dict[str, Any]] = {
    "baseline (all off)": dict(gradient_checkpointing=False, logprob_chunk_tokens=0, fused_optimizer=False),
    "+ checkpointing": dict(gradient_checkpointing=True, logprob_chunk_tokens=0, fused_optimizer=False),
    "+ chunked log-probs": dict(gradient_checkpointing=False, logprob_chunk_tokens=1024, fused_optimizer=False),
    "+ token budget (2 rows)": dict(
        gradient_checkpointing=False, logprob_chunk_tokens=0, fused_optimizer=False, budget_rows=2
    ),
    "+ fused AdamW": dict(gradient_checkpointing=False, logprob_chunk_tokens=0, fused_optimizer=True),
    "all on": dict(gradient_checkpointing=True, logprob_chunk_tokens=1024, fused_optimizer=True, budget_rows=2),
    "all on + offload_optimizer": dict(
        gradient_checkpointing=True, logprob_chunk_tokens=1024, budget_rows=2, offload_optimizer=True
    ),
}


def groups_for(rows: int, prompt: int, completion: int, vocab: int, seed: int = 0) -> list[Any]:
    import random

    from coevolve.rl import RolloutGroup

    rng = random.Random(seed)
    G = 2 if rows % 4 else 4
    out = []
    for _ in range(rows // G):
        p = [rng.randrange(3, vocab) for _ in range(prompt)]
        out.append(
            RolloutGroup(
                p,
                [[rng.randrange(3, vocab) for _ in range(completion)] for _ in range(G)],
                [float(k % 2) for k in range(G)],
            )
        )
    return out


def learner_cfg(spec: dict[str, Any], rows: int, prompt: int, completion: int, **extra: Any) -> Any:
    from coevolve.rl import LearnerConfig

    spec = dict(spec)
    budget_rows = spec.pop("budget_rows", None)
    kw = dict(lr=1e-6, micro_batch_size=max(1, rows // 2), **spec, **extra)
    if budget_rows is not None:
        kw["max_tokens_per_micro_batch"] = budget_rows * (prompt + completion)
    return LearnerConfig(**kw)


def _status() -> dict[str, int]:
    out = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmHWM", "VmRSS")):
            k, v = line.split(":")
            out[k] = int(v.split()[0]) * 1024
    return out


# --------------------------------------------------------------------------- workers
def worker_cpu(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from coevolve.engine import load_model
    from coevolve.models import ensure_smollm2
    from coevolve.rl import Learner

    torch.set_num_threads(args.threads)
    model, _ = load_model(ensure_smollm2(), device="cpu", dtype="float32")
    cfg = learner_cfg(CPU_CONFIGS[name], args.rows, args.prompt, args.completion)
    lr = Learner(model, cfg)
    V = model.config.vocab_size
    lr.step(groups_for(2, 4, 2, V, seed=1))  # warm-up: allocates AdamW state, first-call caches
    batch = groups_for(args.rows, args.prompt, args.completion, V)
    open("/proc/self/clear_refs", "w").write("5")
    before = _status()["VmRSS"]
    t0 = time.perf_counter()
    m = lr.step(batch)
    dt = time.perf_counter() - t0
    peak = _status()["VmHWM"] - before
    return {
        "peak": peak,
        "seconds": dt,
        "tokens": m["n_tokens"],
        "micro_batches": m["micro_batches"],
        "ckpt": lr.gradient_checkpointing,
        "chunk": lr.logprob_chunk,
    }


def worker_cuda(model_name: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from coevolve.rl import Learner

    shape = dict(
        CUDA_MODELS[model_name], vocab_size=151936, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960
    )
    lora = model_name == "qwen3-8b"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(Qwen3Config(**shape)).to(torch.bfloat16)
    cfg = learner_cfg(
        CUDA_CONFIGS[name],
        args.rows,
        args.prompt,
        args.completion,
        lora=lora,
        lora_r=64,
        lora_alpha=128,
        lora_target_modules="all-linear",
    )
    try:
        lr = Learner(model, cfg)
        lr.step(groups_for(2, 4, 2, 151936, seed=1))
        batch = groups_for(args.rows, args.prompt, args.completion, 151936)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        m = lr.step(batch)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        return {
            "peak": torch.cuda.max_memory_allocated(),
            "seconds": dt,
            "tokens": m["n_tokens"],
            "micro_batches": m["micro_batches"],
            "ckpt": lr.gradient_checkpointing,
            "chunk": lr.logprob_chunk,
        }
    except torch.OutOfMemoryError:
        return {"peak": None, "oom": True}


def _sub(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    r = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]}
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- plan beside it
def plan_estimate(shape_cfg: dict[str, Any], cfg: Any, device: str, rows: int, prompt: int, completion: int) -> Any:
    from coevolve.plan import DEVICES, ModelShape, Train, role_memory

    shape = ModelShape.from_config(shape_cfg)
    dev = DEVICES[device]
    b = 2 if dev.kind == "cuda" else 4
    return role_memory("solver", shape, cfg, dev, b, Train("solver", 1, rows, prompt, completion), None)


def run_cpu(args: argparse.Namespace) -> None:
    from coevolve.models import ensure_smollm2

    path = ensure_smollm2()
    shape_cfg = json.loads((Path(path) / "config.json").read_text())
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    print(
        f"CPU: SmolLM2-135M fp32, {args.rows} rows x ({args.prompt} prompt + {args.completion} completion) tokens, "
        f"{args.threads} threads; peak = VmHWM delta over the step (optimizer state already allocated)"
    )
    print(
        f"{'configuration':<26}{'ckpt':>5}{'chunk':>6}{'mbs':>4}{'peak MiB':>10}{'plan MiB':>10}{'plan/meas':>10}"
        f"{'tokens/s':>10}"
    )
    for name in CPU_CONFIGS:
        r = _sub(["--worker", "cpu", "--config", name, *_common(args)], env)
        if "error" in r:
            print(f"{name:<26} error: {r['error']}")
            continue
        cfg = learner_cfg(CPU_CONFIGS[name], args.rows, args.prompt, args.completion)
        est = plan_estimate(shape_cfg, cfg, "cpu", args.rows, args.prompt, args.completion).learner_transient
        print(
            f"{name:<26}{'on' if r['ckpt'] else 'off':>5}{r['chunk'] or 'off':>6}{int(r['micro_batches']):>4}"
            f"{r['peak'] / 2**20:>10.0f}{est / 2**20:>10.0f}{est / max(1, r['peak']):>10.2f}"
            f"{r['tokens'] / r['seconds']:>10.1f}"
        )
    print(
        "fp32 gradient accumulation, fused AdamW and offload_optimizer act on half-precision models on a GPU: "
        "see the CUDA table (and tests/test_learner_memory_gpu.py)"
    )


def run_cuda(args: argparse.Namespace) -> None:
    import torch

    if not torch.cuda.is_available():
        print("CUDA: not available on this machine; the CUDA table was not run")
        return
    print(
        f"CUDA: {torch.cuda.get_device_name(0)}, bf16 random Qwen3-shaped models, {args.rows} rows x "
        f"({args.prompt} + {args.completion}) tokens; peak = torch.cuda.max_memory_allocated over one step"
    )
    print(
        f"{'model':<12}{'configuration':<28}{'mbs':>4}{'peak GiB':>10}{'plan GiB':>10}{'plan/meas':>10}{'tokens/s':>10}"
    )
    for model_name in args.cuda_models.split(","):
        shape_cfg = dict(
            CUDA_MODELS[model_name], vocab_size=151936, num_key_value_heads=8, head_dim=128, model_type="qwen3"
        )
        for name in CUDA_CONFIGS:
            r = _sub(["--worker", "cuda", "--model", model_name, "--config", name, *_common(args)], dict(os.environ))
            lora = model_name == "qwen3-8b"
            cfg = learner_cfg(
                CUDA_CONFIGS[name], args.rows, args.prompt, args.completion, lora=lora, lora_r=64, lora_alpha=128
            )
            est = plan_estimate(shape_cfg, cfg, "h200", args.rows, args.prompt, args.completion)
            plan_peak = est.weights + est.state + est.learner_transient
            if "error" in r or r.get("oom"):
                what = "OOM" if r.get("oom") else f"error: {r['error']}"
                print(f"{model_name:<12}{name:<28}{'':>4}{what:>10}{plan_peak / 2**30:>10.1f}")
                continue
            print(
                f"{model_name:<12}{name:<28}{int(r['micro_batches']):>4}{r['peak'] / 2**30:>10.1f}"
                f"{plan_peak / 2**30:>10.1f}{plan_peak / r['peak']:>10.2f}{r['tokens'] / r['seconds']:>10.0f}"
            )


def run_rates(args: argparse.Namespace) -> None:
    """The CPU entries of the plan's rates table: learner FLOP/s and HF decode floor per layer."""
    import torch

    from coevolve.engine import load_model
    from coevolve.models import ensure_smollm2
    from coevolve.rl import Learner

    torch.set_num_threads(args.threads)
    model, tok = load_model(ensure_smollm2(), device="cpu", dtype="float32")
    N = sum(p.numel() for p in model.parameters())
    lr = Learner(model, learner_cfg(CPU_CONFIGS["baseline (all off)"], args.rows, args.prompt, args.completion))
    lr.step(groups_for(2, 4, 2, model.config.vocab_size, seed=1))
    batch = groups_for(args.rows, args.prompt, args.completion, model.config.vocab_size)
    t0 = time.perf_counter()
    lr.step(batch)
    dt = time.perf_counter() - t0
    L, q = model.config.num_hidden_layers, model.config.num_attention_heads * model.config.head_dim
    tokens = args.rows * (args.prompt + args.completion)  # every row at its full length here
    flops = tokens * (6 * N + 6 * L * (args.prompt + args.completion) * q)
    print(
        f"CPU learner: {flops / dt / 1e12:.4f} TFLOP/s effective (SmolLM2 fp32, {args.threads} threads, {dt:.1f} s step)"
    )
    ids = tok("Hello, how are you?", return_tensors="pt")
    model.eval()

    def gen(n: int) -> float:  # min_new_tokens: exactly n decode steps, no early stop
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
        return time.perf_counter() - t

    gen(2)
    step = (gen(65) - gen(1)) / 64
    print(
        f"CPU HF generate: {step * 1e3:.1f} ms per decode step at batch 1 = {step / L * 1e3:.3f} ms per step and "
        f"layer (SmolLM2, {L} layers)"
    )


def _common(args: argparse.Namespace) -> list[str]:
    return [
        "--rows",
        str(args.rows),
        "--prompt",
        str(args.prompt),
        "--completion",
        str(args.completion),
        "--threads",
        str(args.threads),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--completion", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rates", action="store_true", help="also measure the CPU rates of the plan's table")
    ap.add_argument("--cuda-only", action="store_true")
    ap.add_argument("--cuda-models", default="qwen3-0.6b,qwen3-4b,qwen3-8b")
    ap.add_argument("--worker", choices=["cpu", "cuda"], help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "cpu":
        print(json.dumps(worker_cpu(args.config, args)))
        return
    if args.worker == "cuda":
        print(json.dumps(worker_cuda(args.model, args.config, args)))
        return
    if not args.cuda_only:
        run_cpu(args)
        if args.rates:
            run_rates(args)
    run_cuda(args)


if __name__ == "__main__":
    main()
