"""Tests of the toy world: tokenizer, problems/oracle/features/traces, held-out set, question
parsing, cause diagnosis, prompter formats, and a tiny end-to-end base build."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from coevolve.errors import CoevolveError, DataError
from coevolve.prompts import Prompter
from coevolve.world.toy import (
    CAUSES,
    LEVELS,
    ToyPrompter,
    build_tokenizer,
    cause_by_text,
    explain_divergence,
    features,
    heldout_tasks,
    make_problem,
    oracle,
    parse_toy_question,
    problem_for_causes,
    sample_tasks,
    shows_cause,
)
from coevolve.world.toy.causes import parse_trace
from coevolve.world.toy.pretrain import MixConfig, _microbatches, build_base, ensure_base, sample_example
from coevolve.world.toy.problems import WORLD_VERSION, heldout_questions


def _c(steps: list[str], ans: str) -> str:
    return "<think>" + " ".join(steps) + "</think>\\boxed{" + ans + "}"


# ------------------------------------------------------------------ tokenizer


def test_tokenizer_round_trip_and_special_tokens(tmp_path: Path) -> None:
    tok = build_tokenizer()
    text = "Q:37+58=\nA:<think>7+8=15 3+5+1=9</think>\\boxed{95}"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id == 1
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 2, 3)
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert tok.decode(ids, skip_special_tokens=True) == text  # tags are not "special"
    for tag in ("<think>", "</think>", "<question>", "</question>"):
        one = tok(tag, add_special_tokens=False)["input_ids"]
        assert len(one) == 1 and tok.decode(one) == tag
    assert len(tok(" <thin", add_special_tokens=False)["input_ids"]) == 6  # partial tag: chars
    printable = "".join(chr(i) for i in range(32, 127)) + "\n"
    assert tok.decode(tok(printable, add_special_tokens=False)["input_ids"]) == printable
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    assert tok2(text)["input_ids"] == ids and tok2.padding_side == "left"
    batch = tok2(["1+2", "<question>1+2</question>"], padding=True)["input_ids"]
    assert batch[0][0] == 0 and batch[1][0] == 1  # left padding with <pad>


# ------------------------------------------------------------------ world


@pytest.mark.parametrize("level", LEVELS)
def test_generation_oracle_features_traces(level: int) -> None:
    rng = random.Random(level)
    for t in sample_tasks(rng, 200, levels=[level]):
        f = t.features
        assert f["level"] == level and parse_toy_question(t.question) == t.question
        assert t.answer == oracle(t.question) == str(eval(t.question))  # noqa: S307 (digits and +-* only)
        # the trace evaluates to the oracle answer: every step is true arithmetic, and the
        # answer is what the steps produce
        steps, ans = parse_trace(make_problem(t.question).completion())
        assert ans == t.answer
        for s in steps:
            lhs, rhs = s.split("=")
            assert eval(lhs) == int(rhs)  # noqa: S307
        if level in (2, 3):  # column steps: answer digits = ones digit of each column, top in full
            res = [int(s.split("=")[1]) for s in steps]
            assert int(str(res[-1]) + "".join(str(r % 10) for r in reversed(res[:-1]))) == int(t.answer)
        if level == 4:
            assert f["n_operands"] == 3 and steps[1].startswith(steps[0].split("=")[1])
        if level == 3:
            assert f["carries"] >= 1
        if level == 1:
            assert f["n_steps"] == 1 and len(t.question) == 3


def test_features_specific_cases() -> None:
    f = features("37+58")
    assert f["carries"] == 1 and f["carry_columns"] == [0] and not f["carry_out"]
    f = features("62-38")
    assert f["borrows"] == 1 and not f["borrow_across_zero"]
    assert make_problem("62-38").steps == ("12-8=4", "5-3=2")
    assert features("60-38")["borrow_across_zero"]
    assert features("3*7")["has_product"]
    assert features("41-18+36")["order_matters"] and not features("41+18-36")["order_matters"]
    assert make_problem("41+18-36").steps == ("41+18=59", "59-36=23")
    with pytest.raises(DataError, match="99-100"):
        features("99-100")
    assert issubclass(DataError, CoevolveError)


def test_parse_toy_question_validity_rules() -> None:
    ok = {"3*4": "3*4", " 37+58= ": "37+58", "458+367": "458+367", "41+18-36": "41+18-36", "0+0": "0+0"}
    for s, want in ok.items():
        assert parse_toy_question(s) == want
    bad = [
        "01+55",
        "51-99",
        "451+102",  # leading zero, negative, 3-digit without a carry
        "12-40+3",
        "10-50+60",
        "3*45",
        "12*34",
        "1+2+3",
        "37+58=95",
        "37 + 58",
        "",
        "abc",
        "37+58=\nA:",
    ]
    for s in bad:
        assert parse_toy_question(s) is None, s
    assert oracle("51-99") is None and oracle("999+999") == "1998"


def test_heldout_fixed_balanced_and_disjoint_from_pretraining() -> None:
    h1, h2 = heldout_tasks(), heldout_tasks()
    assert [t.question for t in h1] == [t.question for t in h2]
    assert len(h1) == 500 and len({t.question for t in h1}) == 500
    assert [sum(t.features["level"] == L for t in h1) for L in LEVELS] == [125] * 4
    assert {t.question for t in heldout_tasks(500, seed=7)} != {t.question for t in h1}
    held = heldout_questions()
    rng = random.Random(0)
    seen = set()
    for _ in range(3000):
        kind, prompt, comp = sample_example(rng, MixConfig(), held)
        for q in re.findall(r"(?:Q:|ANCHOR:)([0-9+\-*]+)=", prompt) + re.findall(r"<question>(.*?)</question>", comp):
            seen.add(q)
    assert seen and not (seen & held)
    assert not ({t.question for t in sample_tasks(random.Random(1), 2000, levels=[1])} & held)


def test_pretraining_mix_shares() -> None:
    rng = random.Random(3)
    ex = [sample_example(rng, MixConfig(), heldout_questions()) for _ in range(4000)]
    kinds = [k for k, _, _ in ex]
    solver = [c for k, _, c in ex if k == "solver"]
    direct = sum(c.startswith("<think></think>") for c in solver) / len(solver)
    assert 0.45 < direct < 0.55
    assert 0.12 < kinds.count("questioner") / len(ex) < 0.18
    assert 0.03 < kinds.count("challenger") / len(ex) < 0.07
    tok = build_tokenizer()
    longest = max(len(tok(p + c)["input_ids"]) + 1 for k, p, c in ex if k == "solver")  # + EOS
    assert longest <= 56  # short like the prototype (~52): pretraining cost grows with length
    mbs = _microbatches([([0] * n, 1) for n in [10] * 20 + [50] * 3])
    assert [len(m) for m in mbs] == [20, 3]


# ------------------------------------------------------------------ causes


def test_cause_catalogue_and_problems_for_causes() -> None:
    assert {c.skill for c in CAUSES.values()} >= {"addition", "subtraction", "multiplication", "multi-step"}
    for cid, c in CAUSES.items():
        assert c.id == cid and cause_by_text(c.text) == c and not re.search(r"\d", c.text)
    rng = random.Random(0)
    for cid in CAUSES:
        p = problem_for_causes(rng, [CAUSES[cid].text])
        assert shows_cause(cid, p.features), cid
    p = problem_for_causes(rng, ["carry_dropped", "forgot_borrow"])
    assert p.features["carries"] >= 1 and p.features["borrows"] >= 1 and p.level == 4
    p = problem_for_causes(rng, ["single_product", "forgot_borrow"])  # incompatible: first wins
    assert p.features["has_product"]
    with pytest.raises(DataError, match="no such cause"):
        shows_cause("no such cause", {})


@pytest.mark.parametrize(
    "question,bad,good,cause,step",
    [
        ("37+58", _c(["7+8=15", "3+5=8"], "85"), _c(["7+8=15", "3+5+1=9"], "95"), "carry_dropped", 1),
        (
            "458+367",
            _c(["8+7=15", "5+6+1=12", "4+3=7"], "725"),
            _c(["8+7=15", "5+6+1=12", "4+3+1=8"], "825"),
            "carry_dropped",
            2,
        ),
        ("47+18-36", _c(["47+18=55", "55-36=19"], "19"), _c(["47+18=65", "65-36=29"], "29"), "carry_dropped", 0),
        ("37+58", _c([], "85"), _c(["7+8=15", "3+5+1=9"], "95"), "guessed", 0),
        ("62-38", _c(["2-8=6", "6-3=3"], "36"), _c(["12-8=4", "5-3=2"], "24"), "forgot_borrow", 0),
        ("62-38", _c(["12-8=4", "6-3=3"], "34"), _c(["12-8=4", "5-3=2"], "24"), "borrow_not_repaid", 1),
        ("60-38", _c(["8-0=8", "6-3=3"], "38"), _c(["10-8=2", "5-3=2"], "22"), "borrow_across_zero", 0),
        ("3*7", _c(["3*7=24"], "24"), _c(["3*7=21"], "21"), "single_product", 0),
        ("37+58", _c(["7+8=14", "3+5+1=9"], "94"), _c([], "95"), "single_sum", 0),
        ("41-18+36", _c(["18+36=54", "41-54=0"], "0"), _c(["41-18=23", "23+36=59"], "59"), "op_order", 0),
        ("41+18-36", _c(["41+18=59", "58-36=22"], "22"), _c(["41+18=59", "59-36=23"], "23"), "wrong_intermediate", 1),
        ("37+58", _c(["7+8=15", "3+5+1=9"], "96"), _c(["7+8=15", "3+5+1=9"], "95"), "answer_mismatch", 1),
        ("37+58", _c(["7+8=15", "3+6+1=10"], "105"), _c(["7+8=15", "3+5+1=9"], "95"), "misread", 1),
    ],
)
def test_explain_divergence(question: str, bad: str, good: str, cause: str, step: int) -> None:
    d = explain_divergence(question, bad, good)
    assert d is not None and (d.cause_id, d.step) == (cause, step)
    assert d.cause == CAUSES[cause].text and d.skill == CAUSES[cause].skill
    assert d.good_step  # the right step is always reported (from the correct trace if needed)


def test_explain_divergence_none_cases() -> None:
    same = _c(["7+8=15", "3+5+1=9"], "95")
    assert explain_divergence("37+58", same, same) is None
    assert explain_divergence("01+55", same, same) is None
    assert explain_divergence("37+58", "no answer at all", same) is None
    assert explain_divergence("37+58", _c([], "95"), same) is None  # direct but right


# ------------------------------------------------------------------ prompter


def test_toy_prompter_formats() -> None:
    p = ToyPrompter()
    assert isinstance(p, Prompter)
    assert p.solver("37+58") == p.solver("37+58=") == "Q:37+58=\nA:"
    assert p.questioner("37+58", "95", 59.6) == "ANCHOR:37+58=95 D:60\nNEW:"
    with pytest.raises(DataError, match="difficulty"):
        p.questioner("37+58", "95", 130)
    assert p.challenger([]) == "NEW:"
    c1, c2 = CAUSES["carry_dropped"].text, CAUSES["forgot_borrow"].text
    assert p.challenger([c1]) == f"FOCUS:{c1}\nNEW:"
    assert p.challenger([c1, c2]) == f"FOCUS:{c1}\nFOCUS:{c2}\nNEW:"
    assert p.parse_question("<question>41+29</question>") == "41+29"
    assert p.parse_question("<question> 41+29= </question>") == "41+29"
    for bad in [
        "41+29",
        "<question>51-99</question>",
        "<question>41+29</question><question>3+4</question>",
        "<question>41+29",
        "<question>01+29</question>",
        "<question><question>41+29</question>",
    ]:
        assert p.parse_question(bad) is None, bad
    from coevolve.world.toy.world import ToyWorld

    assert ToyWorld().oracle("41+29") == "70" and ToyWorld().oracle("hello") is None


# ------------------------------------------------------------------ build


@pytest.mark.slow  # a 30-step pretraining run
def test_build_base_smoke_saves_reloads_generates(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    out = build_base(tmp_path / "m", steps=30, seed=0, batch_size=32, progress=False, eval_heldout=8, eval_samples=2)
    info = json.loads((out / "toy_build.json").read_text())
    assert info["steps"] == 30 and 500_000 < info["n_params"] < 600_000
    assert info["loss_every_50"][0] < 4.7  # below the uniform-guess loss ln(104)
    assert {"greedy", "sampled", "band_share_0.2_0.8", "direct_share", "questioner_valid"} <= set(info["figures"])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.generation_config.eos_token_id == 2 and model.generation_config.pad_token_id == 0
    enc = tok([ToyPrompter().solver("3+4"), ToyPrompter().solver("37+58")], return_tensors="pt", padding=True)
    gen = model.generate(**enc, max_new_tokens=8, do_sample=False)  # (2, T + 8)
    assert gen.shape[0] == 2 and gen.shape[1] > enc["input_ids"].shape[1]
    # cache: a pre-existing complete entry is reused, not rebuilt
    cache = tmp_path / "cache"
    target = cache / f"base-w{WORLD_VERSION}-steps30-seed0"
    import shutil

    shutil.copytree(out, target)
    assert ensure_base(cache, steps=30, seed=0) == target
