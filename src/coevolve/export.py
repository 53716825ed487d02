"""``coevolve export``: a clean model folder from a run's checkpoint.

Every checkpoint is already a loadable Hugging Face folder (weights, config, tokenizer, and
``coevolve.json`` saying which world and prompt form it was trained with); the newest checkpoint
of each role also holds the optimiser state a resume needs. Export writes a folder without any
training state: full checkpoints are copied file by file (bit-exact), LoRA checkpoints are merged
into their base model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from coevolve.errors import RunStateError
from coevolve.rl.learner import OPTIM_FILE, STATE_JSON
from coevolve.run import STATE_FILE

TRAINING_STATE = (OPTIM_FILE, STATE_JSON)


def find_checkpoint(run_dir: Path, role: str = "solver", round_number: int | None = None) -> Path:
    """The role's newest checkpoint, or the one written in round ``round_number``."""
    run_dir = Path(run_dir)
    try:
        state = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RunStateError(f"{run_dir}: not a readable run folder ({e})") from None
    history = state.get("checkpoint_history", {}).get(role, [])
    if not history:
        known = ", ".join(sorted(state.get("checkpoint_history", {}))) or "none yet"
        raise RunStateError(f"{run_dir}: no checkpoint of role {role!r} (roles with checkpoints: {known})")
    if round_number is None:
        return run_dir / history[-1]
    tag = f"{role}_r{round_number:02d}"
    hits = [h for h in history if Path(h).name.startswith(tag)]
    if not hits:
        kept = ", ".join(Path(h).name for h in history)
        raise RunStateError(f"{run_dir}: no kept checkpoint of {role} from round {round_number} (kept: {kept}; "
                            "run.keep_checkpoints sets how many are kept)")
    return run_dir / hits[-1]


def export_checkpoint(checkpoint: Path, out: Path) -> Path:
    """Write ``checkpoint`` as a plain model folder at ``out`` (which must not exist yet)."""
    from coevolve.world import read_checkpoint_meta

    checkpoint, out = Path(checkpoint), Path(out)
    if out.exists():
        raise RunStateError(f"--out {out} already exists; choose a new folder")
    meta_data = read_checkpoint_meta(checkpoint)  # a damaged coevolve.json stops us before any copy
    if (checkpoint / "config.json").is_file():
        shutil.copytree(checkpoint, out, ignore=shutil.ignore_patterns(*TRAINING_STATE))
    else:  # a LoRA adapter: merge it into its base model
        from coevolve.engine import load_model

        model, tok = load_model(checkpoint, device="cpu", dtype="auto")
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        if (checkpoint / "coevolve.json").is_file():
            shutil.copy2(checkpoint / "coevolve.json", out / "coevolve.json")
    meta = out / "coevolve.json"
    meta.write_text(json.dumps({**meta_data, "exported_from": str(checkpoint.resolve())}, indent=2))
    return out
