"""The probe step: the round's label-free signals on a fixed probe set (``phase_probe``), the set
itself (``probe_set``) and the answers it costs (``probe_work``)."""

from __future__ import annotations

import random
from typing import Any

from coevolve.config.sections import RecipeConfig
from coevolve.curriculum import normalize_question, pass_rate_histogram
from coevolve.curriculum.sampling import completion_answer, sample_chunked
from coevolve.errors import ConfigError
from coevolve.eval.signals import PROBE_PREFIX, parse_select, probe_signals
from coevolve.recipes.declare import Rollouts, Step, Work
from coevolve.recipes.selection import selection_pin
from coevolve.recipes.setup import Setup
from coevolve.run import Phase, PhaseContext, PhaseRecord, PhaseResult, derive_seed
from coevolve.types import Completion, Task, Vote

PROBE_FILE = "probe.jsonl"
"""The run's probe set (run folder root): drawn once, before round 1, read by every probe."""


def probe_set(s: Setup, parts: Any, phase: Phase) -> list[Task]:
    """The run's fixed probe set: read from ``probe.jsonl``, or drawn and saved there the first
    time: ``probe.size`` training questions, seeded from ``run.seed`` alone, never an evaluation
    item (``World.excluded``) nor one of D²Evo's candidate questions (``parts.pool``), so no
    phase trains on it. A world without training questions (label-free DiagEvo on a real model)
    freezes round 1's writer questions instead: well-formed ones the filter did not keep (the
    kept ones were trained on), drawn at round 1's probe; the base probe then has no questions.
    A world that cannot give that many distinct questions gives fewer."""
    path = s.run.path / PROBE_FILE
    if path.is_file():
        return [Task.from_dict(r) for r in s.run.read_jsonl(PROBE_FILE)]
    size = s.cfg.probe.size
    banned = set(s.world.excluded()) | {normalize_question(t.question) for t in getattr(parts, "pool", None) or ()}
    rng = random.Random(derive_seed(s.cfg.run.seed, "probe-set"))
    try:
        drawn = s.world.draw(rng, 3 * size)
    except ConfigError:  # no labelled training questions: the writer's questions of round 1
        if phase.round is None:
            return []
        rows = [
            r
            for r in s.run.read_jsonl("round_01/candidates.jsonl")
            if r.get("question") and r.get("status") in ("filtered", "no_label", "rejected")
        ]
        rng.shuffle(rows)
        drawn = [Task(str(r.get("vote_id") or ""), r["question"]) for r in rows]
    tasks: list[Task] = []
    for t in drawn:
        key = normalize_question(t.question)
        if key not in banned and len(tasks) < size:
            banned.add(key)
            tasks.append(Task(f"probe-{len(tasks):04d}", t.question, t.answer, "probe", t.features))
    s.run.write_jsonl(PROBE_FILE, [t.to_dict() for t in tasks])
    return tasks


def probe_due(cfg: RecipeConfig, phase: Phase) -> bool:
    """Probe the solver when the config has a probe (``probe.size`` > 0)."""
    probe = getattr(cfg, "probe", None)
    return probe is not None and probe.size > 0


def phase_probe(p: Any, phase: Phase) -> PhaseRecord:
    """The round's label-free signals (``coevolve.eval.signals``): the solver answers the fixed
    probe set ``probe.samples`` times each (the same seed every round, so rounds compare the
    same draws); answers are voted like pseudo-labels; where the probe has gold answers, also
    its accuracy. Writes ``probe_answers.jsonl``; logs ``probe/*``. Before round 1 (``base``)
    it draws the probe set and measures the base model, round 1's reference. When ``run.select``
    picks this round so far, its solver checkpoint is pinned (kept beyond ``run.keep_checkpoints``)."""
    s, solver, pc = p.s, p.solver, p.s.cfg.probe

    def fn(ctx: PhaseContext) -> PhaseResult:
        tasks = probe_set(s, p, phase)
        groups = sample_chunked(
            solver.sampler,
            [s.world.prompter.solver(t.question) for t in tasks],
            pc.samples,
            s.params(derive_seed(s.cfg.run.seed, "probe")),
            s.cfg.sampling.batch_prompts,
        )
        answers = [[completion_answer(c) for c in g] for g in groups]
        votes = s.grader.vote_batch(answers)
        signals, correct = _probe_signals(s, phase, ctx, tasks, groups, answers, votes)
        s.run.write_jsonl(ctx.dir / "probe_answers.jsonl", _probe_rows(tasks, votes, answers, groups, correct))
        ckpt = s.run.checkpoint("solver")  # the weights measured: what exporting this round means
        values: dict[str, Any] = {
            **signals,
            "questions": len(tasks),
            "checkpoint": None if ckpt is None else ckpt.relative_to(s.run.path).as_posix(),
        }
        if correct is not None:
            values["pass_hist"] = pass_rate_histogram([sum(c) / len(c) for c in correct if c])
        ctx.log(
            {f"{PROBE_PREFIX}{k}": v for k, v in signals.items() if v is not None}
            | {f"{PROBE_PREFIX}pass_hist/{k}": v for k, v in values.get("pass_hist", {}).items()}
        )
        ctx.say(
            f"[probe] {phase.key}: {len(tasks)} questions x {pc.samples}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in signals.items() if v is not None)
        )
        return PhaseResult(values, sum(len(g) for g in groups), pins=selection_pin(s, phase, values))

    return s.run.phase(phase, fn)


def _probe_signals(
    s: Setup,
    phase: Phase,
    ctx: PhaseContext,
    tasks: list[Task],
    groups: list[list[Completion]],
    answers: list[list[str | None]],
    votes: list[Vote],
) -> tuple[dict[str, float | None], list[list[bool]] | None]:
    """The probe's signals (rounded to 4 places) and, where every question has a gold answer,
    which answers are right: agreement with the previous probe's labels, accuracy and label
    accuracy, and the length of the round's written questions."""
    prev = _previous_probe(s, phase)
    agree = (
        None
        if prev is None
        else [
            v.label is not None and prev.get(t.id) is not None and s.grader.is_equiv(prev[t.id], v.label)
            for t, v in zip(tasks, votes)
        ]
    )
    gold = [t.answer for t in tasks]
    has_gold = bool(tasks) and all(g is not None for g in gold)
    correct = [[s.grader.is_equiv(g, a) for a in ans] for g, ans in zip(gold, answers)] if has_gold else None
    label_ok = [s.grader.is_equiv(g, v.label) for g, v in zip(gold, votes)] if has_gold else None
    if has_gold and phase.round is None and parse_select(s.cfg.run.select).signal in ("accuracy", "pass_rate"):
        ctx.compute.labelled(len(tasks))  # the probe's gold answers then choose the round: labels used
    written = (
        [r["question"] for r in s.run.read_jsonl(ctx.dir / "candidates.jsonl") if r.get("question")]
        if phase.round is not None and (ctx.dir / "candidates.jsonl").is_file()
        else []
    )
    signals = probe_signals(
        [list(v.sizes) for v in votes],
        [len(a) for a in answers],
        [[len(c.token_ids) for c in g] for g in groups],
        agree,
        correct,
        label_ok,
        [len(q) for q in written],
    )
    return {k: None if v is None else round(v, 4) for k, v in signals.items()}, correct


def _probe_rows(
    tasks: list[Task],
    votes: list[Vote],
    answers: list[list[str | None]],
    groups: list[list[Completion]],
    correct: list[list[bool]] | None,
) -> list[dict[str, Any]]:
    """``probe_answers.jsonl``: per question its gold answer, majority label, vote and answers."""
    return [
        {
            "id": t.id,
            "question": t.question,
            "gold": t.answer,
            "label": v.label,
            "p1": v.p1,
            "sizes": list(v.sizes),
            "answers": a,
            "tokens": [len(c.token_ids) for c in g],
            **({"correct": c} if correct is not None else {}),
        }
        for t, v, a, g, c in zip(tasks, votes, answers, groups, correct or [None] * len(tasks))
    ]


def _previous_probe(s: Setup, phase: Phase) -> dict[str, str | None] | None:
    """Probe id -> majority label of the probe before ``phase`` (round t-1's, the base one for
    round 1); None when there is none (the base probe, or a previous probe not run)."""
    if phase.round is None:
        return None
    prev = Phase("probe", phase.round - 1) if phase.round > 1 else Phase("probe", None, "base")
    path = s.run.path / prev.folder / "probe_answers.jsonl"
    rows = s.run.read_jsonl(path) if s.run.done(prev) and path.is_file() else []
    return {r["id"]: r["label"] for r in rows} or None  # a base probe without questions: no reference


def probe_work(cfg: RecipeConfig, toy: bool) -> Work:
    """A probe's answers: ``probe.size`` questions x ``probe.samples``."""
    pc = cfg.probe  # type: ignore[attr-defined]
    return Work(
        (
            Rollouts(
                "solver",
                f"{pc.samples} probe answers",
                pc.size * pc.samples,
                cfg.sampling.batch_prompts,
                pc.samples,
                "answer",
                cfg.sampling.max_new_tokens,
            ),
        )
    )


BASE_PROBE = Step("probe", phase_probe, stage="base", when=probe_due, work=probe_work)
"""The base model's probe (draws the probe set; round 1's reference)."""
ROUND_PROBE = Step("probe", phase_probe, when=probe_due, work=probe_work)
"""The probe after a round's training (label-free signals; docs/stopping.md)."""
