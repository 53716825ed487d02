"""``coevolve plan``: model shapes against real parameter counts, the recipes' work, the memory
verdicts and the advice they give, the CLI and the preflight refusal (all on CPU, no weights)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.plan import (
    DEVICES,
    GiB,
    SAFETY_MARGIN,
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

DATA = "/work/shared/data/math_train12k/train.jsonl.gz"

QWEN3 = {"model_type": "qwen3", "vocab_size": 151936, "num_key_value_heads": 8, "head_dim": 128,
         "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "attention_bias": False}
QWEN3_4B = {**QWEN3, "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32, "intermediate_size": 9728,
            "tie_word_embeddings": True}
QWEN3_8B = {**QWEN3, "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "intermediate_size": 12288,
            "tie_word_embeddings": False}
QWEN3_06B = {**QWEN3, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "intermediate_size": 3072,
             "tie_word_embeddings": True}

# the 4B settings (answer budget 4096, lr 1e-6, solver 8 x 128, writers 4 x 64 with 1024 tokens)
REAL_4B = ["learner.lr=1e-6", "sampling.max_new_tokens=4096", "solver.group_size=8", "solver.prompts_per_step=128",
           "engine.max_batch=96", "learner.micro_batch_size=64", "learner.max_tokens_per_micro_batch=16384"]
D2EVO_4B = REAL_4B + ["questioner.group_size=4", "questioner.prompts_per_step=64", "questioner.max_new_tokens=1024",
                      "difficulty.samples=32", "difficulty.pool_size=1000", f"data.source={DATA}"]
DIAGEVO_4B = REAL_4B + ["challenger.group_size=4", "challenger.prompts_per_step=64", "challenger.max_new_tokens=1024",
                        "pool.size=2000"]


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
        hf = transformers.Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=24, tie_word_embeddings=False)
        model = transformers.Qwen3ForCausalLM(hf)
    else:
        hf = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
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

    hf = transformers.Qwen3Config(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=16)
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
    assert list(work) == ["difficulty", "questioner", "buffer", "solver", "eval"]
    assert work["difficulty"].rollouts == (d.rounds + 1) * d.difficulty.pool_size * d.difficulty.samples
    q = d.questioner
    assert work["questioner"].rollouts == d.rounds * q.steps * q.prompts_per_step * q.group_size * (1 + q.reward.solver_samples)
    assert {x.role for x in work["questioner"].gens} == {"solver", "frozen solver copy"}
    dv = load_config("diagevo", None, ["challenger_frozen=true"])
    assert [w.name for w in phases(dv, toy=True)] == ["pool", "solver", "memory", "eval"]


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
    cfg = load_config("diagevo", None, [f"model.path={d}", "sampling.max_new_tokens=4096", "engine.max_batch=256", *rows_only])
    plan = make_plan(cfg, device_for("h200"))
    assert not plan.fits
    text = " ".join(plan.problems)
    assert "engine.max_batch=" in text
    rows = int(text.split("engine.max_batch=")[1].split()[0].rstrip(";"))
    fixed = make_plan(load_config("diagevo", None, [f"model.path={d}", "sampling.max_new_tokens=4096",
                                                    f"engine.max_batch={rows}", *rows_only]), device_for("h200"))
    assert not any("sampling (" in p for p in fixed.problems)
    # the tightest value over the phases is offered as one change that makes every phase fit
    note = next(n for n in plan.notes if n.startswith("every phase fits with: "))
    tight = int(note.split("engine.max_batch=")[1])
    assert tight <= rows
    ok = make_plan(load_config("diagevo", None, [f"model.path={d}", "sampling.max_new_tokens=4096",
                                                 f"engine.max_batch={tight}", *rows_only]), device_for("h200"))
    assert ok.fits, ok.problems


def test_the_shipped_real_presets_fit_a_4b_model_on_one_h200(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)
    for recipe in ("grpo", "d2evo", "diagevo"):
        plan = make_plan(load_config(recipe, None, [f"model.path={d}", "data.source=x.jsonl"]), device_for("h200"))
        assert plan.fits, (recipe, plan.problems)


def test_learner_advice_names_a_budget_that_fits(tmp_path):
    d = model_dir(tmp_path, QWEN3_4B)
    over = [f"model.path={d}", "sampling.max_new_tokens=4096", "engine.max_batch=16", "learner.micro_batch_size=64",
            "learner.gradient_checkpointing=false", "learner.logprob_chunk_tokens=0", "solver.prompts_per_step=16",
            "solver.group_size=8"]
    plan = make_plan(load_config("diagevo", None, over), device_for("h200"))
    learner = [p for p in plan.problems if "learner step" in p]
    assert learner and "learner.gradient_checkpointing=true" in learner[0]
    budget = int(learner[0].split("learner.max_tokens_per_micro_batch=")[1].split()[0].rstrip(";"))
    again = make_plan(load_config("diagevo", None, over + [f"learner.max_tokens_per_micro_batch={budget}"]),
                      device_for("h200"))
    assert not any("learner step" in p for p in again.problems)


def test_8b_full_does_not_fit_and_lora_does(tmp_path):
    d = model_dir(tmp_path, QWEN3_8B)
    base = [f"model.path={d}", *DIAGEVO_4B]
    full = make_plan(load_config("diagevo", None, base), device_for("h200"))
    assert not full.fits and any("learner.lora=true" in p or "offload_optimizer" in p for p in full.problems)
    lora = make_plan(load_config("diagevo", Path(__file__).parents[1] / "configs/real/lora_8b.yaml", base),
                     device_for("h200"))
    assert lora.fits, lora.problems
    assert lora.roles["solver"].trainable < 0.05 * lora.shape.n_params and lora.roles["solver"].masters == 0


def test_offload_optimizer_moves_state_to_the_host():
    shape = ModelShape.from_config(QWEN3_4B)
    t = Train("solver", 1, 8, 384, 4096)
    on = role_memory("solver", shape, LearnerConfig(offload_optimizer=True), DEVICES["h200"], 2, t, None)
    off = role_memory("solver", shape, LearnerConfig(), DEVICES["h200"], 2, t, None)
    assert on.state == 0 and on.host == pytest.approx(12 * shape.n_params) and off.state == pytest.approx(12 * shape.n_params)
    foreach = role_memory("solver", shape, LearnerConfig(fused_optimizer=False), DEVICES["h200"], 2, t, None)
    assert foreach.opt_step == pytest.approx(4 * shape.n_params) and off.opt_step < foreach.opt_step


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

    cfg = load_config("diagevo", None, [f"model.path={model_dir(tmp_path, QWEN3_8B)}", "model.device=cpu"])
    with pytest.raises(ConfigError, match=r"learner\.|engine\."):
        preflight(cfg)
