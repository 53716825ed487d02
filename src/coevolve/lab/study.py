"""Multi-seed study: the variant grid (methods × paper ablations, declared in
``coevolve.lab.studies``), the run folders' results and their aggregation into per-variant figures
and verdicts on the papers' claims. ``coevolve study`` (``coevolve.lab.study_cli``) runs the grid;
``coevolve.lab.study_markdown`` writes the markdown; the statistics are ``coevolve.lab.stats``.

Why seeds and not the held-out set's binomial error as the yardstick: two runs on the same
held-out set share its sampling error, and the seed-to-seed spread (init of sampling, order of
batches) is what separates two methods' runs (toy_scarce: sd ≈ 0.006 against a binomial se of
≈ 0.021 for N = 500).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coevolve.errors import DataError, RunStateError
from coevolve.lab.run_view import read_state, read_summary, run_status
from coevolve.lab.stats import (
    CONFIDENCE,
    NOT_DISTINGUISHABLE,
    NOT_REPRODUCED,
    NOT_RUN,
    REPRODUCED,
    Difference,
    Interval,
    StudyError,
    binomial_se,
    claim_verdict,
    holm,
    item_variance,
    item_variance_bootstrap,
    paired_difference,
    paired_items_difference,
    power,
    seeds_for_power,
    t_cdf,
    t_cdf_abs,
    t_interval,
    t_quantile,
    welch_df,
    welch_difference,
)
from coevolve.lab.studies.toy_scarce import MECHANISM_CLAIMS, METHOD_CLAIMS, Claim
from coevolve.lab.studies.variants import VARIANTS, Variant
from coevolve.run.compute import COUNTERS, EVAL_PHASE, Compute

__all__ = [  # the statistics and the declarations re-exported: the study's one import for tests and scripts
    "CONFIDENCE",
    "NOT_DISTINGUISHABLE",
    "NOT_REPRODUCED",
    "NOT_RUN",
    "REPRODUCED",
    "VARIANTS",
    "Cell",
    "CellResult",
    "Claim",
    "ClaimResult",
    "Difference",
    "Interval",
    "Separation",
    "StudyError",
    "Variant",
    "VariantStats",
    "ablations",
    "binomial_se",
    "cell_status",
    "claim_verdict",
    "claims",
    "expand_grid",
    "holm",
    "item_variance",
    "item_variance_bootstrap",
    "judge_claims",
    "paired_difference",
    "paired_items_difference",
    "power",
    "read_cell",
    "read_results",
    "run_command",
    "seeds_for_power",
    "select_variants",
    "separation",
    "t_cdf",
    "t_cdf_abs",
    "t_interval",
    "t_quantile",
    "variant_stats",
    "welch_df",
    "welch_difference",
]

# ----------------------------------------------------------------------------------------------
# the grid


def ablations(method: str) -> dict[str, Variant]:
    """``{short name: variant}`` of one method, the full method as ``full`` (the ablation
    scripts' grid)."""
    out = {"full": VARIANTS[method]}
    out.update({v.name.split(".", 1)[1]: v for v in VARIANTS.values() if v.reference == method})
    return out


def select_variants(only: Iterable[str] = (), methods: Iterable[str] = ()) -> list[Variant]:
    """The variants of a study in ``VARIANTS`` order: those named in ``only`` plus every variant of
    the ``methods`` (a method and its ablations); everything when both are empty. Raises
    ``StudyError`` on an unknown name."""
    only, methods = [n for n in only if n], [m for m in methods if m]
    unknown = [n for n in [*only, *methods] if n not in VARIANTS]
    if unknown:
        raise StudyError(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if not only and not methods:
        return list(VARIANTS.values())
    keep = set(only) | {v.name for v in VARIANTS.values() if v.name in methods or v.reference in methods}
    return [v for v in VARIANTS.values() if v.name in keep]


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a variant at a seed, in ``path`` (``out/<variant>/seed<k>``)."""

    variant: Variant
    seed: int
    path: Path


def expand_grid(variants: Sequence[Variant], seeds: Sequence[int], out: Path) -> list[Cell]:
    """Cells in run order: seed-major (every variant at seed 0, then at seed 1, ...), so that a
    study cut short has paired seeds for as many variants as possible."""
    return [Cell(v, s, Path(out) / v.name / f"seed{s}") for s in seeds for v in variants]


def cell_status(path: Path) -> str:
    """``finished``, ``unfinished`` (a run folder to resume) or ``empty``: the run folder's
    ``lab.run_view.run_status``."""
    return run_status(path)


def run_command(cell: Cell, preset: Path, overrides: Sequence[str], python: str = "python") -> list[str]:
    """The CLI command that advances ``cell``: ``coevolve resume`` for an unfinished folder, else
    ``coevolve run`` of the variant's preset file with the study's overrides, then the variant's
    (they win), then the seed. None of these is needed for a finished cell (the caller skips it)."""
    if cell_status(cell.path) == "unfinished":
        return [python, "-m", "coevolve", "resume", str(cell.path), "run.progress=false"]
    return [
        python,
        "-m",
        "coevolve",
        "run",
        cell.variant.recipe,
        "-c",
        str(Path(preset) / cell.variant.config),
        "--run-dir",
        str(cell.path),
        "run.progress=false",
        *overrides,
        *cell.variant.overrides,
        f"run.seed={cell.seed}",
    ]


# ----------------------------------------------------------------------------------------------
# run folders -> results


@dataclass(frozen=True)
class CellResult:
    """What the study reads from one finished run folder: final held-out ``greedy`` / ``sampled``
    accuracy on ``bench`` over ``n`` questions, base accuracy, the run's training ``compute`` at
    its end, wall seconds, and the mean over rounds of the oracle agreement of the pseudo-labels
    per filter (``none`` / ``absolute`` / ``dual`` on the same candidates, and ``kept``: the
    filter the run used; empty when the run has no generated questions with an oracle)."""

    variant: str
    seed: int
    bench: str
    n: int
    greedy: float
    sampled: float | None
    base_greedy: float | None
    compute: Compute
    wall_seconds: float | None
    oracle_agreement: dict[str, float] = field(default_factory=dict)
    curriculum: dict[str, float] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False)
    world: dict[str, Any] = field(default_factory=dict, compare=False)  # summary.json's world section (skill world)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "compute": self.compute.to_dict(),
            "path": None if self.path is None else str(self.path),
        }


ORACLE_FILTERS = ("none", "absolute", "dual", "kept")

CURRICULUM_KEYS = (
    "anchors/anchors",
    "buffer/buffer_real",
    "buffer/buffer_generated",
    "pool/kept",
    "solver/reward_mean",
)
"""Per-round figures of what each solver phase trained on (mean over rounds in the per-run table):
real anchors and generated questions in D²Evo's buffer, questions DiagEvo's filter kept, and the
solver's mean training reward; they explain accuracy differences that compute alone does not."""


def _round_mean(rounds: Sequence[dict[str, Any]], keys: Sequence[str]) -> float | None:
    vals = [
        float(r[k])
        for r in rounds
        for k in keys
        if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
    ]
    return sum(vals) / len(vals) if vals else None


def read_cell(variant: str, seed: int, path: Path) -> CellResult:
    """The ``CellResult`` of a finished run folder (summary.json); ``StudyError`` naming the file
    when it lacks a final evaluation."""
    try:
        s = read_summary(path)
    except DataError as e:
        raise StudyError(str(e)) from e
    final = ((s or {}).get("eval") or {}).get("final") or {}
    if s is None or not final:
        raise StudyError(f"{path}: no summary.json with an eval.final (the run did not finish)")
    bench = next(iter(final))
    f, base = final[bench], ((s.get("eval") or {}).get("base") or {}).get(bench) or {}
    rounds = s.get("rounds") or []
    oracle = {
        m: v
        for m in ORACLE_FILTERS
        if (v := _round_mean(rounds, (f"pool/oracle_acc_{m}", f"buffer/oracle_acc_{m}"))) is not None
    }
    curriculum = {k: v for k in CURRICULUM_KEYS if (v := _round_mean(rounds, (k,))) is not None}
    return CellResult(
        variant,
        seed,
        bench,
        int(f.get("n") or 0),
        float(f["greedy"]),
        f.get("sampled"),
        base.get("greedy"),
        _compute_at_final_eval(Path(path), s),
        s.get("wall_seconds"),
        oracle,
        curriculum,
        Path(path),
        s.get("skill_world") or {},
    )


def _compute_at_final_eval(path: Path, summary: dict[str, Any]) -> Compute:
    """Training compute spent before the run's last held-out evaluation (the x of its last point in
    the accuracy-vs-compute figure): phases after it (D²Evo's report-only re-measure of the pool,
    ``final/difficulty``) measure, they do not train. From state.json's phase records; the
    summary's total when they carry no compute."""
    try:
        phases = read_state(path).get("phases") or []
    except RunStateError:
        phases = []
    last = max((i for i, p in enumerate(phases) if p.get("name") == EVAL_PHASE), default=None)
    if last is None or any(p.get("compute") is None for p in phases[: last + 1]):
        return Compute.from_dict(((summary.get("compute") or {}).get("train")) or {})
    total = Compute()
    for p in phases[: last + 1]:
        if p.get("name") != EVAL_PHASE:
            total += Compute.from_dict(p["compute"])
    return total


def read_results(cells: Sequence[Cell]) -> tuple[list[CellResult], list[str]]:
    """Results of the finished cells, and the ``variant seedK: status`` of the others."""
    out, missing = [], []
    for c in cells:
        st = cell_status(c.path)
        if st == "finished":
            out.append(read_cell(c.variant.name, c.seed, c.path))
        else:
            missing.append(f"{c.variant.name} seed{c.seed}: {'not run' if st == 'empty' else 'unfinished'}")
    return out, missing


# ----------------------------------------------------------------------------------------------
# aggregation


@dataclass(frozen=True)
class VariantStats:
    """Per variant over its seeds: greedy and sampled t-intervals, the paired difference to its
    reference (or, for the main methods, to full-label grpo) on greedy and sampled, the held-out
    binomial se at its mean greedy accuracy, mean compute and oracle agreement."""

    variant: str
    seeds: list[int]
    greedy: Interval
    sampled: Interval
    versus: str | None
    diff_greedy: Interval | None
    diff_sampled: Interval | None
    heldout_n: int
    binomial_se: float | None
    compute: dict[str, float]
    oracle_agreement: dict[str, float]


def _by_seed(results: Sequence[CellResult], variant: str, key: str) -> dict[int, float]:
    return {r.seed: float(getattr(r, key)) for r in results if r.variant == variant and getattr(r, key) is not None}


def variant_stats(results: Sequence[CellResult], variant: Variant) -> VariantStats | None:
    """``VariantStats`` of one variant (None when no seed of it finished). A main method other
    than grpo is compared with full-label grpo; an ablation with its full method."""
    mine = [r for r in results if r.variant == variant.name]
    if not mine:
        return None
    versus = variant.reference or (None if variant.name == "grpo" else "grpo")
    g, sm = _by_seed(results, variant.name, "greedy"), _by_seed(results, variant.name, "sampled")
    dg = paired_difference(g, _by_seed(results, versus, "greedy")) if versus else None
    ds = paired_difference(sm, _by_seed(results, versus, "sampled")) if versus else None
    gi = t_interval(list(g.values()))
    n = mine[0].n
    comp = {k: sum(getattr(r.compute, k) for r in mine) / len(mine) for k in COUNTERS}
    oracle = {
        m: sum(r.oracle_agreement[m] for r in mine if m in r.oracle_agreement)
        / sum(m in r.oracle_agreement for r in mine)
        for m in ORACLE_FILTERS
        if any(m in r.oracle_agreement for r in mine)
    }
    return VariantStats(
        variant.name,
        sorted(g),
        gi,
        t_interval(list(sm.values())),
        versus,
        dg,
        ds,
        n,
        binomial_se(gi.mean, n) if gi.mean is not None and n else None,
        comp,
        oracle,
    )


@dataclass(frozen=True)
class Separation:
    """The best and the worst main method by mean accuracy on ``metric``, their paired difference on
    the common seeds, ``ratio`` = mean paired difference / its standard error, and
    ``ratio_unpaired`` = (mean_best - mean_worst) / sqrt(se_best² + se_worst²) with each method's own
    seed standard error (the quotable one: seeds pair nothing between recipes)."""

    best: str
    worst: str
    diff: Interval
    ratio: float | None
    metric: str = "greedy"
    ratio_unpaired: float | None = None


def separation(results: Sequence[CellResult], names: Sequence[str], metric: str = "greedy") -> Separation | None:
    """``Separation`` on ``metric`` (greedy / sampled) over the variants ``names`` that have at least
    2 seeds (None when fewer than two such variants)."""
    means = {n: t_interval(list(_by_seed(results, n, metric).values())) for n in names}
    ok = sorted((i.mean, n) for n, i in means.items() if i.n >= 2 and i.mean is not None)
    if len(ok) < 2:
        return None
    worst, best = ok[0][1], ok[-1][1]
    d = paired_difference(_by_seed(results, best, metric), _by_seed(results, worst, metric))
    ratio = d.mean / d.se if d.se and d.mean is not None else None
    b, w = means[best], means[worst]
    se = math.sqrt((b.se or 0.0) ** 2 + (w.se or 0.0) ** 2)
    return Separation(best, worst, d, ratio, metric, (b.mean - w.mean) / se if se else None)


def claims() -> list[Claim]:
    """The toy_scarce study's claims in report order: the method claims, one per paper ablation of
    ``VARIANTS`` (the ablation lowers accuracy; ours and unnumbered ones are no claim), then the
    mechanism claims."""
    ablation = [
        Claim(f"ablation {v.name} lowers accuracy", v.reference, v.name, f"{v.paper}")
        for v in VARIANTS.values()
        if v.reference and not v.paper.startswith(("ours", "-", "+"))
    ]
    return [*METHOD_CLAIMS, *ablation, *MECHANISM_CLAIMS]


@dataclass(frozen=True)
class ClaimResult:
    """A claim's paired interval on its metric, the verdict, and (accuracy claims) the paired
    interval on sampled accuracy for context (the verdict is greedy's)."""

    claim: Claim
    diff: Interval
    verdict: str
    diff_sampled: Interval | None = None
    verdict_sampled: str | None = None


def judge_claims(results: Sequence[CellResult]) -> list[ClaimResult]:
    """Every claim's paired interval and verdict (``claim_verdict``). Oracle claims pair the filters
    within the full DiagEvo runs (same candidate pools), per seed."""
    out = []
    for c in claims():
        if c.metric == "oracle":
            runs = [r for r in results if r.variant == "diagevo"]
            a = {r.seed: r.oracle_agreement[c.better] for r in runs if c.better in r.oracle_agreement}
            b = {r.seed: r.oracle_agreement[c.worse] for r in runs if c.worse in r.oracle_agreement}
        else:
            a, b = _by_seed(results, c.better, "greedy"), _by_seed(results, c.worse, "greedy")
        d = paired_difference(a, b)
        ds = (
            None
            if c.metric == "oracle"
            else paired_difference(_by_seed(results, c.better, "sampled"), _by_seed(results, c.worse, "sampled"))
        )
        out.append(ClaimResult(c, d, claim_verdict(d), ds, None if ds is None else claim_verdict(ds)))
    return out
