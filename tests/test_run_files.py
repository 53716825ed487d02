"""coevolve.run.files, directly: atomic writes (old or new content, never half; no temp file after
a failed write; the temp file a killed writer leaves is the one ``Run.open`` removes) and the
JSON encoding every run artefact goes through."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from coevolve import faults
from coevolve.run import Run
from coevolve.run.files import TMP_SUFFIX, atomic_write_json, atomic_write_jsonl, atomic_write_text, json_line, to_json

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_atomic_write_creates_folders_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a" / "b" / "x.txt"
    atomic_write_text(target, "first\n")
    atomic_write_text(target, "second ünïcode\n")
    assert target.read_text(encoding="utf-8") == "second ünïcode\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.txt"]


def test_a_failed_write_keeps_the_old_content_and_removes_its_temp_file(tmp_path):
    target = tmp_path / "state.json"
    atomic_write_json(target, {"v": 1})
    faults.configure("write:1:enospc")  # the temp file is complete, the rename has not happened
    try:
        with pytest.raises(OSError, match="No space left on device"):
            atomic_write_json(target, {"v": 2})
    finally:
        faults.configure(None)
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_writer_killed_before_the_rename_leaves_a_temp_file_that_run_open_removes(tmp_path):
    """SIGKILL between the complete temp file and the rename (a real process, the fault hook):
    the target keeps its old content, and the orphan is named as ``Run.open`` expects."""
    run = Run.create(tmp_path / "r", "recipe: grpo\n", "grpo", say=lambda m: None)
    target = run.path / "round_01" / "pool.jsonl"
    atomic_write_jsonl(target, [{"old": True}])
    code = "import sys; from coevolve.run.files import atomic_write_text as w; w(sys.argv[1], 'new content')"
    env = {**os.environ, "PYTHONPATH": SRC, faults.ENV: "write:1:kill"}
    p = subprocess.run([sys.executable, "-c", code, str(target)], env=env, capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    orphans = [f for f in target.parent.iterdir() if f.name != "pool.jsonl"]
    assert len(orphans) == 1 and orphans[0].name.startswith(".pool.jsonl.") and orphans[0].name.endswith(TMP_SUFFIX)
    assert orphans[0].read_text() == "new content" and json.loads(target.read_text()) == {"old": True}
    Run.open(run.path)
    assert [f.name for f in target.parent.iterdir()] == ["pool.jsonl"]


@dataclass
class _Rec:
    a: int
    b: tuple[int, int]


class _WithToDict:
    def to_dict(self) -> dict:
        return {"kind": "record"}


def test_json_encoding_of_run_records():
    row = {
        "dc": _Rec(1, (2, 3)),
        "td": _WithToDict(),
        "np": np.float32(0.5),
        "npi": np.int64(7),
        "t": torch.tensor(2.5),
        "set": {3},
        "tuple": (1, 2),
        "path": Path("a/b"),
        "text": "ü",
    }
    line = json_line(row)
    assert line.endswith("\n") and line.count("\n") == 1 and "ü" in line  # one line, not ASCII-escaped
    assert json.loads(line) == {
        "dc": {"a": 1, "b": [2, 3]},
        "td": {"kind": "record"},
        "np": 0.5,
        "npi": 7,
        "t": 2.5,
        "set": [3],
        "tuple": [1, 2],
        "path": "a/b",
        "text": "ü",
    }
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        to_json(object())
    with pytest.raises(TypeError):
        json_line({"cls": _Rec})  # a class is no record


def test_jsonl_and_json_round_trip(tmp_path):
    rows = [{"i": i, "x": [i, None]} for i in range(3)]
    atomic_write_jsonl(tmp_path / "r.jsonl", rows)
    assert [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()] == rows
    atomic_write_jsonl(tmp_path / "empty.jsonl", [])
    assert (tmp_path / "empty.jsonl").read_text() == ""
    atomic_write_json(tmp_path / "s.json", {"k": _Rec(0, (1, 1))})
    assert (
        tmp_path / "s.json"
    ).read_text() == '{\n  "k": {\n    "a": 0,\n    "b": [\n      1,\n      1\n    ]\n  }\n}\n'
