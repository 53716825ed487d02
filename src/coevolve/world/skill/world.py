"""The skill world (``coevolve.world.skill``) behind the ``World`` interface (``data.source=skill``)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coevolve.curriculum.buffer import dedupe, normalize_question
from coevolve.memory.diagnose import Diagnoser, TraceDiagnoser
from coevolve.memory.store import Cause
from coevolve.prompts import Prompter
from coevolve.prompts.chat import ChatPrompter
from coevolve.run import eval_items
from coevolve.types import Task
from coevolve.world.facts import WORLDS
from coevolve.world.real import draw_from, pool_from
from coevolve.world.skill.causes import CAUSES, cause_by_text, explain_divergence, injected_causes, shows_cause
from coevolve.world.skill.problems import (
    DEFICITS,
    HELDOUT_DEFAULT,
    SKILLS,
    DeficitProfile,
    draw_pool,
    draw_strata,
    heldout_questions,
    heldout_tasks,
    labelled_set,
    make_problem,
    oracle,
    parse_chain,
)
from coevolve.world.skill.prompts import SkillPrompter
from coevolve.world.toy.world import toy_vocab

DEFAULT_POOL = 400


class SkillWorld:
    name = "skill"
    default_benches = WORLDS["skill"].default_benches
    default_diagnoser = "trace"
    knows_truth = True
    chat_template = False
    rep_tokenizer = "char"  # questions have no spaces

    def __init__(
        self,
        profile: DeficitProfile = DEFICITS,
        heldout_per_stratum: int = 100,
        focus: Sequence[str] | None = None,
        pool_kind: str = "ladder",
        exclude_heldout: bool = True,
        tasks: Sequence[Task] | None = None,
    ):
        """``focus``: the skills fresh draws are drawn for (None: all); ``pool_kind``: the fresh
        candidate pool's distribution; ``tasks``: a fixed labelled set instead of fresh draws."""
        self.profile = profile
        self.per_stratum = heldout_per_stratum
        self.focus = None if focus is None else tuple(focus)
        self.pool_kind = pool_kind
        self.exclude_heldout = exclude_heldout
        self.tasks = None if tasks is None else list(tasks)
        self.prompter: Prompter = SkillPrompter()

    @classmethod
    def from_config(cls, cfg: Any, say: Callable[[str], None]) -> SkillWorld:
        sk = cfg.data.skill
        profile = DeficitProfile.of(sk.deficits)
        tasks = None
        if cfg.data.limit is not None:
            tasks = [p.to_task() for p in labelled_set(cfg.data.limit, cfg.data.limit_seed, profile, sk.pool)]
            kinds: dict[str, int] = {}
            for t in tasks:
                kinds[t.features.get("pool_kind", "strata")] = kinds.get(t.features.get("pool_kind", "strata"), 0) + 1
            say(
                f"[data] skill world: a fixed labelled set of {len(tasks)} questions ({sk.pool}: {kinds}; seed "
                f"{cfg.data.limit_seed})"
            )
        return cls(profile, sk.heldout_per_stratum, sk.focus, sk.pool, cfg.data.exclude_heldout, tasks)

    def draw(self, rng: random.Random, n: int) -> list[Task]:
        if self.tasks is not None:
            return draw_from(self.tasks, rng, n)
        banned = heldout_questions(profile=self.profile) if self.exclude_heldout else frozenset()
        out: list[Task] = []
        while len(out) < n:
            p = draw_strata(rng, self.profile, self.focus)
            if p.question not in banned:
                out.append(p.to_task())
        return out

    def pool(self, rng: random.Random, size: int | None) -> list[Task]:
        if self.tasks is not None:
            return pool_from(self.tasks, rng, size)
        banned = heldout_questions(profile=self.profile) if self.exclude_heldout else frozenset()
        out: list[Task] = []
        while len(out) < (size or DEFAULT_POOL):
            p = draw_pool(rng, self.pool_kind, self.profile)
            if p.question not in banned:
                out.append(p.to_task())
        return dedupe(out, key=lambda t: t.question)

    def excluded(self) -> frozenset[str]:
        if not self.exclude_heldout:
            return frozenset()
        # the default set (the base never saw it) and, for a larger eval set, the rest of it too
        return frozenset(
            normalize_question(q)
            for q in heldout_questions(max(self.per_stratum, HELDOUT_DEFAULT), profile=self.profile)
        )

    def oracle(self, question: str) -> str | None:
        return oracle(question)

    def bench_tasks(self, bench: str, data_dir: Path | None, limit: int | None) -> list[Task] | None:
        if bench != "skill":
            return None
        tasks = heldout_tasks(self.per_stratum, profile=self.profile)
        return tasks[:limit] if limit else tasks

    def prompter_for(self, tokenizer: Any) -> Prompter:
        """The skill prompts for the char tokenizer; a real judge or diagnoser model gets the
        papers' prompts (plain text)."""
        if tokenizer is None or tuple(sorted(tokenizer.get_vocab().items())) == toy_vocab():
            return self.prompter

        return ChatPrompter(tokenizer, use_chat_template=False)

    def trace_diagnoser(self) -> Diagnoser:
        return TraceDiagnoser(explain_divergence)

    def shows_causes(self, question: str, causes: Sequence[Cause]) -> list[bool] | None:
        if parse_chain(question) is None:
            return None
        feats = make_problem(question, self.profile).features
        out = []
        for c in causes:
            ref = c.source_id if c.source_id in CAUSES else getattr(cause_by_text(c.text), "id", None)
            if ref is None:
                return None
            out.append(shows_cause(ref, feats))
        return out

    def true_cause(self, question: str, bad: str, good: str) -> str | None:
        d = explain_divergence(question, bad, good)
        return None if d is None else d.cause

    def run_summary(self, run_dir: Path) -> dict[str, Any]:
        """The run against the injected ground truth: held-out accuracy per focal skill and depth
        (base and final evaluation) with the soft / hard / deficient / clean strata, and, when
        the run kept an error memory, its precision and recall against the injected deficits."""
        return skill_summary(Path(run_dir), self.profile)


# --------------------------------------------------------------------------------------------
# the run against the ground truth


def stratum_accuracy(items: Sequence[dict[str, Any]], profile: DeficitProfile = DEFICITS) -> dict[str, Any]:
    """Greedy / sampled accuracy per focal skill, per (skill, depth), and over the skill groups
    ``soft``, ``hard``, ``deficient``, ``clean`` and ``all``."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in items:
        skill = r.get("group")
        if skill is None:
            continue
        depth = make_problem(r["question"], profile).depth
        by.setdefault(skill, []).append(r)
        by.setdefault(f"{skill}@{depth}", []).append(r)
    groups = {
        "soft": profile.soft,
        "hard": profile.hard,
        "deficient": profile.deficient,
        "clean": profile.clean,
        "all": SKILLS,
    }
    for g, skills in groups.items():
        by[g] = [r for s in skills for r in by.get(s, [])]

    def acc(rs: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(rs), "greedy": sum(r["correct"] for r in rs) / len(rs)}
        if rs and "sampled_acc" in rs[0]:
            out["sampled"] = sum(r["sampled_acc"] for r in rs) / len(rs)
        return out

    return {k: acc(v) for k, v in by.items() if v}


def memory_scores(memory: dict[str, Any], profile: DeficitProfile = DEFICITS) -> dict[str, Any]:
    """An error memory (``memory.json``) against the injected deficits: ``precision`` = share of
    its causes that are injected deficits, ``precision_failures`` = the same weighted by the
    failures filed under each cause, ``recall_soft`` / ``recall`` = share of the soft / all
    injected deficits the memory holds, and the states of the injected causes."""
    truth = injected_causes(profile)
    causes = list(memory.get("causes") or [])
    ids = [c.get("source_id") for c in causes]
    fails = [int(c.get("total_failures", 0)) for c in causes]
    hit = [i in truth for i in ids]
    soft = [c for c, k in truth.items() if k == "soft"]
    return {
        "causes": len(causes),
        "injected": truth,
        "precision": (sum(hit) / len(hit)) if hit else None,
        "precision_failures": (sum(f for f, h in zip(fails, hit) if h) / sum(fails)) if sum(fails) else None,
        "recall_soft": (sum(c in ids for c in soft) / len(soft)) if soft else None,
        "recall": sum(c in ids for c in truth) / len(truth) if truth else None,
        "found": {c: next((x.get("state") for x in causes if x.get("source_id") == c), None) for c in truth},
        "top": sorted(((i or "?", f) for i, f in zip(ids, fails)), key=lambda t: -t[1])[:8],
    }


def skill_summary(run_dir: Path, profile: DeficitProfile = DEFICITS) -> dict[str, Any]:
    out: dict[str, Any] = {"skill_world": {"profile": profile.to_dict()}}
    sw = out["skill_world"]
    for which in ("base", "final"):
        items = eval_items(run_dir, which)
        if items:
            sw[f"strata_{which}"] = stratum_accuracy(items, profile)
    mem = run_dir / "memory.json"
    if mem.is_file():
        sw["memory"] = memory_scores(json.loads(mem.read_text(encoding="utf-8")), profile)
    return out


__all__ = ["SkillWorld", "eval_items", "memory_scores", "skill_summary", "stratum_accuracy"]
