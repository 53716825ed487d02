"""``backend.verl.serve_solver``: coevolve serves each writer phase's frozen solver itself, so a
multi-round run's writer is scored by that round's solver (π_S^{t-1}). On CPU against a stand-in
``vllm serve`` (``solver_server_standin.py``) and verl's stand-in trainer; a real ``vllm serve`` on
a GPU is not exercised here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from coevolve.config import load_config
from coevolve.engine.remote import SolverServerError, served_models
from coevolve.run import Run
from coevolve.verl.server import SolverServer, free_port, serve_command
from test_plan import QWEN3_4B, model_dir

pytest.importorskip("pyarrow")

HERE = Path(__file__).parent

SERVER = [sys.executable, str(HERE / "solver_server_standin.py")]
TRAINER = str(HERE / "verl_standin.py")


def _cmd(tmp_path: Path, name: str, port: int) -> list[str]:
    folder = tmp_path / "solver"
    folder.mkdir(exist_ok=True)
    return SERVER + ["--model", str(folder), "--served-model-name", name, "--port", str(port)]


def test_the_server_is_up_inside_the_block_and_gone_after(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_SERVED", str(tmp_path / "served.jsonl"))
    port = free_port()
    with SolverServer(
        _cmd(tmp_path, "solver-01-questioner", port), port, "solver-01-questioner", tmp_path / "server.log", "3", 60.0
    ) as url:
        assert url == f"http://127.0.0.1:{port}/v1"
        with pytest.raises(SolverServerError, match="HTTP 401"):  # nobody else can ask it
            served_models(url, retries=0)
        key = json.loads((tmp_path / "served.jsonl").read_text())["key"]
        assert served_models(url, key=key) == ["solver-01-questioner"] and len(key) >= 32
    with pytest.raises(SolverServerError):
        served_models(url, timeout=2.0, retries=0)
    started = [json.loads(line) for line in (tmp_path / "served.jsonl").read_text().splitlines()]
    assert [s["cuda_visible_devices"] for s in started] == ["3"]  # backend.verl.solver_gpus
    assert key not in (tmp_path / "server.log").read_text()  # in the server's environment, not its command


def test_a_server_that_answers_without_the_key_is_refused(tmp_path, monkeypatch):
    """What answers on the port must refuse a wrong key: a server command that ignores
    VLLM_API_KEY (or another process that took the port first) would serve anyone."""
    monkeypatch.setenv("STANDIN_IGNORE_KEY", "1")
    port = free_port()
    srv = SolverServer(_cmd(tmp_path, "s", port), port, "s", tmp_path / "a.log", None, 60.0)
    with pytest.raises(SolverServerError, match=r"answered without its key \(HTTP 200 to a wrong one\)"):
        with srv:
            pass
    assert srv.proc is not None and srv.proc.poll() is not None  # stopped after the refusal


def test_a_server_that_exits_or_never_serves_fails_with_its_log(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setenv("STANDIN_SERVER_FAIL", "1")
    with pytest.raises(SolverServerError, match=r"(?s)exited with status 4 before serving.*STANDIN_SERVER_FAIL"):
        with SolverServer(_cmd(tmp_path, "s", port), port, "s", tmp_path / "a.log", None, 60.0):
            pass
    monkeypatch.delenv("STANDIN_SERVER_FAIL")
    other = free_port()  # it listens on another port than the one asked: never serves there
    srv = SolverServer(_cmd(tmp_path, "s", other), port, "s", tmp_path / "b.log", None, 3.0)
    with pytest.raises(SolverServerError, match=r"backend\.verl\.solver_start_timeout_s"):
        with srv:
            pass
    assert srv.proc is not None and srv.proc.poll() is not None  # stopped after the failure
    with pytest.raises(SolverServerError, match=r"backend\.verl\.solver_serve"):
        with SolverServer([str(tmp_path / "no-such-binary"), "x"], port, "s", tmp_path / "c.log", None, 3.0):
            pass


def test_serve_command_carries_the_runs_vllm_settings(tmp_path):
    cfg = load_config(
        "d2evo",
        None,
        [
            "backend=verl",
            "engine.gpu_memory_utilization=0.25",
            "engine.tensor_parallel_size=2",
            "backend.verl.n_gpus_per_node=2",
        ],
    )
    cmd = serve_command(cfg.backend.verl, cfg.engine, tmp_path, "solver-02-questioner", 1234)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags == {
        "--model": str(tmp_path),
        "--served-model-name": "solver-02-questioner",
        "--host": "127.0.0.1",
        "--port": "1234",
        "--gpu-memory-utilization": "0.25",
        "--tensor-parallel-size": "2",
    }


@pytest.mark.slow
def test_each_rounds_writer_is_scored_by_that_rounds_solver(tmp_path, toy_overrides, monkeypatch):
    """Two D²Evo rounds with backend=verl (stand-in trainer) and serve_solver: one server per
    questioner phase, started before verl's job, holding the solver as it was at that round's
    start (round 1: the base; round 2: the solver round 1 trained), gone after the phase."""
    from coevolve.recipes import execute

    served = tmp_path / "served.jsonl"
    monkeypatch.setenv("STANDIN_SERVED", str(served))
    smoke = HERE.parent / "configs" / "d2evo_smoke.yaml"
    cfg = load_config(
        "d2evo",
        smoke,
        [
            "rounds=2",
            "eval.heldout_size=8",
            "eval.samples=0",
            "eval.every_round=false",
            "solver.steps=1",
            "questioner.steps=1",
            "difficulty.measure_final=false",
            "run.keep_checkpoints=4",
            "backend=verl",
            f"backend.verl.main=[{sys.executable},{TRAINER},main]",
            f"backend.verl.merger=[{sys.executable},{TRAINER}]",
            "backend.verl.serve_solver=true",
            f"backend.verl.solver_serve=[{SERVER[0]},{SERVER[1]}]",
            "backend.verl.keep_workdir=true",
            *toy_overrides,
        ],
    )
    execute(cfg, tmp_path / "run")
    run = Run.open(tmp_path / "run")
    starts = [json.loads(line) for line in served.read_text().splitlines()]
    assert [s["name"] for s in starts] == ["solver-01-questioner", "solver-02-questioner"]
    from solver_server_standin import weights_digest

    ckpt = {p.name: weights_digest(p) for p in (run.path / "checkpoints").iterdir() if p.name.startswith("solver_r")}
    assert starts[1]["weights"] == ckpt["solver_r01"]  # round 2's writer: scored by round 1's trained solver
    assert starts[0]["weights"] != starts[1]["weights"]  # round 1's: the base, before any solver update
    for r in (1, 2):
        spec = json.loads((run.path / f"round_{r:02d}" / "verl_questioner" / "writer_spec.json").read_text())
        assert spec["solver_model"] == f"solver-{r:02d}-questioner" and spec["solver_path"] == ""
        assert spec["solver_url"].startswith("http://127.0.0.1:") and spec["api_key_env"] == "COEVOLVE_SOLVER_API_KEY"
    keys = [s["key"] for s in starts]
    assert len(set(keys)) == 2 and all(keys)  # a fresh key per phase, which the reward workers sent
    for f in run.path.rglob("*"):
        assert not f.is_file() or not any(k.encode() in f.read_bytes() for k in keys), f
    q = {rec.key: rec for rec in run.state.records()}["02/questioner"]
    assert q.values["rollouts_verify"] > 0  # the rewards were asked of the server


def test_plan_and_preflight_refuse_real_writer_phases_without_a_solver_that_follows_the_round(tmp_path):
    from coevolve.plan import device_for, make_plan, preflight_problems

    d = model_dir(tmp_path, QWEN3_4B)

    def problems(*extra, recipe="d2evo", device="h200"):
        cfg = load_config(
            recipe,
            None,
            [
                f"model.path={d}",
                "data.source=x.jsonl",
                "backend=verl",
                "backend.verl.n_gpus_per_node=8",
                "engine.gpu_memory_utilization=0.35",
                *extra,
            ],
        )
        return [
            p
            for p in make_plan(cfg, device_for(device), gpus=8 if device == "h200" else None).problems
            if "solver" in p
        ]

    none = problems()
    assert len(none) == 1 and "questioner rewards" in none[0] and "backend.verl.serve_solver=true" in none[0]
    assert problems(device="cpu")[:1] == none  # the same refusal on any device (first: before memory)
    stale = problems("backend.verl.solver_url=http://h:8000/v1")  # the preset's 3 rounds
    assert len(stale) == 1 and "rounds=3" in stale[0] and "round 1's solver" in stale[0]
    assert problems("backend.verl.solver_url=http://h:8000/v1", "rounds=1") == []
    assert problems("backend.verl.serve_solver=true") == []
    both = problems("backend.verl.serve_solver=true", "backend.verl.solver_url=http://h:8000/v1")
    assert len(both) == 1 and "one frozen solver server" in both[0]
    assert problems(recipe="grpo") == []  # no writer phase
    # the run's preflight is this plan on the run's device
    cfg = load_config("d2evo", None, [f"model.path={d}", "data.source=x.jsonl", "backend=verl", "model.device=cpu"])
    assert any("backend.verl.serve_solver=true" in p for p in preflight_problems(cfg))
    toy = load_config("d2evo", None, ["backend=verl", "model.device=cpu"])  # the toy solver: the workers load it
    assert not any("serve_solver" in p for p in preflight_problems(toy))


def test_the_plan_counts_the_solver_server_on_the_writer_phases_gpus(tmp_path):
    from coevolve.plan import GiB, device_for, make_plan

    d = model_dir(tmp_path, QWEN3_4B)
    base = [
        f"model.path={d}",
        "data.source=x.jsonl",
        "backend=verl",
        "backend.verl.n_gpus_per_node=8",
        "engine.gpu_memory_utilization=0.4",
    ]

    def phase(extra, gpus, name):
        plan = make_plan(load_config("d2evo", None, base + extra), device_for("h200"), gpus=gpus)
        return plan, next(p for p in plan.layout.phases if p.name == name)

    _, without = phase([], 8, "questioner")
    plan, shared = phase(["backend.verl.serve_solver=true"], 8, "questioner")
    server = 0.4 * 139 * GiB
    assert shared.gpus["verl GPU"] == without.gpus["verl GPU"] + server  # no GPU outside verl's job: on top of one
    assert any("backend.verl.serve_solver" in a for a in plan.layout.assumptions)
    _, own = phase(["backend.verl.serve_solver=true"], 9, "questioner")  # a ninth GPU: the server's own
    assert own.gpus["solver server GPU"] == server and own.gpus["verl GPU"] == without.gpus["verl GPU"]
    _, solver = phase(["backend.verl.serve_solver=true"], 8, "solver")
    assert "solver server GPU" not in solver.gpus  # only writer phases start it
