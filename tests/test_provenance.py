"""Provenance: ``coevolve --version``, ``coevolve env`` and the record every run folder keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import coevolve
from coevolve.provenance import PROVENANCE_FILE, git_commit, record_provenance

SRC = str(Path(__file__).resolve().parents[1] / "src")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "coevolve", *args], capture_output=True, text=True, env=env)


def test_version_flag():
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"coevolve {coevolve.__version__}"


def test_env_names_the_libraries_and_the_commit():
    r = cli("env")
    assert r.returncode == 0, r.stderr
    assert f"- transformers: {metadata.version('transformers')}" in r.stdout
    assert f"- torch: {metadata.version('torch')}" in r.stdout and "- CUDA: " in r.stdout
    env = json.loads(cli("env", "--json").stdout)
    assert env["coevolve"] == coevolve.__version__
    assert set(env) >= {"git", "python", "platform", "cpus", "cuda", "gpus", "libraries", "time"}


def _repo(tmp: Path) -> Path:
    pkg = tmp / "src" / "coevolve"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("a = 1\n")
    git = ["git", "-C", str(tmp), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return pkg


def test_git_commit_of_a_checkout_and_not_of_a_foreign_repo(tmp_path):
    pkg = _repo(tmp_path / "checkout")
    g = git_commit(pkg)
    head = subprocess.run(["git", "-C", str(pkg), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert g is not None and g["commit"] == head and not g["dirty"]
    (pkg / "x.py").write_text("a = 2\n")
    assert git_commit(pkg)["dirty"]
    # a package installed somewhere inside a user's own repository is not that repository's code
    other = _repo(tmp_path / "user_repo")
    nested = other / "venv" / "site-packages" / "coevolve"
    nested.mkdir(parents=True)
    assert git_commit(nested) is None
    assert git_commit(tmp_path / "not_a_repo" / "coevolve") is None


def test_record_provenance_keeps_the_creator_and_appends_resumes(tmp_path):
    record_provenance(tmp_path, created=True)
    first = json.loads((tmp_path / PROVENANCE_FILE).read_text())
    assert first["resumed"] == [] and first["created"]["libraries"]["torch"] == metadata.version("torch")
    record_provenance(tmp_path, created=False)
    record_provenance(tmp_path, created=False)
    data = json.loads((tmp_path / PROVENANCE_FILE).read_text())
    assert data["created"] == first["created"] and len(data["resumed"]) == 2
    # a run folder made before the record existed: the creator is unknown, the resume is recorded
    (tmp_path / PROVENANCE_FILE).unlink()
    record_provenance(tmp_path, created=False)
    data = json.loads((tmp_path / PROVENANCE_FILE).read_text())
    assert data["created"] is None and len(data["resumed"]) == 1
