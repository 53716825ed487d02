"""Learner memory features only a GPU can check: fused AdamW, state and weight
offloading between devices, the parked frozen sampler, and bf16 peak memory against the plan.
Marked ``gpu``; skipped without CUDA (run: ``pytest -m gpu tests/test_learner_memory_gpu.py``)."""

from __future__ import annotations

import random

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

QWEN3_06B = dict(
    vocab_size=151936,
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
)


def tiny(seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
    )
    return Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16)


def groups(seed: int = 0, n: int = 4, G: int = 4, vocab: int = 300, prompt: int = 8, completion: int = 12):
    from coevolve.rl import RolloutGroup

    rng = random.Random(seed)
    return [
        RolloutGroup(
            [rng.randrange(3, vocab) for _ in range(prompt)],
            [[rng.randrange(3, vocab) for _ in range(rng.randrange(1, completion))] for _ in range(G)],
            [float(k % 2) for k in range(G)],
        )
        for _ in range(n)
    ]


def test_fused_adamw_is_the_cuda_default_and_matches_foreach():
    from coevolve.rl import Learner, LearnerConfig

    a = Learner(tiny(), LearnerConfig(lr=1e-4))
    b = Learner(tiny(), LearnerConfig(lr=1e-4, fused_optimizer=False))
    assert a.fused and a.optimizer.param_groups[0]["fused"] and not b.fused
    assert all(m.device.type == "cuda" and m.dtype == torch.float32 for m in a.master)
    a.step(groups())
    b.step(groups())
    for ma, mb in zip(a.master, b.master):
        assert torch.allclose(ma, mb, atol=1e-6)
    assert all(p.grad is None for p in a.params)  # fp32 accumulation left no bf16 gradient behind


def test_offload_state_round_trip_keeps_the_update_exact():
    from coevolve.rl import Learner, LearnerConfig

    a, b = Learner(tiny(), LearnerConfig(lr=1e-4)), Learner(tiny(), LearnerConfig(lr=1e-4))
    a.step(groups(1))
    b.step(groups(1))
    before = torch.cuda.memory_allocated()
    b.offload_state()
    assert all(m.device.type == "cpu" for m in b.master)
    assert all(v.device.type == "cpu" for st in b.optimizer.state.values() for k, v in st.items() if k != "step")
    assert torch.cuda.memory_allocated() < before
    a.step(groups(2))
    b.step(groups(2))  # brings the state back by itself
    assert all(m.device.type == "cuda" for m in b.master)
    for ma, mb in zip(a.master, b.master):
        assert torch.equal(ma, mb)


def test_offload_optimizer_keeps_state_on_cpu_and_trains():
    from coevolve.rl import Learner, LearnerConfig

    lr = Learner(tiny(), LearnerConfig(lr=1e-3, offload_optimizer=True))
    p0 = [p.detach().clone() for p in lr.params]
    lr.step(groups(3))
    assert all(m.device.type == "cpu" for m in lr.master)
    assert all(p.device.type == "cuda" for p in lr.params)
    assert any(not torch.equal(a, b) for a, b in zip(p0, lr.params))


def test_role_offload_onload_and_parked_sampler():
    from coevolve.engine import HFSampler, load_model
    from coevolve.loop import ParkedSampler, Role
    from coevolve.rl import Learner, LearnerConfig
    from coevolve.types import SamplingParams
    from coevolve.world.toy import ToyPrompter, ensure_base

    model, tok = load_model(ensure_base(), device="cuda", dtype="bfloat16")
    lr = Learner(model, LearnerConfig(lr=1e-4))
    lr.step(groups(4, vocab=len(tok)))
    role = Role("solver", model, tok, HFSampler(model, tok), lr)
    used = torch.cuda.memory_allocated()
    role.offload(weights=True)
    assert next(model.parameters()).device.type == "cpu" and all(m.device.type == "cpu" for m in lr.master)
    assert torch.cuda.memory_allocated() < used
    role.onload()
    assert next(model.parameters()).device.type == "cuda"
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    prompt = [ToyPrompter().solver("3+4")]
    expected = role.sampler.sample(prompt, 2, params)
    frozen, _ = load_model(ensure_base(), device="cuda", dtype="bfloat16")
    frozen.load_state_dict(model.state_dict())
    parked = ParkedSampler(HFSampler(frozen, tok), frozen, torch.device("cuda"))
    assert next(frozen.parameters()).device.type == "cpu"
    out = parked.sample(prompt, 2, params)
    assert [c.token_ids for c in out[0]] == [c.token_ids for c in expected[0]]
    assert next(frozen.parameters()).device.type == "cpu"


def test_bf16_peak_memory_against_the_plan():
    """One learner step of a random Qwen3-0.6B-shaped bf16 model with every memory feature on:
    the plan's training peak must cover the measured peak without overstating it twice over."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from coevolve.plan import DEVICES, ModelShape, Train, role_memory
    from coevolve.rl import Learner, LearnerConfig

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(Qwen3Config(**QWEN3_06B)).to(torch.bfloat16)
    prompt, completion, rows = 128, 1024, 8
    cfg = LearnerConfig(lr=1e-6, micro_batch_size=64, max_tokens_per_micro_batch=2 * (prompt + completion))
    lr = Learner(model, cfg)
    lr.step(groups(5, n=1, G=2, vocab=151936, prompt=4, completion=3))  # AdamW state exists from here on
    rng = random.Random(6)
    from coevolve.rl import RolloutGroup

    batch = [
        RolloutGroup(
            [rng.randrange(3, 151936) for _ in range(prompt)],
            [[rng.randrange(3, 151936) for _ in range(completion)] for _ in range(4)],
            [0.0, 1.0, 0.0, 1.0],
        )
        for _ in range(rows // 4)
    ]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    lr.step(batch)
    peak = torch.cuda.max_memory_allocated()
    est = role_memory(
        "solver",
        ModelShape.from_config({**QWEN3_06B, "model_type": "qwen3"}),
        cfg,
        DEVICES["h200"],
        2,
        Train("solver", 1, rows, prompt, completion),
        None,
    )
    assert est.train_peak >= 0.9 * peak, (est.train_peak / 2**30, peak / 2**30)
    assert est.train_peak <= 2.0 * peak, (est.train_peak / 2**30, peak / 2**30)


def test_offload_optimizer_sums_on_the_device_and_moves_them_once_per_step(monkeypatch):
    """``offload_optimizer``: the fp32 gradient sums stay on the GPU through the micro-batches
    (no master gets a gradient before the end of the step), then reach the CPU masters once;
    the gradients equal an on-device learner's."""
    import coevolve.rl.learner as L
    from coevolve.rl import Learner, LearnerConfig

    off = Learner(tiny(), LearnerConfig(lr=1e-3, micro_batch_size=2, offload_optimizer=True))
    on = Learner(tiny(), LearnerConfig(lr=1e-3, micro_batch_size=2))
    seen: list[tuple[set[str], bool]] = []
    orig = L.policy_loss

    def spy(*a, **k):
        seen.append(
            ({s.sum.device.type for s in off._sums if s.sum is not None}, any(m.grad is not None for m in off.master))
        )
        return orig(*a, **k)

    grads = {}
    for name, lr in (("off", off), ("on", on)):
        got: list[torch.Tensor] = []
        step = lr.optimizer.step

        def record(*a, _lr=lr, _got=got, _step=step, **k):
            _got.extend(m.grad.detach().cpu().clone() for m in _lr.master)
            return _step(*a, **k)

        lr.optimizer.step = record
        if name == "off":
            monkeypatch.setattr(L, "policy_loss", spy)
        m = lr.step(groups(7))
        monkeypatch.setattr(L, "policy_loss", orig)
        grads[name] = got
    assert m["micro_batches"] >= 3 and len(seen) == m["micro_batches"]
    assert all(devs <= {"cuda"} for devs, _ in seen) and seen[-1][0] == {"cuda"}
    assert not any(master for _, master in seen)
    assert all(m_.device.type == "cpu" for m_ in off.master)
    for a, b in zip(grads["off"], grads["on"]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)


def test_close_gives_the_state_back_and_a_second_learner_trains():
    from coevolve.rl import Learner, LearnerConfig

    model = tiny()
    n = sum(p.numel() for p in model.parameters())
    a = Learner(model, LearnerConfig(lr=1e-3))
    a.step(groups(8))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    a.close()
    torch.cuda.synchronize()
    assert before - torch.cuda.memory_allocated() >= 0.9 * 12 * n  # fp32 masters + AdamW m and v
    w = [p.detach().clone() for p in model.parameters()]
    b = Learner(model, LearnerConfig(lr=1e-3))
    b.step(groups(9))
    assert any(not torch.equal(x, p) for x, p in zip(w, model.parameters()))
    assert all(m.grad is None for m in b.master)
