"""The real presets run each paper as it is written wherever it says what to do (docs/fidelity.md):
these tests pin those faithful defaults, and the checks that keep a real run from departing
silently (the frozen diagnoser, every failure diagnosed, one difficulty scale, each paper's
evaluation protocol)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from coevolve.config import load_config
from coevolve.errors import ConfigError, RunStateError
from coevolve.eval.benchmarks import GROUPS
from coevolve.eval.suite import evaluate_suite, format_table, group_averages
from coevolve.preflight import check_diagnoser
from test_plan import QWEN3_4B

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def real_model(tmp_path: Path) -> str:
    """A real model folder with only config.json: loading a config needs no weights."""
    d = tmp_path / "qwen3-4b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(QWEN3_4B))
    return str(d)


# ---------------------------------------------------------------- DiagEvo: the diagnoser
def test_real_diagevo_preset_names_a_frozen_instruct_diagnoser(real_model):
    cfg = load_config("diagevo", None, [f"model.path={real_model}"])
    assert cfg.diagnoser.kind == "llm" and not cfg.diagnoser.self_diagnosis
    assert cfg.diagnoser.model_path is not None and "Qwen3-4B-Instruct-2507" in cfg.diagnoser.model_path
    assert cfg.diagnosis_model_path() == cfg.diagnoser.model_path
    assert cfg.memory.confirm_duplicates  # the diagnosis model confirms retrieved duplicates (paper)
    check_diagnoser(cfg)  # named: not refused here (the model's presence is checked with the other paths)


def test_preflight_refuses_a_real_diagevo_run_without_a_diagnoser(real_model):
    cfg = load_config("diagevo", None, [f"model.path={real_model}", "diagnoser.model_path=null"])
    with pytest.raises(ConfigError, match=r"diagnoser\.model_path.*diagnoser\.self_diagnosis=true"):
        check_diagnoser(cfg)
    self_diag = load_config("diagevo", None, [f"model.path={real_model}", "diagnoser.self_diagnosis=true"])
    check_diagnoser(self_diag)  # the named deviation is accepted, and then the solver diagnoses
    assert self_diag.diagnosis_model_path() is None
    # the R-Zero-style baseline has no memory and so no diagnoser to name or to find
    check_diagnoser(
        load_config("diagevo", None, [f"model.path={real_model}", "diagnoser.model_path=null", "memory.enabled=false"])
    )
    assert load_config("diagevo", None, [f"model.path={real_model}"], presets=["rzero"]).diagnosis_model_path() is None


def test_toy_and_arith_worlds_keep_their_diagnosers(real_model):
    check_diagnoser(load_config("diagevo", None, []))  # the toy world: trace diagnosis
    check_diagnoser(
        load_config("diagevo", None, [f"model.path={real_model}", "data.source=arith", "diagnoser.model_path=null"])
    )


def test_a_diagnoser_hub_id_not_cached_is_kept_for_preflight_to_refuse(real_model, tmp_path, monkeypatch):
    from coevolve.preflight import preflight

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    cfg = load_config("diagevo", None, [f"model.path={real_model}", "diagnoser.model_path=Qwen/Qwen3-4B-Instruct-2507"])
    assert cfg.diagnoser.model_path == "Qwen/Qwen3-4B-Instruct-2507"  # `coevolve config` / `plan` still load
    with pytest.raises(Exception, match=r"diagnoser\.model_path.*hf download.*self_diagnosis=true"):
        preflight(cfg, say=lambda s: None)


# ---------------------------------------------------------------- DiagEvo: every failure
def test_real_preset_diagnoses_every_failure_and_the_plan_counts_them(real_model):
    from coevolve.recipes.declare import FROZEN_DIAGNOSER
    from coevolve.recipes.diagevo import KEPT_FRACTION, memory_work

    cfg = load_config("diagevo", None, [f"model.path={real_model}"])
    assert cfg.memory.max_pairs_per_question is None and cfg.memory.max_diagnoses_per_round is None
    work = memory_work(cfg, toy=False)
    diag = [g for g in work.rollouts if "diagnoses" in g.what]
    kept = int(cfg.pool.size * KEPT_FRACTION)
    band = cfg.pool.voting.band
    expected = math.ceil(kept * cfg.solver.group_size * (1 - (band.low + band.high) / 2))
    assert len(diag) == 1 and diag[0].rows == expected > kept  # more than one per question
    assert diag[0].role == FROZEN_DIAGNOSER
    capped = memory_work(
        load_config("diagevo", None, [f"model.path={real_model}", "memory.max_diagnoses_per_round=64"]), toy=False
    )
    assert [g.rows for g in capped.rollouts if "diagnoses" in g.what] == [64]
    solver_diag = memory_work(
        load_config("diagevo", None, [f"model.path={real_model}", "diagnoser.self_diagnosis=true"]), toy=False
    )
    assert [g.role for g in solver_diag.rollouts if "diagnoses" in g.what] == ["solver"]


# ---------------------------------------------------------------- D²Evo: one difficulty scale
class _Engine:
    def __init__(self) -> None:
        self.loaded: list[str] = []

    def load(self, path: str, device: str, dtype: str) -> str:
        self.loaded.append(path)
        return f"sampler over {path}"


def _d2evo(tmp_path: Path, shared: bool) -> SimpleNamespace:
    run = SimpleNamespace(checkpoint_dir=lambda role, tag: tmp_path / "checkpoints" / f"{role}_{tag}")
    s = SimpleNamespace(
        base=tmp_path / "base",
        run=run,
        engine=_Engine(),
        metered=lambda x: x,
        cfg=SimpleNamespace(model=SimpleNamespace(device="cpu", dtype="auto")),
    )
    s.load = lambda path: s.metered(s.engine.load(path, s.cfg.model.device, s.cfg.model.dtype))  # Setup.load's
    solver = SimpleNamespace(name="solver", sampler="live solver sampler")
    questioner = solver if shared else SimpleNamespace(name="questioner", sampler="questioner sampler")
    return SimpleNamespace(s=s, solver=solver, questioner=questioner)


def test_d2evo_buffer_is_labelled_by_the_previous_round_solver(tmp_path):
    from coevolve.recipes.d2evo import previous_solver

    p = _d2evo(tmp_path, shared=True)
    (tmp_path / "base").mkdir()
    (tmp_path / "checkpoints" / "solver_r01").mkdir(parents=True)
    (tmp_path / "checkpoints" / "solver_r02q").mkdir(parents=True)  # after round 2's questioner: not π_S^{t-1}
    # shared weights: the live weights moved under the questioner's GRPO; the frozen π_S^{t-1} labels
    assert previous_solver(p, 1) == f"sampler over {tmp_path / 'base'}"
    assert previous_solver(p, 2) == f"sampler over {tmp_path / 'checkpoints' / 'solver_r01'}"
    assert p.s.engine.loaded == [str(tmp_path / "base"), str(tmp_path / "checkpoints" / "solver_r01")]
    with pytest.raises(RunStateError, match="keep_checkpoints"):
        previous_solver(p, 3)  # round 2's solver is gone
    # w/o share weight: the solver has not moved since it measured the anchors
    q = _d2evo(tmp_path, shared=False)
    assert previous_solver(q, 2) == "live solver sampler" and q.s.engine.loaded == []


def test_d2evo_keeps_the_previous_solver_checkpoint():
    with pytest.raises(Exception, match="keep_checkpoints"):
        load_config("d2evo", None, ["run.keep_checkpoints=1"])
    load_config("d2evo", None, ["run.keep_checkpoints=1", "questioner.share_weights=false"])


def test_d2evo_label_check_off_is_a_stated_deviation(real_model):
    from coevolve.config.d2evo import BufferSection
    from coevolve.curriculum.verify import NoVerifier

    cfg = load_config("d2evo", None, [f"model.path={real_model}", "data.source=x.jsonl"])
    assert cfg.buffer.verifier == "none"
    text = BufferSection.model_fields["verifier"].description + (NoVerifier.__doc__ or "")
    assert "GPT-5.2" in text and "deviation" in text and "paper's default" not in text


# ---------------------------------------------------------------- evaluation protocols
def test_each_papers_evaluation_is_a_named_group(real_model):
    assert GROUPS["d2evo_math7"] == GROUPS["math7"] and len(GROUPS["d2evo_math7"]) == 7
    assert set(GROUPS["d2evo_general3"]) == {"supergpqa", "mmlu_pro", "bbeh"}
    assert set(GROUPS["diagevo_math5"]) == {"amc23", "gsm8k", "math500", "olympiadbench", "minerva"}
    assert set(GROUPS["diagevo_general4"]) == {"mmlu_pro", "gpqa_diamond", "bbeh", "supergpqa"}
    d2 = load_config("d2evo", None, [f"model.path={real_model}", "data.source=x.jsonl"])
    dg = load_config("diagevo", None, [f"model.path={real_model}"])
    assert d2.eval.benches == ["d2evo_math7", "d2evo_general3"] and d2.eval.samples == -1
    assert dg.eval.benches == ["diagevo_math5", "diagevo_general4"] and dg.eval.samples == -1
    assert dg.eval.repeats == 3  # DiagEvo: mean ± std over 3 evaluation runs
    assert d2.eval.repeats == 1  # D²Evo states no repeated evaluation
    from coevolve.eval.benchmarks import get

    assert get("amc23").default_samples == 32  # AMC as mean@32 (DiagEvo), greedy elsewhere in its groups
    assert all(
        get(b).default_samples == 0 for b in GROUPS["diagevo_math5"] + GROUPS["diagevo_general4"] if b != "amc23"
    )


def test_group_average_over_the_benchmarks_that_ran():
    rows = {"mmlu_pro": {"score": 0.4}, "bbeh": {"score": 0.1}, "supergpqa": {"score": 0.1}, "gsm8k": {"score": 0.9}}
    g = group_averages(["d2evo_general3", "gsm8k"], rows)
    assert list(g) == ["d2evo_general3"] and g["d2evo_general3"]["score"] == pytest.approx(0.2)
    assert g["d2evo_general3"]["n"] == 3 and g["d2evo_general3"]["missing"] == []


def test_absent_general_data_is_skipped_with_a_message(tmp_path, monkeypatch):
    """A general benchmark without its data file is named and skipped (not a crash); the math
    benchmarks, whose data ships with coevolve, still fail loudly when broken."""
    import coevolve.eval.benchmarks as bm

    monkeypatch.delenv("COEVOLVE_DATA", raising=False)

    def no_hub(b, data_dir):
        raise bm.DataError(f"benchmark {b.name!r}: no data file found; pass --data-dir")

    monkeypatch.setattr(bm, "_load_hub", no_hub)
    said: list[str] = []
    res = evaluate_suite(
        None, None, ["d2evo_general3"], grader=None, max_new_tokens=8, data_dir=tmp_path, say=said.append
    )
    assert res["benchmarks"] == {} and res["rollouts"] == 0
    assert set(res["skipped"]) == {"supergpqa", "mmlu_pro", "bbeh"} and len(said) == 3
    assert all("skipped, its data is absent" in m for m in said)
    assert res["groups"]["d2evo_general3"] == {
        "score": None,
        "n": 0,
        "of": 3,
        "missing": ["supergpqa", "mmlu_pro", "bbeh"],
    }
    assert "absent: supergpqa, mmlu_pro, bbeh" in format_table(res)


# ---------------------------------------------------------------- texts that credit the papers
@pytest.mark.parametrize(
    "rel",
    [
        "README.md",
        "src/coevolve/schema.py",
        "src/coevolve/rewards.py",
        "configs/d2evo.yaml",
        "src/coevolve/configs/real/grpo.yaml",
        "src/coevolve/configs/real/d2evo.yaml",
        "src/coevolve/configs/real/diagevo.yaml",
        "src/coevolve/config/d2evo.py",
        "src/coevolve/curriculum/verify.py",
        "src/coevolve/memory/maintain.py",
    ],
)
def test_no_text_credits_r_zero_values_to_the_papers(rel):
    text = (ROOT / rel).read_text(encoding="utf-8")
    for wrong in (
        "the papers' values",
        "R-Zero / D²Evo",
        "D²Evo / R-Zero",
        "(the papers' protocol)",
        "(paper: one)",
        "paper / R-Zero",
        "paper: optional, off",
        "The paper's default",
        "diagnoser size matters little",
        "D²Evo = R-Zero",
    ):
        assert wrong not in text, (rel, wrong)


def test_fidelity_table_counts_match_its_rows():
    import re

    text = (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")
    verdicts = [
        row.rstrip().rstrip("|").split("|")[-1].strip() for row in text.splitlines() if re.match(r"\| [DGB]\d+ ", row)
    ]
    kinds = [
        "deviation"
        if v.startswith("**deviation")
        else "faithful"
        if v.startswith("faithful")
        else "ours"
        if v.startswith("ours")
        else v
        for v in verdicts
    ]
    assert set(kinds) == {"faithful", "ours", "deviation"}, set(kinds)
    stated = re.search(
        r"\*\*Counts\*\* \((\d+) rows\): faithful (\d+), ours \(paper silent\) (\d+), deviation (\d+)", text
    )
    assert stated is not None
    assert [int(x) for x in stated.groups()] == [
        len(kinds),
        kinds.count("faithful"),
        kinds.count("ours"),
        kinds.count("deviation"),
    ]


def test_preflight_names_the_general_benchmarks_without_data(real_model, tmp_path, monkeypatch):
    from coevolve.preflight import absent_general_benches

    monkeypatch.delenv("COEVOLVE_DATA", raising=False)
    cfg = load_config("diagevo", None, [f"model.path={real_model}", f"eval.data_dir={tmp_path}"])
    assert absent_general_benches(cfg) == ["mmlu_pro", "gpqa_diamond", "bbeh", "supergpqa"]
    (tmp_path / "bbeh").mkdir()
    (tmp_path / "bbeh" / "test.jsonl").write_text('{"id": "a", "question": "q", "answer": "a"}\n')
    assert absent_general_benches(cfg) == ["mmlu_pro", "gpqa_diamond", "supergpqa"]
