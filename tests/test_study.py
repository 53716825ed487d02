"""The multi-seed study (coevolve.lab.study, `coevolve study`: coevolve.lab.study_cli): statistics against slow
references, the claim rule, grid expansion, skip / resume decisions on fake run folders, the
report rendered from fixture folders, and one smoke end-to-end run through the CLI."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from coevolve.lab import study as st

ROOT = Path(__file__).resolve().parents[1]


def _script():
    from coevolve.lab import study_cli

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
    assert names == [
        "d2evo",
        "d2evo.no_questioner",
        "d2evo.no_share_weights",
        "d2evo.no_synthesis",
        "d2evo.random_anchors",
        "d2evo.rzero_reward",
        "d2evo.checked",
    ]
    assert [v.name for v in st.select_variants(["rzero", "grpo"])] == ["grpo", "rzero"]  # VARIANTS order
    assert len(st.select_variants()) == len(st.VARIANTS)
    with pytest.raises(st.StudyError, match="nope"):
        st.select_variants(["nope"])
    cells = st.expand_grid(st.select_variants(["grpo", "d2evo"]), [0, 1], tmp_path)
    assert [(c.variant.name, c.seed) for c in cells] == [("grpo", 0), ("d2evo", 0), ("grpo", 1), ("d2evo", 1)]
    assert cells[1].path == tmp_path / "d2evo" / "seed0"
    assert set(st.ablations("d2evo")) == {
        "full",
        "no_questioner",
        "no_share_weights",
        "no_synthesis",
        "random_anchors",
        "rzero_reward",
        "checked",
    }
    paper = {c.worse for c in st.claims() if c.text.startswith("ablation")}
    assert {"d2evo.no_questioner", "d2evo.random_anchors", "diagevo.no_filter", "diagevo.random_pair"} <= paper
    assert "d2evo.rzero_reward" not in paper  # ours, not a paper claim


def _fake_run(
    path: Path,
    greedy: float,
    sampled: float | None = None,
    status: str = "finished",
    summary: bool = True,
    oracle: dict[str, float] | None = None,
    n: int = 500,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "state.json").write_text(json.dumps({"status": status, "phases": []}))
    if summary:
        ev = {"toy": {"greedy": greedy, "sampled": sampled, "n": n}}
        rounds = [{"round": 1, **{f"pool/oracle_acc_{k}": v for k, v in (oracle or {}).items()}}]
        (path / "summary.json").write_text(
            json.dumps(
                {
                    "eval": {"base": {"toy": {"greedy": 0.3, "n": n}}, "final": ev},
                    "rounds": rounds,
                    "compute": {
                        "train": {"rollouts": 100, "generated_tokens": 2000, "trained_tokens": 900, "labels": 5}
                    },
                    "wall_seconds": 12.0,
                }
            )
        )
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
    (cell.path / "state.json").write_text(
        json.dumps(
            {
                "status": "finished",
                "phases": [
                    phase("eval", "base/eval", 1000),
                    phase("difficulty", "01/difficulty", 30),
                    phase("solver", "01/solver", 7),
                    phase("eval", "01/eval", 1000),
                    phase("difficulty", "final/difficulty", 30),
                ],
            }
        )
    )
    r = st.read_cell(v.name, 2, cell.path)  # training before the last eval: not the final re-measure, not evals
    assert (r.compute.rollouts, r.compute.labels) == (37, 2)


def test_a_restarted_study_refuses_while_a_run_a_killed_study_started_lives(tmp_path, capsys):
    """The study's runs die with it (``run.children``); one that still lives (its group recorded in
    the study folder) blocks a restart with one line, before any run is launched."""
    import json
    import subprocess
    import sys

    from coevolve.run.children import CHILDREN_FILE, _start_time

    mod = _script()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        rec = {"pgid": sleeper.pid, "pid": sleeper.pid, "started": _start_time(sleeper.pid), "cmd": "coevolve run"}
        (tmp_path / CHILDREN_FILE).write_text(json.dumps({"grpo seed0": rec}))
        assert mod.main(["--out", str(tmp_path), "--only", "grpo", "--seeds", "0"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"grpo seed0 (process group {sleeper.pid}" in err
        assert not (tmp_path / "grpo").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_run_grid_skips_finished_and_resumes_unfinished(tmp_path, monkeypatch):
    mod = _script()
    cells = st.expand_grid(st.select_variants(["grpo"]), [0, 1, 2], tmp_path)
    _fake_run(cells[0].path, 0.6)  # finished: skipped
    _fake_run(cells[1].path, 0.6, status="interrupted", summary=False)  # resumed
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd[3:5])
        assert kw["env"]["PYTHONPATH"].split(mod.os.pathsep)[0] == str(tmp_path / "other_src")
        return 0

    monkeypatch.setattr(mod, "run_child", fake_run)
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
    acc = {
        "grpo": [0.688, 0.678, 0.684],
        "d2evo": [0.670, 0.660, 0.654],
        "rzero": [0.60, 0.61, 0.62],
        "diagevo": [0.66, 0.65, 0.67],
    }
    for name, xs in acc.items():
        for seed, x in enumerate(xs):
            _fake_run(
                out / name / f"seed{seed}",
                x,
                x - 0.2,
                oracle={"none": 0.6, "absolute": 0.7 + seed / 100, "dual": 0.75 + seed / 50, "kept": 0.75}
                if name == "diagevo"
                else None,
            )
    _fake_run(out / "diagevo.no_filter" / "seed0", 0.65)
    md = tmp_path / "study.md"
    rc = mod.main(
        [
            "--out",
            str(out),
            "--out-md",
            str(md),
            "--report-only",
            "--only",
            "grpo,d2evo,diagevo,rzero,diagevo.no_filter",
        ]
    )
    assert rc == 0
    text = md.read_text()
    d = st.t_interval([0.670 - 0.688, 0.660 - 0.678, 0.654 - 0.684])
    assert d.high < 0
    row = next(line for line in text.splitlines() if "D²Evo beats GRPO on the same labelled set" in line)
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
    # a generated file names the command that rewrites it, at its top and in the JSON
    regen = f"--out {out} --out-md {md} --report-only --only grpo,d2evo,diagevo,rzero,diagevo.no_filter"
    assert data["generated_by"].startswith("coevolve study --preset ") and data["generated_by"].endswith(regen)
    assert f"Written by `{data['generated_by']}` from the run folders" in text.splitlines()[2]


@pytest.mark.slow
def test_smoke_study_end_to_end(tmp_path, toy_base):
    """Two seeds of the DiagEvo smoke config through the real CLI (~1-2 min), then a rerun that
    skips both finished runs."""
    preset = tmp_path / "preset"
    preset.mkdir()
    shutil.copy(ROOT / "configs" / "diagevo_smoke.yaml", preset / "diagevo.yaml")
    mod = _script()
    out, md = tmp_path / "study", tmp_path / "study.md"
    args = [
        "--preset",
        str(preset),
        "--out",
        str(out),
        "--out-md",
        str(md),
        "--only",
        "diagevo",
        "--seeds",
        "0,1",
        "run.threads=1",
        "rounds=1",
    ]
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
    resolved = {
        c.seed: {"recipe": "grpo", "data": {"limit": 64}, "run": {"seed": c.seed, "progress": False}} for c in cells
    }
    other = _fake_run(tmp_path / "other_s1", 0.61)
    (other / "config.yaml").write_text(
        yaml.safe_dump({"recipe": "grpo", "data": {"limit": 64}, "run": {"seed": 1, "progress": True}})
    )
    (other / "checkpoints").mkdir()
    wrong = _fake_run(tmp_path / "wrong_s0", 0.9)
    (wrong / "config.yaml").write_text(
        yaml.safe_dump({"recipe": "grpo", "data": {"limit": None}, "run": {"seed": 0, "progress": False}})
    )
    unfinished = _fake_run(tmp_path / "unfinished", 0.5, status="running", summary=False)
    lines = mod.adopt_runs(
        cells,
        [other, wrong, unfinished],
        ROOT / "configs",
        [],
        ROOT / "src",
        [],
        lambda m: None,
        resolve=lambda c, *a: resolved[c.seed],
    )
    assert len(lines) == 1 and "grpo seed1" in lines[0]
    assert st.read_cell("grpo", 1, cells[1].path).greedy == 0.61
    assert not (cells[1].path / "checkpoints").exists()
    assert st.cell_status(cells[0].path) == "empty"  # data.limit differs: not the same run
    lines = mod.adopt_runs(
        cells,
        [wrong],
        ROOT / "configs",
        [],
        ROOT / "src",
        ["data.limit"],
        lambda m: None,
        resolve=lambda c, *a: resolved[c.seed],
    )
    assert "apart from data.limit" in lines[0] and st.cell_status(cells[0].path) == "finished"


# ----------------------------------------------------------------------------------------------
# Welch / paired differences with the item term, Holm, power: each against a slow reference


def _slow_t_cdf(t: float, df: int) -> float:
    """P(T <= t) from the Simpson integral of the density (the references above)."""
    h = _slow_cdf_abs(abs(t), df) / 2 if t else 0.0
    return 0.5 + h if t >= 0 else 0.5 - h


def _slow_welch(a, b, item_var=0.0, n_items=0):
    """Welch's interval written out term by term, the t quantile found by scanning the slow cdf."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    terms = [(va, len(a) - 1), (vb, len(b) - 1)] + ([(item_var, n_items - 1)] if item_var else [])
    var = sum(v for v, _ in terms)
    df = var**2 / sum(v * v / d for v, d in terms)
    k = int(math.floor(df + 1e-9))
    lo, hi = 0.0, 50.0
    while hi - lo > 1e-9:  # bisection on the integrated density
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _slow_cdf_abs(mid, k, 4000) < 0.95 else (lo, mid)
    se = math.sqrt(var)
    t = (ma - mb) / se
    return ma - mb, se, df, (ma - mb - lo * se, ma - mb + lo * se), 2 * (1 - _slow_t_cdf(abs(t), k))


@pytest.mark.parametrize("item_var,n_items", [(0.0, 0), (4e-5, 3000)])
def test_welch_difference_against_a_term_by_term_reference(item_var, n_items):
    a, b = [0.612, 0.598, 0.631, 0.605], [0.571, 0.590, 0.566]
    d = st.welch_difference(a, b, item_var, n_items)
    mean, se, df, (lo, hi), p = _slow_welch(a, b, item_var, n_items)
    assert (d.kind, d.n, d.n_items) == ("welch", 3, n_items)
    assert d.mean == pytest.approx(mean) and d.se == pytest.approx(se) and d.df == pytest.approx(df)
    assert (d.low, d.high) == (pytest.approx(lo, abs=2e-6), pytest.approx(hi, abs=2e-6))
    assert d.p == pytest.approx(p, abs=1e-6)
    assert d.se_item == pytest.approx(math.sqrt(item_var)) and d.se_seed**2 + d.se_item**2 == pytest.approx(se**2)
    if item_var:  # a larger se, but a well-estimated term also raises df (the t quantile falls)
        plain = st.welch_difference(a, b)
        assert d.se > plain.se and d.df > plain.df


def test_welch_against_scipy_when_df_is_an_integer():
    from scipy import stats

    a, b = [0.61, 0.59, 0.64], [0.55, 0.57, 0.50]  # different sds: df is not an integer in general
    d = st.welch_difference(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert d.mean / d.se == pytest.approx(ref.statistic)
    # ours floors the df (conservative): the p-value is at least scipy's non-integer-df one
    assert d.p >= ref.pvalue - 1e-12
    assert d.p == pytest.approx(2 * stats.t.sf(abs(ref.statistic), math.floor(d.df)), abs=1e-9)


def test_paired_items_difference_is_the_t_interval_of_the_pairs_plus_the_item_term():
    a, b = {0: 0.61, 1: 0.58, 2: 0.60, 9: 0.1}, {0: 0.59, 1: 0.57, 2: 0.575}
    d = st.paired_items_difference(a, b)
    ref = st.t_interval([0.61 - 0.59, 0.58 - 0.57, 0.60 - 0.575])
    assert (d.kind, d.n, d.se_item) == ("paired", 3, 0.0)
    assert (d.mean, d.low, d.high) == (pytest.approx(ref.mean), pytest.approx(ref.low), pytest.approx(ref.high))
    wide = st.paired_items_difference(a, b, item_var=1e-4, n_items=500)
    assert wide.se == pytest.approx(math.sqrt(ref.se**2 + 1e-4)) and wide.low < d.low
    assert st.paired_items_difference({0: 0.5}, {0: 0.4}).low is None  # one pair: no interval
    assert st.welch_difference([0.5], [0.4, 0.41]).low is None


def _slow_item_variance(a, b, paired):
    n_items = len(a[0])
    deltas, noise = [], []
    for j in range(n_items):
        if paired:
            ds = [ra[j] - rb[j] for ra, rb in zip(a, b)]
            deltas.append(statistics.fmean(ds))
            noise.append(statistics.variance(ds) / len(ds))
        else:
            xa, xb = [r[j] for r in a], [r[j] for r in b]
            deltas.append(statistics.fmean(xa) - statistics.fmean(xb))
            noise.append(statistics.variance(xa) / len(xa) + statistics.variance(xb) / len(xb))
    return max(0.0, statistics.variance(deltas) - statistics.fmean(noise)) / n_items


@pytest.mark.parametrize("paired", [False, True])
def test_item_variance_against_loops(paired):
    import random

    rng = random.Random(3)
    a = [[float(rng.random() < 0.6 + 0.3 * (j % 3 == 0)) for j in range(40)] for _ in range(3)]
    b = [[float(rng.random() < 0.5) for j in range(40)] for _ in range(3)]
    assert st.item_variance(a, b, paired) == pytest.approx(_slow_item_variance(a, b, paired))
    with pytest.raises(st.StudyError):
        st.item_variance(a, [r[:10] for r in b])


def test_item_variance_recovers_a_known_item_spread():
    """Simulated runs: item j's true difference δ_j ~ N(0.05, 0.1²), plus per-run noise sd 0.3 on
    every item; the estimator's mean over replications is 0.1²/N (the noise removed), the raw
    variance of the observed differences would be several times larger."""
    import numpy as np

    rng = np.random.default_rng(0)
    n_items, seeds, est = 400, 3, []
    for _ in range(60):
        delta = rng.normal(0.05, 0.1, n_items)
        base = rng.normal(0.5, 0.2, n_items)
        a = (base + delta + rng.normal(0, 0.3, (seeds, n_items))).tolist()
        b = (base + rng.normal(0, 0.3, (seeds, n_items))).tolist()
        est.append(st.item_variance(a, b) * n_items)
    assert float(np.mean(est)) == pytest.approx(0.01, rel=0.15)


def test_item_variance_bootstrap_recovers_a_known_item_spread():
    """The same simulated runs as above: the bootstrap over items x seeds is, on average, near the
    true 0.1²/N and not below it (its replicates with 2 of the 3 seeds are noisier, and their
    truncation at 0 lifts the mean a little: conservative)."""
    import numpy as np

    rng = np.random.default_rng(0)
    n_items, seeds, est, pairs = 400, 3, [], []
    for _ in range(40):
        delta = rng.normal(0.05, 0.1, n_items)
        base = rng.normal(0.5, 0.2, n_items)
        a = (base + delta + rng.normal(0, 0.3, (seeds, n_items))).tolist()
        b = (base + rng.normal(0, 0.3, (seeds, n_items))).tolist()
        est.append(st.item_variance_bootstrap(a, b, reps=100) * n_items)
        pairs.append(st.item_variance_bootstrap(a, b, paired=True, reps=100) * n_items)
    assert 0.0095 < float(np.mean(est)) < 0.0125
    assert 0.0095 < float(np.mean(pairs)) < 0.0125


def test_item_variance_bootstrap_is_not_cut_to_zero_and_is_seeded():
    """Items that differ little against 0/1 noise from 3 seeds: the moment estimate falls below 0
    and is cut to 0; the bootstrap keeps a positive term below the raw (noise-inflated) bound.
    The same data give the same term (seeded); one seed in an arm gives item_variance's bound."""
    import random

    rng = random.Random(8)
    found = 0
    for trial in range(40):
        p = [0.5 + 0.02 * rng.uniform(-1, 1) for _ in range(300)]
        a = [[float(rng.random() < q) for q in p] for _ in range(3)]
        b = [[float(rng.random() < q) for q in p] for _ in range(3)]
        if st.item_variance(a, b) > 0:
            continue
        found += 1
        boot = st.item_variance_bootstrap(a, b, reps=200)
        raw = statistics.variance([statistics.fmean(x) - statistics.fmean(y) for x, y in zip(zip(*a), zip(*b))]) / 300
        assert 0 < boot < raw
        assert st.item_variance_bootstrap(a, b, reps=200) == boot
    assert found >= 5
    one = [[1.0, 0.0, 1.0]]
    assert st.item_variance_bootstrap(one, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]) == st.item_variance(
        one, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    )
    with pytest.raises(st.StudyError):
        st.item_variance_bootstrap([[1.0, 0.0], [0.0, 1.0]], [[1.0], [0.0]])


def _holm_rejects(ps, alpha):
    """The definition: order the p-values; reject H_(1..k) for the largest k with p_(i) <= α/(m-i+1) for every i <= k."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    m, out = len(ps), set()
    for rank, i in enumerate(order):
        if ps[i] <= alpha / (m - rank):
            out.add(i)
        else:
            break
    return out


def test_holm_adjusted_p_values_reject_what_the_step_down_definition_rejects():
    import random

    rng = random.Random(5)
    for _ in range(200):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 9))]
        adj = st.holm(ps)
        assert all(x >= p for x, p in zip(adj, ps)) and all(x <= 1 for x in adj)
        for alpha in (0.01, 0.05, 0.1):
            assert {i for i, x in enumerate(adj) if x <= alpha} == _holm_rejects(ps, alpha)
    assert st.holm([0.01, None, 0.04]) == [pytest.approx(0.02), None, pytest.approx(0.04)]


@pytest.mark.parametrize(
    "effect,sd,n,item_var,paired",
    [(0.02, 0.012, 3, 0.0, False), (0.02, 0.012, 5, 2e-5, False), (0.015, 0.01, 4, 1e-5, True)],
)
def test_power_against_simulated_tests(effect, sd, n, item_var, paired):
    """The analytic power against the rejection rate of the same level-0.05 test on simulated
    runs (normal seed noise, a normal item shift shared by the arms' comparison)."""
    import numpy as np

    rng = np.random.default_rng(11)
    sims, rejected = 4000, 0
    for _ in range(sims):
        shift = rng.normal(0, math.sqrt(item_var)) if item_var else 0.0
        if paired:
            d = effect + shift + rng.normal(0, sd, n)
            res = st.paired_items_difference(dict(enumerate(d)), dict.fromkeys(range(n), 0.0), item_var, 10**6)
        else:
            a, b = effect + shift + rng.normal(0, sd, n), rng.normal(0, sd, n)
            res = st.welch_difference(list(a), list(b), item_var, 10**6)
        rejected += res.p < 0.05
    assert st.power(effect, sd, n, item_var, paired=paired) == pytest.approx(rejected / sims, abs=0.025)


def test_power_tends_to_the_normal_approximation_with_many_seeds():
    from statistics import NormalDist

    z = NormalDist()
    effect, sd, n, item_var = 0.01, 0.02, 40, 1e-5
    se = math.sqrt(2 * sd * sd / n + item_var)
    approx = z.cdf(effect / se - z.inv_cdf(0.975))
    assert st.power(effect, sd, n, item_var) == pytest.approx(approx, abs=0.02)


def test_seeds_for_power_is_the_first_seed_count_that_reaches_the_target():
    n = st.seeds_for_power(0.02, 0.012)
    assert n is not None and st.power(0.02, 0.012, n) >= 0.8 > st.power(0.02, 0.012, n - 1)
    assert st.seeds_for_power(0.01, 0.01, item_var=4e-5) is None  # the item term alone hides it


# ----------------------------------------------------------------------------------------------
# the skill-world study: judged from fixture run folders with per-item records


def _skill_run(path: Path, rng, p_item, seed: int, memory=None) -> Path:
    """A finished skill-world run folder: state.json with base and final eval phases, summary.json,
    and the final evaluation's per-item records (item j correct with probability p_item(item))."""
    from coevolve.run.state import STATE_FORMAT
    from coevolve.world.skill.problems import heldout_tasks

    items = []
    for t in heldout_tasks(4):  # 4 per stratum: 119 items
        p = p_item(t)
        s = [rng.random() < p for _ in range(4)]
        items.append(
            {
                "id": t.id,
                "question": t.question,
                "gold": t.answer,
                "group": t.features["focus"],
                "correct": rng.random() < p,
                "sampled_correct": s,
                "sampled_acc": sum(s) / 4,
            }
        )
    path.mkdir(parents=True)
    phases = [
        {"key": "base/eval", "name": "eval", "round": None, "stage": "base"},
        {"key": "01/eval", "name": "eval", "round": 1, "stage": ""},
    ]
    (path / "state.json").write_text(json.dumps({"format": STATE_FORMAT, "status": "finished", "phases": phases}))
    (path / "round_01" / "eval").mkdir(parents=True)
    (path / "round_01" / "eval" / "items_skill.jsonl").write_text("\n".join(json.dumps(r) for r in items))
    (path / "base" / "eval").mkdir(parents=True)  # the base: every item right at greedy, none sampled
    (path / "base" / "eval" / "items_skill.jsonl").write_text(
        "\n".join(json.dumps({**r, "correct": True, "sampled_acc": 0.0}) for r in items)
    )
    g = sum(r["correct"] for r in items) / len(items)
    sm = sum(r["sampled_acc"] for r in items) / len(items)
    (path / "summary.json").write_text(
        json.dumps(
            {
                "eval": {
                    "base": {"skill": {"greedy": 0.3, "n": len(items)}},
                    "final": {"skill": {"greedy": g, "sampled": sm, "n": len(items)}},
                },
                "rounds": [],
                "compute": {"train": {"rollouts": 100, "labels": 5}},
                "wall_seconds": 60.0,
                "skill_world": {"memory": memory} if memory else {},
            }
        )
    )
    return path


def test_skill_study_judges_declared_claims_per_stratum_with_holm(tmp_path):
    import random

    from coevolve.lab import skill_study as ss
    from coevolve.lab import skill_study_markdown as sm
    from coevolve.world.skill.problems import DEFICITS

    rng = random.Random(0)
    deficient = set(DEFICITS.deficient)
    # targeted practice lifts the deficient skills a lot, uniform a little; clean skills equal
    arms = {"control.targeted": 0.35, "control.uniform": 0.0}
    cells = []
    for seed in range(3):
        for v, lift in arms.items():

            def p(t, lift=lift, seed=seed):
                return min(1.0, 0.4 + lift + 0.01 * seed) if t.features["focus"] in deficient else 0.8

            cell_path = _skill_run(tmp_path / v / f"seed{seed}", rng, p, seed)
            cells.append(st.read_cell(v, seed, cell_path))
    mem = {
        "causes": 3,
        "precision": 0.5,
        "precision_failures": 0.7,
        "recall_soft": 1.0,
        "recall": 0.67,
        "found": {"sub_bug": "active"},
        "top": [["sub_bug", 9]],
    }
    cells.append(st.read_cell("diagevo", 0, _skill_run(tmp_path / "diagevo" / "seed0", rng, lambda t: 0.5, 0, mem)))
    verdicts = {v.claim.key: v for v in ss.judge(cells)}
    c1 = verdicts["C1"]
    assert c1.diff.kind == "welch" and c1.n_items == 4 * 3 * 4 + 3  # the deficient strata: 3 skills x (1 + 4 x 4)
    assert c1.diff.mean == pytest.approx(c1.mean_better - c1.mean_worse) and c1.diff.mean > 0.25
    assert c1.diff.se_item > 0 and c1.verdict == "reproduced" and c1.p_holm is not None
    assert verdicts["C2"].verdict == "not run" and verdicts["M1"].verdict == "not run"
    # the item term: the same runs judged on every item have the clean items too (a smaller mean lift)
    d_all, *_ = ss.compare(cells, "control.targeted", "control.uniform", "all", "sampled", "welch")
    assert 0 < d_all.mean < c1.diff.mean
    plan = {r.claim: r for r in ss.power_plan(cells)}
    assert plan["B2"].control == "C1" and plan["B2"].effect == pytest.approx(c1.diff.mean / 2)
    assert plan["B2"].seeds is not None and plan["B2"].alpha == pytest.approx(0.05 / 14)
    assert plan["A4"].seeds is None  # its control (C2) did not run
    rows = {line.split(" | ")[0].strip("| "): line for line in sm.power_table(list(plan.values()))}
    assert rows["A4"].endswith("| - (control: < 2 seeds per arm) |")  # nothing to size from: not "unreachable"
    assert rows["B2"].endswith(f"| {plan['B2'].seeds} |")
    unreachable = ss.PowerRow("B2", "C1", 0.001, 0.05, 0.0, 0.0036, None)
    assert sm.power_table([unreachable])[-1].endswith("| unreachable (> 50) |")
    md, data = sm.render(cells, ["x seed1: not run"], ["- preset: test"])
    assert "## Declared claims" in md and "| C1 |" in md and "**reproduced**" in md
    assert "## The error memory against the injected deficits" in md and "sub_bug: active" in md
    assert data["verdicts"][0]["claim"]["key"] == "C1" and json.dumps(data)
    # seeds run against the power plan's, and the study's summed run time
    c1_row = next(line for line in md.splitlines() if line.startswith("| C1 |") and "items)" in line)
    assert "| 3 of 3 |" in c1_row and data["verdicts"][0]["arms"] == [3, 3]
    b2_row = next(line for line in md.splitlines() if line.startswith("| B2 |") and "items)" in line)
    assert f"| 0 of {plan['B2'].seeds} |" in b2_row
    assert sm.seeds_cell(2, None, "paper") == "2 of >50" and sm.seeds_cell(3, 7, "paper") == "3 of 7"
    assert sm.seeds_cell(8, 7, "paper", (8, 14)) == "8 + 14 of 7" and sm.seeds_cell(3, 7, "paper", (3, 3)) == "3 of 7"
    assert sm.group_missing(["x seed1: not run"]) == ["x: seed 1 (not run)"]
    assert sm.group_missing(["g seed3: not run", "g seed4: not run", "g seed6: not run", "g seed5: failed", "odd"]) == [
        "g: seeds 3-4, 6 (not run)",
        "g: seed 5 (failed)",
        "odd",
    ]
    assert "- x: seed 1 (not run)" in md
    assert f"| base | {len(cells)} runs | 1.000 / 0.000 | 1.000 / 0.000 |" in md  # read from base/eval
    total = sum(c.wall_seconds or 0 for c in cells)
    assert f"{len(cells)} runs, {total / 3600:.2f} h summed" in md


def _skill_arms(tmp_path, rng, arms: dict[str, tuple[float, float]], seeds: int = 3):
    """Fixture cells: per variant (deficient lift, seed-to-seed spread of the lift: seed s lifts by
    spread x (s - 1) more), ``seeds`` runs each."""
    from coevolve.world.skill.problems import DEFICITS

    deficient, cells = set(DEFICITS.deficient), []
    for v, (lift, spread) in arms.items():
        for seed in range(seeds):
            off = spread * (seed - 1)

            def p(t, lift=lift, off=off):
                return min(1.0, max(0.0, 0.4 + lift + off)) if t.features["focus"] in deficient else 0.8

            cells.append(st.read_cell(v, seed, _skill_run(tmp_path / v / f"seed{seed}", rng, p, seed)))
    return cells


def test_power_plan_takes_the_seed_sd_from_a_pilot_of_the_claims_own_arms(tmp_path):
    """G1's arms (diagevo, rzero) ran 3 seeds each with a large seed spread: the plan uses their sd,
    not the control's, and asks for more seeds; B2's other arm never ran: the control's sd, with a
    note; G1's null verdict carries the realised power of its own test."""
    import random

    from coevolve.lab import skill_study as ss
    from coevolve.lab import skill_study_markdown as sm

    arms = {"control.targeted": (0.3, 0.0), "control.uniform": (0.0, 0.0), "diagevo": (0.1, 0.15), "rzero": (0.1, 0.15)}
    cells = _skill_arms(tmp_path, random.Random(1), arms)
    plan = {r.claim: r for r in ss.power_plan(cells)}
    g1, b2 = plan["G1"], plan["B2"]
    mine = [ss.arm_means(cells, v, "deficient", "sampled") for v in ("diagevo", "rzero")]
    pooled = math.sqrt(statistics.fmean(statistics.variance(list(m.values())) for m in mine))
    ctl = [ss.arm_means(cells, v, "deficient", "sampled") for v in ("control.targeted", "control.uniform")]
    ctl_sd = math.sqrt(statistics.fmean(statistics.variance(list(m.values())) for m in ctl))
    assert g1.sd_from == "pilot" and g1.sd == pytest.approx(pooled) and g1.sd > 2 * ctl_sd
    assert b2.sd_from == "control" and b2.sd == pytest.approx(ctl_sd * math.sqrt(2))  # paired: a pair's sd
    assert g1.seeds is None or g1.seeds > st.seeds_for_power(g1.effect, ctl_sd, g1.item_var, g1.alpha)
    notes = ss.power_notes(list(plan.values()))
    assert any(n.startswith("- B2: no pilot of its own arms") for n in notes)
    assert not any(n.startswith("- G1:") for n in notes)
    verdicts = {v.claim.key: v for v in ss.realised_power(cells, ss.judge(cells), list(plan.values()))}
    v = verdicts["G1"]
    assert v.verdict == "not distinguishable"
    assert v.power == pytest.approx(st.power(g1.effect, pooled, v.diff.n, v.diff.se_item**2, g1.alpha))
    assert 0 < v.power < 0.8 and verdicts["C1"].power is None  # only nulls carry it
    md, data = sm.render(cells, [], ["- preset: test"])
    g1_row = next(line for line in md.splitlines() if line.startswith("| G1 |") and "items)" in line)
    assert f"**not distinguishable** (power {v.power:.2f})" in g1_row
    assert "| pilot |" in md and "- B2: no pilot of its own arms" in md
    assert next(x for x in data["verdicts"] if x["claim"]["key"] == "G1")["power"] == pytest.approx(v.power)


def test_a_control_that_is_not_positive_sizes_no_claim(tmp_path):
    """The targeted arm below the uniform one (a failed control): no effect of interest, no seed
    count, whatever the size of the negative difference."""
    import random

    from coevolve.lab import skill_study as ss
    from coevolve.lab import skill_study_markdown as sm

    cells = _skill_arms(tmp_path, random.Random(2), {"control.targeted": (0.0, 0.0), "control.uniform": (0.2, 0.0)})
    c1 = next(v for v in ss.judge(cells) if v.claim.key == "C1")
    assert c1.diff.mean < -0.1
    plan = {r.claim: r for r in ss.power_plan(cells)}
    assert plan["B2"].effect is None and plan["B2"].seeds is None and plan["B2"].sd is not None
    assert sm.power_table([plan["B2"]])[-1].endswith("| - (control not positive) |")
    assert any(n.startswith("- B2: its control C1 is not positive") for n in ss.power_notes(list(plan.values())))


def test_a_study_whose_runs_need_a_missing_extra_refuses_before_its_folder(tmp_path, capsys, monkeypatch):
    """Each cell's `coevolve run` would refuse for the missing extra; the study says so first, in
    the run's own line, and makes neither --out nor study_spec.json."""
    import sys

    mod = _script()
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what extras.have reads as not installed
    out = tmp_path / "study"
    assert mod.main(["--out", str(out), "--only", "grpo", "--seeds", "0", "run.trackers=[tensorboard]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: run.trackers=tensorboard needs the 'track' extra (tensorboard not installed): " + (
        "pip install 'coevolve[track]'"
    )
    assert not out.exists()
    assert mod.main(["--out", str(out), "--only", "grpo", "--seeds", "0", "solver.stepz=1"]) == 2
    assert "did you mean 'solver.steps'?" in capsys.readouterr().err and not out.exists()
