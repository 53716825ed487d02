"""The skill base's premise gate: the figures its build measures (soft-stratum accuracy, bug rates
against the injected ones, non-bug errors on the deficient skills), the record in
skill_build.json, the preflight's refusal, and the gate's second half from a run's round 1."""

from __future__ import annotations

import doctest
import json
import random
from pathlib import Path

import pytest

from coevolve.errors import ConfigError
from coevolve.world.skill import causes as sc
from coevolve.world.skill import gate as G
from coevolve.world.skill import problems as sw
from coevolve.world.skill.config import GateThresholds


def test_doctests() -> None:
    assert doctest.testmod(G).failed == 0


def _trace(q: str, bugs=None) -> str:
    p = sw.make_problem(q)
    steps = sw.run_chain(p.start, p.ops, bugs)
    return f"<think>{' '.join(s.text() for s in steps)}</think>\\boxed{{{steps[-1].result}}}"


def test_step_outcomes_name_the_bug_the_slip_and_the_other_failures():
    q = "93-27~*3"  # 66 -> 66 -> 198; the sub and mul steps exercise their bugs, reversing 66 cannot
    assert sc.trace_step_outcomes(q, _trace(q)) == [
        ("sub", True, "right"),
        ("rev", False, "right"),
        ("mul", True, "right"),
    ]
    assert sc.trace_step_outcomes(q, _trace(q, [True, False, False])) == [("sub", True, "bug")]
    assert sc.trace_step_outcomes(q, "<think>93-27=65 ~65=56 56*3=168</think>\\boxed{168}") == [("sub", True, "slip")]
    assert sc.trace_step_outcomes(q, "<think>93-27=66 66*3=198</think>\\boxed{198}")[-1] == ("rev", False, "other")
    assert sc.trace_step_outcomes(q, "<think>93-27=66 ~66=66</think>\\boxed{66}")[-1] == ("mul", True, "other")


def _old_trace_bug_steps(question: str, completion: str) -> list[tuple[str, bool]]:
    """trace_bug_steps as it was written before the step outcomes (the reference)."""
    c = sw.parse_chain(question)
    p = sw.make_problem(sw.question_text(*c))
    steps, _ = sc.parse_trace(completion)
    out = []
    for i, s in enumerate(steps[: len(p.steps)]):
        ref = p.steps[i]
        prim = sw.PRIMITIVES[ref.skill]
        got = sc.parse_step(s)
        if got is None or got[:3] != (ref.skill, ref.value, ref.operand):
            break
        if prim.exercises(ref.value, ref.operand):
            bug = got[3] == prim.apply(ref.value, ref.operand, buggy=True)
            out.append((ref.skill, bug))
            if bug:
                break
        if got[3] != ref.result:
            break
    return out


def test_trace_bug_steps_is_unchanged_on_random_buggy_and_slipped_traces():
    rng = random.Random(4)
    for _ in range(1500):
        q = sw.question_text(*sw.draw_chain(rng, rng.choice(sw.DEPTHS), {s: 1.0 for s in sw.SKILLS}))
        p = sw.make_problem(q)
        texts = [s.text() for s in sw.run_chain(p.start, p.ops, [rng.random() < 0.3 for _ in p.ops])]
        if rng.random() < 0.3:  # a slip: one result digit changed
            k = rng.randrange(len(texts))
            head, _, val = texts[k].rpartition("=")
            texts[k] = f"{head}={(int(val) + 1) % 1000}"
        if rng.random() < 0.2:
            texts = texts[: rng.randrange(len(texts) + 1)]
        c = f"<think>{' '.join(texts)}</think>\\boxed{{0}}"
        assert sc.trace_bug_steps(q, c) == _old_trace_bug_steps(q, c), (q, c)


def _figures(greedy=0.9, sampled=0.65, bug=None, nonbug=None):
    return {
        "strata": {"soft": {"n": 200, "greedy": greedy, "sampled": sampled}},
        "bug_rate": bug or {"sub": 0.33, "mul": 0.37, "div": 0.68, "add": 0.0},
        "nonbug_error_rate": nonbug or {"sub": 0.02, "mul": 0.03, "div": 0.04, "add": 0.5},
    }


def test_the_gate_judges_each_figure_against_its_threshold():
    g = G.premise_gate(_figures(), sw.DEFICITS)
    assert g["passed"] and [c["figure"] for c in g["checks"]] == [
        "soft_greedy",
        "soft_sampled",
        "bug_rate.sub",
        "bug_rate.mul",
        "bug_rate.div",
        "nonbug_error.sub",
        "nonbug_error.mul",
        "nonbug_error.div",
    ]  # clean skills' figures are not gated
    assert g["thresholds"] == GateThresholds().model_dump() and "0.70" in g["second_half"]
    bug = next(c for c in g["checks"] if c["figure"] == "bug_rate.div")
    assert (bug["injected"], bug["min"], bug["max"]) == (0.7, 0.65, 0.75)
    for figs, failed in [
        (_figures(greedy=0.84), "soft_greedy 0.840 (needs >= 0.85)"),
        (_figures(sampled=0.71), "soft_sampled 0.710 (needs 0.60-0.70)"),
        (_figures(sampled=0.59), "soft_sampled 0.590 (needs 0.60-0.70)"),
        (_figures(bug={"sub": 0.29, "mul": 0.35, "div": 0.7}), "bug_rate.sub 0.290 (needs 0.30-0.40)"),
        (_figures(bug={"sub": 0.35, "div": 0.7}), "bug_rate.mul not measured (needs 0.30-0.40)"),
        (_figures(nonbug={"sub": 0.17, "mul": 0.0, "div": 0.0}), "nonbug_error.sub 0.170 (needs <= 0.05)"),
    ]:
        g = G.premise_gate(figs, sw.DEFICITS)
        assert not g["passed"] and G.failed_figures(g) == failed
    loose = GateThresholds(soft_greedy_min=0.5)
    assert G.premise_gate(_figures(greedy=0.55), sw.DEFICITS, loose)["passed"]
    assert G.premise_gate({"bug_rate": {}}, sw.DEFICITS) is None  # a base measured before the gate


def _base(tmp_path: Path, figures: dict | None) -> Path:
    d = tmp_path / "base"
    d.mkdir(parents=True, exist_ok=True)
    info = {"world": "skill", "profile": sw.DEFICITS.to_dict(), "figures": figures or {}}
    (d / "skill_build.json").write_text(json.dumps(info))
    return d


def _check(base: Path, mode: str, figures_said: list[str]) -> None:
    info = json.loads((base / "skill_build.json").read_text())
    G.check_base_gate(base, info, sw.DEFICITS, GateThresholds(), mode, figures_said.append)


def test_refuse_refuses_a_failing_or_unrecorded_base_in_one_line_warn_prints_ignore_skips(tmp_path):
    bad = _base(tmp_path / "bad", _figures(greedy=0.553))
    said: list[str] = []
    with pytest.raises(ConfigError) as e:
        _check(bad, "refuse", said)
    msg = str(e.value)
    assert "\n" not in msg and "soft_greedy 0.553 (needs >= 0.85)" in msg and "data.skill.gate=warn" in msg
    _check(bad, "warn", said)
    (line,) = said
    assert line.startswith("warning (data.skill.gate=warn):") and "soft_greedy 0.553" in line
    _check(bad, "ignore", said)
    assert len(said) == 1
    old = _base(tmp_path / "old", None)
    with pytest.raises(ConfigError, match="has no premise-gate record"):
        _check(old, "refuse", said)
    _check(_base(tmp_path / "good", _figures()), "refuse", said)  # passes: nothing said
    assert len(said) == 1


def test_the_build_records_its_gate_and_the_preflight_refuses_it_when_asked(tiny_skill_cache):
    from coevolve.config import load_config
    from coevolve.preflight import check_skill_gate
    from coevolve.world.skill.pretrain import skill_base_dir

    base = skill_base_dir(tiny_skill_cache / "skill", 2, 0)
    info = json.loads((base / "skill_build.json").read_text())
    figs = info["figures"]
    assert figs["strata"]["soft"]["n"] == 2 * 5 and set(figs["strata"]) == {"soft", "hard", "deficient", "clean"}
    assert set(figs["nonbug_error_rate"]) == set(sw.SKILLS) and figs["nonbug_steps"]["sub"] >= figs["bug_steps"]["sub"]
    gate = info["premise_gate"]
    assert gate == G.premise_gate(figs, sw.DEFICITS) and gate["passed"] is False  # 2 steps: a blank model
    over = ["data.source=skill", f"model.toy_cache={tiny_skill_cache}", "data.skill.base_steps=2"]
    with pytest.raises(ConfigError, match=r"^data\.skill\.gate=refuse: the skill base .* fails its premise gate: "):
        check_skill_gate(load_config("grpo", None, [*over, "data.skill.gate=refuse"]), lambda m: None)
    said: list[str] = []
    check_skill_gate(load_config("grpo", None, over), said.append)  # the default: warn
    assert any(m.startswith("warning (data.skill.gate=warn): the skill base") for m in said)
    said.clear()
    check_skill_gate(load_config("grpo", None, [*over, "data.skill.gate=ignore"]), said.append)
    assert said == []
    check_skill_gate(load_config("grpo", None, ["data.skill.gate=refuse"]), said.append)  # the toy world: no gate
    assert said == []


def test_the_summary_judges_round_one_kept_labels_against_the_gate(tmp_path):
    from coevolve.recipes import summary
    from coevolve.run import Phase, PhaseResult, Run

    out = {}
    for name, kept in (("low", 0.46), ("high", 0.75)):
        run = Run.create(tmp_path / name, "recipe: d2evo\n", "d2evo", say=lambda m: None)
        run.phase(Phase("buffer", 1), lambda ctx, a=kept: PhaseResult({"oracle_acc_kept": a}, rollouts=1))
        out[name] = summary.write_summary(run, {"skill_world": {"profile": {}}}, gate=GateThresholds())
    low = out["low"]["skill_world"]
    assert low["profile"] == {} and low["premise_gate_round1"] == {
        "figure": "kept_label_accuracy",
        "value": 0.46,
        "min": 0.7,
        "max": None,
        "passed": False,
    }
    assert out["high"]["skill_world"]["premise_gate_round1"]["passed"] is True and out["high"]["warnings"] == []
    (warning,) = out["low"]["warnings"]  # 46 %: below one half, the general warning says it
    assert warning.startswith("round 1: kept pseudo-labels right 46.0 %")
    run = Run.create(tmp_path / "mid", "recipe: d2evo\n", "d2evo", say=lambda m: None)
    run.phase(Phase("buffer", 1), lambda ctx: PhaseResult({"oracle_acc_kept": 0.6}, rollouts=1))
    (warning,) = summary.write_summary(run, gate=GateThresholds())["warnings"]
    assert "60.0 %" in warning and "premise gate (70 %" in warning
    plain = summary.write_summary(Run.create(tmp_path / "toy", "recipe: grpo\n", "grpo", say=lambda m: None))
    assert "skill_world" not in plain
