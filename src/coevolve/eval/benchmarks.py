"""Benchmark registry: how each held-out set is loaded, prompted, parsed and scored.

Why a registry: papers compare methods on fixed suites (math7 = AMC23, Minerva, MATH-500, GSM8K,
OlympiadBench, AIME24, AIME25; general = MMLU-Pro, SuperGPQA, GPQA-Diamond, BBEH), and the
numbers are only comparable when every run uses the same prompt, the same answer extraction and
the same metric. Three answer styles exist (``mc`` and ``bbeh`` in ``coevolve.eval.scoring``):

* ``math``  – the final answer, read as rewards and votes read it (``coevolve.answers.extract_answer``:
  the last ``\\boxed{}``, else an answer statement or the final sentence), is compared to the gold
  answer by the run's grader (symbolic/numeric equivalence);
* ``mc``    – multiple choice: the option letter from ``\\boxed{}`` or from "answer is (C)" /
  "Answer: C"; when no letter can be found the item is WRONG (never a random guess, unlike some
  official scripts, so that a model that stops answering cannot score 1/N by luck);
* ``bbeh``  – BIG-Bench Extra Hard's own normalised fuzzy exact match (re-implemented after
  google-deepmind/bbeh ``bbeh/evaluate.py``), with ``\\boxed{}`` taken first because our prompt
  asks for it.
The ``toy`` benchmark is the toy world's held-out set and ``arith`` the arith world's (natural-language
arithmetic for real models, graded as ``math``). Prompts come from the world's
``Prompter`` (``solver`` / ``choice``): the prompt a model is evaluated with is the one it was
trained with.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from coevolve.answers import extract_answer
from coevolve.data.sources import load_labelled_tasks
from coevolve.errors import ConfigError, DataError, did_you_mean
from coevolve.eval.scoring import bbeh_extract, extract_choice, grade_bbeh, grade_choice
from coevolve.jsonl import iter_jsonl
from coevolve.prompts import Prompter
from coevolve.prompts.chat import LETTERS
from coevolve.types import AnswerGrader, Task

# ----------------------------------------------------------------------------------------------
# loading


def rows_to_tasks(rows: Iterable[tuple[int, dict[str, Any]]], where: str, multiple_choice: bool) -> list[Task]:
    """Validate rows and turn them into Tasks; errors name ``where:line`` and the field.

    Every field other than id/question/answer/source goes into ``Task.features`` (level,
    subject, task, choices, ...). Multiple-choice rows need ``choices`` (list of >= 2 strings)
    and a letter ``answer`` inside the range.
    """
    tasks: list[Task] = []
    seen: set[str] = set()
    for lineno, r in rows:
        loc = f"{where}:{lineno}"
        for key in ("id", "question", "answer"):
            if key not in r or r[key] is None:
                raise DataError(f"{loc}: missing field '{key}'")
        if not isinstance(r["question"], str) or not r["question"].strip():
            raise DataError(f"{loc}: field 'question' must be a non-empty string")
        if not isinstance(r["answer"], (str, int, float)):
            raise DataError(f"{loc}: field 'answer' must be a string or number")
        tid = str(r["id"])
        if tid in seen:
            raise DataError(f"{loc}: duplicate id {tid!r}")
        seen.add(tid)
        answer = str(r["answer"]).strip()
        if multiple_choice:
            ch = r.get("choices")
            if not isinstance(ch, list) or len(ch) < 2 or not all(isinstance(c, str) for c in ch):
                raise DataError(f"{loc}: field 'choices' must be a list of >= 2 strings")
            if len(ch) > 26:
                raise DataError(f"{loc}: field 'choices' has {len(ch)} options (max 26)")
            answer = answer.upper()
            if answer not in LETTERS[: len(ch)]:
                raise DataError(f"{loc}: field 'answer' must be a letter A-{LETTERS[len(ch) - 1]}, got {answer!r}")
        feats = {k: v for k, v in r.items() if k not in ("id", "question", "answer", "source")}
        tasks.append(Task(tid, r["question"], answer, str(r.get("source", "")), feats))
    return tasks


@dataclass(frozen=True)
class Benchmark:
    """One registered benchmark.

    ``kind`` picks prompt/extraction/metric (math | mc | bbeh | toy); ``category`` picks the
    average it counts in (math | general | toy). ``folder``/``files`` locate it under a data
    dir; ``shipped`` names a file in ``coevolve/bench_data``; ``hub`` is the Hugging Face
    dataset used when neither exists (optional, needs ``datasets`` and network).
    ``default_samples`` is k for mean@k when the caller asks for the benchmark default
    (R-Zero: mean@32 on AIME/AMC; DiagEvo: on AMC). ``group_key`` is the feature used for the breakdown.
    ``answer_tokens`` is the typical length of a reasoning model's solution (a 4B base model
    reasoning step by step; toy: its short traces): a budget far below it cuts answers before
    their ``\\boxed{}``, and the run's preflight refuses that. ``items`` is the size of the public
    test set (supergpqa: the offline 300-question sample), what ``coevolve plan`` counts.
    """

    name: str
    kind: str
    category: str
    folder: str | None = None
    files: tuple[str, ...] = ("test.jsonl", "test.jsonl.gz")
    shipped: str | None = None
    hub: str | None = None
    default_samples: int = 0
    group_key: str = "level"
    note: str = ""
    answer_tokens: int = 600
    items: int = 500
    generator: str | None = None
    """``module:function`` returning the tasks of a benchmark a world generates (toy, arith)."""
    source: str | None = None
    """A user's benchmark file (``user_bench``), read by ``coevolve.data``'s readers with ``keys``."""
    keys: tuple[tuple[str, str], ...] = ()

    @property
    def multiple_choice(self) -> bool:
        return self.kind == "mc"

    def load(self, data_dir: Path | None = None, limit: int | None = None) -> list[Task]:
        """Same as ``load_tasks(self, data_dir, limit)``."""
        return load_tasks(self, data_dir, limit)


def _math(name: str, folder: str, items: int, k: int = 0, group: str = "level", tokens: int = 600) -> Benchmark:
    return Benchmark(
        name,
        "math",
        "math",
        folder=folder,
        shipped=f"{folder}.jsonl.gz",
        default_samples=k,
        group_key=group,
        answer_tokens=tokens,
        items=items,
    )


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        _math("gsm8k", "gsm8k", 1319, tokens=250),
        _math("math500", "math500", 500),
        _math("aime24", "aime24", 30, k=32, tokens=1500),
        _math("aime25", "aime25", 30, k=32, tokens=1500),
        _math("amc23", "amc23", 40, k=32, tokens=1000),
        _math("minerva", "minerva_math", 272),
        _math("olympiadbench", "olympiadbench", 675, tokens=1000),
        Benchmark(
            "mmlu_pro", "mc", "general", folder="mmlu_pro", hub="TIGER-Lab/MMLU-Pro", group_key="subject", items=12032
        ),
        Benchmark(
            "supergpqa",
            "mc",
            "general",
            folder="supergpqa",
            files=("test.jsonl", "test.jsonl.gz", "sample300.jsonl", "sample300.jsonl.gz"),
            hub="m-a-p/SuperGPQA",
            group_key="discipline",
            note="offline copy is the 300-question sample",
            items=300,
        ),
        Benchmark(
            "gpqa_diamond",
            "mc",
            "general",
            folder="gpqa_diamond",
            hub="Idavidrein/gpqa",
            group_key="subject",
            items=198,
        ),
        Benchmark("bbeh", "bbeh", "general", folder="bbeh", group_key="task", answer_tokens=1000, items=4520),
        Benchmark(
            "bbeh_mini",
            "bbeh",
            "general",
            folder="bbeh",
            files=("mini.jsonl", "mini.jsonl.gz"),
            group_key="task",
            answer_tokens=1000,
            items=460,
        ),
        Benchmark(
            "toy", "toy", "toy", group_key="level", answer_tokens=40, generator="coevolve.world.toy:heldout_tasks"
        ),
        Benchmark(
            "arith",
            "math",
            "arith",
            group_key="level",
            answer_tokens=40,
            generator="coevolve.world.arith:heldout_tasks",
        ),
        Benchmark(
            "arith_ladder",
            "math",
            "arith",
            group_key="level",
            answer_tokens=96,
            items=450,
            generator="coevolve.world.arith:ladder_tasks",
            note="the arith world's ladder L1-L9 (data.levels up to 9), 50 held-out items a level",
        ),
        Benchmark(
            "skill",
            "toy",
            "toy",
            group_key="focus",
            answer_tokens=60,
            generator="coevolve.world.skill.problems:heldout_tasks",
            note="the skill world's held-out strata (data.source=skill)",
        ),
    )
}

GROUPS: dict[str, tuple[str, ...]] = {
    "math7": ("amc23", "minerva", "math500", "gsm8k", "olympiadbench", "aime24", "aime25"),
    "general": ("mmlu_pro", "supergpqa", "gpqa_diamond", "bbeh"),
    # each paper's protocol as a named group; results.json reports each requested group's average
    "d2evo_math7": ("amc23", "minerva", "math500", "gsm8k", "olympiadbench", "aime24", "aime25"),  # D²Evo's 7
    "d2evo_general3": ("supergpqa", "mmlu_pro", "bbeh"),  # D²Evo's "General Avg" over 3
    # DiagEvo averages 5 math and 4 general benchmarks; its summary names AMC, GSM8K, MATH-500,
    # OlympiadBench, MMLU-Pro, GPQA-Diamond and BBEH "etc.": Minerva and SuperGPQA are our inference
    "diagevo_math5": ("amc23", "gsm8k", "math500", "olympiadbench", "minerva"),
    "diagevo_general4": ("mmlu_pro", "gpqa_diamond", "bbeh", "supergpqa"),
    "all": (
        "amc23",
        "minerva",
        "math500",
        "gsm8k",
        "olympiadbench",
        "aime24",
        "aime25",
        "mmlu_pro",
        "supergpqa",
        "gpqa_diamond",
        "bbeh",
    ),
    "toy": ("toy",),
    "arith": ("arith",),
    "arith_ladder": ("arith_ladder",),
    "skill": ("skill",),
}


USER_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
"""An ``eval.benches`` entry whose path ends so (``.gz`` allowed) is a user's benchmark file."""
USER_KEYS = {"question_key": "question", "answer_key": "answer", "answer_format": "auto"}
"""What a user's benchmark entry may set after its path, as ``data.*`` reads a source."""


def is_user_bench(entry: str) -> bool:
    return entry.split(":")[0].lower().removesuffix(".gz").endswith(USER_SUFFIXES)


def user_bench(entry: str) -> Benchmark:
    """A user's benchmark: ``path/to/file.jsonl`` (JSONL, JSON, CSV or Parquet, as ``data.source``
    reads them), optionally ``:question_key=K:answer_key=K:answer_format=F``; named by the file's
    stem, graded as math answers by the run's grader (``reward.function`` when set), its rows'
    other fields kept as features (``level`` groups the breakdown).

    >>> b = user_bench("my/mcq.jsonl:question_key=prompt:answer_key=label")
    >>> b.name, b.source, dict(b.keys)["question_key"]
    ('mcq', 'my/mcq.jsonl', 'prompt')
    """
    path, *opts = entry.split(":")
    keys = dict(USER_KEYS)
    for opt in opts:
        k, eq, v = opt.partition("=")
        if not eq or k not in USER_KEYS or not v:
            allowed = "".join(f":{k}=..." for k in USER_KEYS)
            raise ConfigError(f"eval.benches: {entry!r}: after the file comes {allowed}, got {opt!r}")
        keys[k] = v
    if keys["answer_format"] not in ("auto", "raw", "gsm8k", "boxed"):
        raise ConfigError(f"eval.benches: {entry!r}: answer_format must be auto, raw, gsm8k or boxed")
    name = Path(Path(path).name.lower().removesuffix(".gz")).stem
    if name in BENCHMARKS or name in GROUPS:
        raise ConfigError(f"eval.benches: {path}: its name {name!r} is a built-in benchmark's; rename the file")
    # answer_tokens 0: a user's answers have no length we know, so no eval budget is refused for them
    return Benchmark(name, "math", "user", source=path, keys=tuple(keys.items()), answer_tokens=0)


def resolve_benches(names: Sequence[str]) -> list[Benchmark]:
    """Expand group names (math7, general, all, toy) and comma lists; keep order, drop repeats;
    a path to a data file is a user's benchmark (``user_bench``).

    Raises ``ConfigError`` naming the unknown entry and listing the valid ones.
    """
    out: list[str] = []
    users: dict[str, Benchmark] = {}
    for raw in names:
        for name in (p.strip() for p in str(raw).split(",")):
            if not name:
                continue
            if is_user_bench(name):
                b = user_bench(name)
                if b.name in users and users[b.name].source != b.source:
                    raise ConfigError(f"eval.benches: two files named {b.name!r} ({users[b.name].source}, {b.source})")
                users[b.name] = b
                expanded: Sequence[str] = (b.name,)
            elif name in GROUPS:
                expanded = GROUPS[name]
            elif name in BENCHMARKS:
                expanded = (name,)
            else:
                raise ConfigError(
                    f"unknown benchmark {name!r}{did_you_mean(name, [*BENCHMARKS, *GROUPS])}; "
                    f"benchmarks: {', '.join(BENCHMARKS)}; groups: {', '.join(GROUPS)}"
                )
            out.extend(n for n in expanded if n not in out)
    if not out:
        raise ConfigError("no benchmark given")
    return [users.get(n) or BENCHMARKS[n] for n in out]


def _data_root(data_dir: Path | None) -> Path | None:
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get("COEVOLVE_DATA")
    return Path(env) if env else None


def find_data_file(bench: Benchmark, data_dir: Path | None) -> Path | None:
    """First existing ``<data_dir>/<folder>/<file>`` candidate, else None."""
    root = _data_root(data_dir)
    if root is None or bench.folder is None:
        return None
    for f in bench.files:
        p = root / bench.folder / f
        if p.is_file():
            return p
    return None


def load_tasks(bench: Benchmark | str, data_dir: Path | None = None, limit: int | None = None) -> list[Task]:
    """Tasks of one benchmark, first ``limit`` items (deterministic file order).

    Lookup order: ``data_dir`` (or ``$COEVOLVE_DATA``) ``/<folder>/<file>``, then the shipped
    copy, then the Hugging Face hub. Raises ``DataError`` naming what was tried.
    """
    b = BENCHMARKS[bench] if isinstance(bench, str) else bench
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    if b.source is not None:
        return _load_user(b, limit)
    if b.generator is not None:  # a generated world's held-out set (the world itself sizes it: eval.heldout_size)
        import importlib

        mod, _, fn = b.generator.partition(":")
        tasks = getattr(importlib.import_module(mod), fn)()
        return tasks if limit is None else tasks[:limit]
    path = find_data_file(b, data_dir)
    if path is not None:
        tasks = rows_to_tasks(iter_jsonl(path), str(path), b.multiple_choice)
    elif b.shipped is not None:
        res = resources.files("coevolve").joinpath("bench_data", b.shipped)
        where = f"coevolve/bench_data/{b.shipped}"
        try:
            data = res.read_bytes()
        except OSError as e:
            raise DataError(f"{where}: shipped data missing ({e})") from e
        tasks = rows_to_tasks(iter_jsonl(where, data=data), where, b.multiple_choice)
    else:
        tasks = _load_hub(b, data_dir)
    return tasks if limit is None else tasks[:limit]


def _load_user(b: Benchmark, limit: int | None) -> list[Task]:
    """A user's benchmark file through ``coevolve.data``'s readers (every row; a broken one is
    a ``DataError`` naming ``eval.benches``, the file and the row; a key to set is said as the
    entry's ``:key=...``)."""
    from types import SimpleNamespace

    where = f"eval.benches: benchmark {b.name} ({b.source})"
    if not Path(str(b.source)).is_file():
        raise DataError(f"{where}: no such file")
    data = SimpleNamespace(source=b.source, split="train", subset=None, on_error="raise", limit=limit, **dict(b.keys))
    try:
        tasks, report = load_labelled_tasks(data)
    except DataError as e:
        text = str(e).replace(" (set data.on_error=skip to skip broken rows)", "").replace("set data.", "add :")
        raise DataError(f"{where}: {text}") from None
    if not tasks:
        raise DataError(f"{where}: no usable rows ({report.rows} read)")
    return tasks


def _load_hub(b: Benchmark, data_dir: Path | None) -> list[Task]:
    """Optional fallback to the Hugging Face hub (needs ``datasets`` and network)."""
    root = _data_root(data_dir)
    tried = (
        ", ".join(str(root / (b.folder or b.name) / f) for f in b.files)
        if root is not None
        else "no --data-dir / $COEVOLVE_DATA given"
    )
    hint = (
        f"benchmark {b.name!r}: no data file found ({tried}); pass --data-dir or set "
        f"COEVOLVE_DATA to a folder with {b.folder}/{b.files[0]}"
    )
    if b.hub is None:
        raise DataError(hint)
    try:
        import datasets  # noqa: F401
    except ImportError as e:
        raise DataError(f"{hint} (the hub fallback needs the 'datasets' package)") from e
    try:
        rows = list(_hub_rows(b))
    except Exception as e:  # network/auth/format errors all mean "not available here"
        raise DataError(f"{hint}; hub dataset {b.hub!r} unavailable: {type(e).__name__}: {e}") from e
    return rows_to_tasks(((i + 1, r) for i, r in enumerate(rows)), f"hf:{b.hub}", True)


def _hub_rows(b: Benchmark) -> Iterable[dict[str, Any]]:
    """Convert hub rows to the offline layout (id, question, choices, answer letter, ...)."""
    from datasets import load_dataset

    if b.name == "mmlu_pro":
        for r in load_dataset(b.hub, split="test"):
            yield {
                "id": f"mmlu_pro-{r['question_id']}",
                "question": r["question"],
                "choices": list(r["options"]),
                "answer": r["answer"],
                "subject": r["category"],
            }
    elif b.name == "supergpqa":
        for r in load_dataset(b.hub, split="train"):
            yield {
                "id": r["uuid"],
                "question": r["question"],
                "choices": list(r["options"]),
                "answer": r["answer_letter"],
                "discipline": r["discipline"],
            }
    elif b.name == "gpqa_diamond":
        rng = random.Random(0)  # simple-evals' permutation, as in the offline copy
        for r in load_dataset(b.hub, "gpqa_diamond", split="train"):
            opts = [r["Correct Answer"], r["Incorrect Answer 1"], r["Incorrect Answer 2"], r["Incorrect Answer 3"]]
            opts = [str(o).strip() for o in opts]
            perm = rng.sample(range(4), 4)
            choices = [opts[i] for i in perm]
            yield {
                "id": r["Record ID"],
                "question": r["Question"],
                "choices": choices,
                "answer": LETTERS[choices.index(opts[0])],
                "subject": r.get("High-level domain", ""),
            }
    else:
        raise DataError(f"no hub conversion for {b.name!r}")


# ----------------------------------------------------------------------------------------------
# per-benchmark prompt and grader


def build_prompts(bench: Benchmark, tasks: Sequence[Task], prompter: Prompter) -> list[str]:
    """Prompt per task: the world's solver prompt, or its multiple-choice form (lettered options)."""
    if bench.kind == "mc":
        return [prompter.choice(t.question, t.features["choices"]) for t in tasks]
    return [prompter.solver(t.question) for t in tasks]


def grader_for(bench: Benchmark, grader: AnswerGrader) -> tuple[Callable[[str, str], bool], Callable[[str], Any]]:
    """(grade(gold, completion_text) -> bool, extract(text) -> recorded answer) of a benchmark;
    math answers go through ``grader`` (the run's, with its timeout)."""
    if bench.kind == "mc":
        return grade_choice, extract_choice
    if bench.kind == "bbeh":
        return grade_bbeh, bbeh_extract
    if bench.kind in ("math", "toy"):
        return grader.grade, extract_answer
    raise ConfigError(f"benchmark {bench.name!r}: unknown kind {bench.kind!r}")


def get(name: str) -> Benchmark:
    """The registered benchmark ``name``; ``ConfigError`` listing the valid names otherwise."""
    if name not in BENCHMARKS:
        raise ConfigError(
            f"unknown benchmark {name!r}; benchmarks: {', '.join(BENCHMARKS)}; groups: {', '.join(GROUPS)}"
        )
    return BENCHMARKS[name]
