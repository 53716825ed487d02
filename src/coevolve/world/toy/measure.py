"""Competence figures of a toy base (``measure``, recorded in ``toy_build.json``): held-out
greedy and sampled accuracy, the pass-rate band, the answer styles, and how well the questioner
and challenger formats were learnt. Plain HF ``generate`` (``generate_texts``): the world must
not depend on the engine layer."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from coevolve.types import Task
from coevolve.world.toy.causes import _CAUSE_FEATURE, CAUSES, parse_trace, shows_cause
from coevolve.world.toy.problems import LEVELS, heldout_tasks, make_problem, random_problem
from coevolve.world.toy.prompts import (
    LEVEL_DIFFICULTY,
    challenger_prompt,
    parse_question_block,
    questioner_prompt,
    solver_prompt,
)
from coevolve.world.toy.tokenizer import EOS_ID, PAD_ID


@torch.no_grad()
def generate_texts(
    model: Qwen3ForCausalLM,
    tok: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    n: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 48,
    batch: int = 512,
) -> list[list[str]]:
    """``n`` completions per prompt (outer: prompts); temperature 0 = greedy. Pure T sampling
    (top_k=0, top_p=1). Seed torch beforehand for reproducibility."""
    flat = [p for p in prompts for _ in range(n)]
    out: list[str] = []
    for i in range(0, len(flat), batch):
        chunk = flat[i : i + batch]
        enc = tok(chunk, return_tensors="pt", padding=True)  # left padding, (b, T)
        kw: dict[str, Any] = dict(do_sample=False)
        if temperature > 0:
            kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        gen = model.generate(
            **enc, max_new_tokens=max_new_tokens, eos_token_id=EOS_ID, pad_token_id=PAD_ID, **kw
        )  # (b, T + new)
        new = gen[:, enc["input_ids"].shape[1] :]
        out += tok.batch_decode(new, skip_special_tokens=True)
    return [out[j * n : (j + 1) * n] for j in range(len(prompts))]


def _is_correct(text: str, answer: str) -> bool:
    return parse_trace(text)[1] == answer


def _is_direct(text: str) -> bool:
    return text.startswith("<think></think>")


def measure(
    model: Qwen3ForCausalLM,
    tok: PreTrainedTokenizerBase,
    n_heldout: int = 500,
    samples: int = 16,
    n_questioner: int = 100,
    focus_per_cause: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """Competence figures of a toy base: held-out greedy/sampled accuracy (overall and per level),
    pass-rate histogram and share in [0.2, 0.8], direct-style share, well-formed ``\\boxed{}``
    rate, questioner validity, challenger free validity and focus-following rates. The parts
    draw from one torch seed and one ``random.Random`` in this order (the figures depend on it)."""
    torch.manual_seed(seed)
    rng = random.Random(seed + 99)
    tasks = heldout_tasks(n_heldout)
    prompts = [solver_prompt(t.question) for t in tasks]
    t0 = time.time()
    res = _greedy_figures(model, tok, tasks, prompts)
    if samples > 0:
        res.update(_sampled_figures(model, tok, tasks, prompts, samples))
    res["eval_seconds"] = round(time.time() - t0, 2)
    res.update(_questioner_figures(model, tok, rng, n_questioner))
    res.update(_challenger_figures(model, tok, rng, focus_per_cause))
    return res


def _by_level(values: Sequence[float], tasks: Sequence[Task]) -> dict[str, float]:
    """Mean of ``values`` per level of the ``tasks`` they belong to (0 for a level with none)."""
    lv = [t.features["level"] for t in tasks]
    return {str(L): sum(v for v, l in zip(values, lv) if l == L) / max(1, lv.count(L)) for L in LEVELS}


def _greedy_figures(
    model: Qwen3ForCausalLM, tok: PreTrainedTokenizerBase, tasks: Sequence[Task], prompts: Sequence[str]
) -> dict[str, Any]:
    """Held-out greedy accuracy, overall and per level, and the share answered in the direct style."""
    greedy = [g[0] for g in generate_texts(model, tok, prompts, 1, temperature=0.0)]
    g_ok = [_is_correct(c, t.answer or "") for c, t in zip(greedy, tasks)]
    return {
        "n_heldout": len(tasks),
        "greedy": sum(g_ok) / len(tasks),
        "greedy_direct_share": sum(map(_is_direct, greedy)) / len(tasks),
        "greedy_by_level": _by_level(g_ok, tasks),
    }


PASS_RATE_BINS: tuple[tuple[str, Callable[[float], bool]], ...] = (
    ("=0", lambda r: r == 0),
    ("(0,.2)", lambda r: 0 < r < 0.2),
    ("[.2,.4)", lambda r: 0.2 <= r < 0.4),
    ("[.4,.6)", lambda r: 0.4 <= r < 0.6),
    ("[.6,.8)", lambda r: 0.6 <= r < 0.8),
    ("[.8,1)", lambda r: 0.8 <= r < 1),
    ("=1", lambda r: r == 1),
)
"""The bins of the held-out pass-rate histogram in ``toy_build.json``."""


def _sampled_figures(
    model: Qwen3ForCausalLM, tok: PreTrainedTokenizerBase, tasks: Sequence[Task], prompts: Sequence[str], samples: int
) -> dict[str, Any]:
    """``samples`` answers per held-out question at T = 1: per-question pass rate r (mean, per
    level, share in [0.2, 0.8], histogram), accuracy of the direct and the stepwise answers, and
    the ``\\boxed{}`` and well-formed rates."""
    sampled = generate_texts(model, tok, prompts, samples, temperature=1.0)
    rates = [sum(_is_correct(c, t.answer or "") for c in cs) / samples for cs, t in zip(sampled, tasks)]
    flat = [c for cs in sampled for c in cs]
    ok = [_is_correct(c, t.answer or "") for cs, t in zip(sampled, tasks) for c in cs]
    direct = [_is_direct(c) for c in flat]
    nd = sum(direct)
    return {
        "sampled": sum(rates) / len(rates),
        "sampled_by_level": _by_level(rates, tasks),
        "band_share_0.2_0.8": sum(0.2 <= r <= 0.8 for r in rates) / len(rates),
        "pass_rate_hist": {k: sum(map(f, rates)) for k, f in PASS_RATE_BINS},
        "direct_share": sum(map(_is_direct, flat)) / len(flat),
        "sampled_acc_direct": sum(o for o, d in zip(ok, direct) if d) / max(1, nd),
        "sampled_acc_steps": sum(o for o, d in zip(ok, direct) if not d) / max(1, len(flat) - nd),
        "boxed_rate": sum(parse_trace(c)[1] is not None for c in flat) / len(flat),
        "format_rate": sum(_well_formed(c) for c in flat) / len(flat),
    }


def _questioner_figures(
    model: Qwen3ForCausalLM, tok: PreTrainedTokenizerBase, rng: random.Random, n_questioner: int
) -> dict[str, float]:
    """The questioner on ``n_questioner`` anchors (as many per level), one T = 1 sample each: the
    share of valid questions, of the anchor's level, distinct, and copies of the anchor."""
    per = max(1, n_questioner // len(LEVELS))
    anchors = [random_problem(rng, L) for L in LEVELS for _ in range(per)]
    qp = [questioner_prompt(a.question, a.answer, LEVEL_DIFFICULTY[a.level]) for a in anchors]
    qs = [parse_question_block(g[0]) for g in generate_texts(model, tok, qp, 1, max_new_tokens=24)]
    valid = [q for q in qs if q is not None]
    return {
        "questioner_valid": len(valid) / len(qs),
        "questioner_same_level": sum(q is not None and make_problem(q).level == a.level for q, a in zip(qs, anchors))
        / len(qs),
        "questioner_distinct": len(set(valid)) / max(1, len(valid)),
        "questioner_copies": sum(q == a.question for q, a in zip(qs, anchors)) / len(qs),
    }


def _challenger_figures(
    model: Qwen3ForCausalLM, tok: PreTrainedTokenizerBase, rng: random.Random, focus_per_cause: int
) -> dict[str, Any]:
    """The challenger free (50 samples: valid share), on a single focus (``focus_per_cause``
    samples per cause: the share whose question shows the cause) and on stitched pairs of causes
    that share a feature (2 samples per pair: both shown, valid)."""
    free = [
        parse_question_block(g) for g in generate_texts(model, tok, [challenger_prompt([])], 50, max_new_tokens=24)[0]
    ]
    ids = list(CAUSES)
    fo = generate_texts(
        model, tok, [challenger_prompt([CAUSES[c].text]) for c in ids], focus_per_cause, max_new_tokens=24
    )
    shown = {cid: sum(_shows(parse_question_block(o), [cid]) for o in outs) for cid, outs in zip(ids, fo)}
    pairs = [tuple(rng.sample(ids, 2)) for _ in range(40)]
    pairs = [p for p in pairs if set(_CAUSE_FEATURE[p[0]][1]) & set(_CAUSE_FEATURE[p[1]][1])]
    so = generate_texts(
        model, tok, [challenger_prompt([CAUSES[a].text, CAUSES[b].text]) for a, b in pairs], 2, max_new_tokens=24
    )
    n_s = sum(len(o) for o in so)
    return {
        "challenger_free_valid": sum(q is not None for q in free) / len(free),
        "focus_following": sum(shown.values()) / (len(ids) * focus_per_cause),
        "focus_following_by_cause": {cid: h / focus_per_cause for cid, h in shown.items()},
        "stitched_both_following": sum(
            _shows(parse_question_block(o), list(p)) for p, outs in zip(pairs, so) for o in outs
        )
        / max(1, n_s),
        "stitched_valid": sum(parse_question_block(o) is not None for outs in so for o in outs) / max(1, n_s),
    }


def _shows(q: str | None, causes: list[str]) -> bool:
    if q is None:
        return False
    f = make_problem(q).features
    return all(shows_cause(c, f) for c in causes)


def _well_formed(text: str) -> bool:
    steps, ans = parse_trace(text)
    return text.startswith("<think>") and "</think>\\boxed{" in text and text.endswith("}") and ans is not None
