"""The frozen solver's server for one writer phase under ``backend=verl``
(``backend.verl.serve_solver=true``): coevolve starts ``vllm serve`` of the solver the phase
exported, on ``backend.verl.solver_gpus``, before verl's job and stops it after, so every
round's writer is scored by that round's frozen solver (D²Evo's reward needs π_S^{t-1}; a server
the user started once would keep round 1's solver for every round).

Why a server and not the reward workers: verl's ``RewardLoopWorker`` is a Ray actor with no GPU
(Ray hides every GPU from it), so a real solver loaded there samples on the CPU or fails to
start. The reward workers ask the server through ``engine.remote.RemoteSolver``, as with a
user's ``backend.verl.solver_url``.

The server needs a key (``vllm serve``'s ``VLLM_API_KEY``), drawn at random for each phase and
handed to it and to verl's job in the environment only (``KEY_ENV``), never in a command line, a
log, an override or a file: another user of the machine cannot ask it, and a process that took
the free port first (``free_port`` cannot hold it until the server binds) is found, since it
does not refuse a wrong key.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from coevolve.engine.remote import SolverServerError, served_models, status_with_key
from coevolve.run import children
from coevolve.schema import vllm_share

SERVER_CHILD = "frozen solver server"
KEY_ENV = "COEVOLVE_SOLVER_API_KEY"
"""The environment variable that carries a phase's server key to verl's job (its reward workers)."""
SERVER_KEY_ENV = "VLLM_API_KEY"
"""What ``vllm serve`` reads its key from (as ``--api-key``, which a command line would show)."""
POLL_S = 2.0
STOP_GRACE_S = 30.0
LOG_TAIL_CHARS = 3000


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it; no port is hard-coded)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_command(verl: Any, engine: Any, folder: Path, name: str, port: int) -> list[str]:
    """``backend.verl.solver_serve`` (None: ``vllm serve`` as ``-m vllm.entrypoints.openai.api_server``
    of ``backend.verl.python``) with the folder, the name the reward workers ask for, the port and
    the run's vLLM share of the GPU (``engine.gpu_memory_utilization``)."""
    base = (
        list(verl.solver_serve)
        if verl.solver_serve
        else [verl.python or sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    )
    return base + [
        "--model",
        str(folder),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--gpu-memory-utilization",
        repr(vllm_share(engine)),
        "--tensor-parallel-size",
        str(int(getattr(engine, "tensor_parallel_size", 1))),
    ]


class SolverServer:
    """``with SolverServer(cmd, log, gpus, timeout_s, name) as url``: the server started with a
    fresh random key (``key``, in its ``VLLM_API_KEY``), ``url`` (``http://127.0.0.1:PORT/v1``)
    answered ``/models`` with ``name`` to that key and refused another; stopped (SIGTERM, then
    SIGKILL after ``STOP_GRACE_S``, its whole process group) when the block ends, however it ends;
    it dies with coevolve and is listed in ``record``'s ``children.json`` while it runs. A server
    that exits or does not list ``name`` within ``timeout_s`` raises ``SolverServerError`` with
    its log's tail."""

    def __init__(
        self,
        cmd: list[str],
        port: int,
        name: str,
        log: Path,
        gpus: str | None,
        timeout_s: float,
        record: Path | None = None,
    ) -> None:
        self.cmd, self.port, self.name, self.log, self.gpus, self.timeout_s = cmd, port, name, log, gpus, timeout_s
        self.record = record  # the run folder whose children.json lists the server while it runs
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None
        self.key = ""

    def __enter__(self) -> str:
        self.key = secrets.token_urlsafe(32)
        env = {**os.environ, SERVER_KEY_ENV: self.key}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus
        fh = open(self.log, "w", encoding="utf-8")
        fh.write("$ " + " ".join(self.cmd) + "\n")
        fh.flush()
        try:
            self.proc = children.spawn(
                self.cmd, record=self.record, name=SERVER_CHILD, stdout=fh, stderr=subprocess.STDOUT, env=env
            )
        except OSError as e:
            raise SolverServerError(
                f"backend.verl.serve_solver: cannot start {self.cmd[0]!r}: {e.strerror or e} "
                "(backend.verl.solver_serve / backend.verl.python)"
            ) from None
        finally:
            fh.close()
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _wait(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.proc.poll() is not None:
                raise SolverServerError(
                    f"the frozen solver server exited with status {self.proc.returncode} before "
                    f"serving; full log: {self.log}\n... {self._tail()}"
                )
            try:
                up = self.name in served_models(self.url, timeout=5.0, retries=0, key=self.key)
            except SolverServerError:
                up = False  # not listening yet
            if up:
                self._check_key()
                return
            if time.monotonic() > deadline:
                raise SolverServerError(
                    f"the frozen solver server did not serve {self.name!r} at {self.url} within "
                    f"{self.timeout_s:g} s (backend.verl.solver_start_timeout_s); full log: "
                    f"{self.log}\n... {self._tail()}"
                )
            time.sleep(POLL_S)

    def _check_key(self) -> None:
        """What answered must refuse a wrong key: a server that ignores ``VLLM_API_KEY``, or another
        process that took the port before the server bound it, does not."""
        status = status_with_key(self.url, "x" + secrets.token_urlsafe(16))
        if status not in (401, 403):
            raise SolverServerError(
                f"the frozen solver server at {self.url} answered without its key (HTTP {status} to a wrong "
                f"one): a server command that ignores {SERVER_KEY_ENV} (backend.verl.solver_serve), or another "
                f"process on port {self.port}; full log: {self.log}"
            )

    def _tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]

    def stop(self) -> None:
        """The server's whole process group (vLLM's API server runs its engine in a child
        process), SIGTERM then SIGKILL; its record in the run folder dropped."""
        if self.proc is None:
            return
        children.stop(self.proc, STOP_GRACE_S)
        children.forget(self.record, SERVER_CHILD)

    def __exit__(self, *exc: Any) -> None:
        self.stop()
