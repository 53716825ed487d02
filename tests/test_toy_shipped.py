"""The shipped toy base: copied (not built) by ensure_base, every file hash-checked, no tracked
part over 2 MB, and a damaged install stops with the file named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from coevolve.errors import ModelLoadError
from coevolve.world.toy import pretrain
from coevolve.world.toy.pretrain import SHIPPED_BASE, SHIPPED_FILES, copy_shipped_base, ensure_base, ship_base
from coevolve.world.toy.problems import WORLD_VERSION


def test_shipped_parts_under_2mb():
    files = [p for p in SHIPPED_BASE.iterdir() if p.is_file()]
    assert files and all(p.stat().st_size <= 2 * 1024 * 1024 for p in files)


def test_default_base_is_copied_not_built(tmp_path, monkeypatch):
    def no_build(*a, **k):
        raise AssertionError("the default base must come from the package, not be built")

    monkeypatch.setattr(pretrain, "build_base", no_build)
    got = ensure_base(tmp_path, steps=600, seed=0)
    assert got == tmp_path / f"base-w{WORLD_VERSION}-steps600-seed0"
    assert {p.name for p in got.iterdir()} >= set(SHIPPED_FILES)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(got)
    assert sum(p.numel() for p in model.parameters()) == 538368


def test_damaged_shipped_file_is_named(tmp_path):
    src = tmp_path / "ship"
    shutil.copytree(SHIPPED_BASE, src)
    part = src / "model.safetensors.part1"
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="model.safetensors: sha256"):
        copy_shipped_base(tmp_path / "out", src)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_ship_then_copy_round_trips(tmp_path):
    built = copy_shipped_base(tmp_path / "a")
    ship_base(built, tmp_path / "ship")
    again = copy_shipped_base(tmp_path / "b", tmp_path / "ship")
    for name in SHIPPED_FILES:
        assert (again / name).read_bytes() == (Path(built) / name).read_bytes()
