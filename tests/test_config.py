"""Config loading, overrides and validation: every error names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.config import CONFIGS, RecipeConfig, dump_yaml, load_config
from coevolve.config.base import parse_override
from coevolve.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_the_papers():
    cfg = load_config("grpo")
    assert cfg.solver.alpha == 0.9
    assert cfg.learner.eps_low == 0.2 and cfg.learner.eps_high == 0.28
    assert cfg.learner.beta_kl == 0.0
    assert cfg.model.path is None  # toy world by default


def test_overrides_dotted_and_typed():
    cfg = load_config("grpo", None, ["solver.steps=7", "learner.lr=1e-4", "eval.benches=[toy]", "model.path=null"])
    assert cfg.solver.steps == 7 and cfg.learner.lr == 1e-4 and cfg.eval.benches == ["toy"]


@pytest.mark.parametrize(
    "override, needle",
    [
        ("solver.stepz=5", "solver.stepz"),
        ("solverr.steps=5", "solverr"),
        ("solver.steps=abc", "solver.steps"),
        ("solver.steps=-1", "solver.steps"),
        ("solver.group_size=1", "solver.group_size"),
        ("solver.alpha=1.5", "solver.alpha"),
        ("data.on_error=ignore", "data.on_error"),
        ("nokeyvalue", "key=value"),
    ],
)
def test_bad_overrides_name_the_field(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config("grpo", None, [override])
    assert needle in str(e.value)


def test_yaml_unknown_key_and_bad_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("recipe: grpo\nsolver:\n  stepz: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(None, p)
    assert "solver.stepz" in str(e.value) and "unknown key" in str(e.value)
    p.write_text("recipe: grpo\nsolver: [1, 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(None, p)
    assert str(p) in str(e.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("grpo", tmp_path / "missing.yaml")


def test_recipe_mismatch_and_unknown_recipe(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("recipe: grpo\n")
    with pytest.raises(ConfigError, match="not 'd2evo'"):
        load_config("d2evo", p)
    with pytest.raises(ConfigError, match="unknown recipe"):
        load_config("nope")


def test_parse_override_values():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=hello") == (["a"], "hello")
    assert parse_override("a=") == (["a"], "")


def test_every_shipped_config_loads():
    """Every YAML under configs/ (real presets and partial ones included) loads for the recipes it
    names, or for every recipe when it names none; ablation grids are lists of overrides."""
    import yaml

    files = sorted((ROOT / "configs").glob("*.yaml")) + sorted(
        (ROOT / "configs").glob("*/*.yaml")
    )  # real/ (a link), toy_scarce/
    assert any(f.parent.name == "real" for f in files), "configs/real presets missing"
    for f in files:
        data = yaml.safe_load(f.read_text())
        assert isinstance(data, dict), f
        if "recipe" in data:
            load_config(None, f)
        elif set(data) <= set(RecipeConfig.model_fields):  # a partial config (sections only): any recipe
            for recipe in CONFIGS:
                load_config(recipe, f, ["model.path=/models/some-real-model"])
        else:  # ablation files: {name: [override, ...]} or {variants: {name: [...]}}
            assert all(isinstance(v, (list, dict)) for v in data.values()), f


def _former_names(data: dict, cls: type, where: str = "") -> list[str]:
    """The keys of ``data`` that are a field's former name (``RENAMED``) in section ``cls``."""
    from pydantic import BaseModel

    out = []
    for key, value in data.items():
        if key in getattr(cls, "RENAMED", {}):
            out.append(f"{where}{key} (now {cls.RENAMED[key]})")
        field = getattr(cls, "model_fields", {}).get(key)
        ann = getattr(field, "annotation", None)
        if isinstance(value, dict) and isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _former_names(value, ann, f"{where}{key}.")
    return out


def test_shipped_configs_name_every_field_as_it_is_named_now():
    """A user reading a shipped preset meets each setting under its one name: former names
    (``RENAMED``) and former places (``MOVED``) load for old files only."""
    import yaml

    def dotted(d: dict, where: str = "") -> list[str]:
        return [
            k
            for key, v in d.items()
            for k in ([f"{where}{key}"] + (dotted(v, f"{where}{key}.") if isinstance(v, dict) else []))
        ]

    files = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "configs").glob("*/*.yaml"))
    assert any(f.parent.name == "skill" for f in files)
    classes = {r: type(load_config(r)) for r in CONFIGS}
    for f in files:
        data = yaml.safe_load(f.read_text())
        if not set(data) <= set(RecipeConfig.model_fields) | {"recipe"} | {
            k for c in classes.values() for k in c.model_fields
        }:
            continue  # ablation grids: lists of overrides
        for cls in [classes[data["recipe"]]] if "recipe" in data else classes.values():
            assert _former_names(data, cls) == [], f
        moved = [k for k in dotted(data) if k in RecipeConfig.MOVED]
        assert moved == [], f


def test_real_model_gets_the_real_preset_and_toy_does_not():
    real = load_config("d2evo", None, ["model.path=/models/Qwen3-4B-Base", "learner.lr=2e-6"])
    assert (real.sampling.max_new_tokens, real.eval.max_new_tokens, real.eval.samples) == (4096, 4096, -1)
    assert real.learner.lr == 2e-6 and real.learner.weight_decay == 0.01  # what the user sets wins
    assert real.eval.benches == ["d2evo_math7", "d2evo_general3"] and real.questioner.max_new_tokens == 1024
    toy = load_config("d2evo")
    assert toy.sampling.max_new_tokens == 64 and toy.learner.lr == 3e-5


def test_preflight_refuses_budgets_that_cannot_give_a_meaningful_run():
    from coevolve.preflight import budget_problems

    assert budget_problems(load_config("grpo")) == []
    probs = budget_problems(
        load_config(
            "d2evo",
            None,
            [
                "model.path=/models/Qwen3-4B-Base",
                "sampling.max_new_tokens=64",
                "eval.max_new_tokens=100",
                "questioner.max_new_tokens=16",
            ],
        )
    )
    text = "\n".join(probs)
    for field in (
        "eval.max_new_tokens=100",
        "sampling.max_new_tokens=64",
        "questioner.max_new_tokens=16",
        "data.source",
    ):
        assert field in text, field
    assert budget_problems(load_config("grpo", None, ["eval.max_new_tokens=8"]))  # the toy set too


def test_diagevo_flat_ablation_aliases(tmp_path):
    cfg = load_config(
        "diagevo",
        None,
        ["challenger_frozen=true", "schedule=explore_only", "filter=none", "stitching=off", "diagnoser=llm"],
    )
    assert cfg.challenger.frozen is True and cfg.memory.schedule == "explore_only"
    assert cfg.pool.voting.filter == "none" and cfg.memory.stitching == "off" and cfg.diagnoser.kind == "llm"
    p = tmp_path / "c.yaml"
    p.write_text("recipe: diagevo\nfilter: absolute\ndiagnoser:\n  max_new_tokens: 9\n")
    cfg = load_config(None, p)
    assert cfg.pool.voting.filter == "absolute" and cfg.diagnoser.max_new_tokens == 9
    with pytest.raises(ConfigError, match="pool.voting.filter"):
        load_config("diagevo", None, ["filter=sometimes"])


def test_d2evo_flat_ablation_aliases_reach_the_same_fields():
    cfg = load_config(
        "d2evo",
        None,
        [
            "questioner=false",
            "share_weights=false",
            "synthesis=false",
            "anchor_selection=random",
            "questioner_reward=rzero",
            "label_verifier=oracle",
        ],
    )
    assert (cfg.questioner.enabled, cfg.questioner.share_weights, cfg.buffer.synthesis) == (False, False, False)
    assert cfg.difficulty.selection == "random" and cfg.questioner.reward.kind == "rzero"
    assert cfg.buffer.verifier == "oracle"
    # the alias and the section share a name: a mapping is the section, a scalar the switch
    assert load_config("d2evo", None, ["questioner.steps=3"]).questioner.steps == 3


def test_partial_section_keeps_the_recipe_defaults(tmp_path):
    """A YAML section that sets one key keeps the recipe's values for the others (not the
    generic section defaults): the questioner phase stays 32 prompts x 4, the band 0.4-0.8."""
    p = tmp_path / "c.yaml"
    p.write_text("recipe: d2evo\nquestioner:\n  steps: 2\nbuffer:\n  voting: {samples: 3}\n")
    cfg = load_config(None, p)
    assert (cfg.questioner.steps, cfg.questioner.prompts_per_step, cfg.questioner.group_size) == (2, 32, 4)
    assert cfg.buffer.voting.samples == 3 and cfg.buffer.voting.filter == "absolute"


@pytest.mark.parametrize(
    "override, needle",
    [
        ("difficulty.band.low=0.9", "difficulty.band"),
        ("pool.voting.band.high=0.1", "pool.voting.band"),
        ("questioner.reward.band.low=0.9", "questioner.reward.band"),
        ("challenger.reward.band.low=0", "challenger.reward"),
    ],
)
def test_bands_are_validated_once_with_the_field_named(override, needle):
    recipe = "d2evo" if override.startswith(("difficulty", "questioner")) else "diagevo"
    with pytest.raises(ConfigError) as e:
        load_config(recipe, None, [override])
    assert needle in str(e.value) and "band" in str(e.value)


def test_former_names_and_places_of_fields_still_load(tmp_path):
    """One concept, one name: a renamed field (``reward.samples``, ``data.limit_seed``) or one moved
    to another section (the rollout engines' settings and the run's Ray address, now in
    ``engine``) is still read from a saved config or an override that uses the old name."""
    old = tmp_path / "old.yaml"
    old.write_text(
        "recipe: d2evo\nquestioner:\n  reward: {solver_samples: 3}\ndata: {toy_seed: 5}\n"
        "backend:\n  verl: {ray_address: auto, tensor_parallel_size: 2, gpu_memory_utilization: 0.5}\n"
    )
    cfg = load_config("d2evo", old)
    assert (cfg.questioner.reward.samples, cfg.data.limit_seed) == (3, 5)
    assert (cfg.engine.ray.address, cfg.engine.tensor_parallel_size, cfg.engine.gpu_memory_utilization) == (
        "auto",
        2,
        0.5,
    )
    cfg = load_config("diagevo", None, ["challenger.reward.solver_samples=2", "engine.ray.tensor_parallel_size=4"])
    assert (cfg.challenger.reward.samples, cfg.engine.tensor_parallel_size) == (2, 4)
    both = tmp_path / "both.yaml"
    both.write_text(
        "recipe: grpo\nengine: {ray: {tensor_parallel_size: 2}}\nbackend: {verl: {tensor_parallel_size: 4}}\n"
    )
    with pytest.raises(ConfigError, match="both are now engine.tensor_parallel_size"):
        load_config("grpo", both)
    dumped = dump_yaml(load_config("grpo", None, []))
    assert "solver_samples" not in dumped and "toy_seed: 0" in dumped and "ray_address" not in dumped


@pytest.mark.parametrize(
    "call, hint",
    [
        (lambda: load_config("grpo", None, ["solver.stepz=3"]), "did you mean 'solver.steps'?"),
        (lambda: load_config("grpo", None, ["learner.banana=3"]), None),  # nothing close: no guess
        (lambda: load_config("grpoo"), "did you mean 'grpo'?"),
        (lambda: load_config("grpo", "rzeroo"), "did you mean 'rzero'?"),
        (lambda: load_config("grpo", None, ["eval.benches=[gsm8]"]), "did you mean 'gsm8k'?"),
    ],
)
def test_unknown_names_suggest_the_nearest(call, hint):
    with pytest.raises(ConfigError) as e:
        call()
    assert (hint in str(e.value)) if hint else "did you mean" not in str(e.value)


def test_unknown_key_in_a_file_suggests_the_nearest(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("recipe: d2evo\ndifficulty:\n  band:\n    lowe: 0.3\n")
    with pytest.raises(
        ConfigError, match=r"difficulty\.band\.lowe: unknown key \(did you mean 'difficulty\.band\.low'\?\)"
    ):
        load_config("d2evo", p)


def test_describe_documents_every_field_with_paper_and_ours():
    from coevolve.config.describe import describe, field_rows

    cfg = load_config("d2evo", None, ["solver.steps=7"])
    text = describe(cfg)
    leaves = [r for r in field_rows(cfg) if r[2] != "section"]
    assert len(leaves) > 150 and all(f"\n{name} = " in text for name, *_ in leaves)
    assert "\nsolver.steps = 7  (int)" in text  # the resolved value, not only the class default
    assert (
        "\ndifficulty.samples = 32  (int)  [paper]\n    N solver samples per candidate question (paper: N = 32)."
        in text
    )
    assert "difficulty.selection = 'band'  ('band' | 'random')  [paper]  alias: anchor_selection" in text
    assert "\ndifficulty.pool_size = 400  (int | None)  [ours]" in text
