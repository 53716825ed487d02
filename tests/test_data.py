"""JSONL loading: broken rows are reported with file and line, refused or skipped."""

from __future__ import annotations

import gzip
import json

import pytest

from coevolve.data.sources import load_tasks
from coevolve.errors import DataError


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")


def test_load_good_and_gz(tmp_path):
    rows = [{"id": "a", "question": "1+1?", "answer": "2", "level": 1}, {"question": "2+2?", "answer": 4}]
    p = tmp_path / "d.jsonl.gz"
    with gzip.open(p, "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    tasks, rep = load_tasks(p)
    assert [t.answer for t in tasks] == ["2", "4"]
    assert tasks[0].features == {"level": 1}
    assert rep.loaded == 2 and not rep.problems


def test_broken_rows_named_by_line(tmp_path):
    p = tmp_path / "d.jsonl"
    _write(
        p,
        [
            '{"question": "q1", "answer": "1"}',
            "{not json",
            '{"question": "", "answer": "1"}',
            "[1, 2]",
            '{"question": "q5"}',
        ],
    )
    with pytest.raises(DataError, match=r"d.jsonl:2: not valid JSON"):
        load_tasks(p)
    tasks, rep = load_tasks(p, on_error="skip")
    assert len(tasks) == 1
    assert [pr.split(":")[1] for pr in [x.replace(str(p), "F") for x in rep.problems]] == ["2", "3", "4", "5"]
    assert "'answer' is missing" in rep.problems[-1]


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_tasks(tmp_path / "nope.jsonl")


def test_real_math_train_rows():
    """The first rows of MATH train (as the offline copy stores them: id, question, answer,
    solution, subject, level, source), shipped in tests/data."""
    from pathlib import Path

    p = Path(__file__).resolve().parent / "data" / "math_train12k_6.jsonl"
    tasks, rep = load_tasks(p, limit=5)
    assert len(tasks) == 5 and all(t.answer for t in tasks) and rep.problems == []
    assert tasks[0].id == "train/algebra/0.json" and tasks[0].answer == "0" and tasks[0].question.startswith("Let")


def test_one_bad_byte_costs_one_line_not_the_file(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(
        b'{"question": "q1", "answer": "1"}\n{"question": "q\xff2", "answer": "2"}\n{"question": "q3", "answer": "3"}\n'
    )
    with pytest.raises(DataError, match=r"d.jsonl:2: not UTF-8"):
        load_tasks(p)
    tasks, rep = load_tasks(p, on_error="skip")
    assert [t.question for t in tasks] == ["q1", "q3"] and len(rep.problems) == 1 and ":2:" in rep.problems[0]


def test_truncated_gzip_and_folder_are_clear_errors(tmp_path):
    p = tmp_path / "d.jsonl.gz"
    blob = gzip.compress(
        b"".join(json.dumps({"question": f"q{i}", "answer": str(i)}).encode() + b"\n" for i in range(2000))
    )
    p.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="truncated"):
        load_tasks(p, on_error="skip")
    with pytest.raises(DataError, match="folder"):
        load_tasks(tmp_path)
