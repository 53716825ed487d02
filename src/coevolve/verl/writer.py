"""A question writer's reward (D²Evo questioner, DiagEvo / R-Zero challenger) inside verl's
reward workers, and the frozen solver it needs.

The local backend scores a whole batch at once (``curriculum.score_writer_batch``): parse every
completion, the *unique* questions are answered ``N_v`` times by the frozen solver, vote, then
the writer reward. verl 0.9.1 scores one sample per call: its reward loop
(``verl.experimental.reward_loop``) splits every batch into single samples before calling the
reward manager (``compute_score_batch`` -> ``run_single(data[i:i+1])``), and its registry has
no batch manager (the legacy ``BatchRewardManager`` is not reachable from ``main_ppo``). So
per sample (``score_sample``)::

    q = prompter.parse_question(completion)          # coevolve's parser
    votes(q) = label_questions(solver, [q], N_v, seed = derive_seed(seed, "verify", step, q))
    R = questioner_rewards([ok], [p1])               # coevolve's plateau reward

What this keeps: the same rule (``training.WriterRule``: the writer reward section, seed, seed
part, decoding), parser, voting and reward functions; one vote per distinct question per step
(votes are cached per (step, question) in the worker, and the draw is seeded by the question,
so copies of a question get the same x as with the local "unique questions"). What differs
(docs/verl.md): the solver's draws (seeded per question, not per batch). R-Zero's reward is
refused under verl (``VerlTrainer``, preflight): its repetition penalty clusters a whole batch,
which a worker scoring one sample cannot see.

The frozen solver is either a ``vllm serve`` (``backend.verl.solver_url``, ``engine.remote.RemoteSolver``)
or the folder the phase exported, loaded once per worker process with ``engine.load_sampler``.
"""

from __future__ import annotations

import importlib
import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coevolve.curriculum.proposals import WriterBatch
from coevolve.curriculum.voting import VoteRecord, label_questions
from coevolve.engine import load_tokenizer
from coevolve.engine.config import EngineConfig
from coevolve.engine.remote import RemoteSolver, SolverServerError, check_served_model, served_models  # noqa: F401 - the frozen solver server's client; verl.phase imports it from here
from coevolve.errors import ConfigError
from coevolve.prompts.chat import ChatPrompter
from coevolve.prompts.spec import PromptsConfig
from coevolve.rewards import questioner_rewards
from coevolve.run import derive_seed
from coevolve.schema import WriterReward
from coevolve.types import AnswerGrader, SamplingParams, Stop

SPEC_FILE = "writer_spec.json"


@dataclass(frozen=True)
class WriterSpec:
    """Everything a reward worker needs to score a writer's sample, as plain data (written to
    ``<phase>/verl/writer_spec.json``; the rows' ``RewardSpec.writer`` names the file)."""

    reward: dict[str, Any]  # schema.WriterReward, dumped
    seed: int  # the phase's reward seed (the local reward's ``seed``)
    ns: str  # "verify" (D²Evo) or "solve" (DiagEvo): the local reward's seed part
    params: dict[str, Any]  # SamplingParams of the solver's answers (seed set per question)
    prompter: dict[str, Any]  # {"kind": "toy", "class": "module:Class"} or {"kind": "chat", "chat_template": ..}
    rep_tokenizer: str
    batch_prompts: int
    solver_path: str = ""  # the frozen solver folder the phase exported ("" with solver_url)
    engine: dict[str, Any] = field(default_factory=dict)  # the run's engine section, dumped
    device: str = "auto"
    dtype: str = "auto"
    solver_url: str | None = None
    solver_model: str | None = None
    api_key_env: str | None = None  # the variable holding the server's key (the key is in no file)
    timeout_s: float = 300.0
    retries: int = 3

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> WriterSpec:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))

    def sampling(self, step: int, question: str) -> SamplingParams:
        """The solver's decoding for ``question`` at ``step``: seeded by the question, so every
        copy of it draws the same answers (the local backend votes once per distinct question)."""
        p = dict(self.params)
        stop = p.pop("stop", None) or {}
        return SamplingParams(
            **p,
            seed=derive_seed(self.seed, self.ns, step, question),
            stop=Stop(tuple(stop.get("strings", ())), tuple(stop.get("token_ids", ()))),
        )


def sampling_dict(params: SamplingParams) -> dict[str, Any]:
    """``SamplingParams`` as ``WriterSpec.params`` (no seed: the worker seeds per question)."""
    d = asdict(params)
    d.pop("seed", None)
    d["stop"] = {"strings": list(params.stop.strings), "token_ids": list(params.stop.token_ids)}
    return d


# --------------------------------------------------------------------------------------------
# per-sample scoring in the reward worker

_LOCK = threading.Lock()
_SAMPLERS: dict[tuple[str, str, str], Any] = {}
_VOTES: dict[tuple[str, int, str], VoteRecord] = {}


def prompter_spec(prompter: Any) -> dict[str, Any]:
    """The world's prompter as data a reward worker rebuilds it from (``_prompter``): a world's own
    prompter (toy, skill: built without arguments, its formats fixed by its base) by its world's
    name and class, a real model's ``ChatPrompter`` as its settings."""
    world = getattr(prompter, "world", None)
    if world is not None and not isinstance(prompter, ChatPrompter):
        cls = type(prompter)
        return {"kind": world, "class": f"{cls.__module__}:{cls.__qualname__}"}
    prompts = getattr(prompter, "prompts", None)
    return {
        "kind": "chat",
        "chat_template": bool(getattr(prompter, "use_chat_template", False)),
        "enable_thinking": getattr(prompter, "enable_thinking", None),
        **({"prompts": prompts.model_dump(mode="json")} if prompts is not None else {}),
    }


def _prompter(spec: WriterSpec) -> Any:
    kind = str(spec.prompter.get("kind"))
    if kind != "chat":
        module, _, name = str(spec.prompter.get("class", "")).partition(":")
        if not module.startswith("coevolve.") or not name:  # only a coevolve world's own prompter class
            raise ConfigError(
                f"the {kind} world's prompter is rebuilt from a tokenizer, not by name (by name: a world's "
                "own prompter, named by its class)"
            )
        return getattr(importlib.import_module(module), name)()

    tok = load_tokenizer(spec.solver_path) if spec.prompter.get("chat_template") else None
    prompts = PromptsConfig.model_validate(spec.prompter["prompts"]) if "prompts" in spec.prompter else None
    return ChatPrompter(
        tok,
        use_chat_template=bool(spec.prompter.get("chat_template")),
        enable_thinking=spec.prompter.get("enable_thinking"),
        prompts=prompts,
    )


def solver_of(spec: WriterSpec) -> Any:
    """The frozen solver of ``spec``, one per worker process and folder (a model load per sample
    would dominate): the server, or ``engine.load_sampler`` over the exported folder."""
    key = (spec.solver_url or "", spec.solver_model or "", spec.solver_path)
    if key not in _SAMPLERS:
        if spec.solver_url:
            url, env = spec.solver_url, spec.api_key_env
            model = check_served_model(url, spec.solver_model, spec.timeout_s, spec.retries, api_key_env=env)
            _SAMPLERS[key] = RemoteSolver(url, model, spec.timeout_s, spec.retries, api_key_env=env)
        else:
            from coevolve.engine import load_sampler  # lazy: a test monkeypatches coevolve.engine.load_sampler

            _SAMPLERS[key] = load_sampler(EngineConfig(**spec.engine), spec.solver_path, spec.device, spec.dtype)
    return _SAMPLERS[key]


def score_sample(
    spec: WriterSpec, text: str, step: int, grader: AnswerGrader, sampler: Any = None, prompter: Any = None
) -> dict[str, Any]:
    """One writer completion's reward and extras (module docstring): ``score``, ``well_formed``,
    ``p1`` / ``p2`` (-1 when malformed), ``in_band``, ``label`` ("" when none), ``solver_rollouts``
    (answers drawn for this sample: 0 when its question was already voted on this step)."""
    reward = WriterReward(**spec.reward)
    if reward.kind != "plateau":
        raise ConfigError(
            f"writer reward kind {reward.kind!r} cannot be scored one sample at a time (R-Zero's "
            "repetition penalty clusters the whole batch); use backend=local"
        )
    prompter = prompter or _prompter(spec)
    q = prompter.parse_question(text)
    vote, drawn = None, 0
    if q is not None:
        key = (json.dumps(asdict(spec), sort_keys=True), step, q)
        with _LOCK:
            vote = _VOTES.get(key)
            if vote is None:
                vote = label_questions(
                    sampler or solver_of(spec),
                    prompter,
                    [q],
                    reward.samples,
                    spec.sampling(step, q),
                    grader,
                    spec.batch_prompts,
                )[0]
                _VOTES[key] = vote
                drawn = reward.samples
    x = None if vote is None else vote.p1
    r, _ = questioner_rewards([q is not None], [x], reward.band.low, reward.band.high, reward.a)
    return {
        "score": r[0],
        "well_formed": float(q is not None),
        "p1": -1.0 if vote is None else vote.p1,
        "p2": -1.0 if vote is None else vote.p2,
        "in_band": float(x is not None and reward.band.contains(x)),
        "label": "" if vote is None or vote.label is None else vote.label,
        "solver_rollouts": float(drawn),
    }


WRITER_EXTRAS = ("well_formed", "p1", "p2", "in_band", "label", "solver_rollouts")
"""``score_sample``'s extras that ``writer_batch`` reads back from verl's dumps."""


def writer_batch(
    texts: list[list[str]], scores: list[list[float]], extras: list[list[dict[str, Any]]], parse: Any, n: int
) -> WriterBatch:
    """A step's ``WriterBatch`` rebuilt from verl's dumps, so the recipes' audit records and
    metrics come from the same code as locally (``votes`` holds what the dumps carry: label,
    p1, p2; not the answers)."""
    questions = [[parse(t) for t in g] for g in texts]
    xs: list[list[float | None]] = []
    band: list[list[bool]] = []
    votes: dict[str, VoteRecord] = {}
    rollouts = 0
    for qs, ex in zip(questions, extras):
        xs.append([float(e["p1"]) if q is not None else None for q, e in zip(qs, ex)])
        band.append([bool(e.get("in_band")) for e in ex])
        for q, e in zip(qs, ex):
            rollouts += int(e.get("solver_rollouts", 0))
            if q is not None and q not in votes:
                votes[q] = VoteRecord(q, n, [], e.get("label") or None, float(e["p1"]), float(e.get("p2", 0.0)), [])
    return WriterBatch(questions, xs, scores, band, votes, rollouts)
