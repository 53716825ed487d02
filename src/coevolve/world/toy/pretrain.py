"""Build (and cache) the toy base model: a tiny real ``Qwen3ForCausalLM`` pretrained, on purpose
only to *partial* competence, on solver traces and on the questioner/challenger formats.

Why partial competence: GRPO only has signal when many problems have pass rates between 0.2
and 0.8; a prototype on this CPU measured that 600 steps of batch 128 give ~54% greedy / ~38%
sampled held-out accuracy with ~48% of problems in that band, while ~1500 steps saturate.
Why 50% direct answers: RL selects among behaviours already in the model; with a direct
(guessing) style next to the step-by-step style, GRPO learns to choose steps (the prototype
saw no gain at all on a single-style world).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from coevolve.errors import ConfigError, ModelLoadError
from coevolve.run import say
from coevolve.world.toy.causes import CAUSES, problem_for_causes
from coevolve.world.toy.measure import generate_texts, measure
from coevolve.world.toy.problems import LEVELS, WORLD_VERSION, Problem, heldout_questions, make_problem, random_problem
from coevolve.world.toy.prompts import (
    LEVEL_DIFFICULTY,
    challenger_prompt,
    question_completion,
    questioner_prompt,
    solver_prompt,
)
from coevolve.world.toy.tokenizer import BOS_ID, EOS_ID, PAD_ID, build_tokenizer


@dataclass(frozen=True)
class MixConfig:
    """Shares of the pretraining mix (the rest is solver traces)."""

    questioner: float = 0.15  # D2Evo anchor -> similar new problem
    challenger: float = 0.05  # DiagEvo free / focus / stitched focus (10% measured: weaker solver)
    direct: float = 0.5  # share of solver traces answered directly (no steps)
    challenger_free: float = 0.3
    challenger_stitched: float = 0.2  # (the remaining challenger share is single-cause focus)


def build_model(vocab_size: int) -> Qwen3ForCausalLM:
    """The tiny Qwen3 (hidden 128, 2 layers, 4 heads, FFN 512, tied embeddings): ~0.54 M params,
    same class and code path as Qwen3-4B-Base."""
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )
    model = Qwen3ForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    return model


# --------------------------------------------------------------------------------------------
# pretraining data


def _fresh(rng: random.Random, level: int, banned: frozenset[str], avoid: str = "") -> Problem:
    while True:
        p = random_problem(rng, level)
        if p.question not in banned and p.question != avoid:
            return p


def sample_example(rng: random.Random, mix: MixConfig, banned: frozenset[str]) -> tuple[str, str, str]:
    """One pretraining example (kind, prompt, completion-without-EOS)."""
    u = rng.random()
    if u < mix.questioner:
        level = rng.choice(LEVELS)
        anchor = _fresh(rng, level, banned)
        new = _fresh(rng, level, banned, avoid=anchor.question)
        d = min(100.0, max(0.0, LEVEL_DIFFICULTY[level] + rng.gauss(0.0, 10.0)))
        return "questioner", questioner_prompt(anchor.question, anchor.answer, d), question_completion(new.question)
    if u < mix.questioner + mix.challenger:
        v = rng.random()
        ids = list(CAUSES)
        if v < mix.challenger_free:
            causes: list[str] = []
        elif v < mix.challenger_free + mix.challenger_stitched:
            causes = rng.sample(ids, 2)
        else:
            causes = [rng.choice(ids)]
        texts = [CAUSES[c].text for c in causes]
        p = problem_for_causes(rng, causes, banned)
        return "challenger", challenger_prompt(texts), question_completion(p.question)
    p = _fresh(rng, rng.choice(LEVELS), banned)
    return "solver", solver_prompt(p.question), p.completion(direct=rng.random() < mix.direct)


def _encode(tok: PreTrainedTokenizerBase, prompt: str, completion: str) -> tuple[list[int], int]:
    p_ids = tok(prompt)["input_ids"]  # BOS added by the post-processor
    c_ids = tok(completion, add_special_tokens=False)["input_ids"] + [EOS_ID]
    return p_ids + c_ids, len(p_ids)


def _microbatches(seqs: list[tuple[list[int], int]]) -> list[list[tuple[list[int], int]]]:
    """Split a batch in two length buckets minimising padded tokens: the few long challenger
    examples (~120 chars) would otherwise pad every short solver trace (~40) to their length."""
    seqs = sorted(seqs, key=lambda s: len(s[0]))
    n = len(seqs)
    best, cut = n * len(seqs[-1][0]), n
    for k in range(1, n):
        cost = k * len(seqs[k - 1][0]) + (n - k) * len(seqs[-1][0])
        if cost < best:
            best, cut = cost, k
    return [b for b in (seqs[:cut], seqs[cut:]) if b]


def _collate(batch: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids/mask and labels with -100 on prompt and padding (completion-only loss)."""
    T = max(len(ids) for ids, _ in batch)
    ids_t = torch.full((len(batch), T), PAD_ID, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(batch), T), dtype=torch.long)  # (B, T)
    labels = torch.full((len(batch), T), -100, dtype=torch.long)  # (B, T)
    for i, (ids, n_prompt) in enumerate(batch):
        ids_t[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1
        labels[i, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
    return ids_t, mask, labels


def _backward_batch(model: Qwen3ForCausalLM, batch: list[tuple[list[int], int]]) -> float:
    """Backpropagate one pretraining batch's completion-only cross-entropy, summed over tokens
    and divided by the batch's completion tokens, micro-batch by micro-batch (``_microbatches``)
    so that the gradients add up to those of the whole batch's token mean; returns that mean.
    Only the forward and backward passes: the caller zeroes, clips and steps."""
    n_tok = sum(len(ids) - n_p for ids, n_p in batch)
    total = 0.0
    for mb in _microbatches(batch):
        ids, mask, labels = _collate(mb)
        logits = model(input_ids=ids, attention_mask=mask).logits  # (b, T, V)
        loss = (
            torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), reduction="sum"
            )
            / n_tok
        )
        loss.backward()
        total += loss.item()
    return total


def warmup_then_decay(warmup: int, steps: int) -> Callable[[int], float]:
    """The default lr factor of ``pretrain``: f(s) = min((s + 1) / warmup, max(0, (steps - s) /
    max(1, steps - warmup))), linear warm-up then linear decay to 0 at ``steps``."""
    return lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))


def _progress_bar(steps: int, desc: str) -> Any:
    from tqdm.auto import tqdm  # only when a bar is asked for: tqdm's import is not free

    return tqdm(total=steps, desc=desc, unit="step")


def pretrain(
    model: Qwen3ForCausalLM,
    tok: PreTrainedTokenizerBase,
    steps: int,
    seed: int,
    batch_size: int = 128,
    lr: float = 2e-3,
    warmup: int = 30,
    mix: MixConfig = MixConfig(),
    progress: bool = True,
    betas: tuple[float, float] = (0.9, 0.95),
    weight_decay: float = 0.0,
    example: Callable[[random.Random], tuple[str, str, str]] | None = None,
    desc: str = "toy pretrain",
    lr_factor: Callable[[int], float] | None = None,
    on_step: Callable[[int, Qwen3ForCausalLM], None] | None = None,
) -> list[float]:
    """Supervised completion-only pretraining; AdamW, linear warm-up then linear decay to 0.
    Budgeted in steps (not seconds) so the result does not depend on machine load.
    ``example(rng) -> (kind, prompt, completion)`` draws one example (default: the toy world's
    mix, ``sample_example``; the skill world passes its own). ``lr_factor(step)`` multiplies ``lr``
    (default: warm-up then linear decay to 0 at ``steps``); ``on_step(done, model)`` is called
    after every step (checkpoints of a long run). Returns the per-step loss."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    if example is None:
        banned = heldout_questions()
        example = lambda r: sample_example(r, mix, banned)  # noqa: E731
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor or warmup_then_decay(warmup, steps))
    model.train()
    losses: list[float] = []
    bar = _progress_bar(steps, desc) if progress else None
    for done in range(1, steps + 1):
        batch = [_encode(tok, *example(rng)[1:]) for _ in range(batch_size)]
        opt.zero_grad(set_to_none=True)
        total = _backward_batch(model, batch)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(total)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{total:.3f}")
        if on_step is not None:
            on_step(done, model)
    if bar is not None:
        bar.close()
    model.eval()
    return losses


# --------------------------------------------------------------------------------------------
# build + cache


def build_base(
    out_dir: Path,
    steps: int = 600,
    seed: int = 0,
    batch_size: int = 128,
    lr: float = 2e-3,
    progress: bool = True,
    *,
    eval_heldout: int = 500,
    eval_samples: int = 16,
) -> Path:
    """Pretrain a toy base from scratch and save it (model, tokenizer, generation config,
    ``toy_build.json`` with the settings, loss curve and measured figures) into ``out_dir``.

    ``torch.set_num_threads`` is left to the caller. ``eval_heldout``/``eval_samples`` shrink the
    measurement for smoke tests (``eval_samples=0`` skips sampling).
    """
    if steps < 1 or batch_size < 1 or not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"build_base: steps={steps}, batch_size={batch_size}, lr={lr} must be positive")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    torch.manual_seed(seed)
    model = build_model(len(tok))
    t0 = time.time()
    losses = pretrain(model, tok, steps, seed, batch_size=batch_size, lr=lr, progress=progress)
    train_s = time.time() - t0
    figures = measure(model, tok, n_heldout=eval_heldout, samples=eval_samples, seed=seed)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    info = {
        "world_version": WORLD_VERSION,
        "steps": steps,
        "seed": seed,
        "batch_size": batch_size,
        "lr": lr,
        **training_record(model, losses, train_s, 50),
        "figures": figures,
        "formats": _formats(),
    }
    (out_dir / "toy_build.json").write_text(json.dumps(info, indent=2))
    return out_dir


def training_record(
    model: Qwen3ForCausalLM, losses: Sequence[float], train_seconds: float, every: int
) -> dict[str, Any]:
    """What a base's build file records of its training: parameters, seconds, threads, the mean
    loss of the last 20 steps and ``loss_every_<every>``, the loss curve as means over ``every`` steps."""
    return {
        "n_params": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(train_seconds, 1),
        "threads": torch.get_num_threads(),
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        f"loss_every_{every}": [
            round(sum(losses[i : i + every]) / len(losses[i : i + every]), 4) for i in range(0, len(losses), every)
        ],
    }


def _formats() -> dict[str, str]:
    """One example of every format the base was pretrained on (recorded in ``toy_build.json``)."""
    return {
        "solver_prompt": solver_prompt("37+58"),
        "solver_completion": make_problem("37+58").completion() + "</s>",
        "direct_completion": make_problem("37+58").completion(direct=True) + "</s>",
        "questioner_prompt": questioner_prompt("37+58", "95", 60),
        "challenger_prompt": challenger_prompt([CAUSES["carry_dropped"].text]),
        "question_completion": question_completion("41+29") + "</s>",
    }


def default_cache_dir() -> Path:
    """``$COEVOLVE_CACHE/toy`` or ``~/.cache/coevolve/toy``."""
    root = os.environ.get("COEVOLVE_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "coevolve") / "toy"


def _is_built(d: Path) -> bool:
    return (d / "toy_build.json").is_file() and (d / "config.json").is_file() and (d / "tokenizer.json").is_file()


# The default base ships inside the package (world/toy/base/, see its README): copying it takes
# milliseconds where building it takes minutes, and every machine gets the same weights. The
# weights are split in 1 MB parts so no tracked file is over 2 MB; SHA256SUMS holds the hash of
# every whole file, checked before the copy.
SHIPPED_BASE = Path(__file__).parent / "base"
SHIPPED_STEPS, SHIPPED_SEED = 600, 0
SHIPPED_PART = 1 << 20


def _shipped_files(src: Path) -> dict[str, bytes]:
    """The shipped base's files by name (weight parts joined), each checked against SHA256SUMS."""
    try:
        sums = dict(line.split()[::-1] for line in (src / "SHA256SUMS").read_text().splitlines() if line.strip())
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{src / 'SHA256SUMS'}: unreadable ({e})") from e
    files = {}
    for name, want in sums.items():
        parts = sorted(src.glob(f"{name}.part*")) or [src / name]
        try:
            data = b"".join(p.read_bytes() for p in parts)
        except OSError as e:
            raise ModelLoadError(f"shipped toy base: {e}") from e
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            raise ModelLoadError(
                f"{src / name}: sha256 {got[:12]}... != {want[:12]}... in SHA256SUMS (damaged install)"
            )
        files[name] = data
    return files


def copy_shipped_base(out_dir: Path, src: Path = SHIPPED_BASE) -> Path:
    """Write the shipped base (hash-checked) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in _shipped_files(src).items():
        (out_dir / name).write_bytes(data)
    return out_dir


def ship_base(built: Path, dst: Path = SHIPPED_BASE) -> Path:
    """Store a built base as the shipped one: its files, weights in parts, and SHA256SUMS."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    lines = []
    for name in SHIPPED_FILES:
        data = (Path(built) / name).read_bytes()
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {name}")
        if len(data) > SHIPPED_PART:
            for i in range(0, len(data), SHIPPED_PART):
                (dst / f"{name}.part{i // SHIPPED_PART}").write_bytes(data[i : i + SHIPPED_PART])
        else:
            (dst / name).write_bytes(data)
    (dst / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return dst


def shipped_match(built: Path, src: Path = SHIPPED_BASE) -> str:
    """One line: whether ``built``'s weights equal the shipped base's byte for byte (sha256)."""
    sums = dict(line.split()[::-1] for line in (src / "SHA256SUMS").read_text().splitlines() if line.strip())
    got = hashlib.sha256((Path(built) / "model.safetensors").read_bytes()).hexdigest()
    same = got == sums.get("model.safetensors")
    return f"model.safetensors sha256 {got[:16]}: {'equals' if same else 'differs from'} the shipped base's"


SHIPPED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "toy_build.json",
)


def ensure_base(cache_dir: Path | None = None, steps: int = 600, seed: int = 0) -> Path:
    """Path of the cached base for (steps, seed, world version); when missing, the shipped base
    (the default steps and seed) is copied in, any other is built once (``build_cached``)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    shipped = (steps, seed) == (SHIPPED_STEPS, SHIPPED_SEED) and (SHIPPED_BASE / "SHA256SUMS").is_file()
    return build_cached(
        root / f"base-w{WORLD_VERSION}-steps{steps}-seed{seed}",
        copy_shipped_base if shipped else (lambda tmp: build_base(tmp, steps=steps, seed=seed, progress=True)),
    )


def wait_for_lock(lock: Any, target: Path) -> None:
    """Take the exclusive lock on the open file ``lock``; when another process holds it, say so
    (its pid, which it wrote there) before waiting, rather than sit silent while it builds; then
    write our own pid for the next one to name."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        say(f"waiting for process {holder}, which is building {target} (the lock {lock.name}) ...")
        fcntl.flock(lock, fcntl.LOCK_EX)
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()


def build_cached(target: Path, build: Callable[[Path], Any], built_marker: str = "toy_build.json") -> Path:
    """``target`` once it holds a built model (``built_marker``, config and tokenizer); else
    ``build(tmp)`` writes one into a temporary sibling folder that is renamed into place.

    Atomic and safe when several processes ask at once: an exclusive file lock serialises the
    builders, the model is built in a temporary folder and renamed into place, so a reader never
    sees a half-written model.
    """
    target = Path(target)
    root = target.parent

    def built(d: Path) -> bool:
        return (d / built_marker).is_file() and (d / "config.json").is_file() and (d / "tokenizer.json").is_file()

    if built(target):
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelLoadError(f"cannot create model cache folder {root}: {e}") from e
    with open(root / f".{target.name}.lock", "a+") as lock:
        wait_for_lock(lock, target)
        try:
            if built(target):
                return target
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=root))
            try:
                build(tmp)
                if target.exists():  # a broken leftover (no marker): replace it
                    shutil.rmtree(target)
                os.rename(tmp, target)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


__all__ = [
    "MixConfig",
    "build_base",
    "build_cached",
    "build_model",
    "copy_shipped_base",
    "default_cache_dir",
    "ensure_base",
    "generate_texts",
    "measure",
    "pretrain",
    "sample_example",
    "ship_base",
    "shipped_match",
]
