"""One vLLM engine per process, checked on CPU without vLLM: ``engine/vllm.py``'s engine
sharing, weight versions, sleep levels and close, driven through a fake ``vllm.LLM``.

The fake models what makes several engines unsafe in vLLM 0.32: one process-wide sleep
allocator (``device_allocator/cumem.py``: ``sleep`` unmaps every awake allocation of every
engine, discarding weights at level 2 and backing them up at level 1; ``wake_up(tags)`` maps
every sleeping allocation with those tags, a discarded one as garbage). It refuses to reload
into unmapped weights, to generate from garbage or without a KV cache, and to shut down an
engine whose memory is unmapped. The real engine's sleep/wake is in ``test_vllm_gpu.py``.
"""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest
import torch

import coevolve.engine.vllm as v
from coevolve.config.base import EngineConfig
from coevolve.engine import freeze_sampler, make_sampler
from coevolve.engine.base import SamplerError
from coevolve.errors import ConfigError
from coevolve.types import SamplingParams

torch.set_num_threads(1)


class FakeAllocator:
    """vLLM's ``CuMemAllocator``: one per process, shared by every engine in it."""

    def __init__(self) -> None:
        self.blocks: list[dict] = []  # {"llm", "tag", "state": awake | offloaded | discarded}

    def sleep(self, level: int) -> None:
        for b in self.blocks:
            if b["state"] == "awake":
                b["state"] = "offloaded" if (b["tag"] == "weights" and level == 1) else "discarded"

    def wake_up(self, tags: list[str] | None) -> None:
        for b in self.blocks:
            if b["state"] != "awake" and (tags is None or b["tag"] in tags):
                if b["state"] == "discarded" and b["tag"] == "weights":
                    b["llm"].weights = "garbage"
                b["state"] = "awake"


class FakeLLM:
    """The part of ``vllm.LLM`` the sampler uses, with the allocator's coupling."""

    def __init__(self, kw: dict, allocator: FakeAllocator, log: list) -> None:
        self.kw, self.alloc, self.log = kw, allocator, log
        self.weights = "dummy" if kw["load_format"] == "dummy" else fingerprint(v.folder_weights(kw["model"]))
        self.generated_with: list[float] = []
        self.shut = False
        for tag in ("weights", "kv_cache"):
            allocator.blocks.append({"llm": self, "tag": tag, "state": "awake"})
        self.llm_engine = SimpleNamespace(
            model_config=SimpleNamespace(max_model_len=256), engine_core=SimpleNamespace(shutdown=self._shutdown)
        )

    def mapped(self, tag: str) -> bool:
        return all(b["state"] == "awake" for b in self.alloc.blocks if b["llm"] is self and b["tag"] == tag)

    def collective_rpc(self, method: str, kwargs: dict) -> None:
        assert method == "reload_weights" and kwargs["is_checkpoint_format"]
        assert self.mapped("weights"), "reload into unmapped weights"
        self.weights = fingerprint(kwargs["weights_iterator"])
        self.log.append(("reload", self.weights))

    def reset_prefix_cache(self) -> None:
        pass

    def sleep(self, level: int) -> None:
        self.log.append(("sleep", level))
        self.alloc.sleep(level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.log.append(("wake", None if tags is None else tuple(tags)))
        self.alloc.wake_up(tags)

    def generate(self, requests, params, use_tqdm: bool = False):
        assert self.mapped("weights") and self.mapped("kv_cache"), "generate on unmapped memory"
        assert isinstance(self.weights, float), f"generate from {self.weights} weights"
        self.generated_with.append(self.weights)
        eos = 2
        return [
            SimpleNamespace(
                outputs=[
                    SimpleNamespace(index=k, token_ids=[eos], finish_reason="stop", stop_reason=eos, logprobs=None)
                    for k in range(params.n)
                ]
            )
            for _ in requests
        ]

    def _shutdown(self) -> None:
        assert all(b["state"] == "awake" for b in self.alloc.blocks if b["llm"] is self), "freeing unmapped memory"
        self.alloc.blocks = [b for b in self.alloc.blocks if b["llm"] is not self]
        self.shut = True
        self.log.append(("shutdown", None))


def fingerprint(weights) -> float:
    """A number that tells weight versions apart (the embedding is in every checkpoint)."""
    return round(sum(float(t.double().sum()) for n, t in weights if "embed_tokens" in n), 6)


@pytest.fixture
def fake(monkeypatch):
    """Every engine this test starts is a ``FakeLLM`` on one ``FakeAllocator``; vLLM need not be
    installed. ``fake.sleeps(True)`` makes the CPU count as a device that sleeps."""
    state = SimpleNamespace(alloc=FakeAllocator(), log=[], llms=[])

    def start(kw, device):
        llm = FakeLLM(kw, state.alloc, state.log)
        state.llms.append(llm)
        return llm

    monkeypatch.setattr(v, "require_vllm", lambda *a, **k: None)
    monkeypatch.setattr(v, "_start_llm", start)
    monkeypatch.setattr(v.VLLMSampler, "_vllm_params", lambda self, n, params: SimpleNamespace(n=n))
    state.sleeps = lambda on: monkeypatch.setattr(v, "_sleep_capable", lambda d: on)
    yield state
    for e in list(v._ENGINES):  # what a test left open must not leak into the next one
        e.close()
    gc.collect()


def tiny(seed: int, hidden: int = 32):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from coevolve.world.toy.tokenizer import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return Qwen3ForCausalLM(cfg).eval(), tok


def fp_model(model) -> float:
    return fingerprint(v.hf_weights(model))


CFG = EngineConfig(kind="vllm", kv_cache_gib=0.25)
P = SamplingParams(temperature=1.0, max_new_tokens=4)


def test_one_engine_serves_live_roles_frozen_copies_and_folders_at_sleep_level_2(fake, tmp_path):
    fake.sleeps(True)
    solver, tok = tiny(0)
    challenger, _ = tiny(1)
    judge, _ = tiny(2)
    judge.save_pretrained(tmp_path / "judge")
    tok.save_pretrained(tmp_path / "judge")
    a = make_sampler(CFG, solver, tok)
    b = make_sampler(CFG, challenger, tok)
    frozen = freeze_sampler(CFG, a, solver, tok)
    folder = v.VLLMSampler.for_path(CFG, tmp_path / "judge", tok, device="cpu", dtype="float32")
    assert len(fake.llms) == 1 and a.engine is b.engine is frozen.engine is folder.engine
    llm = fake.llms[0]
    want = {"a": fp_model(solver), "b": fp_model(challenger), "judge": fp_model(judge)}
    frozen_fp = want["a"]
    with torch.no_grad():  # the solver trains on; the frozen copy must not follow it
        solver.model.embed_tokens.weight.add_(0.5)
    a.sync_weights(solver)
    want["a"] = fp_model(solver)
    order = [(a, "a"), (b, "b"), (frozen, "frozen"), (folder, "judge"), (a, "a"), (folder, "judge"), (b, "b")]
    for s, _ in order:
        s.sample(["1+1="], 2, P)
    expect = [frozen_fp if k == "frozen" else want[k] for _, k in order]
    assert llm.generated_with == expect
    sleeps = [lvl for what, lvl in fake.log if what == "sleep"]
    assert sleeps and set(sleeps) == {2}, "every sleep must discard (level 2): versions are pushed on wake"
    # level 2 discards: every call reloads its version after waking, the folder's from disk too
    reloads = [x for what, x in fake.log if what == "reload"]
    assert reloads[-len(order) :] == expect


def test_a_folder_engine_alone_sleeps_at_level_2_and_reloads_from_disk(fake, tmp_path):
    fake.sleeps(True)
    judge, tok = tiny(3)
    judge.save_pretrained(tmp_path / "j")
    tok.save_pretrained(tmp_path / "j")
    s = v.VLLMSampler.for_path(CFG, tmp_path / "j", tok, device="cpu", dtype="float32")
    assert fake.log[-1] == ("sleep", 2)
    s.sample(["2+2="], 1, P)
    s.sample(["2+2="], 1, P)
    assert fake.llms[0].generated_with == [fp_model(judge)] * 2
    assert [x for what, x in fake.log if what == "reload"] == [fp_model(judge)] * 2


def test_without_sleep_versions_switch_in_memory_and_folders_need_safetensors(fake, tmp_path):
    fake.sleeps(False)
    m1, tok = tiny(4)
    m2, _ = tiny(5)
    a, b = make_sampler(CFG, m1, tok), make_sampler(CFG, m2, tok)
    assert a.engine is b.engine and not a.engine.sleep_mode
    for s, m in ((a, m1), (b, m2), (b, m2), (a, m1)):
        s.sample(["3+3="], 1, P)
    assert fake.llms[0].generated_with == [fp_model(m) for m in (m1, m2, m2, m1)]
    assert [w for w, _ in fake.log].count("reload") == 3  # at start (a), then one per switch (b, a); none for b again
    assert not any(w in ("sleep", "wake") for w, _ in fake.log)
    (tmp_path / "bin").mkdir()
    m1.config.save_pretrained(tmp_path / "bin")
    with pytest.raises(ConfigError, match=r"no \*\.safetensors"):
        v.VLLMSampler.for_path(CFG, tmp_path / "bin", tok, device="cpu", dtype="float32")


@pytest.mark.parametrize("sleeps", [True, False], ids=["sleep", "no-sleep"])
def test_a_model_of_another_shape_is_refused_while_an_engine_runs(fake, sleeps):
    """Asleep or not: vLLM's shutdown of either engine would tear down the other's process-wide
    state. Once the running engine is closed, the other shape gets one."""
    fake.sleeps(sleeps)
    m1, tok = tiny(6)
    other, _ = tiny(7, hidden=48)
    a = make_sampler(CFG, m1, tok)
    with pytest.raises(
        ConfigError,
        match=r"(?s)cannot be served by the vLLM engine already running.*config.hidden_size: "
        r"48 vs 32.*One process holds one vLLM engine",
    ):
        make_sampler(CFG, other, tok)
    with pytest.raises(ConfigError, match=r"engine.kv_cache_gib: 0.5 vs 0.25"):
        make_sampler(EngineConfig(kind="vllm", kv_cache_gib=0.5), m1, tok)
    assert len(fake.llms) == 1
    a.close()
    b = make_sampler(CFG, other, tok)  # the first engine is gone: the new shape gets its own
    assert len(fake.llms) == 2 and fake.llms[0].shut and b.engine is not a.engine
    b.sample(["1="], 1, P)
    assert fake.llms[1].generated_with == [fp_model(other)]


def test_the_engine_closes_with_its_last_owner_and_wakes_before_shutdown(fake):
    fake.sleeps(True)
    m1, tok = tiny(10)
    m2, _ = tiny(11)
    a, b = make_sampler(CFG, m1, tok), make_sampler(CFG, m2, tok)
    frozen = freeze_sampler(CFG, a, m1, tok)
    a.sample(["5="], 1, P)
    assert a.engine.asleep
    a.close()
    a.close()  # idempotent: one share is released once
    assert not fake.llms[0].shut and a.engine.holders == 1
    frozen.sample(["5="], 1, P)  # still served: b holds the engine
    b.close()
    assert fake.llms[0].shut
    assert fake.log[-2:] == [("wake", None), ("shutdown", None)]  # mapped again before anything is freed
    with pytest.raises(SamplerError, match="closed"):
        frozen.sample(["5="], 1, P)


def test_a_dropped_sleeping_engine_is_woken_before_it_is_freed(fake):
    fake.sleeps(True)
    m1, tok = tiny(12)
    s = make_sampler(CFG, m1, tok)
    s.sample(["7="], 1, P)
    llm = fake.llms[0]
    del s
    gc.collect()
    assert llm.shut and fake.log[-2:] == [("wake", None), ("shutdown", None)]


def test_never_samples_from_discarded_weights(fake, monkeypatch):
    """A reload that fails after a level-2 wake leaves no version behind, so the next call
    reloads; and a call whose version was not pushed after the wake is refused."""
    fake.sleeps(True)
    m1, tok = tiny(13)
    s = make_sampler(CFG, m1, tok)
    llm = fake.llms[0]
    real = llm.collective_rpc

    def broken(method, kwargs):
        raise RuntimeError("reload failed")

    llm.collective_rpc = broken
    with pytest.raises(RuntimeError, match="reload failed"):
        s.sample(["9="], 1, P)
    assert s.engine.loaded is None
    llm.collective_rpc = real
    s.engine.rest()  # whatever the failed call left awake goes back to sleep
    s.sample(["9="], 1, P)
    assert llm.generated_with == [fp_model(m1)]
    monkeypatch.setattr(v.VLLMSampler, "_ensure", lambda self: None)
    with pytest.raises(SamplerError, match="not loaded after wake-up"):
        s.sample(["9="], 1, P)
    assert llm.generated_with == [fp_model(m1)]


def test_serves_ignores_where_a_config_came_from(tmp_path):
    """A checkpoint saved by a run (another ``_name_or_path``, dtype field, transformers
    version) is the same engine as the live model it came from."""
    from transformers import AutoConfig, GenerationConfig

    m, tok = tiny(14)
    m.save_pretrained(tmp_path / "c")
    a = v.serves(CFG, m.config, tok, m.generation_config, torch.float32, torch.device("cpu"), arch=type(m).__name__)
    b = v.serves(
        CFG,
        AutoConfig.from_pretrained(tmp_path / "c"),
        tok,
        GenerationConfig.from_pretrained(tmp_path / "c"),
        torch.float32,
        torch.device("cpu"),
    )
    assert a == b, a.differences(b)
    c = v.serves(CFG, m.config, tok, m.generation_config, torch.bfloat16, torch.device("cpu"), arch=type(m).__name__)
    assert c.differences(a) == ["dtype: bfloat16 vs float32"]
    assert v.serves(CFG, m.config, tok, None, torch.float32, torch.device("cuda"), arch="X").device == "cuda:0"


class V2Params:
    """The fields of ``vllm.SamplingParams`` the fake V2 runner reads."""

    def __init__(self, n: int, seed: int | None = None) -> None:
        self.n, self.seed = n, seed

    def clone(self) -> V2Params:
        return V2Params(self.n, self.seed)


def v2_generate(self, requests, params, use_tqdm: bool = False):
    """vLLM 0.32's Model Runner V2 (its CUDA default) as far as seeds go: a sample's draws are
    keyed by its seed alone (the Gumbel kernel hashes seed and position,
    ``v1/worker/gpu/sample/gumbel.py``); a request without a seed gets
    ``np.random.randint`` (``v1/worker/gpu/sample/states.py``); child i of a request with n
    samples gets ``seed + i`` (``v1/engine/parallel_sampling.py``). Torch's generator is not used."""
    import numpy as np

    ps = params if isinstance(params, list) else [params] * len(requests)
    outs = []
    for p in ps:
        self.seeds_seen.append(p.seed)
        base = p.seed if p.seed is not None else int(np.random.randint(-(2**63), 2**63 - 1, dtype=np.int64))
        rows = []
        for k in range(p.n):
            draw = torch.Generator().manual_seed((base + k) % 2**63)
            ids = torch.randint(3, 30, (4,), generator=draw).tolist()
            rows.append(
                SimpleNamespace(index=k, token_ids=ids, finish_reason="length", stop_reason=None, logprobs=None)
            )
        outs.append(SimpleNamespace(outputs=rows))
    return outs


def test_seeded_calls_repeat_on_a_v2_style_runner_through_per_request_seeds(fake, monkeypatch):
    """On CUDA vLLM 0.32 samples through Model Runner V2, which ignores torch's generator: a
    seeded call repeats only when each request carries its own seed, the Ray pool's per-prompt
    seeds (``prompt_seeds``). Unseeded requests would draw from numpy's global RNG, which moves
    between calls (and differs after a resume)."""
    import numpy as np

    from coevolve.engine.base import prompt_seeds

    fake.sleeps(False)
    monkeypatch.setattr(v, "_per_request_seeds", lambda device: True)  # the CPU stands for CUDA here
    monkeypatch.setattr(FakeLLM, "seeds_seen", [], raising=False)
    monkeypatch.setattr(FakeLLM, "generate", v2_generate)
    monkeypatch.setattr(v.VLLMSampler, "_vllm_params", lambda self, n, params: V2Params(n))
    m, tok = tiny(20)
    s = make_sampler(CFG, m, tok)
    prompts = ["1+1=", "2+2=", "1+1="]
    params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=7)

    def ids(out):
        return [[c.token_ids for c in row] for row in out]

    np.random.seed(1)
    a = ids(s.sample(prompts, 3, params))
    np.random.seed(2)  # another numpy state: a resumed run, or anything that drew in between
    b = ids(s.sample(prompts, 3, params))
    assert a == b
    assert FakeLLM.seeds_seen[-3:] == prompt_seeds(7, prompts)  # the seeds a Ray pool sends for this call
    assert a[0] != a[2] and len({tuple(x) for x in a[0]}) == 3  # a repeated prompt and each of n draw anew
    assert ids(s.sample(prompts[1:2], 3, params)) == a[1:2]  # a prompt draws as it does in any batch
    assert ids(s.sample(prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=4, seed=8))) != a
    s.sample(prompts[:1], 1, SamplingParams(temperature=1.0, max_new_tokens=4))
    assert FakeLLM.seeds_seen[-1] is None  # an unseeded call stays unseeded
