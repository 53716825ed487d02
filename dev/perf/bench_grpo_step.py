"""Solver GRPO step time: coevolve (HFSampler + Learner) vs TRL ``GRPOTrainer``, same run.

Setting (the toy-world prototype's GRPO step): 16 prompts x 8 samples, max_new_tokens 48, T=1, top_k=0,
lr 3e-5, beta 0, eps 0.2/0.28, token-mean (TRL loss_type="dapo"), on the toy base model, fresh
arithmetic problems each step, reward = exact match of the last ``\\boxed{}`` with the oracle.
Both trainers start from the same weights and see the same problem pool. Prints generation /
learner / total seconds per step (mean over steps after the first) and rollout tokens/s.

Usage: ``PYTHONPATH=src python dev/perf/bench_grpo_step.py [--steps 10] [--threads 1] [--no-trl]``
"""

from __future__ import annotations

import argparse
import copy
import random
import re
import statistics
import tempfile
import time
from typing import Any

import torch

from coevolve.engine import HFSampler, load_model
from coevolve.rl import Learner, LearnerConfig, RolloutGroup
from coevolve.types import SamplingParams

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def reward(text: str, answer: str) -> float:
    """1 when the last ``\\boxed{...}`` equals the oracle answer (the toy answers are integers).

    ``answer == ""`` marks the untrained fallback model, which never answers correctly: it gets
    the prototype's sanity reward "completion shorter than 20 characters" instead, so that groups
    have reward variance and the learner does real updates."""
    if answer == "":
        return 1.0 if len(text) < 20 else 0.0
    found = BOXED.findall(text)
    return 1.0 if found and found[-1].strip() == answer else 0.0


def load_world(steps_base: int, fresh: bool) -> tuple[Any, Any, Any, str]:
    """(model, tokenizer, task sampler, description). Toy base when available, else a fresh
    tiny Qwen3 of the same shape (untrained: rewards will be ~0, timing still meaningful)."""
    try:
        from coevolve.world.toy import ToyPrompter, ensure_base, sample_tasks

        if fresh:
            raise RuntimeError("--fresh given")

        path = ensure_base(steps=steps_base)
        model, tok = load_model(path, device="cpu", dtype="fp32")
        prompter = ToyPrompter()

        def tasks(rng: random.Random, n: int) -> list[tuple[str, str]]:
            return [(prompter.solver(t.question), str(t.answer)) for t in sample_tasks(rng, n)]

        return model, tok, tasks, f"toy base {path}"
    except Exception as e:  # noqa: BLE001 - a benchmark falls back and says so
        from coevolve.world.toy import ToyPrompter, build_model, build_tokenizer, sample_tasks

        tok = build_tokenizer()
        torch.manual_seed(0)
        model = build_model(len(tok))
        prompter = ToyPrompter()

        def tasks(rng: random.Random, n: int) -> list[tuple[str, str]]:
            return [(prompter.solver(t.question), "") for t in sample_tasks(rng, n)]

        return (
            model,
            tok,
            tasks,
            f"FRESHLY INITIALISED tiny Qwen3 (toy base unavailable: {e}); reward = 'completion < 20 chars'",
        )


def bench_coevolve(model: Any, tok: Any, data: list[list[tuple[str, str]]], G: int, max_new: int) -> dict:
    sampler = HFSampler(model, tok, max_batch=256)
    learner = Learner(model, LearnerConfig(lr=3e-5, micro_batch_size=len(data[0]) * G))
    gen_t, learn_t, toks, rew = [], [], [], []
    for step, batch in enumerate(data):
        prompts = [p for p, _ in batch]
        t0 = time.perf_counter()
        outs = sampler.sample(
            prompts, G, SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new, seed=step)
        )
        t1 = time.perf_counter()
        groups = [
            RolloutGroup(o[0].prompt_ids, [c.token_ids for c in o], [reward(c.text, a) for c in o])
            for o, (_, a) in zip(outs, batch)
        ]
        m = learner.step(groups)
        t2 = time.perf_counter()
        gen_t.append(t1 - t0)
        learn_t.append(t2 - t1)
        toks.append(sum(len(c.token_ids) for o in outs for c in o))
        rew.append(m["reward_mean"])
    return {"gen": gen_t, "learn": learn_t, "tokens": toks, "reward": rew}


def bench_trl(model: Any, tok: Any, data: list[list[tuple[str, str]]], G: int, max_new: int) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": p, "answer": a} for batch in data for p, a in batch]

    def acc(prompts: list[str], completions: list[str], answer: list[str], **kw: Any) -> list[float]:
        return [reward(c, a) for c, a in zip(completions, answer)]

    times: list[float] = []
    rewards: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=len(data[0]) * G,
            num_generations=G,
            max_completion_length=max_new,
            learning_rate=3e-5,
            lr_scheduler_type="constant",
            bf16=False,
            gradient_checkpointing=False,
            use_cpu=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            beta=0.0,
            loss_type="dapo",
            epsilon=0.2,
            epsilon_high=0.28,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            max_steps=len(data),
            seed=0,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[acc],
            args=cfg,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            callbacks=[Timer()],
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return {"step": times, "reward": rewards}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--G", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--fresh", action="store_true", help="skip the toy base; use a fresh tiny Qwen3")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model, tok, tasks, desc = load_world(args.base_steps, args.fresh)
    print(
        f"model: {desc}; {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M params; "
        f"torch threads {torch.get_num_threads()}"
    )
    rng = random.Random(0)
    data = [tasks(rng, args.prompts) for _ in range(args.steps)]
    trl_model = copy.deepcopy(model)

    r = bench_coevolve(model, tok, data, args.G, args.max_new)
    k = slice(1, None) if args.steps > 1 else slice(None)
    g, lrn = statistics.mean(r["gen"][k]), statistics.mean(r["learn"][k])
    tok_s = sum(r["tokens"][k]) / sum(r["gen"][k])
    print(
        f"coevolve  {args.prompts}x{args.G}, max_new {args.max_new}, {args.steps} steps "
        f"(first step {r['gen'][0] + r['learn'][0]:.3f} s, excluded):"
    )
    print(
        f"  generation {g:.3f} s | learner {lrn:.3f} s | total {g + lrn:.3f} s/step | "
        f"rollout {tok_s:,.0f} tokens/s (completion tokens up to EOS) | reward mean "
        f"{statistics.mean(r['reward']):.3f}"
    )
    if not args.no_trl:
        t = bench_trl(trl_model, tok, data, args.G, args.max_new)
        st = t["step"][k] if len(t["step"]) > 1 else t["step"]
        print(
            f"TRL GRPOTrainer (same model/batch/data), {len(t['step'])} steps "
            f"(first step {t['step'][0]:.3f} s, excluded):"
        )
        print(
            f"  total {statistics.mean(st):.3f} s/step (generation+reward+update) | reward mean "
            f"{statistics.mean(t['reward']) if t['reward'] else float('nan'):.3f}"
        )


if __name__ == "__main__":
    main()
