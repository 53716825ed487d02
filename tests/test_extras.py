"""Every optional extra a config needs is checked before the run folder is made or any model is
built: one line naming the field, the extra and the pip command (exit 2), nothing written. Each
extra's module is made unimportable by setting it to ``None`` in ``sys.modules``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from coevolve.cli import main
from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.extras import check_extras, have
from coevolve.models import default_cache_dir

CASES = [  # (recipe, overrides, absent module, the field and extra the message names)
    ("diagevo", [], "sentence_transformers", "memory.embedder=minilm needs the 'embed' extra"),
    ("grpo", ["run.trackers=[jsonl,tensorboard]"], "tensorboard", "run.trackers=tensorboard needs the 'track' extra"),
    ("grpo", ["run.trackers=[jsonl,wandb]"], "wandb", "run.trackers=wandb needs the 'track' extra"),
    ("grpo", ["learner.lora=true"], "peft", "learner.lora=true needs the 'lora' extra"),
]


def _cli(args, monkeypatch, capsys) -> tuple[int, str]:
    """``coevolve ARGS`` as the console runs it (main maps a CoevolveError to exit 2)."""
    monkeypatch.setattr(sys, "argv", ["coevolve", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out + out.err


def _hide(monkeypatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    assert not have(module)


@pytest.mark.parametrize("recipe,overrides,module,said", CASES)
def test_missing_extra_refused_before_the_folder(tmp_path, monkeypatch, capsys, recipe, overrides, module, said):
    _hide(monkeypatch, module)
    rd = tmp_path / "run"
    rc, out = _cli(["run", recipe, *overrides, "--run-dir", str(rd)], monkeypatch, capsys)
    assert rc == 2 and said in out and "pip install 'coevolve[" in out, out
    assert len([ln for ln in out.splitlines() if ln.strip()]) == 1
    assert not rd.exists()


def test_with_the_extra_present_nothing_is_refused():
    check_extras(load_config("grpo", None, ["learner.lora=true"]))  # peft is installed in the test env


@pytest.mark.parametrize("kind,module,extra", [("parquet", "pyarrow", "datasets"), ("disk", "datasets", "datasets")])
def test_data_source_extras(tmp_path, monkeypatch, kind, module, extra):
    if kind == "parquet":
        src = tmp_path / "train.parquet"
        src.write_bytes(b"PAR1")
    else:
        src = tmp_path / "ds"
        src.mkdir()
        (src / "dataset_info.json").write_text("{}")
    cfg = load_config("grpo", None, [])
    cfg.data.source = str(src)
    _hide(monkeypatch, module)
    with pytest.raises(ConfigError, match=rf"data.source=.* needs the '{extra}' extra .*coevolve\[{extra}\]"):
        check_extras(cfg)


def test_verl_extra(monkeypatch):
    cfg = load_config("grpo", None, [])
    cfg.backend.kind = "verl"
    _hide(monkeypatch, "pyarrow")
    with pytest.raises(ConfigError, match=r"backend.kind=verl needs the 'verl' extra"):
        check_extras(cfg)


def test_models_extra_before_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    cfg = load_config("grpo", None, [])
    cfg.model.path = str(default_cache_dir() / "smollm2-135m-instruct")
    _hide(monkeypatch, "gguf")
    with pytest.raises(ConfigError, match=r"model.path=.* needs the 'models' extra"):
        check_extras(cfg)
    assert not Path(cfg.model.path).exists()  # nothing was built


def test_eval_engine_vllm_without_vllm(monkeypatch, capsys):
    _hide(monkeypatch, "vllm")
    rc, out = _cli(["eval", "--model", "toy", "--engine", "vllm"], monkeypatch, capsys)
    assert rc == 2 and "pip install 'coevolve[vllm]'" in out, out


@pytest.mark.parametrize(
    "args,said",
    [
        (["eval", "--model", "toy", "--samples", "-5"], "--samples must be"),
        (["eval", "--model", "toy", "--compare", "a"], "--compare only reads result folders; --model"),
        (["eval", "--endpoint", "http://localhost:1/v1", "--engine", "hf"], "--engine hf with --endpoint"),
        (["run", "toy", "run.preflight=refuse", "--force"], "--force means run.preflight=warn"),
    ],
)
def test_contradicting_flags_refused(monkeypatch, capsys, args, said):
    rc, out = _cli(args, monkeypatch, capsys)
    assert rc == 2 and said in out, out


def test_eval_with_every_benchmark_skipped_exits_nonzero(tmp_path, monkeypatch, capsys):
    from coevolve import evaluate
    from coevolve.eval import suite

    monkeypatch.setattr(
        evaluate, "evaluate_model", lambda *a, **k: {"benchmarks": {}, "skipped": {"gpqa": "absent"}, "averages": {}}
    )
    monkeypatch.setattr(suite, "format_table", lambda r: "")
    rc, out = _cli(["eval", "--model", str(tmp_path), "--out", str(tmp_path / "o")], monkeypatch, capsys)
    assert rc == 3 and "every benchmark was skipped" in out, out
