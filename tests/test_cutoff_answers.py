"""A completion cut off by ``max_new_tokens`` is a non-answer unless its box closed before the
cut, and no vote, pass rate or filter counts a non-answer as an answer (a fake sampler returns
cut-off completions; the grader is the real one)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

import coevolve.curriculum as C
from coevolve.answers import Grader
from coevolve.curriculum import difficulty
from coevolve.curriculum.sampling import answer_text, completion_answer
from coevolve.schema import Band
from coevolve.types import Completion, SamplingParams, Stop, Task

# a derivation cut mid-way: the free-text reading would take its last number, "33"
CUT = "7 × 8 = 56. 56 × 6 = 33"
CUT_BOXED = "7 × 8 = 56. 56 × 6 = 336. The answer is \\boxed{336}. Then"
DONE = "7 × 8 = 56. 56 × 6 = 336. The answer is \\boxed{336}."


class Prompter:
    def solver(self, question: str) -> str:
        return f"Q:{question}"

    def stop(self, kind):
        return Stop()


class CutSampler:
    """Answers each prompt with the scripted (text, finish_reason) pairs, cycled."""

    def __init__(self, script: dict[str, list[tuple[str, str]]]):
        self.script = script

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        out = []
        for p in prompts:
            s = self.script[p[2:]]
            out.append([Completion(s[i % len(s)][0], [], [], finish_reason=s[i % len(s)][1]) for i in range(n)])  # type: ignore[arg-type]
        return out


def test_completion_answer_reads_a_cut_off_completion_only_when_its_box_closed() -> None:
    assert completion_answer(Completion(CUT, [], [], finish_reason="stop")) == "33"
    assert completion_answer(Completion(CUT, [], [], finish_reason="length")) is None
    assert answer_text(Completion(CUT, [], [], finish_reason="length")) == ""
    assert completion_answer(Completion(CUT_BOXED, [], [], finish_reason="length")) == "336"


def test_cut_off_answers_cast_no_vote_and_a_non_answer_majority_keeps_no_question() -> None:
    g = Grader()
    script = {
        # 5 of 8 cut off without a box: the majority said nothing; the 3 boxed answers agree
        "q1": [(CUT, "length")] * 5 + [(DONE, "stop")] * 3,
        # 2 cut off, one of them after its box closed: 7 answers 336, one non-answer
        "q2": [(CUT, "length")] + [(CUT_BOXED, "length")] + [(DONE, "stop")] * 6,
    }
    recs = C.label_questions(CutSampler(script), Prompter(), ["q1", "q2"], 8, SamplingParams(seed=0), g)
    r1, r2 = recs
    assert r1.answers.count(None) == 5 and "33" not in r1.answers
    assert r1.label is None and r1.p1 == pytest.approx(3 / 8)
    assert r2.label == "336" and r2.p1 == pytest.approx(7 / 8)
    kept = C.confidence_filter(recs, Band(low=0.0, high=1.0), tau=1.0, mode="dual")
    assert [r.question for r in kept] == ["q2"]
    assert C.confidence_filter(recs, Band(low=0.0, high=1.0), mode="none") == [r2]


def test_a_cut_off_derivation_does_not_pass_an_anchor() -> None:
    # gold 33: the cut-off text's last number equals it, but the completion stated no answer
    script = {"a": [(CUT, "length")] * 3 + [("So the answer is \\boxed{33}.", "stop")]}
    t = Task(id="a", question="a", answer="33")
    (rec,) = difficulty.estimate_difficulty(CutSampler(script), Prompter(), [t], 4, SamplingParams(seed=0), Grader())
    assert rec.pass_rate == pytest.approx(1 / 4)


def test_cut_off_share_per_phase_in_metrics_summary_report_and_a_warning(tmp_path) -> None:
    from coevolve.lab.report import render_markdown
    from coevolve.lab.run_view import load_run
    from coevolve.recipes.setup import BUDGET_FIELDS
    from coevolve.recipes.summary import write_summary
    from coevolve.run import Phase, PhaseResult, Run
    from coevolve.run.compute import Compute, MeteredSampler, cut_off_warning

    said: list[str] = []
    run = Run.create(tmp_path / "run", "recipe: grpo\n", "grpo", say=said.append)
    run.budget_fields = BUDGET_FIELDS
    # solver: 1 of 20 cut off (5 %, not past the line); eval: 3 of 20 (15 %)
    script = {"s": [(CUT, "length")] + [(DONE, "stop")] * 19, "e": [(CUT, "length")] * 3 + [(DONE, "stop")] * 17}

    def phase(q: str):
        def fn(ctx):
            MeteredSampler(CutSampler(script), run.meter).sample([f"Q:{q}"], 20, SamplingParams())
            return PhaseResult(rollouts=20)

        return fn

    run.phase(Phase("solver", 1), phase("s"))
    run.phase(Phase("eval", 1), phase("e"))
    run.metrics.flush()
    rows = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    shares = {k: v for r in rows for k, v in r.items() if k.endswith("/cut_off_share")}
    assert shares == {"phase/solver/cut_off_share": 0.05, "phase/eval/cut_off_share": 0.15}
    warnings = [s for s in said if s.startswith("[warning]")]
    assert warnings == [
        "[warning] 01/eval: 15.0% of 20 completions stopped at the token budget "
        "(no answer unless their answer closed first): raise eval.max_new_tokens"
    ]
    summary = write_summary(run)
    assert summary["cut_off"] == {"01/solver": 0.05, "01/eval": 0.15}
    md = render_markdown(load_run(run.path), [])
    assert "## Cut off by the token budget" in md and "| 01/eval | 15.0% | over 5% |" in md
    assert cut_off_warning("x", Compute(rollouts=100, cut_off=6), "f") is not None
    assert cut_off_warning("x", Compute(), "f") is None


@pytest.mark.parametrize("kind", ["solver", "match"])
def test_the_grpo_reward_reads_a_cut_off_completion_as_votes_do(kind: str) -> None:
    """The free-text reading of a cut-off derivation took "33" from its middle and rewarded it as
    correct; the reward reads it through ``answer_text`` like the votes (a closed box still counts)."""
    from coevolve.training import RewardSpec, local_reward

    cut, done = (Completion(CUT, [], [], finish_reason=r) for r in ("length", "stop"))
    with Grader() as g:
        reward = local_reward(RewardSpec(kind), g)
        rewards, _ = reward(0, [Task("t", "7 × 8 × 6 = ?", answer="33")], [[cut, done]])
        assert rewards[0][0] < rewards[0][1]  # the same text, cut off: no answer
        closed, _ = reward(0, [Task("u", "?", answer="336")], [[Completion(CUT_BOXED, [], [], finish_reason="length")]])
        finished, _ = reward(0, [Task("u", "?", answer="336")], [[Completion(DONE, [], [])]])
        assert closed == finished
