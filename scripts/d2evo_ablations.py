"""Run the D²Evo ablations (configs/d2evo_ablations.yaml) one after another, one seed each, and
print / save a comparison table (held-out greedy and sampled accuracy, base -> final, wall time).

    python scripts/d2evo_ablations.py --config configs/d2evo.yaml --out runs/d2evo_ablations
    python scripts/d2evo_ablations.py --config configs/d2evo_smoke.yaml --only full,no_questioner

Each variant is an ordinary run folder under --out (resumable with `coevolve resume`); a variant
whose folder already holds a finished run is not re-run, so the script itself can be restarted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from coevolve.config import dump_yaml, load_config  # noqa: E402
from coevolve.errors import ConfigError  # noqa: E402
from coevolve.run import RunDir  # noqa: E402


def load_variants(path: Path) -> dict[str, list[str]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    variants = data.get("variants")
    if not isinstance(variants, dict) or not all(isinstance(v, list) for v in variants.values()):
        raise ConfigError(f"{path}: expected 'variants: {{name: [override, ...]}}'")
    return {str(k): [str(x) for x in v] for k, v in variants.items()}


def run_variant(name: str, config: Path, overrides: list[str], out: Path) -> dict:
    from coevolve.recipes import d2evo

    path = out / name
    if (path / "summary.json").exists() and json.loads((path / "state.json").read_text()).get("status") == "finished":
        return json.loads((path / "summary.json").read_text())
    cfg = load_config("d2evo", config, overrides)
    if cfg.run.threads:
        import torch

        torch.set_num_threads(cfg.run.threads)
    run = RunDir.open(path) if (path / "state.json").exists() else RunDir.create(path, dump_yaml(cfg), "d2evo")
    run.set_status("running")
    summary = d2evo.run(cfg, run)
    run.set_status("finished")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "d2evo.yaml")
    ap.add_argument("--variants", type=Path, default=ROOT / "configs" / "d2evo_ablations.yaml")
    ap.add_argument("--out", type=Path, default=Path("runs") / "d2evo_ablations")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for every variant")
    a = ap.parse_args()
    variants = load_variants(a.variants)
    names = [n for n in a.only.split(",") if n] or list(variants)
    unknown = [n for n in names if n not in variants]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {list(variants)}")
    rows = []
    for n in names:
        t0 = time.time()
        s = run_variant(n, a.config, [*a.overrides, *variants[n], f"run.seed={a.seed}", "run.progress=false"], a.out)
        bench = next(iter(s["eval"].get("final", {})), None)
        base = s["eval"].get("base", {}).get(bench, {})
        fin = s["eval"].get("final", {}).get(bench, {})
        rows.append({"variant": n, "bench": bench, "base_greedy": base.get("greedy"), "final_greedy": fin.get("greedy"),
                     "base_sampled": base.get("sampled"), "final_sampled": fin.get("sampled"),
                     "wall_seconds": s.get("wall_seconds"), "session_seconds": round(time.time() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "ablations.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| variant | base greedy | final greedy | base sampled | final sampled | wall s |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['base_greedy']} | {r['final_greedy']} | {r['base_sampled']} | {r['final_sampled']} | {r['wall_seconds']} |" for r in rows]
    (a.out / "ablations.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
