"""One training interface for both backends: a recipe asks ``trainer.train(role, TrainRequest,
ctx) -> TrainResult`` and does not know which backend trains.

- ``TrainRequest``: the GRPO phase section, the metric namespace (also the rollouts file's
  name), the phase's batches and prompts, the decoding, and the reward **as data**
  (``RewardSpec``; a writer's phase adds its ``WriterScoring``: the frozen solver, the rule it
  is scored by, the recipe's audit);
- the reward is stated once and evaluated by both backends from that one statement: the local
  loop calls ``local_reward(spec, ...)`` on a whole step, verl's reward workers call
  ``score_sample(spec, ...)`` (solver, match) or ``verl.writer.score_sample`` (writer) per sample;
  both run the same functions of ``coevolve.rewards`` and the same audits (``audit_step``), so a
  phase's records and metrics mean the same under either backend. A batch-level term that a
  per-sample worker cannot compute (R-Zero's repetition penalty clusters the whole batch) is
  refused under verl (``preflight.backend_problems``, ``VerlTrainer``), never silently changed;
- ``StepBook``: the bookkeeping of every step (rewards seen, audit records, rollouts, updates,
  trained tokens, the rollouts file, the step's metrics line), written once for both backends;
- ``make_trainer(cfg, engine, grader)``: the one dispatch by ``backend.kind`` (``BACKENDS``).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from coevolve.curriculum.proposals import WriterBatch, score_writer_batch
from coevolve.curriculum.sampling import answer_text
from coevolve.errors import ConfigError
from coevolve.faults import fault_point
from coevolve.reward_function import CORRECT_AT, FunctionGrader
from coevolve.rewards import signed_match_rewards, solver_rewards
from coevolve.run import PhaseContext, derive_seed
from coevolve.run.files import json_line
from coevolve.schema import GRPOPhase, WriterReward
from coevolve.types import AnswerGrader, Completion, Sampler, SamplingParams, Task

RewardKind = Literal["solver", "match", "writer"]


# --------------------------------------------------------------------------------------------
# what a reward function saw, and what a phase returns


@dataclass
class Observed:
    """What a reward function saw in one step: batch scalars, audit records, and the rollouts
    it drew itself (a writer's reward samples the frozen solver)."""

    metrics: dict[str, float] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    rollouts: int = 0


RewardFn = Callable[[int, list[Task], list[list[Completion]]], tuple[list[list[float]], Observed]]
"""``reward_fn(step, tasks, completions) -> (rewards, observed)``; rewards are (B, G)."""

AuditFn = Callable[[int, list[Task], list[list[Completion]], WriterBatch], Observed]
"""A writer phase's audit: the recipe's records and metrics of a step's ``WriterBatch``."""


@dataclass
class TrainResult:
    """A finished GRPO phase: mean reward, updates, policy rollouts, rollouts drawn by the
    reward function, and every audit record (tagged with its step)."""

    reward_mean: float
    steps: int
    rollouts: int
    reward_rollouts: int
    records: list[dict[str, Any]]
    updates: int = 0  # steps that changed the weights (a step whose groups all had zero variance does not)
    zero_variance: float | None = None  # share of the phase's groups whose rewards were all equal (no signal)

    @property
    def problem(self) -> str | None:
        """Why the phase trained nothing, when it should have."""
        if self.steps > 0 and self.updates == 0:
            return (
                f"all {self.steps} steps had zero reward variance in every group (every answer equally right or "
                "wrong): nothing was learned; check the answer budget, the prompts and the difficulty band"
            )
        return None


# --------------------------------------------------------------------------------------------
# the reward, as data


@dataclass(frozen=True)
class RewardSpec:
    """A GRPO phase's reward rule as plain data (it crosses into verl's reward workers in the
    parquet's ``extra_info``).

    ``solver``: ``α·acc + (1-α)·fmt`` against the task's label (``rewards.solver_rewards``, the
    grpo and D²Evo solver). ``match``: +1 / -1 against the pseudo-label
    (``rewards.signed_match_rewards``, the DiagEvo solver). ``writer``: a question writer's
    reward on the frozen solver's votes (``WriterScoring`` holds the rule); under verl
    ``writer`` names the phase's ``verl.writer.WriterSpec`` file. ``grader_timeout`` is the
    run's (filled by the trainer)."""

    kind: RewardKind
    alpha: float = 0.9
    grader_timeout: float = 5.0
    writer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RewardSpec:
        return cls(
            kind=d["kind"],
            alpha=float(d.get("alpha", 0.9)),
            grader_timeout=float(d.get("grader_timeout", 5.0)),
            writer=str(d.get("writer") or ""),
        )


@dataclass(frozen=True)
class WriterRule:
    """How the frozen solver scores a writer's question, as data: the writer reward section, the
    phase's reward seed and its seed part ``ns`` ("verify": D²Evo, "solve": DiagEvo), the
    solver's decoding (``params``, unseeded), the repetition penalty's tokens and the chunk size.
    Step s draws with ``derive_seed(seed, ns, s)`` (per question under verl: docs/verl.md)."""

    reward: WriterReward
    seed: int
    ns: str
    params: SamplingParams
    rep_tokenizer: str
    batch_prompts: int

    def step_params(self, step: int) -> SamplingParams:
        return replace(self.params, seed=derive_seed(self.seed, self.ns, step))


@dataclass
class WriterScoring:
    """What a writer's phase adds to its ``RewardSpec("writer")``: the rule, the frozen solver
    (``solver``: its role, exported by verl; ``scorer``: the sampler the local loop votes with,
    a frozen copy or the solver's own), the world's prompter (prompts and question parser) and
    the recipe's ``audit`` of a step's ``WriterBatch``."""

    rule: WriterRule
    solver: Any
    scorer: Sampler
    prompter: Any
    audit: AuditFn


# --------------------------------------------------------------------------------------------
# evaluating the reward: per sample (verl's workers) and per step (the local loop)


def solver_scores(
    labels: Sequence[str], texts: Sequence[str], grader: AnswerGrader, alpha: float
) -> list[dict[str, float]]:
    """``{"score", "acc", "format"}`` per completion: ``α·acc + (1-α)·fmt`` against its label
    (a task without a label is never correct); under a user's ``reward.function`` the score is the
    function's value itself (TRL's reward), ``acc`` whether it reaches ``CORRECT_AT``."""
    if isinstance(grader, FunctionGrader):
        values = grader.scores(list(labels), list(texts))
        _, bd = solver_rewards(list(texts), [v >= CORRECT_AT for v in values], alpha)
        return [{"score": v, "acc": a, "format": f} for v, a, f in zip(values, bd["acc"], bd["format"])]  # type: ignore[arg-type]
    correct = [bool(lab) and ok for lab, ok in zip(labels, grader.grade_batch(list(labels), list(texts)))]
    r, bd = solver_rewards(list(texts), correct, alpha)
    return [{"score": s, "acc": a, "format": f} for s, a, f in zip(r, bd["acc"], bd["format"])]  # type: ignore[arg-type]


def match_scores(labels: Sequence[str], texts: Sequence[str], grader: AnswerGrader) -> list[dict[str, float]]:
    """``{"score", "match"}`` per completion: +1 when it matches the pseudo-label, else -1."""
    match = [bool(lab) and ok for lab, ok in zip(labels, grader.grade_batch(list(labels), list(texts)))]
    r, bd = signed_match_rewards(match)
    return [{"score": s, "match": m} for s, m in zip(r, bd["match"])]  # type: ignore[arg-type]


def score_sample(spec: RewardSpec, text: str, label: str, grader: AnswerGrader) -> dict[str, float]:
    """One completion's reward and extras under ``spec`` (solver, match): what a verl reward
    worker returns for a sample; the local loop evaluates the same functions on whole steps."""
    if spec.kind == "solver":
        return solver_scores([label], [text], grader, spec.alpha)[0]
    if spec.kind == "match":
        return match_scores([label], [text], grader)[0]
    raise ConfigError(f"score_sample: a {spec.kind!r} reward is scored by verl.writer.score_sample")


def audit_step(
    spec: RewardSpec,
    tasks: Sequence[Task],
    texts: Sequence[Sequence[str]],
    extras: Sequence[Sequence[dict[str, Any]]],
    grader: AnswerGrader,
) -> Observed:
    """A solver phase's step figures and records from its samples' extras, the same for both
    backends. ``solver``: ``acc_mean``, ``format_mean``. ``match`` (DiagEvo): ``match_rate``,
    ``oracle_acc`` where the tasks carry the world's answer, and one record per question with its
    G responses and whether each matched the pseudo-label (the diagnosis input)."""
    flat = [e for g in extras for e in g]
    mean = lambda key: sum(float(e[key]) for e in flat) / max(1, len(flat))  # noqa: E731
    if spec.kind == "solver":
        return Observed({"acc_mean": mean("acc"), "format_mean": mean("format")})
    records = [
        {
            "id": t.id,
            "question": t.question,
            "label": t.answer,
            "targets": t.features.get("targets", []),
            "responses": list(g),
            "matches": [bool(e["match"]) for e in ex],
        }
        for t, g, ex in zip(tasks, texts, extras)
    ]
    metrics = {"match_rate": mean("match")}
    known = [(t, g) for t, g in zip(tasks, texts) if t.features.get("oracle") is not None]
    if known:
        truth = grader.grade_batch(
            [t.features["oracle"] for t, g in known for _ in g], [x for _, g in known for x in g]
        )
        metrics["oracle_acc"] = sum(float(v) for v in truth) / max(1, len(truth))
    return Observed(metrics, records)


def _groups(flat: list[Any], comps: Sequence[Sequence[Any]]) -> list[list[Any]]:
    out, i = [], 0
    for g in comps:
        out.append(flat[i : i + len(g)])
        i += len(g)
    return out


def local_reward(spec: RewardSpec, grader: AnswerGrader, writer: WriterScoring | None = None) -> RewardFn:
    """``spec`` evaluated on a whole step (the local loop): solver and match through
    ``solver_scores`` / ``match_scores`` and ``audit_step``; a writer through
    ``score_writer_batch`` (the distinct questions voted on by the frozen solver in one pass) and
    the recipe's audit."""
    if spec.kind == "writer":
        if writer is None:
            raise ConfigError("a writer reward needs its WriterScoring (the frozen solver and the rule)")
        w, rule = writer, writer.rule

        def writer_reward(
            step: int, tasks: list[Task], comps: list[list[Completion]]
        ) -> tuple[list[list[float]], Observed]:
            wb = score_writer_batch(
                comps,
                parse=w.prompter.parse_question,
                scorer=w.scorer,
                prompter=w.prompter,
                reward=rule.reward,
                grader=grader,
                params=rule.step_params(step),
                batch_prompts=rule.batch_prompts,
                rep_tokenizer=rule.rep_tokenizer,
            )
            return wb.rewards, w.audit(step, tasks, comps, wb)

        return writer_reward

    def reward(step: int, tasks: list[Task], comps: list[list[Completion]]) -> tuple[list[list[float]], Observed]:
        # read as votes and pass rates read them: a completion cut off before its box closed is no answer
        texts = [answer_text(c) for g in comps for c in g]
        labels = [t.answer or "" for t, g in zip(tasks, comps) for _ in g]
        flat = (
            solver_scores(labels, texts, grader, spec.alpha)
            if spec.kind == "solver"
            else match_scores(labels, texts, grader)
        )
        extras = _groups(flat, comps)
        rewards = [[float(e["score"]) for e in g] for g in extras]
        return rewards, audit_step(spec, tasks, [[c.text for c in g] for g in comps], extras, grader)

    return reward


def labelled_reward(alpha: float, grader: AnswerGrader) -> RewardFn:
    """The solver reward ``α·acc + (1-α)·fmt`` against each task's answer, on a whole step."""
    return local_reward(RewardSpec("solver", alpha), grader)


def match_reward(grader: AnswerGrader) -> RewardFn:
    """DiagEvo's solver reward, +1 / -1 for matching the pseudo-label, on a whole step."""
    return local_reward(RewardSpec("match"), grader)


# --------------------------------------------------------------------------------------------
# the request and the bookkeeping


@dataclass
class TrainRequest:
    """One GRPO phase for any backend: ``phase.steps`` steps, step s on the tasks
    ``batches(s)`` (prompts ``prompt(task)``), ``phase.group_size`` completions each decoded by
    ``params`` (the trainer seeds step s with ``derive_seed(ctx.seed, "rollout", s)``), rewarded
    by ``reward`` (+ ``writer`` for a writer's phase); metrics under ``ns/`` and rollouts in
    ``<phase folder>/<ns>_rollouts.jsonl``."""

    phase: GRPOPhase
    ns: str
    batches: Callable[[int], list[Task]]
    prompt: Callable[[Task], str]
    params: SamplingParams
    reward: RewardSpec
    writer: WriterScoring | None = None


class StepBook:
    """The bookkeeping of one GRPO phase's steps, the same for both backends: per step the
    rewards seen, the audit records (tagged with the step), the policy and reward rollouts, the
    update count and trained tokens (``ctx.compute``), the step's metrics line (learner or verl
    figures, then the reward's, under ``ns/``) and its lines in the rollouts file (rewritten from
    scratch when the phase restarts). Use as a context manager (the file is closed on exit)."""

    def __init__(
        self,
        ctx: PhaseContext,
        ns: str,
        rollouts_file: Path | None,
        epochs_per_batch: int,
        prior: dict[str, Any] | None = None,
    ) -> None:
        self.ctx, self.ns, self.epochs = ctx, ns, epochs_per_batch
        self.fh = None if rollouts_file is None else _reopen(rollouts_file, prior)
        p = prior or {}
        self.seen: list[float] = list(p.get("seen", []))
        self.records: list[dict[str, Any]] = list(p.get("records", []))
        self.rollouts, self.reward_rollouts, self.updates, self.groups, self.zero_groups = (
            int(p.get(k, 0)) for k in ("rollouts", "reward_rollouts", "updates", "groups", "zero_groups")
        )

    def state(self, steps: int, compute: dict[str, int]) -> dict[str, Any]:
        """What the phase booked in its first ``steps`` steps (and the ``compute`` they took): a
        continued phase (``coevolve resume RUN solver.steps=N``) starts its book from it."""
        return {
            "steps": steps,
            "seen": self.seen,
            "records": self.records,
            "rollouts": self.rollouts,
            "reward_rollouts": self.reward_rollouts,
            "updates": self.updates,
            "groups": self.groups,
            "zero_groups": self.zero_groups,
            "compute": compute,
        }

    def flush(self) -> int | None:
        """The rollouts file on disk as far as it is written; its length (None without one)."""
        if self.fh is None:
            return None
        self.fh.flush()
        os.fsync(self.fh.fileno())
        return os.fstat(self.fh.fileno()).st_size

    def __enter__(self) -> StepBook:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fh is not None:
            self.fh.close()

    def step(
        self,
        step: int,
        tasks: Sequence[Task],
        prompts: Sequence[str],
        comps: Sequence[Sequence[Completion]],
        rewards: Sequence[Sequence[float]],
        metrics: dict[str, Any],
        observed: Observed,
        timings: dict[str, float] | None = None,
    ) -> None:
        """Book step ``step``: ``metrics`` are the update's (``skipped``, ``n_tokens``, loss ...),
        ``timings`` the step's generation and learning seconds where the backend measures them."""
        skipped = bool(metrics.get("skipped"))
        self.updates += int(not skipped)
        if not skipped:  # trained tokens: the update's completion tokens, once per epoch
            self.ctx.compute.trained(int(metrics["n_tokens"]) * self.epochs)
        self.seen.extend(x for r in rewards for x in r)
        self.groups += sum(1 for r in rewards if len(r))
        self.zero_groups += zero_variance_groups(rewards)
        self.rollouts += sum(len(c) for c in comps)
        self.reward_rollouts += observed.rollouts
        self.records.extend({"step": step, **r} for r in observed.records)
        self.ctx.log(
            {
                f"{self.ns}/{k}": v
                for k, v in {**metrics, **observed.metrics, **(timings or {})}.items()
                if isinstance(v, (int, float))
            },
            step=step,
        )
        if self.fh is not None:
            fault_point("rollouts")
            self.fh.writelines(
                json_line(
                    {
                        "step": step,
                        "task_id": t.id,
                        "prompt": p,
                        "label": t.answer,
                        "completions": [x.text for x in c],
                        "rewards": list(r),
                    }
                )
                for t, p, c, r in zip(tasks, prompts, comps, rewards)
            )

    def result(self, steps: int) -> TrainResult:
        return TrainResult(
            sum(self.seen) / max(1, len(self.seen)),
            steps,
            self.rollouts,
            self.reward_rollouts,
            self.records,
            self.updates,
            round(self.zero_groups / self.groups, 4) if self.groups else None,
        )


def _reopen(path: Path, prior: dict[str, Any] | None) -> Any:
    """A phase's rollouts file opened for its steps: new, or with the lines of the steps a
    continued phase (``prior``: its ``StepBook.state`` when it ended) or a mid-phase save
    (``prior["rollouts_bytes"]``) already has."""
    if prior is None or not path.is_file():
        return open(path, "w", encoding="utf-8")  # noqa: SIM115
    if "rollouts_bytes" in prior:
        # the saved steps' lines are the file's first bytes: cut in place (a kill before the cut
        # leaves them to cut again), then the steps after the save are appended
        with open(path, "r+b") as f:
            f.truncate(int(prior["rollouts_bytes"]))
        return open(path, "a", encoding="utf-8")  # noqa: SIM115
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
        if line.strip() and json.loads(line)["step"] < prior["steps"]
    ]
    fh = open(path, "w", encoding="utf-8")  # noqa: SIM115
    fh.writelines(kept)
    return fh


def zero_variance_groups(rewards: Sequence[Sequence[float]]) -> int:
    """Groups whose rewards are all equal (GRPO's zero-std rule: no signal to learn from)."""
    return sum(1 for r in rewards if len(r) and max(r) - min(r) < 1e-6)


def book_file(phase_dir: Path, ns: str) -> Path:
    """Where a GRPO phase of the local backend leaves its book (``StepBook.state``) when it ends."""
    return Path(phase_dir) / f"{ns}_book.json"


class Trainer(Protocol):
    """A training backend: ``train(role, request, ctx)`` runs one GRPO phase of ``role`` and
    leaves the role's weights (and its sampler) updated."""

    def train(self, role: Any, req: TrainRequest, ctx: PhaseContext) -> TrainResult: ...


BACKENDS: dict[str, str] = {"local": "coevolve.loop:LocalTrainer", "verl": "coevolve.verl.phase:VerlTrainer"}
"""``backend.kind`` -> its trainer class (``from_config(cfg, engine, grader)``)."""


def make_trainer(cfg: Any, engine: Any, grader: AnswerGrader) -> Trainer:
    """The trainer of ``backend.kind``, from the config sections it reads; ``engine`` is the
    run's (a verl phase first frees its shared GPUs), ``grader`` the run's."""
    kind = cfg.backend.kind
    if kind not in BACKENDS:
        raise ConfigError(f"backend.kind={kind!r}: unknown training backend (known: {', '.join(BACKENDS)})")
    module, _, name = BACKENDS[kind].partition(":")
    return getattr(importlib.import_module(module), name).from_config(cfg, engine, grader)


__all__ = [
    "AuditFn",
    "BACKENDS",
    "Observed",
    "RewardFn",
    "RewardKind",
    "RewardSpec",
    "StepBook",
    "TrainRequest",
    "TrainResult",
    "Trainer",
    "WriterRule",
    "WriterScoring",
    "audit_step",
    "book_file",
    "labelled_reward",
    "local_reward",
    "make_trainer",
    "match_reward",
    "match_scores",
    "score_sample",
    "solver_scores",
    "zero_variance_groups",
]
