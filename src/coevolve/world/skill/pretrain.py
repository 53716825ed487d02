"""The skill world's base model: the toy world's tiny ``Qwen3ForCausalLM`` and char tokenizer,
pretrained (``coevolve.world.toy.pretrain.pretrain``) on skill-world traces with the injected deficits,
and on the questioner / challenger formats with a writer prior that under-samples the
deficient skills. Built once per (profile, steps, seed) and cached like the toy base.

What the pretraining mix encodes (``SkillMix``):

* solver traces of random chains (depth 1..5, skills uniform), the bug of a deficient skill
  taken at its rate on every step that exercises it (``buggy_steps``), the trace consistent
  with the wrong value from there on;
* D²Evo questioner pairs ``ANCHOR:<q>=<answer> D:<difficulty>`` -> a question with the same
  skills in the same order (``draw_like``), so a questioner writes near its anchor;
* DiagEvo challenger examples: free ``NEW:`` with deficient skills at ``free_deficient_weight``
  (about 4 % of the steps: free exploration rarely practises what is broken), ``FOCUS:<cause>``
  on uniformly chosen causes (a question that shows the cause), stitched pairs.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from coevolve.errors import ConfigError, DataError
from coevolve.world.skill.causes import CAUSES, parse_trace, problem_for_causes, shows_cause, trace_step_outcomes
from coevolve.world.skill.config import GateThresholds
from coevolve.world.skill.gate import premise_gate
from coevolve.world.skill.problems import (
    DEFICITS,
    DEPTHS,
    PRIMITIVES,
    SKILLS,
    WORLD_VERSION,
    DeficitProfile,
    Op,
    SkillProblem,
    draw_chain,
    draw_focal,
    heldout_problems,
    heldout_questions,
    make_problem,
    question_text,
    render_completion,
    run_chain,
)
from coevolve.world.skill.prompts import parse_question_block
from coevolve.world.toy.measure import generate_texts
from coevolve.world.toy.pretrain import build_cached, build_model, pretrain, training_record
from coevolve.world.toy.pretrain import default_cache_dir as toy_cache
from coevolve.world.toy.prompts import challenger_prompt, question_completion, questioner_prompt, solver_prompt
from coevolve.world.toy.tokenizer import build_tokenizer

HORIZON = 4000
"""Steps of the pretraining learning-rate schedule (warm-up, then cosine to 10 % at HORIZON, flat
after): a base of K steps is the K-step point of this one schedule, so the checkpoints of one long
run measure every shorter base (``scripts/skill_base_curve.py``) and the cache rebuilds them."""
WARMUP = 50


def lr_factor(step: int) -> float:
    """The pretraining learning-rate multiplier at ``step`` (0-based), independent of the run's length."""
    s = min(step, HORIZON)
    return min((step + 1) / WARMUP, 1.0) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / HORIZON)))


BUILD_FILE = "skill_build.json"
"""Written into every skill base: its settings, profile and measured figures (and the marker that
the folder is a skill base, see ``coevolve.world.world_of_model``)."""


@dataclass(frozen=True)
class SkillMix:
    """Shares of the pretraining mix (the rest is solver traces) and the writer prior."""

    questioner: float = 0.12
    challenger: float = 0.08
    challenger_free: float = 0.3
    challenger_stitched: float = 0.2
    free_deficient_weight: float = 0.07  # a deficient skill's weight next to 1.0 for a clean one (free NEW:)
    clean_step_accuracy: float = 0.95  # the questioner's difficulty prior (D:) assumes this per clean step


def buggy_steps(rng: random.Random, p: SkillProblem, profile: DeficitProfile) -> list[bool]:
    """Per step, whether the pretraining trace takes the bug: at the skill's injected rate on a
    step that exercises it (on the trace so far), never when the wrong value would leave a later
    operation undefined (a trace must stay a trace of the question)."""
    bugs: list[bool] = []
    v = p.start
    ops = list(p.ops)
    for i, o in enumerate(ops):
        prim = PRIMITIVES[o.skill]
        take = False
        if prim.exercises(v, o.operand) and rng.random() < profile.rate(o.skill):
            w = prim.apply(v, o.operand, buggy=True)
            take = _defined(w, ops[i + 1 :])
        bugs.append(take)
        v = prim.apply(v, o.operand, buggy=take)
    return bugs


def _defined(v: int, ops: Sequence[Op]) -> bool:
    for o in ops:
        p = PRIMITIVES[o.skill]
        if not p.accepts(v, o.operand):
            return False
        v = p.apply(v, o.operand)
        if not 0 <= v <= 999:
            return False
    return True


def solver_completion(rng: random.Random, p: SkillProblem, profile: DeficitProfile) -> str:
    """A pretraining trace of ``p``: the injected bugs taken at their rates, the answer the trace's
    last value."""
    steps = run_chain(p.start, p.ops, buggy_steps(rng, p, profile))
    return render_completion(steps, steps[-1].result)


def prior_difficulty(p: SkillProblem, profile: DeficitProfile, clean_acc: float) -> float:
    """100 × (1 - the pass rate a solver with the injected rates and ``clean_acc`` per step
    would have): the questioner's ``D:`` number in pretraining (the runs give measured ones)."""
    acc = 1.0
    for s in run_chain(p.start, p.ops):
        prim = PRIMITIVES[s.skill]
        acc *= clean_acc * (1 - profile.rate(s.skill) if prim.exercises(s.value, s.operand) else 1.0)
    return 100.0 * (1.0 - acc)


def draw_like(
    rng: random.Random, p: SkillProblem, profile: DeficitProfile, banned: frozenset[str], tries: int = 60
) -> SkillProblem:
    """A new question with ``p``'s skills in ``p``'s order and the same exercised deficits (its
    stratum), other numbers; else one of ``p``'s stratum and depth."""
    skills = [o.skill for o in p.ops]
    want = p.features["deficits"]
    for _ in range(tries):
        v = rng.randint(10, 99)
        start, ops = v, []
        for s in skills:
            prim = PRIMITIVES[s]
            x = prim.draw_operand(rng, v)
            if not prim.accepts(v, x):
                break
            ops.append(Op(s, x))
            v = prim.apply(v, x)
        if len(ops) == len(skills):
            q = question_text(start, ops)
            if q != p.question and q not in banned:
                new = make_problem(q, profile)
                if new.features["deficits"] == want:
                    return new
    stratum = p.features["stratum"]
    focal = stratum if stratum in PRIMITIVES else "clean"
    while True:
        new = draw_focal(rng, focal, p.depth, profile)
        if new.question not in banned and new.question != p.question:
            return new


def free_weights(profile: DeficitProfile, mix: SkillMix) -> dict[str, float]:
    """Skill weights of the challenger's free-writing prior."""
    return {s: (mix.free_deficient_weight if profile.rate(s) > 0 else 1.0) for s in SKILLS}


def _draw(
    rng: random.Random, weights: dict[str, float], banned: frozenset[str], profile: DeficitProfile
) -> SkillProblem:
    while True:
        q = question_text(*draw_chain(rng, rng.choice(DEPTHS), weights))
        if q not in banned:
            return make_problem(q, profile)


def sample_example(
    rng: random.Random, profile: DeficitProfile, mix: SkillMix, banned: frozenset[str]
) -> tuple[str, str, str]:
    """One pretraining example ``(kind, prompt, completion without EOS)``."""
    u = rng.random()
    uniform = {s: 1.0 for s in SKILLS}
    if u < mix.questioner:
        anchor = _draw(rng, uniform, banned, profile)
        new = draw_like(rng, anchor, profile, banned)
        d = min(100.0, max(0.0, prior_difficulty(anchor, profile, mix.clean_step_accuracy) + rng.gauss(0.0, 8.0)))
        return "questioner", questioner_prompt(anchor.question, anchor.answer, d), question_completion(new.question)
    if u < mix.questioner + mix.challenger:
        v = rng.random()
        ids = list(CAUSES)
        if v < mix.challenger_free:
            p = _draw(rng, free_weights(profile, mix), banned, profile)
            return "challenger", challenger_prompt([]), question_completion(p.question)
        causes = rng.sample(ids, 2) if v < mix.challenger_free + mix.challenger_stitched else [rng.choice(ids)]
        p = problem_for_causes(rng, causes, banned, profile)
        return "challenger", challenger_prompt([CAUSES[c].text for c in causes]), question_completion(p.question)
    p = _draw(rng, uniform, banned, profile)
    return "solver", solver_prompt(p.question), solver_completion(rng, p, profile)


# --------------------------------------------------------------------------------------------
# measurement


def _correct(text: str, answer: str) -> bool:
    return parse_trace(text)[1] == answer


def measure(
    model: Qwen3ForCausalLM,
    tok: PreTrainedTokenizerBase,
    profile: DeficitProfile = DEFICITS,
    per_stratum: int = 20,
    samples: int = 8,
    seed: int = 0,
    n_writer: int = 64,
) -> dict[str, Any]:
    """The base's profile: greedy and sampled accuracy per (focal skill, depth) on the first
    ``per_stratum`` held-out questions of each stratum and per skill group (``strata``: soft, hard,
    deficient, clean), the measured bug rate per skill (taken / exercised, on sampled traces), the
    non-bug error rate per skill (steps reached on the correct trace that go wrong otherwise than
    by the skill's bug: ``trace_step_outcomes``), the writer's free prior (share of deficient
    steps) and focus following. The premise gate (``coevolve.world.skill.gate``) reads these."""
    torch.manual_seed(seed)
    probs: dict[tuple[str, int], list[SkillProblem]] = {}
    for p in heldout_problems(profile=profile):
        key = (p.features["focus"], p.depth)
        if len(probs.setdefault(key, [])) < per_stratum:
            probs[key].append(p)
    flat = [p for ps in probs.values() for p in ps]
    t0 = time.time()
    prompts = [solver_prompt(p.question) for p in flat]
    greedy = [g[0] for g in generate_texts(model, tok, prompts, 1, temperature=0.0, max_new_tokens=96)]
    sampled = generate_texts(model, tok, prompts, samples, temperature=1.0, max_new_tokens=96) if samples else None
    groups = {"soft": profile.soft, "hard": profile.hard, "deficient": profile.deficient, "clean": profile.clean}
    acc, by_group = _accuracy(probs, greedy, sampled, samples, groups)
    res: dict[str, Any] = {
        "per_stratum": per_stratum,
        "samples": samples,
        "accuracy": acc,
        "eval_seconds": round(time.time() - t0, 1),
    }
    res["greedy"] = sum(_correct(c, p.answer) for c, p in zip(greedy, flat)) / len(flat)
    if sampled is not None:
        res["sampled"] = sum(_correct(c, p.answer) for cs, p in zip(sampled, flat) for c in cs) / (len(flat) * samples)
        bug_counts, step_counts = _step_counts(flat, sampled)
        res["bug_rate"] = {s: (round(b / n, 4) if n else None) for s, (b, n) in bug_counts.items()}
        res["bug_steps"] = {s: n for s, (b, n) in bug_counts.items()}
        res["nonbug_error_rate"] = {s: (round(e / n, 4) if n else None) for s, (e, n) in step_counts.items()}
        res["nonbug_steps"] = {s: n for s, (e, n) in step_counts.items()}
    res["strata"] = {
        k: {"n": len(gs), "greedy": sum(gs) / len(gs), **({"sampled": sum(ss) / len(ss)} if ss else {})}
        for k, (gs, ss) in by_group.items()
        if gs
    }
    res.update(_writer_figures(model, tok, profile, flat, n_writer))
    return res


def _accuracy(
    probs: dict[tuple[str, int], list[SkillProblem]],
    greedy: list[str],
    sampled: list[list[str]] | None,
    samples: int,
    groups: dict[str, Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[list[float], list[float]]]]:
    """Greedy (and sampled, with the in-band share) accuracy per (focal skill, depth), and the
    per-question figures of each skill group, in ``probs``' order (the flat order of the texts)."""
    acc: dict[str, dict[str, Any]] = {}
    by_group: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in groups}
    i = 0
    for (s, d), ps in probs.items():
        g = [_correct(greedy[i + j], p.answer) for j, p in enumerate(ps)]
        row = acc.setdefault(s, {})
        row[str(d)] = {"greedy": sum(g) / len(g)}
        mine = [k for k, skills in groups.items() if s in skills]
        for k in mine:
            by_group[k][0].extend(g)
        if sampled is not None:
            rates = [sum(_correct(c, p.answer) for c in sampled[i + j]) / samples for j, p in enumerate(ps)]
            row[str(d)]["sampled"] = sum(rates) / len(rates)
            row[str(d)]["band_0.2_0.8"] = sum(0.2 <= r <= 0.8 for r in rates) / len(rates)
            for k in mine:
                by_group[k][1].extend(rates)
        i += len(ps)
    return acc, by_group


def _step_counts(
    flat: list[SkillProblem], sampled: list[list[str]]
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Per skill, on the sampled traces: (bug taken, bug exercised) and (steps gone wrong not by
    the bug, steps reached), from ``trace_step_outcomes``."""
    bug_counts = {s: [0, 0] for s in SKILLS}
    step_counts = {s: [0, 0] for s in SKILLS}
    for p, cs in zip(flat, sampled):
        for c in cs:
            for sk, ex, outcome in trace_step_outcomes(p.question, c):
                step_counts[sk][0] += outcome in ("slip", "other")
                step_counts[sk][1] += 1
                if ex and outcome != "other":
                    bug_counts[sk][0] += outcome == "bug"
                    bug_counts[sk][1] += 1
    return bug_counts, step_counts


def _writer_figures(
    model: Qwen3ForCausalLM,
    tok: PreTrainedTokenizerBase,
    profile: DeficitProfile,
    flat: list[SkillProblem],
    n_writer: int,
) -> dict[str, Any]:
    """The writer half of ``measure``: the challenger's free prior (valid share, share of
    deficient steps, depths), its focus following per cause, and the questioner's validity,
    same-stratum and copy rates on ``n_writer`` anchors spread over ``flat``. Drawn after the
    solver's samples, from the same seeded torch generator, so the figures match a single pass."""
    res: dict[str, Any] = {}
    free = [
        parse_question_block(o)
        for o in generate_texts(model, tok, [challenger_prompt([])], n_writer, max_new_tokens=32)[0]
    ]
    ok = [make_problem(q, profile) for q in free if q is not None]
    steps = [s for p in ok for s in p.features["skills"]]
    res["challenger_free_valid"] = len(ok) / len(free)
    res["challenger_free_deficient_step_share"] = (
        (sum(profile.rate(s) > 0 for s in steps) / len(steps)) if steps else None
    )
    res["challenger_free_depth"] = {str(d): sum(p.depth == d for p in ok) for d in DEPTHS}
    ids = list(CAUSES)
    outs = generate_texts(model, tok, [challenger_prompt([CAUSES[c].text]) for c in ids], 4, max_new_tokens=32)
    follow = {}
    for cid, os_ in zip(ids, outs):
        qs = [parse_question_block(o) for o in os_]
        follow[cid] = sum(q is not None and shows_cause(cid, make_problem(q, profile).features) for q in qs) / len(qs)
    res["focus_following"] = sum(follow.values()) / len(follow)
    res["focus_following_by_cause"] = follow
    anchors = [p for p in flat[:: max(1, len(flat) // n_writer)]][:n_writer]
    qo = generate_texts(
        model, tok, [questioner_prompt(a.question, a.answer, 50) for a in anchors], 1, max_new_tokens=32
    )
    qs = [parse_question_block(o[0]) for o in qo]
    res["questioner_valid"] = sum(q is not None for q in qs) / len(qs)
    res["questioner_same_stratum"] = sum(
        q is not None and make_problem(q, profile).features["stratum"] == a.features["stratum"]
        for q, a in zip(qs, anchors)
    ) / len(qs)
    res["questioner_copies"] = sum(q == a.question for q, a in zip(qs, anchors)) / len(qs)
    return res


# --------------------------------------------------------------------------------------------
# build + cache


def build_skill_base(
    out_dir: Path,
    steps: int = 1800,
    seed: int = 0,
    profile: DeficitProfile = DEFICITS,
    batch_size: int = 128,
    lr: float = 2e-3,
    mix: SkillMix = SkillMix(),
    progress: bool = True,
    *,
    measure_per_stratum: int = 20,
    measure_samples: int = 8,
    on_step: Callable[[int, Qwen3ForCausalLM], None] | None = None,
) -> Path:
    """Pretrain a skill base from scratch and save it with ``skill_build.json`` (settings, profile,
    loss curve, the measured profile). ``on_step(done, model)``: see ``toy.pretrain.pretrain``."""
    if steps < 1 or batch_size < 1 or not (lr > 0 and math.isfinite(lr)):
        raise ConfigError(f"build_skill_base: steps={steps}, batch_size={batch_size}, lr={lr} must be positive")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    model, losses, train_s = _train(tok, steps, seed, profile, batch_size, lr, mix, progress, on_step)
    figures = (
        measure(model, tok, profile, per_stratum=measure_per_stratum, samples=measure_samples, seed=seed)
        if measure_per_stratum > 0
        else {}
    )
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    info = {
        "world": "skill",
        "world_version": WORLD_VERSION,
        "profile": profile.to_dict(),
        "steps": steps,
        "seed": seed,
        "batch_size": batch_size,
        "lr": lr,
        "mix": asdict(mix),
        **training_record(model, losses, train_s, 100),
        "figures": figures,
        # judged at the default thresholds; the preflight re-judges the figures at the run's (data.skill.gate)
        "premise_gate": premise_gate(figures, profile, GateThresholds()),
    }
    (out_dir / BUILD_FILE).write_text(json.dumps(info, indent=2))
    return out_dir


def _train(
    tok: PreTrainedTokenizerBase,
    steps: int,
    seed: int,
    profile: DeficitProfile,
    batch_size: int,
    lr: float,
    mix: SkillMix,
    progress: bool,
    on_step: Callable[[int, Qwen3ForCausalLM], None] | None,
) -> tuple[Qwen3ForCausalLM, list[float], float]:
    """A fresh model (seeded) pretrained on the skill world's mix with the skill schedule
    (``lr_factor``), the held-out questions kept out; returns it, its per-step loss and the
    seconds the pretraining took."""
    torch.manual_seed(seed)
    model = build_model(len(tok))
    banned = heldout_questions(profile=profile)
    t0 = time.time()
    losses = pretrain(
        model,
        tok,
        steps,
        seed,
        batch_size=batch_size,
        lr=lr,
        progress=progress,
        example=lambda r: sample_example(r, profile, mix, banned),
        desc="skill pretrain",
        lr_factor=lr_factor,
        on_step=on_step,
    )
    return model, losses, time.time() - t0


def default_cache_dir() -> Path:
    """``$COEVOLVE_CACHE/skill`` or ``~/.cache/coevolve/skill``."""
    return toy_cache().parent / "skill"


def skill_base_dir(cache_dir: Path | None, steps: int, seed: int, profile: DeficitProfile = DEFICITS) -> Path:
    """Where the skill base of (world version, profile, steps, seed) is cached."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / f"base-w{WORLD_VERSION}-{profile.key()}-steps{steps}-seed{seed}"


def ensure_skill_base(
    cache_dir: Path | None = None, steps: int = 1800, seed: int = 0, profile: DeficitProfile = DEFICITS
) -> Path:
    """Path of the cached skill base for (world version, profile, steps, seed); built once when
    missing (atomic, locked: ``coevolve.world.toy.pretrain.build_cached``)."""
    if steps < 1:
        raise DataError(f"skill base steps={steps} must be >= 1")
    return build_cached(
        skill_base_dir(cache_dir, steps, seed, profile),
        lambda tmp: build_skill_base(tmp, steps=steps, seed=seed, profile=profile),
        built_marker=BUILD_FILE,
    )


__all__ = [
    "BUILD_FILE",
    "SkillMix",
    "build_skill_base",
    "buggy_steps",
    "default_cache_dir",
    "draw_like",
    "ensure_skill_base",
    "free_weights",
    "skill_base_dir",
    "measure",
    "prior_difficulty",
    "sample_example",
    "solver_completion",
]
