"""Mutation check: apply small, plausible bugs to the source one at a time and see which the tests miss.

    PYTHONPATH=src python dev/mutants.py [--only ID,ID] [--package run] [--root PATH]
        [--out mutants.json] [--timeout 900] [--list] [--keep]

Each mutant in ``MUTANTS`` is one behaviour written down as an exact text replacement in one
source file (several edits when the bug needs them), plus the tests that should notice it:
those tests only, not the whole suite, with ``-m "not slow"`` (a mutant the fast lane cannot
see is a gap in the fast lane). For each mutant the script

1. copies the repository (the files git tracks or would track, into a temporary folder, so the
   checkout is never edited),
2. checks that every ``old`` text occurs exactly once in its file (otherwise the mutant is
   ``stale``: the source moved and the list must follow it; nothing is run),
3. writes the mutated file, runs ``python -m pytest -x`` on the mutant's tests with the copy's
   ``src`` first on ``PYTHONPATH``, and restores the file.

Result per mutant: ``killed`` (a test failed; the first failing test is named), ``survived`` (all
passed: either a missing test or an equivalent mutant, which the table marks), ``timeout`` (the
run hung past ``--timeout``: counted as caught, the hang is visible), ``stale`` or ``error``
(pytest could not collect or run the tests: counted as neither). Before the mutants, the union
of their tests runs once unmutated: a red baseline makes every "killed" meaningless, so the
script stops there.

``--root`` mutates another tree (e.g. an older commit exported with ``git archive``) with the
same list: test paths that do not exist there are left out, and a mutant with no test left is
reported as ``no tests``. Exit status: 0 when no mutant survived (equivalent ones aside), 1
otherwise, 2 on a red baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [
    "-q",
    "-x",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
    "-m",
    "not slow",
    "-o",
    "addopts=",
    "--no-header",
    "-rf",
]

REWARDS = ("tests/test_rewards.py",)
CURRICULUM = ("tests/test_curriculum.py", "tests/test_sequential.py")
MEMORY = ("tests/test_memory.py",)
RL = ("tests/test_rl.py",)
RUN = ("tests/test_run.py", "tests/test_run_files.py")
SEEDS = ("tests/test_run.py", "tests/test_engine.py", "tests/test_curriculum.py", "tests/test_sequential.py")
REWARD_WIRING = (
    "tests/test_rewards.py",
    "tests/test_config.py",
    "tests/test_d2evo.py::test_config_defaults_are_the_papers",
    "tests/test_verl_backend.py::test_reward_module_equals_coevolve_rewards",
)


@dataclass(frozen=True)
class Mutant:
    """One bug: ``edits`` are (old, new) replacements in ``file`` (under src/coevolve)."""

    id: str
    package: str
    behaviour: str
    file: str
    edits: tuple[tuple[str, str], ...]
    tests: tuple[str, ...]
    equivalent: str = ""  # why this mutant cannot change what any caller sees (reported, not a gap)


def M(
    id: str,
    package: str,
    behaviour: str,
    file: str,
    old: str,
    new: str,
    tests: tuple[str, ...],
    *more: tuple[str, str],
    equivalent: str = "",
) -> Mutant:
    return Mutant(id, package, behaviour, file, ((old, new), *more), tests, equivalent)


MUTANTS: list[Mutant] = [
    # ---- rewards -----------------------------------------------------------------------------
    M(
        "R1",
        "rewards",
        "solver reward weights α and 1-α swapped",
        "rewards.py",
        "rewards = [alpha * a + (1.0 - alpha) * f for",
        "rewards = [(1.0 - alpha) * a + alpha * f for",
        REWARDS,
    ),
    M(
        "R2",
        "rewards",
        "format weight not tied to α",
        "rewards.py",
        "rewards = [alpha * a + (1.0 - alpha) * f for",
        "rewards = [alpha * a + 0.1 * f for",
        REWARDS,
    ),
    M(
        "R3",
        "rewards",
        "solver_rewards' own default α (paper: 0.9)",
        "rewards.py",
        "    alpha: float = 0.9,\n) -> tuple[list[float], Breakdown]:",
        "    alpha: float = 0.8,\n) -> tuple[list[float], Breakdown]:",
        REWARDS,
    ),
    M(
        "R4",
        "rewards",
        "plateau default upper edge τ_u",
        "rewards.py",
        "def plateau(x: float, tau_l: float = 0.4, tau_u: float = 0.8,",
        "def plateau(x: float, tau_l: float = 0.4, tau_u: float = 0.85,",
        REWARDS,
    ),
    M(
        "R5",
        "rewards",
        "plateau decay below the band ignores a",
        "rewards.py",
        "return (x / tau_l) ** a",
        "return (x / tau_l) ** 2.0",
        REWARDS,
    ),
    M(
        "R6",
        "rewards",
        "plateau decay above the band measured from τ_l",
        "rewards.py",
        "return ((1.0 - x) / (1.0 - tau_u)) ** a",
        "return ((1.0 - x) / (1.0 - tau_l)) ** a",
        REWARDS,
    ),
    M(
        "R7",
        "rewards",
        "band edges exclusive in the plateau",
        "rewards.py",
        "    if x < tau_l:\n        return (x / tau_l) ** a",
        "    if x <= tau_l:\n        return (x / tau_l) ** a",
        REWARDS,
        equivalent="at x = τ_l both branches give 1.0",
    ),
    M(
        "R8",
        "rewards",
        "malformed questioner output scored like a well-formed one",
        "rewards.py",
        "        if not ok:\n            rewards.append(0.0)",
        "        if not ok and xi is None:\n            rewards.append(0.0)",
        REWARDS,
    ),
    M(
        "R9",
        "rewards",
        "R-Zero format failure penalty -1 dropped",
        "rewards.py",
        "rewards.append(-1.0 - r)",
        "rewards.append(0.0 - r)",
        REWARDS,
    ),
    M(
        "R10",
        "rewards",
        "R-Zero uncertainty = 1 - p̂ instead of min(p̂, 1-p̂)",
        "rewards.py",
        "return min(p, 1.0 - p)",
        "return 1.0 - p",
        REWARDS,
    ),
    M(
        "R11",
        "rewards",
        "DiagEvo match reward -1 for a miss becomes 0",
        "rewards.py",
        "r = [1.0 if m else -1.0 for m in matches]",
        "r = [1.0 if m else 0.0 for m in matches]",
        REWARDS,
    ),
    M(
        "R12",
        "rewards",
        "repetition penalty counts the question itself twice",
        "rewards.py",
        "return [counts[lab] / len(texts) for lab in labels]",
        "return [(counts[lab] + 1) / len(texts) for lab in labels]",
        REWARDS,
    ),
    # ---- curriculum --------------------------------------------------------------------------
    M(
        "C1",
        "curriculum",
        "configured writer band and decay a reach the writer reward",
        "curriculum/proposals.py",
        "questioner_rewards(ok, flat_x, reward.band.low, reward.band.high, reward.a)",
        "questioner_rewards(ok, flat_x)",
        CURRICULUM,
    ),
    M(
        "C2",
        "curriculum",
        "configured voting.tau reaches the pool filter",
        "curriculum/proposals.py",
        "confidence_filter(votes, voting.band, voting.tau, m)",
        "confidence_filter(votes, voting.band, mode=m)",
        CURRICULUM,
    ),
    M(
        "C3",
        "curriculum",
        "dual filter ignores τ (p1 >= p2)",
        "curriculum/voting.py",
        'if mode == "dual" and r.p1 < tau * r.p2 - 1e-12:',
        'if mode == "dual" and r.p1 < r.p2 - 1e-12:',
        CURRICULUM,
    ),
    M(
        "C4",
        "curriculum",
        "dual filter boundary p1 = τ·p2 excluded",
        "curriculum/voting.py",
        'if mode == "dual" and r.p1 < tau * r.p2 - 1e-12:',
        'if mode == "dual" and r.p1 < tau * r.p2 + 1e-12:',
        CURRICULUM,
    ),
    M(
        "C5",
        "curriculum",
        "adaptive vote: ratio threshold t = 1/(1+τ)",
        "curriculum/sequential.py",
        "t = tau / (1.0 + tau)",
        "t = 1.0 / (1.0 + tau)",
        CURRICULUM,
    ),
    M(
        "C6",
        "curriculum",
        "adaptive vote: ratio branch deleted",
        "curriculum/sequential.py",
        'ratio_ok = mode != "dual" or p1 >= tau * p2 - 1e-12',
        "ratio_ok = True",
        CURRICULUM,
        ('ratio_below = beta_cdf(t, prior[0] + m1, prior[1] + m2) if mode == "dual" else 0.0', "ratio_below = 0.0"),
    ),
    M(
        "C7",
        "curriculum",
        "chunk seeds seed + c (every chunk the same seed)",
        "curriculum/sampling.py",
        "replace(params, seed=params.seed + chunk)",
        "replace(params, seed=params.seed)",
        CURRICULUM,
    ),
    M(
        "C8",
        "curriculum",
        "stage seed stride",
        "curriculum/sampling.py",
        "seed=params.seed + stage * STAGE_SEED_STRIDE",
        "seed=params.seed + stage",
        CURRICULUM,
    ),
    M(
        "C9",
        "curriculum",
        "anchor band inclusive",
        "curriculum/difficulty.py",
        "return [r for r in records if band.contains(r.pass_rate)]",
        "return [r for r in records if band.low < r.pass_rate < band.high]",
        CURRICULUM,
    ),
    M(
        "C10",
        "curriculum",
        "copies of anchors not banned from the pool",
        "curriculum/proposals.py",
        'status = "banned" if k in banned else',
        'status = "banned" if False else',
        CURRICULUM,
    ),
    M(
        "C11",
        "curriculum",
        "evaluation items not kept out of the pool",
        "curriculum/proposals.py",
        '"heldout" if k in excluded else',
        '"heldout" if False else',
        CURRICULUM,
    ),
    M(
        "C12",
        "curriculum",
        "an enforcing verifier's rejection ignored",
        "curriculum/proposals.py",
        "kept = [v for v in passed if not (check.enforce and verdict[v.id] is False)]",
        "kept = list(passed)",
        CURRICULUM,
    ),
    M(
        "C13",
        "curriculum",
        "adaptive band decision: confidence test strict",
        "curriculum/sequential.py",
        "if max(post.below, post.above, ratio_below) >= confidence:",
        "if max(post.below, post.above, ratio_below) > confidence + 1e-3:",
        CURRICULUM,
    ),
    # ---- memory ------------------------------------------------------------------------------
    M(
        "Me1",
        "memory",
        "promotion threshold θ_up inclusive",
        "memory/store.py",
        "len(p1s) >= min_questions and mean >= theta_up",
        "len(p1s) >= min_questions and mean > theta_up",
        MEMORY,
    ),
    M(
        "Me2",
        "memory",
        "min_targeted guard on promotion",
        "memory/store.py",
        "len(p1s) >= min_questions and mean >= theta_up",
        "mean >= theta_up",
        MEMORY,
    ),
    M(
        "Me3",
        "memory",
        "promotion resets the cause's frequency",
        "memory/store.py",
        '                c.state = "mastered"\n                c.freq = 0\n',
        '                c.state = "mastered"\n',
        MEMORY,
    ),
    M(
        "Me4",
        "memory",
        "a cause re-activated this round is not promoted again",
        "memory/store.py",
        '            if e.get("state_change") == "reactivated":\n                continue',
        '            if e.get("state_change") == "reactivated":\n                pass',
        MEMORY,
    ),
    M(
        "Me5",
        "memory",
        "ε = F1 / (F1 + F_t / k)",
        "memory/store.py",
        "return float(F1) / (float(F1) + float(Ft) / k)",
        "return float(F1) / (float(F1) + float(Ft) * k)",
        MEMORY,
    ),
    M(
        "Me6",
        "memory",
        "F_1 fixed once",
        "memory/store.py",
        "if self.F1 is None and self.F_t() > 0:",
        "if self.F_t() > 0:",
        MEMORY,
    ),
    M(
        "Me7",
        "memory",
        "p(e) over Active causes only",
        "memory/store.py",
        "return {c.id: c.freq / Ft for c in self.active() if c.freq > 0}",
        "return {c.id: c.freq / Ft for c in self.causes.values() if c.freq > 0}",
        MEMORY,
        equivalent="a Mastered cause always has f = 0: promotion resets it, a new failure re-activates the cause",
    ),
    M(
        "Me8",
        "memory",
        "stitching same_node picks a Mastered sibling",
        "memory/store.py",
        'if self.causes[c].state == "mastered")',
        'if self.causes[c].state == "active")',
        MEMORY,
    ),
    # ---- rl ----------------------------------------------------------------------------------
    M(
        "L1",
        "rl",
        "GRPO advantage sign",
        "rl/grpo.py",
        "adv = r - mean_B1  # (B, G)",
        "adv = mean_B1 - r  # (B, G)",
        RL,
    ),
    M(
        "L2",
        "rl",
        "advantage / completion pairing in Learner.step",
        "rl/learner.py",
        "float(adv_1G[0, k])",
        "float(adv_1G[0, -1 - k])",
        RL,
    ),
    M(
        "L3",
        "rl",
        "advantages not scaled by the group std",
        "rl/grpo.py",
        "        adv = adv / (std_B1 + eps)",
        "        adv = adv",
        RL,
    ),
    M(
        "L4",
        "rl",
        "zero-std groups not zeroed",
        "rl/grpo.py",
        "adv = adv.masked_fill(zero_std_B[:, None], 0.0)",
        "adv = adv",
        RL,
    ),
    M(
        "L5",
        "rl",
        "clip range symmetric (eps_high ignored)",
        "rl/grpo.py",
        "torch.clamp(ratio_NT, 1.0 - eps_low, 1.0 + eps_high)",
        "torch.clamp(ratio_NT, 1.0 - eps_low, 1.0 + eps_low)",
        RL,
    ),
    M(
        "L6",
        "rl",
        "surrogate takes max instead of min (no pessimism)",
        "rl/grpo.py",
        "per_tok_NT = -torch.min(surr1_NT, surr2_NT)",
        "per_tok_NT = -torch.max(surr1_NT, surr2_NT)",
        RL,
    ),
    M("L7", "rl", "k3 KL direction", "rl/grpo.py", "d_NT = ref_logp_NT - logp_NT", "d_NT = logp_NT - ref_logp_NT", RL),
    M(
        "L8",
        "rl",
        "zero-std groups kept despite drop_zero_std",
        "rl/learner.py",
        "                if cfg.drop_zero_std:\n                    continue",
        "                if cfg.drop_zero_std:\n                    pass",
        RL,
    ),
    M(
        "L9",
        "rl",
        "token-mean normaliser ignores the global token count",
        "rl/grpo.py",
        "denom = local_tokens if num_tokens is None else torch.as_tensor(num_tokens, dtype=logp_NT.dtype)",
        "denom = local_tokens",
        RL,
    ),
    # ---- run ---------------------------------------------------------------------------------
    M(
        "U1",
        "run",
        "checkpoint pointer moves with the phase mark",
        "run/state.py",
        'data["checkpoints"][role] = rel',
        "pass",
        RUN,
    ),
    M(
        "U2",
        "run",
        "metrics of an unfinished phase cut on resume",
        "run/__init__.py",
        'run.metrics.truncate(int(run.state.data.get("metrics_bytes", 0)))',
        "pass",
        RUN,
    ),
    M(
        "U3",
        "run",
        "state kept in memory only after the write",
        "run/state.py",
        "        atomic_write_json(self.path, data)\n        self.data = data",
        "        atomic_write_json(self.path, data)",
        RUN,
    ),
    M(
        "U4",
        "run",
        "a finished phase is skipped on resume",
        "run/__init__.py",
        '        if rec is not None:\n            self.say(f"[skip]',
        '        if False:\n            self.say(f"[skip]',
        RUN,
    ),
    M(
        "U5",
        "run",
        "metrics offset recorded with the phase mark",
        "run/state.py",
        'data["metrics_bytes"] = metrics_bytes',
        "pass",
        RUN,
    ),
    M(
        "U6",
        "run",
        "Run.open removes temp files and folders a killed writer left",
        "run/__init__.py",
        'for tmp in list(path.rglob(f".*{TMP_SUFFIX}")):',
        "for tmp in []:",
        RUN,
    ),
    M(
        "U7",
        "run",
        "derive_seed stable across processes (Python hash)",
        "run/__init__.py",
        "h = hashlib.sha256(repr((master,) + parts).encode()).digest()",
        'h = hash((master,) + parts).to_bytes(8, "little", signed=True)',
        SEEDS,
    ),
    M(
        "U8",
        "run",
        "older checkpoints kept beyond keep_checkpoints",
        "run/state.py",
        "while len(hist) > keep:",
        "while len(hist) > keep + 1:",
        RUN,
    ),
    M(
        "U9",
        "run",
        "atomic write: temp file left behind after a failed write",
        "run/files.py",
        "        with contextlib.suppress(FileNotFoundError):\n            os.unlink(tmp)\n",
        "        pass\n",
        RUN,
    ),
    M(
        "U10",
        "run",
        "a killed writer's temp file not named as Run.open expects",
        "run/files.py",
        'prefix=f".{path.name}.", suffix=TMP_SUFFIX)',
        'prefix=f".{path.name}.", suffix=".part")',
        RUN,
    ),
    M(
        "U11",
        "run",
        "metrics truncation keeps the cut lines",
        "run/metrics.py",
        "if self.path.exists() and self.path.stat().st_size > nbytes:",
        "if False:",
        RUN,
    ),
    M(
        "U12",
        "run",
        "phase seeds from the phase key",
        "run/__init__.py",
        "seed = derive_seed(self.seed, phase.key)",
        "seed = derive_seed(self.seed, phase.name)",
        RUN,
    ),
    # ---- wiring outside the five packages, from the same review ---------------------------------
    M(
        "W1",
        "answers",
        "grader says 'equal' for everything",
        "answers/grader.py",
        "        verdict = self._cheap(a, b)\n        if verdict is not None:",
        "        verdict = True\n        if verdict is not None:",
        (
            "tests/test_answers.py::test_cheap_path_needs_no_worker",
            "tests/test_answers.py::test_property_no_false_equal_on_random_pairs",
            "tests/test_answers.py::test_regression_set_agreement",
        ),
    ),
    M(
        "W2",
        "engine",
        "per-prompt seeds include the occurrence",
        "engine/base.py",
        "out.append(derive_seed(seed, p, k))",
        "out.append(derive_seed(seed, p, 0))",
        SEEDS,
    ),
    M(
        "W3",
        "engine",
        "HF sampler seeds torch",
        "engine/hf.py",
        '    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):\n'
        "        torch.manual_seed(seed)\n",
        '    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):\n',
        SEEDS,
    ),
    M(
        "W4",
        "config",
        "config default α (paper: 0.9)",
        "schema.py",
        "alpha: float = Field(0.9, ge=0, le=1,",
        "alpha: float = Field(0.8, ge=0, le=1,",
        REWARD_WIRING,
    ),
    M(
        "W6",
        "schema",
        "the one band test: inclusive, with the float tolerance",
        "schema.py",
        "return low - BAND_TOLERANCE <= x <= high + BAND_TOLERANCE",
        "return low < x < high",
        (*REWARDS, *CURRICULUM),
    ),
    M(
        "W5",
        "training",
        "configured α reaches the recipe's solver reward",
        "training.py",
        "r, bd = solver_rewards(list(texts), correct, alpha)",
        "r, bd = solver_rewards(list(texts), correct)",
        REWARD_WIRING,
    ),
]


@dataclass
class Outcome:
    id: str
    package: str
    behaviour: str
    result: str  # killed | survived | timeout | stale | error | no tests
    by: str = ""  # the first failing test, or why stale / error
    seconds: float = 0.0
    equivalent: str = ""
    tests: list[str] = field(default_factory=list)


def _tracked_files(root: Path) -> list[str]:
    """Files git tracks or would track (untracked, not ignored); every file when ``root`` is no
    git checkout (e.g. a ``git archive`` export)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True, check=True
        ).stdout.decode()
        return [f for f in out.split("\0") if f and ((root / f).is_file() or (root / f).is_symlink())]
    except (subprocess.CalledProcessError, FileNotFoundError):
        return [
            str(p.relative_to(root))
            for p in root.rglob("*")
            if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.parts
        ]


def copy_tree(root: Path, dest: Path) -> None:
    for rel in _tracked_files(root):
        src, target = root / rel, dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():  # e.g. configs/real -> the package's presets: kept a link, as in the checkout
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def _existing(tests: tuple[str, ...], root: Path) -> list[str]:
    return [t for t in tests if (root / t.split("::")[0]).is_file()]


def run_pytest(tree: Path, tests: list[str], timeout: float) -> tuple[str, str, float]:
    """(result, first failing test or the error's last line, seconds) of pytest on ``tests``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, "-m", "pytest", *PYTEST, *tests],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"no result after {timeout:.0f} s", time.perf_counter() - t0
    secs = time.perf_counter() - t0
    out = p.stdout + p.stderr
    if p.returncode == 0:
        return "survived", "", secs
    if p.returncode == 1:
        failed = re.findall(r"^FAILED (\S+)", out, re.M)
        return "killed", failed[0] if failed else "(a test failed)", secs
    last = [x for x in out.strip().splitlines() if x.strip()]
    return "error", f"pytest exit {p.returncode}: {last[-1] if last else ''}", secs


def check_edits(src: Path, m: Mutant) -> str:
    """Why the mutant cannot be applied to ``src`` ('' when it can)."""
    path = src / "coevolve" / m.file
    if not path.is_file():
        return f"no file {m.file}"
    text = path.read_text(encoding="utf-8")
    for old, _ in m.edits:
        n = text.count(old)
        if n != 1:
            return f"{m.file}: the text to change occurs {n} times: {old.strip().splitlines()[0][:60]!r}"
    return ""


def apply(src: Path, m: Mutant) -> str:
    """Write the mutated file; return the original text."""
    path = src / "coevolve" / m.file
    orig = path.read_text(encoding="utf-8")
    text = orig
    for old, new in m.edits:
        text = text.replace(old, new, 1)
    path.write_text(text, encoding="utf-8")
    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)
    return orig


def table(outcomes: list[Outcome]) -> str:
    rows = ["| id | package | behaviour | result | first failing test / note | s |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        note = o.by or (f"equivalent: {o.equivalent}" if o.equivalent else "")
        rows.append(f"| {o.id} | {o.package} | {o.behaviour} | {o.result} | {note} | {o.seconds:.0f} |")
    count = {
        r: sum(o.result == r for o in outcomes) for r in ("killed", "timeout", "survived", "stale", "error", "no tests")
    }
    rows.append("")
    rows.append(", ".join(f"{k}: {v}" for k, v in count.items() if v) + f" (of {len(outcomes)})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT, help="tree to mutate (default: this checkout)")
    ap.add_argument("--only", default="", help="comma-separated mutant ids")
    ap.add_argument(
        "--package", default="", help="comma-separated packages (rewards, curriculum, memory, rl, run, ...)"
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    ap.add_argument("--out", type=Path, help="write the outcomes as JSON here")
    ap.add_argument("--list", action="store_true", help="list the mutants and check they apply; run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    args = ap.parse_args(argv)

    root = args.root.resolve()
    chosen = [
        m
        for m in MUTANTS
        if (not args.only or m.id in args.only.split(","))
        and (not args.package or m.package in args.package.split(","))
    ]
    if not chosen:
        ap.error("no mutant matches --only / --package")
    if args.list:
        bad = 0
        for m in chosen:
            why = check_edits(root / "src", m)
            bad += bool(why)
            print(f"{m.id:5} {m.package:10} {'STALE ' + why if why else 'ok':40.40} {m.behaviour}")
        return 1 if bad else 0

    tmp = Path(tempfile.mkdtemp(prefix="coevolve-mutants-"))
    try:
        tree = tmp / "tree"
        copy_tree(root, tree)
        print(f"copy of {root} in {tree}", flush=True)
        union = sorted({t for m in chosen for t in _existing(m.tests, tree)})
        result, by, secs = run_pytest(tree, union, args.timeout)
        print(f"baseline (no mutation, {len(union)} test paths): {result} {by} in {secs:.0f} s", flush=True)
        if result != "survived":
            print("the tests fail without any mutation: fix that first", file=sys.stderr)
            return 2
        outcomes: list[Outcome] = []
        for m in chosen:
            tests = _existing(m.tests, tree)
            o = Outcome(m.id, m.package, m.behaviour, "no tests", equivalent=m.equivalent, tests=tests)
            why = check_edits(tree / "src", m)
            if why:
                o.result, o.by = "stale", why
            elif tests:
                orig = apply(tree / "src", m)
                try:
                    o.result, o.by, o.seconds = run_pytest(tree, tests, args.timeout)
                finally:
                    path = tree / "src" / "coevolve" / m.file
                    path.write_text(orig, encoding="utf-8")
                    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)
            outcomes.append(o)
            print(f"{m.id:5} {o.result:9} {o.seconds:5.0f} s  {m.behaviour}  {o.by}", flush=True)
        print()
        print(table(outcomes))
        if args.out:
            args.out.write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
        return 1 if any(o.result == "survived" and not o.equivalent for o in outcomes) else 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
