"""coevolve.world.real, directly: a real model's labelled questions (JSONL rows, broken rows
reported), the seeded draws and pools over a fixed set, the benchmark questions kept out of
generated pools, and the world a config builds."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.curriculum.buffer import normalize_question
from coevolve.errors import ConfigError, DataError
from coevolve.types import Task
from coevolve.world.real import RealWorld, benchmark_questions, draw_from, load_labelled, pool_from

MATH6 = Path(__file__).resolve().parent / "data" / "math_train12k_6.jsonl"


def _tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", f"{i}+{i}=", str(2 * i)) for i in range(n)]


def test_draw_from_is_distinct_while_the_set_lasts_then_repeats() -> None:
    tasks = _tasks(5)
    a = draw_from(tasks, random.Random(1), 3)
    assert len({t.id for t in a}) == 3 and [t.id for t in a] == [t.id for t in draw_from(tasks, random.Random(1), 3)]
    many = draw_from(tasks, random.Random(2), 12)
    counts = Counter(t.id for t in many)
    assert len(many) == 12 and set(counts) == {t.id for t in tasks}  # every question once before any repeat
    assert {t.id for t in many[:5]} == {t.id for t in tasks}
    assert draw_from(tasks, random.Random(2), 12) == many


def test_pool_from_is_seeded_and_has_distinct_texts() -> None:
    tasks = _tasks(6) + [Task("dup", " 0 +0=", "0")]  # the same question as t0 up to case and spaces
    everything = pool_from(tasks, random.Random(0), None)
    assert [t.id for t in everything] == [f"t{i}" for i in range(6)]
    part = pool_from(tasks, random.Random(3), 4)
    assert len(part) <= 4 and len({normalize_question(t.question) for t in part}) == len(part)
    assert part == pool_from(tasks, random.Random(3), 4) and part != pool_from(tasks, random.Random(4), 4)
    assert [t.id for t in pool_from(tasks, random.Random(0), 100)] == [t.id for t in everything]


def _data(source: Path, **kw):
    return load_config("grpo", None, [f"data.source={source}", *(f"data.{k}={v}" for k, v in kw.items())]).data


def test_load_labelled_reports_broken_rows(tmp_path: Path) -> None:
    rows = [json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(3)]
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(rows[:1] + ["{broken"] * 23 + rows[1:]) + "\n")
    said: list[str] = []
    tasks = load_labelled(_data(p, on_error="skip"), said.append)
    assert [t.question for t in tasks] == ["q0", "q1", "q2"]
    assert sum(m.startswith("[data] skipped: ") for m in said) == 20  # the first 20 broken rows by name
    assert "[data] ... and 3 more broken rows" in said
    assert said[-1] == f"[data] 3 questions from {p} (23 broken rows skipped)"
    with pytest.raises(DataError, match=r"d.jsonl:2"):  # on_error=raise (default): the first broken line named
        load_labelled(_data(p), said.append)
    empty = tmp_path / "e.jsonl"
    empty.write_text("{broken\n")
    with pytest.raises(DataError, match="no usable rows"):
        load_labelled(_data(empty, on_error="skip"), said.append)


def test_load_labelled_reads_real_rows_with_other_keys(tmp_path: Path) -> None:
    tasks = load_labelled(_data(MATH6, limit=4), lambda m: None)
    assert len(tasks) == 4 and tasks[0].answer == "0" and tasks[0].id == "train/algebra/0.json"
    p = tmp_path / "k.jsonl"
    p.write_text(json.dumps({"problem": "1+1", "solution_short": "2"}) + "\n")
    tasks = load_labelled(_data(p, question_key="problem", answer_key="solution_short"), lambda m: None)
    assert [(t.question, t.answer) for t in tasks] == [("1+1", "2")]


def test_benchmark_questions_are_normalised_and_missing_data_is_skipped(tmp_path: Path) -> None:
    from coevolve.eval.benchmarks import load_tasks

    math500 = benchmark_questions(["math500"], None)  # shipped with the package
    assert len(math500) == 500
    first = load_tasks("math500", None, limit=1)[0]
    assert normalize_question(first.question) in math500 and first.question not in math500
    assert benchmark_questions(["gpqa_diamond"], tmp_path) == frozenset()  # no local copy: nothing can leak


def test_world_from_config(tmp_path: Path) -> None:
    cfg = load_config(
        "grpo", None, [f"data.source={MATH6}", "model.path=/models/some-real-model", "eval.benches=[math500]"]
    )
    said: list[str] = []
    world = RealWorld.from_config(cfg, None, said.append)
    assert len(world.tasks) == 6 and world.source == str(MATH6) and any("6 questions" in m for m in said)
    assert [t.id for t in world.draw(random.Random(0), 6)] != [] and len(world.pool(random.Random(0), None)) == 6
    assert len(world.excluded()) == 500 and world.excluded() is world.excluded()  # loaded once
    assert world.oracle("1+1") is None and world.bench_tasks("math500", None, 3) is None
    with pytest.raises(ConfigError, match="diagnoser.kind=trace needs the toy world"):
        world.trace_diagnoser()
    off = RealWorld.from_config(
        load_config("grpo", None, [f"data.source={MATH6}", "data.exclude_heldout=false", "model.path=/m"]),
        None,
        lambda m: None,
    )
    assert off.excluded() == frozenset()
    label_free = RealWorld.from_config(load_config("diagevo", None, ["model.path=/m"]), None, lambda m: None)
    assert label_free.tasks == []
    with pytest.raises(ConfigError, match="data.source: this recipe needs labelled questions"):
        label_free.draw(random.Random(0), 1)
