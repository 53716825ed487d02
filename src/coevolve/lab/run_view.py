"""The read-only view of a run folder, the one place above the library that opens a run's files:
the report, the compare, the study, ``coevolve export`` and ``coevolve memory`` read through it.
``load_run`` (metrics.jsonl, summary.json, state.json's phases, the rounds' pass rates) into
``RunData``, and the series drawn from it (per round, per step, held-out accuracy, pass-rate
histograms, phase and grader totals, probe signals, accuracy against compute); the saved files one
by one (``read_state``, ``read_summary``, ``read_config``, ``read_saved_run``), what a folder is
(``is_run_folder``, ``run_status``) and its evaluations (``final_results``, ``eval_items``). Nothing
here writes."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from coevolve.errors import DataError, RunStateError
from coevolve.eval.suite import load_results
from coevolve.jsonl import iter_jsonl
from coevolve.memory.store import MEMORY_FILE
from coevolve.run import CONFIG_FILE, METRICS_FILE, STATE_FILE, SUMMARY_FILE, eval_folder
from coevolve.run import eval_items as eval_items  # the run library's reader, part of this view
from coevolve.run.compute import EVAL_PHASE, Compute, cumulative
from coevolve.run.state import PhaseRecord

_ROUND_DIR = re.compile(r"^round_(\d+)$")
FINAL = -1
"""Key of the pass rates measured after the last round (``final/difficulty.jsonl``)."""


@dataclass
class RunData:
    """Everything the report reads from a run folder.

    ``rows`` are the metrics.jsonl objects in file order; ``bad_lines`` the ``file:line`` of
    lines that were not JSON objects (e.g. the partial last line of a killed run), which the
    report lists instead of failing; ``difficulty`` maps round -> pass rates read from
    ``round_NN/difficulty.jsonl`` (``FINAL`` for ``final/difficulty.jsonl``); ``records`` the
    finished phases of ``state.json`` (empty when the folder has none or it is unreadable).
    """

    path: Path
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    difficulty: dict[int, list[float]] = field(default_factory=dict)
    bad_lines: list[str] = field(default_factory=list)
    records: list[PhaseRecord] = field(default_factory=list)


def round_of(row: dict[str, Any]) -> int:
    """A metrics row's ``round`` (0 when it has none or it is not a number)."""
    r = row.get("round")
    try:
        return int(r) if r is not None else 0
    except (TypeError, ValueError):
        return 0


def number(v: Any) -> float | None:
    """``v`` as a finite float; None for a bool, a non-number, NaN or infinity."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def load_run(run_dir: Path) -> RunData:
    """Read metrics.jsonl, summary.json and round_NN/difficulty.jsonl from ``run_dir``.

    Raises ``RunStateError`` when the folder has neither metrics.jsonl nor summary.json and
    ``DataError`` (naming the file) when summary.json is not valid JSON.
    """
    run_dir = Path(run_dir)
    mpath, spath = run_dir / METRICS_FILE, run_dir / SUMMARY_FILE
    if not run_dir.is_dir() or (not mpath.exists() and not spath.exists()):
        raise RunStateError(f"{run_dir}: not a run folder (no {METRICS_FILE} or {SUMMARY_FILE})")
    bad: list[str] = []
    rows = [obj for _, obj in iter_jsonl(mpath, on_error="skip", problems=bad)] if mpath.exists() else []
    summary = read_summary(run_dir) or {}
    difficulty: dict[int, list[float]] = {}
    folders = [(int(m.group(1)), d) for d in sorted(run_dir.iterdir()) if (m := _ROUND_DIR.match(d.name))]
    for rnd, d in folders + [(FINAL, run_dir / "final")]:
        if not (d / "difficulty.jsonl").is_file():
            continue
        rates = [
            v
            for _, obj in iter_jsonl(d / "difficulty.jsonl", on_error="skip", problems=bad)
            if (v := number(obj.get("pass_rate"))) is not None
        ]
        if rates:
            difficulty[rnd] = rates
    return RunData(run_dir, rows, summary, difficulty, bad, _phase_records(run_dir / STATE_FILE, bad))


def _phase_records(path: Path, bad: list[str]) -> list[PhaseRecord]:
    """Finished phases from ``state.json``; a missing file gives none, an unreadable one is
    listed with the skipped lines (the report still draws what metrics.jsonl has)."""
    if not path.is_file():
        return []
    try:
        phases = json.loads(path.read_text(encoding="utf-8")).get("phases", [])
        names = {f.name for f in fields(PhaseRecord)}
        return [PhaseRecord(**{k: v for k, v in p.items() if k in names}) for p in phases]
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError) as e:
        bad.append(f"{path}: unreadable ({e})")
        return []


@dataclass(frozen=True)
class ComputePoint:
    """One evaluation of a run against the compute spent to reach it: held-out ``greedy`` /
    ``sampled`` accuracy on ``bench`` at phase ``key``, with the run's cumulative ``train``
    compute (every non-evaluation phase finished before it) and ``eval`` compute (evaluation
    phases up to and including it); see ``coevolve.run.compute`` for the counters."""

    run: str
    key: str
    bench: str
    greedy: float | None
    sampled: float | None
    train: Compute
    eval: Compute


def compute_curve(data: RunData, name: str | None = None) -> list[ComputePoint] | None:
    """Every held-out evaluation of the run with its cumulative compute, in finishing order;
    None when the run's phases carry no compute (made before the counters existed, or no
    state.json)."""
    points = cumulative(data.records) if data.records else None
    if points is None:
        return None
    label = name or data.path.name
    out = []
    for rec, pt in zip(data.records, points):
        if rec.name != EVAL_PHASE:
            continue
        ev = rec.values.get("eval") if isinstance(rec.values.get("eval"), dict) else {}
        for bench, vals in ev.items():
            if isinstance(vals, dict):
                out.append(
                    ComputePoint(
                        label,
                        rec.key,
                        bench,
                        number(vals.get("greedy")),
                        number(vals.get("sampled")),
                        pt.train,
                        pt.eval,
                    )
                )
    return out


def per_round(rows: Iterable[dict[str, Any]], key: str, agg: str = "last") -> dict[int, float]:
    """round -> value of ``key`` (``last`` logged value or ``mean`` of the round's values)."""
    acc: dict[int, list[float]] = {}
    for r in rows:
        v = number(r.get(key))
        if v is not None:
            acc.setdefault(round_of(r), []).append(v)
    if agg == "mean":
        return {k: sum(v) / len(v) for k, v in sorted(acc.items())}
    return {k: v[-1] for k, v in sorted(acc.items())}


def per_step(rows: Iterable[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[int]]:
    """(cumulative update index, values, rounds) of every row that logs ``key``.

    Steps restart in each round in some recipes, so the x axis is the running count of rows
    with the key; rounds are returned so round boundaries can be drawn.
    """
    xs: list[int] = []
    ys: list[float] = []
    rs: list[int] = []
    for r in rows:
        v = number(r.get(key))
        if v is not None:
            xs.append(len(xs))
            ys.append(v)
            rs.append(round_of(r))
    return xs, ys, rs


def eval_series(data: RunData) -> dict[str, dict[int, float]]:
    """``"<bench>/<greedy|sampled>"`` -> {round: accuracy} from metrics, filled from summary.json.

    Base evaluation counts as round 0; summary ``final`` fills the run's last round when the
    metrics have no value there (metrics win when both exist).
    """
    out: dict[str, dict[int, float]] = {}
    for key in sorted({k for r in data.rows for k in r if k.startswith("eval/")}):
        parts = key.split("/")
        if len(parts) == 3:
            s = per_round(data.rows, key)
            if s:
                out[f"{parts[1]}/{parts[2]}"] = s
    ev = data.summary.get("eval") if isinstance(data.summary.get("eval"), dict) else {}
    staged: list[tuple[int | None, Any]] = [(0, ev.get("base"))]
    rounds = ev.get("rounds") if isinstance(ev.get("rounds"), dict) else {}
    for rk, val in rounds.items():
        try:
            staged.append((int(rk), val))
        except ValueError:
            continue
    staged.append((None, ev.get("final")))
    logged = [round_of(r) for r in data.rows if r.get("round") is not None]
    last_round = max(logged + [int(r) for r, _ in staged if r is not None], default=0)
    for rnd, block in staged:
        if not isinstance(block, dict):
            continue
        for bench, vals in block.items():
            if not isinstance(vals, dict):
                continue
            for kind in ("greedy", "sampled"):
                v = number(vals.get(kind))
                if v is None:
                    continue
                s = out.setdefault(f"{bench}/{kind}", {})
                if rnd is None:
                    s.setdefault(last_round, v)
                else:
                    s.setdefault(rnd, v)
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def pass_rate_hists(data: RunData) -> dict[int, tuple[list[float], list[float]]]:
    """round -> (counts, edges) from ``curriculum/pass_rate_hist`` (+ ``curriculum/hist_edges``),
    else from ``round_NN/difficulty.jsonl`` pass rates binned on [0, 1] in 10 bins."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for r in data.rows:
        counts = r.get("curriculum/pass_rate_hist")
        if not isinstance(counts, list) or not counts:
            continue
        c = [float(x) for x in counts if number(x) is not None]
        edges = r.get("curriculum/hist_edges")
        if isinstance(edges, list) and len(edges) == len(c) + 1:
            e = [float(x) for x in edges]
        else:
            e = [i / len(c) for i in range(len(c) + 1)]
        out[round_of(r)] = (c, e)
    for rnd, rates in data.difficulty.items():
        if rnd in out:
            continue
        e = [i / 10 for i in range(11)]
        c = [0.0] * 10
        for p in rates:
            c[min(9, max(0, int(p * 10)))] += 1
        out[rnd] = (c, e)
    return dict(sorted(out.items()))


def phase_totals(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """phase name -> {"seconds": total, "rollouts": total} summed over all rounds."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        for k, v in r.items():
            m = re.match(r"^phase/(.+)/(seconds|rollouts)$", k)
            val = number(v)
            if m and val is not None:
                d = out.setdefault(m.group(1), {"seconds": 0.0, "rollouts": 0.0})
                d[m.group(2)] += val
    return out


GRADER_COUNTERS = ("timeouts", "errors", "refused", "memory", "calls", "worker_calls")
"""The grader counters each phase logs (``phase/<name>/grader_<counter>``, ``GraderStats.decided``)."""


def grader_totals(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """phase name -> {counter: total over all rounds} of the grader counters."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        for k, v in r.items():
            m = re.match(r"^phase/(.+)/grader_(\w+)$", k)
            val = number(v)
            if m and val is not None and m.group(2) in GRADER_COUNTERS:
                d = out.setdefault(m.group(1), dict.fromkeys(GRADER_COUNTERS, 0))
                d[m.group(2)] += int(val)
    return out


def signal_series(data: RunData) -> dict[str, dict[int, float]]:
    """Probe signal -> {round: value} (round 0: the base model), from ``probe/<signal>`` rows."""
    from coevolve.eval.signals import PROBE_PREFIX, SIGNAL_ORDER  # lazy: pulls scipy

    out = {name: per_round(data.rows, PROBE_PREFIX + name) for name in SIGNAL_ORDER}
    return {k: v for k, v in out.items() if v}


def true_accuracy(data: RunData) -> tuple[str, dict[int, float]] | None:
    """The held-out series the signals are drawn beside: the first greedy one."""
    ev = eval_series(data)
    name = next((k for k in ev if k.endswith("/greedy")), next(iter(ev), None))
    return None if name is None else (name, ev[name])


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """``summary.json`` as saved (the run's ``write_summary``); None when the run has none yet,
    ``DataError`` naming the file when it is not a JSON object."""
    spath = Path(run_dir) / SUMMARY_FILE
    try:
        loaded = json.loads(spath.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except json.JSONDecodeError as e:
        raise DataError(f"{spath}:{e.lineno}: invalid JSON ({e.msg})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{spath}: unreadable ({e})") from None
    if not isinstance(loaded, dict):
        raise DataError(f"{spath}: expected a JSON object")
    return loaded


def read_config(run_dir: Path) -> dict[str, Any] | None:
    """``config.yaml`` as saved (the resolved config that ran, not loaded into this version's
    config classes, so a run of another version reads too); None when there is none, ``DataError``
    naming the file when it is not YAML."""
    cpath = Path(run_dir) / CONFIG_FILE
    try:
        loaded = yaml.safe_load(cpath.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise DataError(f"{cpath}: unreadable ({e})") from None
    return loaded if isinstance(loaded, dict) else {}


def read_state(run_dir: Path) -> dict[str, Any]:
    """``state.json`` as saved (status, recipe, phases, checkpoint history); ``RunStateError``
    naming the folder when it is missing or not JSON."""
    try:
        loaded = json.loads((Path(run_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunStateError(f"{run_dir}: not a readable run folder ({e})") from None
    return loaded if isinstance(loaded, dict) else {}


def is_run_folder(path: Path) -> bool:
    """A coevolve run folder (``state.json`` and ``config.yaml``), as opposed to a result folder."""
    return (Path(path) / STATE_FILE).is_file() and (Path(path) / CONFIG_FILE).is_file()


def run_status(path: Path) -> str:
    """``finished`` (state.json says finished and summary.json holds a final evaluation),
    ``unfinished`` (a run folder to resume), ``empty`` (no folder, or one with no readable state.json)."""
    try:
        state = read_state(path)
    except RunStateError:
        return "empty"
    if state.get("status") != "finished":
        return "unfinished"
    try:
        summary = read_summary(path) or {}
    except DataError:
        return "unfinished"
    return "finished" if (summary.get("eval") or {}).get("final") else "unfinished"


def run_recipe(run_dir: Path) -> str:
    """The recipe of a run folder (summary.json, else state.json); "" when neither says."""
    try:
        return str((read_summary(run_dir) or {}).get("recipe") or read_state(run_dir).get("recipe", ""))
    except (DataError, RunStateError):
        return ""


def read_saved_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A summarised run folder's ``summary.json`` and ``config.yaml``, read as saved (a run made by
    another coevolve version reads as long as both are there); ``DataError`` naming what is
    missing or unreadable otherwise."""
    run_dir = Path(run_dir)
    summary, cfg = read_summary(run_dir), read_config(run_dir)
    for name, got in ((SUMMARY_FILE, summary), (CONFIG_FILE, cfg)):
        if got is None:
            raise DataError(
                f"{run_dir}: not a finished run folder (no {name}; `coevolve resume {run_dir}` finishes it)"
            )
    return summary, cfg  # type: ignore[return-value]


def final_results(run_dir: Path) -> dict[str, Any]:
    """``results.json`` of the evaluation a run's summary.json calls ``final``: the round
    ``run.select`` picked (summary ``selection``), else the last evaluation finished (state.json;
    also for a run not finished yet). ``DataError`` when the run has none."""
    chosen = ((read_summary(run_dir) or {}).get("selection") or {}).get("round")
    folder = eval_folder(run_dir, round_number=chosen if isinstance(chosen, int) else None)
    folder = folder or eval_folder(run_dir, "base")
    if folder is None:
        raise DataError(f"{run_dir}: run folder without a finished evaluation (no eval phase in {STATE_FILE})")
    return load_results(folder)


def memory_rounds(run_dir: Path) -> dict[int, Path]:
    """Round -> its saved error memory (``round_NN/memory.json``, written after the round's
    maintenance phase), ascending."""
    folders = [(int(m.group(1)), d) for d in sorted(Path(run_dir).iterdir()) if (m := _ROUND_DIR.match(d.name))]
    return {r: d / MEMORY_FILE for r, d in sorted(folders) if (d / MEMORY_FILE).is_file()}
