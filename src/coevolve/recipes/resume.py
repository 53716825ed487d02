"""Resuming a run folder: the checks that a resume continues the run that was started (its phase
list, its config's print) and the extension of a run to more rounds or solver steps."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from coevolve.config import dump_yaml
from coevolve.config.load import read_yaml
from coevolve.config.sections import RecipeConfig
from coevolve.errors import ConfigError, RunStateError
from coevolve.recipes.registry import recipe_of
from coevolve.rl.learner import OPTIM_FILE
from coevolve.run import CONFIG_FILE, CONTINUED_KEY, Phase
from coevolve.run.files import atomic_write_text
from coevolve.run.state import MID_SAVE_KEY

PHASE_LIST_KEY = "phase_list"
"""state.json's list of the phase keys the recipe goes through (runs made before it was named so
saved it as ``plan``)."""


CONFIG_PRINT_KEY = "config_print"
"""state.json's hash per config field (dotted key) of the config the run was made with."""
SAFE_ON_RESUME = (
    "run.threads",
    "run.progress",
    "run.trackers",
    "run.wandb_project",
    "run.wandb_mode",
    "run.preflight",
    "run.name",
    "run.root",
    "run.save_every",
)
"""Config fields a resume may change: they decide how a run is shown or paced, not its results
(the ``EXTENDABLE`` fields change too when a resume extends the run)."""


def config_print(cfg: RecipeConfig) -> dict[str, str]:
    """A short hash of every result-relevant config field, by dotted key."""
    out: dict[str, str] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif not key.startswith(SAFE_ON_RESUME):
            text = json.dumps(value, sort_keys=True, ensure_ascii=True)
            out[key] = hashlib.sha256(text.encode()).hexdigest()[:16]

    walk(cfg.model_dump(mode="json"), "")
    return out


def check_config_print(cfg: RecipeConfig, run: Any, force: bool = False, extended: bool = False) -> list[str]:
    """Refuse a resume whose config (edited config.yaml, a ``run.seed=`` override) differs from
    the one the run was made with in a field outside ``SAFE_ON_RESUME`` (and ``EXTENDABLE`` when
    ``extended``), naming the fields, unless ``force``; save the current print either way (a run
    made before prints were kept gets one now). Returns what it says."""
    now, saved = config_print(cfg), run.state.data.get(CONFIG_PRINT_KEY)
    lines = []
    if saved is not None:
        changed = sorted(k for k in {*now, *saved} if now.get(k) != saved.get(k))
        if extended:
            changed = [k for k in changed if k not in EXTENDABLE]
        if changed:
            names = ", ".join(changed)
            names = names if len(names) <= 200 else names[:197] + "..."
            if not force:
                raise RunStateError(
                    f"{run.path}: the config differs from the one the run was made with in: {names}; "
                    "resume would no longer continue that run: undo the change, start a new run, or "
                    "resume with --force to go on with the changed config"
                )
            lines.append(f"--force: resuming with a config changed in: {names}")
    if saved != now:
        run.state.save({**run.state.data, CONFIG_PRINT_KEY: now})
    return lines


def check_phase_list(cfg: RecipeConfig, run: Any, force: bool = False) -> None:
    """Compare the phases the recipe goes through now (``Recipe.phase_list(cfg)``) with those
    saved in state.json when the run was made; refuse a resume that would not reproduce the run
    that was started (phases added, removed or reordered, listed) unless ``force``. Runs saved
    without a list are checked against their finished phases, which must be a prefix of it. The
    current list is saved either way."""
    planned = [p.key for p in recipe_of(cfg.recipe).phase_list(cfg)]
    saved = run.state.data.get(PHASE_LIST_KEY, run.state.data.get("plan"))
    done = [r.key for r in run.state.records()]
    if saved is None:
        changed = done != planned[: len(done)]
        saved = done
    else:
        changed = saved != planned
    if changed and not force:
        added = [k for k in planned if k not in saved]
        removed = [k for k in saved if k not in planned]
        detail = "; ".join(
            filter(
                None,
                [
                    f"added: {', '.join(added)}" if added else "",
                    f"removed: {', '.join(removed)}" if removed else "",
                    "" if added or removed else "same phases, another order",
                ],
            )
        )
        raise RunStateError(
            f"{run.path}: recipe {cfg.recipe!r} now goes through other phases than when this run was "
            f"made ({detail}); the resumed run would not be the run that was started. Resume with "
            "--force to run the new phase list anyway (finished phases are kept), or start a new run"
        )
    if run.state.data.get(PHASE_LIST_KEY) != planned:
        data = {k: v for k, v in run.state.data.items() if k != "plan"}
        run.state.save({**data, PHASE_LIST_KEY: planned})


EXTENDABLE = ("rounds", "solver.steps")
"""The fields ``coevolve resume`` may change besides ``run.*``: more rounds continue a run (every
finished round is kept); more solver steps continue its last solver phase (``extend_run``); any
other field would change phases already done."""


def extension_config(saved: RecipeConfig, overrides: list[str], wanted: RecipeConfig) -> str:
    """The config text a run extended to ``wanted`` keeps (its saved config with ``wanted``'s
    rounds and solver steps), after checking the extension: only ``EXTENDABLE`` fields among
    ``overrides`` (the non-``run.*`` ones), on a recipe that has rounds for ``rounds``, and no
    fewer rounds or steps than the run has."""

    keys = [o.split("=", 1)[0] for o in overrides]
    if bad := [k for k in keys if k not in EXTENDABLE]:
        raise ConfigError(
            f"{', '.join(bad)}: resume changes only run.* fields and extends a run by its rounds "
            "(rounds=N) or its solver steps (solver.steps=N); another setting would change phases "
            "already done: start a new run for it"
        )
    update: dict[str, Any] = {}
    if "rounds" in keys:
        if "rounds" not in type(saved).model_fields:
            raise ConfigError(
                f"rounds: a {saved.recipe} run has no rounds to extend; start a new run, or give its "
                "solver more steps (solver.steps=N)"
            )
        old, rounds = int(saved.rounds), int(wanted.rounds)
        if rounds < old:
            raise ConfigError(
                f"rounds={rounds} (command line): this run has {old} rounds; resume continues a run "
                "and cannot shorten it (export an earlier round's checkpoint instead)"
            )
        update["rounds"] = rounds
    if "solver.steps" in keys:
        old, steps = saved.solver.steps, wanted.solver.steps  # type: ignore[attr-defined]
        if steps < old:
            raise ConfigError(
                f"solver.steps={steps} (command line): this run's solver phases have {old} steps; resume "
                "continues a run and cannot shorten it"
            )
        if saved.learner.lr_schedule != "constant" and steps != old:
            raise ConfigError(
                f"solver.steps={steps} (command line) with learner.lr_schedule={saved.learner.lr_schedule}: the "
                f"schedule's horizon is the phase's {old} steps, so more steps would not be what a run of {steps} "
                "steps does; start a new run with solver.steps=" + str(steps)
            )
        update["solver"] = saved.solver.model_copy(update={"steps": steps})  # type: ignore[attr-defined]
    return dump_yaml(saved.model_copy(update=update))


def extend_run(cfg: RecipeConfig, run: Any, config_yaml: str, force: bool = False) -> list[str]:
    """Make ``run`` (finished or not) the start of the run ``cfg`` describes (more rounds, more
    solver steps): every phase done is kept, except

    - the solver phase done with fewer steps than ``cfg.solver.steps`` (``continuing``): it is
      continued from its checkpoint (weights, optimiser state) and its saved book at the step it
      reached, and the phases done after it (they only measured its result) run again; refused
      when a later phase trained on it (a run made at once would differ from there on), when it
      saved no book (``backend=verl``) or its checkpoint has no optimiser state;
    - the final stage's phases (they measure the last round): they run again at the end;
    - a mid-phase save (``run.save_every``) when phases are dropped: its phase comes after them.

    Dropped phases leave with their rows at the end of metrics.jsonl; the run's config and phase
    list become the extended run's. Refused, like a changed recipe (``check_phase_list``), unless
    the phases kept come first in the new list in the same order. Returns what it says."""

    planned = [p.key for p in recipe_of(cfg.recipe).phase_list(cfg)]
    records = run.state.records()
    _check_kept(run, planned, records, force)
    cont = continuing(cfg, run)
    more_rounds = getattr(cfg, "rounds", None) != run_config_value(run, "rounds")
    again = [r.key for r in records[records.index(cont) :]] if cont is not None else []
    final = [r.key for r in records if r.stage == "final" and r.key not in again]
    data = copy.deepcopy(run.state.data)
    rows = _cut_metrics(run, cont, data, again + final) if again or final else []
    if again or final:  # the unfinished phase a mid-phase save is for runs after them: it starts again
        data.pop(MID_SAVE_KEY, None)
    if cont is not None:
        data[CONTINUED_KEY] = {cont.key: _continued_entry(run, cont, rows)}
    atomic_write_text(run.path / CONFIG_FILE, config_yaml)
    run.state.save({**{k: v for k, v in data.items() if k != "plan"}, PHASE_LIST_KEY: planned})
    said = []
    if cont is not None:
        said.append(
            f"solver.steps={cfg.solver.steps}: {cont.key} continues at step {book_steps(run, cont)} from its "  # type: ignore[attr-defined]
            "checkpoint and optimiser state" + (f"; {', '.join(again[1:])} run again after it" if again[1:] else "")
        )
    if final or more_rounds:
        said.append(
            f"extended to {cfg.rounds} rounds"
            + (f": {', '.join(final)} run again after the last round" if final else "")
        )
    return said


def _check_kept(run: Any, planned: list[str], records: list[Any], force: bool) -> None:
    """Refuse (unless ``force``) an extension whose kept phases are not the start of ``planned``."""
    done = {r.key for r in records}
    saved = run.state.data.get(PHASE_LIST_KEY, run.state.data.get("plan")) or [r.key for r in records]
    # a round evaluation done as the old last round stays although the new schedule skips it
    kept = [k for k in saved if not k.startswith("final/") and (k in planned or k not in done)]
    kept = [k for k in kept if k in planned]
    if planned[: len(kept)] != kept and not force:
        raise RunStateError(
            f"{run.path}: the phases done are not the start of the extended run's phases ({len(kept)} "
            "kept, then a change); resume with --force to run the new list anyway, or start a new run"
        )


def _cut_metrics(run: Any, cont: Any, data: dict[str, Any], dropped: list[str]) -> list[dict[str, Any]]:
    """Cut metrics.jsonl after the rows that stay: the continued phase's steps (``cont``), else the
    last row of a round; ``data`` (the state) loses the ``dropped`` phases and gets the new size.
    Returns the rows as they were before the cut."""
    lines = run.metrics.path.read_text(encoding="utf-8").splitlines(keepends=True) if run.metrics.path.exists() else []
    rows = [json.loads(line) if line.strip() else {} for line in lines]
    if cont is not None:  # the continued phase keeps its steps' rows; its end and what followed go
        last = max(
            i
            for i, r in enumerate(rows)
            if r.get("round") == cont.round and r.get("phase") == cont.name and r.get("step") is not None
        )
    else:  # the final stage runs after every round: its rows are those after the last row of a round
        last = max((i for i, r in enumerate(rows) if r.get("round") is not None), default=len(lines) - 1)
    atomic_write_text(run.metrics.path, "".join(lines[: last + 1]))
    data["metrics_bytes"] = run.metrics.size()
    data["phases"] = [p for p in data["phases"] if p["key"] not in dropped]
    return rows


def _continued_entry(run: Any, cont: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """state.json's entry of the continued phase: its record, its book, and the grader's counters
    at its end (that row is cut: the continuation adds its own)."""
    return {
        "record": next(p for p in run.state.data["phases"] if p["key"] == cont.key),
        "book": read_book(run, cont),
        "grader": {
            k: v
            for r in rows
            if r.get("round") == cont.round and r.get("phase") == cont.name and r.get("step") is None
            for k, v in r.items()
            if k.startswith(f"phase/{cont.name}/grader_")
        },
    }


def read_book(run: Any, rec: Any) -> dict[str, Any] | None:
    """The book a finished GRPO phase saved (``training.book_file``; its name is the phase's),
    None when it saved none."""
    from coevolve.training import book_file  # lazy: pulls scipy (the training stack: only when a run is extended)

    f = book_file(run.path / Phase(rec.name, rec.round, rec.stage).folder, rec.name)
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else None


def book_steps(run: Any, rec: Any) -> int | None:
    """The steps a finished GRPO phase took (None when it saved no book)."""
    book = read_book(run, rec)
    return None if book is None else int(book["steps"])


def run_config_value(run: Any, *keys: str) -> Any:
    """A field of the config the run folder holds now (before an extension rewrites it)."""

    value: Any = read_yaml(run.path / CONFIG_FILE)
    for k in keys:
        value = value.get(k) if isinstance(value, dict) else None
    return value


def continuing(cfg: RecipeConfig, run: Any) -> Any:
    """The record of the solver phase of ``run`` that ``cfg.solver.steps`` continues (done with
    fewer steps), or None; ``RunStateError`` naming the phase when it cannot be continued into
    what a run made at once would hold: a later phase trained on it, it saved no book (another
    backend, an older coevolve), or its role's newest checkpoint lacks the optimiser state."""

    toy = cfg.model.path is None
    trains = {
        ph.key: step.work(cfg, toy).train for ph, step in recipe_of(cfg.recipe).schedule(cfg) if step.work is not None
    }
    records = run.state.records()
    steps = cfg.solver.steps  # type: ignore[attr-defined]
    if steps == run_config_value(run, "solver", "steps"):
        return None
    grow = [
        r
        for r in records
        if (t := trains.get(r.key)) is not None and t.section == "solver" and (book_steps(run, r) or 0) < steps
    ]
    if not grow:
        return None
    cont = grow[0]
    later = [r.key for r in records[records.index(cont) + 1 :] if trains.get(r.key) is not None]
    if later:
        raise RunStateError(
            f"solver.steps={steps}: {cont.key} is done and later phases trained on its result "
            f"({', '.join(later)}); a run made at once with {steps} steps would differ from "
            f"{cont.key} on: start a new run with solver.steps={steps}"
        )
    n = book_steps(run, cont)
    if n is None:
        raise RunStateError(
            f"solver.steps={steps}: {cont.key} left no record of its steps ({cont.name}_book.json: "
            "trained by backend=verl or by an older coevolve), so it cannot be continued: start a new "
            f"run with solver.steps={steps}"
        )
    role = trains[cont.key].role
    ckpt = run.checkpoint(role)
    if ckpt is None or not (ckpt / OPTIM_FILE).is_file():
        raise RunStateError(
            f"solver.steps={steps}: {cont.key} cannot be continued: the {role}'s checkpoint "
            f"{ckpt} has no optimiser state ({OPTIM_FILE}); start a new run with solver.steps={steps}"
        )
    return cont
