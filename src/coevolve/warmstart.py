"""A warm-started real model for self-play: SmolLM2-135M-Instruct fine-tuned on worked arith answers.

Why: the self-evolving methods need a base whose majority vote is right clearly more often than
not on the questions its writers ask (the papers start from a capable base: 65-75 % right). The
plain SmolLM2 build is right on 0.30 of the ``arith`` benchmark, so its pseudo-labels are mostly
wrong. A short supervised fine-tune (our choice, stated as one: the papers do not warm-start)
teaches it one written procedure per operation (``coevolve.world.arith_steps``) over the forms a
writer may write, and the methods then start from there.

``build_warm_start`` runs TRL's ``SFTTrainer`` on prompt/completion pairs: the prompt is exactly
the solver prompt a run and ``coevolve eval`` render (the papers' solver system text, no example
turns, the model's chat template), the completion the worked answer plus ``<|im_end|>``; loss on
the completion only. No training question is a held-out question of the ``arith`` or
``arith_ladder`` benchmarks, in any writing (the expressions are compared, not the texts). The
folder records its recipe (``warm_start.json``: every setting, the data's make-up, the time and
the loss) and its training set (``warm_start_data.jsonl``), and carries ``coevolve.json`` so
``coevolve eval`` prompts it as it was trained (arith world, chat template, no example turns).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator

from coevolve.config.presets import find_preset
from coevolve.errors import ConfigError, ModelLoadError
from coevolve.models import MARKER, default_cache_dir, ensure_smollm2, resolve_model_path
from coevolve.prompts.chat import ChatPrompter
from coevolve.prompts.spec import PromptsConfig
from coevolve.schema import Strict
from coevolve.world import CHECKPOINT_META, CHECKPOINT_META_FORMAT
from coevolve.world.arith import heldout_expressions, make_problem, oracle, read_expression
from coevolve.world.arith_steps import worked_answer

WARM_START_NAME = "smollm2-135m-arith"
"""Cache folder of ``coevolve model smollm2-arith`` (``model.path=smollm2-arith``)."""
RECIPE_FILE = "warm_start.json"
DATA_FILE = "warm_start_data.jsonl"


class WarmStartConfig(Strict):
    """Every choice of the warm start (all ours: the papers do not warm-start). Defaults from a
    measured probe: fp32, 150 steps of 16, lr 1e-4 with warm-up and linear decay."""

    base: str = Field("smollm2", description="The model fine-tuned: a folder or built-in name.")
    steps: int = Field(150, ge=1, description="Optimiser steps; one pass over steps x batch_size problems.")
    batch_size: int = Field(16, ge=1, description="Problems per step.")
    lr: float = Field(1e-4, gt=0, description="Peak learning rate (AdamW).")
    warmup_steps: int = Field(20, ge=0, description="Linear warm-up steps, then linear decay to 0.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    seed: int = Field(0, description="Seed of the training problems and of the trainer.")
    levels: list[int] = Field(
        [1, 2, 3, 4, 5, 6, 7, 8],
        description="Arith levels drawn (coevolve.world.arith); L9, three-digit x two-digit, is left "
        "untrained as the ladder's top rung.",
    )
    variant_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of questions rewritten in another form a writer may use (* or x for ×, / for ÷, "
        "words, another phrasing).",
    )
    drift_share: float = Field(
        0.15, ge=0, le=1, description="Share of problems of forms writers drift to outside the levels (drift_forms)."
    )
    drift_forms: list[str] = Field(
        ["negative", "three_factors", "sum_of_products", "three_by_one"],
        min_length=1,
        description="The drift forms drawn (uniformly), by name: negative (a - b < 0), three_factors, "
        "sum_of_products (a × b ± c × d), three_by_one (three-digit × one-digit), three_products "
        "(a × b ± c × d ± e × f), hundreds_chain (three-digit chains a ± b ± c).",
    )

    @field_validator("drift_forms")
    @classmethod
    def _known_forms(cls, forms: list[str]) -> list[str]:
        unknown = [f for f in forms if f not in DRIFT_FORMS]
        if unknown:
            raise ValueError(f"unknown drift form(s) {unknown}; known: {sorted(DRIFT_FORMS)}")
        return forms

    writer_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of training rows that teach the writer role: the writer_presets' questioner and "
        "challenger prompts, rendered as a run renders them, answered by one <question> of a training form "
        "(the questioner's of its anchor's form). 0 trains the solver role only. Measured at 0.2 with "
        "batch_order=group_by_length: the writers fell into long product chains (docs/real-models.md).",
    )
    writer_presets: list[str] = Field(
        ["smollm2_arith/d2evo", "smollm2_arith/diagevo"],
        description="Presets whose prompts.questioner / prompts.challenger the writer rows render (each "
        "preset's own writer prompt: a questioner for d2evo, a challenger for diagevo).",
    )
    batch_order: Literal["random", "group_by_length"] = Field(
        "random",
        description="How rows meet in a batch: random, or rows of like length together (the trainer's "
        "length-grouped sampler; writer rows, with their example turns, are 2-3x a solver row's length "
        "and would pad nearly every random batch to theirs). Measured: group_by_length costs the solver "
        "0.17 on arith_ladder (0.569 -> 0.404, docs/real-models.md).",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in the backward pass (TRL's default: on). Off: the same gradients "
        "without a second forward pass, at more memory (SmolLM2-135M, batch 16 with writer rows: 17 GB peak RSS).",
    )
    max_length: int = Field(
        512, ge=32, description="Longest prompt + answer in tokens; a longer row stops the build (none is cut)."
    )
    train_dtype: str = Field("float32", description="Training precision (fp32: bf16 AdamW updates stall).")
    save_dtype: str = Field("bfloat16", description="Dtype of the saved folder (the SmolLM2 presets' model.dtype).")
    checkpoint_every: int = Field(50, ge=1, description="Steps between resumable trainer checkpoints.")


_PHRASES = ("What is {e}?", "Calculate {e}.", "Compute {e}.", "What is the value of {e}?", "Find {e}.", "{e} = ?")
_WORDS = {"+": ("plus",), "-": ("minus",), "×": ("times", "multiplied by"), "÷": ("divided by",)}


def _rewrite(question: str, rng: random.Random) -> str:
    """The same expression in another writing: symbols, words, or another phrasing."""
    expr = question.removeprefix("What is ").removesuffix("?")
    style = rng.choice(("symbol", "word", "phrase"))
    if style == "symbol":
        expr = expr.replace("×", rng.choice(("*", "x", "×"))).replace("÷", rng.choice(("/", "÷")))
    elif style == "word":
        expr = " ".join(rng.choice(_WORDS[t]) if t in _WORDS else t for t in expr.split(" "))
    return rng.choice(_PHRASES).format(e=expr)


def _negative(rng: random.Random) -> str:
    a, b = sorted(rng.sample(range(1, 100), 2))
    return f"{a} - {b}"


def _sum_of_products(rng: random.Random) -> str:
    a, b, c, d = (rng.randint(2, 12) for _ in range(4))
    return f"{a} × {b} {rng.choice('+-')} {c} × {d}"


def _three_products(rng: random.Random) -> str:
    """a × b ± c × d ± e × f, a round or two-digit factor by a one-digit one (as writers write them)."""
    terms = [f"{rng.choice((rng.randint(2, 20), 10 * rng.randint(1, 10)))} × {rng.randint(2, 9)}" for _ in range(3)]
    return f"{terms[0]} {rng.choice('+-')} {terms[1]} {rng.choice('+-')} {terms[2]}"


def _hundreds_chain(rng: random.Random) -> str:
    """a ± b ± c with a three-digit first term, round or not."""
    a = rng.choice((rng.randint(100, 999), 100 * rng.randint(1, 9)))
    b, c = (rng.choice((rng.randint(10, 999), 10 * rng.randint(1, 30))) for _ in range(2))
    return f"{a} {rng.choice('+-')} {b} {rng.choice('+-')} {c}"


DRIFT_FORMS: dict[str, Callable[[random.Random], str]] = {
    "negative": _negative,
    "three_factors": lambda rng: f"{rng.randint(2, 20)} × {rng.randint(2, 9)} × {rng.randint(2, 9)}",
    "sum_of_products": _sum_of_products,
    "three_by_one": lambda rng: f"{rng.randint(100, 999)} × {rng.randint(2, 9)}",
    "three_products": _three_products,
    "hundreds_chain": _hundreds_chain,
}
"""Forms writers drift to outside the world's levels (seen in the presets' writers' questions), by name."""


CAUSES: dict[str, tuple[str, ...]] = {
    "+": ("forgets to carry a ten into the next column", "adds the tens digits wrongly"),
    "-": ("borrows from the wrong column", "takes the smaller digit from the larger one in every column"),
    "×": ("drops the carry when adding the partial products", "multiplies only the tens digit"),
    "÷": ("misplaces the tens digit of the quotient", "stops before the remainder is divided"),
}
"""Error causes a targeted or stitched challenger row names, by the operation of the question it
is answered with (ours, in the wording of the diagevo preset's diagnoser examples)."""

WRITER_ROLES = ("questioner", "challenger")
CHALLENGER_KINDS = ("free", "targeted", "stitched")


def _form_question(rng: random.Random, form: str) -> str:
    """A fresh question of a training form (``L3`` or a drift form's name), as writers write it."""
    if form.startswith("L"):
        return make_problem(rng, int(form[1:])).question
    return f"What is {DRIFT_FORMS[form](rng)}?"


def _ops(question: str) -> list[str]:
    """The operations a question holds, in ``CAUSES`` order."""
    return [op for op in CAUSES if f" {op} " in question]


def _draw_form(rng: random.Random, cfg: WarmStartConfig) -> str:
    if rng.random() < cfg.drift_share:
        return rng.choice(cfg.drift_forms)
    return f"L{rng.choice(cfg.levels)}"


def _writer_row(rng: random.Random, cfg: WarmStartConfig) -> dict[str, Any] | None:
    """One writer turn: the request (a questioner's anchor, or a challenger's kind and causes) and the
    question that answers it; None when the drawn question cannot answer the drawn request."""
    role, form = rng.choice(WRITER_ROLES), _draw_form(rng, cfg)
    question = _form_question(rng, form)
    row: dict[str, Any] = {"role": role, "question": question, "form": form, "answer": oracle(question)}
    if role == "questioner":  # a new question of its anchor's form; difficulty as a run measures it at 8 samples
        anchor = _form_question(rng, form)
        if _ops(anchor) != _ops(question):
            return None  # "like this one": the anchor's operations too
        p = rng.choice((3, 4, 5, 6)) / 8  # the preset's band, 0.4-0.8
        return row | {"anchor": anchor, "anchor_answer": oracle(anchor), "difficulty": (1 - p) * 100.0}
    ops = _ops(question)
    kind = rng.choice(CHALLENGER_KINDS)
    if kind == "free":
        return row | {"kind": kind, "causes": []}
    if kind == "targeted":
        return row | {"kind": kind, "causes": [rng.choice(CAUSES[rng.choice(ops)])]}
    if len(ops) < 2:
        return None
    first, second = rng.sample(ops, 2)
    return row | {"kind": kind, "causes": [rng.choice(CAUSES[first]), rng.choice(CAUSES[second])]}


def _solver_row(rng: random.Random, cfg: WarmStartConfig) -> dict[str, Any]:
    form = _draw_form(rng, cfg)
    question = _form_question(rng, form)
    if rng.random() < cfg.variant_share:
        question = _rewrite(question, rng)
    return {"question": question, "form": form, "answer": oracle(question), "worked": worked_answer(question)}


def training_problems(cfg: WarmStartConfig) -> list[dict[str, Any]]:
    """``steps x batch_size`` distinct rows, none a held-out question: solver rows (a question and its
    worked answer) and, a ``writer_share`` of them, writer rows (``role``: a writer's request and the
    question that answers it). A row without ``role`` is a solver row."""
    rng, banned = random.Random(cfg.seed), heldout_expressions()
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    need, tries = cfg.steps * cfg.batch_size, 0
    while len(out) < need:
        tries += 1
        if tries > 50 * need:  # the levels hold fewer distinct problems than the steps need
            raise ConfigError(
                f"warm start: levels {cfg.levels} hold fewer than {need} distinct problems outside the held-out "
                f"sets (found {len(out)}): fewer steps x batch_size, or more levels"
            )
        # the draw for the role only when writers are trained: the solver-only recipe's draws stay as built
        writer = cfg.writer_share > 0 and rng.random() < cfg.writer_share
        row = _writer_row(rng, cfg) if writer else _solver_row(rng, cfg)
        if row is None:
            continue
        expr = read_expression(row["question"])
        anchor = read_expression(row.get("anchor", row["question"]))
        if expr is None or row["answer"] is None or {expr, anchor} & banned or expr in seen:
            continue
        seen.add(expr)
        out.append(row)
    return out


def _writer_prompter(cfg: WarmStartConfig, tok: Any) -> ChatPrompter:
    """The questioner prompt of the first d2evo preset and the challenger prompt of the first diagevo
    preset in ``cfg.writer_presets``, rendered with the chat template as their runs render them."""
    found: dict[str, Any] = {}
    for name in cfg.writer_presets:
        data = yaml.safe_load(find_preset(name, real=True).read_text()) or {}
        role = {"d2evo": "questioner", "diagevo": "challenger"}.get(data.get("recipe", ""))
        if role and role not in found and role in (data.get("prompts") or {}):
            found[role] = data["prompts"][role]
    missing = [r for r in WRITER_ROLES if r not in found]
    if missing:
        raise ConfigError(
            f"warm start: writer_presets {cfg.writer_presets} give no prompts.{'/'.join(missing)} "
            "(a d2evo preset gives the questioner's, a diagevo preset the challenger's)"
        )
    return ChatPrompter(tok, use_chat_template=True, prompts=PromptsConfig.model_validate(found))


def _rows(
    problems: list[dict[str, Any]], solver: ChatPrompter, writer: ChatPrompter | None, tok: Any
) -> list[dict[str, str]]:
    """Prompt / completion pairs: a solver row's worked answer, a writer row's ``<question>`` block."""
    rows = []
    for p in problems:
        role = p.get("role", "solver")
        if role == "solver":
            rows.append({"prompt": solver.solver(p["question"]), "completion": p["worked"] + tok.eos_token})
            continue
        assert writer is not None
        if role == "questioner":
            prompt = writer.questioner(p["anchor"], p["anchor_answer"], p["difficulty"])
        else:
            prompt = writer.challenger(p["causes"])
        rows.append({"prompt": prompt, "completion": f"<question>{p['question']}</question>" + tok.eos_token})
    return rows


def _check_lengths(rows: list[dict[str, str]], tok: Any, max_length: int) -> None:
    """Stop before training when a row is longer than ``max_length``: the trainer would cut its answer."""
    lengths = [len(tok(r["prompt"] + r["completion"], add_special_tokens=False)["input_ids"]) for r in rows]
    longest = max(range(len(rows)), key=lengths.__getitem__)
    if lengths[longest] > max_length:
        raise ConfigError(
            f"warm start: row {longest} is {lengths[longest]} tokens, over max_length={max_length} "
            f"(the trainer would cut its answer): raise max_length"
        )


def _meta(prompts: Any) -> dict[str, Any]:
    return {
        "format": CHECKPOINT_META_FORMAT,
        "world": "arith",
        "chat_template": True,
        "enable_thinking": None,
        "prompts": prompts.model_dump(mode="json"),
        "role": "solver",
        "recipe": "warm_start",
    }


def _trainer(cfg: WarmStartConfig, model: Any, tok: Any, rows: list[dict[str, str]], work: Path) -> Any:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    # transformers 5.x renamed the switch (the old name warns); earlier versions know only the old one
    names = {f.name for f in dataclasses.fields(SFTConfig)}
    ckpt = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    args = SFTConfig(
        **{ckpt: cfg.gradient_checkpointing},
        output_dir=str(work),
        max_steps=cfg.steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        lr_scheduler_type="linear",
        warmup_steps=cfg.warmup_steps,
        max_grad_norm=cfg.max_grad_norm,
        weight_decay=cfg.weight_decay,
        seed=cfg.seed,
        data_seed=cfg.seed,
        completion_only_loss=True,  # loss on the worked answer only, not on the prompt
        max_length=cfg.max_length,
        train_sampling_strategy=cfg.batch_order,
        logging_steps=min(10, cfg.steps),
        save_strategy="steps",
        save_steps=cfg.checkpoint_every,
        save_total_limit=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)


def _recipe(
    cfg: WarmStartConfig, base: str, problems: list[dict[str, Any]], log: list[dict], seconds: float, resumed: bool
) -> dict[str, Any]:
    """``warm_start.json``: every setting, the data's make-up, the time and the loss curve."""
    import trl

    losses = [{"step": r["step"], "loss": r["loss"]} for r in log if "loss" in r]
    return {
        "config": cfg.model_dump(mode="json"),
        "base": base,
        "trainer": f"trl {trl.__version__} SFTTrainer (prompt/completion, completion-only loss)",
        "problems": len(problems),
        "forms": dict(sorted(Counter(p["form"] for p in problems).items())),
        "roles": dict(sorted(Counter(p.get("role", "solver") for p in problems).items())),
        "heldout_excluded": "arith and arith_ladder benchmarks, by expression",
        "seconds": round(seconds, 1),
        "resumed": resumed,
        "loss_first": losses[0]["loss"] if losses else None,
        "loss_last": losses[-1]["loss"] if losses else None,
        "loss_log": losses,
    }


def build_warm_start(out: Path, cfg: WarmStartConfig | None = None, say: Callable[[str], None] = print) -> Path:
    """Fine-tune ``cfg.base`` on worked arith answers into the folder ``out`` (module doc).

    Resumable: the trainer checkpoints every ``cfg.checkpoint_every`` steps into a folder beside
    ``out`` and a rerun with the same settings resumes from the last one."""
    try:
        import torch
        import trl  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.trainer_utils import get_last_checkpoint
    except ImportError as e:
        raise ModelLoadError(f"the warm start needs the 'trl' extra (pip install 'coevolve[trl]'): {e}") from e

    cfg = cfg or WarmStartConfig()
    out = Path(out)
    base = str(resolve_model_path(cfg.base))
    ensure_model(base, say)
    tok = AutoTokenizer.from_pretrained(base)
    prompts = PromptsConfig()  # the papers' solver system text, no example turns
    prompter = ChatPrompter(tok, use_chat_template=True, prompts=prompts)
    problems = training_problems(cfg)
    rows = _rows(problems, prompter, _writer_prompter(cfg, tok) if cfg.writer_share > 0 else None, tok)
    _check_lengths(rows, tok, cfg.max_length)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, cfg.train_dtype))
    work = out.with_name(f".{out.name}.train")
    last = get_last_checkpoint(str(work)) if work.is_dir() else None
    say(f"warm start: {cfg.steps} steps x {cfg.batch_size} of {base}" + (f", resuming from {last}" if last else ""))
    start = time.monotonic()
    trainer = _trainer(cfg, model, tok, rows, work)
    trainer.train(resume_from_checkpoint=last)
    seconds = time.monotonic() - start
    out.mkdir(parents=True, exist_ok=True)
    trained = trainer.model.to(getattr(torch, cfg.save_dtype))
    trained.generation_config.eos_token_id = model.generation_config.eos_token_id
    trained.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    with open(out / DATA_FILE, "w") as f:
        f.writelines(json.dumps(p) + "\n" for p in problems)
    recipe = _recipe(cfg, base, problems, trainer.state.log_history, seconds, last is not None)
    (out / RECIPE_FILE).write_text(json.dumps(recipe, indent=2))
    (out / CHECKPOINT_META).write_text(json.dumps(_meta(prompts), indent=2))
    (out / MARKER).write_text(
        json.dumps({"model": "SmolLM2-135M-Instruct warm-started on arith", "recipe": RECIPE_FILE})
    )
    shutil.rmtree(work, ignore_errors=True)
    say(f"warm start: {seconds:.0f} s, loss {recipe['loss_first']} -> {recipe['loss_last']}")
    return out


def ensure_model(path: str, say: Callable[[str], None] = print) -> None:
    """Build a built-in model's cache folder (``coevolve.models.BUILTIN_MODELS``) when ``path`` is
    one and it is missing: the SmolLM2 build, or its warm start (which builds on it)."""
    p = Path(path)
    if p.parent != default_cache_dir() or (p / MARKER).is_file():
        return
    if p.name == "smollm2-135m-instruct":
        ensure_smollm2(p.parent, say)
    elif p.name == WARM_START_NAME:
        ensure_warm_start(p.parent, say)


def ensure_warm_start(cache_dir: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """The cached warm start (``smollm2-arith``), built once with the default recipe, under a lock."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / WARM_START_NAME
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{WARM_START_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / MARKER).is_file():
            return target
        say(f"building the warm start {WARM_START_NAME} into {target} (once)")
        staging = root / f".{WARM_START_NAME}.tmp"  # fixed name: a killed build resumes from its checkpoints
        build_warm_start(staging, say=say)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


__all__ = ["WarmStartConfig", "build_warm_start", "ensure_model", "ensure_warm_start", "training_problems"]
