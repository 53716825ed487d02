"""A real LLM end to end on CPU: SmolLM2-135M-Instruct (the ``smollm2`` fixture) with its chat
template, one short round of each recipe on GSM8K rows, checkpoints that are models (``coevolve
eval`` and ``coevolve export`` on them), LoRA on and off. The model is weak at math: these tests
check mechanics (stops, grading, artefacts, loading), not gains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.run import Phase, Run

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # a 135M model: one short round of each recipe
ROOT = Path(__file__).resolve().parents[1]

# one short round; budgets far below a real run's (the preflight would refuse them: it is not
# called when a recipe runs in-process, so the tests can stay small)
COMMON = [
    "model.chat_template=true",
    "sampling.max_new_tokens=24",
    "sampling.batch_prompts=8",
    "eval.benches=[gsm8k]",
    "eval.limit=2",
    "eval.samples=0",
    "eval.max_new_tokens=24",
    "run.progress=false",
    "run.threads=1",
    "learner.micro_batch_size=8",
]


@pytest.fixture(scope="module")
def gsm8k_rows(tmp_path_factory) -> Path:
    """Eight GSM8K question/answer rows as a labelled JSONL (the mechanics need real text)."""
    from coevolve.eval.benchmarks import load_tasks

    p = tmp_path_factory.mktemp("data") / "gsm8k8.jsonl"
    p.write_text(
        "".join(
            json.dumps({"id": t.id, "question": t.question, "answer": t.answer}) + "\n"
            for t in load_tasks("gsm8k", limit=8)
        )
    )
    return p


def _run(recipe: str, path: Path, overrides: list[str]) -> tuple[dict, Run]:
    from coevolve.recipes import execute

    cfg = load_config(recipe, None, overrides)
    summary = execute(cfg, path)
    return summary, Run.open(path)


def test_chat_stop_at_end_of_turn(smollm2: Path) -> None:
    from coevolve.config.base import EngineConfig
    from coevolve.engine import load_model, make_sampler
    from coevolve.prompts.chat import ChatPrompter
    from coevolve.types import SamplingParams

    model, tok = load_model(smollm2)
    p = ChatPrompter(tok, use_chat_template=True)
    ((c,),) = make_sampler(EngineConfig(), model, tok).sample(
        [p.solver("What is the capital of France?")],
        1,
        SamplingParams(temperature=0, max_new_tokens=64, stop=p.stop("answer")),
    )
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert "Paris" in c.text and c.finish_reason == "stop" and c.stop_reason == im_end and c.token_ids[-1] == im_end
    assert "<|im_end|>" not in c.text and p.solver("q").startswith("<|im_start|>system")


def test_grpo_round_checkpoint_eval_and_export(smollm2: Path, gsm8k_rows: Path, tmp_path: Path) -> None:
    summary, run = _run(
        "grpo",
        tmp_path / "run",
        COMMON
        + [
            f"model.path={smollm2}",
            f"data.source={gsm8k_rows}",
            "solver.steps=1",
            "solver.prompts_per_step=2",
            "solver.group_size=2",
        ],
    )
    rows = run.read_jsonl("round_01/solver_rollouts.jsonl")
    assert rows[0]["prompt"].startswith("<|im_start|>system") and rows[0]["label"] is not None
    items = run.read_jsonl("round_01/eval/items_gsm8k.jsonl")
    assert len(items) == 2 and all(i["finish_reason"] in ("stop", "length") for i in items)
    assert all("<|im_end|>" not in i["output"] for i in items) and "gsm8k" in summary["eval"]["final"]
    ckpt = run.checkpoint("solver")
    assert {"config.json", "tokenizer.json", "coevolve.json", "learner_optim.pt"} <= {p.name for p in ckpt.iterdir()}
    meta = json.loads((ckpt / "coevolve.json").read_text())
    assert {k: meta[k] for k in ("format", "world", "chat_template", "role", "recipe")} == {
        "format": 1,
        "world": "real",
        "chat_template": True,
        "role": "solver",
        "recipe": "grpo",
    }
    assert meta["prompts"]["solver"]["system"].startswith("Please reason step by step")  # eval reuses these prompts
    # the checkpoint is a model: coevolve eval loads it and prompts it with its chat template
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "eval"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "coevolve.cli",
            "eval",
            "--model",
            str(ckpt),
            "--bench",
            "gsm8k",
            "--limit",
            "2",
            "--max-new-tokens",
            "24",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["chat_template"] is True and res["benchmarks"]["gsm8k"]["n"] == 2
    first = json.loads((out / "items_gsm8k.jsonl").read_text().splitlines()[0])
    assert first["prompt"] == items[0]["prompt"]  # evaluated with the prompt it was trained with
    exported = tmp_path / "exported"
    r = subprocess.run(
        [sys.executable, "-m", "coevolve.cli", "export", str(run.path), "--out", str(exported)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (exported / "learner_optim.pt").exists() and (exported / "model.safetensors").exists()


def test_lora_checkpoint_loads_merged_and_exports(smollm2: Path, gsm8k_rows: Path, tmp_path: Path) -> None:
    """LoRA on: the run's checkpoint is an adapter that ``load_model`` merges into its base; after
    a real update (scripted rewards, so the group has variance) the merged weights differ from the
    base, and ``export`` writes exactly the merged model."""
    from coevolve.engine import load_model
    from coevolve.export import export_checkpoint
    from coevolve.rl.learner import Learner, LearnerConfig, RolloutGroup

    _, run = _run(
        "grpo",
        tmp_path / "run",
        COMMON
        + [
            f"model.path={smollm2}",
            f"data.source={gsm8k_rows}",
            "solver.steps=1",
            "solver.prompts_per_step=2",
            "solver.group_size=2",
            "learner.lora=true",
            "learner.lora_r=4",
            "learner.lora_alpha=8",
        ],
    )
    ckpt = run.checkpoint("solver")
    assert (ckpt / "adapter_config.json").exists() and not (ckpt / "config.json").exists()
    load_model(ckpt)  # an adapter checkpoint loads like any model
    model, tok = load_model(smollm2)
    learner = Learner(model, LearnerConfig(lr=1e-2, lora=True, lora_r=4, lora_alpha=8), tokenizer=tok)
    ids = tok("The answer is", add_special_tokens=False)["input_ids"]
    learner.step([RolloutGroup(ids, [ids[:2], ids[1:3]], [1.0, 0.0])])
    learner.save(tmp_path / "adapter", tok)
    merged, _ = load_model(tmp_path / "adapter")
    base, _ = load_model(smollm2)
    diffs = [
        float((a - b).abs().max()) for (n, a), (_, b) in zip(merged.state_dict().items(), base.state_dict().items())
    ]
    assert max(diffs) > 0  # the trained adapter is merged in
    out = export_checkpoint(tmp_path / "adapter", tmp_path / "merged")
    again, _ = load_model(out)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), merged.state_dict().values()))


def test_d2evo_round_on_a_real_model(smollm2: Path, gsm8k_rows: Path, tmp_path: Path) -> None:
    summary, run = _run(
        "d2evo",
        tmp_path / "run",
        COMMON
        + [
            f"model.path={smollm2}",
            f"data.source={gsm8k_rows}",
            "rounds=1",
            "difficulty.pool_size=4",
            "difficulty.samples=2",
            "difficulty.band.low=0.0",
            "difficulty.band.high=1.0",
            "difficulty.measure_final=false",
            "questioner.steps=1",
            "questioner.prompts_per_step=2",
            "questioner.group_size=2",
            "questioner.max_new_tokens=32",
            "questioner.reward.samples=2",
            "buffer.generate=2",
            "buffer.voting.samples=2",
            "buffer.voting.band.low=0.0",
            "buffer.voting.band.high=1.0",
            "solver.steps=1",
            "solver.prompts_per_step=2",
            "solver.group_size=2",
        ],
    )
    assert len(run.read_jsonl("round_01/difficulty.jsonl")) == 4 and run.done(Phase("eval", 1))
    gen = run.read_jsonl("round_01/questioner_generated.jsonl")
    assert gen and "<|im_start|>" in run.read_jsonl("round_01/questioner_rollouts.jsonl")[0]["prompt"]
    assert all(g["reward"] == 0.0 for g in gen if not g["well_formed"])
    assert run.result(Phase("buffer", 1)).values["oracle_acc_kept"] is None  # no oracle for real data


def test_diagevo_round_on_a_real_model(smollm2: Path, tmp_path: Path) -> None:
    summary, run = _run(
        "diagevo",
        tmp_path / "run",
        COMMON
        + [
            f"model.path={smollm2}",
            "rounds=1",
            "challenger.steps=1",
            "challenger.prompts_per_step=2",
            "challenger.group_size=2",
            "challenger.max_new_tokens=32",
            "challenger.reward.samples=2",
            "pool.size=4",
            "pool.voting.samples=2",
            "pool.voting.filter=none",
            "solver.steps=1",
            "solver.prompts_per_step=2",
            "solver.group_size=2",
            "memory.embedder=hash",
            "diagnoser.max_new_tokens=24",
            f"diagnoser.model_path={smollm2}",
        ],
    )  # a frozen instruct diagnoser, as the paper (here the same small model)
    assert run.done(Phase("memory", 1)) and run.done(Phase("eval", 1))
    first = run.read_jsonl("round_01/challenger_rollouts.jsonl")[0]
    assert "expert competition-math problem setter" in first["prompt"]
    assert len(run.read_jsonl("round_01/candidates.jsonl")) == 4


def test_smollm2_learns_arith_with_grpo(smollm2: Path, tmp_path: Path) -> None:
    """A real LLM improves through coevolve: the shipped CPU preset (SmolLM2-135M-Instruct, the
    arith world, two example turns in the solver prompt), shortened to 12 steps on a fixed set of
    8 questions (``data.limit=8``: every step answers the same ones, so the reward measures what
    the updates taught, not which questions were drawn), with a higher learning rate. The mean
    reward over the last steps must exceed the first steps' (a reward that does not move means the
    real-model path cannot learn: no boxed answers, no group variance, or an update that does not
    reach the sampler)."""
    from coevolve.recipes import execute

    cfg = load_config(
        "grpo",
        ROOT / "configs" / "smollm2" / "grpo.yaml",
        [
            f"model.path={smollm2}",
            "data.limit=8",
            "solver.steps=12",
            "solver.prompts_per_step=8",
            "learner.lr=5e-5",
            "eval.limit=8",
            "eval.samples=0",
            "run.progress=false",
            "run.threads=1",
        ],
    )
    execute(cfg, tmp_path / "run")
    steps = [r for r in Run.open(tmp_path / "run").read_jsonl("metrics.jsonl") if "solver/reward_mean" in r]
    rewards = [r["solver/reward_mean"] for r in steps]
    assert len(rewards) == 12
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert 0.0 < first and last > first, rewards
