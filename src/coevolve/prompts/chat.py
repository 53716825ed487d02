"""The real-model world's prompts, implementing ``coevolve.prompts.Prompter``.

What each role is asked comes from the run's ``prompts`` section (``coevolve.prompts.spec``:
system text, user template, example turns per role; the papers' wording by default). This
module renders them: with ``use_chat_template=True`` through ``tokenizer.apply_chat_template``
(instruct models; example turns become earlier user / assistant turns), otherwise as plain text
(base models; example turns become ``Question:`` / ``Answer:`` blocks before the request). The
solver prompt is the same in training and in evaluation, so benchmark numbers measure the policy
that was trained; multiple-choice items put lettered options into the question and ask for the
letter in the box.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from coevolve.errors import CoevolveError, ConfigError
from coevolve.prompts import StopKind, fill_template
from coevolve.prompts.spec import PromptsConfig, RolePrompt
from coevolve.types import Stop

MC_INSTRUCTION = "Put only the letter of the correct option within \\boxed{} (for example \\boxed{A})."
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

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
    """``Prompter`` for real models: the ``prompts`` section rendered for one tokenizer.

    ``tokenizer`` is only needed with ``use_chat_template=True`` (any object with
    ``apply_chat_template``); the recipes pass the loaded model's tokenizer.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        use_chat_template: bool = False,
        enable_thinking: bool | None = None,
        prompts: PromptsConfig | None = None,
    ):
        if use_chat_template and (tokenizer is None or not getattr(tokenizer, "chat_template", "x")):
            raise ConfigError("model.chat_template=true but the tokenizer has no chat template")
        if use_chat_template and not hasattr(tokenizer, "apply_chat_template"):
            raise ConfigError("ChatPrompter: use_chat_template=True needs a tokenizer with apply_chat_template")
        self.tokenizer = tokenizer
        self.use_chat_template = use_chat_template
        self.enable_thinking = enable_thinking
        self.prompts = prompts if prompts is not None else PromptsConfig()
        vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else {}
        self.end_of_turn = tuple(sorted({int(vocab[t]) for t in END_OF_TURN if t in vocab}))

    def with_tokenizer(self, tokenizer: Any) -> ChatPrompter:
        """The same prompts rendered for another model (a judge or diagnosis model)."""
        return ChatPrompter(tokenizer, self.use_chat_template, self.enable_thinking, self.prompts)

    def render(self, role: RolePrompt, user: str) -> str:
        """``role``'s system text, its example turns, then ``user`` (already filled)."""
        system, examples = role.system, role.examples
        if self.use_chat_template:
            messages = [{"role": "system", "content": system}] if system else []
            for ex in examples:
                messages += [{"role": "user", "content": ex.user}, {"role": "assistant", "content": ex.assistant}]
            messages.append({"role": "user", "content": user})
            extra = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}  # Qwen3 templates
            return str(
                self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
            )
        head = f"{system}\n\n" if system else ""
        if not examples:
            return f"{head}{user}\n\n"
        blocks = "".join(f"Question: {ex.user}\nAnswer: {ex.assistant}\n\n" for ex in examples)
        return f"{head}{blocks}Question: {user}\nAnswer:"

    def stop(self, kind: StopKind) -> Stop:
        """End-of-turn tokens always; ``</question>`` for writers; for plain (base-model) prompts
        the start of a new prompt block ends an answer."""
        if kind == "question":
            return Stop(("</question>",), self.end_of_turn)
        if self.use_chat_template:
            return Stop((), self.end_of_turn)
        system = (self.prompts.solver.system or "").strip()
        own = ("\n\n" + system[:24],) if system else ()  # a base model that runs on into a new prompt
        return Stop(tuple(dict.fromkeys(own + BASE_ANSWER_STOPS)), self.end_of_turn)

    def solver(self, question: str) -> str:
        p = self.prompts.solver
        return self.render(p, fill_template(p.user, question=question))

    def choice(self, question: str, choices: Sequence[str]) -> str:
        """The solver prompt with lettered options; the letter goes in the box."""
        return self.solver(choice_content(question, choices))

    def judge(self, question: str, answer: str) -> str:
        p = self.prompts.judge
        return self.render(p, fill_template(p.user, question=question, answer=answer))

    def diagnoser(self, question: str, label: str, bad: str, good: str) -> str:
        p = self.prompts.diagnoser
        return self.render(p, fill_template(p.user, question=question, label=label, bad=bad, good=good))

    def confirm(self, a: str, b: str) -> str:
        p = self.prompts.confirm
        return self.render(p, fill_template(p.user, a=a, b=b))

    def questioner(self, question: str, answer: str, difficulty: float) -> str:
        """D²Evo anchor prompt: (q_anc, y_anc, s) -> one new question of the same difficulty."""
        p = self.prompts.questioner
        return self.render(p, fill_template(p.user, question=question, answer=answer, difficulty=f"{difficulty:.0f}"))

    def challenger(self, causes: Sequence[str]) -> str:
        """[] free exploration (R-Zero), [c] targeted at one cause, [c1, c2] stitched compound."""
        p = self.prompts.challenger
        cs = [c.strip() for c in causes]
        if len(cs) == 0:
            user = fill_template(p.free)
        elif len(cs) == 1:
            user = fill_template(p.targeted, cause=cs[0])
        elif len(cs) == 2:
            user = fill_template(p.stitched, cause1=cs[0], cause2=cs[1])
        else:
            raise PromptError(f"challenger prompt takes 0, 1 or 2 causes, got {len(cs)}")
        return self.render(p, user)

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
