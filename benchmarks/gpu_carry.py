"""Prepare, on a machine with a package registry, what ``benchmarks/gpu_check.py`` needs on a GPU
machine that has none: a folder (default ``.gpu_carry/``, git-ignored) holding

  wheels/   the requirements of coevolve the GPU image lacks, for CPython 3.12 manylinux x86_64:
            pydantic, pydantic-core, annotated-types, typing-inspection, typing-extensions (the
            configs), math-verify, latex2sympy2_extended, antlr4-python3-runtime (the grader); at
            the versions installed here, so the set is one that resolves together
  cache/    the built toy base (``$COEVOLVE_CACHE/toy/...``, ~2.5 MB without its eval cache), so
            the recipes part does not build it on the GPU machine's CPU (~4 min)

and print each file's size and the total, which must stay under the 64 MiB a device call carries
beside the source tree. Then: ``python3 benchmarks/gpu_check.py --carry .gpu_carry`` there
(docs/gpu.md has the device command).

    python benchmarks/gpu_carry.py [--out .gpu_carry] [--python-version 3.12]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

WHEELS = (
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
    "math-verify",
    "latex2sympy2_extended",
    "antlr4-python3-runtime",
)
CARRY_LIMIT = 64 << 20
"""Bytes a device call may carry besides the tracked source tree (its carried paths together)."""


def pinned() -> list[str]:
    """``name==version`` of each wheel as installed here (a set pip resolved together), or the
    bare name where it is not installed."""
    out = []
    for name in WHEELS:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def download(dest: Path, python_version: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python_version, "--implementation", "cp", "--platform", "manylinux2014_x86_64"]
    cmd += ["-d", str(dest), *pinned()]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def copy_toy_base(cache: Path) -> Path:
    """The built toy base (built here first when missing) copied to ``cache/toy/<its name>``."""
    src_dir = Path(__file__).resolve().parents[1] / "src"
    sys.path.insert(0, str(src_dir))
    from coevolve.world.toy import ensure_base

    base = ensure_base()
    target = cache / "toy" / base.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target, ignore=shutil.ignore_patterns("eval_cache", "*.lock"))
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(".gpu_carry"), help="the folder to fill (default .gpu_carry)")
    ap.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    a = ap.parse_args(argv)
    download(a.out / "wheels", a.python_version)
    print("toy base:", copy_toy_base(a.out / "cache"))
    files = sorted(p for p in a.out.rglob("*") if p.is_file() and "site" not in p.relative_to(a.out).parts)
    for f in files:
        if f.suffix == ".whl":
            print(f"{f.stat().st_size:>12,d}  {f.relative_to(a.out)}")
    wheels = sum(f.stat().st_size for f in files if f.suffix == ".whl")
    total = sum(f.stat().st_size for f in files)
    print(f"{wheels:>12,d}  wheels ({sum(f.suffix == '.whl' for f in files)} files)")
    print(f"{total - wheels:>12,d}  toy base")
    print(
        f"{total:>12,d}  total in {a.out} ({total / (1 << 20):.1f} MiB of the {CARRY_LIMIT >> 20} MiB a device call carries)"
    )
    return 0 if total < CARRY_LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
