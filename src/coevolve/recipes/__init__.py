"""One readable file per recipe (``grpo``, ``d2evo``, ``diagevo``) over shared building blocks
(``common``), and ``execute``: how every entry point (the CLI, the ablation scripts) runs one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coevolve.config.base import RecipeConfig


def execute(cfg: RecipeConfig, path: Path, *, skip_finished: bool = False) -> dict[str, Any]:
    """Run ``cfg``'s recipe in the run folder ``path``: create it, or resume it when it already
    holds a run; record the status (running / interrupted / failed / finished) in its state.
    With ``skip_finished``, a finished run is not reopened and its summary is returned."""
    from coevolve.config import dump_yaml, recipe_runner
    from coevolve.run import STATE_FILE, SUMMARY_FILE, Run

    path = Path(path)
    if (path / STATE_FILE).is_file():
        if skip_finished and (path / SUMMARY_FILE).is_file():
            if json.loads((path / STATE_FILE).read_text(encoding="utf-8")).get("status") == "finished":
                return json.loads((path / SUMMARY_FILE).read_text(encoding="utf-8"))
        run = Run.open(path)
    else:
        run = Run.create(path, dump_yaml(cfg), cfg.recipe)
    runner = recipe_runner(cfg.recipe)
    if cfg.run.threads:
        import torch

        torch.set_num_threads(cfg.run.threads)
    run.state.set_status("running")
    try:
        summary = runner(cfg, run)
    except KeyboardInterrupt:
        run.state.set_status("interrupted")
        raise
    except BaseException:
        run.state.set_status("failed")
        raise
    finally:
        run.metrics.close()  # live trackers flush and close even when the run stops early
    run.state.set_status("finished")
    return summary
