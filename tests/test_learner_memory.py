"""Learner memory features on CPU: chunked log-probs against the plain computation
(toy model and SmolLM2), token-budget packing, activation checkpointing (with and without LoRA),
fp32 gradient accumulation, optimizer placement, and the sampler's KV-token budget. Every
feature is checked to leave the update unchanged, since each only trades memory for time."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from coevolve.rl import Learner, LearnerConfig, RolloutGroup, sequence_logprobs
from coevolve.rl.batch import collate, pack_micro_batches, pack_rows
from coevolve.rl.grpo import chunked_token_logprobs
from coevolve.rl.learner_config import AUTO_CHECKPOINT_MIN_PARAMS, resolve_gradient_checkpointing, resolve_logprob_chunk
from coevolve.rl.precision import Fp32GradSum, fp32_accumulator

torch.set_num_threads(1)
V = 40


def make_model(seed: int = 0, vocab: int = V, layers: int = 2):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
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


def step_grads(learner: Learner, groups) -> tuple[dict, list[torch.Tensor]]:
    """One ``learner.step`` and the (clipped, fp32) gradients the optimizer received. The update
    is compared through its gradients: AdamW's first step is ~lr * sign(g), which turns rounding
    noise in near-zero gradient entries into lr-sized weight differences."""
    seen: list[torch.Tensor] = []
    orig = learner.optimizer.step

    def record(*a, **k):
        seen.extend(p.grad.detach().clone() for p in learner._opt_params())
        return orig(*a, **k)

    learner.optimizer.step = record  # type: ignore[method-assign]
    try:
        return learner.step(groups), seen
    finally:
        learner.optimizer.step = orig  # type: ignore[method-assign]


def assert_grads_close(ga: list[torch.Tensor], gb: list[torch.Tensor], rel: float) -> None:
    assert len(ga) == len(gb) and ga
    for a, b in zip(ga, gb):
        assert (a.float() - b.float()).abs().max() <= rel * max(a.abs().max().item(), 1e-12), (a - b).abs().max()


def batch_tensors(groups, pad_id: int = 0, left_pad_all: bool = False):
    seqs = [(g.prompt_ids, c, 1.0, None) for g in groups for c in g.completion_ids]
    return collate(seqs, pad_id, torch.device("cpu"), left_pad_all=left_pad_all)


def logp_and_grads(model, b, chunk, weights_NT):
    model.zero_grad(set_to_none=True)
    logp, ent = sequence_logprobs(
        model, b.input_ids, b.attention_mask, b.completion_mask, return_entropy=True, chunk_tokens=chunk
    )
    (logp * weights_NT).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent, grads


def exact_entropy(model, b):
    """fp64 entropy of the model's fp32 next-token distributions over the completion columns."""
    L, T = b.input_ids.shape[1], b.completion_mask.shape[1]
    pos = (b.attention_mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        z = model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=pos).logits
    lp = torch.log_softmax(z[:, L - T - 1 : L - 1].double(), -1)
    return -(lp.exp() * lp).sum(-1) * b.completion_mask.double()


def assert_same_logp_and_grads(model, b, chunk, atol=1e-5):
    g = torch.Generator().manual_seed(0)
    # a generic linear functional of logp, token-mean normalised like the GRPO loss
    w_NT = torch.randn(b.completion_mask.shape, generator=g) / b.completion_mask.sum()
    lp0, ent0, gr0 = logp_and_grads(model, b, None, w_NT)
    lp1, ent1, gr1 = logp_and_grads(model, b, chunk, w_NT)
    assert lp0.dtype == lp1.dtype == torch.float32
    assert (lp1[b.completion_mask == 0] == 0).all() and (ent1[b.completion_mask == 0] == 0).all()
    assert torch.allclose(lp0, lp1, atol=atol, rtol=0), (lp0 - lp1).abs().max()
    # entropy (a logged metric): the chunked value is within 1e-5 of the exact (fp64) entropy of
    # the same logits; the plain fp32 path itself is only within ~1e-4 of it on a 49k vocabulary
    ent64 = exact_entropy(model, b)
    assert torch.allclose(ent1.double(), ent64, atol=atol, rtol=0), (ent1.double() - ent64).abs().max()
    assert torch.allclose(ent0.double(), ent64, atol=2e-4, rtol=0)
    assert gr0.keys() == gr1.keys() and gr0
    for n in gr0:
        assert torch.allclose(gr0[n], gr1[n], atol=atol, rtol=0), (n, (gr0[n] - gr1[n]).abs().max())


# ---------------------------------------------------------------- chunked log-probs
@pytest.mark.slow  # the default toy base
@pytest.mark.parametrize("left_pad_all", [False, True])
def test_chunked_logprobs_equal_plain_on_toy_model(left_pad_all, toy_base):
    from coevolve.engine import load_model

    model, _ = load_model(toy_base, device="cpu", dtype="float32")
    model.train()
    vocab = model.config.vocab_size
    b = batch_tensors(make_groups(3, n_groups=3, vocab=vocab, max_len=20), left_pad_all=left_pad_all)
    for chunk in (7, 10_000):  # several chunks that straddle rows, and one chunk
        assert_same_logp_and_grads(model, b, chunk)


@pytest.mark.slow  # a 135M model
def test_chunked_logprobs_equal_plain_on_smollm2(smollm2):
    from coevolve.engine import load_model

    model, tok = load_model(smollm2, device="cpu", dtype="float32")
    model.train()
    texts = [
        ("Question: 2+3=?", " The answer is 5."),
        ("Hi", " Hello there, how are you today?"),
        ("Compute 7*6.", " 42"),
    ]
    groups = [
        RolloutGroup(tok(p)["input_ids"], [tok(c, add_special_tokens=False)["input_ids"]] * 2, [1.0, 0.0])
        for p, c in texts
    ]
    b = batch_tensors(groups, pad_id=tok.pad_token_id)
    assert resolve_logprob_chunk(LearnerConfig(), model.config.vocab_size) > 0  # auto: chunked for a real vocab
    assert_same_logp_and_grads(model, b, 5)


def test_chunked_token_logprobs_no_grad_and_errors():
    head = torch.nn.Linear(8, 30, bias=False)
    h = torch.randn(11, 8)
    t = torch.randint(0, 30, (11,))
    with torch.no_grad():
        lp, ent = chunked_token_logprobs(head, h, t, 4)
    full = torch.log_softmax(head(h), -1)
    assert torch.allclose(lp, full.gather(-1, t[:, None]).squeeze(-1), atol=1e-6)
    assert torch.allclose(ent, -(full.exp() * full).sum(-1), atol=1e-5)
    empty_lp, _ = chunked_token_logprobs(head, h[:0], t[:0], 4)
    assert empty_lp.shape == (0,)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_token_logprobs(head, h, t, 0)


@pytest.mark.parametrize("wrapped", [False, True])
def test_chunked_token_logprobs_gradients(wrapped):
    """The hand-written backward (plain Linear head) and the checkpointed fallback (any other
    head module) give the plain path's gradients for h and for the head weight."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 50, bias=False)
    head = torch.nn.Sequential(lin) if wrapped else lin
    h = torch.randn(13, 8, requires_grad=True)
    t = torch.randint(0, 50, (13,))
    g = torch.randn(13)
    lp, _ = chunked_token_logprobs(head, h, t, 4)
    (lp * g).sum().backward()
    gh, gw = h.grad.clone(), lin.weight.grad.clone()
    h.grad = None
    lin.weight.grad = None
    ref = torch.log_softmax(lin(h), -1).gather(-1, t[:, None]).squeeze(-1)
    (ref * g).sum().backward()
    assert torch.allclose(lp, ref, atol=1e-6)
    assert torch.allclose(gh, h.grad, atol=1e-6) and torch.allclose(gw, lin.weight.grad, atol=1e-6)


def test_chunked_path_bf16_matches_fp32_reference_closely():
    """Half-precision logits are upcast per chunk: values stay as close to an fp32 forward as the
    plain path's row-by-row upcast."""
    model = make_model(4, vocab=300).to(torch.bfloat16)
    b = batch_tensors(make_groups(5, vocab=300))
    with torch.no_grad():
        plain = sequence_logprobs(model, b.input_ids, b.attention_mask, b.completion_mask)
        chunked = sequence_logprobs(model, b.input_ids, b.attention_mask, b.completion_mask, chunk_tokens=9)
    assert chunked.dtype == torch.float32
    assert torch.allclose(plain.float(), chunked, atol=2e-2)


# ---------------------------------------------------------------- packing
def test_pack_micro_batches_budget_cover_and_legacy_order():
    rng = random.Random(0)
    lengths = [rng.randrange(1, 50) for _ in range(40)] + [120]
    packs = pack_micro_batches(lengths, 100, 8)
    assert sorted(i for p in packs for i in p) == list(range(len(lengths)))
    for p in packs:
        assert len(p) <= 8
        assert len(p) == 1 or len(p) * max(lengths[i] for i in p) <= 100
        assert lengths[p[0]] == max(lengths[i] for i in p)  # longest first
    assert packs[0] == [len(lengths) - 1]  # the over-budget row alone, first
    firsts = [lengths[p[0]] for p in packs]
    assert firsts == sorted(firsts, reverse=True)
    assert pack_micro_batches(lengths, None, 16) == [list(range(0, 16)), list(range(16, 32)), list(range(32, 41))]


def test_pack_rows_in_any_order_keeps_the_budget_and_the_order():
    """The sampler packs ascending, the learner descending: any order keeps rows x widest <= budget,
    covers each row once and keeps the given order (consecutive runs)."""
    rng = random.Random(1)
    widths = [rng.randrange(1, 60) for _ in range(50)] + [90]
    for order in (sorted(range(51), key=widths.__getitem__), rng.sample(range(51), 51)):
        packs = pack_rows(order, widths, 6, 80)
        assert [i for p in packs for i in p] == order
        assert all(len(p) <= 6 and (len(p) == 1 or len(p) * max(widths[i] for i in p) <= 80) for p in packs)
        # greedy: no pack could have taken the next pack's first row
        for p, q in zip(packs, packs[1:]):
            assert len(p) == 6 or (len(p) + 1) * max(widths[i] for i in [*p, q[0]]) > 80


def test_left_pad_all_layout_logprobs_equal_standard_layout():
    model = make_model(1).eval()
    groups = make_groups(2)
    a, b = batch_tensors(groups), batch_tensors(groups, left_pad_all=True)
    assert b.input_ids.shape[1] <= a.input_ids.shape[1]
    with torch.no_grad():
        la = sequence_logprobs(model, a.input_ids, a.attention_mask, a.completion_mask)
        lb = sequence_logprobs(model, b.input_ids, b.attention_mask, b.completion_mask)
    for i in range(la.shape[0]):
        assert torch.allclose(la[i][a.completion_mask[i] > 0], lb[i][b.completion_mask[i] > 0], atol=1e-5)


@pytest.mark.parametrize("budget", [24, 60])
def test_token_budget_micro_batches_do_not_change_the_update(budget):
    groups = make_groups(seed=5, n_groups=4)
    m0, ga = step_grads(Learner(make_model(), LearnerConfig(lr=1e-3, micro_batch_size=64)), groups)
    m, gb = step_grads(
        Learner(make_model(), LearnerConfig(lr=1e-3, micro_batch_size=64, max_tokens_per_micro_batch=budget)), groups
    )
    assert m0["micro_batches"] == 1 and m["micro_batches"] > 1 and 0 <= m["pad_frac"] < 0.5
    assert m["loss"] == pytest.approx(m0["loss"], abs=1e-7) and m["n_tokens"] == m0["n_tokens"]
    assert_grads_close(ga, gb, 1e-5)  # the global token normaliser: same gradient, summed in pieces


def test_packing_reduces_padding():
    groups = make_groups(seed=6, n_groups=6, max_len=30)
    plain = Learner(make_model(), LearnerConfig(lr=1e-3, micro_batch_size=4)).step(groups)
    packed = Learner(make_model(), LearnerConfig(lr=1e-3, micro_batch_size=4, max_tokens_per_micro_batch=10_000)).step(
        groups
    )
    assert packed["micro_batches"] == plain["micro_batches"]
    assert packed["pad_frac"] < plain["pad_frac"]


# ---------------------------------------------------------------- checkpointing, chunks, all together
def test_auto_rules():
    cfg = LearnerConfig()
    assert not resolve_gradient_checkpointing(cfg, 500_000) and resolve_gradient_checkpointing(
        cfg, AUTO_CHECKPOINT_MIN_PARAMS
    )
    assert resolve_gradient_checkpointing(LearnerConfig(gradient_checkpointing=True), 10)
    assert resolve_logprob_chunk(cfg, 104) == 0 and resolve_logprob_chunk(cfg, 151936) == 1024
    assert resolve_logprob_chunk(LearnerConfig(logprob_chunk_tokens=0), 151936) == 0
    lr = Learner(make_model(), LearnerConfig())
    assert not lr.gradient_checkpointing and lr.logprob_chunk == 0 and not lr.fused


@pytest.mark.parametrize("lora", [False, True])
def test_checkpointing_and_chunks_do_not_change_the_update(lora):
    if lora:
        pytest.importorskip("peft")
    groups = make_groups(seed=7)
    base = LearnerConfig(lr=1e-2, micro_batch_size=5, lora=lora, lora_r=4, lora_alpha=8)
    ref = Learner(make_model(), base)
    m0, g0 = step_grads(ref, groups)
    on = Learner(
        make_model(),
        base.model_copy(
            update=dict(gradient_checkpointing=True, logprob_chunk_tokens=6, max_tokens_per_micro_batch=40)
        ),
    )
    assert on.gradient_checkpointing
    layer = (on.model.get_base_model() if lora else on.model).model.layers[0]
    assert layer.gradient_checkpointing
    m, g1 = step_grads(on, groups)
    assert m["skipped"] == 0.0 and m["micro_batches"] > m0["micro_batches"]
    assert m["entropy"] == pytest.approx(m0["entropy"], abs=1e-5)
    assert m["loss"] == pytest.approx(m0["loss"], abs=1e-6)
    assert_grads_close(g0, g1, 1e-5)


def test_fp32_accumulator_sums_in_fp32_and_frees_half_grads():
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    acc = Fp32GradSum()
    p.register_post_accumulate_grad_hook(fp32_accumulator(acc))
    g1 = torch.tensor([1.0, 2.0**-9, 3.0])
    (p * g1.bfloat16()).sum().backward()
    assert p.grad is None and acc.sum.dtype == torch.float32 and acc.sum.device == p.device
    (p * torch.tensor([2.0**-9] * 3).bfloat16()).sum().backward()
    # 1 + 2^-9 is not representable in bf16 (8 bits of mantissa) but is in fp32
    assert acc.sum.tolist() == [1.0 + 2.0**-9, 2.0**-9 + 2.0**-9, 3.0 + 2.0**-9]
    assert p.grad is None


def test_bf16_learner_accumulates_fp32_gradients_close_to_an_fp32_model():
    groups = make_groups(seed=8)
    _, g32 = step_grads(Learner(make_model(), LearnerConfig(lr=1e-4, micro_batch_size=2)), groups)
    b = Learner(make_model().to(torch.bfloat16), LearnerConfig(lr=1e-4, micro_batch_size=2))
    _, g16 = step_grads(b, groups)
    assert all(g.dtype == torch.float32 for g in g16)
    assert all(p.grad is None for p in b.params) and all(m.grad is None for m in b.master)
    assert_grads_close(g32, g16, 0.05)  # bf16 forward/backward rounding only


def test_offload_and_fused_options_on_cpu():
    groups = make_groups(seed=9)
    ref = Learner(make_model().to(torch.bfloat16), LearnerConfig(lr=1e-4))
    off = Learner(make_model().to(torch.bfloat16), LearnerConfig(lr=1e-4, offload_optimizer=True, fused_optimizer=True))
    assert off.fused and off.state_device.type == "cpu" and all(m.device.type == "cpu" for m in off.master)
    ref.step(groups)
    off.offload_state()
    off.onload_state()
    off.step(groups)
    for ma, mb in zip(ref.master, off.master):
        assert torch.allclose(ma, mb, atol=1e-6)  # fused and foreach AdamW agree to rounding
    state = copy.deepcopy(off.optimizer.state_dict())
    off.offload_state()  # a no-op on a CPU machine: nothing moves, nothing changes
    assert all(
        torch.equal(state["state"][k]["exp_avg"], v["exp_avg"]) for k, v in off.optimizer.state_dict()["state"].items()
    )


# ---------------------------------------------------------------- sampler KV budget
@pytest.mark.slow  # the default toy base
def test_sampler_kv_token_budget_chunks_and_same_greedy_output(toy_base):
    from coevolve.engine import HFSampler, load_model
    from coevolve.types import SamplingParams
    from coevolve.world.toy import ToyPrompter, sample_tasks

    model, tok = load_model(toy_base, device="cpu", dtype="float32")
    prompts = [ToyPrompter().solver(t.question) for t in sample_tasks(random.Random(0), 6)]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    calls: list[int] = []
    plain = HFSampler(model, tok, max_batch=256)
    budget = HFSampler(
        model, tok, max_batch=256, max_batch_tokens=3 * (max(len(plain.encode(p)) for p in prompts) + 12)
    )
    orig = budget._generate_chunk
    budget._generate_chunk = lambda ids, prm: (calls.append(len(ids)), orig(ids, prm))[1]  # type: ignore[method-assign]
    a = plain.sample(prompts, 2, params)
    b = budget.sample(prompts, 2, params)
    assert max(calls) <= 3 and sum(calls) == 12
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
