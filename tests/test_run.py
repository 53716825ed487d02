"""Run folder: atomic artefacts, phase state machine, metric truncation on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.errors import RunStateError
from coevolve.run import Phase, PhaseResult, Run, derive_seed


def _create(tmp_path, name: str = "r") -> Run:
    return Run.create(tmp_path / name, "recipe: grpo\n", "grpo", seed=0, say=lambda m: None)


def test_phases_run_once_and_results_persist(tmp_path):
    run = _create(tmp_path)
    calls = []

    def fn(ctx):
        calls.append(ctx.seed)
        ctx.log({"x/y": 1}, step=0)
        assert ctx.dir == tmp_path / "r" / "round_01" and ctx.dir.is_dir()
        return PhaseResult({"n": 3}, rollouts=7)

    rec = run.phase(Phase("p", 1), fn)
    assert rec.values == {"n": 3} and rec.rollouts == 7 and rec.key == "01/p"
    run2 = Run.open(tmp_path / "r", seed=0, say=lambda m: None)
    assert run2.done(Phase("p", 1))
    assert run2.phase(Phase("p", 1), fn).values == {"n": 3}
    assert len(calls) == 1 and calls[0] == derive_seed(0, "01/p")
    rows = run2.metrics.rows()
    assert rows[0] == {"round": 1, "phase": "p", "step": 0, "time": rows[0]["time"], "x/y": 1}
    assert rows[1]["phase/p/rollouts"] == 7 and "phase/p/seconds" in rows[1]


def test_stages_outside_rounds(tmp_path):
    run = _create(tmp_path)
    rec = run.phase(Phase.base("eval"), lambda ctx: PhaseResult({"dir": ctx.dir.name}))
    assert rec.key == "base/eval" and rec.values == {"dir": "base"} and rec.round is None and rec.stage == "base"
    assert run.phase(Phase.final("difficulty"), lambda ctx: PhaseResult({"dir": ctx.dir.name})).values == {
        "dir": "final"
    }


def test_a_relative_run_folder_puts_each_artefact_where_it_is_read(tmp_path, monkeypatch):
    """``--run-dir runs/x`` (and the default ``runs/<recipe>-<time>``): a phase writes through its
    folder (``ctx.dir / name``) and a later phase reads relative to the run (``round_01/name``);
    both are the same file, not ``runs/x/runs/x/round_01/name``."""
    monkeypatch.chdir(tmp_path)
    run = Run.create(Path("runs") / "x", "recipe: grpo\n", "grpo")

    def fn(ctx):
        run.write_jsonl(ctx.dir / "rows.jsonl", [{"a": 1}])
        return PhaseResult()

    run.phase(Phase("anchors", 1), fn)
    assert run.read_jsonl("round_01/rows.jsonl") == [{"a": 1}]
    assert (tmp_path / "runs" / "x" / "round_01" / "rows.jsonl").is_file() and not (
        tmp_path / "runs" / "x" / "runs"
    ).exists()


def test_interrupted_phase_metrics_are_cut_on_resume(tmp_path):
    run = _create(tmp_path)
    run.phase(Phase("a", 1), lambda ctx: PhaseResult({"k": 1}))
    n_before = len(run.metrics.rows())

    def crash(ctx):
        ctx.log({"half/done": 1})
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.phase(Phase("b", 1), crash)
    assert len(run.metrics.rows()) == n_before + 1
    run2 = Run.open(tmp_path / "r")
    assert len(run2.metrics.rows()) == n_before
    assert not run2.done(Phase("b", 1))


def test_checkpoint_pointer_moves_only_with_phase(tmp_path):
    run = _create(tmp_path)
    run.keep_checkpoints = 2
    for i in range(4):
        ck = run.checkpoint_dir("solver", f"r{i}")
        ck.mkdir(parents=True)
        run.phase(Phase("s", i + 1), lambda ctx, ck=ck: PhaseResult(checkpoints={"solver": ck}))
    assert run.checkpoint("solver") == run.checkpoint_dir("solver", "r3")
    left = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert left == ["solver_r2", "solver_r3"]
    state = json.loads((tmp_path / "r" / "state.json").read_text())
    assert state["checkpoints"] == {"solver": "checkpoints/solver_r3"}
    assert all("checkpoints" not in p["values"] for p in state["phases"])


def test_create_refuses_existing_files_and_old_formats(tmp_path):
    _create(tmp_path)
    with pytest.raises(RunStateError, match="resume"):
        _create(tmp_path)
    with pytest.raises(RunStateError, match="not a coevolve run folder"):
        Run.open(tmp_path / "nothing")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunStateError, match="existing file"):
        _create(tmp_path, "afile")
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.yaml").write_text("recipe: grpo\n")
    (old / "state.json").write_text(json.dumps({"done": [], "phases": {}}))
    with pytest.raises(RunStateError, match="format 1"):
        Run.open(old)


def test_create_refuses_a_folder_of_someone_elses_files(tmp_path):
    """A run into an existing folder that holds no run would overwrite config.yaml, summary.json
    and report/ and delete .*.tmp files anywhere below it: refused naming the folder and its files,
    which stay as they were. What a start killed before its first phase left is no obstacle."""
    mine = tmp_path / "project"
    (mine / ".git").mkdir(parents=True)
    (mine / ".git" / ".index.tmp").write_text("keep")
    (mine / "summary.json").write_text("mine")
    with pytest.raises(
        RunStateError,
        match=r"run folder .*project exists and holds files that are not a run's \(\.git, summary\.json\)",
    ):
        _create(tmp_path, "project")
    assert (mine / "summary.json").read_text() == "mine" and (mine / ".git" / ".index.tmp").read_text() == "keep"
    killed = tmp_path / "killed"
    killed.mkdir()
    for name in ("run.lock", "config.yaml", "provenance.json", ".config.yaml.abc.tmp"):
        (killed / name).write_text("")
    _create(tmp_path, "killed")


def test_derive_seed_pinned_across_processes_and_versions():
    """A resumed run (a new process, maybe a newer coevolve) must give a phase the seed the killed
    run gave it: the values are pinned (sha256 of the key's repr, not Python's per-process
    ``hash``), so any change of the scheme fails here at once."""
    assert derive_seed(0, "01/solver") == 25490229
    assert derive_seed(1, "01/solver") == 712229287
    assert derive_seed(0, "base/eval") == 582050288
    assert derive_seed(7, "prompt", 3) == 671410921  # the per-prompt seeds of engine.base


def test_open_removes_what_a_killed_writer_left(tmp_path):
    """Temp files (``.<name>.<random>.tmp``) and checkpoint staging folders a killed writer left
    are removed by ``Run.open``; everything else stays."""
    run = _create(tmp_path)
    run.phase(Phase("a", 1), lambda ctx: PhaseResult({"k": 1}))
    root = tmp_path / "r"
    orphans = [root / "round_01" / ".pool.jsonl.k3j2.tmp", root / ".state.json.x9.tmp"]
    for f in orphans:
        f.write_text("half")
    staging = root / "checkpoints" / ".solver_r01.tmp"  # recipes.setup stages a checkpoint here
    (staging / "model").mkdir(parents=True)
    (staging / "model" / "model.safetensors").write_bytes(b"half")
    keep = [root / "round_01" / "notes.tmp", root / "round_01" / ".hidden", root / "round_01" / "pool.jsonl"]
    for f in keep:
        f.write_text("mine")
    Run.open(root)
    assert not any(f.exists() for f in orphans) and not staging.exists()
    assert all(f.read_text() == "mine" for f in keep)
    assert Run.open(root).done(Phase("a", 1))


def _phase_with_checkpoint(run: Run, i: int) -> None:
    ck = run.checkpoint_dir("solver", f"r{i}")
    ck.mkdir(parents=True)

    def fn(ctx):
        (ck / "model.safetensors").write_bytes(bytes(range(256)) * 4)
        (ck / "optimizer.pt").write_bytes(b"adam" * 64)
        (ctx.dir / "rollouts.jsonl").write_text('{"r": 1}\n')
        return PhaseResult(checkpoints={"solver": ck})

    run.phase(Phase("s", i), fn)


@pytest.mark.parametrize(
    "damage",
    [
        "checkpoints/solver_r2/model.safetensors",
        "checkpoints/solver_r2/optimizer.pt",
        "round_01/rollouts.jsonl",
        "round_02/rollouts.jsonl",
    ],
)
def test_resume_refuses_a_damaged_artefact_or_checkpoint_naming_it(tmp_path, damage):
    run = _create(tmp_path)
    run.keep_checkpoints = 1  # r1's checkpoint goes: its files are not looked for
    _phase_with_checkpoint(run, 1)
    _phase_with_checkpoint(run, 2)
    assert not (tmp_path / "r" / "checkpoints" / "solver_r1").exists()
    Run.open(tmp_path / "r")  # untouched: reopens
    f = tmp_path / "r" / damage
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    f.write_bytes(bytes(data))
    with pytest.raises(RunStateError, match=rf"{f.name}: its content differs from what phase"):
        Run.open(tmp_path / "r")
    f.unlink()
    if damage.startswith("checkpoints"):
        with pytest.raises(RunStateError, match=rf"{f.name}: missing"):
            Run.open(tmp_path / "r")


def test_a_file_a_later_phase_rewrites_is_checked_against_its_last_hash(tmp_path):
    run = _create(tmp_path)
    for name, text in (("a", "first\n"), ("b", "second\n")):  # two phases of round 1 write one pool file
        run.phase(Phase(name, 1), lambda ctx, text=text: (ctx.dir / "pool.jsonl").write_text(text) and PhaseResult())
    Run.open(tmp_path / "r")
    (tmp_path / "r" / "round_01" / "pool.jsonl").write_text("first\n")
    with pytest.raises(RunStateError, match="what phase 01/b wrote"):
        Run.open(tmp_path / "r")
