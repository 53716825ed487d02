"""Devices and their rates: memory, matmul rate, bandwidth, decode floors.

``DEVICES`` is the one table of per-device figures wall time and memory verdicts are estimated
from; every ``Rate`` says whether it was measured (where, with which command) or assumed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from coevolve.errors import ConfigError, did_you_mean

GiB = float(1 << 30)
BF16_TFLOPS = 0.41
CPU_RATES = (
    "measured at one torch thread, in CPU time (a core of its own: a loaded machine's wall time is longer by "
    "its load), by `dev/perf/bench_grpo_step.py --steps 2 --threads 1` (its 'plan rates' line: every sampler call to "
    "the cap, the plan's token counts)"
)


@dataclass(frozen=True)
class Rate:
    """One device figure and where it comes from: ``measured`` (how, where) or assumed."""

    value: float
    measured: bool
    source: str


@dataclass(frozen=True)
class Device:
    """A device kind: its memory and the rates wall time is estimated from."""

    name: str
    kind: str  # "cuda" | "cpu"
    memory_gib: Rate  # usable accelerator (or, for cpu, host) memory
    host_memory_gib: Rate  # host memory for offloaded state / parked weights
    matmul_tflops: Rate  # dense peak in the model's compute dtype (bf16 on GPU, fp32 on CPU)
    train_mfu: Rate  # share of the peak a learner step reaches
    mem_gbps: Rate  # memory bandwidth (decode reads every weight and the KV cache once per step)
    hf_step_ms_per_layer: Rate  # HF generate's launch-bound floor per decode step and layer
    vllm_bw_efficiency: Rate  # share of bandwidth vLLM's decode reaches
    fp32_tflops: Rate | None = None  # a CPU's learner rate for fp32 weights (matmul_tflops is then bf16's)
    learn_us_per_token_layer: Rate = Rate(0.0, False, "none: GPU updates are compute-bound at these sizes")
    hf_us_per_row_step: Rate = Rate(0.0, False, "none: a GPU samples a row's token in parallel")
    decode_tflops: Rate | None = None  # a CPU's effective rate of HF decode steps (matmul_tflops is the learner's)


DEVICES: dict[str, Device] = {
    "h200": Device(
        "h200",
        "cuda",
        memory_gib=Rate(139.0, False, "assumed: an H200 (141 GB) as torch reports it, about 139 GiB"),
        host_memory_gib=Rate(128.0, False, "assumed: host memory of a one-H200 server"),
        matmul_tflops=Rate(790.0, False, "assumed: dense bf16 matmul on an H200 reaches about 790 TFLOP/s (spec 989)"),
        train_mfu=Rate(0.35, False, "assumed: HF eager model, checkpointing recompute counted separately"),
        mem_gbps=Rate(4800.0, False, "assumed: H200 HBM3e spec"),
        hf_step_ms_per_layer=Rate(
            83.0 / 36,
            True,
            "HF generate of a random-weight Qwen3-4B-shaped model at batch 256 "
            "on an H200: 81-86 ms per decode step over 36 layers (the setting of "
            "benchmarks/gpu_smoke.py's sampler section)",
        ),
        vllm_bw_efficiency=Rate(0.6, False, "assumed: continuous batching with CUDA graphs"),
    ),
    "h100": Device(
        "h100",
        "cuda",
        memory_gib=Rate(79.2, False, "assumed: an H100 80 GB (SXM) as torch reports it"),
        host_memory_gib=Rate(128.0, False, "assumed host memory"),
        matmul_tflops=Rate(790.0, False, "assumed: dense bf16 like the H200 (the same compute; spec 989)"),
        train_mfu=Rate(0.35, False, "assumed: HF eager model, checkpointing recompute counted separately"),
        mem_gbps=Rate(3350.0, False, "assumed: H100 SXM HBM3 spec"),
        hf_step_ms_per_layer=Rate(83.0 / 36, False, "assumed: launch-bound like the H200 figure"),
        vllm_bw_efficiency=Rate(0.6, False, "assumed: continuous batching with CUDA graphs"),
    ),
    "a100-80g": Device(
        "a100-80g",
        "cuda",
        memory_gib=Rate(79.2, False, "assumed: 80 GB card, memory torch reports"),
        host_memory_gib=Rate(256.0, False, "assumed host memory"),
        matmul_tflops=Rate(312.0, False, "assumed: A100 bf16 dense spec"),
        train_mfu=Rate(0.35, False, "assumed"),
        mem_gbps=Rate(2039.0, False, "assumed: A100 80 GB spec"),
        hf_step_ms_per_layer=Rate(83.0 / 36, False, "assumed: launch-bound like the H200 figure"),
        vllm_bw_efficiency=Rate(0.6, False, "assumed"),
    ),
    "a100-40g": Device(
        "a100-40g",
        "cuda",
        memory_gib=Rate(39.4, False, "assumed: 40 GB card, memory torch reports"),
        host_memory_gib=Rate(128.0, False, "assumed host memory"),
        matmul_tflops=Rate(312.0, False, "assumed: A100 bf16 dense spec"),
        train_mfu=Rate(0.35, False, "assumed"),
        mem_gbps=Rate(1555.0, False, "assumed: A100 40 GB spec"),
        hf_step_ms_per_layer=Rate(83.0 / 36, False, "assumed: launch-bound like the H200 figure"),
        vllm_bw_efficiency=Rate(0.6, False, "assumed"),
    ),
    "cpu": Device(
        "cpu",
        "cpu",
        memory_gib=Rate(24.0, True, "this project's 2-core CI machine (24 GiB); `coevolve run` uses the real figure"),
        host_memory_gib=Rate(24.0, True, "same memory"),
        matmul_tflops=Rate(
            BF16_TFLOPS,
            True,
            f"{CPU_RATES}: the SmolLM2 grpo preset's learner (bf16, share_prompt, 8 x 8 rows, AVX-512 BF16 / AMX) "
            "(5.3-5.7 s of CPU time a step; 0.42 and 0.39 TFLOP/s in two runs, its work as the plan counts it)",
        ),
        train_mfu=Rate(1.0, True, "already folded into the measured effective rate"),
        mem_gbps=Rate(10.0, False, "assumed"),
        hf_step_ms_per_layer=Rate(
            1.78,
            True,
            "the toy grpo run (`coevolve run grpo run.threads=2`, 2 quiet cores): 3.56 ms per decode step of "
            "128 rows over 2 layers, a floor (a larger model's step is its matmuls')",
        ),
        vllm_bw_efficiency=Rate(0.3, False, "assumed"),
        fp32_tflops=Rate(
            0.14,
            True,
            "effective fp32 rate of the toy grpo run's learner steps (2.21 TFLOP as the plan counts them in "
            "15.8 s, 2 quiet cores); a SmolLM2-135M fp32 step measured 0.0178 at load average ~5 "
            "(dev/perf/bench_learner_memory.py --rates), its 49k-entry LM head in fp32",
        ),
        learn_us_per_token_layer=Rate(
            19.2,
            True,
            f"{CPU_RATES}: the toy learner step of 16 x 8 rows, 18.7 and 19.7 in two rounds (0.27-0.28 s of CPU time)",
        ),
        hf_us_per_row_step=Rate(
            50.4,
            True,
            f"{CPU_RATES}: the toy sampler call of 16 x 8 rows to 48 tokens, 45.0 and 55.8 in two rounds "
            "(0.28-0.34 s of CPU time)",
        ),
        decode_tflops=Rate(
            0.050,
            True,
            f"{CPU_RATES}: the SmolLM2 grpo preset's sampler call of 8 x 8 rows to 48 tokens (bf16, prefix caching; "
            "15.6-17.5 s of CPU time, 0.0471 and 0.0529 TFLOP/s in two runs; transformers' multinomial over the 49k "
            "vocabulary included)",
        ),
    ),
}


def device_for(name: str) -> Device:
    if name not in DEVICES:
        raise ConfigError(
            f"--device {name!r}: unknown device{did_you_mean(name, DEVICES)} (known: {', '.join(DEVICES)})"
        )
    return DEVICES[name]


def with_gpu_memory(device: Device, gib: float) -> Device:
    """``device``'s rates on a card of ``gib`` GiB (``coevolve plan --gpu-memory``: any other card)."""
    if gib <= 0:
        raise ConfigError(f"--gpu-memory {gib:g}: must be a positive number of GiB")
    if device.kind != "cuda":
        raise ConfigError(f"--gpu-memory with --device {device.name}: give the GPU whose rates to use (e.g. h100)")
    mem = Rate(float(gib), True, "--gpu-memory (given)")
    return replace(device, name=f"{device.name} rates, {gib:g} GiB", memory_gib=mem)


def local_device(model_device: str = "auto") -> Device:
    """The device a run will use here (``model.device``), with its real memory: the nearest
    ``DEVICES`` entry for the rates, the memory torch / the OS reports."""
    import torch

    want_cuda = model_device.startswith("cuda") or (model_device == "auto" and torch.cuda.is_available())
    if want_cuda and torch.cuda.is_available():
        idx = torch.device(model_device).index if model_device.startswith("cuda:") else 0
        props = torch.cuda.get_device_properties(idx or 0)
        total = props.total_memory / GiB
        name = props.name.lower()
        base = (
            DEVICES["h200"]
            if "h200" in name
            else DEVICES["h100"]
            if "h100" in name
            else (DEVICES["a100-80g"] if total > 60 else DEVICES["a100-40g"])
        )
        mem = Rate(round(total, 1), True, f"torch.cuda: {props.name}")
        return replace(base, name=f"{base.name} (here: {props.name})", memory_gib=mem, host_memory_gib=_host_memory())
    host = _host_memory()
    return replace(DEVICES["cpu"], name="cpu (here)", memory_gib=host, host_memory_gib=host)


def _host_memory() -> Rate:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
        return Rate(round(total, 1), True, "this machine (os.sysconf)")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
        return DEVICES["cpu"].memory_gib
