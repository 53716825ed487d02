"""verl's outputs of a phase back into coevolve's artefacts.

verl dumps every step's rollouts (``trainer.rollout_data_dir``) as ``<global_step>.jsonl``,
global steps counted from 1, one line per sample::

    {"input": <prompt text>, "output": <completion text>, "gts": <label>, "score": <reward>,
     "step": <global_step>, <every key of compute_score's dict, one value per sample>}

``row`` (from ``coevolve.verl.reward``) names the parquet row a sample answered, so the
samples regroup into the phase's prompts in order. The file logger writes one
``{"step": s, "data": {metric: value}}`` line per step; ``VERL_METRICS`` maps the metrics
that have a coevolve counterpart onto the names ``loop.grpo_train`` logs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coevolve.errors import CoevolveError
from coevolve.rl.grpo import group_advantages
from coevolve.types import Completion
from coevolve.verl.parquet import VerlRow

VERL_METRICS: dict[str, str] = {
    "actor/pg_loss": "loss",
    "actor/grad_norm": "grad_norm",
    "actor/pg_clipfrac": "clip_frac",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/lr": "lr",
    "timing_s/gen": "gen_seconds",
    "timing_s/update_actor": "learn_seconds",
}
"""verl metric -> the ``grpo_train`` metric it stands for (logged as ``<ns>/<name>``)."""

REWARD_EXTRAS = ("acc", "format", "match", "well_formed", "p1", "p2", "in_band", "label", "solver_rollouts")
"""``compute_score`` extras read back: the solvers' (averaged per step: ``acc_mean``,
``format_mean``, ``match_rate``) and the writers' (``verl.writer.WRITER_EXTRAS``)."""


class VerlOutputError(CoevolveError):
    """verl's outputs of a phase are missing or do not match the rows it was given."""


@dataclass
class StepRollouts:
    """One step's rollouts regrouped by prompt: ``rows[i]`` got ``texts[i]`` scored ``scores[i]``
    (G each), with the reward extras of every sample."""

    step: int  # 0-based, as grpo_train counts
    rows: list[VerlRow]
    texts: list[list[str]]
    scores: list[list[float]]
    extras: list[list[dict[str, Any]]]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise VerlOutputError(f"{path}:{i}: not JSON ({e.msg})") from None
    return out


def step_rollouts(dump_dir: Path, rows: Sequence[VerlRow], steps: int, group_size: int) -> list[StepRollouts]:
    """Every step's dump regrouped by parquet row; checks that each row got ``group_size`` samples."""
    by_step: dict[int, list[VerlRow]] = {}
    for r in rows:
        by_step.setdefault(r.step, []).append(r)
    out = []
    for step in range(steps):
        path = dump_dir / f"{step + 1}.jsonl"
        if not path.is_file():
            raise VerlOutputError(f"verl wrote no rollout dump {path} for step {step + 1} of {steps}")
        got: dict[int, list[dict[str, Any]]] = {}
        for i, e in enumerate(read_jsonl(path), 1):
            if "row" not in e:
                raise VerlOutputError(f"{path}:{i}: sample has no 'row' (was it scored by coevolve.verl.reward?)")
            got.setdefault(int(e["row"]), []).append(e)
        want = by_step.get(step, [])
        for r in want:
            n = len(got.get(r.index, []))
            if n != group_size:
                raise VerlOutputError(
                    f"{path}: row {r.index} (task {r.task.id}) has {n} samples, expected {group_size}"
                )
        extra_rows = sorted(set(got) - {r.index for r in want})
        if extra_rows:
            raise VerlOutputError(f"{path}: samples of rows {extra_rows[:5]} that are not step {step}'s")
        out.append(
            StepRollouts(
                step,
                want,
                [[str(e["output"]) for e in got[r.index]] for r in want],
                [[float(e["score"]) for e in got[r.index]] for r in want],
                [[{k: e[k] for k in REWARD_EXTRAS if k in e} for e in got[r.index]] for r in want],
            )
        )
    return out


def completions(sr: StepRollouts, tokenizer: Any) -> list[list[Completion]]:
    """The step's samples as ``Completion`` records, re-tokenised with the role's tokenizer
    (verl's dumps hold text only): token counts for the compute counters, text for the file."""
    out = []
    for r, texts in zip(sr.rows, sr.texts):
        p_ids = list(tokenizer(r.prompt, add_special_tokens=False)["input_ids"])
        out.append([Completion(t, list(tokenizer(t, add_special_tokens=False)["input_ids"]), p_ids) for t in texts])
    return out


def step_metrics(
    sr: StepRollouts, comps: Sequence[Sequence[Completion]], verl_metrics: dict[str, Any]
) -> dict[str, float]:
    """The step's metrics under ``grpo_train``'s names (without the namespace): reward mean/std,
    zero-variance share and completion tokens from the samples (coevolve's own definitions),
    the optimiser's figures from verl's metrics (``VERL_METRICS``)."""
    flat = [x for g in sr.scores for x in g]
    r_BG = torch.tensor(sr.scores, dtype=torch.float64)
    _, zero_B = group_advantages(r_BG) if r_BG.numel() else (None, torch.zeros(0, dtype=torch.bool))
    n_zero = int(zero_B.sum())
    lens = [len(c.token_ids) for g in comps for c in g]
    m: dict[str, float] = {
        "frac_zero_std": n_zero / max(1, len(sr.rows)),
        "reward_mean": sum(flat) / max(1, len(flat)),
        "reward_std": float(r_BG.std(unbiased=False)) if r_BG.numel() else 0.0,
        "completion_len_mean": sum(lens) / max(1, len(lens)),
        "n_groups": float(len(sr.rows)),
        "n_tokens": float(sum(len(c.token_ids) for g, z in zip(comps, zero_B.tolist()) if not z for c in g)),
        "skipped": float(n_zero == len(sr.rows)),
    }
    names = {"acc": "acc_mean", "format": "format_mean", "match": "match_rate"}
    for key, name in names.items():
        vals = [float(e[key]) for g in sr.extras for e in g if key in e]
        if vals:
            m[name] = sum(vals) / len(vals)
    for src, dst in VERL_METRICS.items():
        v = verl_metrics.get(src)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            m[dst] = float(v)
    return m


def match_records(sr: StepRollouts) -> list[dict[str, Any]]:
    """The DiagEvo solver's audit records (``recipes.diagevo.match_reward``'s form) of a step:
    each question's G responses and whether each matched the pseudo-label (the diagnosis reads
    them). The local records' ``oracle_acc`` metric has no verl counterpart."""
    return [
        {
            "id": r.task.id,
            "question": r.task.question,
            "label": r.task.answer,
            "targets": r.task.features.get("targets", []),
            "responses": texts,
            "matches": [bool(e.get("match")) for e in ex],
        }
        for r, texts, ex in zip(sr.rows, sr.texts, sr.extras)
    ]


def read_metrics(path: Path) -> dict[int, dict[str, Any]]:
    """verl's file logger: global step -> metrics ({} when the file does not exist)."""
    if not path.is_file():
        return {}
    return {int(e["step"]): dict(e.get("data") or {}) for e in read_jsonl(path) if "step" in e}


def latest_checkpoint(ckpt_dir: Path) -> tuple[int, Path]:
    """(K, ``global_step_K/actor``) named by verl's ``latest_checkpointed_iteration.txt``."""
    marker = ckpt_dir / "latest_checkpointed_iteration.txt"
    if not marker.is_file():
        raise VerlOutputError(f"verl saved no checkpoint: {marker} is missing")
    text = marker.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        raise VerlOutputError(f"{marker}: expected a step number, got {text[:40]!r}")
    actor = ckpt_dir / f"global_step_{int(text)}" / "actor"
    if not actor.is_dir():
        raise VerlOutputError(f"{marker} names step {text} but {actor} does not exist")
    return int(text), actor
