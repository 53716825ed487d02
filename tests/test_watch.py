"""Training you can watch: the GRPO bar's reward, accuracy and zero-variance share, a bar over an
evaluation's benchmarks, the run's messages in run.log, and a message while another process holds
the toy cache's lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coevolve.loop import step_postfix
from coevolve.training import Observed, zero_variance_groups

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_the_bar_shows_reward_accuracy_and_zero_variance_share():
    rewards = [[1.0, 0.0, 1.0], [0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [0.0, 0.9, 0.0]]
    assert zero_variance_groups(rewards) == 2
    assert step_postfix(rewards, Observed({"acc_mean": 0.5})) == {"reward": "0.517", "acc": "0.500", "zero_std": "0.50"}
    assert step_postfix([[1.0, -1.0]], Observed({"match_rate": 0.5})) == {
        "reward": "0.000",
        "acc": "0.500",
        "zero_std": "0.00",
    }
    assert "acc" not in step_postfix([[0.2, 0.4]], Observed())  # a writer's reward measures no accuracy


def test_a_process_waiting_on_the_cache_lock_says_whom_it_waits_for(tmp_path):
    """The holder takes the lock and waits for a line on stdin; the waiter's first stderr line must
    name the holder's pid before the holder lets go (no sleeps: each side waits on the other)."""
    target = tmp_path / "base"
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from coevolve.world.toy.pretrain import wait_for_lock
        with open({str(tmp_path / ".base.lock")!r}, "a+") as lock:
            wait_for_lock(lock, Path({str(target)!r}))
            print("held", flush=True)
            if sys.argv[1] == "hold":
                sys.stdin.readline()
        """
    )
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "COLUMNS": "300"}
    holder = subprocess.Popen(
        [sys.executable, "-c", code, "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen(
            [sys.executable, "-c", code, "go"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        line = waiter.stderr.readline()
        assert f"waiting for process {holder.pid}, which is building {target}" in line
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert waiter.stdout.readline().strip() == "held" and waiter.wait(timeout=120) == 0
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_run_log_holds_what_the_run_said(tmp_path, toy_overrides_30, capsys):
    from coevolve.config import load_config
    from coevolve.recipes import execute

    tiny = ["solver.steps=1", "solver.prompts_per_step=2", "solver.group_size=2", "eval.heldout_size=4"]
    tiny += ["eval.samples=0", "sampling.max_new_tokens=24", "eval.max_new_tokens=24", "run.progress=false"]
    execute(load_config("grpo", None, tiny + toy_overrides_30), tmp_path / "r")
    log = (tmp_path / "r" / "run.log").read_text(encoding="utf-8").splitlines()
    said = [line.split(" ", 2)[2] for line in log]  # date, time, message
    assert "[phase] base/eval" in said and "[phase] 01/solver" in said and "[phase] 01/eval" in said
    assert "[phase] 01/solver" in capsys.readouterr().err  # the same lines as on the terminal


def test_run_log_keeps_what_was_said_before_the_folder_existed(tmp_path, capsys):
    """``Run.bind(said=...)``: the preflight's lines (printed before the run folder existed) go
    into run.log first, time-stamped, and are not printed again; later lines go to both."""
    from coevolve.run import Run

    run = Run.create(tmp_path / "r", "recipe: grpo\n", "grpo")
    run.bind(seed=0, keep_checkpoints=2, said=("warning (run.preflight=warn): x", "running grpo in r"))
    run.say("[phase] base/eval")
    said = [line.split(" ", 2)[2] for line in (run.path / "run.log").read_text(encoding="utf-8").splitlines()]
    assert said == ["warning (run.preflight=warn): x", "running grpo in r", "[phase] base/eval"]
    err = capsys.readouterr().err
    assert "[phase] base/eval" in err and "preflight" not in err


def test_a_sampling_phase_has_a_bar_over_its_declared_answers(tmp_path):
    """The runner gives every phase that samples without training a bar whose total is its
    declared work (``Step.work``: D²Evo's difficulty = pool x samples); GRPO phases keep their
    step bar. The bar moves with every sampler call the phase's meter counts."""
    from coevolve.config import load_config
    from coevolve.recipes.registry import recipe_of
    from coevolve.recipes.runner import bar_total
    from coevolve.run import Phase, PhaseResult, Run
    from coevolve.types import Completion

    cfg = load_config("d2evo", None, ["difficulty.pool_size=24", "difficulty.samples=8"])
    steps = {step.name: step for _, step in recipe_of("d2evo").schedule(cfg)}
    assert bar_total(steps["difficulty"], cfg) == 24 * 8
    assert bar_total(steps["solver"], cfg) is None and bar_total(steps["anchors"], cfg) is None

    run = Run.create(tmp_path / "r", "recipe: d2evo\n", "d2evo")
    run.bind(seed=0, keep_checkpoints=2, progress=True)
    run.expect(4)
    seen = []

    def fn(ctx):
        ctx.compute.sampled([[Completion("a", [1], [1])] * 3])
        seen.append(ctx.compute.tick.__self__.n)  # the bar's count after one call of 3 answers
        return PhaseResult()

    run.phase(Phase("difficulty", 1), fn)
    assert seen == [3] and run.meter.tick is None and run.expected is None
