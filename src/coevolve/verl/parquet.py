"""verl's training rows for one GRPO phase, written as parquet.

A row is what verl's ``RLHFDataset`` reads::

    data_source   "coevolve/<role>"
    prompt        [{"role": "user", "content": <prompt text>}]   chat messages
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": <label or "">}
    extra_info    {"index": i, "step": s, "task_id": ..., "role": ..., "reward": training.RewardSpec}

verl always applies a chat template to ``prompt``. coevolve renders the prompt itself (the
world's prompter, with or without the model's own chat template), so the exported tokenizer
carries ``IDENTITY_CHAT_TEMPLATE``: verl's prompt text is then exactly the text the local
backend samples from.

The rows are the phase's batches in order (``steps`` x ``prompts_per_step``), read by verl
with ``data.shuffle=False`` and ``train_batch_size=prompts_per_step``, so step s of verl trains
on the tasks step s of the local backend would draw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.training import RewardSpec  # the rows carry it; also importable from here
from coevolve.types import Task

IDENTITY_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
"""Chat template that returns the messages' text unchanged (no role markers, no generation prompt)."""

ABILITY = "math"


@dataclass
class VerlRow:
    """One prompt of the phase, as verl reads it (``record``)."""

    index: int
    step: int
    task: Task
    prompt: str
    role: str
    reward: RewardSpec
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {
            "data_source": f"coevolve/{self.role}",
            "prompt": [{"role": "user", "content": self.prompt}],
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": self.task.answer or ""},
            "extra_info": {
                "index": self.index,
                "step": self.step,
                "task_id": self.task.id,
                "role": self.role,
                "reward": self.reward.to_dict(),
                **self.extra,
            },
        }


def phase_rows(
    steps: int, batches: Callable[[int], list[Task]], prompt: Callable[[Task], str], role: str, reward: RewardSpec
) -> list[VerlRow]:
    """The phase's rows: ``batches(s)`` for s = 0 .. steps-1, in order (the local backend's draws)."""
    rows: list[VerlRow] = []
    for step in range(steps):
        for task in batches(step):
            rows.append(VerlRow(len(rows), step, task, prompt(task), role, reward))
    return rows


def write_parquet(rows: Sequence[VerlRow], path: Path) -> Path:
    """``rows`` as one parquet file (pyarrow; the ``verl`` extra)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([r.record() for r in rows]), str(path))
    return path


def read_parquet(path: Path) -> list[dict[str, Any]]:
    """The rows of a parquet file as dicts (what verl's dataset sees)."""
    import pyarrow.parquet as pq

    return pq.read_table(str(path)).to_pylist()


__all__ = ["ABILITY", "IDENTITY_CHAT_TEMPLATE", "RewardSpec", "VerlRow", "phase_rows", "read_parquet", "write_parquet"]
