"""backend=verl without verl: parquet rows, override building, the reward module against
coevolve's reward functions, and whole phases against a stand-in ``main_ppo`` / merger
(tests/verl_standin.py) that writes verl's dumps, metrics and checkpoint layout. The verl lane
(tests/test_verl_lane.py) checks the same pieces against verl itself. The whole-phase runs use the
default toy base (``toy_overrides``): it finds anchors and keeps questions, so the D²Evo and
DiagEvo phases have something to train on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.run import Run
from coevolve.types import Task
from coevolve.verl.overrides import PhasePaths, phase_overrides
from coevolve.verl.parquet import IDENTITY_CHAT_TEMPLATE, RewardSpec, phase_rows, read_parquet, write_parquet
from verl_standin import DELTA

pytest.importorskip("pyarrow")
torch.set_num_threads(1)

SRC = str(Path(__file__).resolve().parents[1] / "src")
STANDIN = str(Path(__file__).with_name("verl_standin.py"))
TINY = [
    "solver.steps=2",
    "solver.prompts_per_step=4",
    "solver.group_size=4",
    "eval.heldout_size=8",
    "eval.samples=0",
    "run.progress=false",
    "sampling.max_new_tokens=24",
    "eval.max_new_tokens=24",
]


@pytest.fixture
def cache(toy_overrides: list[str]) -> list[str]:
    return toy_overrides


def standin(toy: list[str]) -> list[str]:
    return [
        "backend=verl",
        f"backend.verl.main=[{sys.executable},{STANDIN},main]",
        f"backend.verl.merger=[{sys.executable},{STANDIN}]",
        *toy,
    ]


def _tasks(step: int) -> list[Task]:
    return [Task(f"t{step}-{i}", f"{step}+{i}=", str(step + i), "toy") for i in range(3)]


def test_parquet_rows_are_the_phase_batches_in_order(tmp_path):
    spec = RewardSpec("solver", 0.9, 5.0)
    rows = phase_rows(2, _tasks, lambda t: f"Q:{t.question}\nA:", "solver", spec)
    back = read_parquet(write_parquet(rows, tmp_path / "train.parquet"))
    assert [r["extra_info"]["task_id"] for r in back] == ["t0-0", "t0-1", "t0-2", "t1-0", "t1-1", "t1-2"]
    assert [r["extra_info"]["index"] for r in back] == list(range(6))
    assert [r["extra_info"]["step"] for r in back] == [0, 0, 0, 1, 1, 1]
    r = back[4]
    assert r["data_source"] == "coevolve/solver" and r["ability"] == "math"
    assert r["prompt"] == [{"role": "user", "content": "Q:1+1=\nA:"}]
    assert r["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert RewardSpec.from_dict(r["extra_info"]["reward"]) == spec
    # unlabelled questions get an empty ground truth (never graded correct), not None
    rows = phase_rows(1, lambda s: [Task("x", "q")], str, "solver", spec)
    assert read_parquet(write_parquet(rows, tmp_path / "u.parquet"))[0]["reward_model"]["ground_truth"] == ""


def test_identity_chat_template_returns_the_prompt_text():
    from jinja2 import Template

    msgs = [{"role": "user", "content": "Q:3+4=\nA:"}]
    assert Template(IDENTITY_CHAT_TEMPLATE).render(messages=msgs, add_generation_prompt=True) == "Q:3+4=\nA:"


def _paths(root: Path) -> PhasePaths:
    return PhasePaths(root / "model", root / "train.parquet", root / "ckpt", root / "dumps", root / "reward.py")


def _overrides(*extra: str) -> list[str]:
    cfg = load_config("grpo", None, TINY + ["backend=verl", *extra])
    return phase_overrides(
        phase=cfg.solver,
        learner=cfg.learner,
        verl=cfg.backend.verl,
        engine=cfg.engine,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=24,
        max_prompt_tokens=12,
        paths=_paths(Path("/w")),
        experiment="01-solver",
        seed=123,
    )


GOLDEN = [
    "algorithm.adv_estimator=grpo",
    "algorithm.norm_adv_by_std_in_grpo=true",
    "algorithm.use_kl_in_reward=false",
    "data.train_files=/w/train.parquet",
    "data.val_files=/w/train.parquet",
    "data.train_batch_size=4",
    "data.max_prompt_length=12",
    "data.max_response_length=24",
    "data.shuffle=false",
    "data.filter_overlong_prompts=false",
    "data.truncation=error",
    "actor_rollout_ref.model.path=/w/model",
    "actor_rollout_ref.actor.optim.lr=3e-05",
    "actor_rollout_ref.actor.optim.weight_decay=0.0",
    "actor_rollout_ref.actor.optim.betas=[0.9,0.99]",
    "actor_rollout_ref.actor.grad_clip=1.0",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=1000000000.0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "actor_rollout_ref.actor.entropy_coeff=0.0",
    "actor_rollout_ref.actor.use_kl_loss=false",
    "actor_rollout_ref.actor.kl_loss_coef=0.0",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.top_k=-1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.seed=123",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
    "reward.custom_reward_function.path=/w/reward.py",
    "reward.custom_reward_function.name=compute_score",
    "trainer.total_epochs=1",
    "trainer.total_training_steps=2",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "trainer.default_local_dir=/w/ckpt",
    "trainer.rollout_data_dir=/w/dumps",
    "trainer.save_freq=2",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "trainer.resume_mode=disable",
    "trainer.logger=[console,file]",
    "trainer.project_name=coevolve",
    "trainer.experiment_name=01-solver",
]


def test_overrides_golden_list_for_a_toy_grpo_phase():
    assert _overrides() == GOLDEN


NAMES = ["/runs/a=b,c", "/runs/it's", "/runs/${oc.env:HOME}", "/runs/x\\", "/r/a\\'b", "/r/\\${y}", "/r/[a]{b} c"]


def test_a_run_folder_name_hydra_would_split_or_interpolate_is_quoted():
    """A run folder named with ``=``, ``,``, ``'`` or ``${`` reaches verl as itself."""
    from coevolve.verl.overrides import hydra_quoted

    cfg = load_config("grpo", None, TINY + ["backend=verl"])
    kw = dict(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=24, max_prompt_tokens=12, experiment="e", seed=1)
    ov = phase_overrides(
        phase=cfg.solver, learner=cfg.learner, verl=cfg.backend.verl, engine=cfg.engine,
        paths=_paths(Path("/runs/a=b,c'${x}")), **kw,
    )  # fmt: skip
    assert "data.train_files='/runs/a=b,c\\'\\${x}/train.parquet'" in ov
    assert [hydra_quoted(n) for n in NAMES[:3]] == ["'/runs/a=b,c'", "'/runs/it\\'s'", "'/runs/\\${oc.env:HOME}'"]
    assert hydra_quoted("/w/plain-1.2") == "/w/plain-1.2"


def test_quoted_values_resolve_back_to_themselves_in_hydra():
    pytest.importorskip("hydra")
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from coevolve.verl.overrides import hydra_quoted

    parser = OverridesParser.create()
    for name in NAMES:
        value = parser.parse_override(f"k={hydra_quoted(name)}").value()
        assert OmegaConf.create({"k": value}).k == name, name


def test_overrides_follow_the_config():
    ov = _overrides(
        "learner.beta_kl=0.04",
        "learner.scale_std=false",
        "learner.lr=1e-6",
        "backend.verl.nnodes=2",
        "backend.verl.n_gpus_per_node=8",
        "engine.ray.address=auto",
        "solver.prompts_per_step=16",
        "engine.tensor_parallel_size=2",
        "engine.gpu_memory_utilization=0.5",
        "backend.verl.extra_overrides=[trainer.save_freq=1,actor_rollout_ref.rollout.n=2]",
    )
    assert "actor_rollout_ref.actor.use_kl_loss=true" in ov and "actor_rollout_ref.actor.kl_loss_coef=0.04" in ov
    assert "algorithm.norm_adv_by_std_in_grpo=false" in ov and "actor_rollout_ref.actor.optim.lr=1e-06" in ov
    assert "trainer.nnodes=2" in ov and "trainer.n_gpus_per_node=8" in ov and "+ray_kwargs.ray_init.address=auto" in ov
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in ov  # the run's engine settings, one place
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.5" in ov
    # a config that still names the fields' former places sets them (old run folders, old command lines)
    old = _overrides(
        "backend.verl.ray_address=auto",
        "backend.verl.tensor_parallel_size=2",
        "backend.verl.gpu_memory_utilization=0.5",
        "backend.verl.n_gpus_per_node=8",
    )
    assert {
        "+ray_kwargs.ray_init.address=auto",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    } <= set(old)
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4" in ov  # 16 x 4 rollouts over 16 GPUs
    assert not any("gradient_checkpointing" in o or "dynamic_bsz" in o for o in ov)  # auto / rows: verl's defaults
    ov2 = _overrides("learner.gradient_checkpointing=true", "learner.max_tokens_per_micro_batch=16384")
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=true" in ov2
    assert "actor_rollout_ref.actor.use_dynamic_bsz=true" in ov2
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384" in ov2
    assert ov[-2:] == ["trainer.save_freq=1", "actor_rollout_ref.rollout.n=2"]  # extras last: Hydra's last one wins


@pytest.mark.parametrize(
    "extra, field",
    [
        (["backend.verl.n_gpus_per_node=3"], "backend.verl.nnodes x n_gpus_per_node"),
        (["learner.lora=true"], "learner.lora"),
    ],
)
def test_override_config_errors_name_the_field(extra, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        _overrides(*extra)


def test_backend_config_errors_name_the_field(tmp_path):
    from coevolve.verl.overrides import default_commands

    with pytest.raises(ConfigError, match=r"backend\.kind"):
        load_config("grpo", None, ["backend=ray"])
    with pytest.raises(ConfigError, match=r"backend\.verl\.rollout"):
        load_config("grpo", None, ["backend.verl.rollout=trtllm"])
    with pytest.raises(ConfigError, match=r"backend\.verl\.main"):
        load_config("grpo", None, ["backend.verl.main=[]"])
    with pytest.raises(ConfigError, match=r"backend\.verl\.merger"):
        default_commands(load_config("grpo", None, ["backend.verl.merger=[python, '']"]).backend.verl)
    cfg = load_config("grpo", None, ["backend=verl", "backend.verl.python=/opt/verl/bin/python"])
    assert cfg.backend.kind == "verl"
    assert default_commands(cfg.backend.verl) == (
        ["/opt/verl/bin/python", "-m", "verl.trainer.main_ppo"],
        ["/opt/verl/bin/python", "-m", "verl.model_merger"],
    )
    # writer phases load under verl (docs/scale.md's commands); solver_model is a field
    assert load_config("d2evo", None, ["backend=verl"]).questioner.steps == 5
    cfg = load_config(
        "diagevo",
        None,
        ["backend=verl", "backend.verl.solver_url=http://h:8000/v1", "backend.verl.solver_model=solver-r01"],
    )
    assert (cfg.challenger.steps, cfg.backend.verl.solver_model) == (5, "solver-r01")


def test_step_audit_is_the_same_for_both_backends():
    """One reward, stated once as data: the local loop's step (``local_reward``) and verl's
    per-sample scores read back through ``audit_step`` give the same rewards, metrics and
    records (the DiagEvo solver's diagnosis input included)."""
    from coevolve.answers import make_grader
    from coevolve.training import audit_step, local_reward
    from coevolve.types import Completion
    from coevolve.verl.reward import compute_score

    tasks = [
        Task("a", "1+2=", "3", features={"targets": ["c1"], "oracle": "3"}),
        Task("b", "x", "\\frac{1}{2}", features={"targets": [], "oracle": "0.25"}),
    ]
    texts = [
        ["<think>k</think>\\boxed{3}", "\\boxed{4}", "no answer"],
        ["\\boxed{0.5}", "<think>h</think>\\boxed{1/4}", ""],
    ]
    comps = [[Completion(x, [], []) for x in g] for g in texts]
    with make_grader(5.0, 1) as grader:
        for spec in (RewardSpec("solver", 0.9), RewardSpec("match")):
            rewards, local = local_reward(spec, grader)(0, tasks, comps)
            extras = [
                [compute_score("s", x, t.answer, {"reward": spec.to_dict(), "index": i}) for x in g]
                for i, (t, g) in enumerate(zip(tasks, texts))
            ]
            remote = audit_step(spec, tasks, texts, extras, grader)
            assert [[e["score"] for e in g] for g in extras] == rewards, spec.kind
            assert (remote.metrics, remote.records) == (local.metrics, local.records), spec.kind
    assert local.metrics["oracle_acc"] == pytest.approx(2 / 6) and local.records[0]["matches"] == [True, False, False]


def test_rzero_reward_is_refused_under_verl_before_any_work():
    """R-Zero's repetition penalty clusters the whole batch; verl's workers score one sample:
    preflight refuses the pair (the field named), the local backend computes it as coded."""
    from coevolve.preflight import backend_problems

    root = Path(__file__).resolve().parents[1]
    problems = backend_problems(load_config("diagevo", root / "configs" / "rzero.yaml", ["backend=verl"]))
    assert len(problems) == 1 and problems[0].startswith("challenger.reward.kind=rzero with backend=verl")
    assert backend_problems(load_config("diagevo", root / "configs" / "rzero.yaml")) == []
    assert backend_problems(load_config("diagevo", None, ["backend=verl"])) == []
    d = backend_problems(load_config("d2evo", None, ["backend=verl", "questioner_reward=rzero"]))
    assert [p.split("=")[0] for p in d] == ["questioner.reward.kind"]
    assert (
        backend_problems(load_config("d2evo", None, ["backend=verl", "questioner_reward=rzero", "questioner=false"]))
        == []
    )


def test_reward_module_equals_coevolve_rewards():
    from coevolve.answers import make_grader
    from coevolve.loop import labelled_reward
    from coevolve.training import match_reward
    from coevolve.types import Completion
    from coevolve.verl.reward import VerlRewardError, compute_score

    tasks = [Task("a", "1+2=", "3"), Task("b", "x", "\\frac{1}{2}"), Task("c", "y", None)]
    texts = [
        ["<think>k</think>\\boxed{3}", "\\boxed{3}", "\\boxed{4}", "<think></think>\\boxed{4}"],
        ["\\boxed{0.5}", "<think>h</think>\\boxed{1/2}", "no answer", "\\boxed{2}"],
        ["\\boxed{1}", "<think>h</think>\\boxed{1}", "", "\\boxed{}"],
    ]
    comps = [[Completion(t, [], []) for t in g] for g in texts]
    for kind, alpha in (("solver", 0.9), ("solver", 0.5), ("match", 0.9)):
        with make_grader(5.0, 1) as grader:
            fn = labelled_reward(alpha, grader) if kind == "solver" else match_reward(grader)
            tasks_k = (
                tasks
                if kind == "solver"
                else [Task(t.id, t.question, t.answer, features={"targets": []}) for t in tasks]
            )
            want, _ = fn(0, tasks_k, comps)
        # pinned, not only equal on both sides: a correct answer without the think format earns
        # the configured α (a dropped α would give both sides the same default)
        assert want[0][:3] == ([1.0, alpha, 0.0] if kind == "solver" else [1.0, 1.0, -1.0]), (kind, alpha)
        spec = RewardSpec(kind, alpha).to_dict()
        got = [
            [compute_score("coevolve/solver", x, t.answer or "", {"reward": spec, "index": i})["score"] for x in g]
            for i, (t, g) in enumerate(zip(tasks, texts))
        ]
        assert got == want, kind
    out = compute_score("s", "<think>k</think>\\boxed{3}", "3", {"reward": RewardSpec("solver").to_dict(), "index": 7})
    assert out == {"score": 1.0, "acc": 1.0, "format": 1.0, "row": 7.0}
    with pytest.raises(VerlRewardError, match="extra_info"):
        compute_score("s", "x", "3", {})


def _grpo(tmp: Path, cache: list[str], extra: list[str]):
    from coevolve.lab.report import write_report
    from coevolve.recipes import execute

    cfg = load_config("grpo", None, TINY + standin(cache) + extra)
    summary = execute(cfg, tmp / "run", report=write_report)
    return summary, Run.open(tmp / "run")


@pytest.mark.slow
def test_whole_phase_against_the_standin(tmp_path, cache, monkeypatch):
    from safetensors.torch import load_file

    monkeypatch.setenv("STANDIN_ARGS", str(tmp_path / "args.json"))
    summary, run = _grpo(tmp_path, cache, ["backend.verl.keep_workdir=true"])
    phase = run.path / "round_01"
    rows = run.read_jsonl("round_01/solver_rollouts.jsonl")
    assert len(rows) == 2 * 4 and [r["step"] for r in rows] == [0] * 4 + [1] * 4
    assert all(r["rewards"] == [1.0, 0.0, 1.0, 0.0] and len(r["completions"]) == 4 for r in rows)
    assert all(r["completions"][0] == f"<think>ok</think>\\boxed{{{r['label']}}}" for r in rows)
    parquet = read_parquet(phase / "verl_solver" / "train.parquet")
    assert [p["extra_info"]["task_id"] for p in parquet] == [r["task_id"] for r in rows]
    assert [p["prompt"][0]["content"] for p in parquet] == [r["prompt"] for r in rows]
    args = json.loads((tmp_path / "args.json").read_text())
    assert args == (phase / "verl_solver" / "overrides.txt").read_text().split()
    steps = [m for m in run.metrics.rows() if m.get("phase") == "solver" and "step" in m]
    assert [m["step"] for m in steps] == [0, 1]
    for m in steps:
        assert m["solver/reward_mean"] == 0.5 and m["solver/acc_mean"] == 0.5 and m["solver/format_mean"] == 0.5
        assert m["solver/frac_zero_std"] == 0.0 and m["solver/loss"] == 0.5 and m["solver/grad_norm"] == 1.5
    rec = {r.key: r for r in run.state.records()}["01/solver"]
    assert rec.values["steps"] == 2 and rec.values["updates"] == 2 and rec.values["reward_mean"] == 0.5
    assert rec.compute["rollouts"] >= 2 * 4 * 4 and rec.compute["trained_tokens"] > 0
    # the merged checkpoint (stand-in: every weight + DELTA) is what the run continues with and saves
    start = load_file(str(phase / "verl_solver" / "model" / "model.safetensors"))
    saved = load_file(str(run.checkpoint("solver") / "model.safetensors"))
    assert start.keys() == saved.keys()
    for k in start:
        torch.testing.assert_close(saved[k], start[k] + DELTA, rtol=0, atol=1e-6)
    assert (phase / "verl_solver" / "model" / "chat_template.jinja").read_text() == IDENTITY_CHAT_TEMPLATE
    assert summary["ok"] and (run.path / "report" / "report.md").is_file()


@pytest.mark.slow
def test_a_finished_run_is_not_rerun_and_the_workdir_goes(tmp_path, cache, monkeypatch):
    from coevolve.recipes import execute

    monkeypatch.setenv("STANDIN_ARGS", str(tmp_path / "args.json"))
    summary, run = _grpo(tmp_path, cache, [])
    assert not (run.path / "round_01" / "verl_solver").exists()  # keep_workdir=false
    (tmp_path / "args.json").unlink()
    again = execute(load_config("grpo", None, TINY + standin(cache)), run.path)
    assert again == summary and not (tmp_path / "args.json").exists()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "coevolve", *args], capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_cli_run_with_a_crashing_trainer_then_resume(tmp_path, cache):
    """``coevolve run grpo backend=verl`` whose trainer dies: a clear error naming the log; the
    resumed run redoes the verl phase from scratch and finishes."""
    rd = tmp_path / "r"
    r = _cli("run", "grpo", *TINY, *standin(cache), "--run-dir", str(rd), env={"STANDIN_FAIL": "1"})
    assert r.returncode != 0
    assert "verl main_ppo exited with status 3" in r.stderr + r.stdout and "verl_solver_main.log" in r.stderr + r.stdout
    assert "simulated crash" in (rd / "round_01" / "verl_solver_main.log").read_text()
    r = _cli("resume", str(rd))
    assert r.returncode == 0, r.stderr[-2000:]
    run = Run.open(rd)
    assert [x.key for x in run.state.records()] == ["base/eval", "01/solver", "01/eval"]
    rows = run.read_jsonl("round_01/solver_rollouts.jsonl")
    assert len(rows) == 8 and [m["step"] for m in run.metrics.rows() if m.get("phase") == "solver" and "step" in m] == [
        0,
        1,
    ]


@pytest.mark.slow
def test_diagevo_solver_phase_on_the_standin_feeds_the_diagnosis(tmp_path, cache):
    """DiagEvo with a frozen challenger: the solver phase runs on (stand-in) verl with the ±1
    match reward, and its per-question records (responses, matches) reach optimisation.jsonl,
    which the diagnosis reads."""
    from coevolve.recipes import execute

    smoke = Path(__file__).resolve().parents[1] / "configs" / "diagevo_smoke.yaml"
    cfg = load_config(
        "diagevo",
        smoke,
        [
            "rounds=1",
            "memory.embedder=hash",
            "eval.heldout_size=8",
            "eval.samples=0",
            "pool.size=16",
            "solver.steps=1",
            "challenger_frozen=true",
            "run.progress=false",
            *standin(cache),
        ],
    )
    execute(cfg, tmp_path / "run")
    run = Run.open(tmp_path / "run")
    rows = run.read_jsonl("round_01/solver_rollouts.jsonl")
    opt = run.read_jsonl("round_01/optimisation.jsonl")
    assert rows, "the default toy base kept no question: the solver phase had nothing to train on"
    assert all(r["rewards"] == [1.0, -1.0] * (len(r["rewards"]) // 2) for r in rows)
    assert {o["id"] for o in opt} == {r["task_id"] for r in rows}
    assert all(
        o["matches"] == [True, False] * (len(o["matches"]) // 2) and len(o["responses"]) == len(o["matches"])
        for o in opt
    )


def test_converters_refuse_outputs_that_do_not_match_the_rows(tmp_path):
    from coevolve.verl.convert import VerlOutputError, latest_checkpoint, read_metrics, step_rollouts

    rows = phase_rows(2, _tasks, str, "solver", RewardSpec("solver"))
    d = tmp_path / "dumps"
    d.mkdir()

    def dump(step: int, samples: list[tuple[int, float]]) -> None:
        (d / f"{step}.jsonl").write_text(
            "".join(
                json.dumps(
                    {"input": "p", "output": f"o{r}", "gts": "", "score": s, "step": step, "row": float(r), "acc": s}
                )
                + "\n"
                for r, s in samples
            )
        )

    dump(1, [(r, float(i % 2)) for r in (0, 1, 2) for i in range(2)])
    with pytest.raises(VerlOutputError, match="2.jsonl"):  # step 2's dump is missing
        step_rollouts(d, rows, 2, 2)
    dump(2, [(r, 1.0) for r in (3, 4, 5) for _ in range(2)])
    got = step_rollouts(d, rows, 2, 2)
    assert [s.step for s in got] == [0, 1] and [r.task.id for r in got[1].rows] == ["t1-0", "t1-1", "t1-2"]
    assert got[0].scores == [[0.0, 1.0]] * 3 and got[0].texts[2] == ["o2", "o2"]
    with pytest.raises(VerlOutputError, match="row 3 .* 1 samples, expected 2"):
        dump(2, [(3, 1.0), (4, 1.0), (4, 1.0), (5, 1.0), (5, 1.0)])
        step_rollouts(d, rows, 2, 2)
    with pytest.raises(VerlOutputError, match="not step 1's"):
        dump(2, [(r, 1.0) for r in (3, 4, 5, 0) for _ in range(2)])
        step_rollouts(d, rows, 2, 2)
    with pytest.raises(VerlOutputError, match="latest_checkpointed_iteration"):
        latest_checkpoint(tmp_path / "ckpt")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("3")
    with pytest.raises(VerlOutputError, match="global_step_3"):
        latest_checkpoint(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "global_step_3" / "actor").mkdir(parents=True)
    assert latest_checkpoint(tmp_path / "ckpt") == (3, tmp_path / "ckpt" / "global_step_3" / "actor")
    (tmp_path / "m.jsonl").write_text(json.dumps({"step": 1, "data": {"actor/pg_loss": 0.1}}) + "\n")
    assert read_metrics(tmp_path / "m.jsonl") == {1: {"actor/pg_loss": 0.1}} and read_metrics(tmp_path / "x") == {}


def test_step_metrics_use_coevolves_definitions():
    from coevolve.types import Completion
    from coevolve.verl.convert import StepRollouts, step_metrics

    rows = phase_rows(1, lambda s: _tasks(s)[:2], str, "solver", RewardSpec("solver"))
    sr = StepRollouts(
        0,
        rows,
        [["a", "b"], ["c", "d"]],
        [[1.0, 0.0], [1.0, 1.0]],
        [[{"acc": 1.0, "format": 0.0}, {"acc": 0.0, "format": 1.0}], [{"acc": 1.0, "format": 1.0}] * 2],
    )
    comps = [[Completion(t, [1] * n, []) for t, n in zip(g, (3, 5))] for g in sr.texts]
    m = step_metrics(sr, comps, {"actor/pg_loss": 0.25, "timing_s/gen": 2.0, "actor/unmapped": 7.0})
    assert m["reward_mean"] == 0.75 and m["frac_zero_std"] == 0.5 and m["skipped"] == 0.0
    assert m["n_tokens"] == 8.0  # only the group with reward variance trains (its 3 + 5 tokens)
    assert m["acc_mean"] == 0.75 and m["format_mean"] == 0.75 and m["completion_len_mean"] == 4.0
    assert m["loss"] == 0.25 and m["gen_seconds"] == 2.0 and "unmapped" not in m


# ---------------------------------------------------------------------------------------------
# writer phases (D²Evo questioner, DiagEvo / R-Zero challenger)


class _CannedSolver:
    """A frozen solver whose answers depend on the question only: 3 of 4 say the sum, 1 says 0."""

    tokenizer = None

    def __init__(self):
        self.calls = 0

    def sample(self, prompts, n, params):
        from coevolve.types import Completion
        from coevolve.world.toy.prompts import solver_prompt

        self.calls += 1
        out = []
        for p in prompts:
            q = next(q for q in ("1+2", "2+3", "3+4") if solver_prompt(q) == p)
            right = str(eval(q))
            out.append([Completion(f"\\boxed{{{right if i % 4 else 0}}}", [], []) for i in range(n)])
        return out

    def sync_weights(self, model):
        pass


def _writer_spec(kind: str, **kw):
    from coevolve.verl.writer import WriterSpec

    return WriterSpec(
        reward={"kind": kind, "samples": 4},
        seed=3,
        ns="verify",
        params={"temperature": 1.0, "max_new_tokens": 8},
        prompter={"kind": "toy", "class": "coevolve.world.toy.prompts:ToyPrompter"},
        rep_tokenizer="char",
        batch_prompts=8,
        **kw,
    )


def test_reward_workers_rebuild_each_worlds_prompter():
    """A writer's reward worker rebuilds the run's prompter from the spec: the toy and skill
    worlds' own prompters by name (the skill world's question parser included), a real model's
    chat prompter from its settings; a world whose prompter needs a tokenizer is refused by name."""
    from dataclasses import replace

    from coevolve.prompts.chat import ChatPrompter
    from coevolve.verl.writer import _prompter, prompter_spec
    from coevolve.world.skill.prompts import SkillPrompter
    from coevolve.world.toy.prompts import ToyPrompter

    for p in (ToyPrompter(), SkillPrompter(), ChatPrompter(None, use_chat_template=False)):
        back = _prompter(replace(_writer_spec("plateau"), prompter=prompter_spec(p)))
        assert type(back) is type(p)
    skill = _prompter(replace(_writer_spec("plateau"), prompter=prompter_spec(SkillPrompter())))
    assert skill.parse_question("<question>93-27~*3</question>") == "93-27~*3"
    with pytest.raises(ConfigError, match="the real world's prompter is rebuilt from a tokenizer"):
        _prompter(replace(_writer_spec("plateau"), prompter={"kind": "real"}))


def test_writer_reward_equals_coevolve_rewards():
    """Per sample (verl) = coevolve's batch scorer (local) for the plateau reward on fixed answers;
    R-Zero's reward, whose repetition penalty clusters the whole batch, is refused per sample."""
    from coevolve.answers import make_grader
    from coevolve.curriculum import score_writer_batch
    from coevolve.schema import WriterReward
    from coevolve.types import Completion, SamplingParams
    from coevolve.verl.writer import score_sample
    from coevolve.world.toy.prompts import ToyPrompter, question_completion

    texts = [
        [question_completion("1+2"), "junk", question_completion("2+3")],
        [question_completion("1+2"), question_completion("3+4"), "<question>x</question>"],
    ]
    prompter = ToyPrompter()
    with make_grader(5.0, 1) as grader:
        with pytest.raises(ConfigError, match="one sample at a time"):
            score_sample(_writer_spec("rzero"), texts[0][0], 0, grader, _CannedSolver(), prompter)
        for kind in ("plateau",):
            solver = _CannedSolver()
            spec = _writer_spec(kind)
            got = [[score_sample(spec, t, 0, grader, solver, prompter) for t in g] for g in texts]
            # one vote per distinct question per step, as the local scorer's "unique questions"
            assert solver.calls == 3 and sum(e["solver_rollouts"] for g in got for e in g) == 3 * 4
            wb = score_writer_batch(
                [[Completion(t, [], []) for t in g] for g in texts],
                parse=prompter.parse_question,
                scorer=_CannedSolver(),
                prompter=prompter,
                reward=WriterReward(**spec.reward),
                grader=grader,
                params=SamplingParams(),
                batch_prompts=8,
                rep_tokenizer="char",
            )
            assert [[e["p1"] if e["well_formed"] else None for e in g] for g in got] == wb.x
            assert [[bool(e["in_band"]) for e in g] for g in got] == wb.in_band
            assert [[e["score"] for e in g] for g in got] == wb.rewards
            assert got[0][0]["score"] == 1.0 and got[0][1]["score"] == 0.0 and got[0][0]["label"] == "3"


def _fake_openai(model: str):
    """A tiny OpenAI-compatible server (/v1/models, /v1/completions) in a thread: every answer is
    ``\\boxed{3}``; the bodies it got are kept for assertions."""
    import threading
    from http.server import ThreadingHTTPServer

    from json_http import JsonHandler

    bodies: list[dict] = []

    class H(JsonHandler):
        def do_GET(self):
            self._send(
                {"data": [{"id": model}]} if self.path == "/v1/models" else {"error": "no"},
                200 if self.path == "/v1/models" else 404,
            )

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            if body.get("model") != model:
                return self._send({"error": "unknown model"}, 404)
            self._send(
                {"choices": [{"index": i, "text": "\\boxed{3}", "finish_reason": "stop"} for i in range(body["n"])]}
            )

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/v1", bodies


def test_writer_reward_through_a_solver_server():
    from coevolve.answers import make_grader
    from coevolve.types import SamplingParams
    from coevolve.verl import writer
    from coevolve.verl.writer import RemoteSolver, SolverServerError, check_served_model, score_sample
    from coevolve.world.toy.prompts import question_completion, solver_prompt

    srv, url, bodies = _fake_openai("solver-r01")
    try:
        assert check_served_model(url, "solver-r01") == "solver-r01" and check_served_model(url, None) == "solver-r01"
        with pytest.raises(
            SolverServerError, match=r"serves \['solver-r01'\], not backend\.verl\.solver_model='solver-r00'"
        ):
            check_served_model(url, "solver-r00")
        comps = RemoteSolver(url, "solver-r01").sample(
            ["a", "b"], 3, SamplingParams(temperature=0.7, max_new_tokens=9, seed=5)
        )
        assert [[c.text for c in g] for g in comps] == [["\\boxed{3}"] * 3] * 2
        assert bodies[-1] == {
            "model": "solver-r01",
            "prompt": "b",
            "n": 3,
            "temperature": 0.7,
            "top_p": 1.0,
            "max_tokens": 9,
            "seed": 6,
        }
        with make_grader(5.0, 1) as grader:
            spec = _writer_spec("plateau", solver_url=url, solver_model="solver-r01", retries=0)
            out = score_sample(spec, question_completion("1+2"), 1, grader)
        assert out["p1"] == 1.0 and out["score"] == 0.0 and out["label"] == "3"  # all agree: too easy
        assert bodies[-1]["prompt"] == solver_prompt("1+2") and bodies[-1]["n"] == 4
        with pytest.raises(SolverServerError, match=r"serves .*solver_model='other'"):
            score_sample(
                _writer_spec("plateau", solver_url=url, solver_model="other", retries=0),
                question_completion("2+3"),
                1,
                grader,
            )
    finally:
        srv.shutdown()
        srv.server_close()
        writer._SAMPLERS.clear()
    with pytest.raises(SolverServerError, match=rf"frozen solver server {url}/models"):
        check_served_model(url, "solver-r01", timeout=2.0, retries=0)


@pytest.mark.slow
def test_d2evo_smoke_on_the_standin_trains_the_questioner(tmp_path, cache):
    """D²Evo with backend=verl (stand-in main_ppo): the questioner phase is rewarded in the
    trainer's reward workers by the frozen solver folder the phase exported, and its rollouts,
    audit records and metrics reach the run folder as with the local backend."""
    from coevolve.recipes import execute

    smoke = Path(__file__).resolve().parents[1] / "configs" / "d2evo_smoke.yaml"
    cfg = load_config(
        "d2evo",
        smoke,
        [
            "rounds=1",
            "eval.heldout_size=8",
            "eval.samples=0",
            "solver.steps=1",
            "backend.verl.keep_workdir=true",
            *standin(cache),
        ],
    )
    execute(cfg, tmp_path / "run")
    run = Run.open(tmp_path / "run")
    recs = {r.key: r for r in run.state.records()}
    q = recs["01/questioner"]
    assert not q.values.get("skipped"), f"the default toy base gave no anchors: {q.values['skipped']}"
    rows = run.read_jsonl("round_01/questioner_rollouts.jsonl")
    assert len(rows) == 2 * 4 and all(len(r["completions"]) == 2 for r in rows)
    assert all(r["completions"][1] == "no question" and r["rewards"][1] == 0.0 for r in rows)
    gen = run.read_jsonl("round_01/questioner_generated.jsonl")
    assert len(gen) == 2 * 4 * 2 and [g["well_formed"] for g in gen] == [True, False] * 8
    assert all(0.0 <= g["x"] <= 1.0 and g["label"] is not None for g in gen if g["well_formed"])
    assert q.values["well_formed"] == 0.5 and q.values["steps"] == 2 and q.values["rollouts_verify"] > 0
    steps = [m for m in run.metrics.rows() if m.get("phase") == "questioner" and "step" in m]
    assert [m["step"] for m in steps] == [0, 1] and all(m["questioner/well_formed"] == 0.5 for m in steps)
    spec = json.loads((run.path / "round_01" / "verl_questioner" / "writer_spec.json").read_text())
    assert spec["solver_url"] is None and Path(spec["solver_path"]).name == "solver"
    assert spec["reward"]["kind"] == "plateau" and spec["reward"]["samples"] == 4
