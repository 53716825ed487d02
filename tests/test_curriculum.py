"""Tests for coevolve.curriculum with a fake Sampler (deterministic answers per prompt)."""

from __future__ import annotations

import doctest
import random
from collections import Counter
from typing import Sequence

import pytest

import coevolve.curriculum as C
from coevolve.errors import CoevolveError, ConfigError
from coevolve.types import Completion, SamplingParams, Task, Vote


class FakePrompter:
    def solver(self, question: str) -> str:
        return f"Q:{question}\nA:"


class FakeSampler:
    """Answers prompt ``Q:<q>`` with the scripted answers for q (cycled); records every call."""

    def __init__(self, script: dict[str, list[str]]):
        self.script = script
        self.calls: list[tuple[int, int, int | None]] = []

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((len(prompts), n, params.seed))
        out = []
        for p in prompts:
            q = p[2:].split("\n")[0] if p.startswith("Q:") else p
            answers = self.script.get(q, ["?"])
            out.append([Completion(text=answers[i % len(answers)], token_ids=[], prompt_ids=[]) for i in range(n)])
        return out


def extract(text: str) -> str | None:
    return text[len("box:"):] if text.startswith("box:") else None


def grade(gold: str, text: str) -> bool:
    return extract(text) == gold


def simple_vote(answers: list[str | None]) -> Vote:
    """String-equality vote with the contract's semantics (None counts in the denominator)."""
    n = len(answers)
    counts = Counter(a for a in answers if a is not None)
    order = [a for a, _ in counts.most_common()]
    sizes = [counts[a] for a in order]
    cluster_of = [-1 if a is None else order.index(a) for a in answers]
    return Vote(order[0] if order else None, sizes[0] / n if sizes else 0.0,
                sizes[1] / n if len(sizes) > 1 else 0.0, n, cluster_of, sizes)


def test_doctests() -> None:
    res = doctest.testmod(C)
    assert res.attempted >= 4 and res.failed == 0


def test_estimate_difficulty_batched_counts() -> None:
    script = {f"q{i}": ["box:1"] * i + ["box:2"] * (4 - i) for i in range(5)}
    tasks = [Task(f"t{i}", f"q{i}", "1", features={"level": i}) for i in range(5)]
    s = FakeSampler(script)
    recs = C.estimate_difficulty(s, FakePrompter(), tasks, 4, SamplingParams(seed=7), grade, batch_prompts=2,
                                 extract_fn=extract)
    assert [r.correct for r in recs] == [0, 1, 2, 3, 4]
    assert [r.pass_rate for r in recs] == [0, 0.25, 0.5, 0.75, 1.0]
    assert [r.difficulty for r in recs] == [100, 75, 50, 25, 0]
    assert recs[1].answers == ["1", "2", "2", "2"]
    assert recs[3].features == {"level": 3}
    assert s.calls == [(2, 4, 7), (2, 4, 8), (1, 4, 9)]  # one call per chunk, per-chunk seeds
    assert C.PassRecord.from_dict(recs[2].to_dict()) == recs[2]
    with pytest.raises(CoevolveError):
        C.estimate_difficulty(s, FakePrompter(), [Task("x", "q", None)], 4, SamplingParams(), grade, extract_fn=extract)


def test_sampler_shape_checked() -> None:
    class Broken(FakeSampler):
        def sample(self, prompts, n, params):
            return super().sample(prompts, n, params)[:-1]

    with pytest.raises(CoevolveError):
        C.estimate_difficulty(Broken({}), FakePrompter(), [Task("a", "q", "1")], 2, SamplingParams(), grade,
                              extract_fn=extract)


def _rec(i: int, rate: float, n: int = 10) -> C.PassRecord:
    return C.PassRecord.from_counts(Task(f"t{i}", f"q{i}", "1"), round(rate * n), n)


def test_mine_anchors_inclusive_band() -> None:
    recs = [_rec(i, r) for i, r in enumerate([0.0, 0.3, 0.4, 0.5, 0.8, 0.9, 1.0])]
    assert [r.pass_rate for r in C.mine_anchors(recs)] == [0.4, 0.5, 0.8]
    assert [r.pass_rate for r in C.mine_anchors(recs, 0.3, 0.5)] == [0.3, 0.4, 0.5]
    # 12/32 = 0.375 out, 13/32 = 0.40625 in, 26/32 = 0.8125 out
    recs32 = [C.PassRecord.from_counts(Task(str(c), "q", "1"), c, 32) for c in (12, 13, 25, 26)]
    assert [r.correct for r in C.mine_anchors(recs32)] == [13, 25]
    with pytest.raises(ConfigError):
        C.mine_anchors(recs, 0.9, 0.1)


def test_random_anchors_seeded() -> None:
    recs = [_rec(i, 0.1 * (i % 10)) for i in range(30)]
    a = C.random_anchors(recs, 5, random.Random(3))
    b = C.random_anchors(recs, 5, random.Random(3))
    assert [r.task_id for r in a] == [r.task_id for r in b] and len({r.task_id for r in a}) == 5
    assert len(C.random_anchors(recs, 100, random.Random(0))) == 30


def test_histogram_bins() -> None:
    h = C.pass_rate_histogram([0.0, 0.0, 1e-9, 0.19, 0.2, 0.39, 0.4, 0.6, 0.79, 0.8, 0.999, 1.0])
    assert list(h) == ["=0", "(0,0.2)", "[0.2,0.4)", "[0.4,0.6)", "[0.6,0.8)", "[0.8,1)", "=1"]
    assert list(h.values()) == [2, 2, 2, 1, 2, 2, 1]
    assert sum(C.pass_rate_histogram([]).values()) == 0
    h2 = C.pass_rate_histogram([0.0, 0.5, 1.0], edges=(0, 0.5, 1))
    assert h2 == {"=0": 1, "(0,0.5)": 0, "[0.5,1)": 1, "=1": 1}
    with pytest.raises(CoevolveError):
        C.pass_rate_histogram([1.5])
    with pytest.raises(ConfigError):
        C.pass_rate_histogram([0.5], edges=(0, 0.5, 0.5, 1))


def test_label_questions_votes() -> None:
    script = {"a": ["box:3"] * 5 + ["box:4"] * 2 + ["junk"], "b": ["junk"]}
    s = FakeSampler(script)
    recs = C.label_questions(s, FakePrompter(), ["a", "b"], 8, SamplingParams(), vote_fn=simple_vote,
                             extract_fn=extract)
    assert recs[0].label == "3" and recs[0].p1 == 5 / 8 and recs[0].p2 == 2 / 8 and recs[0].sizes == [5, 2]
    assert recs[0].answers.count(None) == 1
    assert recs[1].label is None and recs[1].p1 == 0.0
    assert C.VoteRecord.from_dict(recs[0].to_dict()) == recs[0]
    assert len(s.calls) == 1


def _vr(q: str, label: str | None, p1: float, p2: float) -> C.VoteRecord:
    return C.VoteRecord(q, 10, [], label, p1, p2)


def test_dual_confidence_filter_modes() -> None:
    recs = [
        _vr("lo", "1", 0.2, 0.1),       # below band
        _vr("edge_lo", "1", 0.3, 0.1),  # in band, 0.3 >= 1.6*0.1
        _vr("close", "1", 0.5, 0.4),    # in band, 0.5 < 0.64: relative fails
        _vr("tie", "1", 0.48, 0.3),     # 0.48 == 1.6*0.3: kept (>=)
        _vr("edge_hi", "1", 0.8, 0.2),  # in band
        _vr("hi", "1", 0.9, 0.1),       # above band
        _vr("nolabel", None, 0.0, 0.0),
    ]
    q = lambda rs: [r.question for r in rs]
    assert q(C.dual_confidence_filter(recs)) == ["edge_lo", "tie", "edge_hi"]
    assert q(C.dual_confidence_filter(recs, mode="absolute")) == ["edge_lo", "close", "tie", "edge_hi"]
    assert q(C.dual_confidence_filter(recs, mode="none")) == ["lo", "edge_lo", "close", "tie", "edge_hi", "hi"]
    with pytest.raises(ConfigError):
        C.dual_confidence_filter(recs, mode="both")  # type: ignore[arg-type]


def test_verifiers() -> None:
    recs = [_vr("1+1=", "2", 0.5, 0.1), _vr("2+2=", "5", 0.5, 0.1), _vr("??", "1", 0.5, 0.1), _vr("3+3=", None, 0, 0)]
    oracle = lambda q: str(eval(q[:-1])) if q.endswith("=") else None
    eq = lambda a, b: a == b
    assert C.NoVerifier().verify(recs) == [None] * 4 and not C.NoVerifier().enforce
    ov = C.OracleVerifier(oracle, eq)
    assert ov.verify(recs) == [True, False, None, None] and not ov.enforce
    assert isinstance(ov, C.LabelVerifier)

    class Judge:
        def __init__(self):
            self.prompts: list[str] = []

        def sample(self, prompts, n, params):
            assert n == 1 and params.temperature == 0.0
            self.prompts += list(prompts)
            replies = {"2": "Yes.", "5": "no", "1": "hmm"}
            return [[Completion(replies[p.split("Proposed final answer: ")[1].split("\n")[0]], [], [])] for p in prompts]

    j = Judge()
    jv = C.JudgeVerifier(j)
    assert jv.verify(recs) == [True, False, None, None] and jv.enforce
    assert len(j.prompts) == 3 and "Is 2 the correct final answer" in j.prompts[0]
    with pytest.raises(ConfigError):
        C.JudgeVerifier(j, "no placeholders")
    assert isinstance(C.make_verifier("judge", sampler=j), C.JudgeVerifier)
    with pytest.raises(ConfigError):
        C.make_verifier("oracle")
    with pytest.raises(ConfigError):
        C.make_verifier("gpt")  # type: ignore[arg-type]


def test_dedupe_and_hybrid_buffer() -> None:
    anchors = [_rec(0, 0.5), _rec(1, 0.6)]
    gen = [_vr("q0", "9", 0.5, 0.1), _vr("New 1", "2", 0.5, 0.1), _vr("new  1", "2", 0.6, 0.1),
           _vr("new 2", None, 0.5, 0.1), _vr("new 3", "7", 0.7, 0.2)]
    assert C.dedupe(["a b", "A  B", "c"], against=["C"]) == ["a b"]
    buf = C.build_hybrid_buffer(anchors, gen, round_idx=2)
    assert [t.question for t in buf] == ["q0", "q1", "New 1", "new 3"]
    assert [t.features["origin"] for t in buf] == ["real", "real", "generated", "generated"]
    assert [t.answer for t in buf] == ["1", "1", "2", "7"]
    assert buf[2].id == "gen-r02-00000" and buf[2].features["p1"] == 0.5
    assert len({t.id for t in buf}) == len(buf)


def test_pseudo_label_accuracy() -> None:
    oracle = lambda q: {"a": "1", "b": "2", "c": "3"}.get(q)
    recs = [_vr("a", "1", 1, 0), _vr("b", "3", 1, 0), _vr("c", None, 0, 0), _vr("z", "1", 1, 0)]
    assert C.pseudo_label_accuracy(recs, oracle, lambda a, b: a == b) == pytest.approx(1 / 3)
    assert C.pseudo_label_accuracy(recs[3:], oracle, lambda a, b: a == b) is None


def test_in_band() -> None:
    assert C.in_band(0.1 * 3, 0.3, 0.8) and C.in_band(0.8, 0.3, 0.8) and not C.in_band(0.29, 0.3, 0.8)
