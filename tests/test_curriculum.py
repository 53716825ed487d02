"""Tests for coevolve.curriculum with a fake Sampler (deterministic answers per prompt) and a
fake grader (string equality), so every count can be checked by hand."""

from __future__ import annotations

import doctest
import random
from collections import Counter
from collections.abc import Sequence

import pytest

import coevolve.curriculum as C
from coevolve.curriculum import difficulty, sampling
from coevolve.errors import CoevolveError, ConfigError
from coevolve.schema import Band, Voting, WriterReward
from coevolve.types import Completion, SamplingParams, Stop, Task, Vote


class FakePrompter:
    """Solver prompt ``Q:<q>``; a writer completion ``<question>X</question>`` parses to X."""

    def solver(self, question: str) -> str:
        return f"Q:{question}\nA:"

    def judge(self, question: str, answer: str) -> str:
        return f"Question: {question}\nProposed final answer: {answer}\nIs {answer} the correct final answer? yes or no"

    def stop(self, kind):
        return Stop()

    def parse_question(self, completion: str) -> str | None:
        if completion.count("<question>") != 1 or not completion.endswith("</question>"):
            return None
        return completion[len("<question>") : -len("</question>")].strip() or None


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


def box(a: str) -> str:
    return f"<think>x</think>\\boxed{{{a}}}"


class FakeGrader:
    """String-equality grading and voting with the contract's semantics (None counts in the
    denominator); the answers come from ``coevolve.answers.extract_answer``."""

    def is_equiv(self, gold: str | None, pred: str | None) -> bool:
        return gold is not None and pred is not None and gold == pred

    def grade(self, gold: str, completion: str) -> bool:
        from coevolve.answers import extract_answer

        return self.is_equiv(gold, extract_answer(completion))

    def vote(self, answers: list[str | None]) -> Vote:
        n = len(answers)
        counts = Counter(a for a in answers if a is not None)
        order = [a for a, _ in counts.most_common()]
        sizes = [counts[a] for a in order]
        cluster_of = [-1 if a is None else order.index(a) for a in answers]
        return Vote(
            order[0] if order else None,
            sizes[0] / n if sizes else 0.0,
            sizes[1] / n if len(sizes) > 1 else 0.0,
            n,
            cluster_of,
            sizes,
        )

    def grade_batch(self, golds, completions):
        return [self.grade(g, c) for g, c in zip(golds, completions)]

    def vote_batch(self, groups):
        return [self.vote(list(g)) for g in groups]


G = FakeGrader()


def test_doctests() -> None:
    results = [doctest.testmod(m) for m in (C.buffer, difficulty, C.verify)]
    assert sum(r.attempted for r in results) >= 4 and sum(r.failed for r in results) == 0


def test_estimate_difficulty_batched_counts() -> None:
    script = {f"q{i}": [box("1")] * i + [box("2")] * (4 - i) for i in range(5)}
    tasks = [Task(f"t{i}", f"q{i}", "1", features={"level": i}) for i in range(5)]
    s = FakeSampler(script)
    recs = C.estimate_difficulty(s, FakePrompter(), tasks, 4, SamplingParams(seed=7), G, batch_prompts=2)
    assert [r.correct for r in recs] == [0, 1, 2, 3, 4]
    assert [r.pass_rate for r in recs] == [0, 0.25, 0.5, 0.75, 1.0]
    assert [r.difficulty for r in recs] == [100, 75, 50, 25, 0]
    assert recs[1].answers == ["1", "2", "2", "2"]
    assert recs[3].features == {"level": 3}
    assert s.calls == [(2, 4, 7), (2, 4, 8), (1, 4, 9)]  # one call per chunk, per-chunk seeds
    assert C.PassRecord.from_dict(recs[2].to_dict()) == recs[2]
    assert recs[2].to_task().features == {"level": 2, "difficulty": 50.0, "pass_rate": 0.5}
    with pytest.raises(CoevolveError):
        C.estimate_difficulty(s, FakePrompter(), [Task("x", "q", None)], 4, SamplingParams(), G)


def test_sampler_shape_checked() -> None:
    class Broken(FakeSampler):
        def sample(self, prompts, n, params):
            return super().sample(prompts, n, params)[:-1]

    with pytest.raises(CoevolveError):
        C.estimate_difficulty(Broken({}), FakePrompter(), [Task("a", "q", "1")], 2, SamplingParams(), G)


def _rec(i: int, rate: float, n: int = 10) -> C.PassRecord:
    return C.PassRecord.from_counts(Task(f"t{i}", f"q{i}", "1"), round(rate * n), n)


def test_mine_anchors_inclusive_band() -> None:
    recs = [_rec(i, r) for i, r in enumerate([0.0, 0.3, 0.4, 0.5, 0.8, 0.9, 1.0])]
    assert [r.pass_rate for r in C.mine_anchors(recs, Band())] == [0.4, 0.5, 0.8]
    assert [r.pass_rate for r in C.mine_anchors(recs, Band(low=0.3, high=0.5))] == [0.3, 0.4, 0.5]
    # 12/32 = 0.375 out, 13/32 = 0.40625 in, 26/32 = 0.8125 out
    recs32 = [C.PassRecord.from_counts(Task(str(c), "q", "1"), c, 32) for c in (12, 13, 25, 26)]
    assert [r.correct for r in C.mine_anchors(recs32, Band())] == [13, 25]
    with pytest.raises(ValueError):
        Band(low=0.9, high=0.1)


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
    script = {"a": [box("3")] * 5 + [box("4")] * 2 + ["junk"], "b": ["junk"]}
    s = FakeSampler(script)
    recs = C.label_questions(s, FakePrompter(), ["a", "b"], 8, SamplingParams(), G)
    assert recs[0].label == "3" and recs[0].p1 == 5 / 8 and recs[0].p2 == 2 / 8 and recs[0].sizes == [5, 2]
    assert recs[0].answers.count(None) == 1
    assert recs[1].label is None and recs[1].p1 == 0.0
    assert C.VoteRecord.from_dict(recs[0].to_dict()) == recs[0]
    assert len(s.calls) == 1


def _vr(q: str, label: str | None, p1: float, p2: float) -> C.VoteRecord:
    return C.VoteRecord(q, 10, [], label, p1, p2)


def test_dual_confidence_filter_modes() -> None:
    recs = [
        _vr("lo", "1", 0.2, 0.1),  # below band
        _vr("edge_lo", "1", 0.3, 0.1),  # in band, 0.3 >= 1.6*0.1
        _vr("close", "1", 0.5, 0.4),  # in band, 0.5 < 0.64: relative fails
        _vr("tie", "1", 0.48, 0.3),  # 0.48 == 1.6*0.3: kept (>=)
        _vr("edge_hi", "1", 0.8, 0.2),  # in band
        _vr("hi", "1", 0.9, 0.1),  # above band
        _vr("nolabel", None, 0.0, 0.0),
    ]
    q = lambda rs: [r.question for r in rs]
    band = Band(low=0.3, high=0.8)
    assert q(C.confidence_filter(recs, band)) == ["edge_lo", "tie", "edge_hi"]
    assert q(C.confidence_filter(recs, band, mode="absolute")) == ["edge_lo", "close", "tie", "edge_hi"]
    assert q(C.confidence_filter(recs, band, mode="none")) == ["lo", "edge_lo", "close", "tie", "edge_hi", "hi"]
    with pytest.raises(ConfigError):
        C.confidence_filter(recs, band, mode="both")  # type: ignore[arg-type]


def test_verifiers() -> None:
    recs = [_vr("1+1=", "2", 0.5, 0.1), _vr("2+2=", "5", 0.5, 0.1), _vr("??", "1", 0.5, 0.1), _vr("3+3=", None, 0, 0)]
    oracle = lambda q: str(eval(q[:-1])) if q.endswith("=") else None
    assert C.NoVerifier().verify(recs) == [None] * 4 and not C.NoVerifier().enforce
    ov = C.OracleVerifier(oracle, G)
    assert ov.verify(recs) == [True, False, None, None] and not ov.enforce
    assert isinstance(ov, C.LabelVerifier) and ov.labels == 0  # a measurement reads no label for the run
    checker = C.make_verifier("checker", oracle=oracle, grader=G)
    assert checker.enforce and checker.verify(recs) == [True, False, None, None] and checker.labels == 4
    assert C.make_verifier("oracle", oracle=oracle, grader=G).enforce is False
    with pytest.raises(ConfigError, match="buffer.verifier=checker needs a world with an oracle"):
        C.make_verifier("checker")

    class Judge:
        def __init__(self):
            self.prompts: list[str] = []

        def sample(self, prompts, n, params):
            assert n == 1 and params.temperature == 0.0
            self.prompts += list(prompts)
            replies = {"2": "Yes.", "5": "no", "1": "hmm"}
            return [
                [Completion(replies[p.split("Proposed final answer: ")[1].split("\n")[0]], [], [])] for p in prompts
            ]

    j = Judge()
    jv = C.JudgeVerifier(j, FakePrompter())
    assert jv.verify(recs) == [True, False, None, None] and jv.enforce and jv.rollouts == 3
    assert len(j.prompts) == 3 and "Is 2 the correct final answer" in j.prompts[0]
    assert isinstance(C.make_verifier("judge", judge=j, prompter=FakePrompter()), C.JudgeVerifier)
    with pytest.raises(ConfigError):
        C.make_verifier("oracle")
    with pytest.raises(ConfigError):
        C.make_verifier("gpt")  # type: ignore[arg-type]


def test_dedupe_and_hybrid_buffer() -> None:
    anchors = [_rec(0, 0.5), _rec(1, 0.6)]
    gen = [
        _vr("q0", "9", 0.5, 0.1),
        _vr("New 1", "2", 0.5, 0.1),
        _vr("new  1", "2", 0.6, 0.1),
        _vr("new 2", None, 0.5, 0.1),
        _vr("new 3", "7", 0.7, 0.2),
    ]
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
    assert C.pseudo_label_accuracy(recs, oracle, G) == pytest.approx(1 / 3)
    assert C.pseudo_label_accuracy(recs[3:], oracle, G) is None


def test_band_tolerance() -> None:
    b = Band(low=0.3, high=0.8)
    assert b.contains(0.1 * 3) and b.contains(0.8) and not b.contains(0.29)


def test_chunked_sampling_seed_scheme() -> None:
    s = FakeSampler({})
    sampling.sample_chunked(s, ["a", "b", "c"], 2, SamplingParams(seed=100), batch_prompts=2)
    assert s.calls == [(2, 2, 100), (1, 2, 101)]  # seed + chunk
    s2 = FakeSampler({})
    sampling.sample_chunked(s2, ["a"], 1, SamplingParams(seed=None), batch_prompts=1)
    assert s2.calls == [(1, 1, None)]


def test_score_writer_batch_plateau_and_unique_questions() -> None:
    """Parse -> distinct questions (sorted) -> frozen-solver votes -> plateau reward; a malformed
    completion scores 0 and costs no answers."""
    script = {"easy": [box("1")] * 4, "mid": [box("2")] * 2 + [box("3")] * 2, "hard": [box(str(i)) for i in range(4)]}
    scorer = FakeSampler(script)
    comps = [
        [Completion("<question>mid</question>", [], []), Completion("<question>easy</question>", [], [])],
        [Completion("<question>mid</question>", [], []), Completion("oops", [], [])],
        [Completion("<question>hard</question>", [], []), Completion("<question>easy</question>", [], [])],
    ]
    wb = C.score_writer_batch(
        comps,
        parse=FakePrompter().parse_question,
        scorer=scorer,
        prompter=FakePrompter(),
        reward=WriterReward(samples=4),
        grader=G,
        params=SamplingParams(seed=5),
        batch_prompts=64,
        rep_tokenizer="char",
    )
    assert scorer.calls == [(3, 4, 5)]  # one call over the 3 distinct questions
    assert sorted(wb.votes) == ["easy", "hard", "mid"] and wb.rollouts == 12
    assert wb.x == [[0.5, 1.0], [0.5, None], [0.25, 1.0]]
    assert wb.rewards == [[1.0, 0.0], [1.0, 0.0], [pytest.approx((0.25 / 0.4) ** 2), 0.0]]
    assert wb.in_band == [[True, False], [True, False], [False, False]]
    m = wb.metrics()
    assert m["well_formed"] == pytest.approx(5 / 6) and m["distinct"] == pytest.approx(3 / 5)
    rz = C.score_writer_batch(
        comps,
        parse=FakePrompter().parse_question,
        scorer=FakeSampler(script),
        prompter=FakePrompter(),
        reward=WriterReward(kind="rzero", samples=4),
        grader=G,
        params=SamplingParams(seed=5),
        batch_prompts=64,
        rep_tokenizer="char",
    )
    assert rz.rewards[1][1] < -1.0  # R-Zero: -1 minus the repetition penalty for a format failure


def test_score_writer_batch_uses_the_configured_band_and_decay() -> None:
    """A non-default band (0.3-0.7) and a = 3 reach the reward: p1 = 0.75 is above this band
    (inside the default one), p1 = 0.25 decays with a = 3 (the default would give (0.25/0.4)^2)."""
    script = {
        "x25": [box("1")] + [box(str(i)) for i in range(2, 5)],
        "x50": [box("1")] * 2 + [box("2"), box("3")],
        "x75": [box("1")] * 3 + [box("2")],
    }
    comps = [[Completion(f"<question>{q}</question>", [], []) for q in ("x25", "x50", "x75")]]
    reward = WriterReward(samples=4, band=Band(low=0.3, high=0.7), a=3.0)
    wb = C.score_writer_batch(
        comps,
        parse=FakePrompter().parse_question,
        scorer=FakeSampler(script),
        prompter=FakePrompter(),
        reward=reward,
        grader=G,
        params=SamplingParams(seed=0),
        batch_prompts=64,
        rep_tokenizer="char",
    )
    assert wb.x == [[0.25, 0.5, 0.75]]
    assert wb.rewards[0] == pytest.approx([(0.25 / 0.3) ** 3, 1.0, (0.25 / 0.3) ** 3])
    assert wb.in_band == [[False, True, False]]


def test_propose_questions_uses_the_configured_tau() -> None:
    """The dual filter's τ comes from the voting config, in both directions around the default
    1.6: 'close' (p1 = 3/8, p2 = 2/8) passes τ = 1.2 only, 'half' (p1 = 4/8, p2 = 2/8) fails
    τ = 2.5 only."""
    script = {
        "w0": ["<question>close</question>"],
        "w1": ["<question>half</question>"],
        "close": [box("1")] * 3 + [box("2")] * 2 + [box(str(i)) for i in (3, 4, 5)],
        "half": [box("1")] * 4 + [box("2")] * 2 + [box("3"), box("4")],
    }

    def kept(tau: float) -> list[str]:
        voting = Voting(samples=8, filter="dual", band=Band(low=0.3, high=0.8), tau=tau)
        pool = C.propose_questions(
            FakeSampler(script),
            ["w0", "w1"],
            [{}, {}],
            prompter=FakePrompter(),
            solver=FakeSampler(script),
            voting=voting,
            grader=G,
            write_params=SamplingParams(seed=1),
            vote_params=SamplingParams(seed=2),
            batch_prompts=64,
            id_prefix="g-",
        )
        assert [(v.p1, v.p2) for v in pool.votes] == [(3 / 8, 2 / 8), (4 / 8, 2 / 8)]
        return [v.question for v in pool.kept]

    assert Voting().tau == 1.6 and kept(1.6) == ["half"]
    assert kept(1.2) == ["close", "half"]
    assert kept(2.5) == []


def test_propose_questions_screens_votes_filters_and_checks_labels() -> None:
    """generate -> parse -> drop anchor copies / evaluation items / repeats -> vote -> filter ->
    verifier; oracle verdicts on every label."""
    script = {
        "w0": ["<question>new1</question>"],
        "w1": ["<question>anchor</question>"],
        "w2": ["<question>new1</question>"],
        "w3": ["<question>test</question>"],
        "w4": ["garbage"],
        "w5": ["<question>new2</question>"],
        "new1": [box("5")] * 3 + [box("6")],
        "new2": [box("7")] * 2 + [box("8")] * 2,
    }
    writer = solver = FakeSampler(script)
    oracle = {"new1": "5", "new2": "8"}.get
    pool = C.propose_questions(
        writer,
        [f"w{i}" for i in range(6)],
        [{"i": i} for i in range(6)],
        prompter=FakePrompter(),
        solver=solver,
        voting=Voting(samples=4, filter="absolute", band=Band(low=0.4, high=0.8)),
        grader=G,
        write_params=SamplingParams(seed=1),
        vote_params=SamplingParams(seed=2),
        batch_prompts=64,
        id_prefix="g-",
        banned=frozenset({"anchor"}),
        excluded=frozenset({"test"}),
        oracle=oracle,
    )
    assert [c.status for c in pool.candidates] == ["kept", "banned", "duplicate", "heldout", "malformed", "kept"]
    assert [v.id for v in pool.votes] == ["g-00000", "g-00001"] and pool.votes[0].meta == {"i": 0, "oracle": "5"}
    assert [v.question for v in pool.filtered["none"]] == ["new1", "new2"]
    assert pool.correct == {"g-00000": True, "g-00001": False}
    st = pool.stats()
    assert (st["generated"], st["labelled"], st["kept"], st["banned"], st["duplicate"], st["heldout"]) == (
        6,
        2,
        2,
        1,
        1,
        1,
    )
    assert st["oracle_acc_kept"] == 0.5 and st["rollouts"] == 6 + 2 * 4
    rows = pool.rows()
    assert rows[0]["kept"] and rows[0]["label_correct"] is True and rows[1]["label_correct"] is False

    class Reject:
        enforce, rollouts = True, 0

        def verify(self, records):
            return [r.label != "7" for r in records]

    pool2 = C.propose_questions(
        FakeSampler(script),
        [f"w{i}" for i in range(6)],
        [{}] * 6,
        prompter=FakePrompter(),
        solver=FakeSampler(script),
        voting=Voting(samples=4, filter="dual", band=Band(low=0.3, high=0.8), tau=1.6),
        grader=G,
        write_params=SamplingParams(),
        vote_params=SamplingParams(),
        batch_prompts=2,
        id_prefix="h-",
        verifier=Reject(),
    )
    # new2 (p1 = p2 = 0.5) fails the relative filter; new1 passes and the verifier accepts it
    assert [c.status for c in pool2.candidates if c.question in ("new1", "new2")] == ["kept", "duplicate", "filtered"]

    class RejectFive(Reject):
        def verify(self, records):
            return [r.label != "5" for r in records]

    def statuses(verifier) -> tuple[list[str], list[str]]:
        pool = C.propose_questions(
            FakeSampler(script),
            ["w0", "w5"],
            [{}, {}],
            prompter=FakePrompter(),
            solver=FakeSampler(script),
            voting=Voting(samples=4, filter="absolute", band=Band(low=0.4, high=0.8)),
            grader=G,
            write_params=SamplingParams(),
            vote_params=SamplingParams(),
            batch_prompts=2,
            id_prefix="v-",
            verifier=verifier,
        )
        return [c.status for c in pool.candidates], [v.question for v in pool.kept]

    # an enforcing verifier's "no" takes a question that passed the filter out of the pool ...
    assert statuses(RejectFive()) == (["rejected", "kept"], ["new2"])
    # ... a measuring one only records its verdict
    measuring = RejectFive()
    measuring.enforce = False
    assert statuses(measuring) == (["kept", "kept"], ["new1", "new2"])
