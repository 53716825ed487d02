"""A stand-in for verl's ``main_ppo`` and ``model_merger`` (the default lane has no verl).

``python verl_standin.py main k=v ...`` does what coevolve relies on from ``main_ppo``: reads the
overrides and the parquet, "generates" ``rollout.n`` completions per row (alternately the right
boxed answer with a think block and a wrong bare one, so groups have reward variance; for a
writer's rows alternately a toy ``<question>`` block and a malformed text), scores
each through the reward module named by ``reward.custom_reward_function.path/name`` one sample
per call (as verl's ``NaiveRewardManager``), and writes verl's outputs: ``<rollout_data_dir>/
<step>.jsonl`` dumps, file-logger metrics at ``$VERL_FILE_LOGGER_PATH``, and the checkpoint
layout ``<default_local_dir>/global_step_K/actor/{model_world_size_1_rank_0.pt, huggingface/}``
plus ``latest_checkpointed_iteration.txt``. "Training" adds ``DELTA`` to every weight, so the
caller can tell the merged weights came back.

``python verl_standin.py merge --backend fsdp --local_dir D --target_dir T`` turns that
checkpoint into an HF folder, as ``verl.model_merger`` does.

``$STANDIN_FAIL=1`` makes ``main`` exit with status 3 after writing one dump (a crashed trainer).
``$STANDIN_HANG`` names a file: ``main`` writes ``{"pid": ..., "grandchild": ...}`` there and then
waits for ten minutes (a trainer that is still working); with ``$STANDIN_GRANDCHILD=1`` it first
starts a child of its own that waits too (as verl's Ray workers or vLLM's engine process would).
``$STANDIN_ARGS`` names a file that receives the override list (for assertions).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

DELTA = 1e-3


def _overrides(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        k, _, v = a.partition("=")
        out[k.lstrip("+")] = v
    return out


def hang(where: Path) -> None:
    import subprocess
    import time

    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    grandchild = subprocess.Popen(sleeper).pid if os.environ.get("STANDIN_GRANDCHILD") == "1" else None
    tmp = where.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "grandchild": grandchild}))
    tmp.replace(where)
    time.sleep(600)


def main(args: list[str]) -> int:
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM

    if os.environ.get("STANDIN_HANG"):
        hang(Path(os.environ["STANDIN_HANG"]))
    if os.environ.get("STANDIN_ARGS"):
        Path(os.environ["STANDIN_ARGS"]).write_text(json.dumps(args))
    ov = _overrides(args)
    rows = pq.read_table(ov["data.train_files"]).to_pylist()
    spec = importlib.util.spec_from_file_location("custom_reward", ov["reward.custom_reward_function.path"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    score = getattr(mod, ov["reward.custom_reward_function.name"])
    bs, n, steps = (
        int(ov["data.train_batch_size"]),
        int(ov["actor_rollout_ref.rollout.n"]),
        int(ov["trainer.total_training_steps"]),
    )
    dumps = Path(ov["trainer.rollout_data_dir"])
    dumps.mkdir(parents=True, exist_ok=True)
    metrics = open(os.environ["VERL_FILE_LOGGER_PATH"], "w")
    for step in range(1, steps + 1):
        lines = []
        for row in rows[(step - 1) * bs : step * bs]:
            gt = row["reward_model"]["ground_truth"]
            writer = row["extra_info"]["reward"]["kind"] == "writer"
            for i in range(n):
                if writer:
                    idx = row["extra_info"]["index"]
                    text = f"<question>{idx % 9 + 1}+{i // 2 % 9 + 1}</question>" if i % 2 == 0 else "no question"
                else:
                    text = f"<think>ok</think>\\boxed{{{gt}}}" if i % 2 == 0 else "\\boxed{-1}"
                res = score(row["data_source"], text, gt, extra_info=row["extra_info"])
                res = res if isinstance(res, dict) else {"score": res}
                lines.append(
                    json.dumps(
                        {
                            "input": row["prompt"][0]["content"],
                            "output": text,
                            "gts": gt,
                            "score": res["score"],
                            "step": step,
                            **{k: v for k, v in res.items() if k != "score"},
                        }
                    )
                )
        (dumps / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
        metrics.write(
            json.dumps(
                {
                    "step": step,
                    "data": {
                        "actor/pg_loss": 0.5,
                        "actor/grad_norm": 1.5,
                        "timing_s/gen": 0.25,
                        "critic/score/mean": 0.0,
                    },
                }
            )
            + "\n"
        )
        metrics.flush()
        if os.environ.get("STANDIN_FAIL") == "1":
            print("stand-in: simulated crash", file=sys.stderr)
            return 3
    model = AutoModelForCausalLM.from_pretrained(ov["actor_rollout_ref.model.path"])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(DELTA)
    root = Path(ov["trainer.default_local_dir"])
    actor = root / f"global_step_{steps}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    src = Path(ov["actor_rollout_ref.model.path"])
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors"):
            shutil.copy(f, actor / "huggingface" / f.name)
    (root / "latest_checkpointed_iteration.txt").write_text(str(steps))
    return 0


def merge(args: list[str]) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kv = dict(zip(args[1::2], args[2::2]))
    assert args[0] == "merge" and kv["--backend"] == "fsdp", args
    local, target = Path(kv["--local_dir"]), Path(kv["--target_dir"])
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(local / "huggingface"))
    model.load_state_dict(torch.load(local / "model_world_size_1_rank_0.pt", weights_only=True))
    model.save_pretrained(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[2:]) if sys.argv[1] == "main" else merge(sys.argv[1:]))
