"""Wall time of a phase's generations and learner steps from the device's rates."""

from __future__ import annotations

import math

from coevolve.plan.devices import Device
from coevolve.plan.shapes import ModelShape
from coevolve.plan.work import Gen, Train
from coevolve.rl.learner import LearnerConfig

COMPLETION_FILL = 0.5
"""Assumed mean completion length as a share of its cap, for token counts and wall time (memory
always uses the cap: one micro-batch of capped rows is what has to fit)."""


def gen_seconds(g: Gen, shape: ModelShape, device: Device, b: int, engine: str, kv_rows: int) -> float:
    """Decode time of one run of a generation: HF ``generate`` calls of ``kv_rows`` rows, each
    running until its longest row ends (taken as the cap: with G samples at T=1 one usually hits
    it), a decode step costing the largest of the launch-bound floor, reading weights + KV cache,
    and the matmuls; vLLM keeps ``kv_rows`` rows in flight and pays only the mean length."""
    if g.rows == 0:
        return 0.0
    weights = shape.n_params * b
    kv_tok = shape.kv_bytes_per_token(b)
    flops = device.matmul_tflops.value * 1e12
    if engine == "vllm":
        ctx = g.prompt + COMPLETION_FILL * g.max_new
        rows = max(1, kv_rows)
        step = (weights + rows * ctx * kv_tok) / (device.mem_gbps.value * 1e9 * device.vllm_bw_efficiency.value)
        step = max(step, 2 * shape.n_params * rows / flops)
        return g.rows * COMPLETION_FILL * g.max_new / rows * step
    calls = math.ceil(g.rows / max(1, kv_rows))
    rows = min(g.rows, kv_rows)
    ctx = g.prompt + g.max_new / 2
    step = max(
        device.hf_step_ms_per_layer.value * shape.layers / 1e3,
        (weights + rows * ctx * kv_tok) / (device.mem_gbps.value * 1e9),
        2 * shape.n_params * rows / flops,
    )
    return calls * g.max_new * step


def train_seconds(t: Train, times: int, shape: ModelShape, lcfg: LearnerConfig, device: Device, ckpt: bool) -> float:
    tokens = times * t.steps * t.rows_per_step * (t.prompt + COMPLETION_FILL * t.max_new)
    per_tok = 2 * shape.n_params * (3 if not lcfg.lora else 2) + (2 * shape.n_params if ckpt else 0)
    per_tok += 2 * shape.n_params * (int(lcfg.beta_kl > 0) + int(lcfg.epochs_per_batch > 1))
    per_tok *= lcfg.epochs_per_batch if lcfg.epochs_per_batch > 1 else 1
    attn = 6 * shape.layers * (t.prompt + t.max_new) * shape.q_dim  # causal QK^T and AV, forward + backward
    return tokens * (per_tok + attn) / (device.matmul_tflops.value * 1e12 * device.train_mfu.value)
