"""Config inputs as a TRL / verl user gives them: several ``-c`` files merged in order, presets by
name (shipped inside the package), errors naming where a value came from, values that keep their
kind, and option combinations refused when the config is read (not when a phase starts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coevolve.config import load_config
from coevolve.config.presets import find_preset, list_presets
from coevolve.errors import ConfigError
from test_cli import cli

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_several_config_files_merge_in_order(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "recipe: grpo\nsolver:\n  steps: 7\n  group_size: 4\n")
    b = write(tmp_path / "b.yaml", "solver:\n  steps: 9\nlearner:\n  lr: 2.0e-5\n")
    cfg = load_config("grpo", [a, b], [])
    assert (cfg.solver.steps, cfg.solver.group_size, cfg.learner.lr) == (9, 4, 2e-5)  # b over a, key by key
    assert load_config("grpo", [b, a], []).solver.steps == 7
    assert load_config("grpo", [a, b], ["solver.steps=3"]).solver.steps == 3  # the command line over both
    r = cli("config", "grpo", "-c", str(a), "-c", str(b))
    assert r.returncode == 0 and yaml.safe_load(r.stdout)["solver"]["steps"] == 9
    c = write(tmp_path / "c.yaml", "recipe: d2evo\n")
    with pytest.raises(ConfigError, match=r"config file .*c\.yaml is for recipe 'd2evo', not 'grpo'"):
        load_config(None, [a, c], [])


def test_errors_name_where_the_value_came_from(tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "recipe: grpo\nsolver:\n  steps: abc\n")
    with pytest.raises(ConfigError, match=r"solver\.steps: .* \[from config file .*a\.yaml\]$"):
        load_config("grpo", a, [])
    with pytest.raises(ConfigError, match=r"\[from command line \(solver\.steps=abc\)\]$"):
        load_config("grpo", None, ["solver.steps=abc"])
    good = write(tmp_path / "good.yaml", "recipe: grpo\nsolver:\n  steps: 5\n")
    with pytest.raises(ConfigError) as e:
        load_config("grpo", good, ["solver.steps=abc"])
    assert str(e.value).endswith(f"[from command line (solver.steps=abc), over config file {good}]")
    with pytest.raises(ConfigError, match=r"\[from command line \(difficulty\.band\.high=0\.2\), over preset d2evo\]"):
        load_config("d2evo", "d2evo", ["difficulty.band.high=0.2"])
    r = cli("config", "grpo", "-c", str(good), "solver.steps=abc")
    assert r.returncode == 2 and "from command line (solver.steps=abc)" in r.stderr and "(defaults)" not in r.stderr


@pytest.mark.parametrize(
    "override, needle",
    [
        ("solver.steps=true", "solver.steps: a number is needed here, got the boolean True"),
        ("learner.lr=false", "learner.lr: a number is needed here"),
        ("data.levels=[5]", "data.levels: must be a non-empty list of [1, 2, 3, 4] for data.source=toy, got [5]"),
        ("data.toy_levels=[]", "data.levels: must be a non-empty list"),  # the former name sets the field
        ("model.device=banana", "model.device: unknown device 'banana'"),
        ("eval.benches=[math8]", "eval.benches: unknown benchmark 'math8'"),
    ],
)
def test_values_keep_their_kind_and_are_checked_when_read(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("grpo", None, [override])
    assert needle in str(e.value)


@pytest.mark.parametrize(
    "override, needle",
    [
        ("solver.steps=" + "9" * 5000, "solver.steps: Unable to parse input string as an integer"),
        ("solver.steps=" + "9" * 30, "solver.steps: an integer of 30 digits; a config integer is at most 2**63 - 1"),
        ("run.name=" + "x" * 100_000, "run.name: String should have at most 100 characters"),
        ("run.name=" + "9" * 5000, "run.name: String should have at most 100 characters"),
        ("solver.steps=" + "[" * 5000, "solver.steps: Input should be a valid integer"),
    ],
    ids=["int-5000-digits", "int-over-2**63", "name-100kB", "name-5000-digits", "nested-5000"],
)
def test_hostile_values_are_one_short_line(override: str, needle: str) -> None:
    """An integer over Python's 4300 digits, or past 2**63, a 100 kB name, a value nested 5000
    deep: one line that names the field and quotes the value cut short."""
    with pytest.raises(ConfigError) as e:
        load_config("grpo", None, [override])
    assert needle in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 400


def test_a_config_file_nested_too_deep_or_with_a_huge_integer_is_one_line(tmp_path: Path) -> None:
    deep = write(tmp_path / "deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml: nested too deeply \(past Python's recursion limit\)$"):
        load_config("grpo", deep, [])
    big = write(tmp_path / "big.yaml", "solver:\n  steps: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"big\.yaml: an integer of more than 4300 digits"):
        load_config("grpo", big, [])
    r = cli("config", "grpo", "-c", str(deep))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_numbers_given_for_text_are_that_text(tmp_path: Path) -> None:
    assert load_config("grpo", None, ["run.name=2024"]).run.name == "2024"
    assert load_config("grpo", None, ["run.name=007"]).run.name == "007"  # as typed, not the number 7
    assert load_config("grpo", write(tmp_path / "n.yaml", "run:\n  name: 2024\n"), []).run.name == "2024"
    assert load_config("grpo", None, ["model.device=cuda:1"]).model.device == "cuda:1"


def test_option_combinations_refused_when_read() -> None:
    with pytest.raises(ConfigError, match="backend=verl with learner.lora=true"):
        load_config("grpo", None, ["backend=verl", "learner.lora=true"])
    with pytest.raises(ConfigError, match="backend=verl with learner.lr_schedule=cosine"):
        load_config("grpo", None, ["backend=verl", "learner.lr_schedule=cosine"])
    r = cli("config", "grpo", "eval.benches=[math8]")
    assert r.returncode == 2 and "unknown benchmark 'math8'" in r.stderr


def test_presets_by_name_pick_the_version_for_the_model() -> None:
    toy = load_config("diagevo", "rzero", [])
    real = load_config("diagevo", "rzero", ["model.path=/models/Qwen3-4B-Base"])
    for cfg in (toy, real):  # R-Zero's method either way
        assert (cfg.challenger.reward.kind, cfg.memory.enabled, cfg.pool.voting.filter, cfg.rounds) == (
            "rzero",
            False,
            "absolute",
            3,
        )
    assert (toy.sampling.max_new_tokens, toy.challenger.max_new_tokens) == (48, 24)  # toy scale
    assert (real.sampling.max_new_tokens, real.challenger.max_new_tokens, real.learner.lr) == (4096, 2048, 1e-6)
    from coevolve.preflight import budget_problems

    assert budget_problems(real) == []  # the real R-Zero preset passes the real-model budget checks
    assert load_config("diagevo", None, [], presets=["rzero"]).challenger.max_new_tokens == 24
    assert load_config("grpo", None, [], presets=["toy_scarce/grpo"]).data.limit == 64
    with pytest.raises(ConfigError, match=r"'rzer0' is neither a file nor a preset .*real/rzero, rzero"):
        load_config("diagevo", "rzer0", [])
    r = cli("config", "diagevo", "--preset", "rzero", "model.path=/models/Qwen3-4B-Base")
    assert r.returncode == 0 and yaml.safe_load(r.stdout)["pool"]["size"] == 2000


def test_every_config_of_the_repository_is_a_preset_in_the_wheel() -> None:
    """configs/ is the package's preset folder (a link in a checkout; pyproject's package-data
    copies presets/*.yaml and presets/*/*.yaml into the wheel), so every file there is shipped."""
    import tomllib

    files = sorted(
        p.relative_to(ROOT / "configs").with_suffix("").as_posix()
        for p in [*(ROOT / "configs").glob("*.yaml"), *(ROOT / "configs").glob("*/*.yaml")]
    )
    assert files and set(files) <= set(list_presets())
    assert not list((ROOT / "configs").glob("*/*/*.yaml")), "package-data globs reach two levels"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["coevolve"]
    assert {"presets/*.yaml", "presets/*/*.yaml", "configs/real/*.yaml"} <= set(data)
    assert find_preset("lora_8b", real=True).parent.name == "real"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
