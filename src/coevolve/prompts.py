"""Prompt formats: how each role (solver, questioner, challenger) is asked, and how a generated
question is parsed back. The toy world and real chat models implement the same protocol, so the
recipes never know which one they drive."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable


@runtime_checkable
class Prompter(Protocol):
    def solver(self, question: str) -> str:
        """Prompt asking the solver to reason in <think> then answer in \\boxed{}."""
        ...

    def questioner(self, question: str, answer: str, difficulty: float) -> str:
        """D2Evo questioner prompt: anchor question, its answer, measured difficulty (0-100)."""
        ...

    def challenger(self, causes: Sequence[str]) -> str:
        """DiagEvo challenger prompt: [] free exploration, [c] targeted, [c1, c2] stitched."""
        ...

    def parse_question(self, completion: str) -> str | None:
        """The question inside exactly one well-formed <question>...</question>, else None."""
        ...

    def oracle(self, question: str) -> str | None:
        """The exact answer when the world knows it (toy world), else None."""
        ...
