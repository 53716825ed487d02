"""Kill -9 each recipe at many moments, resume every time, and check that the finished run equals
an uninterrupted run with the same seed.

    PYTHONPATH=src python dev/kill_fuzz.py --out runs/kill_fuzz [--recipes grpo,d2evo,diagevo]
        [--kills 20] [--seed 0] [--quick] [--save-every K]

Per recipe: one uninterrupted reference run (``coevolve run``, with ``COEVOLVE_FAULT=count:...``
to learn how often each write site is reached), then victim runs that are SIGKILLed, as a whole
process group (grader workers included), ``--kills`` times in all, each followed by
``coevolve resume``. Half of the kills come at a random time; the other half are fired by the
fault hook (``coevolve.faults``) at the n-th call, n random, of a random site that the
reference reached: an atomic write between its temp file and the rename (``write``), the
``state.json`` rewrite after a phase's last artefact (``state``), a metrics row, a rollout
batch, a checkpoint between model and optimiser state, an answer being graded. When a victim
finishes before all kills have landed it is compared and a new victim starts; a victim whose
phases are all done (summary and report left) is let finish rather than killed again.

``--save-every K`` runs reference and victims with mid-phase saves (``run.save_every=K``): kills
then land inside GRPO phases between saves (and, through the ``save`` site, inside a save), and
a resume goes on from the phase's last save (each kill records the save it resumes from); the
reference is also checked against one run without saves (only ``config.yaml`` may differ).

Comparison: every file of the finished victim against the reference, byte for byte, except
fields that measure time and so legitimately differ (``TIME_KEYS``: wall / phase seconds,
timestamps, the tracker id derived from the creation time, the byte length of the metrics log
whose rows carry timestamps), which are removed from the JSON
files before comparing, ``report/`` (plots and tables of those times) and ``run.lock`` (the
last holder's pid). Exit 0 when every victim equals its reference.

Configs (toy world, the cached toy base model): ``FUZZ`` below; ``--quick`` is the short version
the tests run. The figures go to ``<out>/kill_fuzz.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GRPO_TINY = [
    "solver.prompts_per_step=4",
    "solver.group_size=4",
    "eval.heldout_size=12",
    "eval.samples=2",
    "sampling.max_new_tokens=40",
    "eval.max_new_tokens=40",
]
COMMON = ["run.progress=false", "run.threads=1"]
FUZZ: dict[str, list[str]] = {  # recipe -> `coevolve run` arguments (a shortened toy config)
    "grpo": [*GRPO_TINY, "solver.steps=4"],
    "d2evo": ["-c", str(ROOT / "configs" / "d2evo_smoke.yaml")],
    "diagevo": ["-c", str(ROOT / "configs" / "diagevo_smoke.yaml"), "memory.embedder=hash"],
}
QUICK: dict[str, list[str]] = {
    "grpo": [*GRPO_TINY, "solver.steps=2"],
    "d2evo": ["-c", str(ROOT / "configs" / "d2evo_smoke.yaml"), "rounds=1", "difficulty.measure_final=false"],
    "diagevo": [
        "-c",
        str(ROOT / "configs" / "diagevo_smoke.yaml"),
        "rounds=1",
        "memory.embedder=hash",
        "eval.heldout_size=20",
        "pool.size=32",
        "solver.steps=1",
    ],
}
SAVES_QUICK: dict[str, list[str]] = {"grpo": ["solver.steps=4"]}
"""``--quick --save-every``: a grpo phase long enough for saves between its steps."""
TIME_KEYS = frozenset(
    {"time", "created", "finished", "tracker_id", "seconds", "wall_seconds", "started", "metrics_bytes", "digests"}
)
"""JSON keys that measure time (plus any key ending in ``seconds``): removed before comparing.
``metrics_bytes`` (state.json) is the byte length of a log whose rows hold timestamps, and a
phase record's ``digests`` hash files that hold some (the files themselves are compared)."""
SKIP = ("report/", "run.lock", "provenance.json", "run.log")  # provenance, run.log: the victim's list its resumes
SETUP_SHARE = 0.15  # of the random-time kills: inside a process's setup (imports, lock, model load)


@dataclass
class Kill:
    """One kill: how it was fired, and the phase that was running when it landed."""

    how: str  # "time:<seconds>" or "<site>:<n>"
    phase: str
    landed: bool  # False: the process finished (or failed) before the kill
    from_save: int | None = None  # the mid-phase save (its number) the resume goes on from


@dataclass
class RecipeReport:
    recipe: str
    args: list[str]
    reference_seconds: float
    site_calls: dict[str, int]
    kills: list[Kill] = field(default_factory=list)
    resumes: int = 0
    victims: int = 0
    identical: list[bool] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0
    saves_change_nothing: bool | None = None  # --save-every: the reference equals a run without saves


def _cli(args: list[str], log: Path, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    env.pop("COEVOLVE_FAULT", None)
    if fault:
        env["COEVOLVE_FAULT"] = fault
    with open(log, "a") as f:
        # A session of its own: `killpg` (and the `killgroup` fault) reach the grader workers too.
        return subprocess.Popen(
            [sys.executable, "-m", "coevolve", *args],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _state(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _running_phase(run: Path, plan: list[str]) -> str:
    """The first phase of ``plan`` not marked done: where an interrupted run stood."""
    st = _state(run)
    if not st:
        return "(setup: no state.json yet)"
    done = {p["key"] for p in st.get("phases", [])}
    return next((k for k in plan if k not in done), "(all phases done: summary/report)")


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIME_KEYS and not k.endswith("seconds")}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _normalised(path: Path) -> bytes | Any:
    if path.suffix == ".json":
        return _strip(json.loads(path.read_text()))
    if path.suffix == ".jsonl" and path.name == "metrics.jsonl":
        return [_strip(json.loads(x)) for x in path.read_text().splitlines() if x.strip()]
    return path.read_bytes()


def compare(ref: Path, victim: Path) -> list[str]:
    """Files that differ between two finished run folders (time fields and ``SKIP`` aside)."""

    def files(root: Path) -> set[str]:
        return {
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and not any(str(p.relative_to(root)).startswith(s) for s in SKIP)
        }

    a, b = files(ref), files(victim)
    out = [f"only in reference: {f}" for f in sorted(a - b)] + [f"only in victim: {f}" for f in sorted(b - a)]
    out += [f"differs: {f}" for f in sorted(a & b) if _normalised(ref / f) != _normalised(victim / f)]
    return out


def _site_calls(prefix: Path) -> dict[str, int]:
    """Calls per site of the reference run: the main process's, and the most of any worker's."""
    calls: dict[str, int] = {}
    for f in prefix.parent.glob(prefix.name + ".*"):
        for site, n in json.loads(f.read_text()).items():
            calls[site] = max(calls.get(site, 0), n)
    return calls


CACHED_BASE_EVAL = "the built-in base's evaluation with these settings, from"
"""What a run prints when its base evaluation comes from the built-in base's cache: its grader
counters are then 0 (no answer graded), where a run that filled the cache counts every call."""


def reference(recipe: str, args: list[str], out: Path) -> tuple[Path, dict[str, int], float, float]:
    """The uninterrupted run: its folder, site calls, wall seconds and setup seconds (until the
    first phase's folder appears: imports, lock, model load). A reference that filled the
    built-in base's evaluation cache is run once more, so that it reads the cache as every
    victim after it does (the victims are compared with it, not with a cold cache)."""
    log = out / f"{recipe}-reference.log"
    for _ in range(2):
        start = log.stat().st_size if log.exists() else 0
        got = _reference_once(recipe, args, out)
        with open(log, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            if CACHED_BASE_EVAL in f.read():
                break
        shutil.rmtree(got[0])
    return got


def _reference_once(recipe: str, args: list[str], out: Path) -> tuple[Path, dict[str, int], float, float]:
    run = out / f"{recipe}-reference"
    counts = out / f"{recipe}-counts"
    for old in out.glob(f"{recipe}-counts*"):
        old.unlink()
    t0 = time.time()
    p = _cli(
        ["run", recipe, *args, *COMMON, "--run-dir", str(run)], out / f"{recipe}-reference.log", fault=f"count:{counts}"
    )
    setup = None
    while p.poll() is None:
        if setup is None and (run / "base").is_dir():
            setup = time.time() - t0
        time.sleep(0.05)
    if p.returncode != 0:
        raise SystemExit(
            f"{recipe}: the reference run failed (exit {p.returncode}); see {out / f'{recipe}-reference.log'}"
        )
    wall = time.time() - t0
    return run, _site_calls(counts), wall, setup or wall / 2


IN_PHASE_SITES = ("rollouts", "save")
"""With mid-phase saves, a quarter of the kills go to one of these (a GRPO step's rollouts being
booked, a save being written): inside a phase, between or in its saves."""


def fuzz(recipe: str, args: list[str], out: Path, kills: int, rng: random.Random) -> RecipeReport:
    t0 = time.time()
    ref, calls, ref_s, setup_s = reference(recipe, args, out)
    plan = _state(ref).get("phase_list") or [p["key"] for p in _state(ref)["phases"]]
    rep = RecipeReport(recipe, args, round(ref_s, 1), calls)
    sites = sorted(s for s, n in calls.items() if n > 0)
    saves = any(a.startswith("run.save_every=") and a != "run.save_every=0" for a in args)
    in_phase = [s for s in IN_PHASE_SITES if calls.get(s)] if saves else []
    victim: Path | None = None
    log = out / f"{recipe}-victims.log"
    while True:
        if victim is None:
            rep.victims += 1
            victim = out / f"{recipe}-victim{rep.victims}"
        landed = sum(k.landed for k in rep.kills)
        done = len(_state(victim).get("phases", []))
        left = 1.0 - done / max(1, len(plan))
        how, fault, delay = "", None, None
        # A resume that only has the summary and report left is not killed again: the kills would
        # pile up in that tail (every relaunch reaches it at once); a victim gets there by finishing.
        if landed < kills and done < len(plan):
            pick = rng.random()
            if pick < 0.5:
                delay = (
                    rng.uniform(0.2, setup_s)
                    if rng.random() < SETUP_SHARE
                    else setup_s + rng.uniform(0, left * max(1.0, ref_s - setup_s))
                )
                how = f"time:{delay:.1f}s"
            else:
                site = rng.choice(in_phase if in_phase and pick < 0.75 else sites)
                n = rng.randint(1, max(1, round(calls[site] * left)))
                how, fault = f"{site}:{n}", f"{site}:{n}:killgroup"
        has_state = (victim / "state.json").is_file()
        cmd = ["resume", str(victim)] if has_state else ["run", recipe, *args, *COMMON, "--run-dir", str(victim)]
        rep.resumes += int(has_state)
        p = _cli(cmd, log, fault)
        if delay is not None:
            try:
                p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
        if how:
            mid = _state(victim).get("mid_phase_save")
            rep.kills.append(
                Kill(how, _running_phase(victim, plan), rc == -signal.SIGKILL, mid["number"] if mid else None)
            )
        if rc == 0:  # the victim finished: compare it, then (if kills are left) start a new one
            diff = compare(ref, victim)
            rep.identical.append(not diff)
            rep.differences += [f"victim{rep.victims}: {d}" for d in diff]
            if sum(k.landed for k in rep.kills) >= kills:
                break
            victim = None
        elif rc != -signal.SIGKILL:
            rep.differences.append(f"victim{rep.victims}: `coevolve {cmd[0]}` exited {rc} (see {log})")
            rep.identical.append(False)
            break
    rep.seconds = round(time.time() - t0, 1)
    return rep


def saves_change_nothing(recipe: str, args: list[str], ref: Path, out: Path) -> list[str]:
    """What differs between ``ref`` (a run with mid-phase saves) and the same run without them,
    but its config."""
    plain = [a for a in args if not a.startswith("run.save_every=")]
    out.mkdir(parents=True, exist_ok=True)
    other, *_ = reference(recipe, plain, out)
    return [d for d in compare(other, ref) if d != "differs: config.yaml"]


def table(reports: list[RecipeReport]) -> str:
    lines = [
        "| recipe | kills landed | by time / by site | resumed from a mid-phase save | resumes | victims | identical "
        "| wall s (reference s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        landed = [k for k in r.kills if k.landed]
        by_time = sum(k.how.startswith("time:") for k in landed)
        lines.append(
            f"| {r.recipe} | {len(landed)} | {by_time} / {len(landed) - by_time} | "
            f"{sum(k.from_save is not None for k in landed)} | {r.resumes} | {r.victims} | "
            f"{'yes' if r.identical and all(r.identical) else 'NO'} | {r.seconds} ({r.reference_seconds}) |"
        )
    lines.append("")
    for r in reports:
        where: dict[str, int] = {}
        for k in r.kills:
            if k.landed:
                key = f"{k.how.split(':')[0]} in {k.phase}" + (" after a save" if k.from_save is not None else "")
                where[key] = where.get(key, 0) + 1
        lines.append(f"{r.recipe}: site calls in the reference {r.site_calls}")
        lines.append(f"{r.recipe}: kills landed at " + ", ".join(f"{k} x{n}" for k, n in sorted(where.items())))
        if r.saves_change_nothing is not None:
            lines.append(f"{r.recipe}: the reference with mid-phase saves equals one without: {r.saves_change_nothing}")
        lines += [f"  {d}" for d in r.differences]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="Scratch folder for the runs and kill_fuzz.json")
    ap.add_argument("--recipes", default="grpo,d2evo,diagevo")
    ap.add_argument("--kills", type=int, default=20, help="Kills that must land per recipe")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the kill schedule (the runs keep their own seed)")
    ap.add_argument("--quick", action="store_true", help="The short configs the tests use")
    ap.add_argument(
        "--save-every", type=int, default=0, help="Mid-phase saves every K GRPO steps (run.save_every; 0 = none)"
    )
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    configs = QUICK if a.quick else FUZZ
    extra = [f"run.save_every={a.save_every}"] if a.save_every else []
    rng = random.Random(a.seed)
    reports = []
    for r in a.recipes.split(","):
        args = [*configs[r], *(SAVES_QUICK.get(r, []) if extra and a.quick else []), *extra]
        rep = fuzz(r, args, a.out, a.kills, rng)
        if extra:
            differ = saves_change_nothing(r, args, a.out / f"{r}-reference", a.out / "without_saves")
            rep.saves_change_nothing = not differ
            rep.differences += [f"without saves: {d}" for d in differ]
        reports.append(rep)
    (a.out / "kill_fuzz.json").write_text(json.dumps([asdict(r) for r in reports], indent=2))
    print(table(reports))
    ok = all(r.identical and all(r.identical) and r.saves_change_nothing is not False for r in reports)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
