"""A second, independent check of pseudo-labels (D²Evo step 3). The paper checks every buffer
label with a strong external LLM (GPT-5.2) as part of its pipeline; offline no such model can be
called, so the default is no check (``NoVerifier``), a deviation forced by the setting. A judge
model (``JudgeVerifier``) or a symbolic checker (a world's oracle: ``checker`` drops wrong labels,
``oracle`` only measures them) stands in for it.

Verifiers return per record True (confirmed), False (rejected) or None (unknown); ``enforce``
says whether the recipe drops rejected records (False = measure only).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from coevolve.curriculum.sampling import sample_chunked
from coevolve.curriculum.voting import OracleFn, VoteRecord, label_correct
from coevolve.errors import ConfigError
from coevolve.prompts import Prompter
from coevolve.types import AnswerGrader, Sampler, SamplingParams


@runtime_checkable
class LabelVerifier(Protocol):
    enforce: bool
    rollouts: int  # model calls made so far (0 for checks that sample nothing)
    labels: int  # gold answers read to decide (a perfect checker's; 0 for a model or a measurement)

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]: ...


class NoVerifier:
    """No check (the offline default, a deviation: the paper's GPT-5.2 check cannot be called):
    every label is 'unknown' and nothing is dropped."""

    enforce = False
    rollouts = 0
    labels = 0

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]:
        return [None] * len(records)


class OracleVerifier:
    """Compares pseudo-labels with the world's exact answer (worlds that know the truth).

    ``verifier=oracle`` is measure-only (``enforce=False``): it reports how often a perfect
    checker would disagree and drops nothing. ``verifier=checker`` enforces: a perfect stand-in
    for the paper's GPT-5.2 check that drops every wrong label, which reads a gold answer per
    checked label (``checked``, counted as labels by the recipe)."""

    rollouts = 0

    def __init__(self, oracle: OracleFn, grader: AnswerGrader, enforce: bool = False):
        self.oracle = oracle
        self.grader = grader
        self.enforce = enforce
        self.checked = 0

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]:
        self.checked += len(records)
        return [label_correct(r, self.oracle, self.grader) for r in records]

    @property
    def labels(self) -> int:
        return self.checked if self.enforce else 0


def parse_yes_no(text: str) -> bool | None:
    """First yes/no word in the reply; anything else is unknown.

    >>> parse_yes_no(" Yes, it is."), parse_yes_no("no"), parse_yes_no("maybe"), parse_yes_no("yes or no")
    (True, False, None, None)
    """
    words = re.findall(r"[a-z]+", text.lower())
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes == has_no:
        return None
    return has_yes


class JudgeVerifier:
    """Asks a model (a stronger one, or the solver itself) whether the pseudo-label is the
    correct final answer, with the world's judge prompt; greedy, batched. Garbage -> None."""

    enforce = True
    labels = 0

    def __init__(self, sampler: Sampler, prompter: Prompter, max_new_tokens: int = 8, batch_prompts: int = 64):
        self.sampler = sampler
        self.prompter = prompter
        self.max_new_tokens = max_new_tokens
        self.batch_prompts = batch_prompts
        self.rollouts = 0

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]:
        idx = [i for i, r in enumerate(records) if r.label is not None]
        prompts = [self.prompter.judge(records[i].question, str(records[i].label)) for i in idx]
        out: list[bool | None] = [None] * len(records)
        if prompts:
            params = SamplingParams(
                temperature=0.0, max_new_tokens=self.max_new_tokens, stop=self.prompter.stop("answer")
            )
            groups = sample_chunked(self.sampler, prompts, 1, params, self.batch_prompts)
            self.rollouts += len(groups)
            for i, g in zip(idx, groups):
                out[i] = parse_yes_no(g[0].text)
        return out


def make_verifier(
    kind: Literal["none", "oracle", "checker", "judge"],
    *,
    oracle: OracleFn | None = None,
    grader: AnswerGrader | None = None,
    judge: Sampler | None = None,
    prompter: Prompter | None = None,
    max_new_tokens: int = 8,
) -> LabelVerifier:
    """Config value -> verifier, with a clear error when its dependency is missing."""
    if kind == "none":
        return NoVerifier()
    if kind in ("oracle", "checker"):
        if oracle is None or grader is None:
            raise ConfigError(f"buffer.verifier={kind} needs a world with an oracle (the toy, arith or skill world)")
        return OracleVerifier(oracle, grader, enforce=kind == "checker")
    if kind == "judge":
        if judge is None or prompter is None:
            raise ConfigError("buffer.verifier=judge needs a judge sampler and its prompter")
        return JudgeVerifier(judge, prompter, max_new_tokens)
    raise ConfigError(f"label verifier must be 'none', 'oracle', 'checker' or 'judge', got {kind!r}")
