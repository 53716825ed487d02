"""A user's own reward: ``reward.function`` names a Python function that scores completions
against answers, in TRL's ``reward_funcs`` shape, and it takes the math grader's place everywhere
a run decides "right or wrong": the solver's GRPO reward, the votes that make pseudo-labels, the
pass rates and every evaluation.

Two spellings (the second is verl's ``custom_reward_function.path`` + ``name``):

* ``pkg.module:fn`` -- an importable module;
* ``path/to/file.py:fn`` -- a Python file (relative to the working folder).

The function is called with keywords, ``fn(completions=[str, ...], answers=[str, ...])``, and
returns one number per completion (``def fn(completions, **kwargs)`` works: the answers are then
``kwargs["answers"]``). Its value is the solver's whole reward (TRL's meaning: no format term is
added); a score of at least ``CORRECT_AT`` counts as correct where a verdict is needed (accuracy,
the DiagEvo match reward, votes, evaluation). A vote clusters two extracted answers when the
function, given one as the completion (``\boxed{a}``, as the prompts ask answers to be stated)
and the other as the answer, scores it correct (either way).

"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coevolve.answers import make_grader
from coevolve.answers.grader import GraderStats
from coevolve.errors import ConfigError, clip
from coevolve.types import Vote

CORRECT_AT = 0.5
"""A score at or above this counts as correct (ours: a 0/1 or a -1/+1 reward reads as meant)."""

FIELD = "reward.function"


def load_function(spec: str) -> Callable[..., Any]:
    """The function ``spec`` names (``pkg.module:fn`` or ``path/to/file.py:fn``), or a one-line
    ``ConfigError`` naming ``reward.function`` and what is wrong."""
    where = f"{FIELD}={clip(spec, 240)}"
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise ConfigError(f"{where}: expected 'pkg.module:function' or 'path/to/file.py:function'")
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser()
            if not path.is_file():
                raise ConfigError(f"{where}: no file {target}")
            mod_name = f"coevolve_reward_{abs(hash(str(path.resolve())))}"
            module = sys.modules.get(mod_name)
            if module is None:
                loader = importlib.util.spec_from_file_location(mod_name, path)
                assert loader is not None and loader.loader is not None
                module = importlib.util.module_from_spec(loader)
                loader.loader.exec_module(module)
                sys.modules[mod_name] = module
        else:
            module = importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as e:  # the user's module: any import-time failure is theirs to see in one line
        raise ConfigError(f"{where}: cannot import {target} ({type(e).__name__}: {e})") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise ConfigError(f"{where}: {target} has no {name!r}")
    if not callable(fn):
        raise ConfigError(f"{where}: {target}.{name} is a {type(fn).__name__}, not a function")
    return fn  # type: ignore[no-any-return]


def call_scores(fn: Callable[..., Any], spec: str, completions: Sequence[str], answers: Sequence[str]) -> list[float]:
    """``fn(completions=..., answers=...)`` checked: one finite number per completion."""
    where = f"{FIELD}={clip(spec, 240)}"
    try:
        out = fn(completions=list(completions), answers=list(answers))
    except Exception as e:
        raise ConfigError(f"{where} raised {type(e).__name__}: {clip(str(e), 200)}") from e
    try:
        values = [float(v) for v in out]
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must return a list of numbers, one per completion; got {clip(repr(out))}") from None
    if len(values) != len(completions):
        raise ConfigError(f"{where} returned {len(values)} scores for {len(completions)} completions")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ConfigError(f"{where} returned a non-finite score ({bad[0]})")
    return values


def check_function(spec: str) -> None:
    """Preflight: the function loads and answers one probe (``\\boxed{1}`` against ``1``) with one
    number, before a run folder exists."""
    call_scores(load_function(spec), spec, ["\\boxed{1}"], ["1"])


class FunctionGrader:
    """``AnswerGrader`` over a user's reward function (module docstring); ``scores`` gives the
    function's values themselves (the solver reward)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.fn = load_function(spec)
        self.stats = GraderStats()

    def scores(self, golds: Sequence[str], completions: Sequence[str]) -> list[float]:
        self.stats.calls += len(completions)
        return call_scores(self.fn, self.spec, completions, golds) if completions else []

    def grade_batch(self, golds: Sequence[str], completions: Sequence[str]) -> list[bool]:
        return [s >= CORRECT_AT for s in self.scores(golds, completions)]

    def grade(self, gold: str, completion: str) -> bool:
        return self.grade_batch([gold], [completion])[0]

    def is_equiv(self, gold: str | None, pred: str | None) -> bool:
        if gold is None or pred is None or not gold.strip() or not pred.strip():
            return False
        return self.grade(gold, f"\\boxed{{{pred}}}")  # an extracted answer, shown as a completion states it

    def vote(self, answers: list[str | None]) -> Vote:
        """Clusters in first-seen order (an answer joins the first whose representative it equals,
        either way); the largest cluster's first answer is the label, ties to the first-seen."""
        reps: list[str] = []
        members: list[list[int]] = []
        raw_of = [-1] * len(answers)
        for i, ans in enumerate(answers):
            if ans is None or not ans.strip():
                continue
            cid = next((k for k, r in enumerate(reps) if self.is_equiv(r, ans) or self.is_equiv(ans, r)), None)
            if cid is None:
                cid = len(reps)
                reps.append(ans)
                members.append([])
            members[cid].append(i)
            raw_of[i] = cid
        n = len(answers)
        order = sorted(range(len(reps)), key=lambda k: (-len(members[k]), k))
        rank = {k: r for r, k in enumerate(order)}
        sizes = [len(members[k]) for k in order]
        cluster_of = [rank[c] if c >= 0 else -1 for c in raw_of]
        if not sizes:
            return Vote(label=None, p1=0.0, p2=0.0, n=n, cluster_of=cluster_of, sizes=[])
        p2 = sizes[1] / n if len(sizes) > 1 else 0.0
        return Vote(label=reps[order[0]].strip(), p1=sizes[0] / n, p2=p2, n=n, cluster_of=cluster_of, sizes=sizes)

    def vote_batch(self, groups: Sequence[list[str | None]]) -> list[Vote]:
        return [self.vote(list(g)) for g in groups]

    def close(self) -> None:
        """Nothing to end (no worker process); a grader's context-manager shape."""

    def __enter__(self) -> FunctionGrader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_grader(cfg: Any) -> Any:
    """The run's grader: the user's ``reward.function`` when set, else the math grader
    (``make_grader``: one math-verify worker or a pool); a context manager either way."""
    if cfg.reward.function:
        return FunctionGrader(cfg.reward.function)

    return make_grader(cfg.run.grader_timeout, cfg.run.grader_workers)


__all__ = ["CORRECT_AT", "FunctionGrader", "call_scores", "check_function", "load_function", "run_grader"]
