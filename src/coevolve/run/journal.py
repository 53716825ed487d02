"""Mid-phase saves of the question loops (``run.save_every``): the sampler calls of a phase that
does not train (difficulty, anchors, buffer, pool, memory, probe, evaluation), kept in order and
replayed on resume.

Such a phase is a function of its inputs and of what its samplers return (its samplers' weights
do not move while it runs; every other step of it, grading, voting, filtering, is exact). So a
save holds no state of the loop at all: only the completions of the calls made since the last
save (``calls.jsonl.gz``, a fingerprint of each call's prompts, count and decoding beside them)
and the process's random states. A resumed phase runs again from its start, each call answered
from the saves while they last (the same compute is counted), then live from the call after the
last save: the phase ends as if never interrupted, while the hours of sampling before the save
are not spent again. A save is due once ``save_every`` prompts were sampled since the last one,
at the end of the call that reached it (a call is never split: the loops' own chunks,
``sampling.batch_prompts`` prompts, set how finely a phase can be saved).

GRPO phases save their learner instead (``loop.grpo_train``): ``Setup.train`` stops the journal,
whose calls would no longer replay once the weights move.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coevolve.run.rng import random_states, set_random_states
from coevolve.types import Completion, SamplingParams

CALLS_FILE = "calls.jsonl.gz"
CALLS_SAVE = "calls"
"""The ``kind`` of a question loop's mid-phase save (its ``saved.json``)."""

SampleFn = Callable[[Sequence[str], int, SamplingParams], list[list[Completion]]]
Saver = Callable[[Callable[[Path], dict[str, Any]]], None]


def call_key(prompts: Sequence[str], n: int, params: SamplingParams) -> str:
    """A sampler call's fingerprint: its prompts, completions per prompt and decoding."""
    text = json.dumps([list(prompts), n, asdict(params)], sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class CallJournal:
    """The running phase's sampler calls (``MeteredSampler`` passes every call through ``call``):
    recorded and saved every ``every`` prompts through ``save`` (``Run.mid_save``), or answered
    from ``replay`` (the calls of the phase's saves) on resume. Off (every call live) until
    ``start`` arms it, and after ``stop``."""

    def __init__(self) -> None:
        self.on = False
        self.every = 0
        self.save: Saver | None = None
        self.replay: deque[tuple[str, list[list[Completion]]]] = deque()
        self.random: dict[str, Any] | None = None
        self.pending: list[tuple[str, list[list[Completion]]]] = []
        self.since = 0
        self.say: Callable[[str], None] = print

    def start(self, every: int, save: Saver, saved: dict[str, Any] | None, say: Callable[[str], None]) -> None:
        """Arm for a phase: ``saved`` (``ctx.saved`` of a question loop's save, with its ``chain``
        of folders) is what the phase replays first."""
        self.on, self.every, self.save, self.say = every > 0, every, save, say
        self.pending, self.since = [], 0
        self.replay, self.random = deque(), None
        if saved is not None and saved.get("kind") == CALLS_SAVE:
            for folder in saved["chain"]:
                self.replay.extend(read_calls(Path(folder) / CALLS_FILE))
            self.random = saved["random"]

    def stop(self) -> None:
        """Every call live and unrecorded from here to the phase's end (a GRPO phase)."""
        self.on, self.pending, self.replay = False, [], deque()

    def call(self, sample: SampleFn, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        if not self.on:
            return sample(prompts, n, params)
        key = call_key(prompts, n, params)
        if self.replay:
            saved_key, groups = self.replay[0]
            if saved_key == key:
                self.replay.popleft()
                if not self.replay and self.random is not None:
                    set_random_states(self.random)  # the generators as the last saved call left them
                return groups
            self.say(
                f"[warn] the phase asked for other completions than its mid-phase save holds ({len(self.replay)} "
                "saved calls left unused): it goes on live from here"
            )
            self.replay.clear()
        groups = sample(prompts, n, params)
        self.pending.append((key, groups))
        self.since += len(prompts)
        if self.since >= self.every:
            self.flush()
        return groups

    def flush(self) -> None:
        """Save the calls since the last save (a new link of the phase's chain of saves)."""
        if not self.pending or self.save is None:
            return
        calls = self.pending

        def write(folder: Path) -> dict[str, Any]:
            write_calls(folder / CALLS_FILE, calls)
            return {"kind": CALLS_SAVE, "calls": len(calls), "random": random_states()}

        self.save(write)
        self.pending, self.since = [], 0


def write_calls(path: Path, calls: list[tuple[str, list[list[Completion]]]]) -> None:
    """``calls`` as gzipped JSON lines (the folder is renamed into place whole: no temp file)."""
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as f:
        for key, groups in calls:
            f.write(json.dumps({"key": key, "groups": [[asdict(c) for c in g] for g in groups]}) + "\n")


def read_calls(path: Path) -> list[tuple[str, list[list[Completion]]]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r["key"], [[Completion(**c) for c in g] for g in r["groups"]]) for r in rows]
