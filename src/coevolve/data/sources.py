"""Labelled questions in the forms the field hands them in, read into one shape (``Task``).

``data.source`` may name

* a JSONL / JSONL.gz file (one JSON object per line; the project's own format),
* a JSON file holding a list of objects, or a CSV file with a header row,
* a Parquet file (the Hub's and verl's format; needs ``pyarrow``),
* a folder written by ``datasets``' ``save_to_disk`` (a ``DatasetDict`` gives ``data.split``), or
  any folder ``datasets.load_dataset`` reads (a Hub snapshot of Parquet / JSON files),
* a Hub dataset id (``openai/gsm8k``, with ``data.subset`` / ``data.split``), read through
  ``datasets`` from the local Hugging Face cache first (``hf download --repo-type dataset`` or an
  earlier ``load_dataset`` fills it); only when it is not cached and ``HF_HUB_OFFLINE`` is unset
  does ``datasets`` download it.

Fields are mapped by config: ``data.question_key`` / ``data.answer_key`` name them, dotted for a
nested field (verl's ``reward_model.ground_truth``). A field holding chat messages (a list of
``{"role", "content"}``, TRL's conversational rows, verl's ``prompt``) stands for its last user turn
as the question and its last assistant turn as the answer. ``data.answer_format`` reads the final
answer out of a worked solution: GSM8K's ``#### 72``, MATH's last ``\\boxed{}``.

Every problem names the row (``file:line``, ``file row N``); ``data.on_error`` decides whether a
broken row stops the load or is skipped and reported. The run's preflight reads the source this
way before a run folder exists (``check_source``), so a source that cannot give questions costs
nothing.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from coevolve.answers.extract import last_boxed
from coevolve.errors import DataError, unparsable
from coevolve.jsonl import OnError, iter_jsonl
from coevolve.models import hub_cache_dir
from coevolve.types import Task

AnswerFormat = Literal["auto", "raw", "gsm8k", "boxed"]

SourceKind = Literal["jsonl", "json", "csv", "parquet", "disk", "folder", "hub"]

HUB_DATASET_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A Hub dataset id, ``owner/name``."""

QUESTION_NAMES = ("question", "problem", "prompt", "query", "input", "instruction", "messages", "conversations")
ANSWER_NAMES = (
    "answer",
    "solution",
    "ground_truth",
    "reward_model.ground_truth",
    "final_answer",
    "target",
    "output",
    "expected_answer",
    "label",
)
"""Field names other datasets use, offered in the message when the configured key is missing."""

GENERATED = ("toy", "arith", "skill")
"""``data.source`` values that name a generated world, not a file."""


def source_kind(source: str) -> SourceKind:
    """What ``source`` is: by suffix for a file, ``disk`` for a ``save_to_disk`` folder, ``folder``
    for any other folder, ``hub`` for an ``owner/name`` that is not a path here. A path that does
    not exist and is not a Hub id is a ``DataError``."""
    p = Path(source)
    if p.is_dir():
        marks = ("dataset_info.json", "state.json", "dataset_dict.json")
        return "disk" if any((p / m).is_file() for m in marks) else "folder"
    if p.is_file():
        name = p.name.lower().removesuffix(".gz")
        if name.endswith(".parquet"):
            return "parquet"
        if name.endswith(".csv"):
            return "csv"
        if name.endswith(".json"):
            return "json"
        return "jsonl"
    if HUB_DATASET_RE.fullmatch(source) and not source.endswith((".jsonl", ".json", ".gz", ".parquet", ".csv")):
        return "hub"
    raise DataError(
        f"data.source: dataset file {source} does not exist (a Hub dataset is named owner/name, e.g. openai/gsm8k)"
    )


def source_label(data: Any) -> str:
    """``data.source`` as messages name it: with ``[subset/split]`` for a dataset folder or Hub id."""
    source = str(data.source)
    if source in GENERATED or source_kind(source) not in ("disk", "folder", "hub"):
        return source
    subset = getattr(data, "subset", None)
    return f"{source}[{subset + '/' if subset else ''}{getattr(data, 'split', 'train')}]"


# ----------------------------------------------------------------------------------------------
# rows of each kind: (where, row) pairs


def iter_rows(data: Any, problems: list[str]) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for every row of ``data.source`` (``data``: the config's data section),
    ``where`` naming the row in messages. Rows that cannot be parsed are recorded in
    ``problems`` (JSONL: one line each) and skipped."""
    source = str(data.source)
    kind = source_kind(source)
    if kind == "jsonl":
        for lineno, row in iter_jsonl(source, on_error="skip", problems=problems):
            yield f"{source}:{lineno}", row
    elif kind == "json":
        yield from _json_rows(Path(source))
    elif kind == "csv":
        yield from _csv_rows(Path(source))
    elif kind == "parquet":
        yield from _parquet_rows(Path(source))
    else:
        ds, name = _dataset(data, kind)
        for i, row in enumerate(ds):
            yield f"{name} row {i + 1}", row


def _open_text(path: Path) -> str:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.lower().endswith(".gz") else path.read_bytes()
        return raw.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError(f"{path}: cannot read: {e}") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 (byte at offset {e.start})") from None


def _json_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """A JSON file holding a list of objects (or an object with one list of them, ``{"data":
    [...]}``), or JSON lines under a ``.json`` name."""
    text = _open_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # JSON lines under a .json name
            for lineno, row in iter_jsonl(path, data=text.encode("utf-8"), objects_only=False):
                yield f"{path}:{lineno}", row
            return
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
    except (ValueError, RecursionError) as e:
        raise DataError(f"{path}: not readable JSON: {unparsable(e)}") from None
    if isinstance(doc, dict):
        lists = [k for k, v in doc.items() if isinstance(v, list)]
        if len(lists) != 1:
            raise DataError(f"{path}: a JSON object, not a list of rows (give a list of objects, or JSON lines)")
        doc = doc[lists[0]]
    if not isinstance(doc, list):
        raise DataError(f"{path}: expected a list of JSON objects, got {type(doc).__name__}")
    for i, row in enumerate(doc):
        yield f"{path} item {i + 1}", row


def _csv_rows(path: Path) -> Iterator[tuple[str, Any]]:
    reader = csv.DictReader(io.StringIO(_open_text(path), newline=""))
    if not reader.fieldnames:
        raise DataError(f"{path}: empty CSV file (the first line must name the columns)")
    try:
        for row in reader:
            yield f"{path}:{reader.line_num}", {k: v for k, v in row.items() if k is not None}
    except csv.Error as e:  # a field over csv's 128 KiB limit, a NUL byte
        raise DataError(f"{path}:{reader.line_num + 1}: not readable CSV ({e})") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow (pip install 'coevolve[datasets]')") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise DataError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path} row {i + 1}", row


def _dataset(data: Any, kind: SourceKind) -> tuple[Any, str]:
    """A ``datasets.Dataset`` of ``data.source`` (a folder or a Hub id) at ``data.split``."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"data.source={data.source}: a dataset folder or a Hub dataset is read with the 'datasets' "
            "package: pip install 'coevolve[datasets]'"
        ) from None
    datasets.disable_progress_bars()  # the console is for coevolve's own progress
    source, subset, split = str(data.source), getattr(data, "subset", None), getattr(data, "split", "train")
    name = source_label(data)
    try:
        if kind == "disk":
            ds = datasets.load_from_disk(source)
        elif kind == "folder":
            ds = datasets.load_dataset(source, subset, split=split)
        else:
            ds = _hub_dataset(datasets, source, subset, split)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many types; each means "cannot be read as asked"
        raise DataError(f"data.source={source}: {_dataset_problem(e, subset, split)}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"data.source={source}: no split {split!r} (splits: {', '.join(ds)}); set data.split")
        ds = ds[split]
    return ds, name


def _hub_dataset(datasets: Any, name: str, subset: str | None, split: str) -> Any:
    """A Hub dataset from the local Hugging Face cache when it is there (read offline, as a
    folder), else through ``datasets`` (its own cache; a download unless ``HF_HUB_OFFLINE``)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(name, repo_type="dataset", local_files_only=True, cache_dir=str(hub_cache_dir()))
    except (LocalEntryNotFoundError, OSError, ValueError):
        folder = None
    if folder is not None:
        return datasets.load_dataset(folder, subset, split=split)
    try:
        return datasets.load_dataset(name, subset, split=split)
    except Exception as e:  # noqa: BLE001
        raise DataError(
            f"data.source={name}: not in the local Hugging Face cache ({hub_cache_dir()}) and not "
            f"loadable by datasets ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            f"download it where the Hub is reachable (`hf download {name} --repo-type dataset`) or give "
            "a file"
        ) from None


def _dataset_problem(e: Exception, subset: str | None, split: str) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "Unknown split" in text or "split" in text.lower() and split in text:
        return f"{text} (set data.split)"
    if "config" in text.lower() and ("name" in text.lower() or "missing" in text.lower()):
        return f"{text} (set data.subset{'' if subset is None else f', now {subset!r}'})"
    return f"{type(e).__name__}: {text}"


# ----------------------------------------------------------------------------------------------
# fields: dotted keys, chat messages, final answers


def field_value(row: dict[str, Any], key: str) -> Any:
    """``row[key]``, or for a dotted key the nested field (``reward_model.ground_truth``); None
    when absent."""
    if key in row:
        return row[key]
    node: Any = row
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def is_messages(value: Any) -> bool:
    """Chat messages: a non-empty list of ``{"role", "content"}`` (or ShareGPT's ``{"from", "value"}``)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) for m in value)
        and all(("role" in m and "content" in m) or ("from" in m and "value" in m) for m in value)
    )


def last_turn(messages: list[dict[str, Any]], roles: tuple[str, ...]) -> str | None:
    """Text of the last message whose role is one of ``roles``."""
    for m in reversed(messages):
        role = m.get("role", m.get("from"))
        if role in roles:
            content = m.get("content", m.get("value"))
            if isinstance(content, list):  # multimodal content parts: keep the text ones
                content = "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
            return content if isinstance(content, str) else None
    return None


_GSM8K_RE = re.compile(r"####\s*(.+?)\s*$", re.S)


def final_answer(text: str, fmt: AnswerFormat) -> str:
    """The final answer of a reference solution: ``raw`` as given; ``gsm8k`` after ``####``
    (commas of thousands dropped, as GSM8K's graders do); ``boxed`` the last ``\\boxed{}``;
    ``auto`` the first of these the text has.

    >>> final_answer("3 apples + 4 = 7 #### 7", "auto"), final_answer("so $\\\\boxed{\\\\frac12}$.", "auto")
    ('7', '\\\\frac12')
    >>> final_answer("1,234", "auto"), final_answer("#### 1,234", "gsm8k")
    ('1,234', '1234')
    """
    if fmt in ("auto", "gsm8k"):
        m = _GSM8K_RE.search(text)
        if m and "####" in text:
            return m.group(1).strip().replace(",", "")
        if fmt == "gsm8k":
            raise ValueError("no '#### answer' line")
    if fmt in ("auto", "boxed"):
        box = last_boxed(text)
        if box is not None:
            return box.strip()
        if fmt == "boxed":
            raise ValueError("no \\boxed{} answer")
    return text.strip()


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _suggest(row: dict[str, Any], key: str, names: tuple[str, ...], field: str) -> str:
    have = ", ".join(sorted(map(str, row))) or "none"
    hits = [n for n in names if n != key and field_value(row, n) is not None]
    hits += [str(n) for n, v in row.items() if n != key and is_messages(v)]  # chat rows: both turns in one field
    if hits and is_messages(row.get(hits[0])):
        hint = (
            f"; chat rows: set data.question_key={hits[0]} data.answer_key={hits[0]} (last user turn, last "
            "assistant turn)"
        )
    else:
        hint = f"; set data.{field}={hits[0]}" if hits else f"; set data.{field} to the field that holds it"
    return f" (this row's fields: {have}{hint})"


def _check_text(key: str, text: str) -> None:
    """A ``ValueError`` for text no tokenizer or file can take: a lone UTF-16 surrogate (JSON's
    ``"\\ud800"`` escape decodes to one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"field {key!r} holds a lone surrogate ({text[e.start]!r} at character {e.start + 1}), not Unicode text"
        ) from None


def row_task(where: str, row: Any, data: Any, require_answer: bool = True) -> Task:
    """One row as a ``Task``, or a ``ValueError`` saying what is wrong with it (field named)."""
    if not isinstance(row, dict):
        raise ValueError(f"expected an object with named fields, got {type(row).__name__}")
    qkey, akey = data.question_key, data.answer_key
    q = field_value(row, qkey)
    if is_messages(q):
        q = last_turn(q, ("user", "human"))
    if not isinstance(q, str) or not q.strip():
        raise ValueError(
            f"field {qkey!r} is missing or empty"
            + (_suggest(row, qkey, QUESTION_NAMES, "question_key") if field_value(row, qkey) is None else "")
        )
    _check_text(qkey, q)
    a = field_value(row, akey)
    if is_messages(a):
        a = last_turn(a, ("assistant", "gpt"))
    answer: str | None = None
    if a is not None and not (isinstance(a, str) and not a.strip()):
        if isinstance(a, (list, dict)):
            raise ValueError(f"field {akey!r} holds a {type(a).__name__}, not an answer")
        _check_text(akey, str(a))
        try:
            answer = final_answer(str(a), getattr(data, "answer_format", "auto"))
        except ValueError as e:
            raise ValueError(f"field {akey!r}: {e} (data.answer_format={data.answer_format})") from None
    elif require_answer:
        raise ValueError(
            f"field {akey!r} is missing or empty"
            + (_suggest(row, akey, ANSWER_NAMES, "answer_key") if a is None else "")
        )
    top = {qkey.split(".")[0], akey.split(".")[0], "id"}
    extra = {k: v for k, v in row.items() if k not in top and _json_safe(v)}
    return Task(id=str(row.get("id", where)), question=q, answer=answer, source=str(data.source), features=extra)


class LoadReport:
    """What a load read: rows seen, questions kept, the problems of the rows skipped."""

    def __init__(self, path: str):
        self.path = path
        self.rows = 0
        self.loaded = 0
        self.problems: list[str] = []


def load_labelled_tasks(data: Any, require_answer: bool = True) -> tuple[list[Task], LoadReport]:
    """Every usable row of ``data.source`` as a ``Task`` (first ``data.limit`` of them).

    ``data.on_error="raise"`` stops at the first broken row with its place and the problem (and,
    for a missing field, the row's fields and the key to set); ``"skip"`` records it in the report
    and goes on."""
    report = LoadReport(str(data.source))
    tasks: list[Task] = []
    hint = " (set data.on_error=skip to skip broken rows)"
    seen = 0

    def check() -> None:
        nonlocal seen
        if data.on_error == "raise" and len(report.problems) > seen:
            raise DataError(report.problems[seen] + hint)
        seen = len(report.problems)

    for where, row in iter_rows(data, report.problems):
        check()
        if data.limit is not None and len(tasks) >= data.limit:
            break
        report.rows += 1
        try:
            tasks.append(row_task(where, row, data, require_answer))
        except ValueError as e:
            report.problems.append(f"{where}: {e}")
        check()
    check()
    report.loaded = len(tasks)
    return tasks, report


def check_source(data: Any) -> tuple[list[Task], LoadReport]:
    """Read ``data.source`` as a run will, before anything is made: its tasks and the report, or a
    ``DataError`` naming the problem (nothing readable, no usable row, a broken row with
    ``on_error=raise``)."""
    tasks, report = load_labelled_tasks(data)
    if not tasks:
        first = f"; the first problem: {report.problems[0]}" if report.problems else ""
        raise DataError(f"data.source {source_label(data)}: no usable rows ({report.rows} read{first})")
    return tasks, report


def load_tasks(
    path: str | Path,
    *,
    question_key: str = "question",
    answer_key: str = "answer",
    on_error: OnError = "raise",
    limit: int | None = None,
    require_answer: bool = True,
) -> tuple[list[Task], LoadReport]:
    """Labelled tasks of a JSONL / JSONL.gz file (the project's own files), answers as written,
    through the one loader (``load_labelled_tasks``). Extra fields of each row go into
    ``Task.features``."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"dataset file {p} is a folder, not a JSONL file")
    if not p.is_file():
        raise DataError(f"dataset file {p} does not exist")
    data = SimpleNamespace(
        source=str(p),
        question_key=question_key,
        answer_key=answer_key,
        on_error=on_error,
        limit=limit,
        answer_format="raw",
    )
    return load_labelled_tasks(data, require_answer=require_answer)


__all__ = [
    "ANSWER_NAMES",
    "AnswerFormat",
    "GENERATED",
    "LoadReport",
    "QUESTION_NAMES",
    "check_source",
    "field_value",
    "final_answer",
    "is_messages",
    "iter_rows",
    "last_turn",
    "load_labelled_tasks",
    "load_tasks",
    "row_task",
    "source_kind",
    "source_label",
]
