"""Labelled data and models in the forms the field hands them in (``coevolve.data.sources``,
``coevolve.models.resolve_hub_model``), and every check of them before a run folder exists.

The Hub paths run against a Hugging Face cache folder the test writes (the layout ``hf download``
leaves: ``refs/main`` -> ``snapshots/<hash>/``), never the network.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.config.base import DataConfig
from coevolve.data.sources import check_source, final_answer, load_labelled_tasks, source_kind
from coevolve.errors import ConfigError, DataError
from test_cli import SRC, cli


def cli_env(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {**os.environ, **env, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "coevolve", *args], capture_output=True, text=True, env=full)


def data(source: Path | str, **kw) -> DataConfig:
    return DataConfig(source=str(source), **kw)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def fake_hub_repo(cache: Path, kind: str, repo: str, files: dict[str, bytes]) -> Path:
    """A repo in a Hugging Face cache as ``hf download`` leaves it; returns its snapshot folder."""
    root = cache / f"{kind}s--{repo.replace('/', '--')}"
    snap = root / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    for name, blob in files.items():
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        (snap / name).write_bytes(blob)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(snap.name)
    return snap


def parquet_bytes(columns: dict[str, list]) -> bytes:
    import io

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


# ------------------------------------------------------------------------------ file forms


def test_math_style_keys_are_refused_with_the_keys_to_set(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "math.jsonl", [{"problem": "1+1?", "solution": "It is $\\boxed{2}$.", "level": 1}])
    with pytest.raises(DataError) as e:
        check_source(data(p))
    msg = str(e.value)
    assert "math.jsonl:1: field 'question' is missing" in msg and "level, problem, solution" in msg
    assert "data.question_key=problem" in msg
    with pytest.raises(DataError, match="data.answer_key=solution"):
        check_source(data(p, question_key="problem"))
    (task,), _ = check_source(data(p, question_key="problem", answer_key="solution"))
    assert (task.question, task.answer, task.features) == ("1+1?", "2", {"level": 1})  # the boxed answer, not the text


def test_json_array_csv_parquet_and_gzip_read_alike(tmp_path: Path) -> None:
    rows = [{"question": "2+2?", "answer": "4"}, {"question": "3+3?", "answer": "6"}]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(json.dumps({"data": rows}).encode()))
    (tmp_path / "c.csv").write_text('question,answer\n"2+2?",4\n"3+3?",6\n')
    (tmp_path / "d.parquet").write_bytes(parquet_bytes({"question": ["2+2?", "3+3?"], "answer": ["4", "6"]}))
    for name, kind in (("a.json", "json"), ("b.json.gz", "json"), ("c.csv", "csv"), ("d.parquet", "parquet")):
        assert source_kind(str(tmp_path / name)) == kind
        tasks, report = check_source(data(tmp_path / name))
        assert [(t.question, t.answer) for t in tasks] == [("2+2?", "4"), ("3+3?", "6")], name
        assert report.rows == 2 and not report.problems


def test_chat_message_rows_and_verl_rows(tmp_path: Path) -> None:
    """TRL's conversational rows (question = last user turn, answer = last assistant turn's final
    answer) and verl's parquet rows (prompt messages, reward_model.ground_truth)."""
    trl = write_jsonl(
        tmp_path / "trl.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is 5*5?"},
                    {"role": "assistant", "content": "5*5 = 25, so \\boxed{25}"},
                ]
            }
        ],
    )
    for keys in ({}, {"question_key": "messages"}):  # both keys are named, whichever is missing
        with pytest.raises(DataError, match="chat rows: set data.question_key=messages data.answer_key=messages"):
            check_source(data(trl, **keys))
    (task,), _ = check_source(data(trl, question_key="messages", answer_key="messages"))
    assert (task.question, task.answer) == ("What is 5*5?", "25")
    verl = tmp_path / "train.parquet"
    verl.write_bytes(
        parquet_bytes(
            {
                "data_source": ["math"],
                "prompt": [[{"role": "user", "content": "What is 7-2?"}]],
                "reward_model": [{"style": "rule", "ground_truth": "5"}],
            }
        )
    )
    (task,), _ = check_source(data(verl, question_key="prompt", answer_key="reward_model.ground_truth"))
    assert (task.question, task.answer, task.features) == ("What is 7-2?", "5", {"data_source": "math"})


def test_final_answer_formats() -> None:
    assert final_answer("Natalia sold 48/2 = 24 clips.\n#### 72", "auto") == "72"
    assert final_answer("#### 1,080", "gsm8k") == "1080"
    assert final_answer("so the answer is $\\boxed{\\frac{1}{2}}$", "boxed") == "\\frac{1}{2}"
    assert final_answer("\\boxed{3} #### 4", "raw") == "\\boxed{3} #### 4"
    with pytest.raises(ValueError, match="####"):
        final_answer("42", "gsm8k")


def test_broken_and_empty_sources_name_the_problem(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="no usable rows"):
        check_source(data(empty))
    (tmp_path / "bad.json").write_text('[{"question": "q"}, ')
    with pytest.raises(DataError, match=r"bad\.json:1: not valid JSON"):
        check_source(data(tmp_path / "bad.json"))
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [{"question": "q1", "answer": "1"}, {"question": "q2"}])
    tasks, report = load_labelled_tasks(data(mixed, on_error="skip"))
    assert len(tasks) == 1 and report.problems == [
        f"{mixed}:2: field 'answer' is missing or empty (this row's "
        "fields: question; set data.answer_key to the field that holds it)"
    ]
    with pytest.raises(DataError, match="does not exist"):
        source_kind(str(tmp_path / "nope.jsonl"))
    assert source_kind("openai/gsm8k") == "hub"


def test_rows_no_parser_or_tokenizer_takes_are_refused_by_line(tmp_path: Path) -> None:
    """An integer over Python's 4300 digits, JSON nested 100,000 deep, a lone surrogate, a CSV
    field over csv's 128 KiB: a DataError naming the file and line, never a traceback."""
    rows = {
        "big.jsonl": '{"question": "q", "answer": ' + "9" * 5000 + "}\n",
        "deep.jsonl": '{"question": ' + "[" * 100_000 + "]" * 100_000 + ', "answer": "1"}\n',
        "lone.jsonl": '{"question": "ok", "answer": "1"}\n{"question": "a \\ud800", "answer": "1"}\n',
        "lone_answer.jsonl": '{"question": "q", "answer": "\\udfff"}\n',
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "wide.csv": "question,answer\n" + "x" * 200_000 + ",1\n",
    }
    expect = {
        "big.jsonl": r"big\.jsonl:1: not readable JSON: an integer of more than 4300 digits",
        "deep.jsonl": r"deep\.jsonl:1: not readable JSON: nested too deeply",
        "lone.jsonl": r"lone\.jsonl:2: field 'question' holds a lone surrogate \('\\ud800' at character 3\)",
        "lone_answer.jsonl": r"lone_answer\.jsonl:1: field 'answer' holds a lone surrogate",
        "deep.json": r"deep\.json: not readable JSON: nested too deeply",
        "wide.csv": r"wide\.csv:2: not readable CSV \(field larger than field limit",
    }
    for name, text in rows.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(DataError, match=expect[name]):
            check_source(data(tmp_path / name))
    tasks, report = load_labelled_tasks(data(tmp_path / "lone.jsonl", on_error="skip"))
    assert len(tasks) == 1 and "lone surrogate" in report.problems[0]
    r = cli("data", str(tmp_path / "deep.jsonl"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_datasets_folder_with_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "dscache"))
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {"problem": ["1+2?", "2+5?"], "solution": ["\\boxed{3}", "\\boxed{7}"]}
            ),
            "test": datasets.Dataset.from_dict({"problem": ["9-1?"], "solution": ["\\boxed{8}"]}),
        }
    )
    dd.save_to_disk(str(tmp_path / "ds"))
    assert source_kind(str(tmp_path / "ds")) == "disk"
    d = data(tmp_path / "ds", question_key="problem", answer_key="solution")
    assert [t.answer for t in check_source(d)[0]] == ["3", "7"]
    assert [
        t.answer
        for t in check_source(data(tmp_path / "ds", question_key="problem", answer_key="solution", split="test"))[0]
    ] == ["8"]
    with pytest.raises(DataError, match=r"no split 'dev' \(splits: train, test\); set data.split"):
        check_source(data(tmp_path / "ds", question_key="problem", answer_key="solution", split="dev"))


# ------------------------------------------------------------------------------ the Hub, offline


def test_hub_dataset_is_read_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``openai/gsm8k`` with a subset and a split, read from a cache folder as ``hf download``
    leaves it (GSM8K's layout: one folder per subset, the README's config table), no network."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "dscache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    readme = (
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n"
    )
    fake_hub_repo(
        tmp_path / "hub",
        "dataset",
        "openai/gsm8k",
        {
            "README.md": readme.encode(),
            "main/train-00000-of-00001.parquet": parquet_bytes(
                {"question": ["Tom has 3 apples and buys 4. How many?"], "answer": ["3 + 4 = 7\n#### 7"]}
            ),
            "main/test-00000-of-00001.parquet": parquet_bytes(
                {"question": ["What is 10 times 12?", "Half of 8?"], "answer": ["10*12 = 120\n#### 120", "#### 4"]}
            ),
        },
    )
    tasks, _ = check_source(data("openai/gsm8k", subset="main", split="test"))
    assert [(t.question, t.answer) for t in tasks] == [("What is 10 times 12?", "120"), ("Half of 8?", "4")]
    assert tasks[0].id == "openai/gsm8k[main/test] row 1"
    with pytest.raises(DataError, match="set data.split"):
        check_source(data("openai/gsm8k", subset="main", split="validation"))


def test_hub_dataset_not_cached_says_how_to_get_it(tmp_path: Path) -> None:
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "ds")}
    r = cli_env("data", "someone/not-cached", env=env)
    assert r.returncode == 2, r.stderr
    assert (
        "not in the local Hugging Face cache" in r.stderr
        and "hf download someone/not-cached --repo-type dataset" in r.stderr
        and "Traceback" not in r.stderr
    )


def test_model_path_hub_id_resolves_through_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = fake_hub_repo(tmp_path / "hub", "model", "Org/Tiny-Base", {"config.json": b'{"model_type": "qwen3"}'})
    cfg = load_config("grpo", None, ["model.path=Org/Tiny-Base"])
    assert cfg.model.path == str(snap)
    assert cfg.sampling.max_new_tokens == 4096  # a Hub id is a real model: the real preset applies
    from coevolve.models import hub_id_of

    assert hub_id_of(cfg.model.path) == "Org/Tiny-Base"
    with pytest.raises(ConfigError) as e:
        load_config("grpo", None, ["model.path=Qwen/Qwen3-4B-Base"])
    msg = str(e.value)
    assert "model.path: Qwen/Qwen3-4B-Base is neither a folder here nor a Hugging Face model in the local cache" in msg
    assert "hf download Qwen/Qwen3-4B-Base" in msg and "[from command line (model.path=Qwen/Qwen3-4B-Base)]" in msg
    local = tmp_path / "Org" / "Local"
    local.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert load_config("grpo", None, ["model.path=Org/Local"]).model.path == "Org/Local"  # a folder here wins


# ------------------------------------------------------------------------------ the CLI and the preflight


def test_coevolve_data_prints_the_first_question(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "m.jsonl", [{"problem": "What is 6*7?", "solution": "6*7=\\boxed{42}"}])
    r = cli("data", str(p), "question_key=problem", "data.answer_key=solution")
    assert r.returncode == 0, r.stderr
    assert "1 questions from" in r.stdout and "question: What is 6*7?" in r.stdout and "answer:   42" in r.stdout
    r = cli("data", str(p))
    assert r.returncode == 2 and "data.question_key=problem" in r.stderr
    r = cli("data", str(p), "question_key=problem", "answer_key=solution", "split=2024")
    assert r.returncode == 0, r.stderr  # a number where text is asked for is that text


def test_a_run_with_bad_data_or_template_leaves_no_folder(tmp_path: Path, smollm2: Path) -> None:
    """Data and template problems are found by the preflight, before the run folder exists, so
    the corrected command simply runs (the folder was never made)."""
    tok = tmp_path / "no_template"
    tok.mkdir()
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tok / f).write_bytes((smollm2 / f).read_bytes())
    conf = json.loads((tok / "tokenizer_config.json").read_text())
    conf.pop("chat_template", None)
    (tok / "tokenizer_config.json").write_text(json.dumps(conf))
    good = write_jsonl(tmp_path / "good.jsonl", [{"question": "1+1?", "answer": "2"}])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    math = write_jsonl(tmp_path / "math.jsonl", [{"problem": "1+1?", "solution": "\\boxed{2}"}])
    cases = [
        ([f"data.source={empty}"], "no usable rows"),
        ([f"data.source={math}"], "data.question_key=problem"),
        ([f"data.source={good}", "model.chat_template=true"], "has no chat template"),
    ]
    for extra, needle in cases:
        run_dir = tmp_path / "run"
        r = cli("run", "grpo", f"model.path={tok}", *extra, "--run-dir", str(run_dir))
        assert r.returncode == 2 and needle in r.stderr, (extra, r.stderr)
        assert not run_dir.exists(), extra


def test_a_question_over_the_models_context_is_refused_or_dropped(tmp_path: Path, smollm2: Path) -> None:
    """The rendered solver prompt plus the answer budget against the model's context (8192 for
    the SmolLM2 folder): refused before any work naming the row, or dropped and counted with
    data.drop_too_long=true; a 300,000-character question is counted only up to a bound."""
    from coevolve.engine import load_tokenizer
    from coevolve.preflight import check_inputs
    from coevolve.prompts.chat import ChatPrompter
    from coevolve.world.real import RealWorld

    rows = [
        {"question": "What is 2+2?", "answer": "4"},
        {"question": " ".join(f"{i}+{i}" for i in range(3000)), "answer": "1"},
        {"question": "x y " * 75_000, "answer": "1"},
    ]
    p = write_jsonl(tmp_path / "long.jsonl", rows)
    over = [f"model.path={smollm2}", f"data.source={p}"]
    cfg = load_config("grpo", None, over)
    with pytest.raises(DataError) as e:
        check_inputs(cfg)
    msg = str(e.value)
    assert msg.startswith(f"{p}:2: the solver prompt of this row is ") and "(and 1 more rows)" in msg
    assert (
        "over the model's context of 8,192 (max_position_embeddings of" in msg and "sampling.max_new_tokens=4096" in msg
    )
    assert "data.drop_too_long=true" in msg
    with pytest.raises(
        DataError, match=r"long\.jsonl:2: .* over the model's context of 4,000 \(engine\.max_model_len\)"
    ):
        check_inputs(load_config("grpo", None, [*over, "engine.max_model_len=4000", "sampling.max_new_tokens=8"]))
    huge = write_jsonl(tmp_path / "huge.jsonl", rows[2:])
    with pytest.raises(DataError, match=r"huge\.jsonl:1: the solver prompt of this row is at least [\d,]+ tokens"):
        check_inputs(load_config("grpo", None, [f"model.path={smollm2}", f"data.source={huge}"]))
    cfg = load_config("grpo", None, [*over, "data.drop_too_long=true"])
    check_inputs(cfg)
    said: list[str] = []
    world = RealWorld.from_config(cfg, ChatPrompter(load_tokenizer(smollm2)), said.append)
    assert [t.question for t in world.tasks] == ["What is 2+2?"]
    assert any("dropped 2 questions whose prompt plus answer budget exceeds the context" in s for s in said)
    run_dir = tmp_path / "run"
    r = cli("run", "grpo", *over, "--run-dir", str(run_dir))
    assert r.returncode == 2 and "long.jsonl:2: the solver prompt" in r.stderr and not run_dir.exists()


def test_device_and_verl_are_checked_before_the_run(tmp_path: Path) -> None:
    import torch

    from coevolve.config.base import VerlBackendConfig
    from coevolve.preflight import check_device, check_verl

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="model.device=cuda: this machine has 0 CUDA device"):
            check_device("cuda")
    with pytest.raises(ConfigError, match=r"cannot be run"):
        check_verl(VerlBackendConfig(python=str(tmp_path / "no-python")))
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        with pytest.raises(ConfigError, match="verl is not installed for"):
            check_verl(VerlBackendConfig())
    check_verl(VerlBackendConfig(main=["python", "-c", "pass"]))  # a trainer command of the user's own: not probed


def test_load_tasks_of_a_jsonl_keeps_answers_as_written(tmp_path: Path) -> None:
    """``data.sources.load_tasks`` (the project's own files) reads through the same loader, answers raw."""
    from coevolve.data.sources import load_tasks

    p = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "\\boxed{3}"}])
    assert load_tasks(p)[0][0].answer == "\\boxed{3}"
