"""The multi-seed study (coevolve.eval.study, `coevolve study`: coevolve.eval.study_cli): statistics against slow
references, the claim rule, grid expansion, skip / resume decisions on fake run folders, the
report rendered from fixture folders, and one smoke end-to-end run through the CLI."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from coevolve.eval import study as st

ROOT = Path(__file__).resolve().parents[1]


def _script():
    from coevolve.eval import study_cli

    return study_cli


def _t_pdf(x: float, df: int) -> float:
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    return c * (1 + x * x / df) ** (-(df + 1) / 2)


def _slow_cdf_abs(t: float, df: int, n: int = 20000) -> float:
    """P(|T| <= t) by Simpson's rule on the density (the reference for the closed form)."""
    h = 2 * t / n
    s = _t_pdf(-t, df) + _t_pdf(t, df)
    s += sum((4 if i % 2 else 2) * _t_pdf(-t + i * h, df) for i in range(1, n))
    return s * h / 3


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10])
@pytest.mark.parametrize("t", [0.3, 1.0, 2.5])
def test_t_cdf_matches_numerical_integration(df, t):
    assert st.t_cdf_abs(t, df) == pytest.approx(_slow_cdf_abs(t, df), abs=1e-7)


def test_t_quantile_is_the_table_value_and_inverts_the_cdf():
    # t_{0.975, df} from any statistics table
    for df, want in [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (30, 2.0423)]:
        q = st.t_quantile(0.95, df)
        assert q == pytest.approx(want, abs=1e-4)
        assert _slow_cdf_abs(q, df) == pytest.approx(0.95, abs=1e-6)
    assert st.t_quantile(0.90, 5) < st.t_quantile(0.95, 5) < st.t_quantile(0.99, 5)
    with pytest.raises(st.StudyError):
        st.t_quantile(1.0, 3)


def test_t_interval_against_a_loop():
    xs = [0.688, 0.678, 0.684]  # grpo's three seeds in the default toy world (docs/results/toy_worlds.md)
    i = st.t_interval(xs)
    mean = statistics.fmean(xs)
    sd = statistics.stdev(xs)
    half = st.t_quantile(0.95, 2) * sd / math.sqrt(3)
    assert (i.n, i.mean, i.sd) == (3, pytest.approx(mean), pytest.approx(sd))
    assert (i.low, i.high) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert i.low < mean < i.high and i.high - i.low == pytest.approx(2 * 4.3027 * sd / math.sqrt(3), rel=1e-4)
    one = st.t_interval([0.5])
    assert (one.n, one.mean, one.low, one.sd) == (1, 0.5, None, None)
    assert st.t_interval([]).mean is None


def test_paired_difference_uses_common_seeds_and_cancels_the_seed_effect():
    # every seed moves both methods together: unpaired intervals overlap, the paired one does not
    a = {0: 0.70, 1: 0.60, 2: 0.65, 7: 0.99}
    b = {0: 0.68, 1: 0.585, 2: 0.628}
    d = st.paired_difference(a, b)
    ref = st.t_interval([0.70 - 0.68, 0.60 - 0.585, 0.65 - 0.628])
    assert d == ref and d.n == 3  # seed 7 has no partner
    ia, ib = st.t_interval([a[s] for s in b]), st.t_interval(list(b.values()))
    assert ia.low < ib.high  # unpaired: overlapping
    assert d.low > 0  # paired: separated
    assert st.claim_verdict(d) == st.REPRODUCED


def test_claim_rule():
    iv = lambda lo, hi, n=3: st.Interval(n, (lo + hi) / 2, 0.01, 0.005, lo, hi)  # noqa: E731
    assert st.claim_verdict(iv(0.001, 0.03)) == st.REPRODUCED
    assert st.claim_verdict(iv(-0.03, -0.001)) == st.NOT_REPRODUCED
    assert st.claim_verdict(iv(-0.01, 0.02)) == st.NOT_DISTINGUISHABLE
    assert st.claim_verdict(iv(0.0, 0.02)) == st.NOT_DISTINGUISHABLE  # touching 0 is not excluding it
    assert st.claim_verdict(st.t_interval([0.1])) == st.NOT_RUN
    assert st.binomial_se(0.5, 500) == pytest.approx(0.02236, abs=1e-5)


def test_variants_grid_and_selection(tmp_path):
    from coevolve.config import load_config

    for v in st.VARIANTS.values():  # every variant is a valid config of its preset file
        load_config(v.recipe, ROOT / "configs" / v.config, list(v.overrides))
    names = [v.name for v in st.select_variants([], ["d2evo"])]
    assert names == ["d2evo", "d2evo.no_questioner", "d2evo.no_share_weights", "d2evo.no_synthesis",
                     "d2evo.random_anchors", "d2evo.rzero_reward"]
    assert [v.name for v in st.select_variants(["rzero", "grpo"])] == ["grpo", "rzero"]  # VARIANTS order
    assert len(st.select_variants()) == len(st.VARIANTS)
    with pytest.raises(st.StudyError, match="nope"):
        st.select_variants(["nope"])
    cells = st.expand_grid(st.select_variants(["grpo", "d2evo"]), [0, 1], tmp_path)
    assert [(c.variant.name, c.seed) for c in cells] == [("grpo", 0), ("d2evo", 0), ("grpo", 1), ("d2evo", 1)]
    assert cells[1].path == tmp_path / "d2evo" / "seed0"
    assert set(st.ablations("d2evo")) == {"full", "no_questioner", "no_share_weights", "no_synthesis",
                                          "random_anchors", "rzero_reward"}
    paper = {c.worse for c in st.claims() if c.text.startswith("ablation")}
    assert {"d2evo.no_questioner", "d2evo.random_anchors", "diagevo.no_filter", "diagevo.random_pair"} <= paper
    assert "d2evo.rzero_reward" not in paper  # ours, not a paper claim


def _fake_run(path: Path, greedy: float, sampled: float | None = None, status: str = "finished",
              summary: bool = True, oracle: dict[str, float] | None = None, n: int = 500) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "state.json").write_text(json.dumps({"status": status, "phases": []}))
    if summary:
        ev = {"toy": {"greedy": greedy, "sampled": sampled, "n": n}}
        rounds = [{"round": 1, **{f"pool/oracle_acc_{k}": v for k, v in (oracle or {}).items()}}]
        (path / "summary.json").write_text(json.dumps({
            "eval": {"base": {"toy": {"greedy": 0.3, "n": n}}, "final": ev}, "rounds": rounds,
            "compute": {"train": {"rollouts": 100, "generated_tokens": 2000, "trained_tokens": 900, "labels": 5}},
            "wall_seconds": 12.0}))
    return path


def test_skip_and_resume_decisions(tmp_path):
    v = st.VARIANTS["d2evo.no_questioner"]
    cell = st.Cell(v, 2, tmp_path / v.name / "seed2")
    assert st.cell_status(cell.path) == "empty"
    cmd = st.run_command(cell, ROOT / "configs", ["run.threads=1", "rounds=2"], "py")
    assert cmd[:5] == ["py", "-m", "coevolve", "run", "d2evo"]
    assert cmd[cmd.index("-c") + 1] == str(ROOT / "configs" / "d2evo.yaml")
    # study overrides, then the variant's (they win), then the seed
    assert cmd[-4:] == ["run.threads=1", "rounds=2", "questioner=false", "run.seed=2"]
    _fake_run(cell.path, 0.5, status="running", summary=False)  # killed mid-run
    assert st.cell_status(cell.path) == "unfinished"
    assert st.run_command(cell, ROOT / "configs", [], "py")[:5] == ["py", "-m", "coevolve", "resume", str(cell.path)]
    _fake_run(cell.path, 0.5, status="finished", summary=False)  # finished but summary lost: not complete
    assert st.cell_status(cell.path) == "unfinished"
    _fake_run(cell.path, 0.5)
    assert st.cell_status(cell.path) == "finished"
    r = st.read_cell(v.name, 2, cell.path)
    assert (r.greedy, r.n, r.compute.labels, r.base_greedy) == (0.5, 500, 5, 0.3)  # no phase compute: summary's
    phase = lambda name, key, n: {"key": key, "name": name, "compute": {"rollouts": n, "labels": 1}}  # noqa: E731
    (cell.path / "state.json").write_text(json.dumps({"status": "finished", "phases": [
        phase("eval", "base/eval", 1000), phase("difficulty", "01/difficulty", 30), phase("solver", "01/solver", 7),
        phase("eval", "01/eval", 1000), phase("difficulty", "final/difficulty", 30)]}))
    r = st.read_cell(v.name, 2, cell.path)  # training before the last eval: not the final re-measure, not evals
    assert (r.compute.rollouts, r.compute.labels) == (37, 2)


def test_run_grid_skips_finished_and_resumes_unfinished(tmp_path, monkeypatch):
    mod = _script()
    cells = st.expand_grid(st.select_variants(["grpo"]), [0, 1, 2], tmp_path)
    _fake_run(cells[0].path, 0.6)  # finished: skipped
    _fake_run(cells[1].path, 0.6, status="interrupted", summary=False)  # resumed
    calls = []

    class Done:
        returncode = 0

    def fake_run(cmd, **kw):
        calls.append(cmd[3:5])
        assert kw["env"]["PYTHONPATH"].split(mod.os.pathsep)[0] == str(tmp_path / "other_src")
        return Done()

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    failures = mod.run_grid(cells, ROOT / "configs", [], None, lambda m: None, tmp_path / "other_src")
    assert calls == [["resume", str(cells[1].path)], ["run", "grpo"]]
    assert len(failures) == 2  # the fake runs wrote nothing: both still unfinished, reported
    calls.clear()
    past = mod.stop_deadline("2000-01-01T00:00", mod.dt.datetime.now(mod.dt.timezone.utc))
    mod.run_grid(cells, ROOT / "configs", [], past, lambda m: None)  # stop-at in the past: launches nothing
    assert calls == []
    now = mod.dt.datetime(2026, 11, 30, 22, 50, tzinfo=mod.dt.timezone.utc)
    assert mod.stop_deadline("00:05", now) == mod.dt.datetime(2026, 12, 1, 0, 5, tzinfo=mod.dt.timezone.utc)
    assert mod.stop_deadline("23:40", now) == mod.dt.datetime(2026, 11, 30, 23, 40, tzinfo=mod.dt.timezone.utc)
    assert mod.stop_deadline(None, now) is None
    late = mod.dt.datetime(2026, 12, 1, 0, 9, tzinfo=mod.dt.timezone.utc)  # just past 00:08: passed, not tomorrow
    assert mod.stop_deadline("00:08", late) == mod.dt.datetime(2026, 12, 1, 0, 8, tzinfo=mod.dt.timezone.utc)
    assert mod.stop_deadline("23:50", late) == mod.dt.datetime(2026, 11, 30, 23, 50, tzinfo=mod.dt.timezone.utc)


def test_report_only_renders_from_fixture_folders(tmp_path):
    mod = _script()
    out = tmp_path / "study"
    acc = {"grpo": [0.688, 0.678, 0.684], "d2evo": [0.670, 0.660, 0.654], "rzero": [0.60, 0.61, 0.62],
           "diagevo": [0.66, 0.65, 0.67]}
    for name, xs in acc.items():
        for seed, x in enumerate(xs):
            _fake_run(out / name / f"seed{seed}", x, x - 0.2,
                      oracle={"none": 0.6, "absolute": 0.7 + seed / 100, "dual": 0.75 + seed / 50,
                              "kept": 0.75} if name == "diagevo" else None)
    _fake_run(out / "diagevo.no_filter" / "seed0", 0.65)
    md = tmp_path / "study.md"
    rc = mod.main(["--out", str(out), "--out-md", str(md), "--report-only", "--only",
                   "grpo,d2evo,diagevo,rzero,diagevo.no_filter"])
    assert rc == 0
    text = md.read_text()
    d = st.t_interval([0.670 - 0.688, 0.660 - 0.678, 0.654 - 0.684])
    assert d.high < 0
    row = next(line for line in text.splitlines() if "D²Evo beats full-label GRPO" in line)
    assert f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]" in row and "**not reproduced**" in row
    row = next(line for line in text.splitlines() if line.startswith("| D²Evo beats the R-Zero"))
    assert "**reproduced**" in row
    row = next(line for line in text.splitlines() if "ablation diagevo.no_filter" in line)
    assert "**not run**" in row  # one seed only: never a verdict
    row = next(line for line in text.splitlines() if "over no filter" in line)
    assert "**reproduced**" in row  # dual 0.75..0.79 vs none 0.6 on the same pools
    assert "diagevo.no_filter seed1: not run" in text and "diagevo.no_filter seed2: not run" in text
    sep = st.t_interval([0.688 - 0.60, 0.678 - 0.61, 0.684 - 0.62])  # best grpo, worst rzero
    assert f"greedy accuracy: best grpo - worst rzero = {sep.mean:+.3f}" in text
    assert f"{sep.mean / sep.se:.1f} standard errors" in text and "on sampled accuracy: best grpo" in text
    g, r = st.t_interval([0.688, 0.678, 0.684]), st.t_interval([0.60, 0.61, 0.62])
    assert f"unpaired (each method's own seed se): {(g.mean - r.mean) / math.hypot(g.se, r.se):.1f}" in text
    data = json.loads((out / "study.json").read_text())
    assert len(data["cells"]) == 13 and data["missing"] and "grpo" in json.dumps(data["variants"])


@pytest.mark.slow
def test_smoke_study_end_to_end(tmp_path, toy_base):
    """Two seeds of the DiagEvo smoke config through the real CLI (~1-2 min), then a rerun that
    skips both finished runs."""
    preset = tmp_path / "preset"
    preset.mkdir()
    shutil.copy(ROOT / "configs" / "diagevo_smoke.yaml", preset / "diagevo.yaml")
    mod = _script()
    out, md = tmp_path / "study", tmp_path / "study.md"
    args = ["--preset", str(preset), "--out", str(out), "--out-md", str(md), "--only", "diagevo", "--seeds", "0,1",
            "run.threads=1", "rounds=1"]
    assert mod.main(args) == 0
    for s in (0, 1):
        assert st.cell_status(out / "diagevo" / f"seed{s}") == "finished"
    text = md.read_text()
    assert "| diagevo | 0,1 |" in text and "accuracy_vs_compute.png" in text
    assert (tmp_path / "study_accuracy_vs_compute.png").is_file()
    before = (out / "diagevo" / "seed0" / "summary.json").stat().st_mtime_ns
    assert mod.main(args) == 0  # resumable: finished runs are skipped, nothing is rerun
    assert (out / "diagevo" / "seed0" / "summary.json").stat().st_mtime_ns == before


def test_adopt_copies_a_matching_finished_run_and_refuses_others(tmp_path):
    import yaml

    mod = _script()
    cells = st.expand_grid(st.select_variants(["grpo"]), [0, 1], tmp_path / "study")
    resolved = {c.seed: {"recipe": "grpo", "data": {"limit": 64}, "run": {"seed": c.seed, "progress": False}}
                for c in cells}
    other = _fake_run(tmp_path / "other_s1", 0.61)
    (other / "config.yaml").write_text(yaml.safe_dump({"recipe": "grpo", "data": {"limit": 64},
                                                       "run": {"seed": 1, "progress": True}}))
    (other / "checkpoints").mkdir()
    wrong = _fake_run(tmp_path / "wrong_s0", 0.9)
    (wrong / "config.yaml").write_text(yaml.safe_dump({"recipe": "grpo", "data": {"limit": None},
                                                       "run": {"seed": 0, "progress": False}}))
    unfinished = _fake_run(tmp_path / "unfinished", 0.5, status="running", summary=False)
    lines = mod.adopt_runs(cells, [other, wrong, unfinished], ROOT / "configs", [], ROOT / "src", [],
                           lambda m: None, resolve=lambda c, *a: resolved[c.seed])
    assert len(lines) == 1 and "grpo seed1" in lines[0]
    assert st.read_cell("grpo", 1, cells[1].path).greedy == 0.61
    assert not (cells[1].path / "checkpoints").exists()
    assert st.cell_status(cells[0].path) == "empty"  # data.limit differs: not the same run
    lines = mod.adopt_runs(cells, [wrong], ROOT / "configs", [], ROOT / "src", ["data.limit"],
                           lambda m: None, resolve=lambda c, *a: resolved[c.seed])
    assert "apart from data.limit" in lines[0] and st.cell_status(cells[0].path) == "finished"
