"""The warm start (``coevolve model smollm2-arith``): its data, its folder, its recipe file."""

from __future__ import annotations

import doctest
import json
import random

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

import coevolve.world.arith as A
import coevolve.world.arith_steps as S
from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.extras import needed_extras
from coevolve.models import resolve_model_path
from coevolve.warmstart import RECIPE_FILE, WarmStartConfig, _rewrite, build_warm_start, training_problems
from coevolve.world import world_of_model


def test_doctests() -> None:
    assert doctest.testmod(S).failed == 0


def test_worked_answers_end_in_the_oracle_value() -> None:
    cfg = WarmStartConfig(steps=40, batch_size=10)
    questions = [t.question for t in A.ladder_tasks()] + [p["question"] for p in training_problems(cfg)]
    questions += ["What is 17 - 62?", "What is 85 / 7?", "What is 6 × (3 + 4)?", "What is 7 times 8 minus 5 times 6?"]
    for q in questions:
        assert S.worked_answer(q).endswith(f"The answer is \\boxed{{{A.oracle(q)}}}."), q
    assert S.worked_answer("Name a prime.") is None


def test_drift_forms_are_chosen_by_name_and_worked_to_the_oracle_value() -> None:
    """The forms the presets' writers drift to (three-product sums and three-digit chains, where the
    warm start's kept labels were wrong), drawn only when named; the default recipe's draws stay
    those of the built model (warm_start_data.jsonl)."""
    from coevolve.warmstart import DRIFT_FORMS

    new = ["three_products", "hundreds_chain"]
    problems = training_problems(WarmStartConfig(steps=10, batch_size=10, drift_share=1.0, drift_forms=new))
    assert {p["form"] for p in problems} == set(new)
    for p in problems:
        assert S.worked_answer(p["question"]).endswith(f"\\boxed{{{p['answer']}}}."), p
    assert sum(p["question"].count("×") == 3 for p in problems if p["form"] == "three_products") > 0
    default = training_problems(WarmStartConfig(steps=10, batch_size=10, drift_share=1.0))
    assert {p["form"] for p in default} <= {"negative", "three_factors", "sum_of_products", "three_by_one"}
    with pytest.raises(ValueError, match="unknown drift form"):
        WarmStartConfig(drift_forms=["four_products"])
    assert set(DRIFT_FORMS) >= set(WarmStartConfig().drift_forms) | set(new)


def test_training_problems_never_hold_a_heldout_question() -> None:
    """L1's space is small (~500 questions, a third of them held out), so a generator that did not
    exclude the held-out sets would draw many of them here."""
    banned = A.heldout_expressions()
    cfg = WarmStartConfig(steps=20, batch_size=10, levels=[1], drift_share=0.0, variant_share=0.5)
    problems = training_problems(cfg)
    assert len(problems) == 200 and {p["form"] for p in problems} == {"L1"}
    assert not {A.read_expression(p["question"]) for p in problems} & banned
    assert len({A.read_expression(p["question"]) for p in problems}) == 200
    rng = random.Random(0)
    raw = [A.read_expression(A.make_problem(rng, 1).question) for _ in range(200)]
    assert sum(e in banned for e in raw) > 30  # the check has teeth: unfiltered draws hit the held-out sets
    # a held-out question written another way is still held out
    rng = random.Random(1)
    for t in A.heldout_tasks()[:40] + A.ladder_tasks()[:40]:
        assert A.read_expression(_rewrite(t.question, rng)) in banned
    wide = training_problems(WarmStartConfig(steps=30, batch_size=20))
    assert {p["form"] for p in wide} >= {f"L{lv}" for lv in range(1, 9)} and "L9" not in {p["form"] for p in wide}
    assert not {A.read_expression(p["question"]) for p in wide} & banned
    with pytest.raises(ConfigError, match="fewer than 2000 distinct problems"):
        training_problems(WarmStartConfig(steps=100, batch_size=20, levels=[1], drift_share=0.0))


def test_writer_rows_answer_their_request_with_a_question_of_a_training_form() -> None:
    """A writer_share of the rows teach the writer role: a questioner's anchor answered by a question of
    its form and operations, a challenger's free / targeted / stitched request by a question holding the
    operations its causes name; never a held-out question, as question or as anchor."""
    from coevolve.warmstart import CAUSES

    cfg = WarmStartConfig(steps=30, batch_size=20, writer_share=0.5)
    rows = training_problems(cfg)
    writers = [r for r in rows if "role" in r]
    assert 0.4 < len(writers) / len(rows) < 0.6 and {r["role"] for r in writers} == {"questioner", "challenger"}
    banned = A.heldout_expressions()
    ops = lambda q: {op for op in CAUSES if f" {op} " in q}  # noqa: E731
    for r in writers:
        assert A.oracle(r["question"]) == r["answer"] and A.read_expression(r["question"]) not in banned
        if r["role"] == "questioner":
            assert ops(r["anchor"]) == ops(r["question"]) and A.read_expression(r["anchor"]) not in banned
            assert A.oracle(r["anchor"]) == r["anchor_answer"] and 20 <= r["difficulty"] <= 70
        else:
            named = {op for c in r["causes"] for op, causes in CAUSES.items() if c in causes}
            assert len(r["causes"]) == {"free": 0, "targeted": 1, "stitched": 2}[r["kind"]]
            assert named <= ops(r["question"])
    assert {r["kind"] for r in writers if r["role"] == "challenger"} == {"free", "targeted", "stitched"}
    assert "role" not in training_problems(WarmStartConfig(steps=5, batch_size=4))[0]


def test_writer_rows_render_the_presets_writer_prompts(smollm2) -> None:
    """The questioner rows are prompted as the d2evo preset's run prompts them, the challenger rows as
    the diagevo preset's (system text, example turns, chat template), answered by one <question> block."""
    from coevolve.config import load_config
    from coevolve.prompts.chat import ChatPrompter
    from coevolve.warmstart import _rows, _writer_prompter

    tok = AutoTokenizer.from_pretrained(smollm2)
    cfg = WarmStartConfig(steps=4, batch_size=10, writer_share=1.0)
    rows = training_problems(cfg)
    rendered = _rows(rows, ChatPrompter(tok, True), _writer_prompter(cfg, tok), tok)
    run = {
        r: ChatPrompter(tok, True, prompts=load_config(r, [f"smollm2_arith/{r}"], []).prompts)
        for r in ("d2evo", "diagevo")
    }
    for r, out in zip(rows, rendered, strict=True):
        if r["role"] == "questioner":
            assert out["prompt"] == run["d2evo"].questioner(r["anchor"], r["anchor_answer"], r["difficulty"])
        else:
            assert out["prompt"] == run["diagevo"].challenger(r["causes"])
        assert ChatPrompter().parse_question(out["completion"]) == r["question"]
    with pytest.raises(ConfigError, match="give no prompts.questioner"):
        _writer_prompter(WarmStartConfig(writer_presets=["smollm2_arith/diagevo"]), tok)


@pytest.fixture(scope="module")
def tiny(smollm2, tmp_path_factory):
    """A one-layer model with SmolLM2's tokenizer and chat template (seconds to fine-tune)."""
    cfg = AutoConfig.from_pretrained(smollm2)
    cfg.update({"num_hidden_layers": 1, "hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2})
    cfg.update({"num_key_value_heads": 1, "head_dim": 8})
    path = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(cfg).save_pretrained(path)
    AutoTokenizer.from_pretrained(smollm2).save_pretrained(path)
    return path


def test_build_records_its_recipe_and_loads_like_any_model(tiny, tmp_path) -> None:
    cfg = WarmStartConfig(base=str(tiny), steps=3, batch_size=2, warmup_steps=1, seed=5)
    out = build_warm_start(tmp_path / "warm", cfg, say=lambda _: None)
    recipe = json.loads((out / RECIPE_FILE).read_text())
    assert recipe["config"]["steps"] == 3 and recipe["config"]["seed"] == 5 and recipe["config"]["lr"] == 1e-4
    assert recipe["problems"] == 6 and sum(recipe["forms"].values()) == 6 and recipe["seconds"] > 0
    assert len(recipe["loss_log"]) == 1 and recipe["loss_last"] > 0
    data = [json.loads(line) for line in (out / "warm_start_data.jsonl").read_text().splitlines()]
    assert [d["question"] for d in data] == [p["question"] for p in training_problems(cfg)]
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_hidden_layers == 1
    tok = AutoTokenizer.from_pretrained(out)
    world = world_of_model(out, tok)
    assert world.name == "arith" and world.chat_template and world.prompter.prompts.solver.examples == []
    assert not (tmp_path / ".warm.train").exists()  # the trainer's checkpoints are removed
    with pytest.raises(ConfigError, match=r"tokens, over max_length=32 \(the trainer would cut its answer\)"):
        build_warm_start(tmp_path / "short", cfg.model_copy(update={"max_length": 32}), say=lambda _: None)
    assert not (tmp_path / "short").exists()


def test_the_name_stands_for_the_cached_folder_and_needs_trl(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    path = resolve_model_path("smollm2-arith")
    assert path == str(tmp_path / "models" / "smollm2-135m-arith")
    cfg = load_config("grpo", None, [f"model.path={path}", "data.source=arith"])
    assert (f"model.path={path}", "trl", ("trl", "accelerate")) in needed_extras(cfg)
