"""One vLLM engine on a GPU serving several weight versions through sleep and wake: what only
CUDA can check (vLLM's CPU worker ignores sleep). Marked ``gpu`` and ``vllm``; skipped without
CUDA or without vLLM (run: ``pytest -m gpu tests/test_vllm_gpu.py`` in the vLLM environment on a
CUDA machine). The same logic runs on CPU against a fake engine in
``test_vllm_engine_sharing.py``."""

from __future__ import annotations

import copy

import pytest
import torch

from coevolve.engine.vllm import vllm_available

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.vllm,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(not vllm_available(), reason="vllm is not installed (vLLM lane)"),
]

QUESTIONS = [
    "What is 2+3?",
    "Name a colour.",
    "Say hi.",
    "What is the capital of France?",
    "Count from 1 to 5.",
    "What is 12*12?",
    "Is the sky blue?",
    "Write one word that rhymes with cat.",
]


@pytest.fixture(scope="module")
def smol_cuda(smollm2):
    """SmolLM2 in bf16 on the GPU and a second version of it (every MLP perturbed), with chat prompts."""
    from coevolve.engine import load_model

    model, tok = load_model(smollm2, device="cuda", dtype="bfloat16")
    model.eval()
    other = copy.deepcopy(model)
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for layer in other.model.layers:
            w = layer.mlp.down_proj.weight
            w.add_(0.5 * w.std() * torch.randn(w.shape, generator=g, device="cuda", dtype=w.dtype))
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in QUESTIONS
    ]
    return smollm2, model, other, tok, prompts


def cfg(**kw):
    from coevolve.config.base import EngineConfig

    return EngineConfig(kind="vllm", gpu_memory_utilization=kw.pop("util", 0.2), max_model_len=1024, **kw)


def first_tokens(out, k: int = 4) -> list[tuple[int, ...]]:
    return [tuple(g[0].token_ids[:k]) for g in out]


def agree(a, b) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def test_one_engine_serves_two_live_versions_a_frozen_one_and_a_folder(smol_cuda):
    """Two live models of one shape, a frozen snapshot and the model folder: one engine, sleeping
    at level 2 between calls (its memory back to the learner), every call sampling from its own
    weights (greedy first tokens as HF's bf16 ones), closing while asleep without a CUDA error."""
    from coevolve.engine import HFSampler, freeze_sampler, load_sampler, make_sampler
    from coevolve.types import SamplingParams

    folder, model, other, tok, prompts = smol_cuda
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    ref = {
        "a": first_tokens(HFSampler(model, tok).sample(prompts, 1, greedy)),
        "b": first_tokens(HFSampler(other, tok).sample(prompts, 1, greedy)),
    }
    assert agree(ref["a"], ref["b"]) < 0.5, "the two versions should answer differently"
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    a = make_sampler(cfg(), model, tok)
    b = make_sampler(cfg(), other, tok)
    frozen = freeze_sampler(cfg(), a, model, tok)
    disk = load_sampler(cfg(), str(folder), device="cuda", dtype="bfloat16")
    try:
        assert a.engine is b.engine is frozen.engine is disk.engine
        engine = a.engine
        assert engine.sleep_mode and engine.sleep_level == 2 and engine.asleep
        held = free0 - torch.cuda.mem_get_info()[0]
        util_bytes = 0.2 * torch.cuda.get_device_properties(0).total_memory
        assert held < 0.25 * util_bytes, f"a sleeping engine still holds {held / 2**30:.1f} GiB"
        for s, want in ((a, "a"), (b, "b"), (frozen, "a"), (disk, "a"), (a, "a"), (b, "b")):
            got = first_tokens(s.sample(prompts, 1, greedy))
            assert agree(got, ref[want]) >= 0.75, (want, got, ref[want])
            assert engine.asleep
            assert free0 - torch.cuda.mem_get_info()[0] < 0.25 * util_bytes
    finally:
        for s in (a, b, disk):
            s.close()
    assert engine.llm is None  # the last owner closed it, asleep: woken first, then freed


def test_sync_after_a_learner_step_reaches_the_engine_after_a_wake(smol_cuda):
    """A learner-sized change (the weights move) is served after ``sync_weights`` even though
    the engine slept at level 2 in between, and a frozen version taken before keeps the old one."""
    from coevolve.engine import HFSampler, freeze_sampler, make_sampler
    from coevolve.types import SamplingParams

    _, model, other, tok, prompts = smol_cuda
    live = copy.deepcopy(model)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8, return_logprobs=True)
    s = make_sampler(cfg(), live, tok)
    try:
        frozen = freeze_sampler(cfg(), s, live, tok)
        live.load_state_dict(other.state_dict())
        s.sync_weights(live)
        got = s.sample(prompts, 1, greedy)
        want = HFSampler(other, tok).sample(prompts, 1, greedy)
        assert agree(first_tokens(got), first_tokens(want)) >= 0.75
        old = frozen.sample(prompts, 1, greedy)
        assert agree(first_tokens(old), first_tokens(HFSampler(model, tok).sample(prompts, 1, greedy))) >= 0.75
    finally:
        s.close()
