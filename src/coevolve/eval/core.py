"""Core evaluation loop: greedy pass@1 and seeded mean@k over a list of tasks.

Every benchmark (toy held-out set, MATH-500, GPQA, BBEH, ...) goes through this one function (via
``coevolve.eval.suite.evaluate_suite``) so that recipes, the CLI and the tests measure accuracy
the same way. All generation goes through
the ``Sampler`` protocol in as few calls as possible (one greedy call and one sampling call per
task list, optionally chunked by ``curriculum.sampling.sample_chunked``, the one chunking helper:
chunk c draws with seed + c), because per-item calls waste the batching that makes evaluation
affordable.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from coevolve.curriculum.sampling import sample_chunked
from coevolve.errors import DataError
from coevolve.types import Completion, Sampler, SamplingParams, Stop, Task

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
    """

    greedy: float
    sampled: float | None
    n: int
    records: list[dict[str, Any]]
    samples: int = 0
    sampled_any: float | None = None
    by_group: dict[str, dict[str, Any]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers without the per-item records (for results.json / metrics)."""
        return {"n": self.n, "greedy": self.greedy, "sampled": self.sampled, "samples": self.samples,
                "sampled_any": self.sampled_any, "by_group": self.by_group}


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
) -> EvalResult:
    """Greedy pass@1 on every task, plus mean@``samples`` of T=1 samples when ``samples > 0``.

    ``prompts[i]`` is task i's prompt; ``grade(gold, completion_text)`` decides correctness and
    ``extract`` only fills the ``extracted`` record field (the benchmark supplies both); ``stop``
    ends completions as in training (the world's answer stops). Sampling is seeded with ``seed``
    so the same model gives the same mean@k. ``batch_size`` splits the prompts into several
    sampler calls (a progress bar); by default one call, batched inside the sampler.

    Records: ``{"id", "question", "gold", "prompt", "output", "extracted", "correct",
    "finish_reason", "sampled_correct" (list[bool], only with samples), "sampled_acc", "group"}``.
    Raises ``DataError`` when a task has no gold answer (an evaluation set must be labelled).
    """
    tasks = list(tasks)
    prompt_list = list(prompts)
    for t in tasks:
        if t.answer is None:
            raise DataError(f"task {t.id!r} (source {t.source or '?'}) has no gold answer")
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    if len(prompt_list) != len(tasks):
        raise ValueError(f"{len(prompt_list)} prompts for {len(tasks)} tasks")
    if not tasks:
        return EvalResult(greedy=0.0, sampled=None if samples == 0 else 0.0, n=0, records=[], samples=samples)
    greedy_params = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens, seed=seed,
                                   stop=stop or Stop())
    chunk = batch_size if batch_size and 0 < batch_size < len(prompt_list) else len(prompt_list)
    greedy_out = sample_chunked(sampler, prompt_list, 1, greedy_params, chunk, "greedy" if progress else None)
    sampled_out = None if samples == 0 else sample_chunked(
        sampler, prompt_list, samples, replace(greedy_params, temperature=1.0), chunk, f"mean@{samples}" if progress else None)

    records = [_record(task, prompt, greedy_out[i][0], None if sampled_out is None else sampled_out[i], grade, extract,
                       group_key) for i, (task, prompt) in enumerate(zip(tasks, prompt_list))]
    n = len(records)
    return EvalResult(
        greedy=sum(r["correct"] for r in records) / n,
        sampled=None if sampled_out is None else sum(r["sampled_acc"] for r in records) / n,
        n=n,
        records=records,
        samples=samples,
        sampled_any=None if sampled_out is None else sum(any(r["sampled_correct"]) for r in records) / n,
        by_group=_by_group(records, sampled_out is not None),
    )


def _record(task: Task, prompt: str, comp: Completion, sampled: list[Completion] | None, grade: GradeFn,
            extract: Extractor, group_key: str) -> dict[str, Any]:
    """One task's evaluation record (``evaluate_tasks``): its greedy answer graded, and its
    samples' verdicts when there are any."""
    gold = str(task.answer)
    rec: dict[str, Any] = {
        "id": task.id, "question": task.question, "gold": gold, "prompt": prompt, "output": comp.text,
        "extracted": extract(comp.text), "correct": bool(grade(gold, comp.text)), "finish_reason": comp.finish_reason,
        "group": None if group_key not in task.features else str(task.features[group_key]),
    }
    if sampled is not None:
        verdicts = [bool(grade(gold, c.text)) for c in sampled]
        rec["sampled_correct"] = verdicts
        rec["sampled_acc"] = sum(verdicts) / len(verdicts)
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
