"""Label-free round signals, round selection and early stopping (``coevolve.eval.signals``, the
probe phase of both method recipes): the signals against a slow reference on hand-made answers,
the selection and patience rules, checkpoint pinning, config checks, and on small toy runs:
a run stopped early that exports its selected round, and a run failing inside a probe that
resumes to the same result as one that did not."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.errors import ConfigError
from coevolve.eval.signals import (
    SelectRule,
    answer_entropy,
    best_round,
    parse_select,
    probe_signals,
    rank_correlation,
    select_round,
    stop_round,
)
from coevolve.run.state import PhaseRecord, PhaseState

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "diagevo_smoke.yaml"
SMALL = [
    "memory.embedder=hash",
    "eval.heldout_size=20",
    "pool.size=32",
    "solver.steps=1",
    "probe.size=12",
    "probe.samples=4",
]


# ------------------------------------------------------------------------------ slow references
def _slow_signals(
    answers: list[list[str | None]], tokens: list[list[int]], prev: list[str | None] | None, gold: list[str] | None
) -> dict[str, float | None]:
    """The signals straight from their definitions, answer by answer (exact string clusters)."""
    p1s, ents, parsed, total = [], [], 0, 0
    labels = []
    for ans in answers:
        n = len(ans)
        counts = Counter(a for a in ans if a is not None)
        top = max(counts.values()) if counts else 0
        labels.append(next((a for a in ans if a is not None and counts[a] == top), None))
        p1s.append(top / n)
        buckets = list(counts.values()) + [sum(a is None for a in ans)]
        ents.append(-sum(c / n * math.log(c / n) for c in buckets if c))
        parsed += sum(a is not None for a in ans)
        total += n
    out: dict[str, float | None] = {
        "p1": sum(p1s) / len(p1s),
        "entropy": sum(ents) / len(ents),
        "parsed": parsed / total,
        "answer_tokens": sum(sum(t) for t in tokens) / sum(len(t) for t in tokens),
        "agreement": None
        if prev is None
        else sum(lb is not None and lb == pv for lb, pv in zip(labels, prev)) / len(labels),
    }
    if gold is not None:
        out["accuracy"] = sum(lb == g for lb, g in zip(labels, gold)) / len(gold)
        out["pass_rate"] = sum(sum(a == g for a in ans) / len(ans) for ans, g in zip(answers, gold)) / len(gold)
    return out


def _clusters(ans: list[str | None]) -> tuple[list[int], str | None]:
    """Cluster sizes (descending; ties to the first seen, as ``AnswerGrader.vote``) and the label."""
    counts = Counter(a for a in ans if a is not None)
    order = sorted(counts, key=lambda a: (-counts[a], ans.index(a)))
    return [counts[a] for a in order], (order[0] if order else None)


@pytest.mark.parametrize("seed", range(6))
def test_probe_signals_match_the_slow_reference(seed: int) -> None:
    rng = random.Random(seed)
    q, n = rng.randint(1, 7), rng.randint(1, 9)
    answers = [[rng.choice(["1", "2", "3", None]) for _ in range(n)] for _ in range(q)]
    tokens = [[rng.randint(1, 40) for _ in range(n)] for _ in range(q)]
    prev = [rng.choice(["1", "2", None]) for _ in range(q)]
    gold = [rng.choice(["1", "2", "3"]) for _ in range(q)]
    sizes, labels = zip(*(_clusters(a) for a in answers))
    fast = probe_signals(
        list(sizes),
        [n] * q,
        tokens,
        agree_prev=[lb is not None and lb == pv for lb, pv in zip(labels, prev)],
        correct=[[a == g for a in ans] for ans, g in zip(answers, gold)],
        label_correct=[lb == g for lb, g in zip(labels, gold)],
        question_chars=[3, 5],
    )
    slow = _slow_signals(answers, tokens, prev, gold)
    for k, v in slow.items():
        assert fast[k] == pytest.approx(v, abs=1e-12), k
    assert fast["question_chars"] == 4.0


def test_hand_made_case() -> None:
    """Two questions, 4 answers each: {7,7,7,None} and {1,2,1,2}."""
    s = probe_signals([[3], [2, 2]], [4, 4], [[2, 2, 2, 10], [4, 4, 4, 4]])
    assert s["p1"] == pytest.approx((0.75 + 0.5) / 2)
    assert s["parsed"] == pytest.approx(7 / 8)
    h1 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert s["entropy"] == pytest.approx((h1 + math.log(2)) / 2)
    assert s["answer_tokens"] == pytest.approx(32 / 8)
    assert s["agreement"] is None and s["accuracy"] is None and s["pass_rate"] is None and s["question_chars"] is None
    assert answer_entropy([], 0) == 0.0 and answer_entropy([], 3) == 0.0  # all unparseable: one bucket
    with pytest.raises(ValueError, match="questions"):
        probe_signals([[1]], [1, 2], [[1]])


def test_rank_correlation_matches_pearson_on_ranks() -> None:
    import numpy as np

    rng = random.Random(3)
    for _ in range(20):
        k = rng.randint(3, 9)
        xs = [rng.choice([0.1, 0.2, 0.3, 0.4]) for _ in range(k)]
        ys = [rng.random() for _ in range(k)]
        rho = rank_correlation(xs, ys)

        def ranks(v: list[float]) -> list[float]:
            return [sum(u < x for u in v) + (sum(u == x for u in v) + 1) / 2 for x in v]

        rx, ry = ranks(xs), ranks(ys)
        if len(set(xs)) == 1:
            assert rho is None
        else:
            assert rho == pytest.approx(float(np.corrcoef(rx, ry)[0, 1]))
    assert rank_correlation([1, 2], [1, 2]) is None


# ------------------------------------------------------------------------------ rules
def test_selection_rules() -> None:
    vals = {0: 0.9, 1: 0.5, 2: 0.7, 3: 0.7, 4: 0.6}
    assert best_round(vals, "max") == 0 and best_round({k: v for k, v in vals.items() if k}, "max") == 2
    assert best_round({1: None, 2: None}, "max") is None
    assert select_round(parse_select("best_signal:p1"), vals, 4)[0] == 2  # round 0 never chosen; ties: earliest
    assert select_round(parse_select("best_signal:entropy"), vals, 4)[0] == 1  # lower is better
    assert select_round(parse_select("best_signal:p1"), vals, 2)[0] == 2  # only rounds run count
    assert select_round(parse_select("last"), vals, 4) == (4, "run.select=last: the last round run (4)")
    t, why = select_round(parse_select("best_signal:accuracy"), {1: None, 2: None}, 2)
    assert t == 2 and "no round" in why
    assert parse_select("best_signal:agreement") == SelectRule("best_signal", "agreement")
    for bad in ("best", "best_signal:", "best_signal:answer_tokens", "first"):
        with pytest.raises(ConfigError, match="run.select"):
            parse_select(bad)


def test_patience_rule() -> None:
    up = {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}
    assert stop_round(up, "max", 1) is None and stop_round(up, "max", None) is None
    # the base (round 0) is the reference: round 1 worse than the base is a round without improvement
    assert stop_round({0: 0.5, 1: 0.4, 2: 0.6}, "max", 1) == 1
    assert stop_round({0: 0.5, 1: 0.4, 2: 0.6}, "max", 2) is None
    # a tie is not an improvement
    assert stop_round({0: 0.1, 1: 0.3, 2: 0.3, 3: 0.3}, "max", 2) == 3
    assert stop_round({0: 1.0, 1: 0.8, 2: 0.9, 3: 0.85}, "min", 2) == 3
    # missing values (a probe without gold) never stop a run by themselves
    assert stop_round({0: None, 1: None, 2: None}, "max", 1) is None


def test_pinned_checkpoint_outlives_keep(tmp_path: Path) -> None:
    st = PhaseState.new(tmp_path / "state.json", "diagevo")

    def rec(key: str) -> PhaseRecord:
        return PhaseRecord(key, key.split("/")[1], int(key[:2]), "")

    assert st.finish(rec("01/solver"), {"solver": "checkpoints/solver_r01"}, 1, 0) == []
    assert st.finish(rec("01/probe"), {}, 1, 0, {"solver": "checkpoints/solver_r01"}) == []
    assert st.finish(rec("02/solver"), {"solver": "checkpoints/solver_r02"}, 1, 0) == []  # r01 pinned: kept
    assert st.finish(rec("03/solver"), {"solver": "checkpoints/solver_r03"}, 1, 0) == ["checkpoints/solver_r02"]
    assert st.data["checkpoint_history"]["solver"] == ["checkpoints/solver_r01", "checkpoints/solver_r03"]
    # a new pin releases the old one, which then falls out like any other
    assert st.finish(rec("03/probe"), {}, 1, 0, {"solver": "checkpoints/solver_r03"}) == ["checkpoints/solver_r01"]
    assert st.data["checkpoint_history"]["solver"] == ["checkpoints/solver_r03"]


def test_config_checks(tmp_path: Path) -> None:
    cfg = load_config("diagevo", None, [])
    assert cfg.run.select == "last" and cfg.run.stop_patience is None and cfg.probe.size == 32
    assert load_config("d2evo", None, []).probe.samples == 8
    with pytest.raises(ConfigError, match="run.select"):
        load_config("diagevo", None, ["run.select=best_signal:nope"])
    with pytest.raises(ConfigError, match="no rounds"):
        load_config("grpo", None, ["run.select=best_signal:p1"])
    with pytest.raises(ConfigError, match="every_round"):
        load_config("diagevo", None, ["run.stop_patience=2", "eval.every_round=false"])
    with pytest.raises(ConfigError, match="probe.size"):
        load_config("d2evo", None, ["run.select=best_signal:p1", "probe.size=0"])


def test_probe_is_declared_and_counted_by_the_plan() -> None:
    from coevolve.recipes.registry import recipe_of

    for recipe in ("diagevo", "d2evo"):
        cfg = load_config(recipe, None, ["rounds=2"])
        keys = [p.key for p in recipe_of(recipe).phase_list(cfg)]
        assert "base/probe" in keys and "01/probe" in keys and "02/probe" in keys
        assert keys.index("01/probe") < keys.index("01/eval")
        work = {step.name: (count, w) for step, count, w in recipe_of(recipe).work(cfg, True)}
        count, w = work["probe"]
        assert count == 3 and w.rollouts[0].rows == 32 * 8
        off = load_config(recipe, None, ["rounds=2", "probe.size=0"])
        assert not any(p.name == "probe" for p in recipe_of(recipe).phase_list(off))


# ------------------------------------------------------------------------------ toy runs
def _run(run_dir: Path, overrides: list[str]) -> dict:
    from coevolve.lab.report import write_report
    from coevolve.recipes import execute

    return execute(load_config("diagevo", SMOKE, overrides), run_dir, report=write_report)


@pytest.mark.slow
def test_early_stop_selects_pins_and_exports_the_chosen_round(tmp_path: Path, toy_overrides: list[str]) -> None:
    """A 3-round run watching agreement with patience 1 and one kept checkpoint: every later round
    is skipped once the rule fires, summary.json names the round the rule picks from the recorded
    probe figures, its checkpoint survives and ``coevolve export`` writes it by default."""
    from typer.testing import CliRunner

    from coevolve.cli import app
    from coevolve.run import Run

    rd = tmp_path / "run"
    summary = _run(
        rd,
        toy_overrides
        + SMALL
        + ["rounds=3", "run.select=best_signal:parsed", "run.stop_patience=1", "run.keep_checkpoints=1"],
    )
    run = Run.open(rd)
    probes = {r.round or 0: r.values for r in run.state.records() if r.name == "probe"}
    series = {t: v["parsed"] for t, v in probes.items()}
    stop = stop_round(series, "max", 1)
    sel = summary["selection"]
    assert sel["stopped_after"] == stop and sel["rule"] == "best_signal:parsed"
    last = stop or 3
    assert max(r.round for r in run.state.records() if r.round is not None) == last
    assert sel["round"] == select_round(parse_select("best_signal:parsed"), series, last)[0]
    assert summary["eval"]["final"] == summary["eval"]["rounds"][str(sel["round"])]
    assert all((rd / f"round_{t:02d}" / "probe_answers.jsonl").is_file() for t in range(1, last + 1))
    assert len((rd / "probe.jsonl").read_text().splitlines()) == 12
    out = tmp_path / "exported"
    res = CliRunner().invoke(app, ["export", str(rd), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"round {sel['round']}" in res.output
    meta = json.loads((out / "coevolve.json").read_text())
    assert meta["exported_from"] == f"{rd.resolve().name}/{sel['checkpoint']}"  # the weights the round measured
    assert sel["checkpoint"] == probes[sel["round"]]["checkpoint"] and sel["checkpoint"].startswith(
        "checkpoints/solver_r"
    )
    report = (rd / "report" / "report.md").read_text()
    assert "Round signals" in report and (rd / "report" / "round_signals.png").is_file()


@pytest.mark.slow
def test_a_run_failing_inside_a_probe_resumes_to_the_same_result(
    tmp_path: Path, toy_overrides: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round-1 probe fails after drawing half its answers; the resumed run equals an
    uninterrupted one (probe set, probe answers, signals, metrics rows)."""
    import coevolve.recipes.probe as probe  # the probe's sampler call (its module's name)

    ovs = toy_overrides + SMALL + ["rounds=1"]
    ref = tmp_path / "ref"
    _run(ref, ovs)
    real = probe.sample_chunked
    calls = {"n": 0}

    def failing(sampler, prompts, n, params, batch_prompts, progress=None):  # type: ignore[no-untyped-def]
        import traceback

        if (
            any("phase_probe" in f.name for f in traceback.extract_stack())
            and (tmp_path / "victim" / "round_01").is_dir()
        ):
            calls["n"] += 1
            if calls["n"] == 1:
                real(sampler, prompts[: len(prompts) // 2], n, params, batch_prompts)
                raise RuntimeError("killed inside the probe")
        return real(sampler, prompts, n, params, batch_prompts, progress)

    victim = tmp_path / "victim"
    monkeypatch.setattr(probe, "sample_chunked", failing)
    with pytest.raises(RuntimeError, match="inside the probe"):
        _run(victim, ovs)
    state = json.loads((victim / "state.json").read_text())
    assert "01/memory" in [p["key"] for p in state["phases"]] and "01/probe" not in [p["key"] for p in state["phases"]]
    _run(victim, ovs)
    for f in ("probe.jsonl", "base/probe_answers.jsonl", "round_01/probe_answers.jsonl"):
        assert (ref / f).read_text() == (victim / f).read_text(), f
    a, b = (json.loads((d / "summary.json").read_text()) for d in (ref, victim))
    strip = lambda rows: [{k: v for k, v in x.items() if "seconds" not in k} for x in rows]  # noqa: E731
    assert strip(a["rounds"]) == strip(b["rounds"]) and a["selection"] == b["selection"]
    rows = lambda d: [
        {k: v for k, v in json.loads(x).items() if k != "time" and "seconds" not in k}  # noqa: E731
        for x in (d / "metrics.jsonl").read_text().splitlines()
    ]
    assert rows(ref) == rows(victim)


@pytest.mark.slow
def test_a_world_without_training_questions_freezes_round_1s_writer_questions(
    tmp_path: Path, toy_overrides: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Label-free DiagEvo where the world has no training questions (a real model without
    data.source): the base probe is empty, round 1's probe freezes unkept writer questions of
    round 1, round 2 reuses them and measures agreement with round 1."""
    from coevolve.world.toy.world import ToyWorld

    def no_data(self, rng, n):  # type: ignore[no-untyped-def]
        raise ConfigError("data.source: this recipe needs labelled questions")

    monkeypatch.setattr(ToyWorld, "draw", no_data)
    rd = tmp_path / "run"
    _run(rd, toy_overrides + SMALL + ["rounds=2"])
    assert (rd / "base" / "probe_answers.jsonl").read_text() == ""
    probe = [json.loads(x) for x in (rd / "probe.jsonl").read_text().splitlines()]
    cands = {
        json.loads(x)["question"]: json.loads(x)["status"]
        for x in (rd / "round_01" / "candidates.jsonl").read_text().splitlines()
    }
    assert probe and all(cands.get(p["question"]) in ("filtered", "no_label", "rejected") for p in probe)
    assert all(p["answer"] is None for p in probe)
    rows = {r["round"]: r for r in json.loads((rd / "summary.json").read_text())["rounds"]}
    assert rows[1]["probe/agreement"] is None and rows[2]["probe/agreement"] is not None
    assert rows[1]["probe/accuracy"] is None and rows[2]["probe/p1"] is not None
