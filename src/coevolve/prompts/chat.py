"""The real-model world's prompts (paper-style), implementing ``coevolve.prompts.Prompter``.

The wording follows the papers and R-Zero's code (Chengsong-Huang/R-Zero @ 5699329) so that a
real-model run asks the same things the papers asked:

* solver — R-Zero's system prompt plus the ``<think>…</think>`` request, because the format reward
  (D²Evo R_fmt) checks for ``<think>`` and R-Zero's own prompt never asked for it (its format
  reward was therefore usually 0). The same prompt is used in training and in evaluation, so the
  benchmark numbers measure the policy that was trained; multiple-choice items add lettered
  options and ask for the letter in the box;
* questioner (D²Evo) — anchor question, its answer and its measured difficulty, ask for ONE new
  problem of the same difficulty inside ``<question>…</question>``;
* challenger (DiagEvo / R-Zero) — R-Zero's "expert competition-math problem setter" prompt for
  free exploration, with one error cause (targeted) or two (stitched, compound question) added;
* judge (D²Evo's optional label check), diagnoser (DiagEvo's ``D_ext``) and the yes/no duplicate
  confirmation of the memory.

With ``use_chat_template=True`` the messages go through ``tokenizer.apply_chat_template``
(instruct models); otherwise a plain "system + user" text is returned (base models, and tests).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from coevolve.errors import CoevolveError, ConfigError
from coevolve.prompts import StopKind, fill_template
from coevolve.types import Stop

SOLVER_SYSTEM = (
    "Please reason step by step inside <think> </think> tags, "
    "then put your final answer within \\boxed{}."
)

QUESTIONER_SYSTEM = "You are an expert competition-math problem setter."

QUESTIONER_USER = (
    "Here is a reference problem, its answer, and its measured difficulty for the current solver "
    "(0 = always solved, 100 = never solved).\n\n"
    "Reference problem:\n{question}\n\n"
    "Reference answer: {answer}\n"
    "Difficulty: {difficulty:.0f}/100\n\n"
    "Write ONE new problem of the same difficulty. It must be different from the reference problem, "
    "self-contained, and have a single verifiable final answer. "
    "Output the new problem inside <question></question> tags and nothing else."
)

CHALLENGER_SYSTEM = (
    "You are an expert competition-math problem setter.\n"
    "FIRST, in your private scratch-pad, think step-by-step to design a brand-new, non-trivial problem. "
    "The problem could come from any field of mathematics, including but not limited to algebra, geometry, "
    "number theory, combinatorics, prealgebra, probability, statistics, and calculus. "
    "Aim for a difficulty such that fewer than 30 % of advanced high-school students could solve it. "
    "Avoid re-using textbook cliches or famous contest problems.\n"
    "THEN, without revealing any of your private thoughts, output **exactly** the following two blocks:\n\n"
    "<question>\n{The full problem statement on one or more lines}\n</question>\n\n"
    "\\boxed{final_answer}\n\n"
    "Do NOT output anything else - no explanations, no extra markup."
)

CHALLENGER_FREE = (
    "Generate one new, challenging reasoning question now. "
    "Remember to format the output exactly as instructed."
)

CHALLENGER_TARGETED = (
    "Solvers often fail because of the following error:\n{cause}\n\n"
    "Generate one new, challenging reasoning question whose correct solution requires avoiding exactly "
    "this error. Remember to format the output exactly as instructed."
)

CHALLENGER_STITCHED = (
    "Solvers often fail because of the following two related errors:\n(1) {cause1}\n(2) {cause2}\n\n"
    "Generate one new, challenging compound question whose correct solution requires avoiding both "
    "errors in the same solution. Remember to format the output exactly as instructed."
)

MC_INSTRUCTION = (
    "Put only the letter of the correct option within \\boxed{} (for example \\boxed{A})."
)
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

JUDGE_TEMPLATE = (
    "Question: {question}\nProposed final answer: {answer}\n"
    "Is {answer} the correct final answer to the question above? Reply yes or no."
)

DIAGNOSER_TEMPLATE = """You compare two solutions of the same problem to find why one failed.
Problem: {question}
Reference answer (majority vote): {label}
Failed solution:
{bad}
Successful solution:
{good}
Find the earliest step where the failed solution departs from the successful one and state the underlying error as a transferable cause: a general error pattern without any numbers or wording from this problem, plus the short name of the skill it belongs to.
Reply with JSON only: {"divergence_step": <step index, 0-based>, "cause": "<one sentence>", "skill": "<skill name>"}"""
"""DiagEvo's diagnosis prompt; placeholders are substituted literally (the JSON braces stay)."""

CONFIRM_TEMPLATE = "Do these two descriptions name the same error?\nA: {a}\nB: {b}\nAnswer yes or no."

_QUESTION_RE = re.compile(r"<question>(.*?)</question>", re.DOTALL)

END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>")
"""Special tokens that end a chat turn in the common templates (ChatML, Llama 3, Gemma, Phi)."""

BASE_ANSWER_STOPS = ("\n\nPlease reason step by step", "\n\nQuestion:", "\n\nProblem:")
"""Without a chat template a base model runs on after its answer, usually into a new prompt of
the same shape; the last ``\\boxed{}`` would then grade a made-up follow-up problem."""


def choice_content(question: str, choices: Sequence[str]) -> str:
    """Multiple-choice user text: the question, one "A. option" line per choice, the ask."""
    if not 2 <= len(choices) <= len(LETTERS):
        raise PromptError(f"a multiple-choice item needs 2..26 choices, got {len(choices)}")
    lines = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))
    return f"{question}\n\n{lines}\n\n{MC_INSTRUCTION}"


class PromptError(CoevolveError, ValueError):
    """A prompt request the format cannot express (e.g. more than two causes)."""


class ChatPrompter:
    """``Prompter`` for real models (paper-style prompts).

    ``tokenizer`` is only needed with ``use_chat_template=True`` (any object with
    ``apply_chat_template``); the recipes pass the loaded model's tokenizer.
    """

    def __init__(self, tokenizer: Any = None, use_chat_template: bool = False, enable_thinking: bool | None = None):
        if use_chat_template and (tokenizer is None or not getattr(tokenizer, "chat_template", "x")):
            raise ConfigError("model.chat_template=true but the tokenizer has no chat template")
        if use_chat_template and not hasattr(tokenizer, "apply_chat_template"):
            raise ConfigError("ChatPrompter: use_chat_template=True needs a tokenizer with apply_chat_template")
        self.tokenizer = tokenizer
        self.use_chat_template = use_chat_template
        self.enable_thinking = enable_thinking
        vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else {}
        self.end_of_turn = tuple(sorted({int(vocab[t]) for t in END_OF_TURN if t in vocab}))

    def _render(self, system: str | None, user: str) -> str:
        if self.use_chat_template:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            extra = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}  # Qwen3 templates
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra))
        return f"{system}\n\n{user}\n\n" if system else f"{user}\n\n"

    def stop(self, kind: StopKind) -> Stop:
        """End-of-turn tokens always; ``</question>`` for writers; for plain (base-model) prompts
        the start of a new prompt block ends an answer."""
        strings = ("</question>",) if kind == "question" else () if self.use_chat_template else BASE_ANSWER_STOPS
        return Stop(strings, self.end_of_turn)

    def solver(self, question: str) -> str:
        """R-Zero solver prompt + the ``<think>`` request that the format reward checks."""
        return self._render(SOLVER_SYSTEM, question)

    def choice(self, question: str, choices: Sequence[str]) -> str:
        """The solver prompt with lettered options; the letter goes in the box."""
        return self._render(SOLVER_SYSTEM, choice_content(question, choices))

    def judge(self, question: str, answer: str) -> str:
        return self._render(None, fill_template(JUDGE_TEMPLATE, question=question, answer=answer))

    def diagnoser(self, question: str, label: str, bad: str, good: str, template: str | None = None) -> str:
        text = fill_template(template or DIAGNOSER_TEMPLATE, question=question, label=label, bad=bad, good=good)
        return self._render(None, text)

    def confirm(self, a: str, b: str) -> str:
        return self._render(None, fill_template(CONFIRM_TEMPLATE, a=a, b=b))

    def questioner(self, question: str, answer: str, difficulty: float) -> str:
        """D²Evo anchor prompt: (q_anc, y_anc, s) -> one new question of the same difficulty."""
        return self._render(
            QUESTIONER_SYSTEM, QUESTIONER_USER.format(question=question, answer=answer, difficulty=difficulty)
        )

    def challenger(self, causes: Sequence[str]) -> str:
        """[] free exploration (R-Zero), [c] targeted at one cause, [c1, c2] stitched compound."""
        cs = [c.strip() for c in causes]
        if len(cs) == 0:
            user = CHALLENGER_FREE
        elif len(cs) == 1:
            user = CHALLENGER_TARGETED.format(cause=cs[0])
        elif len(cs) == 2:
            user = CHALLENGER_STITCHED.format(cause1=cs[0], cause2=cs[1])
        else:
            raise PromptError(f"challenger prompt takes 0, 1 or 2 causes, got {len(cs)}")
        return self._render(CHALLENGER_SYSTEM, user)

    def parse_question(self, completion: str) -> str | None:
        """The text inside exactly one well-formed, non-empty ``<question>…</question>`` block.

        Two blocks, an unclosed tag, nested/stray tags or an empty block -> None: the questioner
        reward gates on this, so ambiguity must score 0 rather than guess.

        >>> ChatPrompter().parse_question("<question> What is 2+3? </question>\\n\\\\boxed{5}")
        'What is 2+3?'
        >>> ChatPrompter().parse_question("<question>a</question><question>b</question>") is None
        True
        """
        if completion.count("<question>") != 1 or completion.count("</question>") != 1:
            return None
        m = _QUESTION_RE.search(completion)
        if m is None:
            return None
        body = m.group(1).strip()
        return body or None

