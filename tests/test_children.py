"""Children die with the driver (``run.children``): verl's trainer (the stand-in ``main_ppo``) and
the frozen solver's server (the stand-in ``vllm serve``) end when the coevolve process that
started them is killed with ``kill -9``; their process group is recorded in the run folder, and
``coevolve resume`` refuses in one line while a process of it still lives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.errors import RunStateError
from coevolve.run.children import CHILDREN_FILE, check_children

HERE = Path(__file__).parent
SRC = str(HERE.parent / "src")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **extra,
        "PYTHONPATH": os.pathsep.join(filter(None, [SRC, str(HERE), os.environ.get("PYTHONPATH")])),
    }


DRIVER = """
import sys, time
from pathlib import Path
from coevolve.verl.server import SolverServer
rd, port, cmd = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
with SolverServer(cmd, port, "solver-01-questioner", rd / "server.log", None, 60.0, record=rd) as url:
    print(url, flush=True)
    time.sleep(600)
"""


def test_the_solver_server_dies_with_a_killed_driver(tmp_path):
    from coevolve.verl.server import free_port

    port = free_port()
    (tmp_path / "solver").mkdir()
    cmd = [sys.executable, str(HERE / "solver_server_standin.py"), "--model", str(tmp_path / "solver")]
    cmd += ["--served-model-name", "solver-01-questioner", "--port", str(port)]
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), str(port), *cmd], env=_env(), stdout=subprocess.PIPE, text=True
    )
    rec = None
    try:
        assert driver.stdout.readline().strip() == f"http://127.0.0.1:{port}/v1"
        rec = json.loads((tmp_path / CHILDREN_FILE).read_text())["frozen solver server"]
        assert alive(rec["pid"]) and rec["pgid"] == os.getpgid(rec["pid"]) != os.getpgid(0)
        driver.kill()
        driver.wait()
        assert wait_for(lambda: not alive(rec["pid"]), 10), "the server outlived its driver"
        check_children(tmp_path)  # the group is gone: nothing blocks, the record is dropped
        assert not (tmp_path / CHILDREN_FILE).exists()
    finally:
        driver.kill()
        if rec:
            kill_group(rec["pgid"])


@pytest.mark.slow
def test_the_trainer_dies_with_a_killed_driver_and_a_live_child_blocks_resume(tmp_path, toy_overrides):
    from test_verl_backend import TINY, standin

    rd, info = tmp_path / "r", tmp_path / "child.json"
    env = _env(STANDIN_HANG=str(info), STANDIN_GRANDCHILD="1")
    cmd = [sys.executable, "-m", "coevolve", "run", "grpo", *TINY, *standin(toy_overrides), "--run-dir", str(rd)]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = rec = None
    try:
        assert wait_for(info.exists, 600), "the stand-in trainer never started"
        child = json.loads(info.read_text())
        rec = json.loads((rd / CHILDREN_FILE).read_text())["verl main_ppo"]
        assert rec["pgid"] == child["pid"] == os.getpgid(child["grandchild"]) != os.getpgid(0)
        driver.kill()
        driver.wait()
        assert wait_for(lambda: not alive(child["pid"]), 10), "the trainer outlived its driver"
        assert alive(child["grandchild"])  # what the trainer started lives on in its recorded group
        r = subprocess.run(
            [sys.executable, "-m", "coevolve", "resume", str(rd)], env=_env(), capture_output=True, text=True
        )
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 2 and len(errors) == 1 and "[phase]" not in r.stdout + r.stderr, r.stderr
        assert "verl main_ppo" in errors[0] and f"kill -- -{rec['pgid']}" in errors[0]
        kill_group(rec["pgid"])
        assert wait_for(lambda: not alive(child["grandchild"]), 10)
        check_children(rd)
        assert not (rd / CHILDREN_FILE).exists()
    finally:
        driver.kill()
        if rec:
            kill_group(rec["pgid"])


def test_a_record_names_a_live_group_in_one_line_and_a_reused_pid_is_not_it(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        from coevolve.run.children import _start_time

        rec = {"pgid": sleeper.pid, "pid": sleeper.pid, "started": _start_time(sleeper.pid), "cmd": "verl main_ppo x"}
        (tmp_path / CHILDREN_FILE).write_text(json.dumps({"verl main_ppo": rec}))
        with pytest.raises(RunStateError, match=rf"process group {sleeper.pid}.*kill -- -{sleeper.pid}") as e:
            check_children(tmp_path)
        assert "\n" not in str(e.value)
        # the same number, another process: the recorded group is gone
        (tmp_path / CHILDREN_FILE).write_text(json.dumps({"verl main_ppo": {**rec, "started": "1"}}))
        check_children(tmp_path)
        assert not (tmp_path / CHILDREN_FILE).exists()
    finally:
        sleeper.kill()
        sleeper.wait()
