"""Recipe ``diagevo``: DiagEvo, diagnosis-guided self-evolution via a hierarchical error memory
(METHODS §2). Label-free: no labelled data enters training; labels exist only for evaluation
and, in the toy world, for the oracle metrics (pseudo-label accuracy, target hits).

Two separate models, one frozen while the other trains: the challenger writes questions, the
solver answers them. Every round t = 1..rounds runs five resumable phases (``coevolve.run``):

1. ``TT/challenger`` — plans from the memory of round t-1 (explore with prob ε, else an Active
   cause e ~ p(e) = f(e)/F_t, stitched with a Mastered sibling); the frozen solver answers every
   generated question N_v times; GRPO on the challenger with the plateau reward on p1 (or R-Zero's).
2. ``TT/pool`` — the updated challenger writes the candidate pool; N construction answers per
   question give ŷ (majority), p1, p2; dual-confidence filter. Oracle agreement of the labels is
   measured on the same pool under all three filters (none / absolute / dual).
3. ``TT/solver`` — GRPO on the kept questions, G fresh responses, reward +1 / -1 for matching ŷ.
4. ``TT/memory`` — diagnose one (r⁻, r⁺) pair per kept question, file the causes, promote,
   merge nodes; the memory is saved to ``round_TT/memory.json`` (the input of round t+1).
5. ``TT/eval`` — held-out accuracy of the solver.

Every phase reads its inputs from the run folder (previous artefacts + latest checkpoints) and
writes its outputs atomically before being marked done, so ``kill -9`` + ``coevolve resume``
reproduces an uninterrupted run exactly and the memory is never half-updated.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from coevolve.config.diagevo import DiagEvoConfig
from coevolve.memory.cli import MEMORY_FILE
from coevolve.memory.diagnose import DiagnoserStats, LLMDiagnoser, TraceDiagnoser
from coevolve.memory.maintain import (
    KeptQuestion,
    MaintenanceConfig,
    maintain_memory,
    targeted_p1_by_cause,
    targeted_questions,
)
from coevolve.memory.store import ErrorMemory, Plan
from coevolve.recipes.common import (
    Role,
    build_prompter,
    build_role,
    grpo_train,
    is_toy,
    phase_eval as common_phase_eval,
    round_,
    sampling_params,
    say,
    write_summary,
)
from coevolve.run import RunDir, derive_seed
from coevolve.types import Completion, SamplingParams, Task

TOY_DIAGNOSER_TEMPLATE = "DIAG:{question}={label}\nBAD:{bad}\nGOOD:{good}\nJSON:"
"""Short diagnosis prompt for the toy model (its context is 256 characters)."""

CONFIRM_TEMPLATE = "Do these two descriptions name the same error?\nA: {a}\nB: {b}\nAnswer yes or no:"


# ------------------------------------------------------------------------------------------
# helpers


@dataclass
class Ctx:
    """What every phase needs; the embedder and diagnoser are built on first use (the MiniLM
    import costs ~5 s, and a resumed run may not reach a memory phase)."""

    cfg: DiagEvoConfig
    run: RunDir
    solver: Role
    challenger: Role
    prompter: Any
    _embedder: Any = None
    _diagnoser: Any = None
    _diag_sampler: Any = field(default=None)

    def embedder(self):
        if self._embedder is None:
            from coevolve.memory.embed import make_embedder

            self._embedder = make_embedder(self.cfg.memory.embedder, device="cpu")
        return self._embedder

    def diagnoser_kind(self) -> str:
        k = self.cfg.diagnoser.kind
        return ("trace" if is_toy(self.cfg) else "llm") if k == "auto" else k

    def diagnoser(self):
        if self._diagnoser is None:
            d = self.cfg.diagnoser
            if self.diagnoser_kind() == "trace":
                if not is_toy(self.cfg):
                    from coevolve.errors import ConfigError

                    raise ConfigError("diagnoser.kind=trace needs the toy world (step traces); use diagnoser.kind=llm")
                self._diagnoser = TraceDiagnoser()
            else:
                sampler, tok = self.solver.sampler, self.solver.tokenizer
                if d.model_path:
                    from coevolve.engine import HFSampler, load_model

                    model, tok = load_model(d.model_path, device=self.cfg.model.device, dtype=self.cfg.model.dtype)
                    sampler = HFSampler(model, tok, max_batch=self.cfg.sampling.max_batch)
                template = d.template or (TOY_DIAGNOSER_TEMPLATE if is_toy(self.cfg) and not d.model_path else None)
                wrap = None
                if self.cfg.model.chat_template and getattr(tok, "chat_template", None):
                    wrap = lambda p: tok.apply_chat_template(  # noqa: E731
                        [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                params = SamplingParams(temperature=d.temperature, max_new_tokens=d.max_new_tokens)
                kw = {"template": template} if template else {}
                self._diagnoser = LLMDiagnoser(sampler, params, wrap=wrap, **kw)
                self._diag_sampler = sampler
        return self._diagnoser

    def confirm_fn(self, seed: int) -> Callable[[str, str], bool] | None:
        """Yes/no duplicate confirmation by the diagnoser model (llm diagnoser, when enabled)."""
        if not self.cfg.memory.confirm_duplicates or self.diagnoser_kind() != "llm":
            return None
        from coevolve.curriculum import parse_yes_no

        self.diagnoser()
        sampler = self._diag_sampler
        params = SamplingParams(temperature=0.0, max_new_tokens=8, seed=seed)

        def confirm(a: str, b: str) -> bool:
            out = sampler.sample([CONFIRM_TEMPLATE.replace("{a}", a).replace("{b}", b)], 1, params)
            return parse_yes_no(out[0][0].text) is True

        return confirm


def load_memory(run: RunDir, t: int) -> ErrorMemory:
    """The memory after round ``t`` (empty before round 1)."""
    if t <= 0:
        return ErrorMemory()
    p = run.path / f"round_{t:02d}" / MEMORY_FILE
    if not p.is_file():
        from coevolve.errors import RunStateError

        raise RunStateError(f"{p}: missing memory of round {t} although its phase is done")
    return ErrorMemory.load(p)


def _vote_fn(cfg: DiagEvoConfig):
    from coevolve.answers import vote

    return lambda answers: vote(answers, timeout=cfg.run.grader_timeout)


def _target_checker(cfg: DiagEvoConfig, mem: ErrorMemory) -> Callable[[str, list[str]], list[bool] | None]:
    """Toy world: for a generated question, whether it shows each targeted cause's feature
    (the memory cause's world id, from the trace diagnoser or an exact catalogue text); None
    when the world cannot tell (real data, or a free-form LLM cause)."""
    if not is_toy(cfg):
        return lambda q, ids: None
    from coevolve.toy import cause_by_text, features, shows_cause

    def check(q: str, cause_ids: list[str]) -> list[bool] | None:
        out = []
        for cid in cause_ids:
            c = mem.causes[cid]
            ref = c.source_id or (getattr(cause_by_text(c.text), "id", None))
            if ref is None:
                return None
            out.append(bool(shows_cause(ref, features(q))))
        return out

    return check


def _mean(v: list[float]) -> float | None:
    return float(sum(v) / len(v)) if v else None


# ------------------------------------------------------------------------------------------
# phases


def phase_challenger(c: Ctx, t: int) -> dict[str, Any]:
    """Stage 1: challenger GRPO against the frozen solver (skipped when challenger.frozen)."""
    cfg, run, ch = c.cfg, c.run, c.cfg.challenger

    def fn(seed: int) -> dict[str, Any]:
        mem = load_memory(run, t - 1)
        eps = {"mixed": mem.epsilon(cfg.memory.k), "explore_only": 1.0, "targeted_only": 0.0}[cfg.memory.schedule]
        if ch.frozen or ch.steps == 0:
            say("[challenger] frozen (ablation): no update")
            return {"skipped": True, "rollouts": 0, "epsilon": eps}
        rng = np.random.default_rng(seed)
        check = _target_checker(cfg, mem)
        records: list[dict[str, Any]] = []
        solver_rollouts = [0]
        tok = ch.rzero_tokenizer if ch.rzero_tokenizer != "auto" else ("char" if is_toy(cfg) else "whitespace")
        vote_fn = _vote_fn(cfg)

        def next_batch(step: int) -> list[Task]:
            plans = mem.sample_plan(rng, ch.prompts_per_step, cfg.memory.stitching, cfg.memory.schedule, cfg.memory.k)
            return [Task(id=f"r{t:02d}-ch{step:03d}-{i:03d}", question=c.prompter.challenger(p.cause_texts),
                         features={"plan": p.to_dict(), "step": step}) for i, p in enumerate(plans)]

        def reward_fn(tasks: list[Task], comps: list[list[Completion]]):
            from coevolve.curriculum import label_questions
            from coevolve.rewards import questioner_rewards, rzero_rewards

            step = int(tasks[0].features["step"]) if tasks else 0
            parsed = [[c.prompter.parse_question(x.text) for x in cs] for cs in comps]
            uniq = sorted({q for row in parsed for q in row if q is not None})
            votes = label_questions(c.solver.sampler, c.prompter, uniq, ch.solver_samples,
                                    sampling_params(cfg, derive_seed(seed, "solve", step)), vote_fn=vote_fn)
            solver_rollouts[0] += len(uniq) * ch.solver_samples
            p1 = {v.question: v.p1 for v in votes}
            flat_q = [q for row in parsed for q in row]
            ok = [q is not None for q in flat_q]
            x = [p1[q] if q is not None else None for q in flat_q]
            if ch.reward == "plateau":
                r, bd = questioner_rewards(ok, x, ch.tau_l, ch.tau_u, ch.a)
            else:
                r, bd = rzero_rewards(ok, x, flat_q, tok, ch.rzero_threshold)
            rewards, hits, i = [], [], 0
            for task, row in zip(tasks, parsed):
                plan = task.features["plan"]
                rewards.append(r[i:i + len(row)])
                for q in row:
                    shows = check(q, plan["cause_ids"]) if (q is not None and plan["cause_ids"]) else None
                    if shows is not None:
                        hits.append(float(shows[0]))
                    records.append({"step": step, "mode": plan["mode"], "cause_ids": plan["cause_ids"],
                                    "question": q, "p1": x[i], "reward": r[i], "shows_target": shows})
                    i += 1
            out = {"reward_mean": bd["mean"], "valid_rate": _mean([float(o) for o in ok]),
                   "p1_mean": _mean([v for v in x if v is not None]),
                   "targeted_share": _mean([float(bool(tk.features["plan"]["cause_ids"])) for tk in tasks])}
            if hits:
                out["target_hit_rate"] = _mean(hits)
            return rewards, {k: v for k, v in out.items() if v is not None}

        summary = grpo_train(
            role=c.challenger, prompt_fn=lambda task: task.question, next_batch=next_batch, reward_fn=reward_fn,
            steps=ch.steps, group_size=ch.group_size,
            params=sampling_params(cfg, seed, temperature=ch.temperature, max_new_tokens=ch.max_new_tokens),
            run=run, round=t, phase="challenger", ns="challenger", seed=seed,
            save_rollouts=cfg.run.save_rollouts, progress=cfg.run.progress,
            rollouts_file=run.round_dir(t) / "challenger_rollouts.jsonl",
        )
        run.write_jsonl(f"round_{t:02d}/challenger_questions.jsonl", records)
        hits = [float(r["shows_target"][0]) for r in records if r["shows_target"] is not None]
        res = {
            "reward_mean": round_(summary["reward_mean"]), "epsilon": round_(eps),
            "valid_rate": round_(_mean([float(r["question"] is not None) for r in records]) or 0.0),
            "target_hit_rate": None if not hits else round_(_mean(hits) or 0.0),
            "rollouts": summary["rollouts"] + solver_rollouts[0],
            "challenger_rollouts": summary["rollouts"], "solver_rollouts": solver_rollouts[0],
        }
        say(f"[challenger] ε={eps:.3f} reward {res['reward_mean']:.3f}, valid {res['valid_rate']:.2f}"
            + (f", target hit {res['target_hit_rate']:.2f}" if hits else ""))
        return {**res, "checkpoints": c.challenger.save(run, f"r{t:02d}")}

    return run.run_phase(f"{t:02d}/challenger", fn, master_seed=cfg.run.seed, round=t, log_fn=say,
                         keep_checkpoints=cfg.run.keep_checkpoints)


def write_pool(c: Ctx, t: int, seed: int, mem: ErrorMemory) -> dict[str, Any]:
    """Candidate pool -> votes -> the three filters; writes pool.jsonl and kept.jsonl."""
    from coevolve.curriculum import dual_confidence_filter, label_questions, normalize_question, pseudo_label_accuracy

    cfg, run, pc = c.cfg, c.run, c.cfg.pool
    rng = np.random.default_rng(seed)
    plans: list[Plan] = mem.sample_plan(rng, pc.size, cfg.memory.stitching, cfg.memory.schedule, cfg.memory.k)
    comps = c.challenger.sampler.sample(
        [c.prompter.challenger(p.cause_texts) for p in plans], 1,
        sampling_params(cfg, derive_seed(seed, "write"), temperature=cfg.challenger.temperature,
                        max_new_tokens=cfg.challenger.max_new_tokens))
    banned: frozenset[str] = frozenset()
    if is_toy(cfg) and pc.drop_heldout:
        from coevolve.toy import heldout_questions

        banned = frozenset(normalize_question(q) for q in heldout_questions(cfg.eval.heldout_size))
    check = _target_checker(cfg, mem)
    seen: set[str] = set()
    qs: list[str] = []
    meta: list[dict[str, Any]] = []
    invalid = dup = held = 0
    for plan, cs in zip(plans, comps):
        q = c.prompter.parse_question(cs[0].text)
        if q is None:
            invalid += 1
            continue
        key = normalize_question(q)
        if key in banned:
            held += 1
            continue
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        qs.append(q)
        meta.append({"mode": plan.mode, "cause_ids": plan.cause_ids,
                     "shows_target": check(q, plan.cause_ids) if plan.cause_ids else None})
    votes = label_questions(c.solver.sampler, c.prompter, qs, pc.construction_samples,
                            sampling_params(cfg, derive_seed(seed, "construct")), vote_fn=_vote_fn(cfg))
    for i, (v, m) in enumerate(zip(votes, meta)):
        v.id = f"r{t:02d}-q{i:05d}"
        v.meta = {**m, "round": t, "oracle": c.prompter.oracle(v.question)}
    sets = {mode: dual_confidence_filter(votes, pc.p_low, pc.p_high, pc.tau, mode)
            for mode in ("none", "absolute", "dual")}
    kept = sets[pc.filter]
    kept_ids = {v.id for v in kept}
    from coevolve.answers import is_equiv

    equiv = lambda g, p: bool(is_equiv(g, p, timeout=cfg.run.grader_timeout))  # noqa: E731
    rows = []
    for v in votes:
        d = v.to_dict()
        d["kept"] = v.id in kept_ids
        gold = v.meta["oracle"]
        d["label_correct"] = None if gold is None or v.label is None else equiv(gold, v.label)
        rows.append(d)
    run.write_jsonl(f"round_{t:02d}/pool.jsonl", rows)
    run.write_jsonl(f"round_{t:02d}/kept.jsonl", [r for r in rows if r["kept"]])
    res: dict[str, Any] = {"prompts": len(plans), "invalid": invalid, "duplicates": dup, "heldout_dropped": held,
                           "candidates": len(votes), "kept": len(kept),
                           "kept_none": len(sets["none"]), "kept_absolute": len(sets["absolute"]),
                           "kept_dual": len(sets["dual"]),
                           "rollouts": len(plans) + len(qs) * pc.construction_samples}
    for mode, recs in sets.items():
        acc = pseudo_label_accuracy(recs, c.prompter.oracle, equiv)
        if acc is not None:
            res[f"oracle_acc_{mode}"] = round_(acc)
    acc = pseudo_label_accuracy(kept, c.prompter.oracle, equiv)
    if acc is not None:
        res["oracle_acc_kept"] = round_(acc)
    hits = [float(m["shows_target"][0]) for m in meta if m["shows_target"] is not None]
    if hits:
        res["target_hit_rate"] = round_(_mean(hits) or 0.0)
    res["targeted_share"] = round_(_mean([float(bool(p.cause_ids)) for p in plans]) or 0.0)
    return res


def phase_pool(c: Ctx, t: int) -> dict[str, Any]:
    """Stage 2: candidate pool, pseudo-labels, dual-confidence filter."""
    cfg, run = c.cfg, c.run

    def fn(seed: int) -> dict[str, Any]:
        res = write_pool(c, t, seed, load_memory(run, t - 1))
        run.log({f"curriculum/{k}": v for k, v in res.items() if isinstance(v, (int, float))}, round=t, phase="pool")
        say(f"[pool] {res['prompts']} prompts -> {res['candidates']} candidates -> kept {res['kept']} "
            f"({cfg.pool.filter}); oracle agreement none/absolute/dual: "
            + "/".join(f"{res.get(f'oracle_acc_{m}', float('nan')):.3f}" for m in ("none", "absolute", "dual")))
        return res

    return run.run_phase(f"{t:02d}/pool", fn, master_seed=cfg.run.seed, round=t, log_fn=say)


def phase_solver(c: Ctx, t: int) -> dict[str, Any]:
    """Stage 3: solver GRPO on the kept questions (reward +1 if the answer matches ŷ, else -1)."""
    cfg, run, sc = c.cfg, c.run, c.cfg.solver

    def fn(seed: int) -> dict[str, Any]:
        from coevolve.answers import grade
        from coevolve.rewards import signed_match_rewards

        kept = run.read_jsonl(f"round_{t:02d}/kept.jsonl")
        tasks = [Task(id=r["id"], question=r["question"], answer=r["label"], source="generated",
                      features={"oracle": r["meta"].get("oracle"), "targets": r["meta"].get("cause_ids", [])})
                 for r in kept]
        if not tasks or sc.steps == 0:
            run.write_jsonl(f"round_{t:02d}/optimisation.jsonl", [])
            say("[solver] nothing kept: no update")
            return {"skipped": True, "rollouts": 0}
        rng = random.Random(seed)
        queue: list[Task] = []
        first: dict[str, dict[str, Any]] = {}
        to = cfg.run.grader_timeout

        def next_batch(step: int) -> list[Task]:
            out = []
            while len(out) < min(sc.prompts_per_step, len(tasks)):
                if not queue:
                    queue.extend(rng.sample(tasks, len(tasks)))  # shuffled passes over the kept set
                out.append(queue.pop())
            return out

        def reward_fn(batch: list[Task], comps: list[list[Completion]]):
            rewards, match, oracle_ok = [], [], []
            for task, cs in zip(batch, comps):
                m = [bool(grade(task.answer or "", x.text, timeout=to)) for x in cs]
                r, _ = signed_match_rewards(m)
                rewards.append(r)
                match.extend(float(v) for v in m)
                gold = task.features.get("oracle")
                if gold is not None:
                    oracle_ok.extend(float(grade(gold, x.text, timeout=to)) for x in cs)
                if task.id not in first:  # G fresh optimisation responses, kept for the diagnosis
                    first[task.id] = {"id": task.id, "question": task.question, "label": task.answer,
                                      "targets": task.features["targets"], "responses": [x.text for x in cs],
                                      "matches": m}
            bd = {"match_rate": _mean(match) or 0.0}
            if oracle_ok:
                bd["oracle_acc"] = _mean(oracle_ok) or 0.0
            return rewards, bd

        summary = grpo_train(
            role=c.solver, prompt_fn=lambda task: c.prompter.solver(task.question), next_batch=next_batch,
            reward_fn=reward_fn, steps=sc.steps, group_size=sc.group_size, params=sampling_params(cfg, seed),
            run=run, round=t, phase="solver", ns="solver", seed=seed, save_rollouts=cfg.run.save_rollouts,
            progress=cfg.run.progress, rollouts_file=run.round_dir(t) / "solver_rollouts.jsonl",
        )
        run.write_jsonl(f"round_{t:02d}/optimisation.jsonl", [first[k] for k in sorted(first)])
        say(f"[solver] mean reward {summary['reward_mean']:.3f} over {sc.steps} steps on {len(tasks)} kept questions")
        return {"reward_mean": round_(summary["reward_mean"]), "rollouts": summary["rollouts"],
                "questions_trained": len(first), "checkpoints": c.solver.save(run, f"r{t:02d}")}

    return run.run_phase(f"{t:02d}/solver", fn, master_seed=cfg.run.seed, round=t, log_fn=say,
                         keep_checkpoints=cfg.run.keep_checkpoints)


def maintenance_config(cfg: DiagEvoConfig) -> MaintenanceConfig:
    m = cfg.memory
    return MaintenanceConfig(
        match_threshold=m.match_threshold, retrieve_k=m.retrieve_k, dup_threshold=m.dup_threshold,
        confirm_min_sim=m.confirm_min_sim, node_threshold=m.node_threshold, merge_threshold=m.merge_threshold,
        theta_up=m.theta_up, min_targeted=m.min_targeted, max_pairs_per_question=m.max_pairs_per_question,
        max_diagnoses_per_round=m.max_diagnoses_per_round, k=m.k,
    )


def remeasure_targeted(c: Ctx, t: int, seed: int, pool_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Promotion evidence under ``memory.promotion_p1=updated``: re-answer every targeted
    candidate question of round ``t`` with the solver as it is *after* this round's GRPO
    (``pool.construction_samples`` answers each, batched, seeded from the memory phase's seed so
    a resumed run measures exactly the same) and vote again. Writes
    ``round_TT/promotion_p1.jsonl`` (construction vs updated p1 and label per question) and
    returns question id -> updated p1."""
    from coevolve.curriculum import label_questions

    cfg = c.cfg
    rows = targeted_questions(pool_rows)
    votes = label_questions(c.solver.sampler, c.prompter, [r["question"] for r in rows], cfg.pool.construction_samples,
                            sampling_params(cfg, derive_seed(seed, "promotion")), vote_fn=_vote_fn(cfg))
    out = [{"id": r["id"], "cause_ids": r["meta"]["cause_ids"], "mode": r["meta"].get("mode"), "kept": r.get("kept"),
            "question": r["question"], "p1_construction": r["p1"], "label_construction": r["label"],
            "p1_updated": v.p1, "p2_updated": v.p2, "label_updated": v.label}
           for r, v in zip(rows, votes)]
    c.run.write_jsonl(f"round_{t:02d}/promotion_p1.jsonl", out)
    return {r["id"]: float(r["p1_updated"]) for r in out}


def phase_memory(c: Ctx, t: int) -> dict[str, Any]:
    """Stage 4: diagnose, file causes, promote, merge; save ``round_TT/memory.json``."""
    cfg, run = c.cfg, c.run

    def fn(seed: int) -> dict[str, Any]:
        mem = load_memory(run, t - 1)
        if not cfg.memory.enabled:  # R-Zero-style baseline: no diagnosis, the memory stays empty
            run.write_jsonl(f"round_{t:02d}/diagnoses.jsonl", [])
            mem.save(run.path / f"round_{t:02d}" / MEMORY_FILE)
            say("[memory] disabled (memory.enabled=false): no diagnosis")
            return {"skipped": True, "rollouts": 0, **mem.stats(cfg.memory.k)}
        opt = run.read_jsonl(f"round_{t:02d}/optimisation.jsonl")
        kept = [KeptQuestion(r["question"], r["label"], list(r["targets"]), r["responses"], r["matches"], id=r["id"])
                for r in opt]
        pool_rows = run.read_jsonl(f"round_{t:02d}/pool.jsonl")
        construction = targeted_p1_by_cause(pool_rows, "construction")
        remeasured = remeasure_targeted(c, t, seed, pool_rows) if cfg.memory.promotion_p1 == "updated" else None
        targeted = targeted_p1_by_cause(pool_rows, cfg.memory.promotion_p1, remeasured)
        diag = c.diagnoser()
        diag.stats = DiagnoserStats()
        res = maintain_memory(mem, kept, diag, c.embedder(), t, maintenance_config(cfg), targeted,
                              np.random.default_rng(seed), c.confirm_fn(seed),
                              reference_p1=construction if remeasured is not None else None)
        flat = [p for r in targeted_questions(pool_rows)
                for p in ([remeasured[r["id"]]] if remeasured is not None else [float(r["p1"])])]
        res.stats["targeted_questions"] = len(flat)
        if flat:
            res.stats["targeted_p1_mean"] = _mean(flat) or 0.0
            res.stats["targeted_p1_construction_mean"] = _mean(
                [float(r["p1"]) for r in targeted_questions(pool_rows)]) or 0.0
        if is_toy(cfg) and c.diagnoser_kind() == "llm":  # does the model name the cause the oracle trace shows?
            from coevolve.toy import explain_divergence

            truth = [r for r in res.records if r["diagnosis"] is not None]
            agree = [float(bool((d := explain_divergence(r["question"], r["bad"], r["good"])) is not None
                                and d.cause == r["diagnosis"]["cause"])) for r in truth]
            if agree:
                res.stats["diagnosis_oracle_agreement"] = _mean(agree) or 0.0
        run.write_jsonl(f"round_{t:02d}/diagnoses.jsonl", res.records)
        mem.save(run.path / f"round_{t:02d}" / MEMORY_FILE)
        stats = {**{k: (round_(v) if isinstance(v, float) else v) for k, v in res.stats.items()},
                 **{f"diagnoser_{k}": v for k, v in diag.stats.as_dict().items()}}
        run.log({f"memory/{k}": v for k, v in stats.items() if isinstance(v, (int, float))}, round=t, phase="memory")
        rollouts = diag.stats.calls if c.diagnoser_kind() == "llm" else 0
        if remeasured is not None:
            rollouts += len(remeasured) * cfg.pool.construction_samples
        p1_note = ""
        if flat:
            p1_note = (f"; targeted p1 ({cfg.memory.promotion_p1}) {stats['targeted_p1_mean']:.3f} on {len(flat)} questions"
                       + (f" (construction {stats['targeted_p1_construction_mean']:.3f})" if remeasured is not None else ""))
        say(f"[memory] {stats['diagnoses_ok']}/{stats['diagnoses_attempted']} diagnoses ok, "
            f"{stats['new_causes']} new causes, {stats['promotions']} promoted {res.promoted}, "
            f"{stats['reactivations']} re-activated {res.reactivated}{p1_note}; "
            f"{stats['causes']} causes under {stats['nodes']} nodes ({stats['active']} active / {stats['mastered']} mastered), "
            f"next ε={stats['next_epsilon']:.3f}")
        return {**stats, "promoted_ids": ",".join(res.promoted), "reactivated_ids": ",".join(res.reactivated),
                "rollouts": rollouts}

    return run.run_phase(f"{t:02d}/memory", fn, master_seed=cfg.run.seed, round=t, log_fn=say)


def phase_eval(c: Ctx, key: str, t: int | None) -> dict[str, Any]:
    return common_phase_eval(c.run, c.cfg, c.solver, c.prompter, key, t, last_round=c.cfg.rounds)


def run(cfg: DiagEvoConfig, run: RunDir) -> dict[str, Any]:
    """Base eval, then ``cfg.rounds`` rounds of challenger -> pool -> solver -> memory -> eval."""
    solver = build_role("solver", cfg, run)
    challenger = build_role("challenger", cfg, run)
    c = Ctx(cfg=cfg, run=run, solver=solver, challenger=challenger, prompter=build_prompter(cfg, solver.tokenizer))
    phase_eval(c, "base/eval", None)
    for t in range(1, cfg.rounds + 1):
        phase_challenger(c, t)
        phase_pool(c, t)
        phase_solver(c, t)
        phase_memory(c, t)
        phase_eval(c, f"{t:02d}/eval", t)
    final = load_memory(run, cfg.rounds)
    run.write_json("memory.json", final.to_dict())
    return write_summary(run, extra={"memory": final.stats(cfg.memory.k)})


__all__ = ["run", "load_memory", "write_pool", "TOY_DIAGNOSER_TEMPLATE"]
