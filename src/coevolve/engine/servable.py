"""Which model folders a run's vLLM engine can serve, decided before any work (``preflight``,
``coevolve plan``) and when a frozen model is loaded (``recipes.setup.Setup.load``).

One vLLM engine per process serves every model of a run as a weight version (``engine.vllm``):
a frozen model folder (a judge, DiagEvo's diagnoser) whose architecture, shapes, context, rope,
tokenizer or generation EOS ids differ from ``model.path``'s cannot be one of them, since vLLM
fixes those when the engine is built. Such a model is served by Hugging Face generate on the run's
device instead, parked in CPU memory between the phases that use it
(``loop.PhaseParkedSampler``), and the plan counts it there. Reads configs and tokenizers only:
vLLM need not be installed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from coevolve.engine.hf import load_tokenizer
from coevolve.engine.vllm import Serves, _gen_eos, _generation_config, _model_config, _tokenizer_fingerprint
from coevolve.errors import ModelLoadError


def vllm_kind(cfg: Any) -> bool:
    """Whether the run's samplers are vLLM engines: ``engine=vllm``, or a Ray pool of vLLM actors."""
    kind = getattr(cfg, "kind", "hf")
    return kind == "vllm" or (kind == "ray" and getattr(getattr(cfg, "ray", None), "actor_engine", None) == "vllm")


@functools.lru_cache(maxsize=32)
def _folder_serves(path: str, stamp: tuple[float, ...]) -> Serves:
    """``Serves`` of a model folder apart from dtype, device and engine section (which the run
    gives every model it loads alike); an unreadable tokenizer compares as unreadable."""
    from transformers import AutoConfig

    try:
        tok = _tokenizer_fingerprint(load_tokenizer(path))
    except ModelLoadError:
        tok = "unreadable"
    model = json.dumps(_model_config(AutoConfig.from_pretrained(path)), sort_keys=True, default=str)
    return Serves(model, tok, tuple(_gen_eos(_generation_config(path))), "", "", ())


def unservable(cfg: Any, base: str | Path, path: str | Path) -> list[str]:
    """What keeps the run's vLLM engine, built for the model folder ``base`` (``model.path``), from
    serving the model folder ``path`` (a judge, a diagnoser), in words: its architecture or shapes,
    context, rope, tokenizer or generation EOS ids differ (e.g. Qwen3-4B-Instruct-2507 beside
    Qwen3-4B-Base: EOS id, context 262144 vs 32768, rope theta 5e6 vs 1e6). Empty when it can
    serve it, when the run's engine is not vLLM (``vllm_kind``), or when ``path`` is a LoRA
    adapter checkpoint (of the base). Reads configs and tokenizers only; vLLM need not be here."""
    folders = [Path(base), Path(path)]
    if not vllm_kind(cfg) or not all((f / "config.json").is_file() for f in folders):
        return []
    a, b = (
        _folder_serves(str(f.resolve()), tuple(g.stat().st_mtime for g in sorted(f.glob("*.json")))) for f in folders
    )
    return b.differences(a)


def unservable_frozen(cfg: Any) -> list[tuple[str, str, list[str]]]:
    """(field, folder, differences) of every frozen model folder the run ``cfg`` loads (a judge,
    DiagEvo's diagnoser) that its vLLM engine cannot serve (``unservable``); empty without a
    real ``model.path`` or a vLLM engine."""
    base = getattr(cfg.model, "path", None)
    if base is None or not vllm_kind(cfg.engine):
        return []
    out = []
    for field, path in frozen_folders(cfg):
        diff = unservable(cfg.engine, base, path)
        if diff:
            out.append((field, path, diff))
    return out


def frozen_folders(cfg: Any) -> list[tuple[str, str]]:
    """(field, folder) of the frozen model folders the run ``cfg`` loads besides its roles:
    DiagEvo's diagnosis model and D²Evo's judge (when the label verifier asks one)."""
    out = []
    diag = getattr(cfg, "diagnosis_model_path", None)
    if callable(diag) and diag() is not None:
        out.append(("diagnoser.model_path", str(diag())))
    buf = getattr(cfg, "buffer", None)
    if getattr(buf, "verifier", None) == "judge" and getattr(buf, "judge_model_path", None):
        out.append(("buffer.judge_model_path", str(buf.judge_model_path)))
    return out


__all__ = ["frozen_folders", "unservable", "unservable_frozen", "vllm_kind"]
