"""The verl lane: coevolve's backend=verl pieces checked against verl 0.9.1 itself, on CPU.

Skipped without verl; run in verl's environment (docs/verl.md, "Testing")::

    PYTHONPATH=src /opt/venv-verl/bin/python -m pytest -m verl tests/test_verl_lane.py

What runs here: the generated overrides through verl's own Hydra composition and
``validate_config`` (and its actor / rollout dataclasses); ``coevolve.verl.reward`` called by
verl's ``NaiveRewardManager`` on a real ``DataProto``; ``compute_grpo_outcome_advantage`` against
``rl.grpo.group_advantages``; ``python -m verl.model_merger merge --backend fsdp`` on a 2-rank
FSDP2 / gloo checkpoint, loaded back into coevolve. What cannot run here (a ``main_ppo`` step
needs CUDA and NCCL) is listed in docs/verl.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
pytestmark = pytest.mark.verl
torch.set_num_threads(1)

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def toy(toy_base_30: Path) -> Path:
    """A toy model folder (any will do: these tests check files and shapes, not skill)."""
    return toy_base_30


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    cfg_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(cfg_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def _phase_overrides(tmp: Path, *extra: str) -> list[str]:
    from coevolve.config import load_config
    from coevolve.verl.overrides import PhasePaths, phase_overrides

    cfg = load_config("grpo", None, ["backend=verl", "solver.steps=3", "solver.prompts_per_step=8", *extra])
    paths = PhasePaths(
        tmp / "model", tmp / "train.parquet", tmp / "ckpt", tmp / "dumps", Path(SRC) / "coevolve" / "verl" / "reward.py"
    )
    return phase_overrides(
        phase=cfg.solver,
        learner=cfg.learner,
        verl=cfg.backend.verl,
        engine=cfg.engine,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=64,
        max_prompt_tokens=32,
        paths=paths,
        experiment="01-solver",
        seed=123,
    )


@pytest.mark.parametrize(
    "extra",
    [
        (),
        (
            "learner.beta_kl=0.04",
            "backend.verl.nnodes=2",
            "backend.verl.n_gpus_per_node=8",
            "engine.tensor_parallel_size=2",
            "engine.ray.address=auto",
            "solver.prompts_per_step=16",
            "learner.max_tokens_per_micro_batch=16384",
            "learner.gradient_checkpointing=true",
        ),
    ],
)
def test_overrides_pass_verls_own_config_validation(tmp_path, extra):
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    ov = _phase_overrides(tmp_path, *extra)
    cfg = _compose(ov)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert actor.clip_ratio_low == 0.2 and actor.clip_ratio_high == 0.28 and actor.loss_agg_mode == "token-mean"
    assert list(actor.optim.betas) == [0.9, 0.99] and actor.optim.lr == 3e-5
    assert rollout.n == 8 and rollout.top_k == -1 and cfg.data.shuffle is False
    assert cfg.reward.custom_reward_function.name == "compute_score"
    assert Path(cfg.reward.custom_reward_function.path).is_file()
    if extra:
        assert actor.use_kl_loss and actor.kl_loss_coef == 0.04 and cfg.ray_kwargs.ray_init.address == "auto"
        assert cfg.trainer.nnodes == 2 and rollout.tensor_model_parallel_size == 2
        assert actor.use_dynamic_bsz and actor.ppo_max_token_len_per_gpu == 16384
        assert rollout.log_prob_use_dynamic_bsz and rollout.log_prob_max_token_len_per_gpu == 16384


def test_a_misspelt_override_is_refused_by_verl(tmp_path):
    from hydra.errors import ConfigCompositionException

    ov = _phase_overrides(tmp_path, "backend.verl.extra_overrides=[actor_rollout_ref.actor.clip_ratio_hgh=0.3]")
    with pytest.raises(ConfigCompositionException, match="clip_ratio_hgh"):
        _compose(ov)


def test_reward_module_through_verls_naive_reward_manager(toy):
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from coevolve.engine import load_tokenizer
    from coevolve.verl.parquet import RewardSpec
    from coevolve.verl.reward import compute_score

    tok = load_tokenizer(toy)
    prompts = ["Q:1+2=\nA:", "Q:7+8=\nA:", "Q:9+9=\nA:"]
    answers = ["<think>x</think>\\boxed{3}", "\\boxed{15}", "<think>y</think>\\boxed{17}"]
    golds = ["3", "15", "18"]
    P = max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    R = max(len(tok(a, add_special_tokens=False)["input_ids"]) for a in answers) + 2
    pid = torch.full((3, P), tok.pad_token_id)
    rid = torch.full((3, R), tok.pad_token_id)
    mask = torch.zeros((3, P + R), dtype=torch.long)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        pi, ai = tok(p, add_special_tokens=False)["input_ids"], tok(a, add_special_tokens=False)["input_ids"]
        pid[i, P - len(pi) :] = torch.tensor(pi)  # left-padded prompt, right-padded response (verl's layout)
        rid[i, : len(ai)] = torch.tensor(ai)
        mask[i, P - len(pi) : P + len(ai)] = 1
    spec = RewardSpec("solver", 0.9).to_dict()
    data = DataProto.from_dict(
        tensors={"prompts": pid, "responses": rid, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["coevolve/solver"] * 3, dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": g} for g in golds], dtype=object),
            "extra_info": np.array([{"index": i, "reward": spec} for i in range(3)], dtype=object),
        },
    )
    out = NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data, return_dict=True)
    last = [len(tok(a, add_special_tokens=False)["input_ids"]) - 1 for a in answers]
    got = [float(out["reward_tensor"][i, j]) for i, j in enumerate(last)]
    assert got == pytest.approx([1.0, 0.9, 0.1])
    assert float(out["reward_tensor"].sum()) == pytest.approx(2.0)  # the score sits on the last response token only
    info = out["reward_extra_info"]
    assert info["acc"] == [1.0, 1.0, 0.0] and info["format"] == [1.0, 0.0, 1.0] and info["row"] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("scale_std", [True, False])
def test_grpo_advantages_equal_coevolves_with_eps_matched(scale_std):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from coevolve.rl.grpo import group_advantages

    g = torch.Generator().manual_seed(0)
    B, G, T = 6, 8, 5
    r_BG = (
        torch.randint(0, 2, (B, G), generator=g).float() * 0.9 + 0.1 * torch.randint(0, 2, (B, G), generator=g).float()
    )
    r_BG[0] = 1.0  # a zero-variance group
    want_BG, _ = group_advantages(r_BG, scale_std=scale_std, eps=1e-4)
    lens = torch.randint(1, T + 1, (B * G,), generator=g)
    mask = (torch.arange(T)[None, :] < lens[:, None]).float()
    tlr = torch.zeros(B * G, T)
    tlr[torch.arange(B * G), lens - 1] = r_BG.reshape(-1)
    uid = np.array([f"p{i // G}" for i in range(B * G)], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(tlr, mask, uid, epsilon=1e-4, norm_adv_by_std_in_grpo=scale_std)
    got_N = (adv * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(got_N.double(), want_BG.reshape(-1).double(), rtol=0, atol=1e-6)
    assert torch.equal(adv, got_N[:, None] * mask)  # one advantage per sequence, on its response tokens


def test_model_merger_on_a_two_rank_fsdp2_gloo_checkpoint(toy, tmp_path):
    from coevolve.engine import load_model

    ckpt, merged = tmp_path / "global_step_3" / "actor", tmp_path / "merged"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    r = subprocess.run(
        [
            torchrun,
            "--standalone",
            "--nproc_per_node",
            "2",
            str(Path(__file__).with_name("verl_fsdp_ckpt.py")),
            str(toy),
            str(ckpt),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p.name for p in ckpt.glob("model_world_size_2_rank_*.pt")} == {
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(ckpt),
            "--target_dir",
            str(merged),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ref, tok = load_model(str(toy), device="cpu", dtype="float32")
    got, _ = load_model(str(merged), device="cpu", dtype="float32")
    ids = torch.tensor([tok("Q:12+34=\nA:", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        want = ref(ids).logits
        ref_bf16 = {k: v.to(torch.bfloat16).float() for k, v in ref.state_dict().items()}
        for k, v in got.state_dict().items():  # the merger writes bf16: each weight is the bf16 rounding of ours
            torch.testing.assert_close(v, ref_bf16[k], rtol=0, atol=0, msg=k)
        torch.testing.assert_close(got(ids).logits, want, rtol=0.05, atol=0.05)


def test_verl_scores_one_sample_per_call_so_writers_are_scored_per_sample():
    """docs/verl.md's reason for the per-sample writer reward: the reward loop that main_ppo uses
    splits batches into single samples and registers no batch manager. If verl adds one, this
    fails, and the writer reward could call ``score_writer_batch`` on the whole batch."""
    import inspect

    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    assert "batch" not in REWARD_MANAGER
    assert "data[i : i + 1]" in inspect.getsource(RewardLoopWorker.compute_score_batch)


def test_writer_reward_through_verls_naive_reward_manager(toy, tmp_path):
    """A writer's rows through ``NaiveRewardManager`` on a real ``DataProto``: the frozen solver is
    the toy folder (the local fallback, loaded in the reward process), the scores and extras are
    ``score_sample``'s."""
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from coevolve.answers import make_grader
    from coevolve.engine import load_tokenizer
    from coevolve.verl import writer
    from coevolve.verl.parquet import RewardSpec
    from coevolve.verl.reward import compute_score
    from coevolve.world.toy.prompts import question_completion

    spec = writer.WriterSpec(
        reward={"kind": "plateau", "samples": 4},
        seed=1,
        ns="verify",
        params={"temperature": 1.0, "max_new_tokens": 16},
        prompter={"kind": "toy", "class": "coevolve.world.toy.prompts:ToyPrompter"},
        rep_tokenizer="char",
        batch_prompts=8,
        solver_path=str(toy),
        device="cpu",
    )
    path = spec.write(tmp_path / "writer_spec.json")
    tok = load_tokenizer(toy)
    answers = [question_completion("1+2"), "junk", question_completion("3*4")]
    P = 3
    R = max(len(tok(a, add_special_tokens=False)["input_ids"]) for a in answers) + 2
    pid = torch.full((3, P), tok.pad_token_id)
    rid = torch.full((3, R), tok.pad_token_id)
    mask = torch.zeros((3, P + R), dtype=torch.long)
    for i, a in enumerate(answers):
        ai = tok(a, add_special_tokens=False)["input_ids"]
        rid[i, : len(ai)] = torch.tensor(ai)
        mask[i, P : P + len(ai)] = 1
    rs = RewardSpec("writer", writer=str(path)).to_dict()
    data = DataProto.from_dict(
        tensors={"prompts": pid, "responses": rid, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["coevolve/questioner"] * 3, dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": "7"}] * 3, dtype=object),
            "extra_info": np.array([{"index": i, "step": 0, "reward": rs} for i in range(3)], dtype=object),
        },
    )
    out = NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data, return_dict=True)
    info = out["reward_extra_info"]
    assert info["well_formed"] == [1.0, 0.0, 1.0] and info["row"] == [0.0, 1.0, 2.0]
    assert info["solver_rollouts"] == [4.0, 0.0, 4.0] and info["p1"][1] == -1.0
    writer._VOTES.clear()  # scored again from scratch: the same seeds, the same votes
    with make_grader(5.0, 1) as grader:
        want = [writer.score_sample(spec, a, 0, grader) for a in answers]
    assert info["score"] == [w["score"] for w in want] and info["p1"] == [w["p1"] for w in want]
