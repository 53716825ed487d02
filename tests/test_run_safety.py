"""A run folder under stress: one writer at a time (a real second process is refused, a lock
left by ``kill -9`` is taken over by exactly one taker), a run dir that is a file, a resume after
the config or the recipe's phase list changed (refused unless ``--force``), a full disk at each
write site (last good state intact, the resumed run equals an uninterrupted one), and the short
kill -9 fuzz (``dev/kill_fuzz.py --quick``). Every run, reference included, goes through the
CLI in a fresh process: a run in this process would inherit whatever state earlier tests left."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coevolve import faults
from coevolve.config import dump_yaml, load_config
from coevolve.errors import RunStateError
from coevolve.run import Run
from coevolve.run.lock import RunLockedError, run_lock
from coevolve.run.metrics import MetricsLog
from coevolve.run.state import PhaseState

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
sys.path.insert(0, str(ROOT / "dev"))
import kill_fuzz  # noqa: E402

TINY = [*kill_fuzz.QUICK["grpo"], "run.progress=false", "run.threads=1"]

HOLD = """
import sys, time
from coevolve.run.lock import run_lock, RunLockedError
try:
    with run_lock(sys.argv[1]):
        print("won", flush=True)
        time.sleep(float(sys.argv[2]))
except RunLockedError as e:
    print("refused", e, flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}


def _holder(path: Path, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], env=_env(), stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().startswith("won")
    return p


def cli(*args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**_env(), **({"COEVOLVE_FAULT": fault} if fault else {})}
    return subprocess.run([sys.executable, "-m", "coevolve", *args], capture_output=True, text=True, env=env)


def test_second_writer_is_refused_and_a_killed_holder_is_taken_over(tmp_path):
    run = tmp_path / "run"
    Run.create(run, dump_yaml(load_config("grpo")), "grpo")
    holder = _holder(run, 60)
    try:
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} on host .* command: coevolve"):
            with run_lock(run):
                pass
        r = cli("resume", str(run))  # a real second process, through the CLI
        assert r.returncode == 2 and f"pid {holder.pid}" in r.stderr and "in use" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with run_lock(run):  # the dead holder's lock is free: taken over, and now ours
        info = json.loads((run / "run.lock").read_text())
        assert info["pid"] == os.getpid()


def test_the_lock_is_not_re_entrant(tmp_path):
    """A run is opened once (``recipes.open_run``): a second lock of the same folder, even by the
    process that holds it, is refused, and the folder is free again once the first block ends."""
    run = tmp_path / "run"
    with run_lock(run, create=True):
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()} "):
            with run_lock(run):
                pass
    with run_lock(run):
        pass


def test_two_takers_of_a_stale_lock_one_wins(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = _holder(run, 60)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    takers = [
        subprocess.Popen([sys.executable, "-c", HOLD, str(run), "5"], env=_env(), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [t.communicate()[0] for t in takers]
    assert sorted(o.split()[0] for o in outs) == ["refused", "won"], outs


@pytest.mark.slow
def test_run_dir_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for args in (
        ["run", "grpo", "--run-dir", str(f)],
        ["run", "grpo", "--run-dir", str(f / "sub")],
        ["run", "grpo", f"run.root={f}"],
        ["resume", str(f)],
    ):
        r = cli(*args)
        assert r.returncode == 2 and "is an existing file, not a folder" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr + r.stdout
    assert f.read_text() == "x"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, toy_base) -> tuple[Path, dict[str, int]]:
    """One uninterrupted tiny grpo run, and how often it reached each write site. Run through the
    CLI in a fresh process, exactly like the killed and faulted runs it is compared with."""
    run, calls, _, _ = kill_fuzz.reference("grpo", kill_fuzz.QUICK["grpo"], tmp_path_factory.mktemp("ref"))
    return run, calls


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_resume_refuses_a_changed_config_or_phase_list_unless_forced(tmp_path, reference):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    cfg = (run / "config.yaml").read_text()
    old = "solver:\n  steps: 2\n  prompts_per_step: 4\n  group_size: 4\n"
    assert old in cfg
    (run / "config.yaml").write_text(
        cfg.replace(old, "solver:\n  retired_field: 3\n  steps: 2\n  prompts_per_step: 4\n  group_size: lots\n")
    )
    r = cli("resume", str(run))
    assert r.returncode == 2 and "no longer validates" in r.stderr, r.stderr
    assert "solver.retired_field: unknown key" in r.stderr and "solver.group_size" in r.stderr
    r = cli("resume", str(run), "--force")
    assert r.returncode == 0, r.stderr
    assert "dropped from the saved config" in r.stderr and "solver.retired_field" in r.stderr

    (run / "config.yaml").write_text(cfg)
    state = json.loads((run / "state.json").read_text())
    assert state["phase_list"] == ["base/eval", "01/solver", "01/eval"]
    state["phase_list"] = ["base/eval", "01/warmup", "01/solver"]  # the run was made by a recipe with other phases
    (run / "state.json").write_text(json.dumps(state))
    r = cli("resume", str(run))
    assert r.returncode == 2 and "added: 01/eval" in r.stderr and "removed: 01/warmup" in r.stderr, r.stderr
    r = cli("resume", str(run), "--force")
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "state.json").read_text())["phase_list"] == ["base/eval", "01/solver", "01/eval"]
    state.pop("phase_list")  # a run made when the list was saved as "plan" is checked the same way
    state["plan"] = ["base/eval", "01/warmup", "01/solver"]
    (run / "state.json").write_text(json.dumps(state))
    r = cli("resume", str(run))
    assert r.returncode == 2 and "removed: 01/warmup" in r.stderr, r.stderr


D2EVO_TINY = [
    "-c",
    str(ROOT / "configs" / "d2evo_smoke.yaml"),
    "difficulty.measure_final=true",
    "eval.heldout_size=16",
    "eval.samples=0",
    "run.progress=false",
    "run.threads=1",
]


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_resume_extends_a_finished_run_to_more_rounds(tmp_path):
    """A finished 1-round D²Evo run resumed with rounds=2 keeps its base evaluation and round 1,
    measures the pool again after round 2 (the final stage's phase and its metrics rows are
    replaced) and ends as the 2-round run made at once: the same files, time fields aside. Other
    fields, fewer rounds and a recipe without rounds are refused, naming the field."""
    ext, fresh = tmp_path / "extended", tmp_path / "fresh"
    assert cli("run", "d2evo", *D2EVO_TINY, "rounds=1", "--run-dir", str(ext)).returncode == 0
    one = json.loads((ext / "state.json").read_text())
    assert one["status"] == "finished" and one["phase_list"][-1] == "final/difficulty"
    r = cli("resume", str(ext), "learner.lr=1e-5")
    assert r.returncode == 2 and "error: learner.lr: resume changes only run.* fields" in r.stderr, r.stderr
    r = cli("resume", str(ext), "rounds=0")  # the command line's value is wrong, not the saved config
    assert r.returncode == 2 and "rounds=0" in r.stderr and "no longer validates" not in r.stderr, r.stderr
    Run.create(tmp_path / "grpo", dump_yaml(load_config("grpo", None, [])), "grpo")
    r = cli("resume", str(tmp_path / "grpo"), "rounds=3")
    assert r.returncode == 2 and "rounds: a grpo run has no rounds to extend" in r.stderr, r.stderr
    assert json.loads((ext / "state.json").read_text()) == one  # nothing refused touched the run

    r = cli("resume", str(ext), "rounds=2")
    assert r.returncode == 0, r.stderr
    assert "extended to 2 rounds: final/difficulty run again after the last round" in r.stderr
    kept = [p["finished"] for p in json.loads((ext / "state.json").read_text())["phases"]][: len(one["phases"]) - 1]
    assert kept == [p["finished"] for p in one["phases"][:-1]]  # base/eval and round 1: kept, not run again
    assert cli("run", "d2evo", *D2EVO_TINY, "rounds=2", "--run-dir", str(fresh)).returncode == 0
    assert kill_fuzz.compare(fresh, ext) == []
    r = cli("resume", str(ext), "rounds=1")
    assert r.returncode == 2 and "this run has 2 rounds" in r.stderr and "cannot shorten" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_resume_gives_the_solver_phase_more_steps(tmp_path, reference):
    """A finished 1-step grpo run resumed with solver.steps=2 continues 01/solver at step 1 from
    its checkpoint (weights, optimiser state, step count) and its book, runs 01/eval again and
    ends as the 2-step run made at once (``reference``): the same files, time fields aside, also
    when the continuation is killed inside its checkpoint write and resumed. Fewer steps are
    refused."""
    run = tmp_path / "run"
    assert cli("run", "grpo", *TINY, "solver.steps=1", "--run-dir", str(run)).returncode == 0
    one = json.loads((run / "state.json").read_text())
    r = cli("resume", str(run), "solver.steps=0")
    assert r.returncode == 2 and "solver.steps=0 (command line)" in r.stderr and "cannot shorten" in r.stderr, r.stderr
    assert json.loads((run / "state.json").read_text()) == one

    log = tmp_path / "log"
    rc = kill_fuzz._cli(["resume", str(run), "solver.steps=2", *TINY[-2:]], log, "checkpoint:1:killgroup").wait()
    assert rc == -signal.SIGKILL, log.read_text()
    assert (
        "solver.steps=2: 01/solver continues at step 1 from its checkpoint and optimiser state; 01/eval run again "
        "after it" in " ".join(log.read_text().split())
    )
    state = json.loads((run / "state.json").read_text())
    assert [p["key"] for p in state["phases"]] == ["base/eval"] and state["continued"]["01/solver"]["book"][
        "steps"
    ] == 1
    r = cli("resume", str(run))  # killed inside the continuation: it starts again from step 1
    assert r.returncode == 0 and "[solver] continued at step 1 of 2" in r.stderr, r.stderr
    assert kill_fuzz.compare(reference[0], run) == []
    assert "continued" not in json.loads((run / "state.json").read_text())


def _fake_d2evo_run(path: Path, done: list[str], optimiser: bool = True, book: bool = True) -> Run:
    """A 2-round D²Evo run folder whose phases ``done`` are marked finished (nothing trained):
    a solver phase leaves a book of 40 steps, a metrics row per step and a checkpoint."""
    from coevolve.run.state import PhaseRecord
    from coevolve.training import book_file

    run = Run.create(path, dump_yaml(load_config("d2evo", None, ["rounds=2"])), "d2evo")
    for key in done:
        part, name = key.split("/")
        rnd = None if part in ("base", "final") else int(part)
        folder = run.path / (f"round_{rnd:02d}" if rnd else part)
        folder.mkdir(parents=True, exist_ok=True)
        ckpts = {}
        if name == "solver":
            for step in range(40):
                run.metrics.log({"solver/loss": 0.0}, round=rnd, phase=name, step=step)
            ck = run.checkpoint_dir("solver", f"r{rnd:02d}")
            ck.mkdir(parents=True)
            if optimiser:
                (ck / "learner_optim.pt").write_bytes(b"")
            ckpts = {"solver": str(ck.relative_to(run.path))}
            if book:
                book_file(folder, name).write_text(
                    json.dumps(
                        {
                            "steps": 40,
                            "seen": [0.5],
                            "records": [],
                            "rollouts": 1,
                            "reward_rollouts": 0,
                            "updates": 40,
                            "compute": {},
                        }
                    )
                )
        run.metrics.log({f"phase/{name}/seconds": 1.0}, round=rnd, phase=name)
        run.state.finish(PhaseRecord(key, name, rnd, "" if rnd else part), ckpts, 2, run.metrics.size())
    return run


def test_more_solver_steps_continue_only_a_phase_nothing_trained_on(tmp_path):
    """``coevolve resume RUN solver.steps=N`` on a D²Evo run: refused, naming the phases, when a
    later phase already trained on the solver phase it would continue, when that phase left no
    book, and when its checkpoint has no optimiser state; otherwise the phase is marked to
    continue (its record and book kept in state.json) and the measuring phases after it leave,
    with their metrics rows."""
    from coevolve.errors import ConfigError, RunStateError
    from coevolve.recipes import extend_run, extension_config

    order = [
        p.key
        for p in __import__("coevolve.recipes.registry", fromlist=["recipe_of"])
        .recipe_of("d2evo")
        .phase_list(load_config("d2evo", None, ["rounds=2"]))
    ]
    saved = load_config("d2evo", None, ["rounds=2"])
    wanted = load_config("d2evo", None, ["rounds=2", "solver.steps=60"])
    text = extension_config(saved, ["solver.steps=60"], wanted)

    run = _fake_d2evo_run(tmp_path / "used", order[: order.index("02/questioner") + 1])
    before = json.loads((run.path / "state.json").read_text())
    with pytest.raises(
        RunStateError,
        match=r"solver.steps=60: 01/solver is done and later phases trained on its "
        r"result \(02/questioner\); a run made at once with 60 steps would differ",
    ):
        extend_run(wanted, run, text)
    assert json.loads((run.path / "state.json").read_text()) == before  # nothing refused touched the run

    upto_eval = order[: order.index("01/eval") + 1]
    with pytest.raises(RunStateError, match=r"01/solver left no record of its steps \(solver_book.json"):
        extend_run(wanted, _fake_d2evo_run(tmp_path / "nobook", upto_eval, book=False), text)
    with pytest.raises(RunStateError, match=r"checkpoint .*solver_r01 has no optimiser state \(learner_optim.pt\)"):
        extend_run(wanted, _fake_d2evo_run(tmp_path / "noopt", upto_eval, optimiser=False), text)

    run = _fake_d2evo_run(tmp_path / "ok", order[: order.index("02/difficulty") + 1])
    said = extend_run(wanted, run, text)
    assert said == [
        "solver.steps=60: 01/solver continues at step 40 from its checkpoint and optimiser state; "
        "01/probe, 01/eval, 02/difficulty run again after it"
    ]
    state = json.loads((run.path / "state.json").read_text())
    assert [p["key"] for p in state["phases"]] == order[: order.index("01/solver")]
    assert state["continued"]["01/solver"]["book"]["steps"] == 40
    assert state["continued"]["01/solver"]["record"]["key"] == "01/solver"
    rows = run.metrics.rows()
    assert rows[-1]["phase"] == "solver" and rows[-1]["step"] == 39  # its steps' rows stay, its end and later go
    assert load_config("d2evo", run.path / "config.yaml", []).solver.steps == 60
    with pytest.raises(ConfigError, match=r"solver.steps=30 \(command line\): this run's solver phases have 40 steps"):
        extension_config(saved, ["solver.steps=30"], load_config("d2evo", None, ["rounds=2", "solver.steps=30"]))
    cosine = load_config("d2evo", None, ["rounds=2", "learner.lr_schedule=cosine"])
    with pytest.raises(
        ConfigError, match=r"learner.lr_schedule=cosine: the schedule's horizon is the phase's 40 steps"
    ):
        extension_config(cosine, ["solver.steps=60"], wanted)

    both = load_config("d2evo", None, ["rounds=3", "solver.steps=60"])  # more rounds and more steps at once
    said = extend_run(
        both,
        _fake_d2evo_run(tmp_path / "both", upto_eval),
        extension_config(saved, ["rounds=3", "solver.steps=60"], both),
    )
    assert said == [
        "solver.steps=60: 01/solver continues at step 40 from its checkpoint and optimiser state; 01/probe, "
        "01/eval run again after it",
        "extended to 3 rounds",
    ]


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
@pytest.mark.parametrize("site", ["write", "state", "metrics", "checkpoint", "rollouts"])
def test_full_disk_at_each_write_site_leaves_the_run_resumable(tmp_path, reference, site):
    ref, calls = reference
    assert calls.get(site, 0) >= 1, f"the reference never reached {site}: {calls}"
    n = max(1, calls[site] // 2 + 1)  # a call in the middle of the run (the only one for checkpoint)
    run = tmp_path / "run"
    r = cli("run", "grpo", *TINY, "--run-dir", str(run), fault=f"{site}:{n}:enospc")
    assert r.returncode == 2 and "No space left on device" in r.stderr and "Traceback" not in r.stderr, r.stderr
    state = json.loads((run / "state.json").read_text())  # the last good state: parses, is a prefix of the run
    done = [p["key"] for p in state["phases"]]
    assert state["status"] == "failed" and done == ["base/eval", "01/solver", "01/eval"][: len(done)]
    assert len(done) < 3 or site in ("write", "metrics")  # a failure after the last phase mark (summary, report)
    assert not list(run.rglob("*.tmp")), "a failed write left its temp file behind"
    r = cli("resume", str(run))
    assert r.returncode == 0, r.stderr
    assert kill_fuzz.compare(ref, run) == []


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
@pytest.mark.parametrize("fault", ["write:1:enospc", "state:5:enospc"])
def test_full_disk_in_the_cli_is_one_clear_message(tmp_path, fault):
    """At the first write (config.yaml, inside Run.create) and at a phase mark: exit 2, no traceback."""
    run = tmp_path / "run"
    r = cli("run", "grpo", *TINY, "--run-dir", str(run), fault=fault)
    assert r.returncode == 2 and "No space left on device" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and f"coevolve resume {run}" in r.stderr
    if fault.startswith("write"):  # the run folder was never made: nothing to resume
        assert not (run / "state.json").exists()
    else:  # a phase mark failed: the last good state resumes
        assert cli("resume", str(run)).returncode == 0


def test_a_failed_state_write_changes_neither_file_nor_memory(tmp_path):
    from coevolve.run.state import PhaseRecord, PhaseState

    st = PhaseState.new(tmp_path / "state.json", "grpo")
    before = (tmp_path / "state.json").read_text()
    faults.configure("state:1:enospc")
    try:
        with pytest.raises(OSError, match="No space left"):
            st.finish(PhaseRecord("01/solver", "solver", 1, ""), {"solver": "checkpoints/solver_r01"}, 2, 100)
    finally:
        faults.configure(None)
    assert (tmp_path / "state.json").read_text() == before
    assert st.data["phases"] == [] and st.data["checkpoints"] == {}  # a later save (status) cannot mark it done
    st.set_status("failed")
    assert json.loads((tmp_path / "state.json").read_text())["phases"] == []


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
@pytest.mark.parametrize("fault", ["checkpoint:1:killgroup", "state:6:killgroup"])
def test_kill_inside_a_checkpoint_or_before_a_phase_mark_then_resume(tmp_path, reference, fault):
    """SIGKILL (whole process group) between a checkpoint's model and optimiser files, and
    between 01/solver's last artefact and its mark in state.json: the resumed run equals the
    uninterrupted one, with no half checkpoint or stray temp file left."""
    run = tmp_path / "run"
    log = tmp_path / "log"
    rc = kill_fuzz._cli(["run", "grpo", *TINY, "--run-dir", str(run)], log, fault).wait()
    assert rc == -signal.SIGKILL, log.read_text()
    assert "01/solver" not in [p["key"] for p in json.loads((run / "state.json").read_text())["phases"]]
    assert kill_fuzz._cli(["resume", str(run)], log).wait() == 0, log.read_text()
    assert kill_fuzz.compare(reference[0], run) == []


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_compare_sees_a_changed_rollout(tmp_path, reference):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    assert kill_fuzz.compare(reference[0], run) == []
    f = run / "round_01" / "solver_rollouts.jsonl"
    f.write_text(f.read_text().replace('"rewards": [', '"rewards": [0.5, ', 1))
    assert kill_fuzz.compare(reference[0], run) == ["differs: round_01/solver_rollouts.jsonl"]


def test_fault_spec_is_checked():
    assert faults.parse("state:3:kill, write:1:enospc") == {"state": (3, "kill"), "write": (1, "enospc")}
    for bad in ("state:0:kill", "nowhere:1:kill", "state:1:explode", "state:1"):
        with pytest.raises(ValueError):
            faults.parse(bad)


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
def test_kill_fuzz_short(tmp_path):
    """kill -9 (whole process group) the grpo recipe 3 times, at random moments and at write
    sites, resuming each time: the finished run equals the uninterrupted one."""
    assert kill_fuzz.main(["--out", str(tmp_path), "--recipes", "grpo", "--kills", "3", "--quick", "--seed", "3"]) == 0
    rep = json.loads((tmp_path / "kill_fuzz.json").read_text())[0]
    assert sum(k["landed"] for k in rep["kills"]) >= 3 and rep["resumes"] >= 1 and all(rep["identical"])


def test_a_run_lock_symlink_is_refused_and_its_target_kept(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.lock").symlink_to(target)
    with pytest.raises(RunStateError, match="symlink"):
        with run_lock(run):
            pass
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("torn", [b'{"a": 2, "b"', b'{"a": 2, "b"\n', b"\x00\x00\x00"])
def test_a_torn_last_metrics_line_is_cut_back_before_appending(tmp_path, torn):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    good = b'{"a": 1}\n'
    log.path.write_bytes(good + torn)
    assert log.cut_torn_line() == len(torn)
    assert log.path.read_bytes() == good
    assert log.cut_torn_line() == 0  # a whole last line stays
    log.log({"a": 3})
    assert [json.loads(line)["a"] for line in log.path.read_text().splitlines()] == [1, 3]


@pytest.mark.parametrize("bad", ["../outside", "/abs/ckpt", "01/../../x"])
def test_a_state_path_outside_the_run_folder_is_refused(tmp_path, bad):
    outside = tmp_path / "outside"
    outside.mkdir()
    state = PhaseState.new(tmp_path / "run" / "state.json", "grpo")
    data = json.loads(state.path.read_text())
    data["checkpoint_history"] = {"solver": [bad, "01/solver/ckpt"]}
    state.path.write_text(json.dumps(data))
    with pytest.raises(RunStateError, match="not a relative path inside the run folder"):
        PhaseState.load(state.path)
    assert outside.is_dir()


def test_resume_refuses_a_result_relevant_config_change_unless_forced(tmp_path):
    from coevolve.recipes import CONFIG_PRINT_KEY, check_config_print

    cfg = load_config("grpo", None, ["solver.steps=2"])
    run = Run.create(tmp_path / "run", dump_yaml(cfg), "grpo")
    assert check_config_print(cfg, run) == [] and CONFIG_PRINT_KEY in run.state.data
    for changed, field in (
        (["learner.lr=0.5"], "learner.lr"),
        (["run.seed=1"], "run.seed"),
        (["solver.steps=3"], "solver.steps"),
    ):
        with pytest.raises(RunStateError, match=rf"made with in: {field}; .*--force"):
            check_config_print(load_config("grpo", None, ["solver.steps=2", *changed]), run)
    safe = load_config("grpo", None, ["solver.steps=2", "run.threads=3", "run.progress=false", "run.trackers=[jsonl]"])
    assert check_config_print(safe, run) == []
    more = load_config("grpo", None, ["solver.steps=3"])
    assert check_config_print(more, run, extended=True) == []  # solver.steps= extends the run
    lr = load_config("grpo", None, ["solver.steps=3", "learner.lr=0.5"])
    assert check_config_print(lr, run, force=True) == ["--force: resuming with a config changed in: learner.lr"]
    assert check_config_print(lr, Run.open(run.path)) == []  # the forced config is the run's from then on


@contextlib.contextmanager
def _tmpfs(where: Path, size: str):
    """A real small file system at ``where`` (root only: the test is skipped elsewhere)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs root to mount a tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk_inside_a_checkpoint_is_a_write_error(tmp_path):
    """What save_pretrained (safetensors) and torch.save raise on a real full disk: not OSError."""
    from safetensors.torch import save_file

    from coevolve.recipes import RunWriteError, write_errors

    big = torch.zeros(1 << 18)  # 1 MiB, on a 512 KiB file system
    with _tmpfs(tmp_path / "disk", "512k") as disk:
        for write in (
            lambda: save_file({"w": big}, str(disk / "model.safetensors")),
            lambda: torch.save({"m": big}, disk / "learner_optim.pt"),
            lambda: (disk / "state.json").write_bytes(bytes(1 << 20)),
        ):
            with pytest.raises(RunWriteError, match="writing the run folder failed"):
                with write_errors(disk):
                    write()
            for f in disk.iterdir():
                f.unlink()


def test_a_library_error_is_a_write_error_only_on_a_full_disk(tmp_path, monkeypatch):
    from coevolve.recipes import RunWriteError, write_errors

    torn = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4480 vs 4366")
    with pytest.raises(RuntimeError, match="unexpected pos"):  # room left: not a full disk, not masked
        with write_errors(tmp_path):
            raise torn
    with pytest.raises(RunWriteError, match="unexpected pos"):  # torch.save into a file: the write's ENOSPC
        with write_errors(tmp_path):
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9 vs 7")  # noqa: B904 (as torch raises it)
    full = os.statvfs_result((4096, 4096, 100, 0, 0, 10, 0, 0, 0, 255))
    monkeypatch.setattr(os, "statvfs", lambda p: full)
    with pytest.raises(RunWriteError, match=r"\(\[enforce fail .* unexpected pos 4480 vs 4366\); every finished"):
        with write_errors(tmp_path):
            raise torn
    with pytest.raises(ValueError):  # other errors pass through even then
        with write_errors(tmp_path):
            raise ValueError("not a write")


@pytest.mark.slow
@pytest.mark.usefixtures("toy_base")  # the runs' model, built before any run starts
@pytest.mark.parametrize("size", ["300k", "4m"])
def test_a_real_full_disk_during_a_run_is_one_line_and_resumes(tmp_path, reference, size):
    with _tmpfs(tmp_path / "disk", size) as disk:
        run = disk / "run"
        r = cli("run", "grpo", *TINY, "--run-dir", str(run))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
        assert "writing the run folder failed" in r.stderr and f"coevolve resume {run}" in r.stderr
        subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True)
        r = cli("resume", str(run))
        assert r.returncode == 0, r.stderr[-3000:]
        assert kill_fuzz.compare(reference[0], run) == []
