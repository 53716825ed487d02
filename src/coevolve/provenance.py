"""What a run was made with: coevolve's version and git commit, the libraries that decide its
results (torch, transformers, TRL, vLLM, ...), Python, CUDA and the machine.

``coevolve env`` prints it (as ``trl env`` does), ``coevolve --version`` prints the first line,
and every run folder (``provenance.json``) and checkpoint (``coevolve.json``) records it, so a
result can be traced to the code and libraries that produced it. Library versions are read
from the installed distributions' metadata (``importlib.metadata``), so an optional library
that is not installed costs nothing and is reported as such.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from coevolve import __version__
from coevolve.run.files import atomic_write_json

PROVENANCE_FILE = "provenance.json"
"""In every run folder: the environment that created it, and one entry per resume."""

LIBRARIES = (
    "torch",
    "transformers",
    "accelerate",
    "trl",
    "peft",
    "vllm",
    "verl",
    "ray",
    "datasets",
    "huggingface_hub",
    "tokenizers",
    "safetensors",
    "math-verify",
    "sentence-transformers",
    "scipy",
    "numpy",
    "pydantic",
)
"""The distributions whose versions can change a run's numbers or what it can do."""


def library_versions() -> dict[str, str | None]:
    """Installed version of each of ``LIBRARIES`` (None when it is not installed)."""
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(package_dir: Path | None = None) -> dict[str, Any] | None:
    """The commit of the git checkout coevolve is imported from (and whether it has uncommitted
    changes to tracked files), or None for an installed wheel, a missing git or any other repo:
    a checkout is only counted when its top folder is the one holding ``src/coevolve`` (a venv
    inside a user's own repository must not report the user's commit as coevolve's)."""
    pkg = (package_dir or Path(__file__).parent).resolve()
    repo = pkg.parent.parent  # <repo>/src/coevolve

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(pkg), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != repo:
        return None
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", str(pkg))
    return {"commit": commit, "dirty": bool(status), "branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def device_info() -> dict[str, Any]:
    """CUDA and the accelerators torch sees (torch is a core dependency; its import is the cost)."""
    import torch

    info: dict[str, Any] = {"cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "gpus": []}
    if info["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["gpus"].append({"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1)})
    info["torch_threads"] = torch.get_num_threads()
    return info


@lru_cache(maxsize=1)
def _process_environment() -> dict[str, Any]:
    return {
        "coevolve": __version__,
        "git": git_commit(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "libraries": library_versions(),
        **device_info(),
    }


def environment() -> dict[str, Any]:
    """Everything ``coevolve env`` prints, as one JSON-able dict with the time it was taken
    (the rest is read once per process: a run saving many checkpoints asks git once)."""
    return {**_process_environment(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def record_provenance(run_dir: Path, created: bool) -> dict[str, Any]:
    """Write ``run_dir/provenance.json``: the environment that created the run, and one entry
    per resume appended (a run resumed under other library versions says so). Returns the
    environment recorded now."""
    env = environment()
    f = Path(run_dir) / PROVENANCE_FILE
    data: dict[str, Any] = {"created": env, "resumed": []}
    if not created and f.is_file():
        try:
            old = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a damaged record is replaced, never a reason to stop a resume
            old = None
        if isinstance(old, dict) and isinstance(old.get("resumed"), list):
            data = {"created": old.get("created"), "resumed": [*old["resumed"], env]}
    elif not created:  # a run made before this record existed: its creator is unknown
        data = {"created": None, "resumed": [env]}
    atomic_write_json(f, data)
    return env


def format_environment(env: dict[str, Any]) -> str:
    """``coevolve env``'s text: one ``- name: value`` line each, ready to paste into a bug report."""
    g = env.get("git")
    lines = [
        f"- coevolve version: {env['coevolve']}",
        "- coevolve git commit: "
        + (f"{g['commit']}{' (uncommitted changes)' if g['dirty'] else ''} on {g['branch']}" if g else "none"),
        f"- Python version: {env['python']} ({env['executable']})",
        f"- Platform: {env['platform']} ({env['machine']}, {env['cpus']} CPUs, {env['torch_threads']} torch threads)",
        f"- CUDA: {env['cuda'] or 'none'}"
        + (
            "; GPUs: " + ", ".join(f"{d['name']} ({d['memory_gib']} GiB)" for d in env["gpus"])
            if env["gpus"]
            else "; no GPU available"
        ),
    ]
    lines += [f"- {name}: {v or 'not installed'}" for name, v in env["libraries"].items()]
    return "\n".join(lines)


__all__ = [
    "LIBRARIES",
    "PROVENANCE_FILE",
    "environment",
    "format_environment",
    "git_commit",
    "library_versions",
    "record_provenance",
]
