"""Building blocks shared by every recipe: roles (model + sampler + learner), task sources,
the GRPO training loop, evaluation and the run summary. Recipes compose these; they hold no
algorithm of their own."""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from coevolve.config.base import RecipeConfig
from coevolve.errors import ConfigError
from coevolve.prompts import Prompter
from coevolve.run import RunDir, derive_seed
from coevolve.types import Completion, SamplingParams, Task

log = logging.getLogger("coevolve")

RewardFn = Callable[[list[Task], list[list[Completion]]], tuple[list[list[float]], dict[str, Any]]]


def say(msg: str) -> None:
    """One-line progress message on stderr (rich when available)."""
    try:
        from rich.console import Console

        Console(stderr=True).print(msg, highlight=False, markup=False)
    except ImportError:  # pragma: no cover
        print(msg, flush=True)


# ------------------------------------------------------------------------------------------
# model / roles


def base_model_path(cfg: RecipeConfig, say_fn: Callable[[str], None] = say) -> Path:
    """The configured HF folder, or the toy base model (built once and cached)."""
    if cfg.model.path:
        return Path(cfg.model.path)
    from coevolve.toy import ensure_base

    cache = Path(cfg.model.toy_cache) if cfg.model.toy_cache else None
    say_fn(f"toy base model (steps={cfg.model.toy_steps}, seed={cfg.model.toy_seed}): building or reusing the cache")
    return ensure_base(cache, steps=cfg.model.toy_steps, seed=cfg.model.toy_seed)


def preflight(cfg: RecipeConfig) -> None:
    """Cheap checks of the paths a run needs, before any work starts or any folder is made."""
    from coevolve.errors import DataError, ModelLoadError

    paths = [("model.path", cfg.model.path)] + [
        (f"{name}.model_path", getattr(getattr(cfg, name), "model_path", None))
        for name in type(cfg).model_fields
        if hasattr(getattr(cfg, name), "model_path")
    ]
    for field_name, p in paths:
        if p is None:
            continue
        if not Path(p).exists():
            raise ModelLoadError(f"{field_name}: model path {p} does not exist")
        if not (Path(p) / "config.json").is_file():
            raise ModelLoadError(f"{field_name}: {p} is not a Hugging Face model folder (no config.json)")
    if cfg.data.source != "toy" and not Path(cfg.data.source).is_file():
        raise DataError(f"data.source: dataset file {cfg.data.source} does not exist")


def is_toy(cfg: RecipeConfig) -> bool:
    return cfg.model.path is None


@dataclass
class Role:
    """A trainable policy: one model shared by its sampler and its learner (explicit weight sync
    is a no-op here; a vLLM sampler would need ``sampler.sync_weights``)."""

    name: str
    model: Any
    tokenizer: Any
    sampler: Any
    learner: Any

    def sync(self) -> None:
        sync = getattr(self.sampler, "sync_weights", None)
        if sync is not None:
            sync(self.model)

    def save(self, run: RunDir, tag: str) -> dict[str, str]:
        """Write a checkpoint; return ``{role: path}`` for the phase result's "checkpoints" key
        (the pointer moves only when the phase is marked done)."""
        path = run.checkpoint_path(self.name, tag)
        self.learner.save(path)
        return {self.name: str(path)}


def learner_config(cfg: RecipeConfig):
    from coevolve.rl.learner import LearnerConfig

    s = cfg.learner
    return LearnerConfig(
        lr=s.lr,
        betas=tuple(s.betas),
        weight_decay=s.weight_decay,
        grad_clip=s.grad_clip,
        eps_low=s.eps_low,
        eps_high=s.eps_high,
        beta_kl=s.beta_kl,
        scale_std=s.scale_std,
        micro_batch_size=s.micro_batch_size,
        epochs_per_batch=s.epochs_per_batch,
        lora=s.lora,
        lora_r=s.lora_r,
        lora_alpha=s.lora_alpha,
    )


def build_role(name: str, cfg: RecipeConfig, run: RunDir, init_path: Path | None = None) -> Role:
    """Load the model for a role; resume from the role's latest checkpoint when there is one."""
    from coevolve.engine import HFSampler, load_model
    from coevolve.rl.learner import Learner

    path = init_path or base_model_path(cfg)
    model, tok = load_model(str(path), device=cfg.model.device, dtype=cfg.model.dtype)
    ref = None
    if cfg.learner.beta_kl > 0:
        ref, _ = load_model(str(path), device=cfg.model.device, dtype=cfg.model.dtype)
        ref.eval()
    learner = Learner(model, learner_config(cfg), ref_model=ref)
    ckpt = run.latest_checkpoint(name)
    if ckpt is not None:
        learner.load(ckpt)
    sampler = HFSampler(learner.model, tok, max_batch=cfg.sampling.max_batch)
    return Role(name=name, model=learner.model, tokenizer=tok, sampler=sampler, learner=learner)


def build_prompter(cfg: RecipeConfig, tokenizer: Any) -> Prompter:
    if is_toy(cfg):
        from coevolve.toy import ToyPrompter

        return ToyPrompter()
    from coevolve.chat_prompts import ChatPrompter

    return ChatPrompter(tokenizer, use_chat_template=cfg.model.chat_template)


def sampling_params(cfg: RecipeConfig, seed: int | None, **over: Any) -> SamplingParams:
    s = cfg.sampling
    kw = dict(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=s.max_new_tokens, seed=seed)
    kw.update(over)
    return SamplingParams(**kw)


# ------------------------------------------------------------------------------------------
# tasks


@dataclass
class TaskSource:
    """Labelled questions: the toy world (infinite, fresh problems every draw) or a fixed pool."""

    kind: str
    pool: list[Task] = field(default_factory=list)
    levels: Sequence[int] = (1, 2, 3, 4)

    def draw(self, rng: random.Random, n: int) -> list[Task]:
        if self.kind == "toy":
            from coevolve.toy import sample_tasks

            return sample_tasks(rng, n, levels=list(self.levels))
        if not self.pool:
            raise ConfigError("data source is empty")
        if n >= len(self.pool):
            out = list(self.pool)
            rng.shuffle(out)
            return out[:n] if n == len(self.pool) else out + [rng.choice(self.pool) for _ in range(n - len(out))]
        return rng.sample(self.pool, n)


def build_task_source(cfg: RecipeConfig, say_fn: Callable[[str], None] = say) -> TaskSource:
    d = cfg.data
    if d.source == "toy":
        return TaskSource(kind="toy", levels=tuple(d.toy_levels))
    from coevolve.data.jsonl import load_tasks

    tasks, report = load_tasks(
        d.source, question_key=d.question_key, answer_key=d.answer_key, on_error=d.on_error, limit=d.limit
    )
    for p in report.problems[:20]:
        say_fn(f"[data] skipped: {p}")
    if len(report.problems) > 20:
        say_fn(f"[data] ... and {len(report.problems) - 20} more broken rows")
    say_fn(f"[data] {report.loaded} questions from {d.source} ({len(report.problems)} broken rows skipped)")
    if not tasks:
        raise ConfigError(f"data.source {d.source}: no usable rows")
    return TaskSource(kind="pool", pool=tasks)


# ------------------------------------------------------------------------------------------
# GRPO loop (shared by solver, questioner and challenger updates)


def grpo_train(
    *,
    role: Role,
    prompt_fn: Callable[[Task], str],
    next_batch: Callable[[int], list[Task]],
    reward_fn: RewardFn,
    steps: int,
    group_size: int,
    params: SamplingParams,
    run: RunDir,
    round: int | None,
    phase: str,
    ns: str,
    seed: int,
    save_rollouts: bool = True,
    progress: bool = True,
    rollouts_file: Path | None = None,
) -> dict[str, Any]:
    """``steps`` GRPO updates: rollout -> score -> (advantage, update inside the learner) -> log.

    Returns a summary (mean reward over the phase, rollouts spent). Every rollout batch is saved
    as JSONL lines to ``rollouts_file`` (rewritten from scratch when the phase restarts)."""
    from tqdm import tqdm

    from coevolve.rl.learner import RolloutGroup

    fh = None
    if save_rollouts and rollouts_file is not None:
        rollouts_file.parent.mkdir(parents=True, exist_ok=True)
        fh = open(rollouts_file, "w", encoding="utf-8")
    rewards_seen: list[float] = []
    rollouts = 0
    last: dict[str, float] = {}
    try:
        bar = tqdm(range(steps), desc=f"{phase}", disable=not progress, leave=False, dynamic_ncols=True)
        for step in bar:
            t0 = time.perf_counter()
            tasks = next_batch(step)
            prompts = [prompt_fn(t) for t in tasks]
            p = replace(params, seed=derive_seed(seed, "rollout", step))
            comps = role.sampler.sample(prompts, group_size, p)
            t_gen = time.perf_counter() - t0
            rewards, breakdown = reward_fn(tasks, comps)
            groups = [
                RolloutGroup(prompt_ids=c[0].prompt_ids, completion_ids=[x.token_ids for x in c], rewards=list(r))
                for c, r in zip(comps, rewards)
            ]
            t1 = time.perf_counter()
            m = role.learner.step(groups)
            role.sync()
            t_learn = time.perf_counter() - t1
            flat = [x for r in rewards for x in r]
            rewards_seen.extend(flat)
            rollouts += sum(len(c) for c in comps)
            last = {f"{ns}/{k}": v for k, v in m.items() if isinstance(v, (int, float))}
            scal = {f"{ns}/{k}": v for k, v in breakdown.items() if isinstance(v, (int, float))}
            run.log(
                {**last, **scal, f"{ns}/gen_seconds": round_(t_gen), f"{ns}/learn_seconds": round_(t_learn)},
                round=round,
                phase=phase,
                step=step,
            )
            bar.set_postfix(reward=f"{sum(flat) / max(1, len(flat)):.3f}")
            if fh is not None:
                for t, pr, c, r in zip(tasks, prompts, comps, rewards):
                    fh.write(
                        json.dumps(
                            {
                                "step": step,
                                "task_id": t.id,
                                "prompt": pr,
                                "label": t.answer,
                                "completions": [x.text for x in c],
                                "rewards": list(r),
                            },
                            ensure_ascii=False,
                        )
                        + "\n"
                    )
    finally:
        if fh is not None:
            fh.close()
    return {
        "reward_mean": sum(rewards_seen) / max(1, len(rewards_seen)),
        "rollouts": rollouts,
        "steps": steps,
    }


def round_(x: float, nd: int = 4) -> float:
    return float(round(x, nd))


# ------------------------------------------------------------------------------------------
# evaluation


def evaluate_solver(
    role: Role, prompter: Prompter, cfg: RecipeConfig, seed: int, out_dir: Path | None = None
) -> dict[str, dict[str, float | None]]:
    """Evaluate on the configured benchmarks -> {bench: {"greedy": x, "sampled": y}}.

    ``toy`` is the fixed, seeded toy held-out set; other names go through the benchmark
    registry (real models). Per-item records are saved to ``out_dir/eval_<bench>.jsonl``."""
    from coevolve.eval.core import evaluate_tasks

    out: dict[str, dict[str, float | None]] = {}
    for bench, tasks, bprompter in _bench_tasks(cfg, prompter, role.tokenizer):
        res = evaluate_tasks(
            role.sampler,
            bprompter,
            tasks,
            samples=cfg.eval.samples,
            max_new_tokens=cfg.eval.max_new_tokens,
            seed=seed,
            progress=cfg.run.progress,
        )
        out[bench] = {"greedy": res.greedy, "sampled": res.sampled, "n": res.n}
        if out_dir is not None:
            from coevolve.run import atomic_write_jsonl

            atomic_write_jsonl(out_dir / f"eval_{bench}.jsonl", res.records)
    return out


def phase_eval(
    run: RunDir, cfg: RecipeConfig, solver: Role, prompter: Prompter, key: str, round: int | None, last_round: int | None = None
) -> dict[str, Any]:
    """The evaluation phase every recipe shares: held-out (toy) or benchmark accuracy of the
    current solver, saved per item in ``base/`` or ``round_NN/``. With ``eval.every_round=false``
    only the base and the last round (``last_round``) are evaluated."""
    if round is not None and not cfg.eval.every_round and last_round is not None and round != last_round:
        return {}

    def fn(seed: int) -> dict[str, Any]:
        out_dir = run.round_dir(round) if round else run.path / "base"
        out_dir.mkdir(parents=True, exist_ok=True)
        # The same eval seed in every round: sampled accuracy is compared on identical draws.
        res = evaluate_solver(solver, prompter, cfg, seed=derive_seed(cfg.run.seed, "eval"), out_dir=out_dir)
        run.log(eval_metrics(res), round=round, phase="eval")
        say(f"[eval] {key}: {fmt_eval(res)}")
        rollouts = sum(int(r.get("n") or 0) * (1 + cfg.eval.samples) for r in res.values())
        return {"eval": res, "rollouts": rollouts}

    return run.run_phase(key, fn, master_seed=cfg.run.seed, round=round, log_fn=say)


def _bench_tasks(cfg: RecipeConfig, prompter: Prompter, tokenizer: Any):
    benches = cfg.eval.benches if cfg.eval.benches is not None else (["toy"] if is_toy(cfg) else ["math7"])
    for name in benches:
        if name == "toy":
            from coevolve.toy import heldout_tasks

            tasks = heldout_tasks(cfg.eval.heldout_size)
            if cfg.eval.limit:
                tasks = tasks[: cfg.eval.limit]
            yield "toy", tasks, prompter
        else:
            from coevolve.eval import benchmarks as B

            for bname in B.expand(name):
                bench = B.get(bname)
                data_dir = Path(cfg.eval.data_dir) if cfg.eval.data_dir else None
                tasks = bench.load(data_dir=data_dir, limit=cfg.eval.limit)
                yield bname, tasks, B.bench_prompter(bench, tokenizer, cfg.model.chat_template)


def eval_metrics(res: dict[str, dict[str, float | None]]) -> dict[str, float]:
    out = {}
    for bench, r in res.items():
        for k, v in r.items():
            if v is not None and k != "n":
                out[f"eval/{bench}/{k}"] = v
    return out


def fmt_eval(res: dict[str, dict[str, float | None]]) -> str:
    parts = []
    for bench, r in res.items():
        s = f"{bench}: greedy {r['greedy']:.3f}"
        if r.get("sampled") is not None:
            s += f", sampled {r['sampled']:.3f}"
        parts.append(s)
    return "; ".join(parts)


def write_summary(run: RunDir, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assemble summary.json from the phase results recorded in state.json."""
    state = run.state
    evals: dict[str, Any] = {"rounds": {}}
    rounds: list[dict[str, Any]] = []
    for key in state["done"]:
        res = state["phases"][key]["result"]
        if key == "base/eval":
            evals["base"] = res.get("eval", {})
        elif key.endswith("/eval") and "eval" in res:
            evals["rounds"][key.split("/")[0].lstrip("0") or "0"] = res["eval"]
    if evals["rounds"]:
        last = sorted(evals["rounds"], key=int)[-1]
        evals["final"] = evals["rounds"][last]
    by_round: dict[int, dict[str, Any]] = {}
    for key in state["done"]:
        head, _, phase = key.partition("/")
        if not head.isdigit():
            continue
        r = by_round.setdefault(int(head), {"round": int(head)})
        res = state["phases"][key]["result"]
        r[f"phase/{phase}/seconds"] = round_(state["phases"][key]["seconds"], 2)
        for k, v in res.items():
            if isinstance(v, (int, float, str, bool)) or v is None:
                r[f"{phase}/{k}"] = v
    rounds = [by_round[k] for k in sorted(by_round)]
    summary = {
        "recipe": run.recipe,
        "eval": evals,
        "rounds": rounds,
        "wall_seconds": round_(sum(p["seconds"] for p in state["phases"].values()), 1),
        **(extra or {}),
    }
    run.write_json("summary.json", summary)
    return summary
