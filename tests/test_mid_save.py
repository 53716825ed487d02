"""Mid-phase saves (``run.save_every``): a GRPO phase killed after a save resumes at the step after
it, from the saved learner, book and random states, and the finished run equals an uninterrupted
one, file for file (rollouts, metrics, weights); saves change nothing in a run never killed.
Every run goes through the CLI in a fresh process, as in test_run_safety."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.plan import device_for, make_plan
from coevolve.plan.shapes import load_model_shape
from coevolve.plan.timing import save_bytes
from coevolve.run import Phase, PhaseContext, Run, random_states, set_random_states
from coevolve.run.metrics import MetricsLog

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import kill_fuzz  # noqa: E402

ARGS = [*kill_fuzz.GRPO_TINY, "solver.steps=4"]
SAVES = [*ARGS, "run.save_every=1"]  # saves after steps 1, 2 and 3 of 4


@pytest.fixture(scope="module")
def references(tmp_path_factory, toy_base) -> tuple[Path, Path]:
    """Uninterrupted 4-step grpo runs, with mid-phase saves after every step and without."""
    saved = kill_fuzz.reference("grpo", SAVES, tmp_path_factory.mktemp("saved"))[0]
    plain = kill_fuzz.reference("grpo", ARGS, tmp_path_factory.mktemp("plain"))[0]
    return saved, plain


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_saves_change_nothing_in_an_uninterrupted_run(references):
    saved, plain = references
    assert kill_fuzz.compare(plain, saved) == ["differs: config.yaml"]
    assert not list((saved / "saves").iterdir())  # a finished phase leaves no save behind
    assert "mid_phase_save" not in json.loads((saved / "state.json").read_text())


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")
@pytest.mark.parametrize(
    ("fault", "resumes_at"),
    [
        ("rollouts:4:killgroup", 3),  # booking step 4, after the save of step 3
        ("save:2:killgroup", 1),  # inside the second save: the first one is the resume point
        ("checkpoint:3:killgroup", 2),  # the third save's learner half written (model, no optimiser)
    ],
)
def test_a_phase_killed_after_a_save_resumes_from_it(tmp_path, references, fault, resumes_at):
    """SIGKILL (process group) inside 01/solver; ``coevolve resume`` goes on at the step after the
    last whole save (the resumed process books only the steps left: without the resume from the
    save it would book all 4) and the run equals the uninterrupted one."""
    run, log = tmp_path / "run", tmp_path / "log"
    rc = kill_fuzz._cli(["run", "grpo", *SAVES, *kill_fuzz.COMMON, "--run-dir", str(run)], log, fault).wait()
    assert rc == -signal.SIGKILL, log.read_text()
    state = json.loads((run / "state.json").read_text())
    assert [p["key"] for p in state["phases"]] == ["base/eval"]
    assert state["mid_phase_save"]["number"] == resumes_at
    # the plan's cost of one save (``plan.timing.save_bytes``) is what the learner wrote
    learner = run / state["mid_phase_save"]["dir"] / "learner"
    written = sum(f.stat().st_size for f in learner.iterdir() if f.name in ("model.safetensors", "learner_optim.pt"))
    cfg = load_config("grpo", None, SAVES)
    planned = save_bytes(load_model_shape(cfg)[0], cfg.learner, make_plan(cfg, device_for("cpu")).dtype_bytes)
    assert abs(written / planned - 1) < 0.02, (written, planned)
    counts = tmp_path / "counts"
    rc = kill_fuzz._cli(["resume", str(run)], log, f"count:{counts}").wait()
    assert rc == 0, log.read_text()
    text = " ".join(log.read_text().split())
    assert f"[solver] resumed at step {resumes_at} of 4 from its mid-phase save" in text
    assert kill_fuzz._site_calls(counts)["rollouts"] == 4 - resumes_at  # only the steps after the save ran again
    saved, _ = references
    assert kill_fuzz.compare(saved, run) == []  # rollouts, metrics, checkpoint weights and optimiser state
    assert not list((run / "saves").iterdir()) and "mid_phase_save" not in json.loads((run / "state.json").read_text())


def test_random_states_round_trip():
    """``random_states`` holds what python, numpy and torch draw next."""
    import random

    import numpy as np
    import torch

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    states = json.loads(json.dumps(random_states()))
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_random_states(states)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == first


def test_a_mid_phase_save_is_atomic_and_moves_with_the_state(tmp_path):
    """``ctx.mid_save``: a failing writer leaves no folder and no pointer; a whole save is named in
    state.json with the metrics log's length, and ``Run.open`` cuts the log back to it; the next
    save replaces it; the phase's mark removes both."""
    run = Run.create(tmp_path / "r", "recipe: grpo\n", "grpo")
    phase = Phase("solver", 1)
    seen: list[PhaseContext] = []

    def fn(ctx):
        ctx.log({"x": 1.0}, step=0)

        def bad(folder):
            (folder / "half").write_text("x")
            raise OSError(28, "No space left on device")

        with pytest.raises(OSError):
            ctx.mid_save(bad)
        assert "mid_phase_save" not in run.state.data and not any((run.path / "saves").iterdir())
        ctx.mid_save(lambda folder: {"steps": 1})
        first = run.state.data["mid_phase_save"]
        assert first["number"] == 1 and first["metrics_bytes"] == run.metrics.size()
        ctx.log({"x": 2.0}, step=1)
        ctx.mid_save(lambda folder: {"steps": 2})
        assert [p.name for p in (run.path / "saves").iterdir()] == ["01_solver_000002"]
        seen.append(ctx)
        raise KeyboardInterrupt  # the phase stops between saves

    with pytest.raises(KeyboardInterrupt):
        run.phase(phase, fn)
    log = MetricsLog(run.metrics.path)
    log.log({"x": 3.0}, step=2)  # a row after the last save: a resume drops it
    again = Run.open(run.path)
    assert [r["x"] for r in again.metrics.rows()] == [1.0, 2.0]

    def finish(ctx):
        assert ctx.saved is not None and ctx.saved["steps"] == 2
        from coevolve.run import PhaseResult

        return PhaseResult({"ok": True})

    again.phase(phase, finish)
    assert "mid_phase_save" not in again.state.data and not any((again.path / "saves").iterdir())


D2EVO = [
    "-c",
    str(ROOT / "configs" / "d2evo_smoke.yaml"),
    "rounds=1",
    "difficulty.measure_final=false",
    "sampling.batch_prompts=8",  # the difficulty loop's 24 questions in 3 calls
    "run.save_every=8",  # a save after every call of 8 questions
]


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")
def test_a_question_loop_killed_after_a_save_replays_its_calls(tmp_path):
    """D²Evo's difficulty phase killed inside its second save: the resume answers the phase's
    first call from its first save (fewer live sampler calls than the uninterrupted run made) and
    the run equals the uninterrupted one, file for file."""
    (tmp_path / "ref").mkdir()
    ref, calls, _, _ = kill_fuzz.reference("d2evo", D2EVO, tmp_path / "ref")
    run, log = tmp_path / "run", tmp_path / "log"
    rc = kill_fuzz._cli(
        ["run", "d2evo", *D2EVO, *kill_fuzz.COMMON, "--run-dir", str(run)], log, "save:3:killgroup"
    ).wait()
    assert rc == -signal.SIGKILL, log.read_text()
    mid = json.loads((run / "state.json").read_text())["mid_phase_save"]
    assert mid["key"] == "01/difficulty" and len(mid["chain"]) == 1, mid
    counts = tmp_path / "counts"
    assert kill_fuzz._cli(["resume", str(run)], log, f"count:{counts}").wait() == 0, log.read_text()
    assert "[phase] 01/difficulty (from its mid-phase save 1)" in log.read_text()
    resumed = kill_fuzz._site_calls(counts)
    done_before = 2  # base/probe's call and difficulty's first: not made again
    assert resumed["sample"] == calls["sample"] - done_before, (resumed, calls)
    assert kill_fuzz.compare(ref, run) == []


def test_the_call_journal_records_saves_and_replays():
    """``CallJournal``: a save once ``every`` prompts were sampled, holding the calls since the
    last one; armed with the saves, the calls they hold are answered without the sampler, in
    order, then live; a call that differs from the saved one goes live (and says so)."""
    from coevolve.run.journal import CALLS_SAVE, CallJournal
    from coevolve.types import Completion, SamplingParams

    made: list[tuple[str, ...]] = []

    def sample(prompts, n, params):
        made.append(tuple(prompts))
        return [[Completion(f"{p}-{i}-{params.seed}", [i], [1, 2]) for i in range(n)] for p in prompts]

    folders: list[Path] = []

    def save(write, root=Path(tempfile.mkdtemp())):
        folder = root / f"s{len(folders)}"
        folder.mkdir()
        (folder / "saved.json").write_text(json.dumps(write(folder)))
        folders.append(folder)

    params = SamplingParams(seed=3)
    j = CallJournal()
    j.start(2, save, None, print)
    first = [j.call(sample, [q], 2, params) for q in ("a", "b", "c")]
    assert len(folders) == 1 and json.loads((folders[0] / "saved.json").read_text())["calls"] == 2
    j.stop()
    assert j.call(sample, ["d"], 1, params) and len(folders) == 1  # stopped: live, not recorded

    made.clear()
    saved = {**json.loads((folders[0] / "saved.json").read_text()), "chain": folders}
    assert saved["kind"] == CALLS_SAVE
    said: list[str] = []
    j.start(2, save, saved, said.append)
    assert [j.call(sample, [q], 2, params) for q in ("a", "b", "c")] == first
    assert made == [("c",)]  # a and b came from the save
    j.start(2, save, saved, said.append)
    j.call(sample, ["a"], 2, params)
    assert j.call(sample, ["x"], 2, params)[0][0].text == "x-0-3" and said and "goes on live" in said[0]
