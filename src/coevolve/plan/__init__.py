"""``coevolve plan``: what a run will cost before it starts.

Pure functions over a recipe config and a model's ``config.json`` (no weights needed), one
module per concern:

- ``shapes``: ``ModelShape.from_config``: layers, widths, heads, vocabulary -> parameter count,
  KV bytes per token, LoRA parameter count;
- ``work``: per phase of the recipe, the rollouts and tokens it generates (by which role, in
  sampler calls of how many rows) and the tokens it trains on;
- ``memory``: ``role_memory``: one role's GPU bytes by kind: weights, fp32 masters, optimizer
  state, gradients, activations (with the learner's checkpointing and micro-batch budget), logits
  (plain or chunked log-probs), KV cache of its sampler;
- ``devices`` and ``timing``: the one table of per-device rates (``DEVICES``; every rate says
  whether it was measured, where and how, or assumed) and the wall time derived from it;
- ``estimate``: the peak of each phase = what stays resident (every role's weights unless
  parked, the training role's state) + the largest transient (a learner step, or a sampler
  call's KV cache), with ``SAFETY_MARGIN`` headroom required -> ``Plan`` (``fits``, ``problems``
  each naming the field to change, from ``advice``);
- ``layouts``: the per-GPU figures of a multi-GPU layout (``engine=ray``, ``backend=verl``);
- ``printing``: ``format_plan``.

``preflight_problems(cfg)`` is what ``coevolve run`` refuses. The memory model follows the code
it describes: the learner's fp32 masters and per-parameter fp32 gradient accumulation, AdamW's m
and v (plus the foreach kernel's temporary fp32 copy when not fused), HF activation checkpointing
of every decoder layer, ``sequence_logprobs``' plain or chunked logits, ``HFSampler``'s row /
KV-token chunks, ``Role.offload`` / ``ParkedSampler`` placement.
``dev/perf/bench_learner_memory.py`` puts the estimate next to measured peaks.
"""

from __future__ import annotations

from typing import Any

from coevolve.plan.devices import DEVICES, Device, GiB, Rate, device_for, local_device
from coevolve.plan.estimate import PhaseEstimate, Plan, make_plan
from coevolve.plan.layouts import LayoutPhase, LayoutPlan, VerlMemory, layout_plan, verl_memory
from coevolve.plan.memory import SAFETY_MARGIN, RoleMemory, role_memory, sampler_call_bytes
from coevolve.plan.placement import Layout, make_layout
from coevolve.plan.printing import format_layout, format_plan
from coevolve.plan.shapes import ModelShape, load_model_shape
from coevolve.plan.timing import COMPLETION_FILL, gen_seconds, train_seconds
from coevolve.plan.work import PROMPT_TOKENS, Gen, PhaseWork, Train, phases, trainable_roles


def preflight_problems(cfg: Any) -> list[str]:
    """What ``coevolve run`` refuses: the plan's problems on the device this run will use
    (the real GPU memory, or this machine's memory on CPU), each naming the field to change."""
    device = local_device(cfg.model.device)
    gpus = None
    ray = getattr(cfg.engine, "ray", None)
    if device.kind == "cuda" and cfg.engine.kind == "ray" and ray is not None and ray.address is None:
        import torch

        gpus = torch.cuda.device_count()  # a local Ray sees every GPU of this machine
    plan = make_plan(cfg, device, gpus=gpus)
    return [f"{p} (see `coevolve plan {cfg.recipe}`)" for p in plan.problems]


def with_vllm_share(cfg: Any) -> Any:
    """``cfg`` with ``engine.gpu_memory_utilization`` set to the largest share that fits this
    GPU (``Plan.vllm_share``) when it is unset and the run's in-process vLLM engine is on CUDA;
    otherwise ``cfg`` as it is. The run records the value it used in its config.yaml."""
    if getattr(cfg.engine, "kind", "hf") != "vllm" or cfg.engine.gpu_memory_utilization is not None:
        return cfg
    device = local_device(cfg.model.device)
    if device.kind != "cuda":
        return cfg
    share = make_plan(cfg, device, suggest=False).vllm_share
    if share is None:
        return cfg
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"gpu_memory_utilization": share})})


__all__ = [
    "COMPLETION_FILL",
    "DEVICES",
    "Device",
    "Gen",
    "GiB",
    "Layout",
    "LayoutPhase",
    "LayoutPlan",
    "ModelShape",
    "gen_seconds",
    "train_seconds",
    "PROMPT_TOKENS",
    "PhaseEstimate",
    "PhaseWork",
    "Plan",
    "Rate",
    "RoleMemory",
    "SAFETY_MARGIN",
    "Train",
    "VerlMemory",
    "device_for",
    "format_layout",
    "format_plan",
    "layout_plan",
    "load_model_shape",
    "local_device",
    "make_layout",
    "make_plan",
    "phases",
    "preflight_problems",
    "with_vllm_share",
    "role_memory",
    "sampler_call_bytes",
    "trainable_roles",
    "verl_memory",
]
