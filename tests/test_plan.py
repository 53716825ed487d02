"""``coevolve plan``: model shapes against real parameter counts, the recipes' work, the memory
verdicts and the advice they give, the CLI and the preflight refusal (all on CPU, no weights)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.plan import (
    DEVICES,
    SAFETY_MARGIN,
    GiB,
    ModelShape,
    Train,
    device_for,
    format_plan,
    make_plan,
    phases,
    preflight_problems,
    role_memory,
)
from coevolve.rl import LearnerConfig

DATA = "/data/math_train12k/train.jsonl.gz"  # never read: planning needs only the config

QWEN3 = {
    "model_type": "qwen3",
    "vocab_size": 151936,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
}
QWEN3_4B = {
    **QWEN3,
    "hidden_size": 2560,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "intermediate_size": 9728,
    "tie_word_embeddings": True,
}
QWEN3_8B = {
    **QWEN3,
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "intermediate_size": 12288,
    "tie_word_embeddings": False,
}
QWEN3_06B = {
    **QWEN3,
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "intermediate_size": 3072,
    "tie_word_embeddings": True,
}

# R-Zero's 4B settings, as the real presets (answer budget 4096, lr 1e-6, solver 8 x 128, writers 4 x 64 with 1024 tokens)
REAL_4B = [
    "learner.lr=1e-6",
    "sampling.max_new_tokens=4096",
    "solver.group_size=8",
    "solver.prompts_per_step=128",
    "engine.max_batch=96",
    "learner.micro_batch_size=64",
    "learner.max_tokens_per_micro_batch=16384",
]
D2EVO_4B = REAL_4B + [
    "questioner.group_size=4",
    "questioner.prompts_per_step=64",
    "questioner.max_new_tokens=1024",
    "difficulty.samples=32",
    "difficulty.pool_size=1000",
    f"data.source={DATA}",
]
DIAGEVO_4B = REAL_4B + [
    "challenger.group_size=4",
    "challenger.prompts_per_step=64",
    "challenger.max_new_tokens=1024",
    "pool.size=2000",
]


def model_dir(tmp_path: Path, cfg: dict, name: str = "m") -> Path:
    """A model folder with only config.json: planning needs no weights."""
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# ---------------------------------------------------------------- shapes
@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_param_count_equals_a_built_model(kind):
    import transformers

    if kind == "qwen3":
        hf = transformers.Qwen3Config(
            vocab_size=300,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=24,
            tie_word_embeddings=False,
        )
        model = transformers.Qwen3ForCausalLM(hf)
    else:
        hf = transformers.LlamaConfig(
            vocab_size=300,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        )
        model = transformers.LlamaForCausalLM(hf)
    shape = ModelShape.from_config(hf.to_dict())
    assert shape.n_params == sum(p.numel() for p in model.parameters())


def test_real_shapes():
    s4, s8, s06 = (ModelShape.from_config(c) for c in (QWEN3_4B, QWEN3_8B, QWEN3_06B))
    assert s4.n_params / 1e9 == pytest.approx(4.02, abs=0.01)
    assert s8.n_params / 1e9 == pytest.approx(8.19, abs=0.01)
    assert s06.n_params / 1e9 == pytest.approx(0.596, abs=0.002)
    assert s4.kv_bytes_per_token(2) == 2 * 36 * 8 * 128 * 2
    # LoRA r=64 on all linear maps of 8B: r * (in + out) per map, 36 layers
    per_layer = 64 * ((4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 12288) * 3)
    assert s8.lora_params(64, "all-linear") == 36 * per_layer
    assert s8.lora_params(64, ["q_proj", "v_proj"]) == 36 * 64 * (8192 + 5120)


def test_lora_param_count_equals_peft():
    pytest.importorskip("peft")
    import transformers

    from coevolve.rl import Learner

    hf = transformers.Qwen3Config(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    for targets in ("all-linear", ["q_proj", "down_proj"]):
        lr = Learner(transformers.Qwen3ForCausalLM(hf), LearnerConfig(lora=True, lora_r=4, lora_target_modules=targets))
        assert sum(p.numel() for p in lr.params) == ModelShape.from_config(hf.to_dict()).lora_params(4, targets)


def test_bad_config_names_the_file(tmp_path):
    from coevolve.errors import ModelLoadError

    d = model_dir(tmp_path, {"model_type": "qwen3", "hidden_size": 8})
    cfg = load_config("diagevo", None, [f"model.path={d}"])
    with pytest.raises(ModelLoadError, match="config.json"):
        make_plan(cfg, device_for("h200"))


# ---------------------------------------------------------------- work
def test_phases_count_the_recipes_rollouts():
    g = load_config("grpo", None, [])
    (solver, ev) = phases(g, toy=True)
    assert solver.rollouts == g.solver.steps * g.solver.prompts_per_step * g.solver.group_size
    assert solver.train_tokens_cap == solver.rollouts * g.sampling.max_new_tokens
    assert ev.name == "eval" and ev.times == 2 and ev.rollouts == 2 * g.eval.heldout_size * (1 + g.eval.samples)
    d = load_config("d2evo", None, [])
    work = {w.name: w for w in phases(d, toy=True)}
    assert list(work) == ["difficulty", "questioner", "buffer", "solver", "probe", "eval"]
    assert work["probe"].rollouts == (d.rounds + 1) * d.probe.size * d.probe.samples  # base + every round
    assert work["difficulty"].rollouts == (d.rounds + 1) * d.difficulty.pool_size * d.difficulty.samples
    q = d.questioner
    assert work["questioner"].rollouts == d.rounds * q.steps * q.prompts_per_step * q.group_size * (
        1 + q.reward.samples
    )
    assert {x.role for x in work["questioner"].gens} == {"solver", "frozen solver copy"}
    dv = load_config("diagevo", None, ["challenger_frozen=true"])
    assert [w.name for w in phases(dv, toy=True)] == ["pool", "solver", "memory", "probe", "eval"]


def test_eval_repeats_count_their_samples_not_the_greedy_pass():
    """Each evaluation run draws its own k samples per item; the greedy pass runs once."""
    one = {w.name: w for w in phases(load_config("grpo", None, []), toy=True)}["eval"]
    g = load_config("grpo", None, ["eval.repeats=3"])
    three = {w.name: w for w in phases(g, toy=True)}["eval"]
    assert three.rollouts == 2 * g.eval.heldout_size * (1 + 3 * g.eval.samples)
    assert three.rollouts - one.rollouts == 2 * g.eval.heldout_size * 2 * g.eval.samples


def test_eval_plans_the_benchmark_of_the_runs_world(tmp_path):
    """The cost model plans the benchmark the run evaluates (``WORLDS``' default, as the world
    built for the run has): the skill set for a skill run (its base is a toy-sized model), arith
    for an arith run, not toy / math7 by the model's size."""
    from coevolve.world import make_world

    model = tmp_path / "m"
    model.mkdir()
    skill = load_config("grpo", None, ["data.source=skill"])
    arith = load_config("grpo", None, [f"model.path={model}", "data.source=arith"])
    for cfg, toy, bench in (
        (skill, True, "skill"),
        (arith, False, "arith"),
        (load_config("grpo", None, []), True, "toy"),
    ):
        assert {w.name: w for w in phases(cfg, toy=toy)}["eval"].note == bench
    assert make_world(skill, None, lambda m: None).default_benches == ("skill",)


# ---------------------------------------------------------------- verdicts
def test_toy_fits_everywhere_and_preflight_is_silent():
    for recipe in ("grpo", "d2evo", "diagevo"):
        cfg = load_config(recipe, None, [])
        plan = make_plan(cfg, device_for("cpu"))
        assert plan.fits, plan.problems
        assert plan.roles["solver"].weights < 0.01 * GiB
        assert preflight_problems(cfg) == []
    text = format_plan(plan)
    assert "verdict: fits" in text and "* matmul TFLOP/s" in text


@pytest.mark.parametrize("recipe,extra", [("d2evo", D2EVO_4B), ("diagevo", DIAGEVO_4B)])
def test_4b_settings_fit_an_h200_with_headroom(tmp_path, recipe, extra):
    cfg = load_config(recipe, None, [f"model.path={model_dir(tmp_path, QWEN3_4B)}", *extra])
    plan = make_plan(cfg, device_for("h200"))
    assert plan.fits, plan.problems
    assert max(e.peak for e in plan.phases) <= (1 - SAFETY_MARGIN) * 139 * GiB
    rm = plan.roles["solver"]
    assert rm.checkpointing and rm.chunk == 1024  # auto rules for a real model
    assert rm.masters == pytest.approx(4 * rm.trainable) and rm.optimizer == pytest.approx(8 * rm.trainable)
    if recipe == "diagevo":  # the challenger's weights are parked during the solver phase, its state always idle
        solver_phase = next(e for e in plan.phases if e.work.name == "solver")
        assert solver_phase.resident == pytest.approx(rm.weights + rm.state)


def test_default_row_batches_do_not_fit_and_the_advice_does(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)
    rows_only = ["engine.max_batch_tokens=null"]  # the real preset caps KV tokens; here only rows bound a call
    cfg = load_config(
        "diagevo", None, [f"model.path={d}", "sampling.max_new_tokens=4096", "engine.max_batch=256", *rows_only]
    )
    plan = make_plan(cfg, device_for("h200"))
    assert not plan.fits
    text = " ".join(plan.problems)
    assert "engine.max_batch=" in text
    rows = int(text.split("engine.max_batch=")[1].split()[0].rstrip(";"))
    fixed = make_plan(
        load_config(
            "diagevo", None, [f"model.path={d}", "sampling.max_new_tokens=4096", f"engine.max_batch={rows}", *rows_only]
        ),
        device_for("h200"),
    )
    assert not any("sampling (" in p for p in fixed.problems)
    # the tightest value over the phases is offered as one change that makes every phase fit
    note = next(n for n in plan.notes if n.startswith("every phase fits with: "))
    tight = int(note.split("engine.max_batch=")[1])
    assert tight <= rows
    ok = make_plan(
        load_config(
            "diagevo",
            None,
            [f"model.path={d}", "sampling.max_new_tokens=4096", f"engine.max_batch={tight}", *rows_only],
        ),
        device_for("h200"),
    )
    assert ok.fits, ok.problems


def test_the_shipped_real_presets_fit_a_4b_model_on_one_h200(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)
    for recipe in ("grpo", "d2evo", "diagevo"):
        plan = make_plan(load_config(recipe, None, [f"model.path={d}", "data.source=x.jsonl"]), device_for("h200"))
        assert plan.fits, (recipe, plan.problems)


def test_learner_advice_names_a_budget_that_fits(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)
    over = [
        f"model.path={d}",
        "sampling.max_new_tokens=4096",
        "engine.max_batch=16",
        "learner.micro_batch_size=64",
        "learner.gradient_checkpointing=false",
        "learner.logprob_chunk_tokens=0",
        "solver.prompts_per_step=16",
        "solver.group_size=8",
    ]
    plan = make_plan(load_config("diagevo", None, over), device_for("h200"))
    learner = [p for p in plan.problems if "learner step" in p]
    assert learner and "learner.gradient_checkpointing=true" in learner[0]
    budget = int(learner[0].split("learner.max_tokens_per_micro_batch=")[1].split()[0].rstrip(";"))
    again = make_plan(
        load_config("diagevo", None, over + [f"learner.max_tokens_per_micro_batch={budget}"]), device_for("h200")
    )
    assert not any("learner step" in p for p in again.problems)


def test_8b_full_does_not_fit_and_lora_does(tmp_path):
    d = model_dir(tmp_path, QWEN3_8B)
    base = [f"model.path={d}", *DIAGEVO_4B]
    full = make_plan(load_config("diagevo", None, base), device_for("h200"))
    assert not full.fits and any("learner.lora=true" in p or "offload_optimizer" in p for p in full.problems)
    lora = make_plan(
        load_config("diagevo", Path(__file__).parents[1] / "configs/real/lora_8b.yaml", base), device_for("h200")
    )
    assert lora.fits, lora.problems
    assert lora.roles["solver"].trainable < 0.05 * lora.shape.n_params and lora.roles["solver"].masters == 0


def test_offload_optimizer_moves_state_to_the_host():
    shape = ModelShape.from_config(QWEN3_4B)
    t = Train("solver", 1, 8, 384, 4096)
    on = role_memory("solver", shape, LearnerConfig(offload_optimizer=True), DEVICES["h200"], 2, t, None)
    off = role_memory("solver", shape, LearnerConfig(), DEVICES["h200"], 2, t, None)
    assert (
        on.state == 0
        and on.host == pytest.approx(12 * shape.n_params)
        and off.state == pytest.approx(12 * shape.n_params)
    )
    foreach = role_memory("solver", shape, LearnerConfig(fused_optimizer=False), DEVICES["h200"], 2, t, None)
    assert foreach.opt_step == pytest.approx(4 * shape.n_params) and off.opt_step < foreach.opt_step


def test_offload_optimizer_counts_the_fp32_gradient_sums_the_learner_keeps_on_the_device():
    """With ``offload_optimizer`` only the masters and AdamW state move to the host: the fp32
    gradient sums stay on the weights' device through the backward. Counted against the bytes a
    real learner holds at the end of a backward (tiny bf16 Qwen3 on CPU, where the sums live
    beside the weights as they would on a GPU)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from coevolve.rl import Learner, RolloutGroup

    torch.manual_seed(0)
    hf = Qwen3Config(
        **{
            **QWEN3_06B,
            "vocab_size": 512,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
        }
    )
    model = Qwen3ForCausalLM(hf).to(torch.bfloat16)
    lcfg = LearnerConfig(offload_optimizer=True, micro_batch_size=2)
    learner = Learner(model, lcfg)
    seen = []
    take = learner._take_grads

    def counted():
        seen.append(sum(a.sum.numel() * a.sum.element_size() for a in learner._sums if a.sum is not None))
        seen.append({a.sum.device.type for a in learner._sums if a.sum is not None})
        take()

    learner._take_grads = counted
    groups = [RolloutGroup([1, 5, 6], [[7, 8, 2], [9, 2]], [1.0, 0.0]) for _ in range(2)]
    learner.step(groups)
    sums, where = seen
    assert learner.master[0].device.type == "cpu" and where == {model.device.type}
    shape = ModelShape.from_config({**hf.to_dict(), "model_type": "qwen3"})
    rm = role_memory("solver", shape, lcfg, DEVICES["h200"], 2, Train("solver", 1, 4, 3, 3), None)
    assert rm.state == 0 and rm.host == pytest.approx(12 * shape.n_params)
    assert sums == 4 * shape.n_params  # every trainable parameter's fp32 sum
    assert sums <= rm.grads <= sums + 2 * shape.largest_param  # + one half gradient before its hook
    learner.close()


def test_rates_table_says_what_is_measured():
    for dev in DEVICES.values():
        for r in (dev.memory_gib, dev.matmul_tflops, dev.train_mfu, dev.mem_gbps, dev.hf_step_ms_per_layer):
            assert r.value > 0 and r.source
    assert DEVICES["h200"].hf_step_ms_per_layer.measured and not DEVICES["h200"].mem_gbps.measured
    with pytest.raises(ConfigError, match="--device"):
        device_for("tpu")


# ---------------------------------------------------------------- CLI and run
def test_cli_plan_exit_codes(tmp_path):
    from typer.testing import CliRunner

    from coevolve.cli import app

    d = model_dir(tmp_path, QWEN3_4B)
    ok = CliRunner().invoke(app, ["plan", "diagevo", f"model.path={d}", *DIAGEVO_4B, "--device", "h200"])
    assert ok.exit_code == 0, ok.output
    assert "verdict: fits" in ok.output and "challenger" in ok.output and "KV" in ok.output
    bad = CliRunner().invoke(app, ["plan", "diagevo", f"model.path={d}", "--device", "a100-40g"])
    assert bad.exit_code == 1 and "DOES NOT FIT" in bad.output and "learner." in bad.output


def test_cli_plan_toy_on_this_machine():
    from typer.testing import CliRunner

    from coevolve.cli import app

    r = CliRunner().invoke(app, ["plan", "grpo"])  # no --device: this machine (its CPU and memory here)
    assert r.exit_code == 0 and "verdict: fits" in r.output and "(here" in r.output, r.output


def test_run_refuses_what_cannot_fit_here(tmp_path):
    from coevolve.preflight import preflight

    cfg = load_config(
        "diagevo",
        None,
        [f"model.path={model_dir(tmp_path, QWEN3_8B)}", "model.device=cpu", "diagnoser.self_diagnosis=true"],
    )  # no diagnoser model here
    with pytest.raises(ConfigError, match=r"learner\.|engine\."):
        preflight(cfg)


# ---------------------------------------------------------------- multi-GPU layouts
N_4B = 4_022_468_096  # Qwen3-4B: hand-counted from config.json (tied 151936 x 2560 embedding + 36 layers)
EMB_4B = 151936 * 2560


def test_qwen3_4b_count_used_below():
    assert ModelShape.from_config(QWEN3_4B).n_params == N_4B


def _layout(tmp_path, recipe, extra, gpus=None, nodes=None, model=QWEN3_4B):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = load_config(recipe, None, [f"model.path={model_dir(tmp_path, model)}", f"data.source={DATA}", *extra])
    return make_plan(cfg, device_for("h200"), gpus=gpus, nodes=nodes)


def test_verl_shards_the_state_by_hand(tmp_path):
    """FSDP over 8 and 16 GPUs: fp32 params, fp32 grads, AdamW m and v, each total / world; two
    gathered bf16 units (the embedding is the largest); the rollout engine's share of an H200."""
    cap = 139 * GiB
    for nodes, world in ((1, 8), (2, 16)):
        plan = _layout(
            tmp_path / str(nodes),
            "grpo",
            ["backend=verl", "backend.verl.n_gpus_per_node=8", f"backend.verl.nnodes={nodes}"],
            nodes=nodes,
        )
        v = plan.layout.verl
        assert v.params == pytest.approx(4 * N_4B / world) and v.grads == pytest.approx(4 * N_4B / world)
        assert v.optimizer == pytest.approx(8 * N_4B / world) and v.ref == 0
        assert v.gathered == 2 * EMB_4B * 2
        assert v.rollout == pytest.approx(0.6 * cap)
        assert v.rollout_peak == pytest.approx(12 * N_4B / world + 0.6 * cap)
        solver = next(p for p in plan.layout.phases if p.name == "solver")
        single = next(e for e in plan.phases if e.work.name == "solver")
        # GPU 0 also keeps the coevolve process's bf16 weights of the solver
        assert solver.gpus["GPU 0"] == pytest.approx(2 * N_4B + v.peak)
        assert solver.gpus["verl GPU"] == pytest.approx(v.peak)
        assert solver.train_seconds == pytest.approx(single.train_seconds / world)
    # 8 GPUs: 1.87 + 1.87 + 3.75 GiB of shards, 1.45 GiB gathered, 83.4 GiB of vLLM
    assert (12 * N_4B / 8 + 0.6 * cap) / GiB == pytest.approx(89.02, abs=0.01)


def test_ray_actors_by_hand(tmp_path):
    cap = 139 * GiB
    vllm = ["engine=ray", "engine.ray.actor_engine=vllm", "engine.gpu_memory_utilization=0.5"]
    plan = _layout(tmp_path / "a", "d2evo", vllm, gpus=8)
    lay = plan.layout.layout
    assert lay.actors == 8 and lay.actor_on_gpu0  # one per GPU Ray sees: one beside the coevolve process
    diff = next(p for p in plan.layout.phases if p.name == "difficulty")
    single = next(e for e in plan.phases if e.work.name == "difficulty")
    assert diff.gpus["actor GPU"] == pytest.approx(0.5 * cap)  # the actor's one engine, whatever slot it serves
    awake = _layout(tmp_path / "c", "d2evo", vllm + ["engine.sleep_mode=false"], gpus=8)
    diff_awake = next(p for p in awake.layout.phases if p.name == "difficulty")
    assert diff_awake.gpus["actor GPU"] == pytest.approx(
        0.5 * cap
    )  # without sleep too: slots are versions, not engines
    assert diff.gpus["GPU 0"] == pytest.approx(single.resident + 0.5 * cap)
    seven = _layout(tmp_path / "b", "d2evo", vllm + ["engine.ray.num_actors=7"], gpus=8).layout
    assert seven.layout.actor_on_gpu0  # Ray hands out GPU ids from 0 up: fewer actors free the last GPU, not GPU 0
    solver = next(p for p in seven.phases if p.name == "solver")
    rm = role_memory(
        "solver",
        ModelShape.from_config(QWEN3_4B),
        load_config("d2evo", None, []).learner.model_copy(
            update={"max_tokens_per_micro_batch": 16384, "micro_batch_size": 64}
        ),
        DEVICES["h200"],
        2,
        next(e.work.train for e in plan.phases if e.work.name == "solver"),
        None,
    )
    s_single = next(e for e in plan.phases if e.work.name == "solver")
    # the learner step stays on GPU 0, its rollouts move to the actors; the actor there sleeps while it trains
    assert solver.gpus["GPU 0"] == pytest.approx(s_single.resident + max(rm.learner_transient, 0.5 * cap))


def test_hf_actors_by_hand(tmp_path):
    from coevolve.plan import sampler_call_bytes

    shape = ModelShape.from_config(QWEN3_4B)
    one = _layout(
        tmp_path / "1",
        "d2evo",
        ["engine=ray", "engine.ray.num_actors=1", "engine.max_batch_tokens=null", "engine.max_batch=64"],
        gpus=2,
    )
    four = _layout(
        tmp_path / "4",
        "d2evo",
        ["engine=ray", "engine.ray.num_actors=4", "engine.max_batch_tokens=null", "engine.max_batch=64"],
        gpus=5,
    )
    d1 = next(p for p in one.layout.phases if p.name == "difficulty")
    d4 = next(p for p in four.layout.phases if p.name == "difficulty")
    # two slots (the live solver and the questioner phase's frozen scorer) in every actor; a call of
    # 256 prompts x 32 answers gives each actor 8192 / n rows, generated in chunks of engine.max_batch=64
    assert d4.gpus["actor GPU"] == pytest.approx(2 * 2 * N_4B + sampler_call_bytes(shape, 2, 64, 384, 4096))
    assert d1.gpus["actor GPU"] == d4.gpus["actor GPU"]
    # rollouts split evenly over the actors (the same 64-row chunks, a quarter of them each)
    assert d4.gen_seconds * 4 == pytest.approx(d1.gen_seconds, rel=1e-6)
    # the pool's measured per-call overhead, per sampler call: 2000 x 32 rows in calls of 8192, 4 runs
    assert d4.overhead_seconds == pytest.approx(4 * math.ceil(2000 * 32 / 8192) * 0.15)
    # the same call on 4 actors with max_batch=4096 chunks: 2048 rows each, KV of 2048 rows
    big = _layout(
        tmp_path / "big",
        "d2evo",
        ["engine=ray", "engine.ray.num_actors=4", "engine.max_batch_tokens=null", "engine.max_batch=4096"],
        gpus=5,
    )
    db = next(p for p in big.layout.phases if p.name == "difficulty")
    assert db.gpus["actor GPU"] == pytest.approx(2 * 2 * N_4B + sampler_call_bytes(shape, 2, 2048, 384, 4096))


def test_layout_errors_name_the_field(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)

    def plan(extra, **kw):
        return make_plan(load_config("d2evo", None, [f"model.path={d}", *extra]), device_for("h200"), **kw)

    cases = [
        (["engine=ray"], dict(gpus=0), "--gpus"),
        (["engine=ray"], dict(nodes=0), "--nodes"),
        (["engine=ray", "engine.tensor_parallel_size=2"], dict(gpus=8), "engine.ray.actor_engine=vllm"),
        # vllm actors run vLLM's in-process single-GPU executor: refused as the pool refuses it
        (
            ["engine=ray", "engine.ray.actor_engine=vllm", "engine.tensor_parallel_size=2"],
            dict(gpus=8),
            "engine.tensor_parallel_size=2 with engine.ray.actor_engine=vllm: each actor runs vLLM's in-process",
        ),
        (
            ["engine=ray", "engine.ray.actor_engine=vllm", "engine.ray.num_actors=9"],
            dict(gpus=8),
            "engine.ray.num_actors=9",
        ),
        (
            ["backend=verl", "backend.verl.n_gpus_per_node=8", "engine.tensor_parallel_size=3"],
            {},
            "engine.tensor_parallel_size=3 ",
        ),  # (verl's rollout engines) does not divide backend.verl.n_gpus_per_node
        (["backend=verl", "backend.verl.nnodes=2"], dict(nodes=1), "backend.verl.nnodes=2"),
    ]
    for extra, kw, msg in cases:
        with pytest.raises(ConfigError, match=msg.replace(".", r"\.")):
            plan(extra, **kw)
    with pytest.raises(ConfigError, match="--gpus"):
        make_plan(load_config("grpo", None, []), device_for("cpu"), gpus=2)


def test_8b_full_fits_with_verl_on_8_gpus(tmp_path):
    """What one H200 cannot hold (full 8B, test_8b_full_does_not_fit_and_lora_does) fits once
    FSDP shards it over 8 (the writer's solver server outside the layout)."""
    extra = [
        *DIAGEVO_4B,
        "backend=verl",
        "backend.verl.n_gpus_per_node=8",
        "engine=ray",
        "engine.ray.actor_engine=vllm",
        "engine.gpu_memory_utilization=0.45",
        "backend.verl.solver_url=http://h:8000/v1",
        "rounds=1",
    ]  # one round: a user's server is the right solver
    plan = _layout(tmp_path, "diagevo", extra, model=QWEN3_8B)
    assert plan.fits, plan.problems
    assert plan.layout.layout.actors == 8 and plan.layout.verl is not None
    assert any("solver_url" in a for a in plan.layout.assumptions)
    assert any(a.startswith("(measured)") for a in plan.layout.assumptions)


def test_a_shared_cluster_lends_verl_the_actors_gpus(tmp_path):
    """The pool releases its placement group before a verl phase (engine.ray.release), so on one
    Ray cluster the actors and verl's job may each use every GPU."""
    base = [
        "engine=ray",
        "engine.ray.actor_engine=vllm",
        "engine.ray.address=auto",
        "backend=verl",
        "backend.verl.nnodes=2",
    ]
    full = _layout(tmp_path / "a", "grpo", base + ["backend.verl.n_gpus_per_node=8"], nodes=2)
    assert full.layout.layout.shared_cluster
    assert full.layout.layout.actors == 16 and full.layout.layout.verl_gpus == 16
    assert not any("placement group" in p for p in full.problems), full.problems
    # one node, no `ray start`: the pool's local Ray and verl's own are apart
    local = _layout(tmp_path / "c", "grpo", ["engine=ray", "backend=verl", "backend.verl.n_gpus_per_node=8"])
    assert not local.layout.layout.shared_cluster


def test_cli_plan_layout(tmp_path):
    from typer.testing import CliRunner

    from coevolve.cli import app

    d = model_dir(tmp_path, QWEN3_4B)
    r = CliRunner().invoke(
        app,
        [
            "plan",
            "grpo",
            f"model.path={d}",
            "data.source=x.jsonl",
            "backend=verl",
            "backend.verl.n_gpus_per_node=8",
            "--device",
            "a100-80g",
            "--gpus",
            "8",
        ],
    )
    assert r.exit_code == 0, r.output
    assert (
        "layout: 1 node x 8 GPUs" in r.output and "verl GPU" in r.output and "verdict: fits on the layout" in r.output
    )
    assert "(model)" in r.output and "(assumed)" in r.output
    bad = CliRunner().invoke(
        app, ["plan", "grpo", f"model.path={d}", "data.source=x.jsonl", "--device", "h200", "--gpus", "0"]
    )
    assert bad.exit_code != 0 and isinstance(bad.exception, ConfigError) and "--gpus" in str(bad.exception)


def test_verl_layouts_that_do_not_divide_are_refused_by_plan_and_preflight_alike(tmp_path):
    """640 solver and 256 questioner rollouts per step (the 4B d2evo preset) do not divide over 7
    GPUs: `coevolve plan` (any device, with or without --gpus) and the run's preflight give the
    same problems, each naming the fields and the nearest values that divide; 8 GPUs divide."""
    from coevolve.plan.layouts import verl_batch_problems
    from coevolve.plan.work import phases as work_of

    d = model_dir(tmp_path, QWEN3_4B)
    seven = load_config(
        "d2evo", None, [f"model.path={d}", f"data.source={DATA}", "backend=verl", "backend.verl.n_gpus_per_node=7"]
    )
    expected = verl_batch_problems(seven, work_of(seven, False))
    assert [p.split(":")[0] for p in expected] == ["phase questioner", "phase solver"]
    solver = expected[1]
    assert "solver.prompts_per_step x solver.group_size = 128 x 5 = 640" in solver
    # nearest GPU counts that divide 640 (8 above, 5 below), nearest prompts that make 7 divide 5 x prompts
    assert "backend.verl.n_gpus_per_node=8 or backend.verl.n_gpus_per_node=5" in solver
    assert "solver.prompts_per_step=126 or solver.prompts_per_step=133" in solver
    assert all(640 % g == 0 for g in (8, 5)) and all(5 * q % 7 == 0 for q in (126, 133))
    for device, gpus in (("h200", None), ("h200", 8), ("cpu", None)):
        plan = make_plan(seven, device_for(device), gpus=gpus)
        assert not plan.fits and plan.problems[:2] == expected, (device, plan.problems)
    cpu_cfg = seven.model_copy(update={"model": seven.model.model_copy(update={"device": "cpu"})})
    assert [p.split(" (see")[0] for p in preflight_problems(cpu_cfg)][:2] == expected
    eight = load_config(
        "d2evo",
        None,
        [
            f"model.path={d}",
            f"data.source={DATA}",
            "backend=verl",
            "backend.verl.n_gpus_per_node=8",
            "backend.verl.serve_solver=true",
            "engine.gpu_memory_utilization=0.35",
        ],
    )
    assert verl_batch_problems(eight, work_of(eight, False)) == []
    assert make_plan(eight, device_for("h200"), gpus=8).fits


def test_verl_micro_batch_divides_each_gpus_share():
    from coevolve.schema import verl_micro_batch

    # 640 rollouts over 8 GPUs: 80 each; at most learner.micro_batch_size=64 per micro-batch -> 40 (80 % 64 != 0)
    assert verl_micro_batch(640, 8, 64) == 40 and verl_micro_batch(256, 8, 64) == 32
    assert verl_micro_batch(640, 7, 64) is None and verl_micro_batch(4, 8, 64) is None
    for rows, world, cap in ((640, 16, 64), (96, 8, 5), (7 * 13, 7, 4)):
        m = verl_micro_batch(rows, world, cap)
        assert m is not None and m <= cap and (rows // world) % m == 0
        assert all((rows // world) % k for k in range(m + 1, min(cap, rows // world) + 1))  # the largest that divides


@pytest.mark.parametrize("recipe", ["grpo", "d2evo", "diagevo"])
def test_the_vllm_share_unset_is_the_largest_that_fits(tmp_path, recipe, monkeypatch):
    """engine=vllm on a GPU with engine.gpu_memory_utilization unset: the plan derives the largest
    share that fits (0.01 more would not), and a run on that GPU starts its engine with it
    (with_vllm_share, what `coevolve run` applies after the preflight)."""
    import coevolve.plan as plan_mod

    d = model_dir(tmp_path, QWEN3_4B)
    cfg = load_config(recipe, None, [f"model.path={d}", "data.source=x.jsonl", "engine=vllm"])
    plan = make_plan(cfg, device_for("h200"))
    share = plan.vllm_share
    assert plan.fits and share is not None and 0.4 < share < 0.6, (share, plan.problems)
    assert any(f"engine.gpu_memory_utilization unset: {share:g}" in n for n in plan.notes)
    at = make_plan(
        load_config(
            recipe,
            None,
            [f"model.path={d}", "data.source=x.jsonl", "engine=vllm", f"engine.gpu_memory_utilization={share}"],
        ),
        device_for("h200"),
    )
    above = make_plan(
        load_config(
            recipe,
            None,
            [
                f"model.path={d}",
                "data.source=x.jsonl",
                "engine=vllm",
                f"engine.gpu_memory_utilization={share + 0.01:.2f}",
            ],
        ),
        device_for("h200"),
    )
    assert at.fits and at.vllm_share is None and not above.fits
    assert max(e.peak for e in at.phases) == pytest.approx(max(e.peak for e in plan.phases))
    assert plan_mod.with_vllm_share(cfg) is cfg  # this machine has no GPU: vLLM's own default on CPU
    monkeypatch.setattr(plan_mod, "local_device", lambda _: device_for("h200"))
    assert plan_mod.with_vllm_share(cfg).engine.gpu_memory_utilization == share
    hf = load_config(recipe, None, [f"model.path={d}", "data.source=x.jsonl"])
    assert plan_mod.with_vllm_share(hf) is hf and make_plan(hf, device_for("h200")).vllm_share is None


def test_the_one_gpu_hours_preset_fits_and_costs_less_than_the_paper_preset(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)
    hours = make_plan(
        load_config("d2evo", None, [f"model.path={d}", "data.source=x.jsonl"], ["real/d2evo_hours"]), device_for("h200")
    )
    paper = make_plan(
        load_config("d2evo", None, [f"model.path={d}", "data.source=x.jsonl", "engine=vllm"]), device_for("h200")
    )
    assert hours.fits, hours.problems
    total = lambda p: sum(e.gen_seconds + e.train_seconds for e in p.phases)  # noqa: E731
    assert total(hours) < 0.7 * total(paper)
    assert next(e for e in hours.phases if e.work.name == "difficulty").work.times == 3  # no final re-measure


SMOLLM2 = {
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
}


def test_cpu_learn_time_counts_a_shared_prompt_once_per_group_and_the_weights_dtype(tmp_path):
    """share_prompt: a group's prompt is one token pass, not G; a CPU learns bf16 weights at the
    bf16 rate and fp32 ones at the slower fp32 rate (the plan was 25x off the measured SmolLM2 run)."""
    path = model_dir(tmp_path, SMOLLM2)

    def learn(*over: str) -> float:
        cfg = load_config("grpo", ["smollm2/grpo"], [f"model.path={path}", *over])
        return sum(e.train_seconds for e in make_plan(cfg, device_for("cpu")).phases)

    shared, rowwise = learn(), learn("learner.share_prompt=false")
    # 8 groups x 8 answers, prompt 144, answers 24 on average: (8*144 + 64*24) / (64*144 + 64*24)
    assert shared / rowwise == pytest.approx((8 * 144 + 64 * 24) / (64 * (144 + 24)), rel=0.05)
    fp32 = learn("model.dtype=float32")
    cpu = DEVICES["cpu"]
    assert fp32 / shared == pytest.approx(cpu.matmul_tflops.value / cpu.fp32_tflops.value, rel=0.01)


def test_cpu_plan_of_the_toy_grpo_run_is_within_1_5x_of_its_measured_time():
    """docs/results/plan_vs_measured.md: `coevolve run grpo run.threads=1` took 78.1 s of CPU time
    (user + sys, start-up included, the base evaluation from its cache): the plan's CPU rates are a
    core's own, measured at one thread by dev/perf/bench_grpo_step.py (plan: 88 s)."""
    p = make_plan(load_config("grpo"), device_for("cpu"))
    planned = sum(e.gen_seconds + e.train_seconds for e in p.phases)
    assert 78.1 / 1.5 <= planned <= 78.1 * 1.5, planned


def test_h100_row_and_any_card_by_its_memory(tmp_path):
    from typer.testing import CliRunner

    from coevolve.cli import app

    d = model_dir(tmp_path, QWEN3_4B)
    args = ["plan", "diagevo", f"model.path={d}", *DIAGEVO_4B]
    h100 = CliRunner().invoke(app, [*args, "--device", "h100"])
    assert "plan: diagevo on h100 (79.2 GiB" in h100.output
    small = CliRunner().invoke(app, [*args, "--gpu-memory", "24"])
    assert small.exit_code == 1 and "on h100 rates, 24 GiB" in small.output and "DOES NOT FIT" in small.output
    big = CliRunner().invoke(app, [*args, "--device", "h200", "--gpu-memory", "139"])
    assert big.exit_code == 0 and "on h200 rates, 139 GiB" in big.output, big.output
    cpu = CliRunner().invoke(app, [*args, "--device", "cpu", "--gpu-memory", "24"])
    assert cpu.exit_code != 0 and "--gpu-memory with --device cpu" in str(cpu.output) + str(cpu.exception)


def test_mid_phase_saves_are_costed_in_the_plan(tmp_path):
    """``run.save_every``: the plan counts the mid-phase saves of every GRPO phase (after every
    k-th step but the last, per run of the phase) and costs each as the learner writes it: bf16
    weights + fp32 masters + AdamW's m and v = 14 bytes per parameter for a full fine-tune."""
    path = model_dir(tmp_path, QWEN3_4B)
    args = [f"model.path={path}", *D2EVO_4B, "rounds=2", "solver.steps=25", "questioner.steps=10"]
    plan = make_plan(load_config("d2evo", None, [*args, "run.save_every=10"]), device_for("h100"))
    note = next(n for n in plan.notes if n.startswith("run.save_every=10: "))
    assert "4 mid-phase saves (solver 4)" in note, note  # 2 rounds x (25 - 1) // 10; 10 questioner steps: none
    assert f"{plan.shape.n_params * 14 / GiB:.2f} GiB each" in note, note
    assert not any("mid-phase" in n for n in make_plan(load_config("d2evo", None, args), device_for("h100")).notes)
