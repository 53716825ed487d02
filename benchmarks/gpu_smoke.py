"""GPU smoke check, one command, no downloads: does the real-model path work on CUDA, and how fast?

1. Sampler tokens/s at batch 256 (HF ``generate``; ``--engine vllm`` too where vLLM is installed)
   on random-weight Qwen3-0.6B- and Qwen3-4B-shaped models built from configs (Qwen3's vocabulary
   size, a synthetic word-level tokenizer: the weights are random, the shapes are real).
2. One learner step (bf16 weights, fp32 masters, AdamW) at 16 x 1024 and 2 x 4096 tokens: peak
   GPU memory and trained tokens/s, next to ``coevolve plan``'s estimate when the plan module is
   there.
3. One tiny round of each recipe (grpo, d2evo, diagevo) on CUDA in bf16 with the 0.6B-shaped
   model saved as an HF folder: every phase, checkpoint and eval runs (figures are meaningless:
   random weights).

Exits non-zero on any failure. Expected to take under 8 minutes on one H200 (not yet measured on
a CUDA machine).

    python benchmarks/gpu_smoke.py [--skip-recipes] [--engine hf|vllm] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

SHAPES = {  # Qwen3 configs (hidden, layers, heads, kv heads, head dim, intermediate, tied embeddings)
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=3072, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=9728, tie_word_embeddings=True),
}
VOCAB = 151936


def word_tokenizer(vocab: int = VOCAB) -> Any:
    """A word-level tokenizer over ``vocab`` synthetic tokens (``w0`` ...), EOS / pad / BOS special."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tk = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="</s>", pad_token="<pad>", bos_token="<s>",
                                  padding_side="left")
    return tok


def random_model(shape: str, dtype: torch.dtype = torch.bfloat16) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=VOCAB, max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      **SHAPES[shape])
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    model.generation_config.eos_token_id = 2
    return model


def sampler_tokens_per_s(model: Any, tok: Any, engine: str, batch: int = 256, prompt_len: int = 128,
                         new: int = 256) -> float:
    from coevolve.config.base import EngineConfig
    from coevolve.engine import make_sampler
    from coevolve.types import SamplingParams

    g = torch.Generator().manual_seed(0)
    prompts = [" ".join(f"w{int(x)}" for x in torch.randint(3, VOCAB, (prompt_len,), generator=g)) for _ in range(batch)]
    sampler = make_sampler(EngineConfig(kind=engine, max_batch=batch), model, tok)
    sampler.sample(prompts[:8], 1, SamplingParams(max_new_tokens=8, seed=0))  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = sampler.sample(prompts, 1, SamplingParams(max_new_tokens=new, seed=0))
    torch.cuda.synchronize()
    return sum(len(c.token_ids) for g_ in out for c in g_) / (time.perf_counter() - t0)


def learner_step(model: Any, rows: int, tokens: int) -> dict[str, float]:
    from coevolve.rl.learner import Learner, LearnerConfig, RolloutGroup

    learner = Learner(model, LearnerConfig(lr=1e-6, micro_batch_size=rows))
    g = torch.Generator().manual_seed(1)
    prompt = [int(x) for x in torch.randint(3, VOCAB, (64,), generator=g)]
    comps = [[int(x) for x in torch.randint(3, VOCAB, (tokens - 64,), generator=g)] for _ in range(rows)]
    groups = [RolloutGroup(prompt, comps[i : i + 2], [1.0, 0.0]) for i in range(0, rows, 2)]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    m = learner.step(groups)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = {"peak_gib": torch.cuda.max_memory_allocated() / 2**30, "tokens_per_s": rows * tokens / dt,
           "seconds": dt, "loss": float(m["loss"])}
    del learner
    torch.cuda.empty_cache()
    return out


def recipe_round(recipe: str, folder: Path, data: Path, out: Path) -> dict[str, Any]:
    from coevolve.config import load_config
    from coevolve.recipes import execute

    tiny = ["model.dtype=bfloat16", "model.device=cuda", "sampling.max_new_tokens=64", "eval.benches=[gsm8k]",
            "eval.limit=8", "eval.samples=0", "eval.max_new_tokens=64", "run.progress=false", f"model.path={folder}"]
    per = {
        "grpo": ["solver.steps=2", "solver.prompts_per_step=8", "solver.group_size=4", f"data.source={data}"],
        "d2evo": ["rounds=1", f"data.source={data}", "difficulty.pool_size=16", "difficulty.samples=4",
                  "difficulty.band.low=0.0", "difficulty.band.high=1.0", "questioner.steps=1",
                  "questioner.prompts_per_step=4", "questioner.group_size=2", "questioner.max_new_tokens=64",
                  "questioner.reward.samples=2", "buffer.generate=8", "buffer.voting.samples=2",
                  "buffer.voting.band.low=0.0", "buffer.voting.band.high=1.0", "solver.steps=1",
                  "solver.prompts_per_step=4", "solver.group_size=2", "difficulty.measure_final=false"],
        "diagevo": ["rounds=1", "challenger.steps=1", "challenger.prompts_per_step=4", "challenger.group_size=2",
                    "challenger.max_new_tokens=64", "challenger.reward.samples=2", "pool.size=8",
                    "pool.voting.samples=2", "pool.voting.filter=none", "solver.steps=1", "solver.prompts_per_step=4",
                    "solver.group_size=2", "memory.embedder=hash", "diagnoser.max_new_tokens=32"],
    }[recipe]
    t0 = time.perf_counter()
    summary = execute(load_config(recipe, None, tiny + per), out / recipe)
    return {"seconds": round(time.perf_counter() - t0, 1), "phases": len(summary["rounds"]) and list(summary["rounds"][0])[:6]}


def check(name: str, fn: Callable[[], Any], failures: list[str]) -> Any:
    try:
        res = fn()
        print(f"[ok] {name}: {json.dumps(res) if not isinstance(res, str) else res}", flush=True)
        return res
    except Exception:  # noqa: BLE001 - every failure is reported, then the script exits non-zero
        failures.append(name)
        print(f"[FAIL] {name}\n{traceback.format_exc()}", flush=True)
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--skip-recipes", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="keep the run folders here (default: a temp folder)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    failures: list[str] = []
    tok = word_tokenizer()
    for shape in SHAPES:
        model = random_model(shape)
        check(f"{shape} sampler tokens/s at batch 256 ({args.engine})",
              lambda: round(sampler_tokens_per_s(model, tok, args.engine)), failures)
        for rows, tokens in ((16, 1024), (2, 4096)):
            check(f"{shape} learner step {rows}x{tokens}", lambda: learner_step(model, rows, tokens), failures)
        del model
        torch.cuda.empty_cache()
    if not args.skip_recipes:
        root = args.out or Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
        folder = root / "qwen3-0.6b-random"
        model = random_model("qwen3-0.6b")
        model.save_pretrained(str(folder))
        tok.save_pretrained(str(folder))
        del model
        data = root / "rows.jsonl"
        data.write_text("".join(json.dumps({"question": " ".join(f"w{3 + (i * 7 + j) % 500}" for j in range(12)),
                                            "answer": str(i % 10)}) + "\n" for i in range(32)))
        for recipe in ("grpo", "d2evo", "diagevo"):
            check(f"{recipe} tiny round on CUDA (bf16)", lambda: recipe_round(recipe, folder, data, root), failures)
    print(f"{'FAILED: ' + ', '.join(failures) if failures else 'all checks passed'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
