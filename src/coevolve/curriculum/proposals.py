"""The two proposal pipelines both methods share, over typed records.

1. ``score_writer_batch`` — a question writer's GRPO reward (D²Evo questioner step 2, DiagEvo
   challenger stage 1): parse each completion → the unique questions → the frozen solver answers
   each N_v times → vote → x = p1 → writer reward (plateau or R-Zero).
2. ``propose_questions`` — a training pool from a trained writer (D²Evo buffer step 3, DiagEvo
   stage 2): generate → parse → drop copies of anchors, evaluation items and repeats → vote →
   confidence filter → optional label verifier, with the oracle's verdict on every label where
   the world has an oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from coevolve.curriculum.buffer import normalize_question
from coevolve.curriculum.sampling import sample_chunked
from coevolve.curriculum.verify import LabelVerifier, NoVerifier
from coevolve.curriculum.voting import (
    OracleFn,
    VoteRecord,
    confidence_filter,
    label_correct,
    label_questions,
    label_questions_adaptive,
)
from coevolve.prompts import Prompter
from coevolve.rewards import questioner_rewards, rzero_rewards
from coevolve.schema import Voting, WriterReward
from coevolve.types import AnswerGrader, Completion, Sampler, SamplingParams

ParseFn = Callable[[str], "str | None"]
FILTER_MODES = ("none", "absolute", "dual")


def _rate(num: float, den: float) -> float:
    return num / den if den else 0.0


# --------------------------------------------------------------------------------------------
# 1. writer reward


@dataclass
class WriterBatch:
    """What the frozen solver made of one batch of writer completions; lists are (B, G)."""

    questions: list[list[str | None]]
    x: list[list[float | None]]
    rewards: list[list[float]]
    in_band: list[list[bool]]
    votes: dict[str, VoteRecord]
    rollouts: int

    def metrics(self) -> dict[str, float]:
        """Batch figures: reward mean, well-formed share, in-band share and distinct share of the
        well-formed, mean p1 of the well-formed."""
        flat = [q for row in self.questions for q in row]
        ok = [q for q in flat if q is not None]
        xs = [x for row in self.x for x in row if x is not None]
        rewards = [r for row in self.rewards for r in row]
        return {
            "reward_mean": _rate(sum(rewards), len(rewards)),
            "well_formed": _rate(len(ok), len(flat)),
            "in_band": _rate(sum(b for row in self.in_band for b in row), len(ok)),
            "distinct": _rate(len(self.votes), len(ok)),
            "p1_mean": _rate(sum(xs), len(xs)),
        }


def score_writer_batch(
    completions: Sequence[Sequence[Completion]],
    *,
    parse: ParseFn,
    scorer: Sampler,
    prompter: Prompter,
    reward: WriterReward,
    grader: AnswerGrader,
    params: SamplingParams,
    batch_prompts: int,
    rep_tokenizer: str,
) -> WriterBatch:
    """Reward every writer completion. Each distinct question (sorted, so the draw does not
    depend on which completion wrote it first) is answered ``reward.samples`` times by
    ``scorer`` — the frozen solver — in one chunked pass; a malformed completion scores the
    reward's malformed value and draws no answers."""
    questions = [[parse(c.text) for c in g] for g in completions]
    uniq = sorted({q for row in questions for q in row if q is not None})
    votes = {
        v.question: v for v in label_questions(scorer, prompter, uniq, reward.samples, params, grader, batch_prompts)
    }
    flat_q = [q for row in questions for q in row]
    ok = [q is not None for q in flat_q]
    flat_x = [votes[q].p1 if q is not None else None for q in flat_q]
    if reward.kind == "plateau":
        flat_r, _ = questioner_rewards(ok, flat_x, reward.band.low, reward.band.high, reward.a)
    else:
        flat_r, _ = rzero_rewards(ok, flat_x, flat_q, rep_tokenizer, reward.rep_threshold)
    flat_band = [x is not None and reward.band.contains(x) for x in flat_x]
    shape = [len(g) for g in completions]

    def rows(flat: list[Any]) -> list[list[Any]]:
        out, i = [], 0
        for k in shape:
            out.append(flat[i : i + k])
            i += k
        return out

    return WriterBatch(
        questions, rows(flat_x), rows(flat_r), rows(flat_band), votes, rollouts=len(uniq) * reward.samples
    )


# --------------------------------------------------------------------------------------------
# 2. training pool


@dataclass
class Candidate:
    """One writer output. ``status``: malformed | banned (copies an anchor) | duplicate |
    heldout (an evaluation item) | kept | filtered (failed the confidence filter) | no_label |
    rejected (by the verifier). ``vote_id`` links a labelled candidate to its pool row."""

    origin: dict[str, Any]
    completion: str
    question: str | None
    status: str
    vote_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CandidatePool:
    """A writer's candidates on their way to training.

    ``stats()['oracle_valid']``: the share of labelled questions the world's oracle can answer
    (in the toy and arith worlds: well-formed questions that are valid, solvable problems).
    ``votes`` are the labelled questions (distinct, generation order), each with ``meta`` =
    its origin plus the oracle answer; ``filtered`` applies every filter mode to the same votes
    (the configured one decides, the others are measured); ``kept`` passed the configured
    filter and the verifier; ``correct`` is the oracle's verdict per vote id (None = unknown).
    """

    candidates: list[Candidate]
    votes: list[VoteRecord]
    filtered: dict[str, list[VoteRecord]]
    kept: list[VoteRecord]
    verdicts: dict[str, bool | None] = field(default_factory=dict)
    correct: dict[str, bool | None] = field(default_factory=dict)
    rollouts: int = 0
    has_oracle: bool = False

    def rows(self) -> list[dict[str, Any]]:
        """``pool.jsonl``: one row per labelled question with its vote, whether it was kept, the
        oracle's and the verifier's verdicts."""
        kept = {v.id for v in self.kept}
        return [
            {
                **v.to_dict(),
                "kept": v.id in kept,
                "label_correct": self.correct.get(v.id),
                "verdict": self.verdicts.get(v.id),
            }
            for v in self.votes
        ]

    def accuracy(self, votes: Sequence[VoteRecord]) -> float | None:
        """Oracle agreement of ``votes``' labels (None when the oracle knows none of them)."""
        known = [self.correct[v.id] for v in votes if self.correct.get(v.id) is not None]
        return _rate(sum(bool(c) for c in known), len(known)) if known else None

    def stats(self) -> dict[str, float | int | None]:
        count = {
            s: sum(c.status == s for c in self.candidates) for s in ("malformed", "banned", "duplicate", "heldout")
        }
        n, n_ok = len(self.candidates), len(self.candidates) - count["malformed"]
        out: dict[str, float | int | None] = {
            "generated": n,
            "well_formed": _rate(n_ok, n),
            **count,
            "labelled": len(self.votes),
            "distinct": _rate(len(self.votes) + count["heldout"], n_ok),
            "kept": len(self.kept),
            **{f"kept_{m}": len(v) for m, v in self.filtered.items()},
            "oracle_valid": (
                _rate(sum(v.meta.get("oracle") is not None for v in self.votes), len(self.votes))
                if self.has_oracle
                else None
            ),
            "oracle_acc_labelled": self.accuracy(self.votes),
            "oracle_acc_kept": self.accuracy(self.kept),
            **{f"oracle_acc_{m}": self.accuracy(v) for m, v in self.filtered.items()},
            "rollouts": self.rollouts,
        }
        return out


def _screen(questions: Sequence[str | None], banned: frozenset[str], excluded: frozenset[str]) -> list[str]:
    """Status of each parsed question: malformed, banned, duplicate, heldout or labelled
    (only the first of several equal questions is labelled)."""
    seen: set[str] = set()
    out = []
    for q in questions:
        if q is None:
            out.append("malformed")
            continue
        k = normalize_question(q)
        status = "banned" if k in banned else "duplicate" if k in seen else "heldout" if k in excluded else "labelled"
        if status == "labelled":
            seen.add(k)
        out.append(status)
    return out


def _candidates(
    origins: Sequence[dict[str, Any]],
    texts: Sequence[str],
    parsed: Sequence[str | None],
    status: Sequence[str],
    votes: Sequence[VoteRecord],
    id_prefix: str,
    oracle: OracleFn | None,
) -> list[Candidate]:
    """One candidate per written text; the k-th labelled one and its vote share the id
    ``{id_prefix}{k:05d}``, and the vote records the prompt's origin and the oracle's answer."""
    cands, k = [], 0
    for origin, text, q, s in zip(origins, texts, parsed, status):
        cand = Candidate(dict(origin), text, q, s)
        if s == "labelled":
            v = votes[k]
            v.id = cand.vote_id = f"{id_prefix}{k:05d}"
            v.meta = {**origin, "oracle": None if oracle is None else oracle(v.question)}
            k += 1
        cands.append(cand)
    return cands


def _settle(
    cands: Sequence[Candidate], votes: Sequence[VoteRecord], kept: Sequence[VoteRecord], passed: Sequence[VoteRecord]
) -> None:
    """A labelled candidate's final status: ``kept``, ``rejected`` (passed the filter, refused
    by the label check), ``no_label`` (no majority) or ``filtered``."""
    kept_ids, passed_ids = {v.id for v in kept}, {v.id for v in passed}
    by_id = {v.id: v for v in votes}
    for c in cands:
        if c.status == "labelled":
            v = by_id[c.vote_id]
            c.status = (
                "kept"
                if v.id in kept_ids
                else "rejected"
                if v.id in passed_ids
                else "no_label"
                if v.label is None
                else "filtered"
            )


def propose_questions(
    writer: Sampler,
    prompts: Sequence[str],
    origins: Sequence[dict[str, Any]],
    *,
    prompter: Prompter,
    solver: Sampler,
    voting: Voting,
    grader: AnswerGrader,
    write_params: SamplingParams,
    vote_params: SamplingParams,
    batch_prompts: int,
    id_prefix: str,
    banned: frozenset[str] = frozenset(),
    excluded: frozenset[str] = frozenset(),
    oracle: OracleFn | None = None,
    verifier: LabelVerifier | None = None,
) -> CandidatePool:
    """One question per prompt from ``writer``; ``origins[i]`` records what prompt i asked for.
    ``banned`` / ``excluded`` hold normalised questions (anchors / evaluation items) that must
    not enter the pool. Rollouts: one per prompt plus the answers each labelled question got
    (``voting.samples``; fewer with ``voting.estimator=adaptive``, which stops a question once
    the configured filter's verdict is decided — the other filter modes, measured on the same
    votes, then see the shorter votes)."""
    comps = sample_chunked(writer, prompts, 1, write_params, batch_prompts)
    parsed = [prompter.parse_question(g[0].text) for g in comps]
    status = _screen(parsed, banned, excluded)
    to_label = [q for q, s in zip(parsed, status) if s == "labelled" and q is not None]
    if voting.estimator == "fixed":
        votes = label_questions(solver, prompter, to_label, voting.samples, vote_params, grader, batch_prompts)
    else:
        votes = label_questions_adaptive(solver, prompter, to_label, voting, vote_params, grader, batch_prompts)
    cands = _candidates(origins, [g[0].text for g in comps], parsed, status, votes, id_prefix, oracle)
    filtered = {m: confidence_filter(votes, voting.band, voting.tau, m) for m in FILTER_MODES}  # type: ignore[arg-type]
    passed = filtered[voting.filter]
    check = verifier if verifier is not None else NoVerifier()
    verdict = dict(zip((v.id for v in passed), check.verify(passed)))
    kept = [v for v in passed if not (check.enforce and verdict[v.id] is False)]
    correct = {v.id: (None if oracle is None else label_correct(v, oracle, grader)) for v in votes}
    _settle(cands, votes, kept, passed)
    return CandidatePool(
        cands,
        votes,
        filtered,
        kept,
        verdict,
        correct,
        rollouts=len(prompts) + sum(v.n for v in votes),
        has_oracle=oracle is not None,
    )
