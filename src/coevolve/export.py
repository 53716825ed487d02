"""``coevolve export``: a clean model folder from a run's checkpoint, ready for others' tools.

Every checkpoint is already a loadable Hugging Face folder (weights, config, tokenizer, and
``coevolve.json`` saying which world and prompt form it was trained with); the newest checkpoint
of each role also holds the optimiser state a resume needs. Export writes a folder without any
training state: full checkpoints are copied file by file (bit-exact), LoRA checkpoints are merged
into their base model. Then it adds what other tools read, since they ignore ``coevolve.json``:

* ``chat_template.jinja`` — renders the exact prompt the model was trained with around the last
  user message (``training_chat_template``), so ``vllm serve`` and lm-eval's
  ``--apply_chat_template`` ask the model what training asked it; an instruct model's own
  template stays beside it as the named template ``model`` (``additional_chat_templates/``);
* ``README.md`` — a model card (``huggingface_hub.ModelCardData``: base model, licence, Hub
  dataset, tags once each): recipe, key settings, the prompt, the run's scores with their n;

and, with ``--push-to-hub REPO``, uploads the folder (``push_to_hub``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCardData

from coevolve.data.sources import field_value
from coevolve.engine import load_model, load_tokenizer
from coevolve.errors import CoevolveError, DataError, RunStateError
from coevolve.lab.compare import method_of
from coevolve.lab.run_view import read_config, read_state, read_summary
from coevolve.models import HUB_ID_RE, hub_id_of
from coevolve.rl.learner import OPTIM_FILE, STATE_JSON
from coevolve.world import read_checkpoint_meta, world_of_model

TRAINING_STATE = (OPTIM_FILE, STATE_JSON)


def find_checkpoint(run_dir: Path, role: str = "solver", round_number: int | None = None) -> Path:
    """The role's newest checkpoint, or the one written in round ``round_number``."""
    run_dir = Path(run_dir)
    state = read_state(run_dir)
    history = state.get("checkpoint_history", {}).get(role, [])
    if not history:
        known = ", ".join(sorted(state.get("checkpoint_history", {}))) or "none yet"
        raise RunStateError(f"{run_dir}: no checkpoint of role {role!r} (roles with checkpoints: {known})")
    if round_number is None:
        return run_dir / history[-1]
    tag = f"{role}_r{round_number:02d}"
    hits = [h for h in history if Path(h).name.startswith(tag)]
    if not hits:
        kept = ", ".join(Path(h).name for h in history)
        raise RunStateError(
            f"{run_dir}: no kept checkpoint of {role} from round {round_number} (kept: {kept}; "
            "run.keep_checkpoints sets how many are kept)"
        )
    return run_dir / hits[-1]


def selected_round(run_dir: Path) -> tuple[int, str, Path | None] | None:
    """The round ``run.select`` chose for a finished run, why, and the solver checkpoint that
    round was measured with (summary.json ``selection``; None when the probe did not record it);
    None for a run without a selection (unfinished, no rounds, or made before runs recorded it)."""
    try:
        sel = (read_summary(run_dir) or {}).get("selection")
    except DataError as e:
        raise RunStateError(str(e)) from None
    if not isinstance(sel, dict) or not isinstance(sel.get("round"), int):
        return None
    ckpt = sel.get("checkpoint")
    return sel["round"], str(sel.get("why", "")), Path(run_dir) / ckpt if isinstance(ckpt, str) else None


def export_checkpoint(checkpoint: Path, out: Path) -> Path:
    """Write ``checkpoint`` as a plain model folder at ``out`` (which must not exist yet)."""
    checkpoint, out = Path(checkpoint), Path(out)
    if out.exists():
        raise RunStateError(f"--out {out} already exists; choose a new folder")
    meta_data = read_checkpoint_meta(checkpoint)  # a damaged coevolve.json stops us before any copy
    if (checkpoint / "config.json").is_file():
        shutil.copytree(checkpoint, out, ignore=shutil.ignore_patterns(*TRAINING_STATE))
    else:  # a LoRA adapter: merge it into its base model
        model, tok = load_model(checkpoint, device="cpu", dtype="auto")
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        if (checkpoint / "coevolve.json").is_file():
            shutil.copy2(checkpoint / "coevolve.json", out / "coevolve.json")
    meta = out / "coevolve.json"
    # run folder / checkpoints / checkpoint: which weights, without this machine's absolute path
    where = "/".join(checkpoint.resolve().parts[-3:])
    meta.write_text(json.dumps({**meta_data, "exported_from": where}, indent=2))
    return out


# ----------------------------------------------------------------------------------------------
# what other tools read: chat template, model card, the Hub

SENTINEL = "\x00coevolve-question\x00"
"""Stands for the question while the training prompt is split into the text before and after it."""

TEMPLATE_FILE = "chat_template.jinja"
CARD_FILE = "README.md"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A Hub repo id (``owner/name``): a data source named so is listed as the card's dataset."""


def jinja_literal(text: str) -> str:
    """``text`` as a Jinja string literal (single quotes; backslash, quote, control and non-ASCII
    characters escaped), so any prompt text survives the template unchanged.

    >>> print(jinja_literal("it's 2\\n"))
    'it\\'s 2\\n'
    """
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif not 32 <= ord(ch) <= 126:
            out.append(f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def training_chat_template(prompter: Any) -> str:
    """A chat template that renders ``prompter.solver(question)`` for the last user message
    ``question``: the training prompt, byte for byte (system text, plain-text or chat-template
    form, the generation prompt). Training was single-turn, so other messages are not rendered."""
    prompt = prompter.solver(SENTINEL)
    if prompt.count(SENTINEL) != 1:
        raise CoevolveError("the solver prompt does not hold the question exactly once; no chat template written")
    before, after = prompt.split(SENTINEL)
    return (
        "{#- coevolve: the prompt this model was trained with, around the last user message (single turn) -#}\n"
        "{%- set ns = namespace(question='') -%}\n"
        "{%- for message in messages -%}\n"
        "{%- if message['role'] == 'user' -%}{%- set ns.question = message['content'] -%}{%- endif -%}\n"
        "{%- endfor -%}\n"
        f"{{{{- {jinja_literal(before)} -}}}}{{{{- ns.question -}}}}{{{{- {jinja_literal(after)} -}}}}\n"
    )


def write_chat_template(folder: Path, enable_thinking: bool | None = None) -> str:
    """Write ``training_chat_template`` of ``folder``'s model (its world and prompt form from
    ``coevolve.json``) as ``chat_template.jinja``, the file transformers, vLLM and lm-eval load
    the template from (a template in tokenizer_config.json is dropped: one template, one place).
    Returns the training prompt of a question ``{question}``, for the model card."""
    tok = load_tokenizer(folder)
    keep_model_template(folder, tok)
    prompter = world_of_model(folder, tok).prompter
    if enable_thinking is not None and hasattr(prompter, "enable_thinking"):
        prompter.enable_thinking = enable_thinking
    template = training_chat_template(prompter)
    conf = folder / "tokenizer_config.json"
    if conf.is_file():
        data = json.loads(conf.read_text(encoding="utf-8"))
        if data.pop("chat_template", None) is not None:
            conf.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / TEMPLATE_FILE).write_text(template, encoding="utf-8")
    return prompter.solver("{question}")


MODEL_TEMPLATE = "model"
"""The name the model's own chat template is kept under (``additional_chat_templates/model.jinja``)."""


def keep_model_template(folder: Path, tok: Any) -> None:
    """An instruct model's own chat template, kept beside the training prompt's as transformers'
    named template ``model`` (``apply_chat_template(..., chat_template="model")``): system
    messages and several turns, which the training prompt's template does not render."""
    own = tok.chat_template.get("default") if isinstance(tok.chat_template, dict) else tok.chat_template
    if own:
        (folder / "additional_chat_templates").mkdir(exist_ok=True)
        (folder / "additional_chat_templates" / f"{MODEL_TEMPLATE}.jinja").write_text(own, encoding="utf-8")


def base_license(path: Any) -> str | None:
    """The base model's licence as the Hub spells it: coevolve's (MIT) for the built-in toy base,
    else what the base folder records (``coevolve_model.json`` of a built model, the license of
    its README's card header), else None."""
    if not path:
        return "mit"
    folder = Path(str(path))
    try:
        meta = json.loads((folder / "coevolve_model.json").read_text(encoding="utf-8"))
        if meta.get("license"):
            return str(meta["license"]).lower()
    except (OSError, ValueError, AttributeError):
        pass
    try:
        from huggingface_hub import ModelCard

        found = ModelCard.load(folder / "README.md").data.license
    except Exception:  # noqa: BLE001 - no card or no header: the licence is unknown, not an error
        return None
    return str(found) if found else None


CARD_SETTINGS = (
    "rounds",
    "solver.steps",
    "solver.prompts_per_step",
    "solver.group_size",
    "questioner.steps",
    "challenger.steps",
    "difficulty.samples",
    "buffer.generate",
    "pool.size",
    "learner.lr",
    "learner.lora",
    "learner.beta_kl",
    "sampling.max_new_tokens",
    "sampling.temperature",
    "data.source",
    "data.limit",
    "model.chat_template",
    "run.seed",
    "engine.kind",
    "backend.kind",
)
"""Config fields a model card lists (those the recipe has)."""


def model_card(
    folder: Path,
    cfg: dict[str, Any],
    summary: dict[str, Any],
    role: str,
    round_number: int | None,
    prompt: str,
    name: str,
) -> str:
    """The README.md of an exported model: metadata header, what it is, how it was trained, the
    prompt it expects, and the run's evaluation."""
    path = field_value(cfg, "model.path")
    base = "the built-in toy base model" if not path else hub_id_of(path) or Path(str(path)).name
    method = method_of(cfg)
    header = ["---", card_data(cfg, method).to_yaml(), "---", ""]
    lines = [
        f"# {name}",
        "",
        f"The {role} of a coevolve **{method}** run (recipe `{cfg.get('recipe')}`), "
        + (f"round {round_number}, " if round_number is not None else "")
        + f"trained from **{base}** with GRPO. Exported by `coevolve export` (no optimiser state; LoRA merged).",
        "",
        "## Training",
        "",
        "| setting | value |",
        "|---|---|",
        *_settings_rows(cfg),
    ]
    lines += [
        "",
        "## Prompt",
        "",
        "The model was trained (and evaluated) on this prompt, `{question}` standing for the question. "
        f"`{TEMPLATE_FILE}` renders it around the last user message, so a chat request with one user "
        "message asks exactly this:",
        "",
        "```text",
        prompt,
        "```",
        "",
        "Answers end with the final answer in `\\boxed{}`.",
    ]
    lines += ["", "## Evaluation", ""] + _eval_table(summary, round_number)
    serve = f"vllm serve {name}\ncoevolve eval --endpoint http://localhost:8000/v1 --served-model {name} --model {name}"
    lines += ["", "## Use", "", "```bash", serve, "```", ""]
    return "\n".join(header + lines)


def card_data(cfg: dict[str, Any], method: str) -> Any:
    """The card's metadata header: base model (a Hub id), licence, a Hub dataset, tags once each."""
    path, source = field_value(cfg, "model.path"), field_value(cfg, "data.source")
    return ModelCardData(
        library_name="transformers",
        pipeline_tag="text-generation",
        base_model=hub_id_of(path) if path else None,
        license=base_license(path),
        datasets=[source] if _hub_dataset(source) else None,
        tags=list(dict.fromkeys(["coevolve", method, "grpo", "reasoning"])),  # each once (method may be grpo)
    )


def _settings_rows(cfg: dict[str, Any]) -> list[str]:
    """``| `key` | `value` |`` for each of ``CARD_SETTINGS`` the run has; a local path by its name."""
    rows = []
    for key in CARD_SETTINGS:
        value = field_value(cfg, key)
        if isinstance(value, str) and Path(value).is_absolute():  # a local path means nothing on the Hub
            value = Path(value).name
        if value is not None:
            rows.append(f"| `{key}` | `{value}` |")
    return rows


def _hub_dataset(source: Any) -> bool:
    """Whether ``data.source`` names a Hub dataset (``openai/gsm8k``), not a file or folder."""
    if not isinstance(source, str) or not HUB_ID.fullmatch(source) or Path(source).exists():
        return False
    return not source.lower().removesuffix(".gz").endswith((".jsonl", ".json", ".csv", ".parquet"))


def _eval_table(summary: dict[str, Any], round_number: int | None) -> list[str]:
    ev = summary.get("eval") or {}
    after = (ev.get("rounds") or {}).get(str(round_number)) if round_number is not None else None
    after = after or ev.get("final") or {}
    base = ev.get("base") or {}
    if not after and not base:
        return ["The run recorded no evaluation."]
    out = [
        "Scores in % on the run's held-out benchmarks (same prompt and grader as training), before "
        "training (base) and at this checkpoint:",
        "",
        "| benchmark | metric | n | base | this model |",
        "|---|---|---:|---:|---:|",
    ]
    for b in dict.fromkeys([*base, *after]):
        row_b, row_a = base.get(b) or {}, after.get(b) or {}
        metric = row_a.get("metric") or row_b.get("metric") or "greedy"

        def fmt(r: dict) -> str:
            return "–" if r.get("score") is None else f"{100.0 * r['score']:.1f}"

        n = row_a.get("n") or row_b.get("n")
        out.append(f"| {b} | {metric} | {n if n is not None else '–'} | {fmt(row_b)} | {fmt(row_a)} |")
    return out


def finish_export(out: Path, run_dir: Path, checkpoint: Path, role: str) -> None:
    """Add the chat template and the model card of ``run_dir``'s ``checkpoint`` to the exported
    folder ``out``."""
    cfg, summary = _read_or_empty(read_config, run_dir), _read_or_empty(read_summary, run_dir)
    m = re.search(rf"{re.escape(role)}_r(\d+)", Path(checkpoint).name)
    prompt = write_chat_template(out, field_value(cfg, "model.enable_thinking"))
    card = model_card(out, cfg, summary, role, int(m.group(1)) if m else None, prompt, Path(out).name)
    (out / CARD_FILE).write_text(card, encoding="utf-8")


def _read_or_empty(read: Any, run_dir: Path) -> dict[str, Any]:
    """A saved run file for the model card, {} when it is missing or unreadable (the card then
    leaves out what that file would say)."""
    try:
        return read(run_dir) or {}
    except DataError:
        return {}


def hub_api() -> Any:
    """The Hugging Face Hub client (a seam: tests pass a fake)."""
    from huggingface_hub import HfApi

    return HfApi()


def check_online() -> None:
    """``--push-to-hub`` needs the Hub: refused before anything is exported when offline mode is on."""
    import os

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise CoevolveError(
            "--push-to-hub with HF_HUB_OFFLINE set: the Hub is off for this process; export without "
            "it and upload later (`hf upload REPO FOLDER`)"
        )


def push_to_hub(folder: Path, repo: str, private: bool = False, api: Any = None) -> str:
    """Upload the exported ``folder`` to the Hub model repo ``repo`` (made when missing); the
    repo's URL. Any failure (network, login, rights) is a ``CoevolveError`` saying the folder is
    complete and how to upload it later."""
    if not HUB_ID_RE.fullmatch(repo):
        raise CoevolveError(f"--push-to-hub {repo!r}: a Hub repo is named owner/name")
    api = api or hub_api()
    try:
        url = api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model", commit_message="coevolve export")
    except Exception as e:  # noqa: BLE001 - network, auth and rights errors all end the same way
        raise CoevolveError(
            f"--push-to-hub {repo}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
            f"the exported folder {folder} is complete: upload it later with `hf upload {repo} "
            f"{folder}`"
        ) from None
    return str(url)
