"""verl/phase.py directly, without verl or a model: how its subprocesses are started and reported,
the environment they get, and what ``VerlTrainer.train`` refuses before any work (the whole phase
against a stand-in ``main_ppo`` is in tests/test_verl_backend.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import coevolve
from coevolve.errors import ConfigError
from coevolve.schema import GRPOPhase, WriterReward
from coevolve.training import RewardSpec, TrainRequest, WriterRule, WriterScoring
from coevolve.types import SamplingParams
from coevolve.verl import phase as P


def test_a_command_that_cannot_start_names_the_fields_that_choose_it(tmp_path: Path) -> None:
    log = tmp_path / "main.log"
    with pytest.raises(P.VerlPhaseError, match=r"verl main: cannot start '/no/such/python'.*backend\.verl\.python"):
        P._run(["/no/such/python", "-m", "verl.trainer.main_ppo"], log, dict(os.environ), "verl main", None)  # noqa: SLF001
    assert log.read_text().startswith("$ /no/such/python -m verl.trainer.main_ppo")


def test_a_failing_command_reports_its_status_log_and_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "merge.log"
    code = "import sys; print('x' * 5000); print('the merger broke here'); sys.exit(3)"
    with pytest.raises(P.VerlPhaseError) as e:
        P._run([sys.executable, "-c", code], log, dict(os.environ), "verl merger", None)  # noqa: SLF001
    msg = str(e.value)
    assert msg.startswith(f"verl merger exited with status 3; full log: {log}")
    assert msg.rstrip().endswith("the merger broke here") and len(msg) < P.LOG_TAIL_CHARS + 200  # the tail only
    P._run([sys.executable, "-c", "print('ok')"], log, dict(os.environ), "verl main", None)  # noqa: SLF001 - status 0: no error
    assert log.read_text().splitlines()[-1] == "ok"


def test_subprocesses_import_this_coevolve_and_log_metrics_to_the_phase_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = str(Path(coevolve.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = P._env(tmp_path / "m.jsonl")  # noqa: SLF001
    assert env["PYTHONPATH"] == src + os.pathsep + "/elsewhere"
    assert env["VERL_FILE_LOGGER_PATH"] == str(tmp_path / "m.jsonl")
    monkeypatch.delenv("PYTHONPATH")
    assert P._env(tmp_path / "m.jsonl")["PYTHONPATH"] == src  # noqa: SLF001


def _trainer(released: list[int]) -> P.VerlTrainer:
    return P.VerlTrainer(
        learner=None,
        verl=SimpleNamespace(solver_url="", keep_workdir=False),
        engine=None,
        device="cpu",
        dtype="float32",
        grader=None,
        grader_timeout=5.0,  # type: ignore[arg-type]
        save_rollouts=True,
        release=lambda: released.append(1),
    )


def _request(steps: int, reward: RewardSpec, writer: WriterScoring | None = None) -> TrainRequest:
    return TrainRequest(
        phase=GRPOPhase(steps=steps),
        ns="questioner",
        batches=lambda s: [],
        prompt=lambda t: "",
        params=SamplingParams(),
        reward=reward,
        writer=writer,
    )


def _writer(kind: str) -> WriterScoring:
    rule = WriterRule(
        reward=WriterReward(kind=kind),
        seed=0,
        ns="verify",
        params=SamplingParams(),
        rep_tokenizer="char",
        batch_prompts=8,
    )
    return WriterScoring(rule=rule, solver=None, scorer=None, prompter=None, audit=lambda *a: None)  # type: ignore[arg-type]


def test_train_refuses_before_any_work() -> None:
    """A zero-step phase trains nothing; a writer reward without its scoring (or scoring without
    a writer reward) and R-Zero's batch-level penalty are refused before the engines are released
    or a work folder exists (``role`` and ``ctx`` are never touched)."""
    released: list[int] = []
    t = _trainer(released)
    r = t.train(None, _request(0, RewardSpec("solver")), None)  # type: ignore[arg-type]
    assert (r.steps, r.rollouts, r.updates, r.records) == (0, 0, 0, [])
    with pytest.raises(P.VerlPhaseError, match="questioner: a writer reward needs its WriterScoring"):
        t.train(None, _request(2, RewardSpec("writer")), None)  # type: ignore[arg-type]
    with pytest.raises(P.VerlPhaseError, match="questioner: a writer reward needs its WriterScoring"):
        t.train(None, _request(2, RewardSpec("solver"), _writer("plateau")), None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"questioner\.reward\.kind=rzero with backend=verl.*backend=local"):
        t.train(None, _request(2, RewardSpec("writer"), _writer("rzero")), None)  # type: ignore[arg-type]
    assert released == []


def test_the_users_solver_server_key_is_named_by_a_variable_checked_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``backend.verl.solver_api_key_env`` names the variable that holds the key of the user's own
    ``solver_url`` server: the reward workers get its name (never the key) in their spec, and the
    plan -- so the run's preflight -- refuses an unset variable, or a key without a server."""
    from coevolve.config import load_config
    from coevolve.engine.config import EngineConfig
    from coevolve.plan.layouts import solver_server_problems
    from coevolve.plan.work import PhaseWork

    monkeypatch.delenv("MY_SOLVER_KEY", raising=False)
    url = ["backend=verl", "rounds=1", "backend.verl.solver_url=http://h:8000/v1"]
    cfg = load_config("d2evo", None, [*url, "backend.verl.solver_api_key_env=MY_SOLVER_KEY"])
    writers = [SimpleNamespace(train=SimpleNamespace(kind="question", section="questioner"))]
    works: list[PhaseWork] = writers  # type: ignore[assignment]
    assert solver_server_problems(cfg, works, toy=False) == [
        "backend.verl.solver_api_key_env: the environment variable MY_SOLVER_KEY is not set (or empty)"
    ]
    monkeypatch.setenv("MY_SOLVER_KEY", "s3cret")
    assert solver_server_problems(cfg, works, toy=False) == []
    alone = load_config("d2evo", None, ["backend=verl", "backend.verl.solver_api_key_env=MY_SOLVER_KEY"])
    assert "set solver_url too" in solver_server_problems(alone, works, toy=True)[0]
    with pytest.raises(ConfigError, match="solver_api_key_env"):
        load_config("d2evo", None, [*url, "backend.verl.solver_api_key_env=not a name"])

    t = P.VerlTrainer(
        learner=None,
        verl=cfg.backend.verl,
        engine=EngineConfig(),
        device="cpu",
        dtype="float32",
        grader=None,
        grader_timeout=5.0,  # type: ignore[arg-type]
        save_rollouts=True,
        release=lambda: None,
    )
    spec = t._writer_spec(_writer("plateau"), tmp_path)  # noqa: SLF001
    assert (spec.solver_url, spec.api_key_env, spec.solver_path) == ("http://h:8000/v1", "MY_SOLVER_KEY", "")
    assert "s3cret" not in str(spec)
