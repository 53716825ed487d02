"""The shared-prompt log-prob pass (``learner.share_prompt``) against the row-by-row reference:
equal values, equal gradients, equal learner updates."""

from __future__ import annotations

import pytest
import torch

from coevolve.errors import ConfigError
from coevolve.rl.grpo import RLInputError, sequence_logprobs, shared_prompt_logprobs
from coevolve.rl.learner import Learner, LearnerConfig, RolloutGroup


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def _rows(prompts, comps, G):
    """The reference layout: [left-padded prompt | right-padded completion] per row."""
    P, T = max(map(len, prompts)), max(map(len, comps))
    N = len(comps)
    ids = torch.zeros((N, P + T), dtype=torch.long)
    attn = torch.zeros((N, P + T), dtype=torch.long)
    cm = torch.zeros((N, T))
    for i, c in enumerate(comps):
        p = prompts[i // G]
        ids[i, P - len(p) : P] = torch.tensor(p)
        attn[i, P - len(p) : P] = 1
        ids[i, P : P + len(c)] = torch.tensor(c)
        attn[i, P : P + len(c)] = 1
        cm[i, : len(c)] = 1
    return ids, attn, cm


def _shared(prompts, comps):
    P, T = max(map(len, prompts)), max(map(len, comps))
    pids = torch.zeros((len(prompts), P), dtype=torch.long)
    pm = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        pids[i, P - len(p) :] = torch.tensor(p)
        pm[i, P - len(p) :] = 1
    cids = torch.zeros((len(comps), T), dtype=torch.long)
    cm = torch.zeros((len(comps), T))
    for i, c in enumerate(comps):
        cids[i, : len(c)] = torch.tensor(c)
        cm[i, : len(c)] = 1
    return pids, pm, cids, cm


PROMPTS = [[5, 6, 7, 8, 9], [11, 12], [20, 21, 22, 23, 24, 25, 26]]
COMPS = [
    [1, 2, 3],
    [4],
    [7, 8, 9, 10],
    [3, 3],
    [40, 41, 42],
    [5],
    [60, 61],
    [62, 63, 64, 65, 66],
    [67],
]  # G = 3 per prompt, ragged


@pytest.mark.parametrize("chunk", [0, 4])
def test_values_and_gradients_equal_the_row_by_row_pass(chunk: int) -> None:
    model = _tiny_llama()
    ids, attn, cm = _rows(PROMPTS, COMPS, 3)
    ref, ref_ent = sequence_logprobs(model, ids, attn, cm, return_entropy=True, chunk_tokens=chunk)
    (ref * torch.arange(1, ref.numel() + 1).view_as(ref)).sum().backward()
    g_ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    got, got_ent = shared_prompt_logprobs(model, *_shared(PROMPTS, COMPS), return_entropy=True, chunk_tokens=chunk)
    (got * torch.arange(1, got.numel() + 1).view_as(got)).sum().backward()
    assert got.shape == ref.shape == (9, 5)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_ent, ref_ent, atol=1e-5, rtol=1e-5)
    assert (got[cm == 0] == 0).all()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, g_ref[n], atol=1e-5, rtol=1e-4, msg=n)


def test_groups_must_divide() -> None:
    with pytest.raises(RLInputError, match="do not split into groups"):
        shared_prompt_logprobs(_tiny_llama(), *_shared(PROMPTS[:2], COMPS[:5]))


def _groups():
    return [RolloutGroup(p, COMPS[3 * i : 3 * i + 3], [1.0, 0.0, float(i % 2)]) for i, p in enumerate(PROMPTS)]


@pytest.mark.parametrize("mb", [3, 4, 64])
def test_learner_update_equals_the_reference(mb: int) -> None:
    a, b = _tiny_llama(), _tiny_llama()
    la = Learner(a, LearnerConfig(lr=1e-2, micro_batch_size=mb))
    lb = Learner(b, LearnerConfig(lr=1e-2, micro_batch_size=mb, share_prompt=True))
    for lrn in (la, lb):  # plain SGD: the update is the gradient itself (Adam would blow up float noise of ~0 grads)
        lrn.optimizer = torch.optim.SGD(lrn._opt_params(), lr=1.0)
    ma, mb_ = la.step(_groups()), lb.step(_groups())
    assert ma["n_tokens"] == mb_["n_tokens"] and abs(ma["loss"] - mb_["loss"]) < 1e-6
    assert abs(ma["grad_norm"] - mb_["grad_norm"]) < 1e-5 * max(1.0, ma["grad_norm"])
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-5, rtol=1e-4, msg=n)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), _tiny_llama().parameters()))  # it moved


def test_needs_the_cache() -> None:
    with pytest.raises(ConfigError, match="share_prompt"):
        Learner(_tiny_llama(), LearnerConfig(share_prompt=True, gradient_checkpointing=True))


# ------------------------------------------------------------------------------ hf prefix cache


@pytest.mark.parametrize("scope", ["call", "prompt"])
def test_hf_prefix_cache_gives_the_same_tokens(scope: str) -> None:
    """engine.prefix_caching for hf: the prefix common to a call's rows is prefilled once; greedy
    tokens equal the reference path's, sampled tokens too (same seeds, same draws)."""
    from coevolve.engine import HFSampler
    from coevolve.types import SamplingParams

    model = _tiny_llama(3)

    class Tok:  # ids as text: "5 6 7" <-> [5, 6, 7]
        all_special_ids: list[int] = []
        pad_token_id = 0
        eos_token_id = 96

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [int(x) for x in text.split()]}

        def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
            return " ".join(map(str, ids))

    shared = " ".join(str(i) for i in range(10, 30))
    prompts = [f"{shared} 40 41", f"{shared} 50", f"{shared} 60 61 62 63", f"{shared} 50"]
    for params in (
        SamplingParams(temperature=0.0, max_new_tokens=6),
        SamplingParams(temperature=1.0, max_new_tokens=6, seed=7),
    ):
        ref = HFSampler(model, Tok(), max_batch=3, seed_scope=scope).sample(
            prompts, 2 if params.temperature else 1, params
        )
        got = HFSampler(model, Tok(), max_batch=3, seed_scope=scope, prefix_cache=True).sample(
            prompts, 2 if params.temperature else 1, params
        )
        assert [[c.token_ids for c in g] for g in got] == [[c.token_ids for c in g] for g in ref]
        assert [[c.prompt_ids for c in g] for g in got] == [[c.prompt_ids for c in g] for g in ref]


def test_bf16_learner_with_head_sink_matches_the_reference() -> None:
    """Half-precision weights (fp32 masters, the head's fp32 gradient sink, chunked head): the
    shared-prompt update equals the row-by-row one within bf16 rounding."""
    a, b = _tiny_llama(5).to(torch.bfloat16), _tiny_llama(5).to(torch.bfloat16)
    la = Learner(a, LearnerConfig(lr=1e-2, micro_batch_size=4, logprob_chunk_tokens=4))
    lb = Learner(b, LearnerConfig(lr=1e-2, micro_batch_size=4, logprob_chunk_tokens=4, share_prompt=True))
    for lrn in (la, lb):
        lrn.optimizer = torch.optim.SGD(lrn._opt_params(), lr=1.0)
    ma, mb_ = la.step(_groups()), lb.step(_groups())
    assert abs(ma["loss"] - mb_["loss"]) < 2e-2 * max(1.0, abs(ma["loss"]))
    assert abs(ma["grad_norm"] - mb_["grad_norm"]) < 5e-2 * ma["grad_norm"]
    moved = [float((pa.float() - pb.float()).abs().max()) for pa, pb in zip(a.parameters(), b.parameters())]
    steps = [
        float((pa.float() - pc.float()).abs().max()) for pa, pc in zip(a.parameters(), _tiny_llama(5).parameters())
    ]
    assert max(steps) > 0.05 and max(moved) < 0.1 * max(steps)  # both moved, by nearly the same update
