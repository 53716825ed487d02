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

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import coevolve
from coevolve.errors import CoevolveError
from coevolve.curriculum.proposals import WriterBatch
from coevolve.loop import Observed, Role, TrainResult, _rollout_rows
from coevolve.run import PhaseContext, derive_seed
from coevolve.run.faults import fault_point
from coevolve.schema import GRPOPhase
from coevolve.types import Completion, SamplingParams, Task
from coevolve.verl import convert
from coevolve.verl.overrides import PhasePaths, default_commands, phase_overrides
from coevolve.verl.parquet import IDENTITY_CHAT_TEMPLATE, RewardSpec, phase_rows, write_parquet
from coevolve.verl.writer import SPEC_FILE, WriterSpec, check_served_model, writer_batch

WORK_DIR = "verl_{ns}"
MAIN_LOG = "verl_{ns}_main.log"
MERGE_LOG = "verl_{ns}_merge.log"
METRICS_FILE = "verl_{ns}_metrics.jsonl"
"""Named by the phase's namespace: D²Evo's questioner and solver phases share a round folder."""
LOG_TAIL_CHARS = 3000
PROMPT_MARGIN_TOKENS = 8
"""Room above the longest prompt for special tokens verl's tokenisation might add (the identity
template adds none; a prompt over data.max_prompt_length stops verl with truncation=error)."""


class VerlPhaseError(CoevolveError):
    """verl's trainer or model merger failed; the message names the command and its log."""


@dataclass
class WriterPhase:
    """What a question writer's phase adds (``RewardSpec("writer")``): the frozen solver whose
    answers reward it, the ``WriterSpec`` its reward workers read (``solver_path`` is filled
    here), the world's question parser, and the recipe's ``audit`` (its local reward's records
    and metrics from a step's ``WriterBatch``)."""

    solver: Role
    spec: WriterSpec
    parse: Callable[[str], "str | None"]
    audit: Callable[[int, list[Task], list[list[Completion]], WriterBatch], Observed]


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


def _run(cmd: list[str], log: Path, env: dict[str, str], what: str) -> None:
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False).returncode
        except OSError as e:
            raise VerlPhaseError(f"{what}: cannot start {cmd[0]!r}: {e.strerror or e} (backend.verl.python / "
                                 "backend.verl.main / backend.verl.merger)") from None
    if rc != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        raise VerlPhaseError(f"{what} exited with status {rc}; full log: {log}\n... {tail}")


def _env(metrics_file: Path) -> dict[str, str]:
    """The subprocesses import this coevolve (the reward module does) and log metrics to a file."""
    env = dict(os.environ)
    src = str(Path(coevolve.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["VERL_FILE_LOGGER_PATH"] = str(metrics_file)
    return env


def verl_grpo_train(role: Role, phase: GRPOPhase, *, cfg: Any, batches: Callable[[int], list[Task]],
                    prompt: Callable[[Task], str], reward: RewardSpec, params: SamplingParams, ctx: PhaseContext,
                    ns: str, rollouts_file: Path | None = None, writer: WriterPhase | None = None) -> TrainResult:
    """``loop.grpo_train``'s contract, trained by verl (module docstring); ``cfg`` is the recipe
    config (``learner`` and ``backend.verl`` sections); ``writer`` for a writer's reward."""
    if phase.steps == 0:
        return TrainResult(0.0, 0, 0, 0, [], 0)
    if (reward.kind == "writer") != (writer is not None):
        raise VerlPhaseError(f"{ns}: a writer reward needs its WriterPhase and only it has one")
    vcfg = cfg.backend.verl
    if writer is not None and vcfg.solver_url:  # before any work: a wrong or absent server fails here
        check_served_model(vcfg.solver_url, vcfg.solver_model, writer.spec.timeout_s, writer.spec.retries)
    main, merger = default_commands(vcfg)
    work = ctx.dir / WORK_DIR.format(ns=ns)
    shutil.rmtree(work, ignore_errors=True)  # a killed verl phase restarts from scratch
    work.mkdir(parents=True)
    paths = PhasePaths(model=work / "model", train_file=work / "train.parquet", checkpoints=work / "checkpoints",
                       rollouts=work / "rollouts", reward_module=Path(__file__).with_name("reward.py"))
    if writer is not None:
        solver_path = "" if vcfg.solver_url else str(export_solver(writer.solver, work / "solver"))
        spec = replace(writer.spec, solver_path=solver_path, solver_url=vcfg.solver_url, solver_model=vcfg.solver_model)
        reward = replace(reward, writer=str(spec.write(work / SPEC_FILE)))
    rows = phase_rows(phase.steps, batches, prompt, role.name, reward)
    export_model(role, paths.model)
    write_parquet(rows, paths.train_file)
    longest = max(len(role.tokenizer(r.prompt, add_special_tokens=False)["input_ids"]) for r in rows)
    overrides = phase_overrides(phase=phase, learner=cfg.learner, verl=vcfg, temperature=params.temperature,
                                top_p=params.top_p, top_k=params.top_k, max_new_tokens=params.max_new_tokens,
                                max_prompt_tokens=longest + PROMPT_MARGIN_TOKENS, paths=paths,
                                experiment=f"{ctx.phase.key}".replace("/", "-"),
                                seed=derive_seed(ctx.seed, "rollout"))
    (work / "overrides.txt").write_text("\n".join(overrides) + "\n", encoding="utf-8")
    metrics_file = ctx.dir / METRICS_FILE.format(ns=ns)
    metrics_file.unlink(missing_ok=True)
    env = _env(metrics_file)
    ctx.say(f"[{ns}] verl: {phase.steps} steps x {phase.prompts_per_step} prompts x {phase.group_size} "
            f"(log {ctx.dir / MAIN_LOG.format(ns=ns)})")
    _run(main + overrides, ctx.dir / MAIN_LOG.format(ns=ns), env, "verl main_ppo")
    fault_point("verl")
    _, actor = convert.latest_checkpoint(paths.checkpoints)
    merged = work / "merged"
    _run(merger + ["merge", "--backend", "fsdp", "--local_dir", str(actor), "--target_dir", str(merged)],
         ctx.dir / MERGE_LOG.format(ns=ns), env, "verl model_merger")
    role.learner.load_weights(merged)
    role.sync()

    verl_metrics = convert.read_metrics(metrics_file)
    steps = convert.step_rollouts(paths.rollouts, rows, phase.steps, phase.group_size)
    seen: list[float] = []
    records: list[dict[str, Any]] = []
    rollouts = updates = reward_rollouts = 0
    fh = open(rollouts_file, "w", encoding="utf-8") if rollouts_file is not None else None  # noqa: SIM115
    try:
        for sr in steps:
            comps = convert.completions(sr, role.tokenizer)
            m = convert.step_metrics(sr, comps, verl_metrics.get(sr.step + 1, {}))
            ctx.compute.sampled(comps)
            if not m["skipped"]:
                updates += 1
                ctx.compute.trained(int(m["n_tokens"]) * cfg.learner.epochs_per_batch)
            seen.extend(x for g in sr.scores for x in g)
            rollouts += sum(len(g) for g in sr.texts)
            if writer is not None:
                wb = writer_batch(sr.texts, sr.scores, sr.extras, writer.parse, int(writer.spec.reward["solver_samples"]))
                obs = writer.audit(sr.step, [r.task for r in sr.rows], comps, wb)
                reward_rollouts += obs.rollouts
                records.extend({"step": sr.step, **r} for r in obs.records)
                m.update({k: v for k, v in obs.metrics.items() if isinstance(v, (int, float)) and k not in m})
            ctx.log({f"{ns}/{k}": v for k, v in m.items()}, step=sr.step)
            if reward.kind == "match":
                records.extend({"step": sr.step, **r} for r in convert.match_records(sr))
            if fh is not None:
                fh.writelines(_rollout_rows(sr.step, [r.task for r in sr.rows], [r.prompt for r in sr.rows], comps,
                                            sr.scores))
    finally:
        if fh is not None:
            fh.close()
    if not vcfg.keep_workdir:
        shutil.rmtree(work, ignore_errors=True)
    role.offload()
    return TrainResult(sum(seen) / max(1, len(seen)), phase.steps, rollouts, reward_rollouts, records, updates)
