"""engine.kind=ray, one actor driven in this process (no Ray needed): how a slot is built (on the
meta device, no random initialisation) and how a weight sync reaches it (in place, nothing
rebuilt). The pool around the actors is ``test_ray.py``."""

from __future__ import annotations

import copy

import pytest
import torch

from coevolve.config.base import EngineConfig
from coevolve.engine import HFSampler
from coevolve.engine.ray import EngineActor, ModelBlob
from coevolve.engine.weights import host_snapshot, module_from_state
from coevolve.types import SamplingParams
from test_engine import make_model, make_tokenizer

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
