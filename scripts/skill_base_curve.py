"""Pretrain one long skill-world base and save a checkpoint every --every steps, then (or with
--measure-only) measure each checkpoint's profile and premise gate (written into its
skill_build.json, so a run can use the checkpoint as model.path): the numbers behind the skill
base's step count (docs/results/skill_world.md). A K-step checkpoint is the K-step base the cache builds
(one learning-rate schedule for every length: coevolve.world.skill.pretrain.lr_factor).

    PYTHONPATH=src python scripts/skill_base_curve.py --out /tmp/skillcurve --steps 3000 --every 300
    PYTHONPATH=src python scripts/skill_base_curve.py --out /tmp/skillcurve --measure-only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main(argv: list[str] | None = None) -> int:
    import torch

    from coevolve.world.skill.gate import failed_figures, premise_gate
    from coevolve.world.skill.pretrain import BUILD_FILE, build_skill_base, measure
    from coevolve.world.skill.problems import DEFICITS
    from coevolve.world.toy.tokenizer import build_tokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--every", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--per-stratum", type=int, default=10, help="held-out questions per (skill, depth) measured")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--measure-only", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    a.out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()

    def save(done: int, model) -> None:
        if done % a.every == 0:
            d = a.out / f"ckpt-{done:05d}"
            model.save_pretrained(d)
            tok.save_pretrained(d)
            # the marker of a skill base (a run can use the checkpoint as model.path with data.source=skill)
            (d / BUILD_FILE).write_text(
                json.dumps(
                    {
                        "world": "skill",
                        "steps": done,
                        "seed": a.seed,
                        "profile": DEFICITS.to_dict(),
                        "checkpoint_of": str(a.out),
                    }
                )
            )
            print(f"saved {d}", flush=True)

    if not a.measure_only:
        build_skill_base(
            a.out / "final", steps=a.steps, seed=a.seed, progress=False, measure_per_stratum=0, on_step=save
        )
    from transformers import AutoModelForCausalLM

    for d in sorted(a.out.glob("ckpt-*")):
        f = d / "profile.json"
        if f.is_file():
            continue
        model = AutoModelForCausalLM.from_pretrained(d).eval()
        fig = measure(model, tok, DEFICITS, per_stratum=a.per_stratum, samples=a.samples, seed=a.seed)
        f.write_text(json.dumps(fig, indent=1))
        # the checkpoint's figures and premise gate in its build file: a run's preflight judges it (data.skill.gate)
        gate = premise_gate(fig, DEFICITS)
        info = json.loads((d / BUILD_FILE).read_text())
        (d / BUILD_FILE).write_text(json.dumps({**info, "figures": fig, "premise_gate": gate}, indent=1))
        print(d.name, "premise gate:", "passed" if gate and gate["passed"] else failed_figures(gate) if gate else "-")
        acc = fig["accuracy"]
        print(
            d.name,
            f"greedy {fig['greedy']:.3f} sampled {fig.get('sampled', 0):.3f} bug {fig.get('bug_rate')}",
            flush=True,
        )
        for s, row in acc.items():
            print("  ", s, " ".join(f"d{k}:{v['greedy']:.2f}/{v.get('sampled', 0):.2f}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
