"""One GRPO phase trained by verl (``backend=verl``): export -> parquet -> ``main_ppo`` ->
merge -> load -> convert.

1. the role's current weights and tokenizer go to ``<phase>/verl_<ns>/model`` as an HF folder whose
   chat template is the identity (``parquet.IDENTITY_CHAT_TEMPLATE``: coevolve renders prompts);
2. the phase's batches, in the local backend's order, go to ``train.parquet``;
3. ``backend.verl.main`` runs with ``overrides.phase_overrides`` (log: ``<phase>/verl_<ns>_main.log``);
4. ``backend.verl.merger`` merges the last checkpoint (``global_step_K/actor``) into an HF
   folder, whose weights are loaded into the role (the role's sampler is synced);
5. verl's rollout dumps and metrics become the phase's rollouts file, its metrics under
   ``<ns>/...`` in the run's log, the compute counters and a ``TrainResult``.

A phase killed while verl runs restarts from scratch (the work folder is rebuilt), like a
killed local phase; a finished phase is never re-run (``Run.phase``). The local learner's
optimiser state is not touched by a verl phase (verl's optimiser starts fresh every phase and
is dropped with the work folder): see docs/verl.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import coevolve
from coevolve.errors import CoevolveError, ConfigError
from coevolve.faults import fault_point
from coevolve.loop import Role
from coevolve.run import PhaseContext, derive_seed
from coevolve.run.children import run_child
from coevolve.training import RewardSpec, StepBook, TrainRequest, TrainResult, WriterScoring, audit_step
from coevolve.types import AnswerGrader
from coevolve.verl import convert
from coevolve.verl.overrides import PhasePaths, default_commands, phase_overrides
from coevolve.verl.parquet import IDENTITY_CHAT_TEMPLATE, phase_rows, write_parquet
from coevolve.verl.server import KEY_ENV, SolverServer, free_port, serve_command
from coevolve.verl.writer import SPEC_FILE, WriterSpec, check_served_model, prompter_spec, sampling_dict, writer_batch

WORK_DIR = "verl_{ns}"
MAIN_LOG = "verl_{ns}_main.log"
MERGE_LOG = "verl_{ns}_merge.log"
METRICS_FILE = "verl_{ns}_metrics.jsonl"
SERVER_LOG = "verl_{ns}_solver_server.log"
"""Named by the phase's namespace: D²Evo's questioner and solver phases share a round folder."""
LOG_TAIL_CHARS = 3000
PROMPT_MARGIN_TOKENS = 8
"""Room above the longest prompt for special tokens verl's tokenisation might add (the identity
template adds none; a prompt over data.max_prompt_length stops verl with truncation=error)."""


class VerlPhaseError(CoevolveError):
    """verl's trainer or model merger failed; the message names the command and its log."""


def export_solver(solver: Role, out: Path) -> Path:
    """The frozen solver's current weights and tokenizer, unchanged (its prompts are rendered
    by the world's prompter in the reward worker, with the tokenizer's own chat template)."""
    out.mkdir(parents=True, exist_ok=True)
    solver.model.save_pretrained(str(out))
    solver.tokenizer.save_pretrained(str(out))
    return out


def export_model(role: Role, out: Path) -> Path:
    """The role's current weights and tokenizer as an HF folder with the identity chat template."""
    out.mkdir(parents=True, exist_ok=True)
    role.model.save_pretrained(str(out))
    role.tokenizer.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    if cfg_path.is_file():  # one template only: a leftover in tokenizer_config.json would be ambiguous
        tc = json.loads(cfg_path.read_text(encoding="utf-8"))
        if tc.pop("chat_template", None) is not None:
            cfg_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "chat_template.jinja").write_text(IDENTITY_CHAT_TEMPLATE, encoding="utf-8")
    return out


def _run(cmd: list[str], log: Path, env: dict[str, str], what: str, record: Path | None) -> None:
    """``cmd`` to completion, its output in ``log``; a child that dies with coevolve and is
    recorded in the run folder ``record`` while it runs (``run.children``)."""
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            rc = run_child(cmd, record=record, name=what, stdout=fh, stderr=subprocess.STDOUT, env=env)
        except OSError as e:
            raise VerlPhaseError(
                f"{what}: cannot start {cmd[0]!r}: {e.strerror or e} (backend.verl.python / "
                "backend.verl.main / backend.verl.merger)"
            ) from None
    if rc != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        raise VerlPhaseError(f"{what} exited with status {rc}; full log: {log}\n... {tail}")


def _env(metrics_file: Path, key: str | None = None) -> dict[str, str]:
    """The subprocesses import this coevolve (the reward module does) and log metrics to a file;
    the reward workers get the phase's solver server key (``key``) in ``KEY_ENV``."""
    env = dict(os.environ)
    if key:
        env[KEY_ENV] = key
    src = str(Path(coevolve.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["VERL_FILE_LOGGER_PATH"] = str(metrics_file)
    return env


class VerlTrainer:
    """``backend=verl``: each GRPO phase trained by verl's ``main_ppo`` in a subprocess (module
    docstring), behind ``training.Trainer``. Built from the config sections it reads: the
    learner, ``backend.verl``, the engine (the writer's reward workers load the frozen solver with
    it), the model's device and dtype, the run's grader timeout and rollouts switch; ``release``
    frees the run engine's shared GPUs (an ``engine=ray`` pool) before verl's job takes them."""

    def __init__(
        self,
        *,
        learner: Any,
        verl: Any,
        engine: Any,
        device: str,
        dtype: str,
        grader: AnswerGrader,
        grader_timeout: float,
        save_rollouts: bool,
        release: Callable[[], None],
    ) -> None:
        self.learner, self.verl, self.engine, self.device, self.dtype = learner, verl, engine, device, dtype
        self.grader, self.grader_timeout, self.save_rollouts, self.release = (
            grader,
            grader_timeout,
            save_rollouts,
            release,
        )

    @classmethod
    def from_config(cls, cfg: Any, engine: Any, grader: AnswerGrader) -> VerlTrainer:
        return cls(
            learner=cfg.learner,
            verl=cfg.backend.verl,
            engine=cfg.engine,
            device=cfg.model.device,
            dtype=cfg.model.dtype,
            grader=grader,
            grader_timeout=cfg.run.grader_timeout,
            save_rollouts=cfg.run.save_rollouts,
            release=engine.release,
        )

    def train(self, role: Role, req: TrainRequest, ctx: PhaseContext) -> TrainResult:
        """``loop.grpo_train``'s contract, trained by verl (module docstring)."""
        phase, ns = req.phase, req.ns
        if phase.steps == 0:
            return TrainResult(0.0, 0, 0, 0, [], 0)
        reward = replace(req.reward, grader_timeout=self.grader_timeout)
        if (reward.kind == "writer") != (req.writer is not None):
            raise VerlPhaseError(f"{ns}: a writer reward needs its WriterScoring and only it has one")
        if req.writer is not None and req.writer.rule.reward.kind == "rzero":
            raise ConfigError(
                f"{ns}.reward.kind=rzero with backend=verl: R-Zero's repetition penalty clusters the "
                "whole batch, verl's reward workers score one sample at a time; use backend=local or "
                f"{ns}.reward.kind=plateau"
            )
        if req.writer is not None and self.verl.solver_url and self.verl.serve_solver:
            raise ConfigError(
                "backend.verl.solver_url and backend.verl.serve_solver=true: one frozen solver server; "
                "unset solver_url to let coevolve serve each round's solver"
            )
        if req.writer is not None and self.verl.solver_url:  # before any work: a wrong or absent server fails here
            check_served_model(
                self.verl.solver_url,
                self.verl.solver_model,
                WriterSpec.timeout_s,
                WriterSpec.retries,
                api_key_env=self.verl.solver_api_key_env,
            )
        self.release()  # verl's trainer gets the idle rollout engines' GPUs; their next sample call restarts them
        work = ctx.dir / WORK_DIR.format(ns=ns)
        shutil.rmtree(work, ignore_errors=True)  # a killed verl phase restarts from scratch
        work.mkdir(parents=True)
        paths = PhasePaths(
            model=work / "model",
            train_file=work / "train.parquet",
            checkpoints=work / "checkpoints",
            rollouts=work / "rollouts",
            reward_module=Path(__file__).with_name("reward.py"),
        )
        with self._solver_server(req, ctx, work) as served:
            if req.writer is not None:
                spec = self._writer_spec(req.writer, work, served)
                reward = replace(reward, writer=str(spec.write(work / SPEC_FILE)))
            rows = phase_rows(phase.steps, req.batches, req.prompt, role.name, reward)
            self._run(role, req, ctx, rows, paths, work, None if served is None else served[2])
        result = self._book(role, req, ctx, rows, paths, reward)
        if not self.verl.keep_workdir:
            shutil.rmtree(work, ignore_errors=True)
        role.offload()
        return result

    @contextlib.contextmanager
    def _solver_server(self, req: TrainRequest, ctx: PhaseContext, work: Path) -> Iterator[tuple[str, str, str] | None]:
        """``backend.verl.serve_solver`` and a writer phase: the frozen solver as it is at the start
        of this phase (this round's π_S^{t-1}), exported and served for the phase only; yields its
        (URL, served name, key) (None otherwise: the user's ``solver_url``, or the workers load the
        exported folder)."""
        if req.writer is None or not self.verl.serve_solver:
            yield None
            return
        folder = export_solver(req.writer.solver, work / "solver")
        name = f"solver-{ctx.phase.key}".replace("/", "-")
        port = free_port()
        cmd = serve_command(self.verl, self.engine, folder, name, port)
        log = ctx.dir / SERVER_LOG.format(ns=req.ns)
        ctx.say(f"[{req.ns}] frozen solver server {name} on port {port} (log {log})")
        server = SolverServer(
            cmd, port, name, log, self.verl.solver_gpus, self.verl.solver_start_timeout_s, record=ctx.run_dir
        )
        with server as url:
            yield url, name, server.key

    def _writer_spec(self, w: WriterScoring, work: Path, served: tuple[str, str, str] | None = None) -> WriterSpec:
        """What the reward workers need to score a writer's sample: the rule, the prompter, and the
        frozen solver (a server: coevolve's for this phase, ``served``, whose key the workers find
        in ``KEY_ENV``, or the user's ``solver_url`` with its key in ``solver_api_key_env``; else its weights at the start of the phase,
        exported)."""
        v, rule = self.verl, w.rule
        url, model = served[:2] if served is not None else (v.solver_url, v.solver_model)
        solver_path = "" if url else str(export_solver(w.solver, work / "solver"))
        return WriterSpec(
            reward=rule.reward.model_dump(mode="json"),
            seed=rule.seed,
            ns=rule.ns,
            params=sampling_dict(rule.params),
            prompter=prompter_spec(w.prompter),
            rep_tokenizer=rule.rep_tokenizer,
            batch_prompts=rule.batch_prompts,
            solver_path=solver_path,
            engine=self.engine.model_dump(mode="json"),
            device=self.device,
            dtype=self.dtype,
            solver_url=url,
            solver_model=model,
            api_key_env=KEY_ENV if served is not None else v.solver_api_key_env,
        )

    def _run(
        self,
        role: Role,
        req: TrainRequest,
        ctx: PhaseContext,
        rows: list[Any],
        paths: PhasePaths,
        work: Path,
        key: str | None = None,
    ) -> None:
        """Export, parquet, ``main_ppo`` (``key``: the phase's solver server's, in its environment),
        merge; the merged weights into the role (synced)."""
        phase, ns, params = req.phase, req.ns, req.params
        main, merger = default_commands(self.verl)
        export_model(role, paths.model)
        write_parquet(rows, paths.train_file)
        longest = max(len(role.tokenizer(r.prompt, add_special_tokens=False)["input_ids"]) for r in rows)
        overrides = phase_overrides(
            phase=phase,
            learner=self.learner,
            verl=self.verl,
            engine=self.engine,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_new_tokens=params.max_new_tokens,
            max_prompt_tokens=longest + PROMPT_MARGIN_TOKENS,
            paths=paths,
            experiment=f"{ctx.phase.key}".replace("/", "-"),
            seed=derive_seed(ctx.seed, "rollout"),
        )
        (work / "overrides.txt").write_text("\n".join(overrides) + "\n", encoding="utf-8")
        metrics_file = ctx.dir / METRICS_FILE.format(ns=ns)
        metrics_file.unlink(missing_ok=True)
        env = _env(metrics_file, key)
        ctx.say(
            f"[{ns}] verl: {phase.steps} steps x {phase.prompts_per_step} prompts x {phase.group_size} "
            f"(log {ctx.dir / MAIN_LOG.format(ns=ns)})"
        )
        _run(main + overrides, ctx.dir / MAIN_LOG.format(ns=ns), env, "verl main_ppo", ctx.run_dir)
        fault_point("verl")
        _, actor = convert.latest_checkpoint(paths.checkpoints)
        merged = work / "merged"
        _run(
            merger + ["merge", "--backend", "fsdp", "--local_dir", str(actor), "--target_dir", str(merged)],
            ctx.dir / MERGE_LOG.format(ns=ns),
            env,
            "verl model_merger",
            ctx.run_dir,
        )
        role.learner.load_weights(merged)
        role.sync()

    def _book(
        self, role: Role, req: TrainRequest, ctx: PhaseContext, rows: list[Any], paths: PhasePaths, reward: RewardSpec
    ) -> TrainResult:
        """verl's rollout dumps and metrics through the ``StepBook`` every backend uses: the
        reward's audit from the dumped extras (``audit_step``, or the writer's ``WriterBatch``
        rebuilt and audited by the recipe), sampling compute counted here (verl sampled)."""
        phase, ns = req.phase, req.ns
        verl_metrics = convert.read_metrics(ctx.dir / METRICS_FILE.format(ns=ns))
        rollouts_file = ctx.dir / f"{ns}_rollouts.jsonl" if self.save_rollouts else None
        with StepBook(ctx, ns, rollouts_file, self.learner.epochs_per_batch) as book:
            for sr in convert.step_rollouts(paths.rollouts, rows, phase.steps, phase.group_size):
                comps = convert.completions(sr, role.tokenizer)
                ctx.compute.sampled(comps)
                tasks = [r.task for r in sr.rows]
                if req.writer is not None:
                    wb = writer_batch(
                        sr.texts,
                        sr.scores,
                        sr.extras,
                        req.writer.prompter.parse_question,
                        req.writer.rule.reward.samples,
                    )
                    observed = req.writer.audit(sr.step, tasks, comps, wb)
                else:
                    observed = audit_step(reward, tasks, sr.texts, sr.extras, self.grader)
                book.step(
                    sr.step,
                    tasks,
                    [r.prompt for r in sr.rows],
                    comps,
                    sr.scores,
                    convert.step_metrics(sr, comps, verl_metrics.get(sr.step + 1, {})),
                    observed,
                )
        return book.result(phase.steps)
