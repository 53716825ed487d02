"""Diagnosers: JSON extraction and validation, surface stripping, LLM diagnoser over a scripted
sampler (valid JSON and garbage are parsed, counted, skipped), trace diagnoser over a fake
``explain_divergence``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coevolve.memory.diagnose import LLMDiagnoser, TraceDiagnoser, extract_json_object, parse_diagnosis, strip_surface
from coevolve.prompts.chat import ChatPrompter
from coevolve.types import Completion, SamplingParams


class ScriptedSampler:
    """Returns the scripted texts in order, one completion per prompt; records the prompts."""

    def __init__(self, texts: list[str]):
        self.texts = list(texts)
        self.prompts: list[str] = []
        self.tokenizer = None

    def sample(self, prompts, n, params):
        assert n == 1
        self.prompts.extend(prompts)
        return [[Completion(text=self.texts.pop(0), token_ids=[], prompt_ids=[])] for _ in prompts]


def test_strip_surface():
    assert strip_surface("carry lost in 57+68= at 57", "57+68=") == "carry lost in the question at a number"
    assert strip_surface("wrote 125 instead of 126", "57+69=", extra=("126",)) == "wrote 125 instead of a number"
    # numbers that are not in the question are kept; partial matches are not touched
    assert strip_surface("a 2-step slip at 570", "57+3=") == "a 2-step slip at 570"


def test_extract_json_object():
    assert extract_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert extract_json_object('noise {"a": "x}y", "b": {"c": 2}} tail {"z": 0}') == {"a": "x}y", "b": {"c": 2}}
    assert extract_json_object('{bad json} then {"ok": true}') == {"ok": True}
    assert extract_json_object("[1, 2]") is None
    assert extract_json_object("}{") is None
    assert extract_json_object("") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "the carry was wrong",
        '{"divergence_step": "two", "cause": "lost carry", "skill": "add"}',
        '{"divergence_step": -1, "cause": "lost carry", "skill": "add"}',
        '{"divergence_step": 1.5, "cause": "lost carry", "skill": "add"}',
        '{"divergence_step": true, "cause": "lost carry", "skill": "add"}',
        '{"divergence_step": 1, "cause": 7, "skill": "add"}',
        '{"divergence_step": 1, "cause": "57 68", "skill": "add"}',  # nothing left after stripping
        '{"divergence_step": 1}',
    ],
)
def test_parse_diagnosis_rejects(text):
    assert parse_diagnosis(text, "57+68=", "125") is None


def test_parse_diagnosis_accepts_and_strips():
    d = parse_diagnosis(
        'Sure!\n```json\n{"divergence_step": "2", "cause": "dropped the carry from 57+68= when adding 57",'
        ' "skill": "column addition"}\n```',
        "57+68=",
        "125",
    )
    assert d is not None and d.divergence_step == 2 and d.skill == "column addition"
    assert d.cause == "dropped the carry from the question when adding a number"
    assert parse_diagnosis('{"divergence_step": 0, "cause": "ignores precedence"}', "1+2*3=").skill == "general"


def test_llm_diagnoser_scripted_sampler_valid_and_garbage():
    sampler = ScriptedSampler(
        [
            '{"divergence_step": 1, "cause": "forgets the carry into the next column", "skill": "addition"}',
            "<think>1+1</think>\\boxed{2}",
            '```\n{"divergence_step": 3, "cause": "uses 68 twice", "skill": "copying operands"}\n```',
            "{not json",
        ]
    )
    params = SamplingParams(temperature=0.0, max_new_tokens=64)
    diag = LLMDiagnoser(sampler, lambda q, y, b, g: f"Q={q} y={y}\nBAD={b}\nGOOD={g}\nJSON:", params)
    reqs = [("57+68=", "125", "<think>a</think>\\boxed{115}", "<think>b</think>\\boxed{125}"), ("1+1=", "2", "x", "y")]
    out = diag.diagnose_batch(reqs)
    assert out[0] is not None and out[0].cause == "forgets the carry into the next column"
    assert out[1] is None
    assert diag.stats.as_dict() == {"calls": 2, "ok": 1, "garbage": 1, "none": 0}
    assert (
        sampler.prompts[0]
        == "Q=57+68= y=125\nBAD=<think>a</think>\\boxed{115}\nGOOD=<think>b</think>\\boxed{125}\nJSON:"
    )
    d = diag.diagnose("57+68=", "125", "r-", "r+")
    assert d is not None and d.divergence_step == 3 and d.cause == "uses a number twice"
    assert diag.diagnose("9+9=", "18", "r-", "r+") is None
    assert diag.stats.as_dict() == {"calls": 4, "ok": 2, "garbage": 2, "none": 0}
    assert diag.last_outputs == ["{not json"]


def test_world_diagnosis_prompt_through_the_chat_template():
    class Tok:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)

    prompter = ChatPrompter(Tok(), use_chat_template=True)
    s = ScriptedSampler(['{"divergence_step": 0, "cause": "sign error", "skill": "algebra"}'])
    diag = LLMDiagnoser(s, prompter.diagnoser)
    assert diag.diagnose("Q?", "L", "B", "G").cause == "sign error"
    assert s.prompts[0].startswith("<user>") and "Problem: Q?" in s.prompts[0] and '{"divergence_step"' in s.prompts[0]


@dataclass
class FakeDivergence:
    step: int
    cause_id: str
    cause: str
    skill: str
    bad_step: str = ""
    good_step: str = ""


def test_trace_diagnoser_with_fake_explain():
    calls = []

    def explain(question, bad, good):
        calls.append((question, bad, good))
        if bad == good:
            return None
        return FakeDivergence(2, "carry_tens", "forgets the carry into the tens column", "column addition")

    t = TraceDiagnoser(explain=explain)
    d = t.diagnose("57+68=", "125", "bad", "good")
    assert d is not None and d.source_id == "carry_tens" and d.divergence_step == 2
    assert d.skill == "column addition"
    assert t.diagnose("57+68=", "125", "same", "same") is None
    assert calls[0] == ("57+68=", "bad", "good")
    assert t.stats.as_dict() == {"calls": 2, "ok": 1, "garbage": 0, "none": 1}
