"""The prompts of both worlds: the papers' ChatPrompter and the toy world's ToyPrompter."""

from __future__ import annotations

import doctest

import pytest

import coevolve.prompts as P
import coevolve.prompts.chat as CP
from coevolve.errors import CoevolveError, ConfigError
from coevolve.prompts import Prompter
from coevolve.prompts.chat import ChatPrompter
from coevolve.world.toy.prompts import ToyPrompter


def test_doctests() -> None:
    assert doctest.testmod(CP).failed == 0 and doctest.testmod(P).failed == 0


def test_is_prompter_and_prompts_follow_papers() -> None:
    p = ChatPrompter()
    assert isinstance(p, Prompter)
    s = p.solver("What is 2+3?")
    assert "<think>" in s and "\\boxed{}" in s and "What is 2+3?" in s
    q = p.questioner("What is 2+3?", "5", 37.5)
    assert "What is 2+3?" in q and "Reference answer: 5" in q and "38/100" in q
    assert "ONE new problem of the same difficulty" in q and "<question></question>" in q
    free = p.challenger([])
    assert "expert competition-math problem setter" in free and "<question>" in free
    tgt = p.challenger(["forgets to carry"])
    assert "forgets to carry" in tgt
    st = p.challenger(["forgets to carry", "drops a sign"])
    assert "forgets to carry" in st and "drops a sign" in st and "compound" in st
    with pytest.raises(CoevolveError):
        p.challenger(["a", "b", "c"])


def test_training_and_evaluation_share_the_solver_prompt() -> None:
    """A multiple-choice item is the solver prompt with lettered options: the same instructions
    the model was trained with, plus the letter format."""
    p = ChatPrompter()
    plain, mc = p.solver("Which is prime?"), p.choice("Which is prime?", ["4", "7"])
    assert plain.split("Which is prime?")[0] == mc.split("Which is prime?")[0]  # same system text
    assert "A. 4\nB. 7" in mc and "letter" in mc
    with pytest.raises(CoevolveError):
        p.choice("q", ["only one"])


def test_judge_diagnoser_confirm_prompts_in_both_worlds() -> None:
    for p in (ChatPrompter(), ToyPrompter()):
        assert isinstance(p, Prompter)
        j = p.judge("2+2", "4")
        assert "2+2" in j and "4" in j and "yes or no" in j
        d = p.diagnoser("2+2", "4", "BADTRACE", "GOODTRACE")
        assert all(x in d for x in ("2+2", "4", "BADTRACE", "GOODTRACE"))
        c = p.confirm("cause one", "cause two")
        assert "cause one" in c and "cause two" in c


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<question>What is 2+3?</question>", "What is 2+3?"),
        ("thinking...\n<question>\n  Find x.\n</question>\n\\boxed{4}", "Find x."),
        ("<question></question>", None),
        ("<question>   </question>", None),
        ("<question>a</question> <question>b</question>", None),
        ("<question>a", None),
        ("a</question>", None),
        ("</question>a<question>", None),
        ("<question>a<question>b</question>", None),
        ("no tags at all", None),
    ],
)
def test_parse_question(text: str, expected: str | None) -> None:
    assert ChatPrompter().parse_question(text) == expected


def test_chat_template_path() -> None:
    class Tok:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"

    p = ChatPrompter(Tok(), use_chat_template=True)
    out = p.solver("Q?")
    assert out.startswith("system:Please reason step by step") and out.endswith("user:Q?|assistant:")
    assert p.judge("q", "a").startswith("user:")  # no system turn for the yes/no questions
    with pytest.raises(ConfigError):
        ChatPrompter(None, use_chat_template=True)


# ------------------------------------------------------------------------------ prompts as config

from coevolve.config import load_config  # noqa: E402
from coevolve.prompts.spec import Example, PromptsConfig, SolverPrompt  # noqa: E402

SMOL = ["model.path=/nonexistent/not-checked-by-config"]


def _custom() -> PromptsConfig:
    return PromptsConfig.model_validate(
        {
            "solver": {
                "system": "SYS",
                "user": "Q: {question}",
                "examples": [{"user": "What is 1 + 1?", "assistant": "1 + 1 = 2. \\boxed{2}"}],
            },
            "diagnoser": {"user": '{"x": "{question}|{bad}|{good}"}'},
            "challenger": {
                "system": None,
                "free": "Write one.",
                "targeted": "Fix: {cause}",
                "stitched": "{cause1}+{cause2}",
            },
            "questioner": {
                "user": "Like {question} at {difficulty}",
                "examples": [{"user": "u", "assistant": "<question>q</question>"}],
            },
        }
    )


def test_every_role_is_configurable_and_rendered_plain() -> None:
    """Plain text: system, Question/Answer blocks for the examples, then the request."""
    p = ChatPrompter(prompts=_custom())
    assert p.solver("What is 2 + 2?") == (
        "SYS\n\nQuestion: What is 1 + 1?\nAnswer: 1 + 1 = 2. \\boxed{2}\n\nQuestion: Q: What is 2 + 2?\nAnswer:"
    )
    assert p.diagnoser("q", "l", "b", "g") == '{"x": "q|b|g"}\n\n'  # JSON braces survive, placeholders filled literally
    assert p.challenger([]) == "Write one.\n\n" and p.challenger(["c"]) == "Fix: c\n\n"
    assert p.challenger(["a", "b"]) == "a+b\n\n"
    assert p.questioner("Q", "A", 37.5).endswith("Question: Like Q at 38\nAnswer:")
    assert "\n\nQuestion:" in p.stop("answer").strings  # a base model running on into the next block stops


def test_examples_are_earlier_chat_turns() -> None:
    """With a chat template, examples are user/assistant turns before the request, not text
    pasted into the user message."""
    seen: list[list[dict]] = []

    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            seen.append(messages)
            return "|".join(f"{m['role']}:{m['content']}" for m in messages)

    ChatPrompter(Tok(), use_chat_template=True, prompts=_custom()).solver("What is 2 + 2?")
    assert seen[-1] == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "1 + 1 = 2. \\boxed{2}"},
        {"role": "user", "content": "Q: What is 2 + 2?"},
    ]


def test_real_tokenizer_renders_examples_as_turns(tmp_path) -> None:
    """SmolLM2's own chat template (ChatML): each example is an <|im_start|>user / assistant pair."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "<|im_end|>": 1}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    text = ChatPrompter(tok, use_chat_template=True, prompts=_custom()).solver("What is 2 + 2?")
    assert text == (
        "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nWhat is 1 + 1?<|im_end|>\n"
        "<|im_start|>assistant\n1 + 1 = 2. \\boxed{2}<|im_end|>\n<|im_start|>user\nQ: What is 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "override,message",
    [
        ("prompts.solver.user='Solve this.'", "prompts.solver: user: the template lacks {question}"),
        ("prompts.solver.user='{question} {answer}'", "names {answer}, which this role does not provide"),
        ("prompts.questioner.user='Like {question}'", "prompts.questioner: user: the template lacks {difficulty}"),
        ("prompts.challenger.targeted='Target it.'", "prompts.challenger: targeted: the template lacks {cause}"),
        ("prompts.challenger.free='{cause}'", "names {cause}"),
        ("prompts.diagnoser.user='{question} {bad}'", "lacks {good}"),
        ("prompts.judge.user='{question}'", "lacks {answer}"),
        ("prompts.confirm.user='{a} {c}'", "lacks {b}"),
        ("prompts.solver.examples=[{user: x}]", "prompts.solver.examples.0.assistant"),
        ("prompts.solver.colour=red", "unknown key 'prompts.solver.colour'"),
    ],
)
def test_bad_templates_fail_at_load_naming_the_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("diagevo", None, [*SMOL, override])
    assert message in str(e.value)


def test_literal_braces_and_valid_override() -> None:
    cfg = load_config("grpo", None, [*SMOL, "prompts.solver.user='{question} Answer as \\boxed{{answer}}.'"])
    assert ChatPrompter(prompts=cfg.prompts).solver("Q").endswith("Q Answer as \\boxed{answer}.\n\n")


def test_toy_world_refuses_writer_prompts_but_takes_diagnoser_prompts() -> None:
    with pytest.raises(ConfigError, match="prompts.solver: the toy model's solver and writer prompts are fixed"):
        load_config("grpo", None, ["prompts.solver.system=hi"])
    cfg = load_config(
        "diagevo", None, ["prompts.diagnoser.user='{question} {bad} {good}!'"]
    )  # a real diagnosis model's
    assert cfg.prompts.diagnoser.user == "{question} {bad} {good}!"


def test_defaults_are_the_papers_wording() -> None:
    d = PromptsConfig()
    assert d.solver.system.startswith("Please reason step by step inside <think> </think>") and d.solver.examples == []
    assert "expert competition-math problem setter" in d.challenger.system
    assert "earliest step where the failed solution departs" in d.diagnoser.user
    assert SolverPrompt(examples=[Example(user="a", assistant="b")]).user == "{question}"


def test_checkpoint_meta_carries_the_prompts(tmp_path) -> None:
    """A checkpoint's coevolve.json holds the run's prompts: evaluating it later prompts exactly as
    in training (examples included); a broken prompts entry is refused naming the field."""
    import json

    from coevolve.errors import ModelLoadError
    from coevolve.world import read_checkpoint_meta, world_of_model
    from coevolve.world.arith import ArithWorld

    spec = _custom().model_dump(mode="json")
    (tmp_path / "coevolve.json").write_text(
        json.dumps({"format": 1, "world": "arith", "chat_template": False, "prompts": spec})
    )
    w = world_of_model(tmp_path, None)
    assert isinstance(w, ArithWorld) and w.default_benches == ("arith",)
    assert w.prompter.solver("What is 2 + 2?") == ChatPrompter(prompts=_custom()).solver("What is 2 + 2?")
    spec["solver"]["user"] = "no placeholder"
    (tmp_path / "coevolve.json").write_text(json.dumps({"format": 1, "world": "real", "prompts": spec}))
    with pytest.raises(ModelLoadError, match="field 'prompts.solver'"):
        read_checkpoint_meta(tmp_path)
