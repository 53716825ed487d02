"""The toy world (see ``coevolve.world.toy``) behind the ``World`` interface."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coevolve.curriculum.buffer import dedupe, normalize_question
from coevolve.memory.diagnose import Diagnoser, TraceDiagnoser
from coevolve.memory.store import Cause
from coevolve.prompts import Prompter
from coevolve.prompts.chat import ChatPrompter
from coevolve.types import Task
from coevolve.world.facts import WORLDS
from coevolve.world.real import draw_from, pool_from
from coevolve.world.toy import (
    build_tokenizer,
    cause_by_text,
    explain_divergence,
    features,
    heldout_questions,
    heldout_tasks,
    oracle,
    sample_tasks,
    shows_cause,
)
from coevolve.world.toy.prompts import ToyPrompter

DEFAULT_POOL = 400


@functools.lru_cache(maxsize=1)
def toy_vocab() -> tuple[tuple[str, int], ...]:
    return tuple(sorted(build_tokenizer().get_vocab().items()))


class ToyWorld:
    name = "toy"
    default_benches = WORLDS["toy"].default_benches
    default_diagnoser = "trace"
    knows_truth = True
    chat_template = False
    rep_tokenizer = "char"  # a toy question is one whitespace token: whitespace BLEU would be all-or-nothing

    def __init__(
        self,
        levels: Sequence[int] = (1, 2, 3, 4),
        heldout_size: int = 500,
        exclude_heldout: bool = True,
        tasks: Sequence[Task] | None = None,
        prompts: Any = None,
    ):
        """``tasks``: a fixed labelled set (a JSONL of toy problems) instead of fresh draws;
        ``prompts``: the run's ``PromptsConfig``, for real judge / diagnosis models."""
        self.prompts = prompts
        self.levels = tuple(levels)
        self.heldout_size = heldout_size
        self.exclude_heldout = exclude_heldout
        self.tasks = None if tasks is None else list(tasks)
        self.prompter: Prompter = ToyPrompter()

    def draw(self, rng: random.Random, n: int) -> list[Task]:
        if self.tasks is not None:
            return draw_from(self.tasks, rng, n)
        return sample_tasks(rng, n, levels=list(self.levels))

    def pool(self, rng: random.Random, size: int | None) -> list[Task]:
        if self.tasks is not None:
            return pool_from(self.tasks, rng, size)
        return dedupe(self.draw(rng, size or DEFAULT_POOL), key=lambda t: t.question)

    def excluded(self) -> frozenset[str]:
        if not self.exclude_heldout:
            return frozenset()
        return frozenset(normalize_question(q) for q in heldout_questions(self.heldout_size))

    def oracle(self, question: str) -> str | None:
        return oracle(question)

    def bench_tasks(self, bench: str, data_dir: Path | None, limit: int | None) -> list[Task] | None:
        if bench != "toy":
            return None
        tasks = heldout_tasks(self.heldout_size)
        return tasks[:limit] if limit else tasks

    def prompter_for(self, tokenizer: Any) -> Prompter:
        """The toy prompts for the toy tokenizer; a real model used as judge or diagnoser in the
        toy world gets the papers' prompts (plain text: the toy world sets no chat template)."""
        if tokenizer is None or tuple(sorted(tokenizer.get_vocab().items())) == toy_vocab():
            return self.prompter

        return ChatPrompter(tokenizer, use_chat_template=False, prompts=self.prompts)

    def trace_diagnoser(self) -> Diagnoser:
        return TraceDiagnoser(explain_divergence)

    def shows_causes(self, question: str, causes: Sequence[Cause]) -> list[bool] | None:
        """Toy questions carry their features, so whether a question exercises a cause (the
        trace diagnoser's world id, or an exact catalogue text) is known exactly."""
        feats = features(question)
        out = []
        for c in causes:
            ref = c.source_id or getattr(cause_by_text(c.text), "id", None)
            if ref is None:
                return None
            out.append(bool(shows_cause(ref, feats)))
        return out

    def true_cause(self, question: str, bad: str, good: str) -> str | None:
        d = explain_divergence(question, bad, good)
        return None if d is None else d.cause

    def run_summary(self, run_dir: Path) -> dict[str, Any]:
        return {}
