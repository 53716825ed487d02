"""Compute counters (``coevolve.run.compute``): hand-counted fakes for the meter, the metered
sampler, the GRPO loop's trained tokens and the cumulative fold; the report and ``--compare``
over run folders (with and without counters); and the counters after ``kill -9`` + resume on the
toy world equal those of an uninterrupted run."""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from coevolve.errors import DataError
from coevolve.loop import Observed, Role, grpo_train
from coevolve.run import Phase, PhaseContext
from coevolve.run.compute import Compute, ComputeMeter, MeteredSampler, cumulative, unmetered
from coevolve.run.metrics import MetricsLog
from coevolve.run.state import PhaseRecord
from coevolve.schema import GRPOPhase
from coevolve.types import Completion, SamplingParams, Task

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import kill_fuzz  # noqa: E402

TINY = [*kill_fuzz.QUICK["grpo"], "run.progress=false", "run.threads=1"]


class FakeSampler:
    """Completion ``k`` of prompt ``i`` has ``i + k + 1`` token ids."""

    tokenizer = "tok"

    def sample(self, prompts, n, params):
        return [[Completion(f"{i}.{k}", list(range(i + k + 1)), [7]) for k in range(n)] for i in range(len(prompts))]

    def sync_weights(self, model):
        self.synced = model


def test_metered_sampler_counts_rollouts_and_generated_tokens():
    meter = ComputeMeter()
    s = MeteredSampler(FakeSampler(), meter)
    s.sample(["a", "b"], 3, SamplingParams())  # token lengths 1,2,3 and 2,3,4
    assert meter.total == Compute(rollouts=6, generated_tokens=15)
    s.sample(["c"], 1, SamplingParams())
    assert meter.total == Compute(rollouts=7, generated_tokens=16)
    assert s.tokenizer == "tok" and unmetered(s) is s.inner and unmetered(s.inner) is s.inner
    s.sync_weights("m")
    assert s.inner.synced == "m"
    meter.reset()
    assert meter.total == Compute()


def _rec(key: str, name: str, compute: dict | None) -> PhaseRecord:
    return PhaseRecord(key, name, None, "", compute=compute)


def test_cumulative_splits_training_from_evaluation_in_finishing_order():
    recs = [
        _rec("base/eval", "eval", {"rollouts": 10, "generated_tokens": 50}),
        _rec("01/solver", "solver", {"rollouts": 8, "generated_tokens": 40, "trained_tokens": 30, "labels": 4}),
        _rec("01/eval", "eval", {"rollouts": 10, "generated_tokens": 45}),
        _rec("02/solver", "solver", {"rollouts": 8, "generated_tokens": 20, "trained_tokens": 0, "labels": 0}),
    ]
    pts = cumulative(recs)
    assert [p.key for p in pts] == ["base/eval", "01/solver", "01/eval", "02/solver"]
    assert pts[0].train == Compute() and pts[0].eval == Compute(10, 50)
    assert pts[2].train == Compute(8, 40, 30, 4) and pts[2].eval == Compute(20, 95)
    assert pts[3].train == Compute(16, 60, 30, 4)
    assert cumulative([*recs, _rec("02/eval", "eval", None)]) is None  # a run made before the counters


class FakeLearner:
    """Skips (as the real learner does) a step whose groups all have one reward."""

    cfg = SimpleNamespace(epochs_per_batch=2, offload_when_idle=True)
    device = torch.device("cpu")

    def begin_phase(self, updates, done=0):  # no lr schedule to set
        pass

    def step(self, groups):
        if all(len(set(g.rewards)) == 1 for g in groups):
            return {"skipped": 1.0, "n_tokens": 0.0}
        return {"skipped": 0.0, "n_tokens": float(sum(len(c) for g in groups for c in g.completion_ids))}


def test_grpo_train_counts_trained_tokens_of_updates_only(tmp_path):
    meter = ComputeMeter()
    role = Role("solver", None, None, MeteredSampler(FakeSampler(), meter), FakeLearner())
    ctx = PhaseContext(Phase("solver", 1), 0, tmp_path, MetricsLog(tmp_path / "m.jsonl"), lambda m: None, meter)

    def reward(step, tasks, comps):  # step 0: a spread in every group; step 1: all equal (skipped)
        return [[float(k) if step == 0 else 1.0 for k in range(len(g))] for g in comps], Observed()

    res = grpo_train(
        role,
        GRPOPhase(steps=2, prompts_per_step=2, group_size=2),
        batches=lambda s: [Task("q", "1")] * 2,
        prompt=lambda t: t.question,
        reward=reward,
        params=SamplingParams(),
        ctx=ctx,
        ns="solver",
        progress=False,
    )
    # per step 2 prompts x 2: token lengths 1,2 and 2,3 = 8 generated; only step 0 trains, twice (2 epochs)
    assert res.updates == 1 and res.rollouts == 8
    assert meter.total == Compute(rollouts=8, generated_tokens=16, trained_tokens=16)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, toy_base) -> Path:
    path = tmp_path_factory.mktemp("ref") / "run"
    log = path.parent / "log"
    assert kill_fuzz._cli(["run", "grpo", *TINY, "--run-dir", str(path)], log).wait() == 0, log.read_text()
    return path


def _compute_of(run: Path) -> tuple[list, list]:
    phases = json.loads((run / "state.json").read_text())["phases"]
    rows = [
        {k: v for k, v in json.loads(line).items() if k.startswith("compute/")}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]
    return [(p["key"], p["compute"]) for p in phases], [r for r in rows if r]


@pytest.mark.slow
def test_counters_after_kill9_and_resume_equal_an_uninterrupted_run(tmp_path, reference):
    """SIGKILL the tiny toy grpo run inside its solver phase (second rollout batch), resume: the
    per-phase and cumulative counters equal the uninterrupted run's."""
    ref_phases, ref_rows = _compute_of(reference)
    assert [k for k, _ in ref_phases] == ["base/eval", "01/solver", "01/eval"]
    solver = dict(ref_phases)["01/solver"]
    assert solver["rollouts"] > 0 and solver["generated_tokens"] >= solver["rollouts"] and solver["labels"] > 0
    run, log = tmp_path / "run", tmp_path / "log"
    rc = kill_fuzz._cli(["run", "grpo", *TINY, "--run-dir", str(run)], log, "rollouts:2:killgroup").wait()
    assert rc == -signal.SIGKILL, log.read_text()
    assert [p["key"] for p in json.loads((run / "state.json").read_text())["phases"]] == ["base/eval"]
    assert kill_fuzz._cli(["resume", str(run)], log).wait() == 0, log.read_text()
    assert _compute_of(run) == (ref_phases, ref_rows)
    summary = json.loads((run / "summary.json").read_text())["compute"]
    assert summary == json.loads((reference / "summary.json").read_text())["compute"]
    assert summary["train"] == solver and summary["eval"]["rollouts"] == sum(
        c["rollouts"] for k, c in ref_phases if k.endswith("/eval")
    )


@pytest.mark.slow
def test_report_and_compare_over_run_folders(tmp_path, reference):
    from coevolve.lab.compare import compare_compute
    from coevolve.lab.compare import compare_results as compare
    from coevolve.lab.report import write_report

    run = tmp_path / "grpo-a"
    shutil.copytree(reference, run)
    md = write_report(run).read_text()
    assert "## Accuracy against compute" in md and (run / "report" / "accuracy_vs_compute.png").is_file()
    csv_rows = (run / "report" / "accuracy_vs_compute.csv").read_text().splitlines()
    assert csv_rows[0].startswith("run,phase,bench,greedy,sampled,train_rollouts") and len(csv_rows) == 3
    assert csv_rows[1].split(",")[5] == "0"  # the base evaluation comes before any training

    old = tmp_path / "grpo-old"  # a run folder made before the counters: reported, not plotted
    shutil.copytree(reference, old)
    shutil.rmtree(old / "report")
    state = json.loads((old / "state.json").read_text())
    for p in state["phases"]:
        del p["compute"]
    (old / "state.json").write_text(json.dumps(state))
    assert "No compute counters in this run" in write_report(old).read_text()
    assert not (old / "report" / "accuracy_vs_compute.png").exists()

    table = compare([run, old, run / "round_01" / "eval"])
    assert table.splitlines()[0].startswith("| benchmark | grpo-a | grpo-old | eval |")
    files, notes = compare_compute([run, old], tmp_path / "cmp")
    assert [f.name for f in files] == ["accuracy_vs_compute.png", "accuracy_vs_compute.csv", "accuracy_vs_compute.md"]
    assert len(notes) == 1 and "grpo-old" in notes[0]
    assert "grpo-a (grpo)" in (tmp_path / "cmp" / "accuracy_vs_compute.csv").read_text()
    with pytest.raises(DataError, match="neither a result folder"):
        compare([tmp_path])
