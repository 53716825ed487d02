"""One round of DiagEvo memory maintenance (stage 4) as a single function.

For every kept question x (pseudo-label ŷ, the causes it was targeted at E_known(x), and its G
optimisation responses with their agree-with-ŷ flags), pair **every** failed response r⁻ with a
successful r⁺ of the same question (DiagEvo: one diagnosis call per failed trajectory), diagnose
``e_new = D_ext(x, ŷ, r⁻, r⁺)`` in batched calls and file it:

1. match e_new against E_known(x) (cosine >= ``match_threshold``): a hit counts a failure on that
   cause (re-activating it when it was Mastered);
2. otherwise retrieve the ``retrieve_k`` most similar known causes; a duplicate (cosine >=
   ``dup_threshold``, or confirmed by the optional ``confirm(new, old) -> bool`` model call for
   candidates >= ``confirm_min_sim``) gets the failure;
3. otherwise a new cause is created under the skill node whose name is most similar to the
   diagnosis' skill (cosine >= ``node_threshold``) or under a new node named by that skill.

Then promotions from the mean p1 of each cause's targeted questions (θ_up), the round-end merge
of redundant skill nodes, and the F_1 reference once a round saw failures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from coevolve.memory.diagnose import Diagnoser, Diagnosis
from coevolve.memory.embed import Embedder, cosine_top_k
from coevolve.memory.store import ErrorMemory, Schedule, Stitching
from coevolve.schema import Strict


@dataclass
class KeptQuestion:
    """A question kept for solver training, as memory maintenance needs it."""

    question: str
    label: str
    target_cause_ids: list[str]
    responses: list[str]
    matches: list[bool]
    id: str = ""


PromotionSource = Literal["updated", "construction"]


class MemoryConfig(Strict):
    """DiagEvo stage 4 and the scheduling of the next round (the ``memory`` config section).

    Thresholds are our defaults (the paper gives none), calibrated with all-MiniLM-L6-v2 on the
    toy cause catalogue: distinct catalogue causes reach at most cosine 0.79 (dup 0.9 keeps them
    apart), distinct skill names at most 0.54 (node 0.7), distinct node centroids at most 0.61
    (merge 0.85)."""

    enabled: bool = Field(
        True,
        description="Stage 4 on/off. false: no diagnosis, no re-measurement, the memory stays empty (so every "
        "schedule explores freely) - the R-Zero-style baseline (configs/rzero.yaml), where diagnosis would be pure cost.",
    )
    schedule: Schedule = Field(
        "mixed",
        description="'mixed' (ε-scheduled, paper), 'explore_only' (ablation 69.5), 'targeted_only' (ablation 70.1).",
    )
    stitching: Stitching = Field(
        "same_node",
        description="Cross-state stitching: Mastered sibling of the same node (paper), random Mastered cause "
        "(ablation, -1.0), or none.",
    )
    k: float = Field(
        1.0, gt=0, description="ε_{t+1} = F_1/(F_1 + F_t/k); the paper finds k insensitive (our default 1)."
    )
    theta_up: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Promotion: Active -> Mastered when targeted questions reach mean p1 >= θ_up (our default 0.8).",
    )
    min_targeted: int = Field(
        3,
        ge=1,
        description="Targeted candidate questions a cause needs in a round before it can be promoted (our default).",
    )
    promotion_p1: PromotionSource = Field(
        "updated",
        description="Which p1 of the round's targeted candidate questions promotion compares with θ_up: "
        "'updated' (default; re-measured in the memory phase with the solver AFTER this round's GRPO, pool.voting.samples "
        "answers each: the solver has reached θ_up) or 'construction' (the pool's p1 from the frozen solver BEFORE the "
        "update; cheaper).",
    )
    embedder: Literal["minilm", "hash"] = Field(
        "minilm",
        description="Cause embeddings: all-MiniLM-L6-v2 offline (needs the 'embed' extra) or 'hash' (a "
        "char-n-gram hash, for tests only).",
    )
    match_threshold: float = Field(0.85, ge=-1, le=1, description="Cosine for e_new to match a cause in E_known(x).")
    retrieve_k: int = Field(5, ge=1, description="Similar known causes retrieved for duplicate confirmation.")
    dup_threshold: float = Field(0.9, ge=-1, le=1, description="Cosine above which a retrieved cause is a duplicate.")
    confirm_duplicates: bool = Field(
        False, description="Ask the diagnoser model yes/no for candidates above confirm_min_sim (llm diagnoser only)."
    )
    confirm_min_sim: float = Field(
        0.6, ge=-1, le=1, description="Lowest cosine of a candidate the diagnoser model is asked about."
    )
    node_threshold: float = Field(
        0.7, ge=-1, le=1, description="Cosine (skill name vs node name) to file a new cause under an existing node."
    )
    merge_threshold: float = Field(
        0.85, ge=-1, le=1, description="Round-end merge of skill nodes whose centroids reach this cosine."
    )
    max_pairs_per_question: int | None = Field(
        None,
        ge=1,
        description="Cost control (ours): at most this many failed responses r- of a kept question are "
        "diagnosed, each paired with a successful r+ of the same question. None = every failed response (paper: one "
        "diagnosis call per failed trajectory).",
    )
    max_diagnoses_per_round: int | None = Field(
        None,
        ge=1,
        description="Cost control (ours): at most this many diagnosis calls per round (cost grows linearly "
        "with the failures). None = no cap (paper). A cap samples the failures that drive f_t(e), F_t, ε and p(e).",
    )

    @field_validator("stitching", mode="before")
    @classmethod
    def _off(cls, v: object) -> object:
        """YAML reads a bare ``off`` as False; ``memory.stitching=off`` must still mean 'off'."""
        return "off" if v is False else v


@dataclass
class MaintenanceResult:
    """``stats`` (flat numbers for metrics.jsonl), one record per diagnosis attempt, and the
    ids promoted / re-activated this round."""

    stats: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)
    promoted: list[str] = field(default_factory=list)
    reactivated: list[str] = field(default_factory=list)


def select_pairs(
    kept: Sequence[KeptQuestion],
    rng: np.random.Generator,
    max_pairs_per_question: int | None = None,
    max_total: int | None = None,
) -> list[tuple[int, int, int]]:
    """``(question index, failed response index, successful response index)`` triples: every
    failed response r⁻ of a question that has a successful one, each paired with a random r⁺ of
    the same question (DiagEvo: one diagnosis per failed trajectory; a question whose G responses
    all fail has no r⁺ to contrast and is skipped). Questions in random order; the optional cost
    controls keep at most ``max_pairs_per_question`` random failures of a question and at most
    ``max_total`` pairs overall (None: no cap, the paper's behaviour).

    >>> q = KeptQuestion("2+2", "4", [], ["5", "4", "3"], [False, True, False])
    >>> sorted(select_pairs([q], np.random.default_rng(0)))
    [(0, 0, 1), (0, 2, 1)]
    """
    out: list[tuple[int, int, int]] = []
    for qi in rng.permutation(len(kept)).tolist():
        q = kept[qi]
        bad = [i for i, m in enumerate(q.matches) if not m]
        good = [i for i, m in enumerate(q.matches) if m]
        if not bad or not good:
            continue
        if max_pairs_per_question is not None and len(bad) > max_pairs_per_question:
            bad = sorted(rng.choice(bad, size=max_pairs_per_question, replace=False).tolist())
        for b in bad:
            if max_total is not None and len(out) >= max_total:
                return out
            out.append((qi, b, good[int(rng.integers(len(good)))]))
    return out


def targeted_questions(pool_rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The candidate-pool rows that were written for at least one cause (targeted or stitched
    plans; ``row["meta"]["cause_ids"]`` non-empty), in pool order: the promotion evidence."""
    return [r for r in pool_rows if (r.get("meta") or {}).get("cause_ids")]


def targeted_p1_by_cause(
    pool_rows: Sequence[Mapping[str, Any]], source: PromotionSource, updated_p1: Mapping[str, float] | None = None
) -> dict[str, list[float]]:
    """Cause id -> the p1 of every candidate question targeted at it this round (promotion input).

    ``source="construction"``: the p1 stored in the pool row, measured by the frozen solver
    *before* this round's solver update (what the challenger wrote against). ``"updated"``: the
    p1 re-measured with the solver *after* this round's update, ``updated_p1[row id]`` (DiagEvo:
    a cause is Mastered once the solver has *reached* mean p1 >= θ_up on its questions).
    Raises ``KeyError`` naming the question when an updated measurement is missing, so a
    partial re-measurement can never promote silently on fewer questions."""
    if source not in ("updated", "construction"):
        raise ValueError(f"promotion p1 source must be updated|construction, got {source!r}")
    out: dict[str, list[float]] = {}
    for r in targeted_questions(pool_rows):
        if source == "construction":
            p1 = float(r["p1"])
        else:
            if updated_p1 is None or r["id"] not in updated_p1:
                raise KeyError(f"no re-measured p1 for targeted question {r['id']!r}")
            p1 = float(updated_p1[r["id"]])
        for cid in r["meta"]["cause_ids"]:
            out.setdefault(cid, []).append(p1)
    return out


def file_diagnosis(
    memory: ErrorMemory,
    d: Diagnosis,
    emb: np.ndarray,
    known: Sequence[str],
    embedder: Embedder,
    cfg: MemoryConfig,
    round_: int,
    confirm: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """File one diagnosis (embedding ``emb`` (d,)) into the memory; returns what happened:
    ``{"action": known|duplicate|new_cause|new_node, "cause_id", "similarity", "reactivated"}``."""
    memory.ensure_embeddings(embedder)
    known = [c for c in known if c in memory.causes]
    if known:
        K = np.asarray([memory.causes[c].embedding for c in known], dtype=np.float32)  # (k, d)
        ((i, s),) = cosine_top_k(emb, K, 1)
        if s >= cfg.match_threshold:
            re = memory.record_failure(known[i], round_)
            return {"action": "known", "cause_id": known[i], "similarity": s, "reactivated": re}
    ids = sorted(memory.causes)
    if ids:
        M = np.asarray([memory.causes[c].embedding for c in ids], dtype=np.float32)  # (C, d)
        cands = cosine_top_k(emb, M, cfg.retrieve_k)
        hit: tuple[str, float] | None = None
        if cands and cands[0][1] >= cfg.dup_threshold:
            hit = (ids[cands[0][0]], cands[0][1])
        elif confirm is not None:
            for i, s in cands:
                if s >= cfg.confirm_min_sim and confirm(d.cause, memory.causes[ids[i]].text):
                    hit = (ids[i], s)
                    break
        if hit is not None:
            re = memory.record_failure(hit[0], round_)
            return {"action": "duplicate", "cause_id": hit[0], "similarity": hit[1], "reactivated": re}
    node_id: str | None = None
    best = -1.0
    nids = sorted(memory.nodes)
    if nids:
        names = embedder.encode([memory.nodes[n].name for n in nids])  # (S, d)
        skill_emb = embedder.encode([d.skill])[0]  # (d,)
        scores = names @ skill_emb  # (S,)
        j = int(np.argmax(scores))
        best = float(scores[j])
        if best >= cfg.node_threshold:
            node_id = nids[j]
    c = memory.add_cause(d.cause, node_id, d.skill, round_=round_, embedding=emb.tolist(), source_id=d.source_id)
    memory.record_failure(c.id, round_)
    return {
        "action": "new_cause" if node_id is not None else "new_node",
        "cause_id": c.id,
        "similarity": best,
        "reactivated": False,
    }


def _file_diagnoses(
    memory: ErrorMemory,
    kept: Sequence[KeptQuestion],
    pairs: Sequence[tuple[int, int, int]],
    diags: Sequence[Diagnosis | None],
    embedder: Embedder,
    cfg: MemoryConfig,
    round_: int,
    confirm: Callable[[str, str], bool] | None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """File each valid diagnosis of a (question, bad, good) pair into ``memory`` (one batched
    embedding of the causes); the per-pair records and the count of each filing action."""
    valid = [d for d in diags if d is not None]
    embs = embedder.encode([d.cause for d in valid]) if valid else np.zeros((0, 1))  # (V, d)
    counts = {"known": 0, "duplicate": 0, "new_cause": 0, "new_node": 0, "reactivated": 0}
    records: list[dict[str, Any]] = []
    vi = 0
    for (q, b, g), d in zip(pairs, diags):
        rec: dict[str, Any] = {
            "round": round_,
            "question_id": kept[q].id,
            "question": kept[q].question,
            "label": kept[q].label,
            "bad": kept[q].responses[b],
            "good": kept[q].responses[g],
            "targets": list(kept[q].target_cause_ids),
            "diagnosis": None,
        }
        if d is not None:
            res = file_diagnosis(memory, d, embs[vi], kept[q].target_cause_ids, embedder, cfg, round_, confirm)
            vi += 1
            counts[res["action"]] += 1
            counts["reactivated"] += int(res["reactivated"])
            rec["diagnosis"] = {
                "divergence_step": d.divergence_step,
                "cause": d.cause,
                "skill": d.skill,
                "source_id": d.source_id,
            }
            rec.update(res)
        records.append(rec)
    return records, counts


def maintain_memory(
    memory: ErrorMemory,
    kept: Sequence[KeptQuestion],
    diagnoser: Diagnoser,
    embedder: Embedder,
    round_: int,
    cfg: MemoryConfig,
    targeted_p1: Mapping[str, Sequence[float]],
    rng: np.random.Generator,
    confirm: Callable[[str, str], bool] | None = None,
    reference_p1: Mapping[str, Sequence[float]] | None = None,
) -> MaintenanceResult:
    """Run stage 4 on ``memory`` in place (see the module docstring). ``targeted_p1`` maps a
    cause id to the p1 of every candidate question targeted at it this round (promotion input,
    see ``targeted_p1_by_cause``); ``reference_p1`` (optional, same shape) is only logged.
    """
    pairs = select_pairs(kept, rng, cfg.max_pairs_per_question, cfg.max_diagnoses_per_round)
    requests = [(kept[q].question, kept[q].label, kept[q].responses[b], kept[q].responses[g]) for q, b, g in pairs]
    diags = diagnoser.diagnose_batch(requests)
    valid = [d for d in diags if d is not None]
    records, counts = _file_diagnoses(memory, kept, pairs, diags, embedder, cfg, round_, confirm)
    promoted = memory.update_promotions(
        dict(targeted_p1), round_, cfg.theta_up, cfg.min_targeted, None if reference_p1 is None else dict(reference_p1)
    )
    merged = memory.merge_redundant_nodes(embedder, cfg.merge_threshold, round_)
    memory.fix_reference(round_)
    s = memory.stats(cfg.k)
    contrastable = [q for q in kept if any(q.matches) and not all(q.matches)]
    stats: dict[str, float] = {
        # every failure of a question with a success is diagnosed unless a cost cap is set
        "failed_responses": sum(m is False for q in contrastable for m in q.matches),
        "failed_without_success": sum(len(q.matches) for q in kept if q.matches and not any(q.matches)),
        "diagnoses_attempted": len(pairs),
        "diagnoses_ok": len(valid),
        "diagnoses_garbage": len(pairs) - len(valid),
        "diagnoser_success_rate": len(valid) / len(pairs) if pairs else 0.0,
        "matched_known": counts["known"],
        "duplicates": counts["duplicate"],
        "new_causes": counts["new_cause"] + counts["new_node"],
        "new_nodes": counts["new_node"],
        "reactivations": counts["reactivated"],
        "promotions": len(promoted),
        "merged_nodes": len(merged),
        "causes": s["causes"],
        "nodes": s["nodes"],
        "active": s["active"],
        "mastered": s["mastered"],
        "F_t": s["F_t"],
        "F_1": s["F_1"],
        "next_epsilon": s["next_epsilon"],
    }
    reactivated = sorted({r["cause_id"] for r in records if r.get("reactivated")})
    return MaintenanceResult(stats=stats, records=records, promoted=promoted, reactivated=reactivated)
