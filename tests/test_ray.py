"""engine.kind=ray: a Ray actor pool of hf engines on CPU (the ``ray`` lane: pytest -m ray).

One local Ray and one 2-actor pool, owned by one ``Engine``, for the whole module (starting them
is most of the lane's time); every test compares the pool with an in-process
``HFSampler(seed_scope="prompt")`` of the same weights, token id for token id."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a local Ray cluster and actor pools

from coevolve.config.base import EngineConfig  # noqa: E402
from coevolve.engine import Engine, HFSampler, freeze_sampler  # noqa: E402
from coevolve.engine.base import SamplerError  # noqa: E402
from coevolve.engine.ray import RaySampler  # noqa: E402
from coevolve.types import SamplingParams  # noqa: E402
from test_engine import make_model, make_tokenizer  # noqa: E402

torch.set_num_threads(1)

PROMPTS = [f"Q:{a}+{b}=\nA:" for a in range(3) for b in range(4)] + ["x", "Q:0+0=\nA:"]  # one repeat
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=10, seed=11)
ENGINE = EngineConfig(kind="ray", ray={"num_actors": 2, "object_store_memory": 100 * 2**20})


def ids(out):
    return [[c.token_ids for c in g] for g in out]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return make_model(len(tok))


@pytest.fixture(scope="module")
def run_engine():
    eng = Engine(ENGINE)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def pool_sampler(run_engine, model, tok):
    return run_engine.sampler(model, tok)


def reference(model, tok, prompts=PROMPTS, n=3, params=PARAMS):
    return HFSampler(model, tok, seed_scope="prompt").sample(prompts, n, params)


def test_pool_equals_in_process_prompt_scope(pool_sampler, model, tok):
    assert isinstance(pool_sampler, RaySampler) and len(pool_sampler.pool.actors) == 2
    p = SamplingParams(temperature=1.0, max_new_tokens=10, seed=11, return_logprobs=True)
    got = pool_sampler.sample(PROMPTS, 3, p)
    want = reference(model, tok, params=p)
    assert ids(got) == ids(want)
    assert [[c.logprobs for c in g] for g in got] == [[c.logprobs for c in g] for g in want]
    assert [g[0].prompt_ids for g in got] == [g[0].prompt_ids for g in want]
    assert [[c.text for c in g] for g in got] == [[c.text for c in g] for g in want]
    # the split over actors does not matter: one prompt alone, or an odd share, gives the same
    assert ids(pool_sampler.sample(PROMPTS[:1], 3, PARAMS)) == ids(reference(model, tok))[:1]
    assert ids(pool_sampler.sample(PROMPTS[:5], 3, PARAMS)) == ids(reference(model, tok))[:5]
    # and a per-call seed (one stream for the batch) would not have matched
    assert ids(HFSampler(model, tok).sample(PROMPTS, 3, PARAMS)) != ids(want)
    assert pool_sampler.sample([], 3, PARAMS) == []


def test_a_local_ray_started_by_the_pool_listens_on_loopback_only(pool_sampler):
    """Every socket the pool's Ray processes (GCS, raylet, workers, agents: this process's
    descendants) listen on is 127.0.0.1's: nothing of the pool is reachable from another machine
    (Ray 2.60 listens on all interfaces by default)."""
    import ipaddress

    psutil = pytest.importorskip("psutil")
    listening = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            listening |= {
                (proc.name(), c.laddr.ip) for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
            }
    assert {name for name, _ in listening} >= {"gcs_server", "raylet"}, listening
    ips = {ipaddress.ip_address(ip) for _, ip in listening}
    assert all((getattr(ip, "ipv4_mapped", None) or ip).is_loopback for ip in ips), listening


def test_actor_death_is_recovered_with_identical_results(pool_sampler, model, tok):
    import ray

    pool = pool_sampler.pool
    want = ids(reference(model, tok))
    before = list(pool.restarts)
    ray.get(pool.actors[1].arm_fault.remote())  # dies inside its next sample call
    assert ids(pool_sampler.sample(PROMPTS, 3, PARAMS)) == want
    assert pool.restarts[1] == before[1] + 1
    ray.kill(pool.actors[0], no_restart=True)  # dead between calls
    assert ids(pool_sampler.sample(PROMPTS, 3, PARAMS)) == want
    assert pool.restarts[0] == before[0] + 1


def test_actor_that_keeps_dying_raises_naming_it(pool_sampler, model, tok):
    import ray

    pool = pool_sampler.pool
    saved = pool.restarts[1]
    pool.restarts[1] = pool.engine.ray.max_restarts  # its restart budget is spent
    ray.get(pool.actors[1].arm_fault.remote())
    with pytest.raises(SamplerError, match=r"actor 1 died \d+ times \(engine.ray.max_restarts=3\)"):
        pool_sampler.sample(PROMPTS, 3, PARAMS)
    pool.restarts[1] = saved  # the next call recreates it and works again
    assert ids(pool_sampler.sample(PROMPTS, 3, PARAMS)) == ids(reference(model, tok))


def test_released_pool_frees_its_actors_and_comes_back_with_the_same_weights(run_engine, pool_sampler, model, tok):
    """What a verl phase does first (``Engine.release``): actors and placement group go, the
    slots stay; the next call starts new actors that serve the same weights."""
    import ray

    pool = pool_sampler.pool
    frozen = run_engine.frozen(pool_sampler, model, tok)
    pids = ray.get([a.pid.remote() for a in pool.actors])
    run_engine.release()
    assert pool.actors == [] and pool.pg is None
    assert ids(pool_sampler.sample(PROMPTS, 3, PARAMS)) == ids(reference(model, tok))
    assert ids(frozen.sample(PROMPTS[:3], 2, PARAMS)) == ids(reference(model, tok, PROMPTS[:3], 2))
    assert len(pool.actors) == 2 and set(ray.get([a.pid.remote() for a in pool.actors])).isdisjoint(pids)
    frozen.close()


@pytest.mark.parametrize("mode", ["broadcast", "path"])
def test_weight_sync_and_frozen_slot(run_engine, pool_sampler, model, tok, mode, tmp_path, monkeypatch):
    import ray

    engine = ENGINE.model_copy(update={"ray": ENGINE.ray.model_copy(update={"weight_sync": mode})})
    learner = copy.deepcopy(model)
    live = RaySampler.for_model(engine, learner, tok, owner=run_engine)
    assert live.pool is pool_sampler.pool  # new slots of the same actors, not a new pool
    monkeypatch.setattr(live.pool, "sync_dir", tmp_path / "engine")  # a run's Engine(scratch=...) sets it
    frozen = freeze_sampler(engine, live, learner, tok)
    base = ids(reference(model, tok))
    assert ids(live.sample(PROMPTS, 3, PARAMS)) == base
    with torch.no_grad():  # a "learner step"
        for prm in learner.parameters():
            prm.add_(0.05 * torch.randn_like(prm))
    built = ray.get([a.build_counts.remote() for a in live.pool.actors])
    live.sync_weights(learner)
    assert ray.get([a.build_counts.remote() for a in live.pool.actors]) == built  # loaded in place, not rebuilt
    synced = [p.relative_to(tmp_path).parts[:1] for p in tmp_path.rglob("*.safetensors")]
    assert synced == ([("engine",)] if mode == "path" else [])  # under the run folder, not the node's /tmp
    new = ids(live.sample(PROMPTS, 3, PARAMS))
    assert new != base
    assert new == ids(reference(learner, tok))  # equals a fresh in-process sampler of the new weights
    assert ids(frozen.sample(PROMPTS, 3, PARAMS)) == base  # the frozen slot kept the old weights
    with pytest.raises(SamplerError, match="frozen"):
        frozen.sync_weights(learner)
    n_slots = len(pool_sampler.pool.slots)
    live.close()
    frozen.close()
    assert len(pool_sampler.pool.slots) == n_slots - 2
    assert not list(tmp_path.rglob("*.safetensors"))  # the file goes with its slot


def test_the_engine_folder_of_a_run_is_emptied_at_start_and_removed_at_close(tmp_path):
    """What a killed run left in its engine folder (a weights file) is gone when the run's engine
    starts again, and the folder itself when it closes."""
    scratch = tmp_path / "engine"
    (scratch / "ray-weights-left").mkdir(parents=True)
    (scratch / "ray-weights-left" / "model.safetensors").write_bytes(b"x")
    eng = Engine(ENGINE, scratch=scratch)
    assert not scratch.exists()
    scratch.mkdir()
    eng.close()
    assert not scratch.exists()


def test_load_sampler_by_path(run_engine, pool_sampler, model, tok, tmp_path):
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    s = run_engine.load(str(tmp_path))
    assert s.pool is pool_sampler.pool
    assert isinstance(s, RaySampler)
    assert ids(s.sample(PROMPTS, 2, PARAMS)) == ids(reference(model, tok, n=2))
    s.close()


def test_tensor_parallel_vllm_actors_are_refused_before_a_pool_starts():
    """A TP-k bundle of a vllm actor would hold k GPUs and use one (the actor's in-process vLLM
    executor drives one GPU): refused by the engine as by `coevolve plan`, before any actor."""
    from coevolve.config.base import EngineConfig
    from coevolve.engine import check_engine
    from coevolve.engine.ray import tensor_parallel_refusal
    from coevolve.errors import ConfigError

    vllm_tp = EngineConfig(kind="ray", tensor_parallel_size=2, ray={"actor_engine": "vllm"})
    with pytest.raises(ConfigError, match=r"engine\.tensor_parallel_size=2 with engine\.ray\.actor_engine=vllm"):
        check_engine(vllm_tp)
    assert "hf actors run on one GPU" in tensor_parallel_refusal(EngineConfig(kind="ray", tensor_parallel_size=2))
    assert tensor_parallel_refusal(EngineConfig(kind="ray", ray={"actor_engine": "vllm"})) is None
    assert tensor_parallel_refusal(EngineConfig(kind="vllm", tensor_parallel_size=2)) is None  # verl's engines shard
