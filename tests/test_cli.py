"""CLI: bad input gives one clear message and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "coevolve", *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_malformed_config_is_clear(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("recipe: grpo\nsolver:\n  steps: many\n")
    r = cli("run", "grpo", "--config", str(p), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2
    assert "solver.steps" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_unknown_override_is_clear(tmp_path):
    r = cli("run", "grpo", "solver.stepz=3", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "solver.stepz" in r.stderr and "Traceback" not in r.stderr


def test_missing_model_path_is_clear(tmp_path):
    r = cli("run", "grpo", f"model.path={tmp_path / 'no_such_model'}", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2, r.stderr
    assert "no_such_model" in r.stderr and "Traceback" not in r.stderr + r.stdout


def test_resume_non_run_folder(tmp_path):
    r = cli("resume", str(tmp_path))
    assert r.returncode == 2 and "not a coevolve run folder" in r.stderr


def test_config_print_roundtrip(tmp_path):
    r = cli("config", "grpo", "solver.steps=3")
    assert r.returncode == 0 and "steps: 3" in r.stdout
    p = tmp_path / "c.yaml"
    p.write_text(r.stdout)
    r2 = cli("config", "grpo", "--config", str(p))
    assert r2.stdout == r.stdout


def test_grade_exit_codes():
    assert cli("grade", "1/2", "\\boxed{0.5}").returncode == 0
    assert cli("grade", "3", "\\boxed{4}").returncode == 1


def test_config_describe():
    r = cli("config", "grpo", "solver.steps=5", "--describe")
    assert r.returncode == 0, r.stderr
    assert "\nsolver.steps = 5  (int)" in r.stdout and "\n    " in r.stdout  # value, type, then description
