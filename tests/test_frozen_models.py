"""A frozen model the run's vLLM engine cannot serve (``engine.servable``): DiagEvo's shipped
real preset pairs a Qwen3-4B-Base policy with a Qwen3-4B-Instruct-2507 diagnoser, whose EOS id,
context length and rope theta differ, so the one vLLM engine of the run cannot hold it as a
weight version. Preflight and ``coevolve plan`` name it before the run folder exists, the plan
counts it as hf generate beside the engine, and ``Setup.load`` serves it with hf, parked in CPU
memory between the phases that use it. Checked with two tiny HF folders that differ the same
way, the fake vLLM engine of ``test_vllm_engine_sharing.py`` and the hf engine on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import coevolve.engine.vllm as v
from coevolve.config import load_config
from coevolve.config.base import EngineConfig
from coevolve.engine import Engine, HFSampler
from coevolve.engine.servable import unservable, unservable_frozen
from coevolve.errors import ConfigError
from coevolve.loop import PhaseParkedSampler
from coevolve.plan import DEVICES, GiB, make_plan
from coevolve.recipes.setup import Setup
from coevolve.run import Run
from coevolve.run.compute import unmetered
from coevolve.types import SamplingParams
from test_plan import QWEN3_4B, model_dir
from test_vllm_engine_sharing import fake, tiny  # noqa: F401 - ``fake`` is a fixture

torch.set_num_threads(1)
INSTRUCT = {"eos_token_id": 3, "max_position_embeddings": 2048, "rope_theta": 5.0e6}
"""How Qwen3-4B-Instruct-2507's config differs from Qwen3-4B-Base's, in the tiny model's terms."""


def folder(tmp_path: Path, name: str, seed: int, **changes) -> Path:
    """A tiny Qwen3 saved as a model folder (weights, config, generation config, toy tokenizer)."""
    model, tok = tiny(seed)
    for k, val in changes.items():
        setattr(model.config, k, val)
    if "rope_theta" in changes:
        model.config.rope_parameters = {"rope_theta": changes["rope_theta"], "rope_type": "default"}
    if "eos_token_id" in changes:
        model.generation_config.eos_token_id = changes["eos_token_id"]
    d = tmp_path / name
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_the_differences_are_named_for_vllm_engines_only(tmp_path):
    base, inst = folder(tmp_path, "base", 0), folder(tmp_path, "inst", 1, **INSTRUCT)
    same = folder(tmp_path, "same", 2)  # other weights, same model: a weight version of the engine
    vllm = EngineConfig(kind="vllm")
    diff = " ".join(unservable(vllm, base, inst))
    for what in ("config.eos_token_id: 3 vs 2", "max_position_embeddings: 2048 vs 256", "5000000", "generation_config"):
        assert what in diff, diff
    assert unservable(vllm, base, same) == []
    assert unservable(EngineConfig(kind="hf"), base, inst) == []
    ray = EngineConfig(kind="ray", ray={"actor_engine": "vllm"})
    assert unservable(ray, base, inst) and not unservable(EngineConfig(kind="ray"), base, inst)


def test_preflight_names_the_diagnoser_before_the_run_folder_exists(tmp_path, monkeypatch):
    from coevolve.preflight import preflight

    base, inst = folder(tmp_path, "base", 0), folder(tmp_path, "inst", 1, **INSTRUCT)
    over = [f"model.path={base}", f"diagnoser.model_path={inst}", "engine=vllm", "model.device=cpu"]
    cfg = load_config("diagevo", None, over)
    assert [(f, p) for f, p, _ in unservable_frozen(cfg)] == [("diagnoser.model_path", str(inst))]
    assert unservable_frozen(load_config("diagevo", None, over[:2] + ["model.device=cpu"])) == []  # engine=hf
    monkeypatch.setattr(v, "require_vllm", lambda *a, **k: None)  # vLLM need not be here to decide
    said: list[str] = []
    preflight(cfg.model_copy(update={"run": cfg.run.model_copy(update={"preflight": "warn"})}), said.append)
    notes = [s for s in said if s.startswith(f"note: diagnoser.model_path={inst}")]
    assert len(notes) == 1 and "cannot serve it" in notes[0] and "runs on hf" in notes[0], said


def test_the_plan_counts_a_diagnoser_the_engine_cannot_serve_as_hf_beside_it(tmp_path):
    """Qwen3-4B shapes (config-only folders): an unservable diagnoser adds its weights to the
    memory phase and hf's decode time to it; a servable one is a weight version of the engine."""
    base = model_dir(tmp_path, {**QWEN3_4B, "eos_token_id": 151643, "max_position_embeddings": 32768}, "base")
    inst = model_dir(
        tmp_path, {**QWEN3_4B, "eos_token_id": 151645, "max_position_embeddings": 262144, "rope_theta": 5e6}, "inst"
    )
    plans = {
        d.name: make_plan(
            load_config("diagevo", None, [f"model.path={base}", f"diagnoser.model_path={d}", "engine=vllm"]),
            DEVICES["h200"],
        )
        for d in (base, inst)
    }
    memory = {k: next(e for e in p.phases if e.work.name == "memory") for k, p in plans.items()}
    n = plans["base"].shape.n_params
    assert memory["inst"].resident - memory["base"].resident == pytest.approx(2 * n)  # its bf16 weights
    assert memory["inst"].gen_seconds > 2 * memory["base"].gen_seconds  # hf generate, not the engine
    assert plans["inst"].host_bytes - plans["base"].host_bytes == pytest.approx(2 * n)  # parked between
    assert any("frozen diagnoser sampling" in w and "on hf" in w for _, w, _ in memory["inst"].parts)
    note = [x for x in plans["inst"].notes if x.startswith("diagnoser.model_path: the vLLM engine")]
    assert len(note) == 1 and "max_position_embeddings: 262144 vs 32768" in note[0]
    assert not any("cannot serve" in x for x in plans["base"].notes)
    assert plans["inst"].fits and memory["inst"].peak < plans["inst"].limit  # the faithful preset fits one H200
    assert memory["inst"].peak / GiB < 139


def _setup(tmp_path: Path, base: Path, cfg_over: list[str]) -> Setup:
    cfg = load_config("diagevo", None, [f"model.path={base}", "model.device=cpu", *cfg_over])
    run = Run.create(tmp_path / "run", "{}", "diagevo")
    return Setup(cfg, run, None, None, base, Engine(cfg.engine), None)  # type: ignore[arg-type]


def test_the_vllm_engine_serves_the_policy_and_hf_the_diagnoser_it_cannot(fake, tmp_path):  # noqa: F811
    base, inst = folder(tmp_path, "base", 0), folder(tmp_path, "inst", 1, **INSTRUCT)
    same = folder(tmp_path, "same", 2)
    s = _setup(tmp_path, base, ["engine=vllm", "engine.kv_cache_gib=0.25"])
    policy, tok = tiny(0)
    solver = s.engine.sampler(policy, tok)  # the run's one engine, built for model.path
    with pytest.raises(ConfigError, match="cannot be served by the vLLM engine already running"):
        s.engine.load(str(inst), "cpu", "float32")  # what a run met at its first memory phase
    diagnoser = s.load(str(inst))
    inner = unmetered(diagnoser)
    assert isinstance(inner, PhaseParkedSampler) and isinstance(inner.inner, HFSampler) and inner in s.parked
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    ref = HFSampler.load(EngineConfig(), str(inst), "cpu", "float32").sample(["1+2="], 1, greedy)
    assert [c.token_ids for c in diagnoser.sample(["1+2="], 1, greedy)[0]] == [c.token_ids for c in ref[0]]
    version = unmetered(s.load(str(same)))  # the same model: one more weight version of the engine
    assert isinstance(version, v.VLLMSampler) and version.engine is solver.engine
    assert len(fake.llms) == 1
    s.engine.close()


def test_a_parked_diagnoser_visits_the_device_once_per_phase_that_uses_it(tmp_path, monkeypatch):
    """hf on CPU: the moves ``PhaseParkedSampler`` makes (to the device at the first call of a
    phase, to CPU when the run loop parks before the next), and the samples equal an unparked
    sampler's."""
    base = folder(tmp_path, "base", 0)
    s = _setup(tmp_path, base, [])
    moves: list[str] = []
    real_to = torch.nn.Module.to

    def to(self, *a, **k):
        moves.append(str(a[0]))
        return real_to(self, *a, **k)

    inner = HFSampler.load(EngineConfig(), str(base), "cpu", "float32")
    monkeypatch.setattr(type(inner.model), "to", to)
    parked = PhaseParkedSampler(inner, inner.model, torch.device("cpu"))
    s.parked.add(parked)
    assert moves == ["cpu"] and not parked.on_device
    p = SamplingParams(temperature=1.0, max_new_tokens=5, seed=3)
    out = [parked.sample(["2+2="], 2, p) for _ in range(3)]  # one phase, three calls
    assert moves == ["cpu", "cpu"] and parked.on_device  # (the device is the CPU here)
    s.park()  # the run loop, before the next phase
    s.park()
    assert moves == ["cpu", "cpu", "cpu"] and not parked.on_device
    plain = HFSampler.load(EngineConfig(), str(base), "cpu", "float32").sample(["2+2="], 2, p)
    assert all([c.token_ids for c in o[0]] == [c.token_ids for c in plain[0]] for o in out)
    json.dumps([c.text for c in out[0][0]])
