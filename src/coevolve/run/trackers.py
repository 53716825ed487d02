"""Live metrics where researchers look: TensorBoard event files and Weights & Biases, fed the same
namespaced rows as ``metrics.jsonl`` (which stays the source of truth for resume and reports).

The x axis of every tracker is one global training step (``MetricsLog``): a GRPO step row at the
count of training steps before it, over every role and phase; an evaluation or a phase's end at
the steps trained so far (the base evaluation at 0, the final one at the run's last step).
Resuming a run reopens the log at the last phase boundary, so the resumed curves continue where
the interrupted run's finished phases left off. TensorBoard drops the events an interrupted phase
had written (``purge_step``); W&B resumes the same run id (offline mode writes under the run
folder and needs no network; ``wandb sync`` uploads later).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from coevolve.errors import ConfigError

TB_DIR = "tensorboard"
WANDB_DIR = "wandb"


class Tracker(Protocol):
    def log(self, row: dict[str, Any], step: int) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of a row (bookkeeping keys and non-numbers left out)."""
    return {
        k: float(v)
        for k, v in row.items()
        if k not in ("time", "step") and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class TensorBoardTracker:
    def __init__(self, run_dir: Path, first_step: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ConfigError(
                f"run.trackers: tensorboard needs the 'track' extra (pip install tensorboard): {e}"
            ) from e
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / TB_DIR), purge_step=first_step)

    def log(self, row: dict[str, Any], step: int) -> None:
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, run_dir: Path, run_id: str, name: str, project: str, mode: str, config: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(f"run.trackers: wandb needs the 'track' extra (pip install wandb): {e}") from e
        os.environ.setdefault("WANDB_SILENT", "true")
        (Path(run_dir) / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project, id=run_id, name=name, dir=str(run_dir), mode=mode, resume="allow", config=config
        )

    def log(self, row: dict[str, Any], step: int) -> None:
        self.run.log(scalars(row), step=step)

    def flush(self) -> None:
        """W&B streams on its own; nothing to force."""

    def close(self) -> None:
        self.run.finish()


def make_trackers(
    kinds: list[str],
    run_dir: Path,
    first_step: int,
    *,
    run_id: str,
    name: str,
    project: str,
    mode: str,
    config: dict[str, Any],
) -> list[Tracker]:
    """Trackers for ``run.trackers`` (``jsonl`` is always written and needs none)."""
    out: list[Tracker] = []
    for kind in kinds:
        if kind == "tensorboard":
            out.append(TensorBoardTracker(run_dir, first_step))
        elif kind == "wandb":
            out.append(WandbTracker(run_dir, run_id, name, project, mode, config))
        elif kind != "jsonl":
            raise ConfigError(f"run.trackers: unknown tracker {kind!r} (known: jsonl, tensorboard, wandb)")
    return out
