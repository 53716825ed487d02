"""Question keys, deduplication and D²Evo's hybrid buffer ``D_hybrid = D_real^mid ∪ D_gen^mid``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from coevolve.curriculum.difficulty import PassRecord
from coevolve.curriculum.voting import VoteRecord
from coevolve.types import Task

T = TypeVar("T")


def normalize_question(text: str) -> str:
    """Case- and whitespace-insensitive key used for deduplication.

    >>> normalize_question("  What is  2+2 ? ") == normalize_question("what is 2+2?")
    True
    """
    return re.sub(r"\s+", "", text.lower())


def dedupe(items: Sequence[T], against: Iterable[str] = (), key: Callable[[T], str] = str) -> list[T]:
    """Drop items whose normalised question equals one in ``against`` or an earlier item.

    >>> dedupe(["1+2=", "1 + 2=", "3+4=", "5+6="], against=["5+6="])
    ['1+2=', '3+4=']
    """
    seen = {normalize_question(a) for a in against}
    out = []
    for it in items:
        k = normalize_question(key(it))
        if k in seen:
            continue
        seen.add(k)
        out.append(it)
    return out


def build_hybrid_buffer(
    anchors: Sequence[PassRecord], generated: Sequence[VoteRecord], round_idx: int = 0
) -> list[Task]:
    """D_hybrid as solver tasks: anchors keep their real answer, generated questions carry their
    pseudo-label. Generated questions that duplicate an anchor or each other (normalised text)
    or have no label are dropped here too, so the buffer never double-weights a question.
    ``features["origin"]`` is ``"real"`` or ``"generated"``."""
    buf = [
        Task(
            a.task_id,
            a.question,
            a.answer,
            source="anchor",
            features={**a.features, "origin": "real", "pass_rate": a.pass_rate},
        )
        for a in anchors
    ]
    gen = dedupe([g for g in generated if g.label is not None], [a.question for a in anchors], key=lambda g: g.question)
    for i, g in enumerate(gen):
        buf.append(
            Task(
                g.id or f"gen-r{round_idx:02d}-{i:05d}",
                g.question,
                g.label,
                source="generated",
                features={"origin": "generated", "p1": g.p1, "p2": g.p2},
            )
        )
    return buf
