"""The study's grid as data: every variant (a recipe, its preset file, the overrides that make it
this variant, what it is compared with) and the paper's figure for it. ``coevolve study`` runs
them (``coevolve.lab.study``); each ablation is defined once, here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One cell family of the grid: a recipe, the preset file it starts from (a file name looked
    up in the preset folder: ``grpo.yaml``, ``d2evo.yaml``, ``diagevo.yaml``, ``rzero.yaml``), the
    overrides that make it this variant, the variant it is compared with (``reference``: the
    full method for an ablation, None for a reference itself) and the paper's figure for it."""

    name: str
    recipe: str
    config: str
    overrides: tuple[str, ...] = ()
    reference: str | None = None
    paper: str = ""
    main: bool = False


def _abl(method: str, short: str, overrides: Sequence[str], paper: str) -> Variant:
    return Variant(f"{method}.{short}", method, f"{method}.yaml", tuple(overrides), method, paper)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("grpo", "grpo", "grpo.yaml", (), None, "full-data GRPO (19K labels): 49.28 (4B math)", main=True),
        Variant("d2evo", "d2evo", "d2evo.yaml", (), None, "D²Evo (0.1K labels): 51.35 (4B math)", main=True),
        Variant("diagevo", "diagevo", "diagevo.yaml", (), None, "DiagEvo: 72.3 (8B math)", main=True),
        Variant(
            "rzero",
            "diagevo",
            "rzero.yaml",
            (),
            None,
            "R-Zero: 46.91 (4B math, D²Evo table); 67.8 (8B, DiagEvo)",
            main=True,
        ),
        # D²Evo paper ablations (Qwen3-4B-Base math avg; full 51.35) and one of ours
        _abl("d2evo", "no_questioner", ["questioner=false"], "47.94"),
        _abl("d2evo", "no_share_weights", ["share_weights=false"], "49.99"),
        _abl("d2evo", "no_synthesis", ["synthesis=false"], "48.71"),
        _abl("d2evo", "random_anchors", ["anchor_selection=random"], "49.22"),
        _abl("d2evo", "rzero_reward", ["questioner_reward=rzero"], "ours: R-Zero's questioner reward"),
        _abl(
            "d2evo",
            "checked",
            ["label_verifier=checker"],
            "the paper's label check (GPT-5.2), a perfect checker standing in: wrong labels dropped",
        ),
        # DiagEvo paper ablations (Qwen3-8B math avg; full 72.3) and ours
        _abl("diagevo", "frozen_challenger", ["challenger.frozen=true"], "68.5 (-3.8)"),
        _abl("diagevo", "explore_only", ["memory.schedule=explore_only"], "69.5"),
        _abl("diagevo", "targeted_only", ["memory.schedule=targeted_only"], "70.1"),
        _abl("diagevo", "no_filter", ["pool.voting.filter=none"], "69.4"),
        _abl("diagevo", "absolute_filter", ["pool.voting.filter=absolute"], "70.9"),
        _abl("diagevo", "random_pair", ["memory.stitching=random_pair"], "71.3 (same-node +1.0)"),
        _abl("diagevo", "no_stitching", ["memory.stitching=off"], "-"),
        _abl(
            "diagevo",
            "no_memory",
            ["memory.enabled=false", "memory.schedule=explore_only"],
            "ours: no error memory (free exploration, no diagnosis)",
        ),
        _abl("diagevo", "llm_diagnoser", ["diagnoser.kind=llm"], "+1 math from 4B to 235B diagnoser"),
        _abl("diagevo", "rzero_reward", ["challenger.reward.kind=rzero"], "ours: R-Zero's challenger reward"),
        # the skill world's positive controls and label-budget axis (coevolve.lab.skill_study; preset configs/skill,
        # whose labelled set is L = 256: data.limit overrides give grpo 4L and 16L)
        Variant(
            "control.uniform",
            "grpo",
            "grpo.yaml",
            ("data.limit=null",),
            None,
            "ours: fresh gold draws, every skill (positive control)",
        ),
        Variant(
            "control.targeted",
            "grpo",
            "grpo.yaml",
            ("data.limit=null", "data.skill.focus=[sub,mul,div]"),
            None,
            "ours: fresh gold draws of the deficient skills only (positive control)",
        ),
        Variant(
            "control.random_anchors",
            "d2evo",
            "d2evo.yaml",
            ("questioner=false", "anchor_selection=random"),
            None,
            "ours: gold anchors drawn at random, no questioner (positive control; its pair is d2evo.no_questioner)",
        ),
        Variant("grpo.4L", "grpo", "grpo.yaml", ("data.limit=1024",), None, "ours: GRPO with 4L labels"),
        Variant("grpo.16L", "grpo", "grpo.yaml", ("data.limit=4096",), None, "ours: GRPO with 16L labels"),
    ]
}
"""Every variant the study knows, main methods first; ablations are named ``method.short``."""
