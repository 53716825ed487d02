"""Core evaluation loop: greedy pass@1 and seeded mean@k over a list of tasks.

Every benchmark (toy held-out set, MATH-500, GPQA, BBEH, ...) goes through this one function (via
``coevolve.eval.suite.evaluate_suite``) so that recipes, the CLI and the tests measure accuracy
the same way. All generation goes through
the ``Sampler`` protocol in as few calls as possible (one greedy call and one sampling call per
task list, optionally chunked by ``curriculum.sampling.sample_chunked``, the one chunking helper:
chunk c draws with seed + c), because per-item calls waste the batching that makes evaluation
affordable.

With ``repeats`` R > 1 the sampled pass is drawn R times, each with its own seed
(``repeat_seed``), and mean@k is reported as mean ± sample std over the R runs (DiagEvo's
"mean ± std over 3 evaluation runs"); greedy decoding is deterministic, so it runs once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coevolve.curriculum.sampling import sample_chunked
from coevolve.errors import DataError
from coevolve.run import derive_seed
from coevolve.types import Completion, Sampler, SamplingParams, Stop, Task


def repeat_seed(seed: int, repeat: int) -> int:
    """Sampling seed of evaluation run ``repeat`` (0-based): run 0 keeps ``seed`` (so one run
    draws exactly as before repeats existed), run r > 0 draws with ``derive_seed(seed,
    "eval_repeat", r)``, the project's seed derivation, far from the chunk seeds seed + c."""
    if repeat == 0:
        return seed

    return derive_seed(seed, "eval_repeat", repeat)


def mean_std(xs_r: Sequence[float]) -> tuple[float, float | None]:
    """(mean, sample standard deviation) of R values: x̄ = Σ x_r / R and
    s = sqrt(Σ (x_r − x̄)² / (R − 1)) (ddof 1, the spread DiagEvo reports over its evaluation
    runs); s is None for a single value (no spread can be estimated from one run).

    >>> mean_std([0.25, 0.75])
    (0.5, 0.3535533905932738)
    """
    if not xs_r:
        raise ValueError("mean_std of no values")
    n = len(xs_r)
    mean = sum(xs_r) / n
    if n == 1:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs_r) / (n - 1))


GradeFn = Callable[[str, str], bool]
"""``grade(gold, completion_text) -> correct``."""

Extractor = Callable[[str], Any]
"""``extract(completion_text) -> answer or None`` (only used to record what was parsed)."""


@dataclass
class EvalResult:
    """Accuracy of one model on one task list.

    ``greedy`` is pass@1 with temperature 0; ``sampled`` is mean@k (the average over tasks of the
    fraction of ``samples`` T=1 samples that are correct), ``None`` when no samples were drawn.
    ``sampled_any`` is pass@k over the same samples (a task counts when any sample is correct).
    ``by_group`` maps ``str(task.features[group_key])`` to ``{"n", "greedy", "sampled"}`` when
    at least one task carries that feature (toy levels, MATH levels, BBEH tasks, ...).
    ``records`` has one dict per task in input order (see ``evaluate_tasks``).
    With R > 1 evaluation runs, ``sampled_runs`` holds each run's mean@k, ``sampled`` their mean
    and ``sampled_any`` the mean of the runs' pass@k; None with one run.
    """

    greedy: float
    sampled: float | None
    n: int
    records: list[dict[str, Any]]
    samples: int = 0
    sampled_any: float | None = None
    by_group: dict[str, dict[str, Any]] = field(default_factory=dict)
    sampled_runs: list[float] | None = None

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers without the per-item records (for results.json / metrics); with
        several runs also ``sampled_runs`` and ``sampled_std`` (sample std, ddof 1)."""
        out = {
            "n": self.n,
            "greedy": self.greedy,
            "sampled": self.sampled,
            "samples": self.samples,
            "sampled_any": self.sampled_any,
            "by_group": self.by_group,
        }
        if self.sampled_runs is not None:
            out["sampled_runs"] = self.sampled_runs
            out["sampled_std"] = mean_std(self.sampled_runs)[1]
        return out


def _check_eval_inputs(tasks: Sequence[Task], prompts: Sequence[str], samples: int, repeats: int) -> None:
    for t in tasks:
        if t.answer is None:
            raise DataError(f"task {t.id!r} (source {t.source or '?'}) has no gold answer")
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if len(prompts) != len(tasks):
        raise ValueError(f"{len(prompts)} prompts for {len(tasks)} tasks")


def _sampled_scores(records: list[dict], samples: int, repeats: int) -> tuple[float, float, list[float] | None]:
    """(mean@k, pass@k, each run's mean@k or None): over R > 1 runs, the mean of the runs' figures."""
    n = len(records)
    if repeats == 1:
        return (sum(r["sampled_acc"] for r in records) / n, sum(any(r["sampled_correct"]) for r in records) / n, None)
    sampled_runs = [sum(r["sampled_acc_runs"][j] for r in records) / n for j in range(repeats)]
    any_runs = [
        sum(any(r["sampled_correct"][j * samples : (j + 1) * samples]) for r in records) / n for j in range(repeats)
    ]
    return mean_std(sampled_runs)[0], mean_std(any_runs)[0], sampled_runs


def _sampled_runs(
    sampler: Sampler,
    prompts: list[str],
    samples: int,
    greedy_params: SamplingParams,
    chunk: int,
    repeats: int,
    seed: int,
    progress: bool,
) -> list[list[list[Completion]]]:
    """The R = ``repeats`` sampled passes (run r: ``samples`` T = 1 completions per prompt, seeded
    ``repeat_seed(seed, r)``; outer: runs, then prompts); none when ``samples`` is 0."""
    if samples == 0:
        return []
    return [
        sample_chunked(
            sampler,
            prompts,
            samples,
            replace(greedy_params, temperature=1.0, seed=repeat_seed(seed, r)),
            chunk,
            (f"mean@{samples}" + (f" run {r + 1}/{repeats}" if repeats > 1 else "")) if progress else None,
        )
        for r in range(repeats)
    ]


def evaluate_tasks(
    sampler: Sampler,
    tasks: Sequence[Task],
    prompts: Sequence[str],
    *,
    grade: GradeFn,
    extract: Extractor,
    samples: int = 0,
    max_new_tokens: int = 64,
    seed: int = 0,
    progress: bool = False,
    group_key: str = "level",
    batch_size: int | None = None,
    stop: Stop | None = None,
    repeats: int = 1,
) -> EvalResult:
    """Greedy pass@1 on every task, plus mean@``samples`` of T=1 samples when ``samples > 0``.

    ``prompts[i]`` is task i's prompt; ``grade(gold, completion_text)`` decides correctness and
    ``extract`` only fills the ``extracted`` record field (the benchmark supplies both); ``stop``
    ends completions as in training (the world's answer stops). Sampling is seeded with ``seed``
    so the same model gives the same mean@k; with ``repeats`` R > 1 the T=1 samples are drawn R
    times (run r seeded ``repeat_seed(seed, r)``) and the greedy pass still runs once (it is
    deterministic). ``batch_size`` splits the prompts into several
    sampler calls (a progress bar); by default one call, batched inside the sampler.

    Records: ``{"id", "question", "gold", "prompt", "output", "extracted", "correct",
    "finish_reason", "sampled_correct" (list[bool], only with samples; with R runs their R·k
    verdicts run after run), "sampled_acc" (over all of them), "sampled_acc_runs" (each run's
    fraction, only with R > 1), "group"}``.
    Raises ``DataError`` when a task has no gold answer (an evaluation set must be labelled).
    """
    tasks = list(tasks)
    prompt_list = list(prompts)
    _check_eval_inputs(tasks, prompt_list, samples, repeats)
    if not tasks:
        return EvalResult(greedy=0.0, sampled=None if samples == 0 else 0.0, n=0, records=[], samples=samples)
    greedy_params = SamplingParams(
        temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens, seed=seed, stop=stop or Stop()
    )
    chunk = batch_size if batch_size and 0 < batch_size < len(prompt_list) else len(prompt_list)
    greedy_out = sample_chunked(sampler, prompt_list, 1, greedy_params, chunk, "greedy" if progress else None)
    runs = _sampled_runs(sampler, prompt_list, samples, greedy_params, chunk, repeats, seed, progress)
    records = [
        _record(task, prompt, greedy_out[i][0], [run[i] for run in runs] if runs else None, grade, extract, group_key)
        for i, (task, prompt) in enumerate(zip(tasks, prompt_list))
    ]
    return _scores(records, samples, repeats, bool(runs))


def _scores(records: list[dict[str, Any]], samples: int, repeats: int, sampled: bool) -> EvalResult:
    """The ``EvalResult`` of the graded records: greedy pass@1, and with ``sampled`` mean@k and
    pass@k (over R runs: their means), overall and per group."""
    n = len(records)
    mean_k, any_k, runs = _sampled_scores(records, samples, repeats) if sampled else (None, None, None)
    return EvalResult(
        greedy=sum(r["correct"] for r in records) / n,
        sampled=mean_k,
        n=n,
        records=records,
        samples=samples,
        sampled_any=any_k,
        by_group=_by_group(records, sampled),
        sampled_runs=runs,
    )


def _record(
    task: Task,
    prompt: str,
    comp: Completion,
    sampled: list[list[Completion]] | None,
    grade: GradeFn,
    extract: Extractor,
    group_key: str,
) -> dict[str, Any]:
    """One task's evaluation record (``evaluate_tasks``): its greedy answer graded, and its
    samples' verdicts when there are any (``sampled``: one list of k completions per run)."""
    gold = str(task.answer)
    rec: dict[str, Any] = {
        "id": task.id,
        "question": task.question,
        "gold": gold,
        "prompt": prompt,
        "output": comp.text,
        "extracted": extract(comp.text),
        "correct": bool(grade(gold, comp.text)),
        "finish_reason": comp.finish_reason,
        "group": None if group_key not in task.features else str(task.features[group_key]),
    }
    if sampled is not None:
        by_run = [[bool(grade(gold, c.text)) for c in run] for run in sampled]
        verdicts = [v for run in by_run for v in run]
        rec["sampled_correct"] = verdicts
        rec["sampled_acc"] = sum(verdicts) / len(verdicts)
        if len(by_run) > 1:
            rec["sampled_acc_runs"] = [sum(run) / len(run) for run in by_run]
    return rec


def _by_group(records: list[dict[str, Any]], with_samples: bool) -> dict[str, dict[str, Any]]:
    """Per-group accuracy; groups sort numerically when they look like numbers (levels)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["group"] is not None:
            groups[r["group"]].append(r)

    def key(g: str) -> tuple[int, float, str]:
        try:
            return (0, float(g), g)
        except ValueError:
            return (1, 0.0, g)

    out: dict[str, dict[str, Any]] = {}
    for g in sorted(groups, key=key):
        rs = groups[g]
        out[g] = {
            "n": len(rs),
            "greedy": sum(r["correct"] for r in rs) / len(rs),
            "sampled": (sum(r["sampled_acc"] for r in rs) / len(rs)) if with_samples else None,
        }
    return out
