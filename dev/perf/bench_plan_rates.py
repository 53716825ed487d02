"""The CPU rates of ``coevolve plan --device cpu`` measured at a preset's own shapes.

For a recipe config (default: the SmolLM2 grpo preset) this loads the model in the preset's
dtype, renders the solver's real prompt (system text, few-shot turns, chat template), and times
(1) one HF ``generate`` call of the preset's rows at its answer cap (every row to the cap) and
(2) one learner step of ``prompts_per_step`` groups of ``group_size`` answers with the preset's
learner settings (share_prompt included), then prints the figures in the plan's terms: prompt
tokens, ms per decode step and layer, and the learner's effective TFLOP/s counted as the plan
counts a step's work (``coevolve.plan.timing.train_flops``).

    python dev/perf/bench_plan_rates.py [-c smollm2/grpo] [--threads 2] [--answer 25]
"""

from __future__ import annotations

import argparse
import random
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", default="smollm2/grpo")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--answer", type=int, default=25, help="answer tokens per row of the learner step")
    args = ap.parse_args()
    import torch

    from coevolve.config import load_config
    from coevolve.engine import load_model
    from coevolve.models import ensure_model, resolve_model_path
    from coevolve.plan.shapes import ModelShape
    from coevolve.plan.timing import train_flops
    from coevolve.plan.work import Train
    from coevolve.rl import Learner, RolloutGroup

    torch.set_num_threads(args.threads)
    cfg = load_config("grpo", [args.config])
    path = str(resolve_model_path(cfg.model.path))
    ensure_model(path)
    model, tok = load_model(path, device="cpu", dtype=cfg.model.dtype)
    sp = cfg.prompts.solver
    msgs = [{"role": "system", "content": sp.system}] if sp.system else []
    for ex in sp.examples:
        msgs += [{"role": "user", "content": ex.user}, {"role": "assistant", "content": ex.assistant}]
    msgs.append({"role": "user", "content": sp.user.format(question="What is 47 + 38 - 12?")})
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    prompt_ids = list(tok(text, add_special_tokens=False)["input_ids"])
    P, L = len(prompt_ids), model.config.num_hidden_layers
    rows = min(cfg.engine.max_batch, cfg.solver.prompts_per_step * cfg.solver.group_size)
    cap = cfg.sampling.max_new_tokens
    print(f"model {path} ({model.dtype}, {L} layers), {args.threads} threads; solver prompt {P} tokens")
    ids = torch.tensor([prompt_ids] * rows)
    model.eval()
    with torch.no_grad():
        model.generate(ids[:2], max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id)
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=cap, min_new_tokens=cap, do_sample=True, pad_token_id=tok.pad_token_id)
        dt = time.perf_counter() - t0
    print(
        f"HF generate: {rows} rows x {cap} tokens in {dt:.1f} s = {dt / cap * 1e3:.0f} ms per decode step "
        f"= {dt / cap / L * 1e3:.2f} ms per step and layer"
    )
    rng = random.Random(0)
    vocab = model.config.vocab_size
    groups = [
        RolloutGroup(
            prompt_ids,
            [[rng.randrange(3, vocab) for _ in range(args.answer)] for _ in range(cfg.solver.group_size)],
            [float(k % 2) for k in range(cfg.solver.group_size)],
        )
        for _ in range(cfg.solver.prompts_per_step)
    ]
    learner = Learner(model, cfg.learner, tokenizer=tok)
    learner.step(groups[:1])
    t0 = time.perf_counter()
    learner.step(groups)
    dt = time.perf_counter() - t0
    shape = ModelShape.from_config(model.config.to_dict())
    t = Train(
        "solver",
        1,
        cfg.solver.prompts_per_step * cfg.solver.group_size,
        P,
        2 * args.answer,
        group=cfg.solver.group_size,
    )
    flops = train_flops(t, 1, shape, cfg.learner, False)
    print(
        f"learner step: {len(groups)} x {cfg.solver.group_size} rows, prompt {P} + answer {args.answer} "
        f"(share_prompt={cfg.learner.share_prompt}) in {dt:.1f} s = {flops / dt / 1e12:.4f} TFLOP/s as the plan counts"
    )


if __name__ == "__main__":
    main()
