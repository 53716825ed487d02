"""A learner's life on CPU: gradient hooks removed on close (two learners in turn on one
model), fp32 LM-head gradients with no bf16 rounding on the way to the masters, and gradient
sums that reach the masters once per step. The CUDA halves (device-to-host once per step with
``offload_optimizer``) are in ``test_learner_memory_gpu.py``."""

from __future__ import annotations

import gc
import random

import pytest
import torch

from coevolve.errors import ConfigError, RunStateError
from coevolve.rl import Learner, LearnerConfig, RolloutGroup
from coevolve.rl.grpo import chunked_token_logprobs

torch.set_num_threads(1)
V = 40


def make_model(seed: int = 0, vocab: int = V, tie: bool = True):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return Qwen3ForCausalLM(cfg)


def make_groups(seed: int = 0, n_groups: int = 4, G: int = 4, vocab: int = V, max_len: int = 12):
    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        prompt = [1] + [rng.randrange(4, vocab) for _ in range(rng.randrange(2, 9))]
        comps = [[rng.randrange(3, vocab) for _ in range(rng.randrange(1, max_len))] + [2] for _ in range(G)]
        groups.append(RolloutGroup(prompt, comps, [float(k % 2) for k in range(G)]))
    return groups


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def changed(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return any(not torch.equal(x, y) for x, y in zip(a, b))


def plain_backward_leaves_grads(model) -> bool:
    """True when no foreign hook takes the gradients of a plain backward pass."""
    model.zero_grad(set_to_none=True)
    ids = torch.tensor([[1, 5, 6, 7]])
    model(input_ids=ids).logits.float().sum().backward()
    ok = all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    return ok


# ---------------------------------------------------------------- hooks and close
def test_two_learners_in_turn_on_one_model_both_update_it():
    model = make_model().to(torch.bfloat16)
    groups = make_groups(seed=1)
    a = Learner(model, LearnerConfig(lr=1e-2))
    w0 = weights(model)
    a.step(groups)
    w1 = weights(model)
    assert changed(w0, w1), "the first learner did not update the model"
    with pytest.raises(ConfigError, match="already trained by another open Learner"):
        Learner(model, LearnerConfig(lr=1e-2))
    masters_a = a.master
    kept_a = [m.detach().clone() for m in masters_a]
    a.close()
    a.close()  # idempotent
    assert a.closed and a.master is None
    with pytest.raises(RunStateError, match="closed"):
        a.step(groups)
    b = Learner(model, LearnerConfig(lr=1e-2))
    seen: list[torch.Tensor] = []
    orig = b.optimizer.step

    def record(*args, **kw):
        seen.extend(m.grad.detach().clone() for m in b.master)
        return orig(*args, **kw)

    b.optimizer.step = record  # type: ignore[method-assign]
    b.step(make_groups(seed=2))
    assert changed(w1, weights(model)), "the second learner did not update the model"
    assert seen and all(g.dtype == torch.float32 for g in seen) and any(g.abs().sum() > 0 for g in seen)
    # the closed learner's masters received nothing and did not move
    assert all(m.grad is None for m in masters_a)
    assert all(torch.equal(m.detach(), k) for m, k in zip(masters_a, kept_a))
    b.close()
    assert plain_backward_leaves_grads(model)


def test_context_manager_and_a_dropped_learner_leave_no_hooks():
    model = make_model().to(torch.bfloat16)
    with Learner(model, LearnerConfig(lr=1e-2)) as a:
        a.step(make_groups(seed=3))
    assert a.closed and plain_backward_leaves_grads(model)
    b = Learner(model, LearnerConfig(lr=1e-2))
    b.step(make_groups(seed=4))
    del b
    gc.collect()
    # dropped without close(): its hooks went with it, and a new learner may take the model
    assert plain_backward_leaves_grads(model)
    c = Learner(model, LearnerConfig(lr=1e-2))
    w = weights(model)
    c.step(make_groups(seed=5))
    assert changed(w, weights(model))


def test_fp32_models_have_no_hooks_and_still_close():
    model = make_model()
    a = Learner(model, LearnerConfig(lr=1e-2))
    assert a.master is None
    b = Learner(model, LearnerConfig(lr=1e-2))  # nothing hooked: two fp32 learners do not interfere
    w = weights(model)
    b.step(make_groups(seed=6))
    assert changed(w, weights(model))
    a.close()
    b.close()
    assert plain_backward_leaves_grads(model)


# ---------------------------------------------------------------- fp32 head gradient
def test_chunked_head_gradient_goes_to_the_sink_in_fp32():
    """The head's weight gradient summed over chunks: with a sink it arrives in fp32 (and
    autograd gets none); without, autograd rounds the same sum to bf16."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False).to(torch.bfloat16)
    h = torch.randn(37, 16, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 50, (37,))
    w = torch.randn(37)
    got: list[torch.Tensor] = []
    lp, _ = chunked_token_logprobs(head, h, t, 4, head_grad_sink=got.append)
    (lp * w).sum().backward()
    assert head.weight.grad is None and len(got) == 1 and got[0].dtype == torch.float32
    dh_sink = h.grad.clone()
    h.grad = None
    lp2, _ = chunked_token_logprobs(head, h, t, 4)
    (lp2 * w).sum().backward()
    assert torch.equal(lp, lp2) and torch.equal(h.grad, dh_sink)
    assert torch.equal(head.weight.grad, got[0].to(torch.bfloat16))  # the same sum, rounded
    assert not torch.equal(got[0], got[0].to(torch.bfloat16).float()), (
        "ten chunks summed in fp32 should not be bf16 values"
    )


def test_learner_head_master_gets_the_unrounded_fp32_head_gradient():
    """One micro-batch (no fp32 sum over micro-batches), untied head, chunks of 3 tokens: the
    master's head gradient holds values bf16 cannot represent, which a bf16 gradient handed over
    by autograd could never do."""
    model = make_model(tie=False).to(torch.bfloat16)
    lr = Learner(model, LearnerConfig(lr=1e-3, micro_batch_size=64, logprob_chunk_tokens=3, grad_clip=0.0))
    assert lr._head_sink is not None
    head_i = next(i for i, p in enumerate(lr.params) if p is model.lm_head.weight)
    seen: dict[str, torch.Tensor] = {}
    orig = lr.optimizer.step

    def record(*args, **kw):
        seen["head"] = lr.master[head_i].grad.detach().clone()
        return orig(*args, **kw)

    lr.optimizer.step = record  # type: ignore[method-assign]
    m = lr.step(make_groups(seed=7))
    assert m["micro_batches"] == 1.0
    g = seen["head"]
    assert g.dtype == torch.float32 and g.abs().sum() > 0
    assert not torch.equal(g, g.to(torch.bfloat16).float())


# ---------------------------------------------------------------- once per step
def test_gradient_sums_reach_the_masters_once_per_step(monkeypatch):
    """Between micro-batches the masters hold no gradient (the fp32 sums stay with the
    parameters, on their device); all of them arrive right before the optimizer step."""
    import coevolve.rl.learner as L

    model = make_model().to(torch.bfloat16)
    lr = Learner(model, LearnerConfig(lr=1e-3, micro_batch_size=3, offload_optimizer=True))
    calls: list[tuple[bool, bool]] = []
    orig_loss = L.policy_loss

    def spy(*a, **k):
        calls.append((any(m.grad is not None for m in lr.master), any(s.sum is not None for s in lr._sums)))
        return orig_loss(*a, **k)

    monkeypatch.setattr(L, "policy_loss", spy)
    taken: list[bool] = []
    orig_step = lr.optimizer.step

    def record(*a, **k):
        taken.append(all(m.grad is not None for m in lr.master) and all(s.sum is None for s in lr._sums))
        return orig_step(*a, **k)

    lr.optimizer.step = record  # type: ignore[method-assign]
    m = lr.step(make_groups(seed=8))
    assert m["micro_batches"] >= 3 and len(calls) == m["micro_batches"]
    assert not any(master for master, _ in calls), "a master received a gradient before the end of the step"
    assert all(s for _, s in calls[1:]), "the device sums should carry the earlier micro-batches"
    assert taken == [True]


def _zero_variance(g: RolloutGroup) -> RolloutGroup:
    return RolloutGroup(g.prompt_ids, g.completion_ids, [1.0] * len(g.completion_ids))


def _phase(model, cfg, batches, done: int = 0, load=None) -> list[float]:
    """A GRPO phase of len(batches) updates from update ``done`` on (after loading ``load``)."""
    learner = Learner(model, cfg)
    if load is not None:
        learner.load(load)
    learner.begin_phase(len(batches), done)
    lrs = [learner.step(b)["lr"] for b in batches[done:]]
    learner.close()
    return lrs


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
def test_lr_schedule_is_transformers_and_exact_on_resume(tmp_path, schedule):
    from transformers.optimization import get_scheduler

    cfg = LearnerConfig(lr=1e-2, lr_schedule=schedule, warmup_steps=2, epochs_per_batch=2)
    batches = [make_groups(seed=s) for s in range(5)]
    batches[2] = [_zero_variance(g) for g in batches[2]]  # a skipped update still moves the schedule
    once = make_model()
    lrs = _phase(once, cfg, batches)
    # the reference: transformers' scheduler stepped after each of the phase's 5 x 2 optimizer steps
    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=1e-2)
    name = "constant_with_warmup" if schedule == "constant" else schedule
    ref = get_scheduler(name, opt, num_warmup_steps=2, num_training_steps=10)
    want = []
    for _ in range(10):
        want.append(ref.get_last_lr()[0])
        opt.step()
        ref.step()
    assert lrs == pytest.approx(want[::2], rel=1e-12, abs=1e-15)
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(1e-2)
    # stopped after 3 updates and resumed from the checkpoint: the same weights as at once
    split = make_model()
    first = Learner(split, cfg)
    first.begin_phase(5, 0)
    for b in batches[:3]:
        first.step(b)
    ck = first.save(tmp_path / "ck")
    first.close()
    _phase(split, cfg, batches, done=3, load=ck)
    assert all(torch.equal(a, b) for a, b in zip(once.parameters(), split.parameters()))
