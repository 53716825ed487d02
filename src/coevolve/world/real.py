"""A real model's world: labelled questions from a JSONL file (or none: label-free recipes),
the configured prompts, the benchmark registry, no oracle."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coevolve.curriculum.buffer import dedupe, normalize_question
from coevolve.data.sources import check_source, source_label
from coevolve.errors import ConfigError, DataError
from coevolve.eval.benchmarks import load_tasks, resolve_benches
from coevolve.memory.diagnose import Diagnoser
from coevolve.memory.store import Cause
from coevolve.prompts import Prompter
from coevolve.prompts.chat import ChatPrompter
from coevolve.types import Task
from coevolve.world.facts import WORLDS


class RealWorld:
    name = "real"
    default_benches = WORLDS["real"].default_benches
    default_diagnoser = "llm"
    knows_truth = False
    rep_tokenizer = "whitespace"

    def __init__(
        self,
        prompter: Prompter,
        tasks: Sequence[Task],
        source: str,
        chat_template: bool,
        excluded_fn: Callable[[], frozenset[str]] | None = None,
    ):
        self.prompter = prompter
        self.tasks = list(tasks)
        self.source = source
        self.chat_template = chat_template
        self._excluded_fn = excluded_fn
        self._excluded: frozenset[str] | None = None

    @classmethod
    def from_config(cls, cfg: Any, prompter: Prompter, say: Callable[[str], None]) -> RealWorld:
        tasks: list[Task] = []
        if cfg.data.source != "toy":
            tasks = load_labelled(cfg.data, say)
            if cfg.data.drop_too_long and isinstance(prompter, ChatPrompter):
                tasks = drop_too_long(cfg, tasks, prompter, say)
        benches = list(cfg.eval.benches) if cfg.eval.benches is not None else list(cls.default_benches)
        data_dir = Path(cfg.eval.data_dir) if cfg.eval.data_dir else None
        excluded = (lambda: benchmark_questions(benches, data_dir)) if cfg.data.exclude_heldout else None
        return cls(prompter, tasks, cfg.data.source, cfg.model.chat_template, excluded)

    def draw(self, rng: random.Random, n: int) -> list[Task]:
        return draw_from(labelled(self.tasks), rng, n)

    def pool(self, rng: random.Random, size: int | None) -> list[Task]:
        return pool_from(labelled(self.tasks), rng, size)

    def excluded(self) -> frozenset[str]:
        """The evaluation benchmarks' questions (decontamination of generated questions),
        loaded on first use."""
        if self._excluded is None:
            self._excluded = self._excluded_fn() if self._excluded_fn is not None else frozenset()
        return self._excluded

    def oracle(self, question: str) -> str | None:
        return None

    def bench_tasks(self, bench: str, data_dir: Path | None, limit: int | None) -> list[Task] | None:
        return None

    def prompter_for(self, tokenizer: Any) -> Prompter:
        """The run's prompts rendered for another model (a judge or diagnosis model)."""
        if isinstance(self.prompter, ChatPrompter):
            return self.prompter.with_tokenizer(tokenizer)
        return ChatPrompter(tokenizer, use_chat_template=self.chat_template)

    def trace_diagnoser(self) -> Diagnoser:
        raise ConfigError("diagnoser.kind=trace needs the toy world (step traces); use diagnoser.kind=llm")

    def shows_causes(self, question: str, causes: Sequence[Cause]) -> list[bool] | None:
        return None

    def true_cause(self, question: str, bad: str, good: str) -> str | None:
        return None

    def run_summary(self, run_dir: Path) -> dict[str, Any]:
        return {}


def labelled(tasks: list[Task]) -> list[Task]:
    if not tasks:
        raise ConfigError(
            "data.source: this recipe needs labelled questions; give a JSONL / JSONL.gz file "
            "(e.g. data.source=.../math_train12k/train.jsonl.gz)"
        )
    return tasks


def draw_from(tasks: Sequence[Task], rng: random.Random, n: int) -> list[Task]:
    """``n`` questions of a fixed set: distinct while the set lasts, then repeats."""
    if n <= len(tasks):
        return rng.sample(list(tasks), n)
    out = list(tasks)
    rng.shuffle(out)
    return out + [rng.choice(tasks) for _ in range(n - len(out))]


def pool_from(tasks: Sequence[Task], rng: random.Random, size: int | None) -> list[Task]:
    """A seeded candidate pool of ``size`` questions (all when None), distinct texts."""
    chosen = list(tasks) if size is None or size >= len(tasks) else rng.sample(list(tasks), size)
    return dedupe(chosen, key=lambda t: t.question)


def load_labelled(data: Any, say: Callable[[str], None]) -> list[Task]:
    """The ``data`` section's labelled questions as tasks (any form ``coevolve.data.sources``
    reads); broken rows reported (``on_error=skip``)."""
    tasks, report = check_source(data)
    for p in report.problems[:20]:
        say(f"[data] skipped: {p}")
    if len(report.problems) > 20:
        say(f"[data] ... and {len(report.problems) - 20} more broken rows")
    say(f"[data] {report.loaded} questions from {source_label(data)} ({len(report.problems)} broken rows skipped)")
    return tasks


def model_context(cfg: Any) -> tuple[int, str] | None:
    """The context (prompt + completion tokens) the run's model serves and where it comes from:
    ``engine.max_model_len`` when set, else ``max_position_embeddings`` of the model's config.json
    (of its text model for a multimodal one); None when neither says."""
    if getattr(cfg.engine, "max_model_len", None):
        return int(cfg.engine.max_model_len), "engine.max_model_len"
    try:
        conf = json.loads((Path(cfg.model.path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for c in (conf, conf.get("text_config") or {}):
        if isinstance(c, dict) and isinstance(c.get("max_position_embeddings"), int):
            return c["max_position_embeddings"], f"max_position_embeddings of {cfg.model.path}"
    return None


def answer_budget(cfg: Any) -> tuple[int, str]:
    """The longest completion a labelled question's prompt is sampled with, and its field: the
    solver's cap or ``sampling.max_new_tokens`` (the votes and pass rates), whichever is larger."""
    solver = getattr(getattr(cfg, "solver", None), "max_new_tokens", None)
    if solver is not None and solver > cfg.sampling.max_new_tokens:
        return solver, "solver.max_new_tokens"
    return cfg.sampling.max_new_tokens, "sampling.max_new_tokens"


def too_long(tasks: Sequence[Task], prompter: ChatPrompter, context: int, budget: int) -> list[tuple[Task, int]]:
    """The tasks whose rendered solver prompt plus ``budget`` exceeds ``context``, each with its
    prompt's token count. A prompt whose UTF-8 bytes fit is not tokenized (a byte-level token
    covers at least one byte); a longer one only up to 32 characters a context token, so a
    megabyte question costs a bounded count (then a lower bound, which ``too_long_message`` says)."""
    room = context - budget
    out = []
    for t in tasks:
        prompt = prompter.solver(t.question)
        if len(prompt.encode("utf-8")) + 8 <= room:
            continue
        n = len(prompter.tokenizer(prompt[: 32 * context], add_special_tokens=False)["input_ids"])
        n = n if len(prompt) <= 32 * context else -n  # negative: a count of the prompt's first part
        if abs(n) > room:
            out.append((t, n))
    return out


def too_long_message(cfg: Any, over: list[tuple[Task, int]], context: tuple[int, str]) -> str:
    """One line for the rows ``too_long`` found: the first row, its count, the fields to change."""
    budget, field = answer_budget(cfg)
    t, n = over[0]
    more = f" (and {len(over) - 1} more rows)" if len(over) > 1 else ""
    least = "at least " if n < 0 else ""
    return (
        f"{t.id}: the solver prompt of this row is {least}{abs(n):,} tokens; with the answer budget {field}={budget} "
        f"that is {least}{abs(n) + budget:,}, over the model's context of {context[0]:,} ({context[1]}){more}; shorten the question, lower "
        f"{field}, or set data.drop_too_long=true to drop such rows and count them"
    )


def drop_too_long(cfg: Any, tasks: list[Task], prompter: ChatPrompter, say: Callable[[str], None]) -> list[Task]:
    """``tasks`` without those ``too_long`` finds (``data.drop_too_long``), the count said."""
    context = model_context(cfg)
    if context is None:
        return tasks
    over = {id(t) for t, _ in too_long(tasks, prompter, context[0], answer_budget(cfg)[0])}
    if over:
        say(f"[data] dropped {len(over)} questions whose prompt plus answer budget exceeds the context ({context[1]})")
    return [t for t in tasks if id(t) not in over]


def benchmark_questions(benches: Sequence[str], data_dir: Path | None) -> frozenset[str]:
    """Normalised questions of the benchmarks (those whose data can be found)."""
    out: set[str] = set()
    for b in resolve_benches(list(benches)):
        try:
            out.update(normalize_question(t.question) for t in load_tasks(b, data_dir))
        except DataError:
            continue  # a benchmark without local data cannot leak into training either
    return frozenset(out)
