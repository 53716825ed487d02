"""Hierarchical error-cause memory of DiagEvo (DiagEvo): skill nodes -> error causes.

The memory is a state machine that schedules the curriculum, not a flat list:

* every cause is *Active* (the solver still fails on it) or *Mastered* (questions targeted at it
  reached a mean self-consistency p1 >= θ_up);
* ``freq`` is f_t(e), the failures attributed to e during its *current* active period; promotion
  resets it to 0 so its probability mass flows back to free exploration, and a new failure on a
  Mastered cause re-activates it (counting that failure);
* F_t = Σ f_t(e) over Active causes; F_1 is the first non-zero round total, the reference of
  ``ε_{t+1} = F_1 / (F_1 + F_t / k)``;
* the challenger plan of the next round samples explore / targeted / stitched prompts from it.

Persistence is one JSON document written atomically so a run killed
at any instant leaves either the old or the new memory on disk, never half of one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from coevolve.errors import DataError
from coevolve.run.files import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from coevolve.memory.embed import Embedder

CauseState = Literal["active", "mastered"]
Stitching = Literal["same_node", "random_pair", "off"]
Schedule = Literal["mixed", "explore_only", "targeted_only"]
TargetMode = Literal["explore", "targeted", "stitched"]

MEMORY_FORMAT_VERSION = 1


MEMORY_FILE = "memory.json"
"""A round's saved memory in its run folder (``round_NN/memory.json``), the input of the next round."""


@dataclass
class SkillNode:
    """A skill (upper level of the memory) grouping related causes; ``name`` comes from the
    diagnosis that created it and is what node retrieval embeds."""

    id: str
    name: str
    cause_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "cause_ids": list(self.cause_ids)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SkillNode:
        return cls(id=str(d["id"]), name=str(d["name"]), cause_ids=[str(c) for c in d["cause_ids"]])


@dataclass
class Cause:
    """One transferable error cause.

    ``embedding`` caches the L2-normalised text embedding (None until an embedder saw it);
    ``freq`` counts failures in the current active period; ``history`` has one entry per round
    in which something happened: ``{"round", "failures", "targeted_mean_p1", "state_change"}``.
    ``source_id`` is the world's own id for the cause when the diagnoser knows one (toy traces).
    """

    id: str
    text: str
    skill_id: str
    embedding: list[float] | None = None
    state: CauseState = "active"
    freq: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    created_round: int = 0
    total_failures: int = 0
    source_id: str | None = None

    def _entry(self, round_: int) -> dict[str, Any]:
        """The history entry of ``round_`` (created on first use) so a round has one line."""
        if self.history and self.history[-1]["round"] == round_:
            return self.history[-1]
        e = {"round": round_, "failures": 0, "targeted_mean_p1": None, "state_change": None}
        self.history.append(e)
        return e

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "skill_id": self.skill_id,
            "embedding": self.embedding,
            "state": self.state,
            "freq": self.freq,
            "history": self.history,
            "created_round": self.created_round,
            "total_failures": self.total_failures,
            "source_id": self.source_id,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cause:
        state = str(d.get("state", "active"))
        if state not in ("active", "mastered"):
            raise DataError(f"cause {d.get('id')!r}: field 'state' must be active|mastered, got {state!r}")
        emb = d.get("embedding")
        return cls(
            id=str(d["id"]),
            text=str(d["text"]),
            skill_id=str(d["skill_id"]),
            embedding=None if emb is None else [float(x) for x in emb],
            state=state,  # type: ignore[arg-type]
            freq=int(d.get("freq", 0)),
            history=list(d.get("history") or []),
            created_round=int(d.get("created_round", 0)),
            total_failures=int(d.get("total_failures", 0)),
            source_id=None if d.get("source_id") is None else str(d["source_id"]),
        )


@dataclass
class Target:
    """What one challenger prompt of the next round aims at: ``mode`` and the causes whose texts
    go into the prompt ([] explore, [e] targeted, [e, mastered sibling] stitched)."""

    mode: TargetMode
    cause_ids: list[str]
    cause_texts: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "cause_ids": list(self.cause_ids), "cause_texts": list(self.cause_texts)}


def epsilon(F1: float | None, Ft: float, k: float = 1.0) -> float:
    """Exploration probability ``ε_{t+1} = F_1 / (F_1 + F_t / k)`` (DiagEvo).

    Few remaining failures (F_t small vs the reference F_1) -> explore more. Edge cases, chosen
    so the schedule is always defined: no reference yet (``F1`` None or <= 0: the memory has
    never seen a failure) -> 1.0, explore fully; ``Ft <= 0`` (every cause Mastered) -> 1.0.

    >>> epsilon(10, 10)
    0.5
    >>> epsilon(10, 30, k=1)
    0.25
    >>> epsilon(0, 5), epsilon(10, 0)
    (1.0, 1.0)
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k}")
    if F1 is None or F1 <= 0 or Ft <= 0:
        return 1.0
    return float(F1) / (float(F1) + float(Ft) / k)


class ErrorMemory:
    """Skill nodes and causes with the DiagEvo scheduling rules (see the module docstring)."""

    def __init__(self) -> None:
        self.nodes: dict[str, SkillNode] = {}
        self.causes: dict[str, Cause] = {}
        self.F1: float | None = None
        self.F1_round: int | None = None
        self.next_node = 1
        self.next_cause = 1
        self.merges: list[dict[str, Any]] = []

    # ----- structure -------------------------------------------------------------------------
    def add_node(self, name: str) -> SkillNode:
        """Create an empty skill node (ids are sequential so runs are reproducible)."""
        node = SkillNode(id=f"s{self.next_node:04d}", name=name.strip() or "unnamed skill")
        self.next_node += 1
        self.nodes[node.id] = node
        return node

    def add_cause(
        self,
        text: str,
        node_id: str | None = None,
        skill_name: str | None = None,
        *,
        round_: int = 0,
        embedding: Sequence[float] | None = None,
        source_id: str | None = None,
    ) -> Cause:
        """Attach a new Active cause (freq 0) to node ``node_id``, or to a new node named
        ``skill_name`` when ``node_id`` is None."""
        if node_id is None:
            if not skill_name:
                raise ValueError("add_cause needs node_id or skill_name")
            node_id = self.add_node(skill_name).id
        if node_id not in self.nodes:
            raise KeyError(f"unknown skill node {node_id!r}")
        c = Cause(
            id=f"c{self.next_cause:04d}",
            text=text.strip(),
            skill_id=node_id,
            embedding=None if embedding is None else [float(x) for x in embedding],
            created_round=round_,
            source_id=source_id,
        )
        self.next_cause += 1
        self.causes[c.id] = c
        self.nodes[node_id].cause_ids.append(c.id)
        return c

    def record_failure(self, cause_id: str, round_: int, count: int = 1) -> bool:
        """Count ``count`` failures on a cause; a Mastered cause is re-activated first (its new
        active period starts at 0). Returns True when this re-activated the cause."""
        c = self.causes[cause_id]
        reactivated = False
        e = c._entry(round_)
        if c.state == "mastered":
            c.state = "active"
            c.freq = 0
            e["state_change"] = "reactivated"
            reactivated = True
        c.freq += count
        c.total_failures += count
        e["failures"] += count
        return reactivated

    def update_promotions(
        self,
        targeted_p1: dict[str, Sequence[float]],
        round_: int,
        theta_up: float = 0.8,
        min_questions: int = 1,
        reference_p1: dict[str, Sequence[float]] | None = None,
    ) -> list[str]:
        """Promote every Active cause whose targeted questions this round reached a mean p1 >=
        ``theta_up`` (with at least ``min_questions`` of them): state Mastered, freq reset to 0.
        The mean is logged in the history of every cause that had targeted questions
        (``reference_p1``, when given, is logged beside it as ``reference_mean_p1``: e.g. the
        construction-time p1 when promotion uses the re-measured one).

        A cause re-activated in this same round is not promoted again: it has just failed, so
        mastery must be shown in a later round (otherwise a stitched question's high p1 could
        undo the re-activation at once). Returns the promoted ids."""
        promoted: list[str] = []
        for cid, p1s in sorted(targeted_p1.items()):
            if cid not in self.causes or len(p1s) == 0:
                continue
            c = self.causes[cid]
            mean = float(np.mean(np.asarray(p1s, dtype=float)))
            e = c._entry(round_)
            e["targeted_mean_p1"] = mean
            e["targeted_n"] = len(p1s)
            ref = (reference_p1 or {}).get(cid)
            if ref:
                e["reference_mean_p1"] = float(np.mean(np.asarray(ref, dtype=float)))
            if e.get("state_change") == "reactivated":
                continue
            if c.state == "active" and len(p1s) >= min_questions and mean >= theta_up:
                c.state = "mastered"
                c.freq = 0
                e["state_change"] = "promoted"
                promoted.append(cid)
        return promoted

    # ----- scheduling ------------------------------------------------------------------------
    def active(self) -> list[Cause]:
        return [c for c in self.causes.values() if c.state == "active"]

    def mastered(self) -> list[Cause]:
        return [c for c in self.causes.values() if c.state == "mastered"]

    def F_t(self) -> int:
        """Σ f_t(e) over Active causes."""
        return int(sum(c.freq for c in self.active()))

    def fix_reference(self, round_: int) -> None:
        """Store F_1 at the end of the first round whose total is non-zero (a first round that
        saw no failure leaves no usable reference; ε stays 1 until one exists)."""
        if self.F1 is None and self.F_t() > 0:
            self.F1 = float(self.F_t())
            self.F1_round = round_

    def epsilon(self, k: float = 1.0) -> float:
        return epsilon(self.F1, self.F_t(), k)

    def cause_probs(self) -> dict[str, float]:
        """``p(e) = f_t(e) / F_t`` over Active causes with f > 0 ({} when F_t == 0)."""
        Ft = self.F_t()
        if Ft <= 0:
            return {}
        return {c.id: c.freq / Ft for c in self.active() if c.freq > 0}

    def sample_targets(
        self,
        rng: np.random.Generator,
        n: int,
        stitching: Stitching = "same_node",
        schedule: Schedule = "mixed",
        k: float = 1.0,
    ) -> list[Target]:
        """The targets of ``n`` challenger prompts for the next round.

        ``mixed``: explore with prob ε, else targeted; ``explore_only``: always explore;
        ``targeted_only``: always targeted (explore only while no Active cause has failures,
        since there is nothing to target). A targeted cause e ~ p(e); if stitching is
        ``same_node`` and e's node holds a Mastered sibling (uniform among them), or
        ``random_pair`` and any Mastered cause exists (uniform, anywhere), both are stitched.
        """
        if stitching not in ("same_node", "random_pair", "off"):
            raise ValueError(f"stitching must be same_node|random_pair|off, got {stitching!r}")
        if schedule not in ("mixed", "explore_only", "targeted_only"):
            raise ValueError(f"schedule must be mixed|explore_only|targeted_only, got {schedule!r}")
        probs = self.cause_probs()
        ids = sorted(probs)
        p = np.asarray([probs[i] for i in ids], dtype=float)  # (E,)
        eps = {"mixed": self.epsilon(k), "explore_only": 1.0, "targeted_only": 0.0}[schedule]
        all_mastered = sorted(c.id for c in self.mastered())
        targets: list[Target] = []
        for _ in range(n):
            if not ids or rng.random() < eps:
                targets.append(Target("explore", [], []))
                continue
            e = self.causes[ids[int(rng.choice(len(ids), p=p))]]
            partner: str | None = None
            if stitching == "same_node":
                sib = sorted(c for c in self.nodes[e.skill_id].cause_ids if self.causes[c].state == "mastered")
                if sib:
                    partner = sib[int(rng.integers(len(sib)))]
            elif stitching == "random_pair" and all_mastered:
                partner = all_mastered[int(rng.integers(len(all_mastered)))]
            if partner is None:
                targets.append(Target("targeted", [e.id], [e.text]))
            else:
                targets.append(Target("stitched", [e.id, partner], [e.text, self.causes[partner].text]))
        return targets

    # ----- embeddings and merging --------------------------------------------------------------
    def ensure_embeddings(self, embedder: Embedder) -> None:
        """Embed every cause whose cached embedding is missing (one batched call)."""
        todo = [c for c in self.causes.values() if c.embedding is None]
        if todo:
            vecs = embedder.encode([c.text for c in todo])  # (n, d)
            for c, v in zip(todo, vecs):
                c.embedding = [float(x) for x in v]

    def node_vectors(self, embedder: Embedder) -> tuple[list[str], np.ndarray]:
        """Node ids and one L2-normalised vector per node: the mean of its name embedding and
        its causes' embeddings (name alone for an empty node). Returns ``(ids, (S, d))``."""
        self.ensure_embeddings(embedder)
        ids = sorted(self.nodes)
        if not ids:
            return [], np.zeros((0, 0), dtype=np.float32)
        names = embedder.encode([self.nodes[i].name for i in ids])  # (S, d)
        out = []
        for i, nid in enumerate(ids):
            vs = [names[i]] + [
                np.asarray(self.causes[c].embedding, dtype=np.float32) for c in self.nodes[nid].cause_ids
            ]
            m = np.mean(np.stack(vs), axis=0)  # (d,)
            out.append(m / max(float(np.linalg.norm(m)), 1e-12))
        return ids, np.stack(out).astype(np.float32)

    def merge_redundant_nodes(self, embedder: Embedder, threshold: float, round_: int = 0) -> list[tuple[str, str]]:
        """Merge skill nodes whose vectors have cosine >= ``threshold`` (most similar pair first,
        recomputed after every merge): the smaller node's causes move into the larger one (ties:
        the older id survives). Returns ``[(kept, removed), ...]`` and logs them in ``merges``."""
        done: list[tuple[str, str]] = []
        while len(self.nodes) > 1:
            ids, V = self.node_vectors(embedder)
            S = V @ V.T  # (S, S)
            np.fill_diagonal(S, -np.inf)
            i, j = np.unravel_index(int(np.argmax(S)), S.shape)
            if S[i, j] < threshold:
                break
            a, b = self.nodes[ids[i]], self.nodes[ids[j]]
            keep, drop = (a, b) if (len(a.cause_ids), b.id) >= (len(b.cause_ids), a.id) else (b, a)
            for cid in drop.cause_ids:
                self.causes[cid].skill_id = keep.id
                keep.cause_ids.append(cid)
            del self.nodes[drop.id]
            done.append((keep.id, drop.id))
            self.merges.append(
                {
                    "round": round_,
                    "kept": keep.id,
                    "removed": drop.id,
                    "removed_name": drop.name,
                    "similarity": float(S[i, j]),
                }
            )
        return done

    # ----- summaries and persistence ---------------------------------------------------------
    def stats(self, k: float = 1.0) -> dict[str, float]:
        return {
            "causes": len(self.causes),
            "nodes": len(self.nodes),
            "active": len(self.active()),
            "mastered": len(self.mastered()),
            "F_t": self.F_t(),
            "F_1": self.F1 if self.F1 is not None else 0.0,
            "next_epsilon": self.epsilon(k),
        }

    def check(self) -> None:
        """Raise ``DataError`` when the node/cause links are inconsistent (used after load)."""
        seen: set[str] = set()
        for nid, node in self.nodes.items():
            for cid in node.cause_ids:
                if cid not in self.causes:
                    raise DataError(f"memory: node {nid} lists unknown cause {cid}")
                if self.causes[cid].skill_id != nid:
                    raise DataError(f"memory: cause {cid} is listed under {nid} but says {self.causes[cid].skill_id}")
                if cid in seen:
                    raise DataError(f"memory: cause {cid} is listed under two nodes")
                seen.add(cid)
        missing = set(self.causes) - seen
        if missing:
            raise DataError(f"memory: causes without a node: {sorted(missing)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MEMORY_FORMAT_VERSION,
            "F1": self.F1,
            "F1_round": self.F1_round,
            "next_node": self.next_node,
            "next_cause": self.next_cause,
            "nodes": [self.nodes[i].to_dict() for i in sorted(self.nodes)],
            "causes": [self.causes[i].to_dict() for i in sorted(self.causes)],
            "merges": self.merges,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>") -> ErrorMemory:
        try:
            m = cls()
            m.F1 = None if d.get("F1") is None else float(d["F1"])
            m.F1_round = None if d.get("F1_round") is None else int(d["F1_round"])
            m.next_node = int(d["next_node"])
            m.next_cause = int(d["next_cause"])
            m.nodes = {n["id"]: SkillNode.from_dict(n) for n in d["nodes"]}
            m.causes = {c["id"]: Cause.from_dict(c) for c in d["causes"]}
            m.merges = list(d.get("merges") or [])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{source}: malformed error memory ({type(exc).__name__}: {exc})") from exc
        try:
            m.check()
        except DataError as exc:
            raise DataError(f"{source}: {exc}") from exc
        return m

    def save(self, path: str | Path) -> Path:
        """Write the memory as one JSON document, atomically (``coevolve.run.files``)."""
        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> ErrorMemory:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: no error memory file")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from exc
        return cls.from_dict(d, source=str(path))


def render_tree(memory: ErrorMemory, next_epsilon: bool = True, k: float = 1.0) -> str:
    """Plain-text tree (what ``coevolve memory RUN_DIR`` prints): skill nodes -> causes with
    state, active-period frequency f, total failures and the p(e) / ε the next round uses."""
    probs = memory.cause_probs()
    s = memory.stats(k)
    lines = [
        f"error memory: {s['nodes']} skill nodes, {s['causes']} causes "
        f"({s['active']} active, {s['mastered']} mastered), F_t={s['F_t']}, "
        f"F_1={memory.F1 if memory.F1 is not None else '-'}"
    ]
    if next_epsilon:
        lines.append(
            f"next round: epsilon={memory.epsilon(k):.3f} (explore), "
            f"1-epsilon={1 - memory.epsilon(k):.3f} targeted by p(e)"
        )
    for nid in sorted(memory.nodes, key=lambda i: (-len(memory.nodes[i].cause_ids), i)):
        node = memory.nodes[nid]
        lines.append(f"[{nid}] {node.name}  ({len(node.cause_ids)} causes)")
        for j, cid in enumerate(node.cause_ids):
            c = memory.causes[cid]
            branch = "└─" if j == len(node.cause_ids) - 1 else "├─"
            p = probs.get(cid, 0.0)
            tag = "ACTIVE  " if c.state == "active" else "MASTERED"
            lines.append(f"  {branch} {cid} {tag} f={c.freq:<3d} total={c.total_failures:<3d} p(e)={p:.3f}  {c.text}")
    return "\n".join(lines)
