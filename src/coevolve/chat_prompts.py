"""Paper-style prompts for real chat / base LLMs, implementing ``coevolve.prompts.Prompter``.

The wording follows the papers and R-Zero's code (peers.md §1.3, §1.5) so that a real-model run
asks the same things the papers asked:

* solver — R-Zero's system prompt plus the ``<think>…</think>`` request, because the format reward
  (D²Evo R_fmt) checks for ``<think>`` and R-Zero's own prompt never asked for it (its format
  reward was therefore usually 0, peers.md §1.5);
* questioner (D²Evo) — anchor question, its answer and its measured difficulty, ask for ONE new
  problem of the same difficulty inside ``<question>…</question>``;
* challenger (DiagEvo / R-Zero) — R-Zero's "expert competition-math problem setter" prompt for
  free exploration, with one error cause (targeted) or two (stitched, compound question) added.

With ``use_chat_template=True`` the messages go through ``tokenizer.apply_chat_template``
(instruct models); otherwise a plain "system + user" text is returned (base models, and tests).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from coevolve.errors import CoevolveError, ConfigError

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

_QUESTION_RE = re.compile(r"<question>(.*?)</question>", re.DOTALL)


class PromptError(CoevolveError, ValueError):
    """A prompt request the format cannot express (e.g. more than two causes)."""


class ChatPrompter:
    """``Prompter`` for real models (paper-style prompts).

    ``tokenizer`` is only needed with ``use_chat_template=True`` (any object with
    ``apply_chat_template``); the recipes pass the loaded model's tokenizer.
    """

    def __init__(self, tokenizer: Any = None, use_chat_template: bool = False):
        if use_chat_template and (tokenizer is None or not hasattr(tokenizer, "apply_chat_template")):
            raise ConfigError("ChatPrompter: use_chat_template=True needs a tokenizer with apply_chat_template")
        self.tokenizer = tokenizer
        self.use_chat_template = use_chat_template

    def _render(self, system: str, user: str) -> str:
        if self.use_chat_template:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        return f"{system}\n\n{user}\n\n"

    def solver(self, question: str) -> str:
        """R-Zero solver prompt + the ``<think>`` request that the format reward checks."""
        return self._render(SOLVER_SYSTEM, question)

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

    def oracle(self, question: str) -> str | None:
        """Real data has no oracle: labels come from the dataset or from votes."""
        return None
