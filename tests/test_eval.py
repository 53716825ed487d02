"""Tests for coevolve.eval: the core loop, benchmark registry, loaders and result tables.

A scripted fake sampler returns known outputs so every metric has a hand-computed expectation.
"""

from __future__ import annotations

from typing import Sequence

import pytest

from coevolve.errors import DataError
from coevolve.eval.core import EvalResult, evaluate_tasks
from coevolve.types import Completion, SamplingParams, Task


class ScriptedSampler:
    """Returns outputs from a table keyed by (prompt, temperature==0); records every call."""

    tokenizer = None

    def __init__(self, greedy: dict[str, str], sampled: dict[str, list[str]] | None = None):
        self.greedy = greedy
        self.sampled = sampled or {}
        self.calls: list[tuple[int, int, SamplingParams]] = []

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((len(prompts), n, params))
        out = []
        for p in prompts:
            if params.temperature == 0:
                texts = [self.greedy[p]] * n
            else:
                texts = self.sampled[p][:n]
            out.append([Completion(text=t, token_ids=[1], prompt_ids=[0]) for t in texts])
        return out


class EchoPrompter:
    def solver(self, question: str) -> str:
        return f"Q:{question}\nA:"


def _exact_grader(gold: str, text: str) -> bool:
    return text.strip() == f"\\boxed{{{gold}}}"


def _extract(text: str) -> str | None:
    return text[7:-1] if text.startswith("\\boxed{") else None


def test_greedy_and_mean_at_k_by_level() -> None:
    tasks = [
        Task("a", "1+1", "2", features={"level": 1}),
        Task("b", "2+2", "4", features={"level": 1}),
        Task("c", "3*3", "9", features={"level": 2}),
    ]
    greedy = {"Q:1+1\nA:": "\\boxed{2}", "Q:2+2\nA:": "\\boxed{5}", "Q:3*3\nA:": "\\boxed{9}"}
    sampled = {
        "Q:1+1\nA:": ["\\boxed{2}"] * 4,
        "Q:2+2\nA:": ["\\boxed{4}", "x", "x", "x"],
        "Q:3*3\nA:": ["\\boxed{9}", "\\boxed{9}", "x", "x"],
    }
    s = ScriptedSampler(greedy, sampled)
    r = evaluate_tasks(s, EchoPrompter(), tasks, samples=4, max_new_tokens=7, seed=3,
                       grader=_exact_grader, extract=_extract)
    assert isinstance(r, EvalResult)
    assert r.n == 3
    assert r.greedy == pytest.approx(2 / 3)
    assert r.sampled == pytest.approx((1 + 0.25 + 0.5) / 3)
    assert r.sampled_any == pytest.approx(1.0)
    assert r.by_group["1"] == {"n": 2, "greedy": 0.5, "sampled": pytest.approx(0.625)}
    assert r.by_group["2"]["greedy"] == 1.0
    # one greedy call and one sampling call for the whole list, with the protocol's params
    assert [(c[0], c[1]) for c in s.calls] == [(3, 1), (3, 4)]
    gp, sp = s.calls[0][2], s.calls[1][2]
    assert gp.temperature == 0 and sp.temperature == 1.0 and sp.seed == 3
    assert gp.max_new_tokens == 7 and sp.top_p == 1.0 and sp.top_k == 0
    rec = r.records[1]
    assert rec["id"] == "b" and rec["extracted"] == "5" and rec["correct"] is False
    assert rec["sampled_correct"] == [True, False, False, False]


def test_greedy_only_and_chunking() -> None:
    tasks = [Task(str(i), str(i), str(i)) for i in range(5)]
    s = ScriptedSampler({f"Q:{i}\nA:": f"\\boxed{{{i}}}" for i in range(5)})
    r = evaluate_tasks(s, EchoPrompter(), tasks, grader=_exact_grader, extract=_extract,
                       batch_size=2)
    assert r.greedy == 1.0 and r.sampled is None and r.by_group == {}
    assert [c[0] for c in s.calls] == [2, 2, 1]


def test_missing_gold_is_data_error() -> None:
    with pytest.raises(DataError, match="'x'"):
        evaluate_tasks(ScriptedSampler({}), EchoPrompter(), [Task("x", "q", None)],
                       grader=_exact_grader, extract=_extract)
