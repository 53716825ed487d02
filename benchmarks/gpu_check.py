"""Device check: what one GPU machine can tell about coevolve's CUDA paths without vLLM, Ray or
verl, in one process, with no downloads (random-weight models built from configs the script
writes; the toy world for the recipes). docs/gpu.md has the device command and what it shows.

Parts, in order (``--part NAME`` reruns one, repeatable):

  rates     torch / transformers / GPU versions; device-to-device copy bandwidth and bf16
            matmul rate (the plan's ``mem_gbps`` and ``matmul_tflops``)
  learner   a Qwen3-4B-shaped learner with the real ``d2evo`` preset's learner section, one step
            of capped rows at its micro-batch budget: peak memory next to ``coevolve plan``'s
            ``role_memory``, step time next to the plan's estimate for the same tokens, measured
            MFU; offload/onload of the state; ``close()`` gives the state back
  wake      that learner's state on the GPU after a step, PyTorch's cache emptied: free memory
            against the ``engine.gpu_memory_utilization`` the plan derives for ``engine=vllm``
            (what a vLLM wake would find)
  offload   a 4B ``learner.offload_optimizer`` step at the worst micro-batch: its peak against
            the plan (fp32 gradient sums on the GPU, masters and AdamW state on the host)
  numerics  bf16 on the device (Qwen3-0.6B shape): chunked vs plain log-prob backward against an
            fp32 reference, token-budget micro-batches vs one, fused vs foreach AdamW, two learners
            in turn on one model, ``offload_optimizer`` (gradients to the host once per step)
  lora      a LoRA step on the 0.6B shape: the weights a vLLM push sends (W + ΔW) in a plain
            model give the unmerged LoRA model's forward, and equal PEFT's ``merge_and_unload``
  sampler   the HF sampler at the preset's KV budget (96 rows x 4k context, beside the 4B
            weights): its memory next to the plan's, decode ms per step at that context and at
            short context (the plan's launch-bound floor)
  recipes   one tiny round of grpo, d2evo and diagevo in the toy world, on the device in bf16

Every part prints one ``RESULT {json}`` line ({"part", "ok", "seconds", figures...}; a part
that fails prints ``"ok": false`` and its error, and the next part runs), and the results go to
``<out>/gpu_check.json`` and ``<out>/results.jsonl`` (``--out``, default ``$OUT`` or
./gpu_check_out), rewritten after every part. ``--budget SECONDS`` (default 330) skips the parts
that would start after it. ``--dry-run`` runs the same code on CPU with tiny shapes (checks the
script, measures nothing).

On a machine without a package registry: ``benchmarks/gpu_carry.py`` prepares, where pip works,
a folder of the few wheels coevolve needs beyond the GPU image (pydantic and its helpers for the
configs, math-verify and its parser for the grader) and the built toy base; ``--carry DIR``
installs those wheels into ``DIR/site`` (``pip install --no-index --target``) and uses its toy
base, and the check puts this checkout's ``src/`` on the path itself:

    python3 benchmarks/gpu_check.py --carry .gpu_carry --out "$OUT"

Disk: the recipes write toy-sized run folders (a few MB) to a temporary folder, removed after.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

QWEN3_4B = dict(
    hidden_size=2560,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=9728,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
)
"""Qwen3-4B-Base's shapes (its config.json)."""
QWEN3_06B = dict(
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
)
TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=2048,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)
GiB = float(1 << 30)


@dataclass(frozen=True)
class Scale:
    """Sizes of one check: ``FULL`` on the GPU, ``DRY`` (same code, tiny) on CPU."""

    device: str
    big: dict[str, Any]  # the learner / sampler model
    small: dict[str, Any]  # the numerics model
    copy_bytes: int
    matmul_n: int
    learner_rows: int  # capped rows of the measured learner step
    prompt: int
    cap: int  # completion cap (the preset's sampling.max_new_tokens on the GPU)
    micro_tokens: int | None  # learner.max_tokens_per_micro_batch; None = the preset's
    num_rows: int  # numerics batch
    num_prompt: int
    num_completion: int
    num_chunk: int
    kv_rows: int
    kv_prompt: int
    kv_new: int
    decode_rows: int
    decode_prompt: int
    decode_new: int
    recipe_overrides: tuple[str, ...] = ()
    preset_overrides: tuple[str, ...] = ()


FULL = Scale(
    "cuda",
    QWEN3_4B,
    QWEN3_06B,
    copy_bytes=4 << 30,
    matmul_n=8192,
    learner_rows=10,
    prompt=384,
    cap=4096,
    micro_tokens=None,
    num_rows=8,
    num_prompt=128,
    num_completion=512,
    num_chunk=1024,
    kv_rows=96,
    kv_prompt=4088,
    kv_new=8,
    decode_rows=256,
    decode_prompt=128,
    decode_new=64,
    recipe_overrides=("model.device=cuda", "model.dtype=bfloat16"),
)
DRY = Scale(
    "cpu",
    TINY,
    TINY,
    copy_bytes=16 << 20,
    matmul_n=256,
    learner_rows=10,
    prompt=16,
    cap=48,
    micro_tokens=160,
    num_rows=6,
    num_prompt=12,
    num_completion=24,
    num_chunk=16,
    kv_rows=6,
    kv_prompt=60,
    kv_new=4,
    decode_rows=8,
    decode_prompt=12,
    decode_new=6,
    recipe_overrides=("model.device=cpu", "model.dtype=bfloat16"),
    # the 4B's auto rules (checkpointing from 0.5B parameters, chunks from a 32k vocabulary), forced
    preset_overrides=(
        "sampling.max_new_tokens=48",
        "learner.max_tokens_per_micro_batch=160",
        "learner.gradient_checkpointing=true",
        "learner.logprob_chunk_tokens=16",
    ),
)

RECIPES: dict[str, list[str]] = {  # one tiny round each, toy world (every phase runs)
    "grpo": [
        "solver.steps=2",
        "solver.prompts_per_step=4",
        "solver.group_size=4",
        "eval.heldout_size=12",
        "eval.samples=2",
        "sampling.max_new_tokens=40",
        "eval.max_new_tokens=40",
    ],
    "d2evo": [
        "rounds=1",
        "probe.size=4",
        "probe.samples=2",
        "difficulty.pool_size=16",
        "difficulty.samples=4",
        "questioner.steps=1",
        "questioner.prompts_per_step=4",
        "questioner.group_size=2",
        "questioner.reward.samples=4",
        "buffer.generate=8",
        "buffer.voting.samples=4",
        "solver.steps=1",
        "solver.prompts_per_step=4",
        "solver.group_size=2",
        "eval.heldout_size=12",
        "eval.samples=2",
        "eval.max_new_tokens=40",
        "sampling.max_new_tokens=40",
    ],
    "diagevo": [
        "rounds=1",
        "probe.size=4",
        "probe.samples=2",
        "challenger.steps=1",
        "challenger.prompts_per_step=4",
        "challenger.group_size=2",
        "challenger.reward.samples=4",
        "pool.size=16",
        "pool.voting.samples=4",
        "solver.steps=1",
        "solver.prompts_per_step=4",
        "solver.group_size=2",
        "memory.min_targeted=1",
        "memory.embedder=hash",
        "memory.max_diagnoses_per_round=8",
        "diagnoser.max_new_tokens=40",
        "eval.benches=[toy]",
        "eval.heldout_size=12",
        "eval.samples=0",
        "sampling.max_new_tokens=40",
    ],
}


@dataclass
class Ctx:
    scale: Scale
    work: Path  # scratch folder (model configs, run folders), removed at exit
    models: dict[str, Any] = field(default_factory=dict)  # built models, shared between parts
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def dev(self) -> torch.device:
        return torch.device(self.scale.device)


# ------------------------------------------------------------------------------------------ helpers
def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def allocated(dev: torch.device) -> float:
    return torch.cuda.memory_allocated() / GiB if dev.type == "cuda" else 0.0


def reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak(dev: torch.device) -> float:
    return torch.cuda.max_memory_allocated() / GiB if dev.type == "cuda" else 0.0


def free_memory(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def word_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer over ``vocab`` synthetic tokens (``w3`` ...; pad 0, BOS 1, EOS 2):
    real vocabulary size, no download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tk = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", bos_token="<s>", padding_side="left"
    )


def qwen3_config(shape: dict[str, Any]) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(bos_token_id=1, eos_token_id=2, pad_token_id=0, **shape)


def model_folder(ctx: Ctx, name: str, shape: dict[str, Any]) -> Path:
    """A folder with only a ``config.json`` (what ``coevolve plan`` and the presets read)."""
    d = ctx.work / name
    d.mkdir(parents=True, exist_ok=True)
    cfg = qwen3_config(shape)
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.save_pretrained(d)
    return d


def random_model(ctx: Ctx, shape: dict[str, Any], dtype: torch.dtype = torch.bfloat16) -> Any:
    """A random-weight Qwen3 of ``shape``, built directly on the device."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device(ctx.dev):
        model = Qwen3ForCausalLM(qwen3_config(shape)).to(dtype)
    model.generation_config.eos_token_id = 2
    return model


def cached_model(ctx: Ctx, key: str, shape: dict[str, Any]) -> Any:
    if key not in ctx.models:
        ctx.models[key] = random_model(ctx, shape)
    return ctx.models[key]


def rand_groups(
    seed: int, n: int, G: int, vocab: int, prompt: int, lengths: Callable[[random.Random], int]
) -> list[Any]:
    from coevolve.rl import RolloutGroup

    rng = random.Random(seed)
    return [
        RolloutGroup(
            [rng.randrange(3, vocab) for _ in range(prompt)],
            [[rng.randrange(3, vocab) for _ in range(lengths(rng))] for _ in range(G)],
            [float(k % 2) for k in range(G)],
        )
        for _ in range(n)
    ]


def plan_api() -> Any:
    """The planner's functions this check compares with (``coevolve.plan``)."""
    import coevolve.plan as plan

    return plan


def preset(ctx: Ctx, recipe: str, folder: Path, extra: tuple[str, ...] = ()) -> Any:
    """The real-model preset of ``recipe`` for the model in ``folder`` (what ``coevolve run`` uses)."""
    from coevolve.config import load_config

    return load_config(
        recipe, None, [f"model.path={folder}", f"model.device={ctx.scale.device}", *ctx.scale.preset_overrides, *extra]
    )


def learner_config(ctx: Ctx, *extra: str) -> Any:
    """The real ``d2evo`` preset's learner section for the 4B-shaped model (what the learner,
    wake and offload parts train with), ``extra`` overrides applied."""
    sc = ctx.scale
    cfg = preset(ctx, "d2evo", model_folder(ctx, "qwen3-4b", sc.big), ("learner.offload_when_idle=true", *extra))
    if sc.micro_tokens is None:
        return cfg.learner
    return cfg.learner.model_copy(update={"max_tokens_per_micro_batch": sc.micro_tokens})


def vllm_plan(ctx: Ctx) -> Any:
    """``coevolve plan d2evo`` of the 4B-shaped model with ``engine=vllm`` on this GPU (on the
    H200 table in a dry run): its derived ``engine.gpu_memory_utilization`` is what the engine
    starts and wakes with beside the learner."""
    plan = plan_api()
    cfg = preset(ctx, "d2evo", model_folder(ctx, "qwen3-4b", ctx.scale.big), ("engine=vllm", "model.device=cuda"))
    device = plan.local_device("cuda") if ctx.dev.type == "cuda" else plan.DEVICES["h200"]
    return plan.make_plan(cfg, device, suggest=False)


def recipe_config(ctx: Ctx, recipe: str) -> Any:
    """One tiny round of ``recipe`` in the toy world on this device (the recipes part)."""
    from coevolve.config import load_config

    over = RECIPES[recipe] + list(ctx.scale.recipe_overrides)
    # keep_checkpoints=2: D²Evo with shared weights reads π_S^(t-1) back from its checkpoint
    run = ["run.progress=false", "run.keep_checkpoints=2", f"run.threads={min(8, os.cpu_count() or 1)}"]
    return load_config(recipe, None, over + run)


def part_configs(ctx: Ctx) -> dict[str, Any]:
    """Every config a part builds, without running it (``tests/test_gpu_check.py`` checks that
    each still validates: a part that cannot build its config fails on the device otherwise)."""
    return {
        "learner": learner_config(ctx),
        "offload": learner_config(ctx, "learner.offload_optimizer=true"),
        "wake": vllm_plan(ctx),
        **{f"recipes/{r}": recipe_config(ctx, r) for r in RECIPES},
    }


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (``b`` the reference)."""
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-30))


def grads_at_step(learner: Any, groups: list[Any]) -> tuple[dict[str, float], list[torch.Tensor]]:
    """One ``learner.step`` and the fp32 gradients its optimizer saw (before clipping's effect
    on the update, after the clip itself)."""
    seen: list[torch.Tensor] = []
    orig = learner.optimizer.step

    def record(*a: Any, **k: Any) -> Any:
        seen.extend(p.grad.detach().clone() for p in learner._opt_params())
        return orig(*a, **k)

    learner.optimizer.step = record
    try:
        return learner.step(groups), seen
    finally:
        learner.optimizer.step = orig


# ------------------------------------------------------------------------------------------ parts
def part_rates(ctx: Ctx) -> dict[str, Any]:
    import transformers

    dev = ctx.dev
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(dev),
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / GiB, 1),
            cuda=torch.version.cuda,
            bf16=torch.cuda.is_bf16_supported(),
        )
    n = ctx.scale.copy_bytes
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    b.copy_(a)
    sync(dev)
    iters = 10
    t0 = time.perf_counter()
    for _ in range(iters):
        b.copy_(a)
    sync(dev)
    dt = time.perf_counter() - t0
    out["copy_gbps_read_plus_write"] = round(2 * n * iters / dt / 1e9, 1)
    del a, b
    m = ctx.scale.matmul_n
    x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    x @ y
    sync(dev)
    iters = 20
    t0 = time.perf_counter()
    for _ in range(iters):
        x @ y
    sync(dev)
    dt = time.perf_counter() - t0
    out["matmul_bf16_tflops"] = round(2 * m**3 * iters / dt / 1e12, 1 if dev.type == "cuda" else 4)
    del x, y
    with contextlib.suppress(Exception):
        dv = plan_api().DEVICES["h200"]
        out["plan_assumes"] = {
            "mem_gbps": dv.mem_gbps.value,
            "matmul_tflops": dv.matmul_tflops.value,
            "train_mfu": dv.train_mfu.value,
        }
    out["requirements"] = requirement_versions()
    ctx.results["rates"] = out
    return out


def part_learner(ctx: Ctx) -> dict[str, Any]:
    """The preset's learner on a 4B-shaped model: one step of capped rows (the plan's worst
    micro-batch), measured next to the plan."""
    from coevolve.rl import Learner

    sc, dev = ctx.scale, ctx.dev
    lcfg = learner_config(ctx)
    model = cached_model(ctx, "big", sc.big)
    vocab = sc.big["vocab_size"]
    out: dict[str, Any] = {
        "learner": {
            k: getattr(lcfg, k)
            for k in (
                "lr",
                "micro_batch_size",
                "max_tokens_per_micro_batch",
                "gradient_checkpointing",
                "logprob_chunk_tokens",
            )
        }
    }
    learner = Learner(model, lcfg)
    try:
        out.update(checkpointing=learner.gradient_checkpointing, chunk=learner.logprob_chunk, fused=learner.fused)
        learner.step(rand_groups(1, 1, 2, vocab, sc.prompt, lambda r: 8))  # AdamW state exists from here on
        sync(dev)
        out["resident_gib"] = round(allocated(dev), 2)
        G = 5  # the preset's solver group size
        groups = rand_groups(2, sc.learner_rows // G, G, vocab, sc.prompt, lambda r: sc.cap)
        tokens = sum(len(g.prompt_ids) + len(c) for g in groups for c in g.completion_ids)
        reset_peak(dev)
        t0 = time.perf_counter()
        m = learner.step(groups)
        sync(dev)
        dt = time.perf_counter() - t0
        out.update(
            step_seconds=round(dt, 2),
            tokens=tokens,
            tokens_per_s=round(tokens / dt),
            micro_batches=int(m["micro_batches"]),
            peak_gib=round(peak(dev), 2),
        )
        try:
            plan = plan_api()
            shape = plan.ModelShape.from_config({**sc.big, "model_type": "qwen3"})
            device = plan.local_device(sc.device) if dev.type == "cuda" else plan.DEVICES["h200"]
            train = plan.Train("solver", 1, sc.learner_rows, sc.prompt, sc.cap)
            rm = plan.role_memory("solver", shape, lcfg, device, 2, train, None)
            est = plan.train_seconds(train, 1, shape, lcfg, device, rm.checkpointing)
            plan_tokens = sc.learner_rows * (sc.prompt + plan.COMPLETION_FILL * sc.cap)
            same = est * tokens / plan_tokens  # the plan's seconds for the measured tokens
            flops = same * device.matmul_tflops.value * 1e12 * device.train_mfu.value
            measured_tflops = ctx.results.get("rates", {}).get("matmul_bf16_tflops") or device.matmul_tflops.value
            out["plan"] = {
                "train_peak_gib": round(rm.train_peak / GiB, 2),
                "resident_gib": round((rm.weights + rm.state) / GiB, 2),
                "micro_batch_rows": rm.micro_batch_rows,
                "micro_batch_tokens": rm.micro_batch_tokens,
                "step_seconds_same_tokens": round(same, 2),
                "assumed_mfu": device.train_mfu.value,
            }
            out["mfu_measured"] = round(flops / (dt * measured_tflops * 1e12), 3)
            out["peak_over_plan"] = round(out["peak_gib"] / (rm.train_peak / GiB), 3) if dev.type == "cuda" else None
        except Exception as e:  # noqa: BLE001 - the measurement stands without the plan
            out["plan"] = f"unavailable: {type(e).__name__}: {e}"
        before = allocated(dev)
        t0 = time.perf_counter()
        learner.offload_state()
        free_memory(dev)
        sync(dev)
        out["offload_state_seconds"] = round(time.perf_counter() - t0, 2)
        out["offload_freed_gib"] = round(before - allocated(dev), 2)
        t0 = time.perf_counter()
        learner.onload_state()
        sync(dev)
        out["onload_state_seconds"] = round(time.perf_counter() - t0, 2)
        before = allocated(dev)
    finally:
        learner.close()
    free_memory(dev)
    out["close_freed_gib"] = round(before - allocated(dev), 2)
    n = sum(p.numel() for p in model.parameters())
    want = 12 * n / GiB  # fp32 masters + AdamW m and v
    out["checks"] = {"close_frees_state": dev.type != "cuda" or out["close_freed_gib"] >= 0.9 * want}
    out["ok"] = all(out["checks"].values())
    return out


def part_wake(ctx: Ctx) -> dict[str, Any]:
    """What a vLLM wake would find: the preset's 4B learner with its state on the GPU (as in a
    training phase) after one step, PyTorch's cache emptied (vLLM's ``wake_up`` does that first),
    then the free GPU memory against the share ``coevolve plan`` derives for ``engine=vllm``
    (the memory a wake maps again: weights and KV cache)."""
    from coevolve.rl import Learner

    sc, dev = ctx.scale, ctx.dev
    plan = vllm_plan(ctx)
    share = plan.vllm_share
    learner = Learner(cached_model(ctx, "big", sc.big), learner_config(ctx))
    try:
        learner.step(rand_groups(6, 1, 2, sc.big["vocab_size"], sc.prompt, lambda r: 8))
        sync(dev)
        free_memory(dev)
        out: dict[str, Any] = {
            "derived_share": share,
            "resident_gib": round(allocated(dev), 2),
            "plan_resident_gib": round(max(e.resident for e in plan.phases if e.work.gens) / GiB, 2),
        }
        if dev.type == "cuda":
            free, total = torch.cuda.mem_get_info()
            need = (share or 0.0) * total
            out.update(
                free_gib=round(free / GiB, 2), share_gib=round(need / GiB, 2), margin_gib=round((free - need) / GiB, 2)
            )
        out["checks"] = {"a_wake_finds_its_share": dev.type != "cuda" or out["margin_gib"] >= 0}
    finally:
        learner.close()
    out["ok"] = all(out["checks"].values())
    return out


def part_offload(ctx: Ctx) -> dict[str, Any]:
    """A 4B ``learner.offload_optimizer`` step (masters and AdamW state in CPU memory, fp32
    gradient sums on the GPU through the backward) at the preset's worst micro-batch: its peak
    against ``coevolve plan``'s ``role_memory``."""
    from coevolve.rl import Learner

    sc, dev = ctx.scale, ctx.dev
    lcfg = learner_config(ctx, "learner.offload_optimizer=true")
    vocab, G = sc.big["vocab_size"], 5
    learner = Learner(cached_model(ctx, "big", sc.big), lcfg)
    try:
        # one step (AdamW's state is made on the host, where it adds no GPU memory) of capped rows
        groups = rand_groups(8, 1, G, vocab, sc.prompt, lambda r: sc.cap)
        free_memory(dev)
        reset_peak(dev)
        t0 = time.perf_counter()
        m = learner.step(groups)
        sync(dev)
        out: dict[str, Any] = {
            "step_seconds": round(time.perf_counter() - t0, 2),
            "micro_batches": int(m["micro_batches"]),
            "peak_gib": round(peak(dev), 2),
            "masters_on": str(learner.master[0].device) if learner.master else "none (fp32 weights)",
        }
    finally:
        learner.close()
    plan = plan_api()
    shape = plan.ModelShape.from_config({**sc.big, "model_type": "qwen3"})
    rm = plan.role_memory(
        "solver", shape, lcfg, plan.DEVICES["h200"], 2, plan.Train("solver", 1, G, sc.prompt, sc.cap), None
    )
    out["plan"] = {
        "train_peak_gib": round(rm.train_peak / GiB, 2),
        "grads_gib": round(rm.grads / GiB, 2),
        "host_gib": round(rm.host / GiB, 2),
    }
    cuda = dev.type == "cuda"
    out["peak_over_plan"] = round(out["peak_gib"] / out["plan"]["train_peak_gib"], 3) if cuda else None
    out["checks"] = {
        "state_on_the_host": not cuda or out["masters_on"] == "cpu",
        "plan_covers_the_peak": not cuda or out["peak_over_plan"] <= 1.05,
    }
    out["ok"] = all(out["checks"].values())
    return out


def part_lora(ctx: Ctx) -> dict[str, Any]:
    """A LoRA learner step on the 0.6B shape, then the weights a vLLM push would send
    (``engine.weights.hf_weights``: W + ΔW per layer, the learner's module untouched) loaded
    into a plain model: its forward against the unmerged LoRA model's, and the weights against
    PEFT's own ``merge_and_unload``."""
    from coevolve.engine.weights import hf_weights
    from coevolve.rl import Learner, LearnerConfig

    sc, dev = ctx.scale, ctx.dev
    vocab = sc.small["vocab_size"]
    learner = Learner(
        random_model(ctx, sc.small), LearnerConfig(lr=1e-3, lora=True, lora_r=8, logprob_chunk_tokens=sc.num_chunk)
    )
    try:
        groups = rand_groups(9, 2, 2, vocab, sc.num_prompt, lambda r: sc.num_completion // 2)
        for _ in range(2):  # B starts at zero: after two steps every adapter holds a delta
            learner.step(groups)
        lora = learner.model.eval()
        merged = dict(hf_weights(lora))
        plain = random_model(ctx, sc.small)  # the same seed: the base weights the adapters sit on
        base_w = {k: t.clone() for k, t in plain.state_dict().items() if k in merged}
        missing, unexpected = plain.load_state_dict(merged, strict=False)
        ids = torch.tensor([g.prompt_ids + g.completion_ids[0] for g in groups], device=dev)
        with torch.no_grad():
            want = lora(ids).logits.float()
            got = plain.eval()(ids).logits.float()
            peft_merged = copy.deepcopy(lora).merge_and_unload().state_dict()
        delta = max(float((merged[k].float() - w.float()).abs().max()) for k, w in base_w.items())
        out: dict[str, Any] = {
            "logits_rel_err": round(rel_err(got, want), 5),
            "weights_rel_err_vs_merge_and_unload": round(
                max(rel_err(merged[k], peft_merged[k]) for k in merged if k in peft_merged), 5
            ),
            "max_delta_from_base": delta,
            "missing": [k for k in missing if "rotary" not in k][:5],
            "unexpected": unexpected[:5],
        }
        del plain, base_w, peft_merged, merged
    finally:
        learner.close()
    out["checks"] = {
        "adapters_trained": delta > 0,
        "all_weights_pushed": not out["missing"] and not out["unexpected"],
        "merged_forward_equals_unmerged": out["logits_rel_err"] < 2e-2,
        "equals_merge_and_unload": out["weights_rel_err_vs_merge_and_unload"] < 1e-2,
    }
    out["ok"] = all(out["checks"].values())
    return out


def part_numerics(ctx: Ctx) -> dict[str, Any]:
    """bf16 on the device against plain / fp32 references (0.6B shape)."""
    from coevolve.rl import Learner, LearnerConfig, sequence_logprobs
    from coevolve.rl.batch import collate

    sc, dev = ctx.scale, ctx.dev
    vocab = sc.small["vocab_size"]
    base = random_model(ctx, sc.small)
    out: dict[str, Any] = {}
    checks: dict[str, bool] = {}
    groups = rand_groups(
        3, sc.num_rows // 2, 2, vocab, sc.num_prompt, lambda r: r.randrange(sc.num_completion // 4, sc.num_completion)
    )

    # 1. chunked vs plain log-prob backward, both bf16, against an fp32 copy
    seqs = [(g.prompt_ids, c, 1.0, None) for g in groups for c in g.completion_ids]
    b = collate(seqs, 0, dev)
    w = torch.randn(b.completion_mask.shape, generator=torch.Generator().manual_seed(4)).to(dev)

    def logp_grads(model: Any, chunk: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        lp = sequence_logprobs(model, b.input_ids, b.attention_mask, b.completion_mask, chunk_tokens=chunk)
        (lp.float() * w).sum().backward()
        names = ("model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight")
        g = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if n in names}
        model.zero_grad(set_to_none=True)
        return lp.detach().float(), g

    m32 = copy.deepcopy(base).float()
    lp32, g32 = logp_grads(m32, 0)
    del m32
    free_memory(dev)
    lp_plain, g_plain = logp_grads(base, 0)
    lp_chunk, g_chunk = logp_grads(base, sc.num_chunk)
    mask = b.completion_mask > 0
    out["logprob"] = {
        "max_abs_chunked_vs_plain": float((lp_chunk - lp_plain)[mask].abs().max()),
        "max_abs_plain_vs_fp32": float((lp_plain - lp32)[mask].abs().max()),
        "max_abs_chunked_vs_fp32": float((lp_chunk - lp32)[mask].abs().max()),
    }
    out["grad_rel_err_vs_fp32"] = {
        n.split(".", 1)[1]: {
            "plain": round(rel_err(g_plain[n], g32[n]), 4),
            "chunked": round(rel_err(g_chunk[n], g32[n]), 4),
        }
        for n in g32
    }
    checks["chunked_no_worse_than_plain"] = (
        all(v["chunked"] <= 1.5 * v["plain"] + 1e-3 for v in out["grad_rel_err_vs_fp32"].values())
        and out["logprob"]["max_abs_chunked_vs_fp32"] <= 1.5 * out["logprob"]["max_abs_plain_vs_fp32"] + 1e-3
    )

    # 2. token-budget micro-batches vs one micro-batch, from identical weights
    row = sc.num_prompt + sc.num_completion
    one = Learner(copy.deepcopy(base), LearnerConfig(lr=1e-4, micro_batch_size=64, logprob_chunk_tokens=sc.num_chunk))
    m1, ga = grads_at_step(one, groups)
    one.close()
    many = Learner(
        copy.deepcopy(base),
        LearnerConfig(
            lr=1e-4, micro_batch_size=64, logprob_chunk_tokens=sc.num_chunk, max_tokens_per_micro_batch=2 * row
        ),
    )
    m2, gb = grads_at_step(many, groups)
    many.close()
    worst = max(rel_err(x, y) for x, y in zip(gb, ga))
    out["micro_batches"] = {
        "one": int(m1["micro_batches"]),
        "budget": int(m2["micro_batches"]),
        "grad_rel_err": round(worst, 5),
        "loss_diff": abs(m1["loss"] - m2["loss"]),
    }
    checks["micro_batches_same_update"] = m2["micro_batches"] >= 3 and worst < 0.05

    # 3. fused vs foreach AdamW: the same gradients (step 2's) into two optimizers
    masters = [copy.deepcopy(p.detach()).float() for p in base.parameters()]
    upd = {}
    for fused_kernel in (True, False):
        ps = [m.clone().requires_grad_(True) for m in masters]
        for p_, g_ in zip(ps, ga):
            p_.grad = g_.to(p_.device)
        opt = torch.optim.AdamW(
            ps,
            lr=1e-4,
            betas=(0.9, 0.99),
            weight_decay=0.01,
            fused=fused_kernel,
            foreach=None if fused_kernel else True,
        )
        for _ in range(3):  # a few steps, so m and v matter
            opt.step()
        upd[fused_kernel] = [p_.detach() for p_ in ps]
    diff = max(float((x - y).abs().max()) for x, y in zip(upd[True], upd[False]))
    out["adamw_fused_vs_foreach_max_abs_over_lr"] = round(diff / 1e-4, 6)
    checks["fused_matches_foreach"] = diff <= 1e-3 * 1e-4
    del masters, upd
    free_memory(dev)

    # 4. two learners in turn on one model: the first one's state is freed, the second one trains
    model = copy.deepcopy(base)
    n = sum(p.numel() for p in model.parameters())
    first = Learner(model, LearnerConfig(lr=1e-4, logprob_chunk_tokens=sc.num_chunk))
    first.step(groups)
    held = allocated(dev)
    first.close()
    free_memory(dev)
    freed = held - allocated(dev)
    w0 = [p.detach().clone() for p in model.parameters()]
    second = Learner(model, LearnerConfig(lr=1e-4, logprob_chunk_tokens=sc.num_chunk))
    second.step(groups)
    moved = any(not torch.equal(x, p) for x, p in zip(w0, model.parameters()))
    second.close()
    out["two_learners"] = {
        "first_freed_gib": round(freed, 3),
        "expected_gib": round(12 * n / GiB, 3),
        "second_updates": moved,
    }
    checks["two_learners_in_turn"] = moved and (dev.type != "cuda" or freed >= 0.9 * 12 * n / GiB)
    del model, w0
    free_memory(dev)

    # 5. offload_optimizer: device sums, one device-to-host copy per step; the same gradients as on the device
    batch = groups * 2
    on = Learner(copy.deepcopy(base), LearnerConfig(lr=1e-4, micro_batch_size=2, logprob_chunk_tokens=sc.num_chunk))
    off = Learner(
        copy.deepcopy(base),
        LearnerConfig(lr=1e-4, micro_batch_size=2, logprob_chunk_tokens=sc.num_chunk, offload_optimizer=True),
    )
    times, grads = {}, {}
    for name, lr in (("on_device", on), ("offload_optimizer", off)):
        lr.step(groups[:1])  # warm-up: optimizer state exists
        sync(dev)
        t0 = time.perf_counter()
        mm, grads[name] = grads_at_step(lr, batch)
        sync(dev)
        times[name] = round(time.perf_counter() - t0, 3)
    worst = max(rel_err(x.cpu(), y.cpu()) for x, y in zip(grads["offload_optimizer"], grads["on_device"]))
    out["offload_optimizer"] = {
        "step_seconds": times,
        "micro_batches": int(mm["micro_batches"]),
        "grad_rel_err": round(worst, 5),
        "masters_on": str(off.master[0].device),
    }
    checks["offload_optimizer_same_gradients"] = worst < 0.05 and off.master[0].device.type == "cpu"
    del grads
    on.close()
    off.close()
    del base
    free_memory(dev)
    out["checks"] = checks
    out["ok"] = all(checks.values())
    return out


def part_sampler(ctx: Ctx) -> dict[str, Any]:
    """The HF sampler at the preset's KV budget, beside the 4B weights."""
    from coevolve.engine import HFSampler
    from coevolve.types import SamplingParams

    sc, dev = ctx.scale, ctx.dev
    vocab = sc.big["vocab_size"]
    model = cached_model(ctx, "big", sc.big).eval()
    tok = word_tokenizer(vocab)
    rng = random.Random(5)

    def prompts(rows: int, length: int) -> list[str]:
        return [" ".join(f"w{rng.randrange(3, vocab)}" for _ in range(length)) for _ in range(rows)]

    out: dict[str, Any] = {}
    budget = sc.kv_rows * (sc.kv_prompt + sc.kv_new)
    sampler = HFSampler(model, tok, max_batch=256, max_batch_tokens=budget)
    long = prompts(sc.kv_rows, sc.kv_prompt)

    def timed(ps: list[str], new: int, sampler: Any = sampler) -> float:
        sync(dev)
        t0 = time.perf_counter()
        sampler.sample(ps, 1, SamplingParams(temperature=1.0, max_new_tokens=new, seed=0))
        sync(dev)
        return time.perf_counter() - t0

    timed(long[:2], 2)  # warm-up
    free_memory(dev)
    base = allocated(dev)
    reset_peak(dev)
    t1 = timed(long, 1)
    transient = peak(dev) - base
    tn = timed(long, sc.kv_new)
    out["long"] = {
        "rows": sc.kv_rows,
        "context": sc.kv_prompt + sc.kv_new,
        "kv_tokens": budget,
        "transient_gib": round(transient, 2),
        "prefill_seconds": round(t1, 2),
        "decode_ms_per_step": round(1e3 * (tn - t1) / (sc.kv_new - 1), 1),
    }
    short = prompts(sc.decode_rows, sc.decode_prompt)
    timed(short[:2], 2)
    s1 = timed(short, 1)
    sn = timed(short, sc.decode_new)
    out["short"] = {
        "rows": sc.decode_rows,
        "context": sc.decode_prompt + sc.decode_new,
        "decode_ms_per_step": round(1e3 * (sn - s1) / (sc.decode_new - 1), 1),
    }
    try:
        plan = plan_api()
        shape = plan.ModelShape.from_config({**sc.big, "model_type": "qwen3"})
        device = plan.DEVICES["h200"]
        call = plan.sampler_call_bytes(shape, 2, sc.kv_rows, sc.kv_prompt, sc.kv_new)
        out["plan"] = {
            "transient_gib": round(call / GiB, 2),
            "hf_decode_floor_ms": round(device.hf_step_ms_per_layer.value * shape.layers, 1),
        }
    except Exception as e:  # noqa: BLE001
        out["plan"] = f"unavailable: {type(e).__name__}: {e}"
    del timed, sampler  # the default argument holds it too
    free_memory(dev)
    return out


def part_recipes(ctx: Ctx, deadline: float | None = None) -> dict[str, Any]:
    """One tiny round of each recipe in the toy world, on the device (bf16)."""
    from coevolve.lab.report import write_report
    from coevolve.recipes import execute
    from coevolve.world.toy import ensure_base

    dev = ctx.dev
    for k in list(ctx.models):  # the toy models need little, but give the memory back first
        del ctx.models[k]
    free_memory(dev)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    base = ensure_base()  # the toy base the recipes start from: carried (--carry), else built on the CPU once
    out["toy_base_seconds"] = round(time.perf_counter() - t0, 1)
    out["toy_base"] = str(base)
    ok = True
    for recipe in RECIPES:
        if deadline is not None and time.monotonic() > deadline:
            out[recipe] = {"ok": False, "error": "skipped: time budget spent"}
            ok = False
            continue
        run_dir = ctx.work / "runs" / recipe
        reset_peak(dev)
        t0 = time.perf_counter()
        try:  # the config too: one recipe that cannot build its config must not lose the others
            summary = execute(recipe_config(ctx, recipe), run_dir, report=write_report)
            final = summary.get("eval", {}).get("final", {})
            out[recipe] = {
                "ok": True,
                "seconds": round(time.perf_counter() - t0, 1),
                "peak_gib": round(peak(dev), 3),
                "rollouts": summary.get("rollouts"),
                "greedy": {b: v.get("greedy") for b, v in final.items() if isinstance(v, dict)},
            }
        except Exception as e:  # noqa: BLE001 - the next recipe still runs
            ok = False
            out[recipe] = {
                "ok": False,
                "seconds": round(time.perf_counter() - t0, 1),
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-1500:],
            }
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
            free_memory(dev)
    out["ok"] = ok
    return out


PARTS: dict[str, Callable[..., dict[str, Any]]] = {
    "rates": part_rates,
    "learner": part_learner,
    "wake": part_wake,
    "offload": part_offload,
    "numerics": part_numerics,
    "lora": part_lora,
    "sampler": part_sampler,
    "recipes": part_recipes,
}


# ------------------------------------------------------------------------------------------ driver
CARRIED = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "typing_extensions",
    "math_verify",
    "latex2sympy2_extended",
    "antlr4",
    "yaml",
    "numpy",
    "safetensors",
    "tokenizers",
    "sympy",
    "tqdm",
    "typer",
    "rich",
    "matplotlib",
    "peft",
    "sentence_transformers",
)
"""coevolve's own requirements besides torch and transformers (pyproject), by module name."""


def requirement_versions() -> dict[str, str]:
    """Each of coevolve's requirements besides torch and transformers: its version here, or
    ``missing`` (math-verify is imported only by the grader's worker processes)."""
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in (
        "pydantic",
        "pydantic_core",
        "annotated-types",
        "typing-inspection",
        "typing_extensions",
        "math-verify",
        "latex2sympy2_extended",
        "antlr4-python3-runtime",
        "PyYAML",
        "numpy",
        "safetensors",
        "tokenizers",
        "sympy",
        "tqdm",
        "typer",
        "rich",
        "matplotlib",
    ):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out


def imported_requirements() -> dict[str, str]:
    """Which of coevolve's requirements besides torch and transformers this process imported,
    with their versions: what a bare machine needs (transformers brings numpy, pyyaml,
    safetensors, tokenizers and tqdm itself)."""
    from importlib import metadata

    dists = metadata.packages_distributions()
    out: dict[str, str] = {}
    for mod in CARRIED:
        if mod in sys.modules:
            for d in dists.get(mod, [mod]):
                with contextlib.suppress(metadata.PackageNotFoundError):
                    out[d] = metadata.version(d)
    return dict(sorted(out.items()))


def write(out_dir: Path, results: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    """``gpu_check.json`` (every result and the run's facts) and ``results.jsonl`` (the RESULT
    lines, one per part), rewritten after every part so a killed check keeps what it measured."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("gpu_check.json", json.dumps({"results": results, **extra}, indent=2, default=str)),
        ("results.jsonl", "".join(json.dumps(r, default=str) + "\n" for r in results)),
    ):
        f = out_dir / name
        tmp = f.with_name(f".{name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, f)


def prepare(carry: Path | None) -> dict[str, Any]:
    """Make coevolve importable on a bare machine: this checkout's ``src/`` on ``sys.path``; with
    ``carry`` (``benchmarks/gpu_carry.py``'s folder) its wheels installed once into
    ``carry/site`` (``pip install --no-index``; unzipped if pip fails) and put on the path (the
    grader's workers inherit it), its cache used as ``$COEVOLVE_CACHE`` (the toy base)."""
    src = Path(__file__).resolve().parents[1] / "src"
    paths = [src]
    info: dict[str, Any] = {}
    if carry is not None:
        wheels, site = carry / "wheels", carry / "site"
        if wheels.is_dir() and not site.is_dir():
            t0 = time.perf_counter()
            whls = sorted(str(w) for w in wheels.glob("*.whl"))
            cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
            cmd += ["--find-links", str(wheels), "--target", str(site), *whls]
            has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
            if not has_pip:  # a wheel is a zip: unpacked, it imports as pip would have installed it
                for w in whls:
                    with zipfile.ZipFile(w) as z:
                        z.extractall(site)
                info["installed_by"] = "unzip"
            elif subprocess.run(cmd, check=False).returncode != 0:
                raise SystemExit(f"--carry {carry}: pip could not install {wheels} here (another Python than 3.12?)")
            info["install_seconds"] = round(time.perf_counter() - t0, 1)
        if site.is_dir():
            paths.insert(0, site)
        if (carry / "cache").is_dir():
            os.environ["COEVOLVE_CACHE"] = str((carry / "cache").resolve())
            info["cache"] = os.environ["COEVOLVE_CACHE"]
    for p in reversed(paths):
        if str(p.resolve()) not in sys.path:
            sys.path.insert(0, str(p.resolve()))
    return info


def run_part(name: str, ctx: Ctx, deadline: float | None) -> dict[str, Any]:
    if deadline is not None and time.monotonic() > deadline:
        res: dict[str, Any] = {"part": name, "ok": False, "error": "skipped: time budget spent"}
    else:
        t0 = time.perf_counter()
        try:
            fn = PARTS[name]
            body = fn(ctx, deadline) if name == "recipes" else fn(ctx)
            res = {
                "part": name,
                "ok": bool(body.pop("ok", True)),
                "seconds": round(time.perf_counter() - t0, 1),
                **body,
            }
        except Exception as e:  # noqa: BLE001 - one failing part must not lose the others
            res = {
                "part": name,
                "ok": False,
                "seconds": round(time.perf_counter() - t0, 1),
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-2000:],
            }
        finally:
            free_memory(ctx.dev)
    print("RESULT " + json.dumps(res, default=str), flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", action="append", choices=list(PARTS), help="run only this part (repeatable)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU: the same code path, no figures")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds; parts that would start later are skipped")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: $OUT, else ./gpu_check_out)")
    ap.add_argument("--carry", type=Path, default=None, help="benchmarks/gpu_carry.py's folder: wheels, toy base")
    args = ap.parse_args(argv)
    carried = prepare(args.carry)
    out_dir = args.out or Path(os.environ.get("OUT") or "gpu_check_out")
    scale = DRY if args.dry_run else FULL
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run to check the script on CPU", file=sys.stderr)
        return 2
    start = time.monotonic()
    deadline = start + args.budget if args.budget > 0 else None
    work = Path(tempfile.mkdtemp(prefix="coevolve-gpu-check-"))
    ctx = Ctx(scale, work)
    results: list[dict[str, Any]] = []
    try:
        for name in args.part or list(PARTS):
            results.append(run_part(name, ctx, deadline))
            write(out_dir, results, {"dry_run": args.dry_run})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    extra = {
        "dry_run": args.dry_run,
        "total_seconds": round(time.monotonic() - start, 1),
        "carried": carried,
        "imported_requirements": imported_requirements(),
    }
    write(out_dir, results, extra)
    print("RESULT " + json.dumps({"part": "summary", "ok": all(r["ok"] for r in results), **extra}), flush=True)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
