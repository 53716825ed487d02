"""Multi-seed study: run a grid of (variant × seed) one run at a time through the real CLI, then
write study.json and the markdown report (--out-md; docs/results/study.md in this repository): per variant mean and 95 %
t-interval of held-out greedy / sampled accuracy, paired differences to the full method (or
full-label grpo), seed sd next to the held-out binomial se, pseudo-label oracle agreement,
compute at the end of each run, one accuracy-vs-compute figure of the main runs, and the papers'
claims judged by a stated rule. The variants live in coevolve.lab.studies, the statistics in coevolve.lab.stats.

    coevolve study --out runs/study run.threads=1
    coevolve study --out runs/study --only grpo,d2evo,diagevo,rzero --seeds 0,1,2
    coevolve study --out runs/study --methods diagevo --preset DIR
    coevolve study --out runs/study --report-only --out-md docs/results/study.md

--preset is a folder holding grpo.yaml, d2evo.yaml, diagevo.yaml, rzero.yaml (default: the presets
shipped with coevolve, the repository's configs/; --src names the coevolve source tree the runs
import when the preset needs another checkout's code); the report goes to --out-md (default
OUT/study.md);
key=value overrides apply to every run (the variant's own overrides win). Each run is a fresh
``python -m coevolve run`` process in OUT/<variant>/seed<k>; a finished folder is skipped, an
unfinished one continued with ``coevolve resume``, so the study can be stopped and restarted.
A run that fails is reported and the grid goes on. --stop-at HH:MM (UTC) launches no run after
that time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from coevolve.config import load_config
from coevolve.config.presets import preset_roots
from coevolve.errors import ConfigError, RunStateError
from coevolve.extras import check_extras
from coevolve.lab import skill_study, skill_study_markdown
from coevolve.lab import study as st
from coevolve.lab.plots import plot_compute
from coevolve.lab.run_view import compute_curve, load_run, read_config
from coevolve.lab.study_markdown import render_markdown, study_json
from coevolve.run.children import check_children, run_child

SRC = Path(__file__).resolve().parents[2]
"""The folder that holds the ``coevolve`` package the runs import by default (``src/`` in a checkout)."""


def stop_deadline(spec: str | None, now: dt.datetime) -> dt.datetime | None:
    """The UTC time after which no run is launched: ``HH:MM`` is its occurrence within 12 hours of
    ``now`` (at 22:50, 00:05 is after midnight; at 00:09, 00:08 has passed),
    ``YYYY-MM-DDTHH:MM`` is taken as is."""
    if not spec:
        return None
    if "T" in spec:
        return dt.datetime.fromisoformat(spec).replace(tzinfo=dt.UTC)
    h, m = (int(x) for x in spec.split(":"))
    t = now.replace(hour=h, minute=m, second=0, microsecond=0)
    half = dt.timedelta(hours=12)
    return t + dt.timedelta(days=1) if now - t > half else t - dt.timedelta(days=1) if t - now > half else t


def run_grid(
    cells: list[st.Cell],
    preset: Path,
    overrides: list[str],
    stop_at: dt.datetime | None,
    log,
    src: Path = SRC,
    record: Path | None = None,
) -> list[str]:
    """Advance every cell that is not finished, one process at a time, each importing coevolve from
    ``src``; returns the failures."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    failures = []
    for i, c in enumerate(cells, 1):
        status = st.cell_status(c.path)
        if status == "finished":
            continue
        if stop_at is not None and dt.datetime.now(dt.UTC) >= stop_at:
            log(
                f"stop-at {stop_at:%Y-%m-%d %H:%M} UTC reached: not launching {c.variant.name} seed{c.seed} and the rest"
            )
            break
        if status == "empty" and c.path.exists() and any(c.path.iterdir()):
            failures.append(f"{c.path}: a folder without state.json (not a run); left alone")
            log(failures[-1])
            continue
        if status == "empty" and c.path.exists():
            c.path.rmdir()  # an empty folder `coevolve run` would refuse
        cmd = st.run_command(c, preset, overrides, sys.executable)
        log(f"[{i}/{len(cells)}] {c.variant.name} seed{c.seed}: {' '.join(cmd[1:])}")
        c.path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        with open(c.path.parent / f"seed{c.seed}.log", "a", encoding="utf-8") as fh:
            rc = run_child(
                cmd, record=record, name=f"{c.variant.name} seed{c.seed}", stdout=fh, stderr=subprocess.STDOUT, env=env
            )
        log(f"    rc {rc} in {time.time() - t0:.0f} s -> {st.cell_status(c.path)}")
        if st.cell_status(c.path) != "finished":
            failures.append(f"{c.variant.name} seed{c.seed}: exit {rc}, see {c.path.parent / f'seed{c.seed}.log'}")
    return failures


def check_grid(cells: list[st.Cell], preset: Path, overrides: list[str]) -> None:
    """Every variant's config loads and has its extras installed (``check_extras``), checked
    before the study makes its folder: a grid whose runs would each refuse stops at once, with
    the run's own one-line message (``ConfigError``)."""
    for v in {c.variant.name: c.variant for c in cells}.values():
        cfg = load_config(v.recipe, [str(Path(preset) / v.config)], [*overrides, *v.overrides])
        check_extras(cfg)


ADOPT_ALWAYS_IGNORED = ("run.progress", "run.root", "run.name")
"""Config fields that say how a run was shown or named, not what it computed."""


def strip_keys(cfg: dict, keys) -> dict:
    """A copy of a resolved config without the dotted ``keys`` (absent ones are fine)."""
    out = json.loads(json.dumps(cfg))
    for k in keys:
        *head, last = k.split(".")
        d = out
        for h in head:
            d = d.get(h) if isinstance(d, dict) else None
        if isinstance(d, dict):
            d.pop(last, None)
    return out


def resolved_config(cell: st.Cell, preset: Path, overrides: list[str], env: dict) -> dict:
    """The config ``coevolve run`` would save for ``cell`` (``coevolve config`` of the same command)."""
    import yaml

    cmd = st.run_command(st.Cell(cell.variant, cell.seed, Path("/nonexistent")), preset, overrides, sys.executable)
    args = [x for x in cmd[4:] if x not in ("--run-dir", "/nonexistent")]
    out = subprocess.run(
        [sys.executable, "-m", "coevolve", "config", *args], env=env, capture_output=True, text=True, check=True
    ).stdout
    return yaml.safe_load(out)


def adopt_runs(
    cells: list[st.Cell],
    candidates: list[Path],
    preset: Path,
    overrides: list[str],
    src: Path,
    ignore: list[str],
    log,
    resolve=resolved_config,
) -> list[str]:
    """Copy each finished run folder of ``candidates`` (made outside the study, e.g. by another
    helper with the same preset) into the first unfinished cell whose resolved config equals the
    folder's config.yaml, apart from ``ADOPT_ALWAYS_IGNORED`` and ``ignore``; checkpoints are not
    copied. Returns one line per adopted folder, for the report."""
    import shutil

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    keys = [*ADOPT_ALWAYS_IGNORED, *ignore]
    wanted = [
        (c, strip_keys(resolve(c, preset, overrides, env), keys)) for c in cells if st.cell_status(c.path) != "finished"
    ]
    lines = []
    for d in candidates:
        if st.cell_status(d) != "finished":
            log(f"adopt: {d} is not a finished run; skipped")
            continue
        have = strip_keys(read_config(d), keys)
        match = next((c for c, cfg in wanted if cfg == have and st.cell_status(c.path) != "finished"), None)
        if match is None:
            log(f"adopt: {d} matches no unfinished cell's config; skipped")
            continue
        if match.path.exists():
            shutil.rmtree(match.path)  # an unfinished folder of ours: the adopted run replaces it
        shutil.copytree(d, match.path, ignore=shutil.ignore_patterns("checkpoints", "run.lock"))
        lines.append(
            f"- {match.variant.name} seed{match.seed}: adopted from a run folder `{Path(d).name}` (same resolved config"
            + (f" apart from {', '.join(ignore)}" if ignore else "")
            + ")"
        )
        log(lines[-1])
    return lines


def regenerate_command(a: argparse.Namespace, preset: str) -> str:
    """The ``coevolve study --report-only`` line that rewrites this report from the same run folders:
    written at the top of the markdown and into the JSON, so a generated file says how it is remade."""
    parts = ["coevolve study", f"--preset {preset}"]
    parts += ["--declaration skill"] if a.declaration == "skill" else []
    parts += [f"--out {a.out}", f"--out-md {a.out_md}", "--report-only"]
    parts += [f"--only {a.only}"] if a.only else []
    parts += [f"--methods {a.methods}"] if a.methods else []
    parts += [f"--seeds {','.join(map(str, a.seeds))}"] if a.seeds != [0, 1, 2] else []
    return " ".join(parts)


def write_report(
    cells: list[st.Cell], out: Path, out_md: Path, setting: list[str], notes: list[str], command: str
) -> Path:
    """study.json in ``out`` and the markdown (+ its figure) at ``out_md``."""

    results, missing = st.read_results(cells)
    variants = list(dict.fromkeys(c.variant.name for c in cells))
    stats = [s for v in variants if (s := st.variant_stats(results, st.VARIANTS[v])) is not None]
    verdicts = st.judge_claims(results)
    sizes = sorted({(r.bench, r.n) for r in results})
    if sizes:
        setting = [
            *setting,
            "- held-out set: "
            + ", ".join(f"{n} questions of `{b}`" for b, n in sizes)
            + " (fixed by the world and its size, not by run.seed: every run of the study answers the same questions)",
        ]
    curves = {}
    for c in cells:
        if c.variant.main and st.cell_status(c.path) == "finished":
            curve = compute_curve(load_run(c.path), f"{c.variant.name} s{c.seed}")
            if curve:
                curves[f"{c.variant.name} s{c.seed}"] = curve
    figure = None
    if curves:
        fig_name = out_md.stem + "_accuracy_vs_compute.png"
        plot_compute(curves, out_md.parent, fig_name)
        figure = fig_name
    out_md.parent.mkdir(parents=True, exist_ok=True)
    mains = [v for v in variants if st.VARIANTS[v].main]
    sep = [sp for m in ("greedy", "sampled") if (sp := st.separation(results, mains, m)) is not None]
    out_md.write_text(
        render_markdown(stats, verdicts, missing, setting, figure, notes, results, sep, command=command),
        encoding="utf-8",
    )
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "generated_by": command,
        **study_json(results, stats, verdicts, missing, setting),
        "separation": [{**sp.__dict__, "diff": sp.diff.to_dict()} for sp in sep],
    }
    (out / "study.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return out_md


def write_skill_report(
    cells: list[st.Cell], out: Path, out_md: Path, setting: list[str], notes: list[str], command: str
) -> Path:
    """skill_study.json in ``out`` and the skill study's markdown at ``out_md``."""
    results, missing = st.read_results(cells)
    md, data = skill_study_markdown.render(results, missing, setting, notes, command=command)
    for line in skill_study.power_notes([skill_study.PowerRow(**r) for r in data["power"]]):
        print(f"note (power plan): {line[2:]}")
    data = {"generated_by": command, **data}
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(md, encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    (out / "skill_study.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return out_md


def _arg_parser() -> argparse.ArgumentParser:
    """The ``coevolve study`` command line (the module docstring is its help text), kept apart
    from ``main`` so that the options read as one list and ``main`` as the study's steps."""
    ap = argparse.ArgumentParser(
        prog="coevolve study", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--preset",
        type=Path,
        default=preset_roots()[-1],
        help="folder with grpo.yaml, d2evo.yaml, diagevo.yaml, rzero.yaml (default: coevolve's presets)",
    )
    ap.add_argument("--out", type=Path, required=True, help="study folder: OUT/<variant>/seed<k>, study.json")
    ap.add_argument("--out-md", type=Path, default=None, help="the markdown report (default OUT/study.md)")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated run.seed values")
    ap.add_argument("--only", default="", help="comma-separated variants (see coevolve.lab.studies.variants.VARIANTS)")
    ap.add_argument("--methods", default="", help="comma-separated methods: each with all its ablations")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from existing run folders")
    ap.add_argument(
        "--stop-at",
        default=None,
        help="HH:MM UTC (its next occurrence) or YYYY-MM-DDTHH:MM: launch no run after this time",
    )
    ap.add_argument("--note", action="append", default=[], help="a line for the report's Notes section")
    ap.add_argument(
        "--src",
        type=Path,
        default=SRC,
        help="the coevolve source tree the runs import (default: this checkout's src/), e.g. another "
        "commit's checkout whose preset needs its config fields",
    )
    ap.add_argument(
        "--adopt",
        type=Path,
        action="append",
        default=[],
        help="a finished run folder made outside the study (repeatable): copied into the unfinished cell "
        "whose resolved config it equals (checked with `coevolve config`)",
    )
    ap.add_argument(
        "--adopt-ignore",
        action="append",
        default=[],
        help="a dotted config field that may differ for --adopt (said in the report)",
    )
    ap.add_argument(
        "--declaration",
        choices=("toy_scarce", "skill"),
        default="toy_scarce",
        help="which claims the report judges: the toy_scarce study's (study.md) or the skill world's "
        "declared claims per stratum (coevolve.lab.skill_study; --out-md defaults to OUT/skill_study.md)",
    )
    ap.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    return ap


def _study_spec(a: argparse.Namespace, cells: list[st.Cell], spec_path: Path) -> dict[str, Any]:
    """The study's setting (preset, overrides, source of the runs): with --report-only the one the
    runs were made with (``spec_path``), else this command's, written there after the grid is
    checked (``RunStateError`` / ``ConfigError``); runs an earlier invocation adopted stay listed."""
    try:
        preset = str(a.preset.resolve().relative_to(Path.cwd()))
    except ValueError:
        preset = str(a.preset)
    spec: dict[str, Any] = {"preset": preset, "overrides": a.overrides, "src": str(a.src)}
    if a.report_only and spec_path.is_file():  # the setting the runs were made with, not this command's
        return json.loads(spec_path.read_text(encoding="utf-8"))
    if a.report_only:
        return spec
    # a run a killed study started must end before this one starts its cell again
    check_children(a.out)
    if a.src == SRC:  # another checkout's runs may need fields this coevolve does not know
        check_grid(cells, a.preset, a.overrides)
    a.out.mkdir(parents=True, exist_ok=True)
    if spec_path.is_file():  # runs adopted by an earlier invocation stay listed
        spec["adopted"] = json.loads(spec_path.read_text(encoding="utf-8")).get("adopted", [])
    spec_path.write_text(json.dumps(spec) + "\n", encoding="utf-8")
    return spec


def _setting(spec: dict[str, Any], cells: list[st.Cell], seeds: list[int], variants: list[st.Variant]) -> list[str]:
    """The report's setting lines."""
    return [
        f"- preset: `{spec['preset']}` ({', '.join(sorted({c.variant.config for c in cells}))})",
        f"- overrides on every run: `{' '.join(spec['overrides']) or '(none)'}`",
        *([f"- coevolve source of the runs: `{spec['src']}`"] if spec.get("src") != str(SRC) else []),
        f"- seeds: {' '.join(map(str, seeds))}; variants: {', '.join(v.name for v in variants)}",
    ]


def main(argv: list[str] | None = None) -> int:
    a = _arg_parser().parse_args(argv)
    a.out_md = a.out_md or a.out / ("skill_study.md" if a.declaration == "skill" else "study.md")
    try:
        variants = st.select_variants(a.only.split(","), a.methods.split(","))
    except st.StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.seeds = [int(x) for x in a.seeds.replace(" ", ",").split(",") if x]
    cells = st.expand_grid(variants, a.seeds, a.out)

    def log(msg: str) -> None:
        print(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {msg}", flush=True)

    spec_path = a.out / "study_spec.json"
    try:
        spec = _study_spec(a, cells, spec_path)
    except (RunStateError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    adopted = adopt_runs(cells, a.adopt, a.preset, a.overrides, a.src, a.adopt_ignore, log) if a.adopt else []
    if adopted:
        prev = spec.get("adopted", [])
        spec["adopted"] = [*prev, *adopted]
        spec_path.write_text(json.dumps(spec) + "\n", encoding="utf-8")
    failures = (
        []
        if a.report_only
        else run_grid(
            cells, a.preset, a.overrides, stop_deadline(a.stop_at, dt.datetime.now(dt.UTC)), log, a.src, record=a.out
        )
    )
    setting = _setting(spec, cells, a.seeds, variants)
    notes = [*a.note, *spec.get("adopted", []), *(f"- failed: {f}" for f in failures)]
    command = regenerate_command(a, spec["preset"])
    if a.declaration == "skill":
        md = write_skill_report(cells, a.out, a.out_md, setting, notes, command)
    else:
        md = write_report(cells, a.out, a.out_md, setting, notes, command)
    log(f"wrote {md} and {a.out / ('skill_study.json' if a.declaration == 'skill' else 'study.json')}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
