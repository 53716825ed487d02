"""The run folder: config snapshot, resume state, metrics log, per-round artefacts, checkpoints.

Resume model: a recipe is a sequence of named phases (``"01/difficulty"``, ``"01/solver"``, ...).
Each phase is a function of (config, artefacts on disk, the latest checkpoints) with its own
seed derived from the master seed and the phase key. A phase's outputs are written atomically
and then the phase is marked done in ``state.json`` (also atomic). A run killed at any moment
(even ``kill -9``) therefore resumes at the first phase not marked done, from exactly the same
inputs, and produces exactly the same results as a run that was never interrupted. Metrics
lines written by an interrupted phase are cut off on resume (``state.json`` remembers the byte
length of ``metrics.jsonl`` at every phase boundary), so nothing is logged twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from coevolve.errors import RunStateError

STATE_FILE = "state.json"
METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"


# ------------------------------------------------------------------------------------------
# atomic file helpers (temp file in the same folder + os.replace)


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise RunStateError(f"{path}:{i}: not valid JSON ({e.msg})") from None
    return out


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(o)
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def derive_seed(master: int, *parts: Any) -> int:
    """Stable 31-bit seed from the master seed and a phase key (independent of PYTHONHASHSEED)."""
    h = hashlib.sha256(repr((master,) + parts).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass
    import torch

    torch.manual_seed(seed)


# ------------------------------------------------------------------------------------------


class RunDir:
    """A run folder. Create with ``RunDir.create(path, config_yaml)``; reopen with ``RunDir.open``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._state: dict[str, Any] = {}
        if (self.path / STATE_FILE).exists():
            try:
                self._state = json.loads((self.path / STATE_FILE).read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise RunStateError(f"{self.path / STATE_FILE} is corrupt: {e}") from None
        self._state.setdefault("done", [])
        self._state.setdefault("phases", {})
        self._state.setdefault("checkpoints", {})
        self._state.setdefault("metrics_bytes", 0)

    # -- creation / reopening -----------------------------------------------------------
    @classmethod
    def create(cls, path: Path, config_yaml: str, recipe: str) -> "RunDir":
        path = Path(path)
        if (path / STATE_FILE).exists():
            raise RunStateError(
                f"{path} already holds a run; use `coevolve resume {path}` or choose another --run-dir"
            )
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path / CONFIG_FILE, config_yaml)
        run = cls(path)
        run._state.update({"recipe": recipe, "created": time.time(), "status": "running"})
        run._save_state()
        return run

    @classmethod
    def open(cls, path: Path) -> "RunDir":
        path = Path(path)
        if not (path / STATE_FILE).exists() or not (path / CONFIG_FILE).exists():
            raise RunStateError(f"{path} is not a coevolve run folder (no {STATE_FILE} / {CONFIG_FILE})")
        run = cls(path)
        run._truncate_metrics()
        return run

    # -- state ---------------------------------------------------------------------------
    @property
    def recipe(self) -> str:
        return str(self._state.get("recipe", ""))

    @property
    def state(self) -> dict[str, Any]:
        return self._state

    def _save_state(self) -> None:
        atomic_write_json(self.path / STATE_FILE, self._state)

    def is_done(self, key: str) -> bool:
        return key in self._state["done"]

    def phase_result(self, key: str) -> dict[str, Any]:
        return self._state["phases"].get(key, {}).get("result", {})

    def mark_done(
        self,
        key: str,
        result: dict[str, Any] | None = None,
        seconds: float = 0.0,
        checkpoints: dict[str, str] | None = None,
        keep: int = 2,
    ) -> None:
        """Record a finished phase and (in the same atomic state write) the checkpoints it
        produced, so a crash can never leave a checkpoint pointer ahead of the phase log."""
        self._state["done"].append(key)
        self._state["phases"][key] = {"result": result or {}, "seconds": seconds, "finished": time.time()}
        self._state["metrics_bytes"] = self._metrics_size()
        stale = self._apply_checkpoints(checkpoints or {}, keep)
        self._save_state()
        for rel in stale:
            if rel not in self._state["checkpoints"].values():
                shutil.rmtree(self.path / rel, ignore_errors=True)

    def set_status(self, status: str) -> None:
        self._state["status"] = status
        self._save_state()

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint_path(self, role: str, tag: str) -> Path:
        return self.path / "checkpoints" / f"{role}_{tag}"

    def latest_checkpoint(self, role: str) -> Path | None:
        rel = self._state["checkpoints"].get(role)
        return None if rel is None else self.path / rel

    def _apply_checkpoints(self, ckpts: dict[str, str], keep: int) -> list[str]:
        """Point each role at its new checkpoint; return old checkpoint folders to delete."""
        stale = []
        for role, rel in ckpts.items():
            hist = self._state.setdefault("checkpoint_history", {}).setdefault(role, [])
            if rel not in hist:
                hist.append(rel)
            self._state["checkpoints"][role] = rel
            while len(hist) > keep:
                stale.append(hist.pop(0))
        return stale

    # -- artefacts -------------------------------------------------------------------------
    def round_dir(self, t: int) -> Path:
        d = self.path / f"round_{t:02d}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_json(self, rel: str | Path, obj: Any) -> Path:
        p = self.path / rel
        atomic_write_json(p, obj)
        return p

    def write_jsonl(self, rel: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
        p = self.path / rel
        atomic_write_jsonl(p, rows)
        return p

    def read_jsonl(self, rel: str | Path) -> list[dict[str, Any]]:
        return read_jsonl(self.path / rel)

    # -- metrics ---------------------------------------------------------------------------
    def _metrics_size(self) -> int:
        p = self.path / METRICS_FILE
        return p.stat().st_size if p.exists() else 0

    def _truncate_metrics(self) -> None:
        """Drop metric lines written by a phase that did not complete (resume semantics)."""
        p = self.path / METRICS_FILE
        keep = int(self._state.get("metrics_bytes", 0))
        if p.exists() and p.stat().st_size > keep:
            with open(p, "r+b") as f:
                f.truncate(keep)

    def log(self, metrics: dict[str, Any], **context: Any) -> None:
        """Append one line ``{context..., time, metrics...}`` to metrics.jsonl."""
        row = {**context, "time": round(time.time(), 3), **metrics}
        with open(self.path / METRICS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")

    def metrics(self) -> list[dict[str, Any]]:
        p = self.path / METRICS_FILE
        return read_jsonl(p) if p.exists() else []

    # -- phases ----------------------------------------------------------------------------
    def run_phase(
        self,
        key: str,
        fn: Callable[[int], dict[str, Any] | None],
        *,
        master_seed: int,
        round: int | None = None,
        log_fn: Callable[[str], None] | None = None,
        keep_checkpoints: int = 2,
    ) -> dict[str, Any]:
        """Run ``fn(seed)`` unless ``key`` is already done; returns the phase's result dict.

        ``fn`` must write its artefacts (atomically) before returning; its return value is a
        small JSON-able dict stored in state.json (e.g. counts, paths) and returned on resume.
        A key ``"checkpoints": {role: folder}`` in it (folders under the run folder, written by
        the phase) moves the roles' resume points in the same atomic write as the phase mark.
        """
        if self.is_done(key):
            if log_fn:
                log_fn(f"[skip] {key} (done)")
            return self.phase_result(key)
        seed = derive_seed(master_seed, key)
        seed_everything(seed)
        if log_fn:
            log_fn(f"[phase] {key}")
        t0 = time.perf_counter()
        result = fn(seed) or {}
        seconds = time.perf_counter() - t0
        name = key.split("/")[-1]
        phase_metrics = {f"phase/{name}/seconds": float(f"{seconds:.3f}")}
        if "rollouts" in result:
            phase_metrics[f"phase/{name}/rollouts"] = result["rollouts"]
        self.log(phase_metrics, round=round, phase=name)
        ckpts = {r: str(Path(p).resolve().relative_to(self.path.resolve())) for r, p in result.pop("checkpoints", {}).items()}
        self.mark_done(key, result, seconds, checkpoints=ckpts, keep=keep_checkpoints)
        return result


def default_run_path(root: str | Path, recipe: str, name: str | None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / (name or f"{recipe}-{stamp}")
