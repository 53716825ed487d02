"""engine.kind=ray, one actor driven in this process (no Ray needed): how a slot is built (on the
meta device, no random initialisation), how a weight sync reaches it (in place, nothing rebuilt)
and, for vllm actors, that every slot is a version of the actor's one engine (through the fake
``vllm.LLM`` of ``test_vllm_engine_sharing``, and for real in the vLLM lane: ``-m vllm``). The
pool around the actors is ``test_ray.py``."""

from __future__ import annotations

import copy

import pytest
import torch

import coevolve.engine.vllm as v
from coevolve.config.base import EngineConfig
from coevolve.engine import HFSampler
from coevolve.engine.ray import EngineActor, ModelBlob
from coevolve.engine.weights import host_snapshot, module_from_state
from coevolve.types import SamplingParams
from test_engine import make_model, make_tokenizer
from test_vllm import vllm_test
from test_vllm_engine_sharing import fake, fingerprint, tiny  # noqa: F401 - fake is a fixture

torch.set_num_threads(1)

PROMPTS = [f"Q:{a}+{b}=\nA:" for a in range(3) for b in range(3)] + ["x"]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=10, seed=11, return_logprobs=True)
HF_ACTOR = EngineConfig(kind="hf", seed_scope="prompt")  # what RayPool._inner_engine gives an hf actor


def draws(sampler):
    out = sampler.sample(PROMPTS, 3, PARAMS)
    return [[(c.token_ids, c.logprobs) for c in g] for g in out]


def blob_of(model, tok):
    return ModelBlob(model.config, model.generation_config, tok)


def built_the_old_way(model, dtype=torch.float32):
    """How an actor built a slot before: every weight randomly initialised by ``from_config``,
    then overwritten by the state dict."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_config(model.config, dtype=dtype)
    m.load_state_dict(host_snapshot(model, dtype))
    return m.eval()


def test_a_slot_built_on_the_meta_device_samples_as_one_built_the_old_way():
    tok = make_tokenizer()
    model = make_model(len(tok))
    actor = EngineActor(HF_ACTOR, threads=1)
    torch.manual_seed(123)
    rng = torch.random.get_rng_state()
    actor.add(0, None, "cpu", "float32", blob_of(model, tok), host_snapshot(model, torch.float32))
    # random initialisation would have drawn from the global generator
    assert torch.equal(torch.random.get_rng_state(), rng), "building a slot must not initialise weights"
    built = actor.models[0]
    assert built.lm_head.weight is built.model.embed_tokens.weight  # tied as the model was
    for name, buf in model.named_buffers():  # rotary tables: in no state dict, recomputed from the config
        assert torch.equal(dict(built.named_buffers())[name], buf), name
    old = HFSampler(built_the_old_way(model), tok, seed_scope="prompt")
    assert draws(actor.samplers[0]) == draws(old) == draws(HFSampler(model, tok, seed_scope="prompt"))


def test_module_from_state_refuses_a_state_dict_that_does_not_fit():
    tok = make_tokenizer()
    model = make_model(len(tok))
    state = host_snapshot(model, torch.float32)
    del state["model.norm.weight"]
    with pytest.raises(ValueError, match=r"does not fit Qwen3ForCausalLM.*missing_keys.*model\.norm\.weight"):
        module_from_state(model.config, state, torch.float32)


def learner_step(model, scale=0.05):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))


def save_state(model, path):
    from safetensors.torch import save_file

    save_file({k: t.contiguous() for k, t in host_snapshot(model, torch.float32).items()}, str(path))
    return str(path)


def test_path_sync_loads_into_the_slot_it_has_and_a_new_actor_builds_from_the_file(tmp_path):
    tok = make_tokenizer()
    model = make_model(len(tok))
    learner = copy.deepcopy(model)
    actor = EngineActor(HF_ACTOR, threads=1)
    actor.add(0, None, "cpu", "float32", blob_of(model, tok), host_snapshot(model, torch.float32))
    sampler, module = actor.samplers[0], actor.models[0]
    before = draws(sampler)
    learner_step(learner)
    path = save_state(learner, tmp_path / "model.safetensors")
    actor.load_state(0, path)  # weight_sync=path
    assert actor.samplers[0] is sampler and actor.models[0] is module and actor.build_counts() == {0: 1}
    after = draws(sampler)
    assert after != before and after == draws(HFSampler(learner, tok, seed_scope="prompt"))
    # a recreated actor gets the slot from its blob and the latest file
    fresh = EngineActor(HF_ACTOR, threads=1)
    fresh.add(0, None, "cpu", "float32", blob_of(model, tok), path)
    assert draws(fresh.samplers[0]) == after


CALL_SCOPE = EngineConfig(kind="vllm", kv_cache_gib=0.25, seed_scope="call")
"""A vllm actor's engine section (the pool sets seed_scope=prompt, which only CUDA runs; the
fake engine here samples per call)."""


def test_a_vllm_actor_serves_every_slot_from_one_engine_and_syncs_without_rebuilding(fake, tmp_path):  # noqa: F811
    solver, tok = tiny(0)
    judge, _ = tiny(2)
    judge.save_pretrained(tmp_path / "judge")
    tok.save_pretrained(tmp_path / "judge")
    actor = EngineActor(CALL_SCOPE, threads=1)
    blob = ModelBlob(solver.config, solver.generation_config, tok)
    actor.add(0, None, "cpu", "float32", blob, host_snapshot(solver, torch.float32))  # the live solver
    actor.add(1, None, "cpu", "float32", blob, host_snapshot(solver, torch.float32))  # its frozen scorer
    actor.add(2, str(tmp_path / "judge"), "cpu", "float32", None, None)  # a folder model
    engine = actor.samplers[0].engine
    assert len(fake.llms) == 1 and all(s.engine is engine for s in actor.samplers.values())
    frozen_fp = fingerprint(v.hf_weights(solver))
    learner_step(solver, 0.5)
    actor.load_state(0, save_state(solver, tmp_path / "model.safetensors"))  # weight_sync=path
    actor.load_state(0, host_snapshot(solver, torch.float32))  # and broadcast
    assert len(fake.llms) == 1 and actor.samplers[0].engine is engine and engine.llm is not None
    assert actor.build_counts() == {0: 1, 1: 1, 2: 1}
    p = SamplingParams(temperature=1.0, max_new_tokens=4)
    for sid in (0, 1, 2, 0):
        actor.samplers[sid].sample(["1+1="], 2, p)
    live_fp = fingerprint(v.hf_weights(solver))
    judge_fp = fingerprint(v.hf_weights(judge))
    assert fake.llms[0].generated_with == [live_fp, frozen_fp, judge_fp, live_fp]
    actor.drop(1)  # a frozen scorer dropped at the end of its round: the engine stays
    assert engine.llm is not None
    actor.drop(0)
    actor.drop(2)
    assert engine.llm is None  # closed with its last slot


@vllm_test
def test_a_real_vllm_actor_serves_its_slots_from_one_engine_and_path_sync_keeps_it(tmp_path):
    """The same with vLLM's CPU engine and the toy base: greedy draws of the live slot follow
    the synced weights, the frozen slot keeps its own, both equal HF's, one engine throughout."""
    import random

    from coevolve.engine import load_model
    from coevolve.world.toy import ToyPrompter, ensure_base, sample_tasks

    model, tok = load_model(ensure_base(), device="cpu", dtype="float32")
    model.eval()
    prompts = [ToyPrompter().solver(t.question) for t in sample_tasks(random.Random(0), 12)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=32)

    def hf_ids(m):
        return [g[0].token_ids for g in HFSampler(m, tok).sample(prompts, 1, greedy)]

    def slot_ids(sid):
        return [g[0].token_ids for g in actor.samplers[sid].sample(prompts, 1, greedy)]

    actor = EngineActor(CALL_SCOPE, threads=1)
    blob = ModelBlob(model.config, model.generation_config, tok)
    try:
        actor.add(0, None, "cpu", "float32", blob, host_snapshot(model, torch.float32))
        actor.add(1, None, "cpu", "float32", blob, host_snapshot(model, torch.float32))
        engine = actor.samplers[0].engine
        assert actor.samplers[1].engine is engine and len([e for e in v._ENGINES if e.llm is not None]) == 1
        base = hf_ids(model)
        assert slot_ids(0) == base
        learner = copy.deepcopy(model)
        torch.manual_seed(0)
        learner_step(learner, 0.02)
        actor.load_state(0, save_state(learner, tmp_path / "model.safetensors"))
        new = hf_ids(learner)
        assert new != base
        assert slot_ids(0) == new and slot_ids(1) == base and slot_ids(0) == new
        assert actor.samplers[0].engine is engine and actor.build_counts() == {0: 1, 1: 1}
        assert len([e for e in v._ENGINES if e.llm is not None]) == 1
    finally:
        for sid in list(actor.samplers):
            actor.drop(sid)
    assert engine.llm is None
