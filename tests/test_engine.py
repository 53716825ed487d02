"""HFSampler / load_model on a tiny random Qwen3 and a char-level tokenizer (CPU, fast)."""

from __future__ import annotations

import math

import pytest
import torch

from coevolve.engine import HFSampler, Sampler, load_model
from coevolve.engine.base import SamplerError
from coevolve.errors import ModelLoadError
from coevolve.types import SamplingParams

torch.set_num_threads(1)

ADDED = ["<think>", "</think>", "<question>", "</question>"]


def make_tokenizer(bos: bool = True, pad: bool = True):
    """Char-level tokenizer like the toy world's: BOS by post-processor, plain added tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>"] + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    tk.decoder = decoders.Fuse()
    kw: dict = dict(tokenizer_object=tk, eos_token="</s>", unk_token="<unk>", padding_side="left")
    if bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        kw["bos_token"] = "<s>"
    if pad:
        kw["pad_token"] = "<pad>"
    tok = PreTrainedTokenizerFast(**kw)
    tok.add_tokens(ADDED)
    return tok


def make_model(vocab: int, seed: int = 0):
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
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():  # larger weights -> peaky, input-dependent distributions
            p.mul_(3.0)
    model.eval()
    return model


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return make_model(len(tok))


PROMPTS = ["Q:1+2=\nA:", "Q:12+345=\nA:", "Q:7*8=\nA:", "x"]


def naive_logprobs(model, prompt_ids, comp_ids):
    """Unbatched, unpadded forward: the obviously-correct reference."""
    ids = torch.tensor([prompt_ids + comp_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]  # (L, V)
    lp = torch.log_softmax(logits.double(), dim=-1)
    P = len(prompt_ids)
    return [lp[P - 1 + j, t].item() for j, t in enumerate(comp_ids)]


def test_protocol_and_shapes(model, tok):
    s = HFSampler(model, tok, max_batch=256)
    assert isinstance(s, Sampler)
    out = s.sample(PROMPTS, 3, SamplingParams(max_new_tokens=12, seed=1))
    assert len(out) == len(PROMPTS) and all(len(g) == 3 for g in out)
    for p, group in zip(PROMPTS, out):
        for c in group:
            assert c.prompt_ids == tok(p)["input_ids"] and c.prompt_ids[0] == tok.bos_token_id
            assert tok.pad_token_id not in c.prompt_ids
            assert 1 <= len(c.token_ids) <= 12
            if c.finish_reason == "stop":
                assert c.token_ids[-1] == tok.eos_token_id
                assert tok.eos_token_id not in c.token_ids[:-1]
            else:
                assert len(c.token_ids) == 12 and tok.eos_token_id not in c.token_ids
            assert c.logprobs is None


def test_eos_cut_forced(tok):
    """Deterministic EOS: with a huge EOS logit every completion is exactly [EOS]."""
    m = make_model(len(tok), seed=4)

    def hook(module, inputs, output):
        output[..., tok.eos_token_id] += 1e4
        return output

    h = m.lm_head.register_forward_hook(hook)
    try:
        out = HFSampler(m, tok).sample(["abc", "Q:12+3="], 2, SamplingParams(max_new_tokens=8, seed=0))
    finally:
        h.remove()
    for g in out:
        for c in g:
            assert c.token_ids == [tok.eos_token_id] and c.finish_reason == "stop" and c.text == ""


def test_batched_greedy_equals_unbatched(model, tok):
    s = HFSampler(model, tok)
    p = SamplingParams(temperature=0.0, max_new_tokens=16)
    batched = s.sample(PROMPTS, 1, p)
    for i, prompt in enumerate(PROMPTS):
        single = s.sample([prompt], 1, p)
        assert single[0][0].token_ids == batched[i][0].token_ids
    # the prompts have different lengths, so left padding was exercised
    assert len({len(tok(x)["input_ids"]) for x in PROMPTS}) > 1


def test_chunking_same_as_one_batch_greedy(model, tok):
    p = SamplingParams(temperature=0.0, max_new_tokens=10)
    one = HFSampler(model, tok, max_batch=256).sample(PROMPTS, 2, p)
    chunked = HFSampler(model, tok, max_batch=3).sample(PROMPTS, 2, p)
    assert [[c.token_ids for c in g] for g in one] == [[c.token_ids for c in g] for g in chunked]


def test_seeded_reproducible_and_global_rng_untouched(model, tok):
    s = HFSampler(model, tok, max_batch=5)
    p = SamplingParams(temperature=1.0, max_new_tokens=12, seed=123)
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    a = s.sample(PROMPTS, 4, p)
    after = torch.rand(1)
    assert torch.equal(before, after)  # the caller's RNG stream is not consumed
    b = s.sample(PROMPTS, 4, p)
    c = s.sample(PROMPTS, 4, SamplingParams(temperature=1.0, max_new_tokens=12, seed=124))
    ids = lambda o: [[x.token_ids for x in g] for g in o]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    # sampling actually samples: the 4 samples of a prompt are not all identical
    assert any(len({tuple(x) for x in g}) > 1 for g in ids(a))


def test_logprobs_match_naive_forward(model, tok):
    s = HFSampler(model, tok, logprob_batch=3)
    out = s.sample(PROMPTS, 2, SamplingParams(max_new_tokens=10, seed=7, return_logprobs=True))
    n_checked = 0
    for g in out:
        for c in g:
            assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
            ref = naive_logprobs(model, c.prompt_ids, c.token_ids)
            for a, b in zip(c.logprobs, ref):
                assert abs(a - b) < 1e-4
                n_checked += 1
            assert all(x <= 0 and math.isfinite(x) for x in c.logprobs)
    assert n_checked > 20


def test_added_tokens_survive_decoding(model, tok):
    s = HFSampler(model, tok)
    ids = tok("<think>1+2</think>\\boxed{3}", add_special_tokens=False)["input_ids"]
    assert s.decode(ids + [tok.eos_token_id]) == "<think>1+2</think>\\boxed{3}"
    assert s.decode([tok.bos_token_id] + ids + [tok.pad_token_id]) == "<think>1+2</think>\\boxed{3}"


def test_text_is_decoded_completion(model, tok):
    s = HFSampler(model, tok)
    out = s.sample(["Q:9-4="], 3, SamplingParams(max_new_tokens=8, seed=2))
    for c in out[0]:
        assert c.text == tok.decode(
            [t for t in c.token_ids if t not in tok.all_special_ids], clean_up_tokenization_spaces=False
        )


def test_tokenizer_without_pad_or_bos():
    """Qwen3-like: no BOS, no pad token (EOS is used as pad)."""
    t = make_tokenizer(bos=False, pad=False)
    assert t.pad_token_id is None
    m = make_model(len(t), seed=1)
    s = HFSampler(m, t)
    assert s.pad_id == t.eos_token_id
    p = SamplingParams(temperature=0.0, max_new_tokens=8, return_logprobs=True)
    batched = s.sample(PROMPTS, 1, p)
    for i, prompt in enumerate(PROMPTS):
        c = batched[i][0]
        assert c.prompt_ids == t(prompt)["input_ids"]
        assert c.token_ids == s.sample([prompt], 1, p)[0][0].token_ids
        ref = naive_logprobs(m, c.prompt_ids, c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref)) < 1e-4


def test_train_mode_restored(model, tok):
    model.train()
    HFSampler(model, tok).sample(["ab"], 1, SamplingParams(max_new_tokens=2, seed=0))
    assert model.training
    model.eval()
    HFSampler(model, tok).sample(["ab"], 1, SamplingParams(max_new_tokens=2, seed=0))
    assert not model.training


def test_bad_params(model, tok):
    s = HFSampler(model, tok)
    with pytest.raises(SamplerError, match="n must be"):
        s.sample(["a"], 0, SamplingParams())
    with pytest.raises(SamplerError, match="temperature"):
        s.sample(["a"], 1, SamplingParams(temperature=-1))
    with pytest.raises(SamplerError, match="not one string"):
        s.sample("abc", 1, SamplingParams())  # type: ignore[arg-type]


def test_load_model_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path / "empty")


def test_load_model_round_trip(tmp_path, model, tok):
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    m2, t2 = load_model(tmp_path / "m", device="cpu", dtype="auto")
    assert next(m2.parameters()).dtype == torch.float32
    assert t2.padding_side == "left"
    p = SamplingParams(temperature=0.0, max_new_tokens=8)
    a = HFSampler(model, tok).sample(PROMPTS, 1, p)
    b = HFSampler(m2, t2).sample(PROMPTS, 1, p)
    assert [g[0].text for g in a] == [g[0].text for g in b]


def test_stop_strings_and_stop_ids_cut_where_the_text_says(model, tok):
    """A stop string ends the completion at the token that completes it (the string is kept, so
    ``</question>`` can be parsed); a stop id ends it like EOS; both are recorded as the reason.
    Forced by biasing the logits so the model spells out a known sequence."""
    from coevolve.types import Stop

    target = tok("ab</question>zz", add_special_tokens=False)["input_ids"]

    def spell(module, inputs, output):
        pos = min(spell.i, len(target) - 1)
        output[:, -1, target[pos]] += 1e4
        spell.i += 1
        return output

    s = HFSampler(model, tok)
    for stop, want_text, want_reason in [
        (Stop(strings=("</question>",)), "ab</question>", "</question>"),
        (Stop(strings=("b<",)), "ab</question>", "b<"),  # cut at the token that completes it
        (Stop(strings=("z", "</question>")), "ab</question>", "</question>"),  # the earliest wins
        (Stop(token_ids=(target[1],)), "ab", target[1]),
    ]:
        spell.i = 0
        h = model.lm_head.register_forward_hook(spell)
        try:
            ((c,),) = s.sample(["Q:1+2=\nA:"], 1, SamplingParams(temperature=0.0, max_new_tokens=12, stop=stop))
        finally:
            h.remove()
        assert c.text == want_text and c.finish_reason == "stop" and c.stop_reason == want_reason, (stop, c)
        assert c.token_ids == target[: len(c.token_ids)]
    spell.i = 0
    h = model.lm_head.register_forward_hook(spell)
    try:
        ((c,),) = s.sample(["Q:1+2=\nA:"], 1, SamplingParams(temperature=0.0, max_new_tokens=4))
    finally:
        h.remove()
    assert c.finish_reason == "length" and c.stop_reason is None and len(c.token_ids) == 4


# ---------------------------------------------------------------- engine.seed_scope (per-prompt seeds)


def _ids(out):
    return [[c.token_ids for c in g] for g in out]


def test_prompt_seed_scope_does_not_depend_on_the_split(model, tok):
    """seed_scope=prompt: a prompt's samples depend on the call seed, its text and its
    occurrence only; any sub-call (an actor's share) with the call's seeds gives the same ids."""
    from coevolve.engine.base import prompt_seeds

    prompts = PROMPTS + [PROMPTS[0]]  # a repeated prompt gets its own draws
    p = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7, return_logprobs=True)
    whole = HFSampler(model, tok, seed_scope="prompt").sample(prompts, 3, p)
    seeds = prompt_seeds(7, prompts)
    other = HFSampler(model, tok, seed_scope="prompt")
    parts = other.sample_seeded(prompts[:2], 3, p, seeds[:2]) + other.sample_seeded(prompts[2:], 3, p, seeds[2:])
    assert _ids(whole) == _ids(parts)
    assert [[c.logprobs for c in g] for g in whole] == [[c.logprobs for c in g] for g in parts]
    assert _ids(whole)[0] != _ids(whole)[-1]  # occurrence 0 and 1 of the same text differ
    alone = HFSampler(model, tok, seed_scope="prompt").sample([PROMPTS[2]], 3, p)
    assert _ids(alone)[0] == _ids(whole)[2]  # the prompt's first occurrence: same seed alone or in a call
    # the call scope draws the batch from one stream: it differs from the per-prompt draws
    call = HFSampler(model, tok).sample(prompts, 3, p)
    assert _ids(call) != _ids(whole)


def test_prompt_seeds_reference():
    """``prompt_seeds`` against its formula written out."""
    from coevolve.engine.base import prompt_seeds
    from coevolve.run import derive_seed

    assert prompt_seeds(3, ["a", "b", "a", "a"]) == [
        derive_seed(3, "a", 0),
        derive_seed(3, "b", 0),
        derive_seed(3, "a", 1),
        derive_seed(3, "a", 2),
    ]
    assert prompt_seeds(None, ["a", "b"]) == [None, None]
    assert len(set(prompt_seeds(3, ["a", "a", "a"]))) == 3


def test_seed_scope_config_and_errors(model, tok, monkeypatch):
    from coevolve.config.base import EngineConfig, RecipeConfig, build_config
    from coevolve.engine import check_engine, make_sampler, seed_scope
    from coevolve.errors import ConfigError

    assert seed_scope(EngineConfig()) == "call"
    assert seed_scope(EngineConfig(kind="ray")) == "prompt"
    assert make_sampler(EngineConfig(), model, tok).seed_scope == "call"  # default path unchanged
    assert make_sampler(EngineConfig(seed_scope="prompt"), model, tok).seed_scope == "prompt"
    with pytest.raises(ConfigError, match="seed_scope=call"):
        check_engine(EngineConfig(kind="ray", seed_scope="call"))
    cfg = build_config(RecipeConfig, [("test", {"recipe": "x"})], ["engine=ray", "engine.ray.num_actors=3"])
    assert cfg.engine.kind == "ray" and cfg.engine.ray.num_actors == 3
    with pytest.raises(ConfigError, match="engine.ray.nope"):
        build_config(RecipeConfig, [("test", {"recipe": "x"})], ["engine.ray.nope=1"])
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match="coevolve\\[ray\\]"):
        check_engine(EngineConfig(kind="ray"))


def test_ray_engine_actor_in_process(model, tok, tmp_path):
    """The actor's logic without Ray (main lane): a slot rebuilt from config + tokenizer + state
    dict, and one loaded by path, sample exactly as an in-process per-prompt sampler; a
    broadcast state replaces the weights."""
    import copy

    from coevolve.config.base import EngineConfig
    from coevolve.engine.base import prompt_seeds
    from coevolve.engine.ray import EngineActor, ModelBlob

    engine = EngineConfig(kind="hf", seed_scope="prompt")
    actor = EngineActor(engine, threads=1)
    blob = ModelBlob(model.config, model.generation_config, tok)
    actor.add(0, None, "cpu", "float32", blob, model.state_dict())
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    actor.add(1, str(tmp_path), "cpu", "float32", None, None)
    p = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)
    want = _ids(HFSampler(model, tok, seed_scope="prompt").sample(PROMPTS, 2, p))
    seeds = prompt_seeds(5, PROMPTS)
    assert _ids(actor.sample(0, PROMPTS, 2, p, seeds)) == want
    assert _ids(actor.sample(1, PROMPTS, 2, p, seeds)) == want
    other = copy.deepcopy(model)
    with torch.no_grad():
        for prm in other.parameters():
            prm.add_(0.05 * torch.randn_like(prm))
    actor.load_state(0, other.state_dict())
    assert _ids(actor.sample(0, PROMPTS, 2, p, seeds)) == _ids(
        HFSampler(other, tok, seed_scope="prompt").sample(PROMPTS, 2, p)
    )
    actor.drop(0)
    assert list(actor.samplers) == [1]


def test_vllm_prompt_seeds_need_cuda():
    """vLLM's CPU build cannot seed single requests: seed_scope=prompt there is a ConfigError
    (raised before an engine is built; no vllm needed to check it)."""
    from coevolve.engine.vllm import check_seed_scope
    from coevolve.errors import ConfigError

    with pytest.raises(ConfigError, match="seed_scope=prompt with a vllm engine needs CUDA"):
        check_seed_scope("prompt", torch.device("cpu"))
    check_seed_scope("call", torch.device("cpu"))
    check_seed_scope(None, torch.device("cpu"))
    check_seed_scope("prompt", torch.device("cuda"))


def test_default_lane_never_imports_ray():
    """Ray is imported only when a pool starts: configs, the factory and the engine module load
    without it (so the main lane needs no ray, and `engine=ray` fails with the install line)."""
    import subprocess
    import sys

    code = (
        "import sys; from coevolve.config import load_config; import coevolve.engine, coevolve.engine.ray, "
        "coevolve.recipes.d2evo; load_config('grpo', None, ['engine=ray']); print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_inverse_cdf_draw_follows_the_distribution():
    """engine.token_draw=inverse-cdf: over 40k rows the drawn tokens' frequencies are the softmax's
    (within 5 standard errors); a token of probability 0 is never drawn; the draw is seeded."""
    from coevolve.engine.hf import _InverseCdfDraw

    p = torch.tensor([0.5, 0.0, 0.2, 0.25, 0.05])
    scores = torch.log(p).repeat(40_000, 1)  # (B, V), -inf at the impossible token
    torch.manual_seed(0)
    out = _InverseCdfDraw()(None, scores)
    assert bool(((out == 0).sum(-1) == 1).all()) and bool(torch.isinf(out).sum(-1).eq(4).all())
    freq = torch.bincount(out.argmax(-1), minlength=5).double() / scores.shape[0]
    se = (p.double() * (1 - p.double()) / scores.shape[0]).sqrt()
    assert freq[1] == 0
    assert bool(((freq - p.double()).abs() <= 5 * se + 1e-12).all()), freq
    torch.manual_seed(0)
    assert torch.equal(_InverseCdfDraw()(None, scores), out)


def test_inverse_cdf_engine_option(model, tok):
    """The hf engine with token_draw=inverse-cdf: a seeded call repeats, other seeds differ, rows of a
    prompt differ; top-k 1 is greedy (transformers' warpers still act); the default draws are untouched."""
    from coevolve.config.base import EngineConfig

    fast = HFSampler.for_model(EngineConfig(token_draw="inverse-cdf"), model, tok)
    ref = HFSampler(model, tok)
    p = SamplingParams(temperature=1.0, max_new_tokens=12, seed=123)
    ids = lambda o: [[x.token_ids for x in g] for g in o]  # noqa: E731
    a = ids(fast.sample(PROMPTS, 4, p))
    assert a == ids(fast.sample(PROMPTS, 4, p))
    assert a != ids(fast.sample(PROMPTS, 4, SamplingParams(temperature=1.0, max_new_tokens=12, seed=124)))
    assert any(len({tuple(x) for x in g}) > 1 for g in a)
    assert a != ids(ref.sample(PROMPTS, 4, p))  # other draws than multinomial's
    greedy = ids(ref.sample(PROMPTS, 1, SamplingParams(temperature=0.0, max_new_tokens=12)))
    assert ids(fast.sample(PROMPTS, 1, SamplingParams(temperature=0.7, top_k=1, max_new_tokens=12, seed=5))) == greedy
    with pytest.raises(SamplerError, match="token_draw"):
        HFSampler(model, tok, token_draw="gumbel")


def test_a_metered_call_moves_the_progress_bar_per_chunk(model, tok):
    """One long sampler call (a benchmark's evaluation) moves the phase's bar once per generated
    chunk, and in all by exactly its completions; the engine's hook is cleared after the call."""
    from coevolve.run.compute import ComputeMeter, MeteredSampler

    meter, ticks = ComputeMeter(), []
    meter.tick = ticks.append
    inner = HFSampler(model, tok, max_batch=3)
    out = MeteredSampler(inner, meter).sample(PROMPTS, 2, SamplingParams(temperature=0.0, max_new_tokens=4))
    rows = sum(len(g) for g in out)
    assert len(ticks) > 1 and sum(ticks) == rows and max(ticks) <= 3
    assert inner.progress is None and meter.total.rollouts == rows
    meter.tick = None  # no bar: no hook is set
    MeteredSampler(inner, meter).sample(PROMPTS[:1], 1, SamplingParams(temperature=0.0, max_new_tokens=2))
    assert inner.progress is None
