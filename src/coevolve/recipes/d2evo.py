"""Recipe ``d2evo``: D²Evo, dual difficulty-aware self-evolution (METHODS.md §1).

Every round t = 1..T, each a resumable phase (see coevolve.run) with artefacts in ``round_NN/``:

1. ``difficulty`` — the frozen current solver samples N answers per candidate real question;
   ``difficulty.jsonl`` holds correct count, pass rate and difficulty per question.
2. ``anchors`` — keep low <= pass rate <= high (or a random draw of the same size: ablation);
   ``anchors.jsonl`` + the pool's pass-rate histogram.
3. ``questioner`` — GRPO of the questioner on anchor prompts with reward format gate × plateau
   r_diff(x) (or R-Zero's); x = share of N_v solver answers agreeing with their majority.
   Every generated question is saved with its x and reward (``questioner_generated.jsonl``).
4. ``buffer`` — the updated questioner writes a pool; majority-vote pseudo-labels; keep x in the
   band; optional label verifier; dedupe; union with the anchors (``generated.jsonl``,
   ``buffer.jsonl``).
5. ``solver`` — GRPO on the buffer with α·acc + (1-α)·format (label = real answer for anchors,
   pseudo-label for generated questions).
6. ``eval`` — held-out accuracy (greedy and sampled).

Each phase reads its inputs from the previous phases' files (also in an uninterrupted run), so a
resumed run follows exactly the same path as one that was never killed. A final
``final/difficulty`` phase re-measures the pool so the report shows the last histogram.
"""

from __future__ import annotations

import copy
from dataclasses import replace
import random
import time

from typing import Any, Sequence

from coevolve.config.d2evo import D2EvoConfig
from coevolve.curriculum import (
    PassRecord,
    VoteRecord,
    build_hybrid_buffer,
    dual_confidence_filter,
    estimate_difficulty,
    histogram_labels,
    label_questions,
    make_verifier,
    mine_anchors,
    normalize_question,
    pass_rate_histogram,
    pseudo_label_accuracy,
    random_anchors,
)
from coevolve.prompts import Prompter
from coevolve.recipes.common import (
    Role,
    build_prompter,
    build_role,
    build_task_source,
    grpo_train,
    is_toy,
    round_,
    sampling_params,
    say,
    write_summary,
)
from coevolve.recipes.common import phase_eval
from coevolve.recipes.grpo import solver_reward_fn
from coevolve.rewards import questioner_rewards, rzero_rewards
from coevolve.run import RunDir, derive_seed
from coevolve.types import Completion, SamplingParams, Task

PHASES = ("difficulty", "anchors", "questioner", "buffer", "solver", "eval")


# ------------------------------------------------------------------------------------------
# helpers


def _answers(timeout: float):
    """(grade, vote, extract, equiv) bound to the run's grader timeout."""
    from coevolve.answers import extract_answer, grade, is_equiv, vote

    return (
        lambda gold, text: bool(grade(gold, text, timeout=timeout)),
        lambda answers: vote(answers, timeout=timeout),
        extract_answer,
        lambda gold, pred: bool(is_equiv(gold, pred, timeout=timeout)),
    )


def load_pool(cfg: D2EvoConfig) -> list[Task]:
    """The candidate real questions: the same seeded pool in every round (so histograms of
    successive rounds compare the same questions), deduplicated by question text."""
    from coevolve.curriculum import dedupe

    source = build_task_source(cfg)
    rng = random.Random(derive_seed(cfg.run.seed, "pool"))
    size = cfg.difficulty.pool_size
    if source.kind == "toy":
        pool = source.draw(rng, size or 400)
    else:
        pool = list(source.pool) if size is None or size >= len(source.pool) else rng.sample(source.pool, size)
    return dedupe(pool, key=lambda t: t.question)


def _sample_chunked(
    sampler: Any, prompts: Sequence[str], params: SamplingParams, batch_prompts: int, seed: int
) -> list[Completion]:
    """One completion per prompt, one Sampler call per chunk (seeded per chunk)."""
    out: list[Completion] = []
    for c, start in enumerate(range(0, len(prompts), batch_prompts)):
        p = replace(params, seed=derive_seed(seed, "chunk", c))
        out.extend(g[0] for g in sampler.sample(list(prompts[start : start + batch_prompts]), 1, p))
    return out


def _anchor_task(r: PassRecord) -> Task:
    return Task(r.task_id, r.question, r.answer, features={**r.features, "difficulty": r.difficulty, "pass_rate": r.pass_rate})


def _read_records(run: RunDir, rel: str) -> list[PassRecord]:
    return [PassRecord.from_dict(d) for d in run.read_jsonl(rel)]


def _rate(num: int, den: int) -> float | None:
    return round_(num / den) if den else None


# ------------------------------------------------------------------------------------------
# phases


def phase_difficulty(
    run: RunDir, cfg: D2EvoConfig, solver: Role, prompter: Prompter, pool: list[Task], key: str,
    out_rel: str, round: int | None,
) -> dict[str, Any]:
    """Phase 1: N samples per candidate from the frozen current solver (no update here)."""
    d = cfg.difficulty

    def fn(seed: int) -> dict[str, Any]:
        grade, _, extract, _ = _answers(cfg.run.grader_timeout)
        recs = estimate_difficulty(
            solver.sampler, prompter, pool, d.n_samples, sampling_params(cfg, seed), grade,
            batch_prompts=d.batch_prompts, extract_fn=extract,
        )
        run.write_jsonl(out_rel, [r.to_dict() for r in recs])
        hist = pass_rate_histogram([r.pass_rate for r in recs])
        mean = sum(r.pass_rate for r in recs) / max(1, len(recs))
        run.log(
            {"curriculum/pool_size": len(recs), "curriculum/pool_pass_rate": round_(mean),
             **{f"curriculum/hist/{k}": v for k, v in hist.items()}},
            round=round, phase="difficulty",
        )
        say(f"[difficulty] {key}: {len(recs)} questions x {d.n_samples}, mean pass rate {mean:.3f}, histogram {hist}")
        return {"pool_size": len(recs), "pass_rate_mean": round_(mean), "histogram": hist,
                "rollouts": len(recs) * d.n_samples}

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=round, log_fn=say)


def phase_anchors(run: RunDir, cfg: D2EvoConfig, t: int) -> dict[str, Any]:
    """Phase 2: anchor mining (band, or random of the same size for the ablation)."""
    d = cfg.difficulty
    key = f"{t:02d}/anchors"

    def fn(seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        recs = _read_records(run, f"round_{t:02d}/difficulty.jsonl")
        band = mine_anchors(recs, d.low, d.high)
        anchors = band if cfg.anchor_selection == "band" else random_anchors(recs, len(band), rng)
        if d.max_anchors is not None and len(anchors) > d.max_anchors:
            anchors = rng.sample(anchors, d.max_anchors)
        run.write_jsonl(f"round_{t:02d}/anchors.jsonl", [a.to_dict() for a in anchors])
        hist = pass_rate_histogram([r.pass_rate for r in recs])
        anchor_hist = pass_rate_histogram([a.pass_rate for a in anchors])
        run.write_json(f"round_{t:02d}/pool_histogram.json", {"pool": hist, "anchors": anchor_hist, "low": d.low, "high": d.high})
        prev_ids: set[str] = set()
        if t > 1 and (run.path / f"round_{t - 1:02d}/anchors.jsonl").exists():
            prev_ids = {r["task_id"] for r in run.read_jsonl(f"round_{t - 1:02d}/anchors.jsonl")}
        ids = {a.task_id for a in anchors}
        entered, left = len(ids - prev_ids) if t > 1 else len(ids), len(prev_ids - ids)
        res = {"anchors": len(anchors), "band": len(band), "entered": entered, "left": left,
               "anchor_pass_rate_mean": round_(sum(a.pass_rate for a in anchors) / max(1, len(anchors)))}
        run.log({f"curriculum/{k}": v for k, v in res.items()}, round=t, phase="anchors")
        say(f"[anchors] round {t}: {len(anchors)} anchors ({cfg.anchor_selection}; band holds {len(band)}), "
            f"+{entered} / -{left} vs previous round")
        if not anchors:
            say("[anchors] warning: no anchors this round: the questioner is skipped and the buffer holds nothing real")
        return {**res, "anchor_histogram": anchor_hist}

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=t, log_fn=say)


def _scorer(cfg: D2EvoConfig, solver: Role, questioner: Role) -> Any:
    """Sampler that answers generated questions during questioner training: the round's solver
    π_S^{t-1}, frozen (a copy) when the questioner updates the same weights."""
    if questioner is not solver or not cfg.questioner_train.frozen_solver:
        return solver.sampler
    from coevolve.engine import HFSampler

    frozen = copy.deepcopy(solver.model)
    frozen.eval()
    for p in frozen.parameters():
        p.requires_grad_(False)
    return HFSampler(frozen, solver.tokenizer, max_batch=cfg.sampling.max_batch)


def phase_questioner(
    run: RunDir, cfg: D2EvoConfig, solver: Role, questioner: Role, prompter: Prompter, t: int
) -> dict[str, Any]:
    """Phase 3: questioner GRPO; reward = format gate × plateau(x) (or R-Zero's)."""
    q = cfg.questioner_train
    key = f"{t:02d}/questioner"

    def fn(seed: int) -> dict[str, Any]:
        rd = run.round_dir(t)
        anchors = [_anchor_task(r) for r in _read_records(run, f"round_{t:02d}/anchors.jsonl")]
        if not anchors or q.steps == 0:
            run.write_jsonl(f"round_{t:02d}/questioner_generated.jsonl", [])
            return {"steps": 0, "rollouts": 0, "skipped": "no anchors" if not anchors else "steps=0"}
        _, vote, extract, _ = _answers(cfg.run.grader_timeout)
        scorer = _scorer(cfg, solver, questioner)
        rng = random.Random(seed)
        rows: list[dict[str, Any]] = []
        counters = {"step": 0, "verify": 0}
        tok = q.rep_tokenizer if q.rep_tokenizer != "auto" else ("char" if is_toy(cfg) else "whitespace")

        def reward_fn(tasks: list[Task], comps: list[list[Completion]]):
            step = counters["step"]
            counters["step"] += 1
            parsed = [[prompter.parse_question(c.text) for c in g] for g in comps]
            uniq = list(dict.fromkeys(x for g in parsed for x in g if x is not None))
            votes = label_questions(
                scorer, prompter, uniq, q.n_verify,
                sampling_params(cfg, derive_seed(seed, "verify", step)),
                vote_fn=vote, extract_fn=extract, batch_prompts=cfg.buffer.batch_prompts,
            )
            counters["verify"] += len(uniq) * q.n_verify
            by_q = {v.question: v for v in votes}
            flat_q = [x for g in parsed for x in g]
            ok = [x is not None for x in flat_q]
            xs = [by_q[x].p1 if x is not None else None for x in flat_q]
            if cfg.questioner_reward == "plateau":
                flat_r, bd = questioner_rewards(ok, xs, q.tau_l, q.tau_u, q.a)
                band = bd["in_band"]
            else:
                flat_r, bd = rzero_rewards(ok, xs, flat_q, tokenizer=tok, threshold=q.rep_threshold)
                band = [float(x is not None and q.tau_l - 1e-9 <= x <= q.tau_u + 1e-9) for x in xs]
            i = 0
            rewards: list[list[float]] = []
            copies = 0
            for task, g, pg in zip(tasks, comps, parsed):
                rewards.append(flat_r[i : i + len(g)])
                for j, (c, pq) in enumerate(zip(g, pg)):
                    v = by_q.get(pq) if pq is not None else None
                    is_copy = pq is not None and normalize_question(pq) == normalize_question(task.question)
                    copies += int(is_copy)
                    rows.append({
                        "step": step, "anchor_id": task.id, "anchor": task.question,
                        "anchor_difficulty": task.features.get("difficulty"), "completion": c.text,
                        "question": pq, "well_formed": pq is not None, "x": None if v is None else v.p1,
                        "label": None if v is None else v.label, "reward": flat_r[i + j],
                        "in_band": bool(band[i + j]), "copy_of_anchor": is_copy,
                    })
                i += len(g)
            n = max(1, len(flat_q))
            n_ok = sum(ok)
            return rewards, {
                "reward_mean": sum(flat_r) / n, "well_formed": n_ok / n,
                "in_band": sum(band) / max(1, n_ok), "distinct": len(uniq) / max(1, n_ok), "copies": copies / n,
            }

        qparams = sampling_params(cfg, seed, **({"max_new_tokens": q.max_new_tokens} if q.max_new_tokens else {}))
        summary = grpo_train(
            role=questioner,
            prompt_fn=lambda a: prompter.questioner(a.question, a.answer or "", a.features["difficulty"]),
            next_batch=lambda step: rng.choices(anchors, k=q.prompts_per_step),
            reward_fn=reward_fn,
            steps=q.steps,
            group_size=q.group_size,
            params=qparams,
            run=run, round=t, phase="questioner", ns="questioner", seed=seed,
            save_rollouts=cfg.run.save_rollouts, progress=cfg.run.progress,
            rollouts_file=rd / "questioner_rollouts.jsonl",
        )
        run.write_jsonl(f"round_{t:02d}/questioner_generated.jsonl", rows)
        n_ok = sum(r["well_formed"] for r in rows)
        res = {
            "reward_mean": round_(summary["reward_mean"]),
            "well_formed": _rate(n_ok, len(rows)),
            "in_band": _rate(sum(r["in_band"] for r in rows), n_ok),
            "copies": _rate(sum(r["copy_of_anchor"] for r in rows), len(rows)),
            "steps": q.steps,
            "rollouts_generate": summary["rollouts"],
            "rollouts_verify": counters["verify"],
            "rollouts": summary["rollouts"] + counters["verify"],
        }
        say(f"[questioner] round {t}: reward {res['reward_mean']:.3f}, well-formed {res['well_formed']}, in band {res['in_band']}")
        return {**res, "checkpoints": questioner.save(run, f"r{t:02d}q")}

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=t, log_fn=say, keep_checkpoints=cfg.run.keep_checkpoints)


def _judge_sampler(cfg: D2EvoConfig, solver: Role) -> Any:
    if cfg.buffer.judge_model_path is None:
        return solver.sampler
    from coevolve.engine import HFSampler, load_model

    model, tok = load_model(cfg.buffer.judge_model_path, device=cfg.model.device, dtype=cfg.model.dtype)
    return HFSampler(model, tok, max_batch=cfg.sampling.max_batch)


def phase_buffer(
    run: RunDir, cfg: D2EvoConfig, solver: Role, questioner: Role | None, prompter: Prompter, t: int
) -> dict[str, Any]:
    """Phase 4: generate, pseudo-label, band-filter, verify, dedupe, union with the anchors."""
    b = cfg.buffer
    key = f"{t:02d}/buffer"

    def fn(seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        anchor_recs = _read_records(run, f"round_{t:02d}/anchors.jsonl")
        anchors = [_anchor_task(r) for r in anchor_recs]
        rows: list[dict[str, Any]] = []
        kept: list[VoteRecord] = []
        rollouts = 0
        labelled: list[VoteRecord] = []
        synth = cfg.questioner and cfg.synthesis and questioner is not None and b.n_generate > 0 and anchors
        if synth:
            assert questioner is not None
            _, vote, extract, equiv = _answers(cfg.run.grader_timeout)
            chosen = rng.choices(anchors, k=b.n_generate)
            q = cfg.questioner_train
            qparams = sampling_params(cfg, seed, **({"max_new_tokens": q.max_new_tokens} if q.max_new_tokens else {}))
            comps = _sample_chunked(
                questioner.sampler,
                [prompter.questioner(a.question, a.answer or "", a.features["difficulty"]) for a in chosen],
                qparams, b.batch_prompts, derive_seed(seed, "generate"),
            )
            rollouts += len(comps)
            banned = {normalize_question(a.question) for a in anchors}
            if is_toy(cfg) and b.exclude_heldout:
                from coevolve.toy import heldout_questions

                heldout = {normalize_question(x) for x in heldout_questions(cfg.eval.heldout_size)}
            else:
                heldout = set()
            seen: set[str] = set()
            to_label: list[str] = []
            for a, c in zip(chosen, comps):
                pq = prompter.parse_question(c.text)
                row: dict[str, Any] = {"anchor_id": a.id, "anchor": a.question, "completion": c.text, "question": pq,
                                       "copy_of_anchor": pq is not None and normalize_question(pq) == normalize_question(a.question)}
                if pq is None:
                    row["status"] = "malformed"
                else:
                    k = normalize_question(pq)
                    if k in banned:
                        row["status"] = "duplicate_anchor"
                    elif k in seen:
                        row["status"] = "duplicate"
                    elif k in heldout:
                        row["status"] = "heldout"
                    else:
                        seen.add(k)
                        to_label.append(pq)
                        row["status"] = "labelled"
                rows.append(row)
            labelled = label_questions(
                solver.sampler, prompter, to_label, b.n_label, sampling_params(cfg, derive_seed(seed, "label")),
                vote_fn=vote, extract_fn=extract, batch_prompts=b.batch_prompts,
            )
            rollouts += len(to_label) * b.n_label
            for i, v in enumerate(labelled):
                v.id = f"gen-r{t:02d}-{i:05d}"
            in_band = dual_confidence_filter(labelled, b.keep_low, b.keep_high, mode="absolute")
            verifier = make_verifier(
                cfg.label_verifier, oracle_fn=prompter.oracle if is_toy(cfg) else None,
                sampler=_judge_sampler(cfg, solver) if cfg.label_verifier == "judge" else None, equiv_fn=equiv,
            )
            verdicts = verifier.verify(in_band)
            if cfg.label_verifier == "judge":
                rollouts += sum(v.label is not None for v in in_band)
            verdict_of = {v.question: vd for v, vd in zip(in_band, verdicts)}
            kept = [v for v, vd in zip(in_band, verdicts) if not (verifier.enforce and vd is False)]
            kept_q = {v.question for v in kept}
            by_q = {v.question: v for v in labelled}
            for row in rows:
                v = by_q.get(row["question"]) if row["status"] == "labelled" else None
                if v is None:
                    continue
                gold = prompter.oracle(v.question)
                row.update({"p1": v.p1, "p2": v.p2, "label": v.label, "oracle": gold,
                            "label_correct": None if gold is None or v.label is None else bool(equiv(gold, v.label)),
                            "verdict": verdict_of.get(v.question)})
                row["status"] = ("kept" if v.question in kept_q else "rejected_by_verifier" if v.question in verdict_of
                                 else "no_label" if v.label is None else "out_of_band")
        buffer = build_hybrid_buffer(anchor_recs, kept, round_idx=t)
        run.write_jsonl(f"round_{t:02d}/generated.jsonl", rows)
        run.write_jsonl(f"round_{t:02d}/buffer.jsonl", [x.to_dict() for x in buffer])
        n_gen = len(rows)
        n_ok = sum(r["question"] is not None for r in rows)
        oracle = prompter.oracle
        equiv_fn = _answers(cfg.run.grader_timeout)[3]
        res = {
            "generated": n_gen,
            "well_formed": _rate(n_ok, n_gen),
            "distinct": _rate(len(labelled) + sum(r["status"] == "heldout" for r in rows), n_ok),
            "copies": _rate(sum(r["copy_of_anchor"] for r in rows), n_gen),
            "labelled": len(labelled),
            "in_band": _rate(sum(r.get("status") in ("kept", "rejected_by_verifier") for r in rows), len(labelled)),
            "buffer_real": sum(x.features["origin"] == "real" for x in buffer),
            "buffer_generated": sum(x.features["origin"] == "generated" for x in buffer),
            "pseudo_label_acc": pseudo_label_accuracy(kept, oracle, equiv_fn) if kept and is_toy(cfg) else None,
            "pseudo_label_acc_all": pseudo_label_accuracy(labelled, oracle, equiv_fn) if labelled and is_toy(cfg) else None,
            "rollouts": rollouts,
        }
        run.log({f"curriculum/buffer/{k}": v for k, v in res.items() if v is not None and k != "rollouts"},
                round=t, phase="buffer")
        say(f"[buffer] round {t}: {res['buffer_real']} real + {res['buffer_generated']} generated "
            f"(generated {n_gen}, well-formed {res['well_formed']}, in band {res['in_band']}, "
            f"pseudo-label acc {res['pseudo_label_acc']})")
        return res

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=t, log_fn=say)


def phase_solver(run: RunDir, cfg: D2EvoConfig, solver: Role, prompter: Prompter, t: int) -> dict[str, Any]:
    """Phase 5: solver GRPO on the hybrid buffer, α·acc + (1-α)·format."""
    s = cfg.solver
    key = f"{t:02d}/solver"

    def fn(seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        buffer = [Task.from_dict(d) for d in run.read_jsonl(f"round_{t:02d}/buffer.jsonl")]
        if not buffer or s.steps == 0:
            say(f"[solver] round {t}: nothing to train on (buffer {len(buffer)}, steps {s.steps})")
            return {"steps": 0, "rollouts": 0, "reward_mean": None}

        def next_batch(step: int) -> list[Task]:
            k = s.prompts_per_step
            return rng.sample(buffer, k) if len(buffer) >= k else rng.choices(buffer, k=k)

        summary = grpo_train(
            role=solver,
            prompt_fn=lambda x: prompter.solver(x.question),
            next_batch=next_batch,
            reward_fn=solver_reward_fn(s.alpha, cfg.run.grader_timeout),
            steps=s.steps, group_size=s.group_size, params=sampling_params(cfg, seed),
            run=run, round=t, phase="solver", ns="solver", seed=seed,
            save_rollouts=cfg.run.save_rollouts, progress=cfg.run.progress,
            rollouts_file=run.round_dir(t) / "solver_rollouts.jsonl",
        )
        say(f"[solver] round {t}: mean reward {summary['reward_mean']:.3f} over {s.steps} steps on {len(buffer)} questions")
        return {**summary, "reward_mean": round_(summary["reward_mean"]), "buffer": len(buffer),
                "checkpoints": solver.save(run, f"r{t:02d}")}

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=t, log_fn=say, keep_checkpoints=cfg.run.keep_checkpoints)


# ------------------------------------------------------------------------------------------
# report


def round_report(run: RunDir, cfg: D2EvoConfig) -> list[dict[str, Any]]:
    """Per-round figures (the issue's metric list) assembled from the phase results."""
    rows = []
    for t in range(1, cfg.rounds + 1):
        r = lambda p: run.phase_result(f"{t:02d}/{p}")  # noqa: E731
        row: dict[str, Any] = {"round": t}
        row["pool_size"] = r("difficulty").get("pool_size")
        row["pool_histogram"] = r("difficulty").get("histogram")
        row.update({f"anchors/{k}": v for k, v in r("anchors").items() if not isinstance(v, dict)})
        row.update({f"questioner/{k}": v for k, v in r("questioner").items() if not isinstance(v, dict)})
        row.update({f"buffer/{k}": v for k, v in r("buffer").items() if not isinstance(v, dict)})
        row["solver/reward_mean"] = r("solver").get("reward_mean")
        row["eval"] = r("eval").get("eval")
        for p in PHASES:
            ph = run.state["phases"].get(f"{t:02d}/{p}")
            if ph is not None:
                row[f"phase/{p}/seconds"] = round_(ph["seconds"], 2)
                row[f"phase/{p}/rollouts"] = ph["result"].get("rollouts", 0)
        rows.append(row)
    return rows


def write_report(run: RunDir, cfg: D2EvoConfig, rows: list[dict[str, Any]]) -> str:
    """``report.md``: pool histograms per round (before the round's training) and after the last
    round, anchor counts and shifts, questioner / buffer / solver / eval figures, time per phase."""
    labels = histogram_labels()
    lines = [f"# D²Evo run report ({run.path.name})", "",
             "## Pool pass-rate histogram (measured by the solver entering each round)", "",
             "| when | " + " | ".join(labels) + " | anchors | +in | -out |",
             "|---|" + "---|" * (len(labels) + 3)]
    for row in rows:
        h = row.get("pool_histogram") or {}
        lines.append(f"| round {row['round']} | " + " | ".join(str(h.get(k, "")) for k in labels)
                     + f" | {row.get('anchors/anchors', '')} | {row.get('anchors/entered', '')} | {row.get('anchors/left', '')} |")
    fin = run.phase_result("final/difficulty").get("histogram")
    if fin:
        lines.append("| after last round | " + " | ".join(str(fin.get(k, "")) for k in labels) + " | | | |")
    base = run.phase_result("base/eval").get("eval", {})
    lines += ["", "## Per round", "",
              "| round | q reward | q well-formed | q in band | gen well-formed | distinct | copies | buffer real/gen | pseudo-label acc | solver reward | held-out greedy | sampled |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for bench, e in base.items():
        lines.append(f"| base ({bench}) | | | | | | | | | | {e.get('greedy')} | {e.get('sampled')} |")
    for row in rows:
        ev = next(iter((row.get("eval") or {}).values()), {}) if row.get("eval") else {}
        lines.append(
            f"| {row['round']} | {row.get('questioner/reward_mean')} | {row.get('questioner/well_formed')} | "
            f"{row.get('questioner/in_band')} | {row.get('buffer/well_formed')} | {row.get('buffer/distinct')} | "
            f"{row.get('buffer/copies')} | {row.get('buffer/buffer_real')}/{row.get('buffer/buffer_generated')} | "
            f"{row.get('buffer/pseudo_label_acc')} | {row.get('solver/reward_mean')} | {ev.get('greedy')} | {ev.get('sampled')} |")
    lines += ["", "## Time (s) / rollouts per phase", "", "| round | " + " | ".join(PHASES) + " |",
              "|---|" + "---|" * len(PHASES)]
    for row in rows:
        lines.append(f"| {row['round']} | " + " | ".join(
            f"{row.get(f'phase/{p}/seconds', '-')} / {row.get(f'phase/{p}/rollouts', '-')}" for p in PHASES) + " |")
    text = "\n".join(lines) + "\n"
    from coevolve.run import atomic_write_text

    atomic_write_text(run.path / "report.md", text)
    return text


# ------------------------------------------------------------------------------------------


def run(cfg: D2EvoConfig, run: RunDir) -> dict[str, Any]:
    t0 = time.perf_counter()
    solver = build_role("solver", cfg, run)
    questioner: Role | None = None
    if cfg.questioner:
        questioner = solver if cfg.share_weights else build_role("questioner", cfg, run)
    prompter = build_prompter(cfg, solver.tokenizer)
    pool = load_pool(cfg)
    phase_eval(run, cfg, solver, prompter, "base/eval", None)
    for t in range(1, cfg.rounds + 1):
        phase_difficulty(run, cfg, solver, prompter, pool, f"{t:02d}/difficulty", f"round_{t:02d}/difficulty.jsonl", t)
        phase_anchors(run, cfg, t)
        if questioner is not None:
            phase_questioner(run, cfg, solver, questioner, prompter, t)
        phase_buffer(run, cfg, solver, questioner, prompter, t)
        phase_solver(run, cfg, solver, prompter, t)
        if cfg.eval.every_round or t == cfg.rounds:
            phase_eval(run, cfg, solver, prompter, f"{t:02d}/eval", t, last_round=cfg.rounds)
    if cfg.difficulty.measure_final:
        phase_difficulty(run, cfg, solver, prompter, pool, "final/difficulty", "final/difficulty.jsonl", None)
    rows = round_report(run, cfg)
    write_report(run, cfg, rows)
    say(f"[d2evo] report: {run.path / 'report.md'} ({time.perf_counter() - t0:.1f} s this session)")
    return write_summary(run, {"d2evo": {"rounds": rows, "final_histogram": run.phase_result("final/difficulty").get("histogram")}})
