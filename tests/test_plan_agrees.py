"""``coevolve plan`` refuses what ``coevolve run`` refuses of the settings themselves
(``preflight.plan_checks``): a real model without the labelled data its recipe needs."""

from __future__ import annotations

import json

from tests.test_cli import cli

QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 2560,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "intermediate_size": 9728,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
}


def test_plan_refuses_a_real_d2evo_without_data_as_run_does(tmp_path):
    model = tmp_path / "qwen3-4b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_4B))
    args = ["d2evo", "-c", "real/d2evo", f"model.path={model}"]
    plan = cli("plan", *args, "--device", "h200")
    run = cli("run", *args, "--run-dir", str(tmp_path / "r"))
    assert plan.returncode == run.returncode == 2, plan.stdout + plan.stderr
    line = "data.source: the d2evo recipe on a real model needs labelled questions"
    assert line in plan.stderr and line in run.stderr and "verdict" not in plan.stdout
    assert not (tmp_path / "r").exists()
    # the same settings with --force (run.preflight=warn) are planned, the problem said as a warning
    forced = cli("plan", *args, "run.preflight=warn", "--device", "h200")
    assert forced.returncode in (0, 1) and f"warning (run.preflight=warn): {line}" in " ".join(forced.stderr.split())


def test_plan_still_plans_what_lives_on_another_machine(tmp_path):
    """A data file that is not here is the run's machine's business: planned, not refused."""
    r = cli("plan", "grpo", f"data.source={tmp_path / 'on_the_cluster.jsonl'}", "--device", "cpu")
    assert r.returncode in (0, 1) and "verdict" in r.stdout, r.stderr
