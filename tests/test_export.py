"""``coevolve export`` for other tools: the chat template renders the training prompt byte for byte
(so ``vllm serve`` and lm-eval ask what training asked), the model card states what the model is,
``--push-to-hub`` uploads (a fake Hub client here) or says how to upload later."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from coevolve.errors import CoevolveError
from coevolve.export import finish_export, push_to_hub, training_chat_template
from test_cli import cli

QUESTIONS = ["What is 2+3?", "Let $f(x)=x^2$. Find f'(3) \\\\ and {{x}} 'quoted' \"double\" é 😀\nsecond line"]


def fake_run(tmp_path: Path, smollm2: Path, chat_template: bool, model_path: str | None) -> tuple[Path, Path]:
    """A finished run folder with one solver checkpoint (tokenizer and config of SmolLM2, no
    weights: export copies files, the template needs only the tokenizer)."""
    run = tmp_path / "run"
    ck = run / "checkpoints" / "solver_r02_s000020"
    ck.mkdir(parents=True)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy2(smollm2 / f, ck / f)
    (ck / "learner_optim.pt").write_bytes(b"optimiser state")
    (ck / "coevolve.json").write_text(
        json.dumps(
            {
                "format": 1,
                "world": "real",
                "chat_template": chat_template,
                "role": "solver",
                "recipe": "d2evo",
                "tag": "r02",
            }
        )
    )
    (run / "state.json").write_text(
        json.dumps({"recipe": "d2evo", "checkpoint_history": {"solver": ["checkpoints/solver_r02_s000020"]}})
    )
    cfg = {
        "recipe": "d2evo",
        "rounds": 2,
        "model": {"path": model_path, "chat_template": chat_template},
        "solver": {"steps": 20, "prompts_per_step": 128, "group_size": 5},
        "learner": {"lr": 1e-6, "lora": False},
        "data": {"source": "openai/gsm8k"},
        "run": {"seed": 3},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "summary.json").write_text(
        json.dumps(
            {
                "eval": {
                    "base": {"gsm8k": {"score": 0.5, "metric": "greedy"}},
                    "rounds": {"2": {"gsm8k": {"score": 0.625, "metric": "greedy", "n": 1319}}},
                    "final": {"gsm8k": {"score": 0.625, "metric": "greedy"}},
                }
            }
        )
    )
    return run, ck


@pytest.mark.parametrize("chat_template", [True, False])
def test_exported_chat_template_renders_the_training_prompt(tmp_path: Path, smollm2: Path, chat_template: bool) -> None:
    from coevolve.engine import load_tokenizer
    from coevolve.prompts.chat import ChatPrompter

    run, _ = fake_run(tmp_path, smollm2, chat_template, None)
    out = tmp_path / "exported"
    r = cli("export", str(run), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert not (out / "learner_optim.pt").exists() and (out / "chat_template.jinja").is_file()
    train = ChatPrompter(load_tokenizer(smollm2) if chat_template else None, use_chat_template=chat_template)
    tok = load_tokenizer(out)
    for q in QUESTIONS:
        for messages in (
            [{"role": "user", "content": q}],
            [
                {"role": "system", "content": "ignored"},
                {"role": "user", "content": "earlier"},
                {"role": "assistant", "content": "\\boxed{1}"},
                {"role": "user", "content": q},
            ],
        ):
            got = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            assert got == train.solver(q), (chat_template, q)
    if not chat_template:
        assert tok.apply_chat_template([{"role": "user", "content": "Q"}], tokenize=False) == f"{train.solver('Q')}"
    # the instruct model's own template is kept beside it, by name: a system message reaches the model
    own = load_tokenizer(smollm2)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    kept = tok.apply_chat_template(chat, tokenize=False, chat_template="model")
    assert kept == own.apply_chat_template(chat, tokenize=False) and "Be brief." in kept


def test_toy_world_template(tmp_path: Path) -> None:
    from coevolve.world.toy.prompts import ToyPrompter

    template = training_chat_template(ToyPrompter())
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(template).render(messages=[{"role": "user", "content": "12+7"}], add_generation_prompt=True)
    assert text == ToyPrompter().solver("12+7") == "Q:12+7=\nA:"


def test_model_card_states_base_recipe_settings_prompt_and_eval(tmp_path: Path, smollm2: Path) -> None:
    snapshot = "/cache/hub/models--Qwen--Qwen3-4B-Base/snapshots/0123abcd"
    run, ck = fake_run(tmp_path, smollm2, False, snapshot)
    out = tmp_path / "exported"
    shutil.copytree(ck, out)
    finish_export(out, run, ck, "solver")
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "\nbase_model: Qwen/Qwen3-4B-Base\n" in card
    assert "**d2evo** run (recipe `d2evo`), round 2" in card and "from **Qwen/Qwen3-4B-Base**" in card
    assert (
        "| `solver.steps` | `20` |" in card and "| `learner.lr` | `1e-06` |" in card and "| `run.seed` | `3` |" in card
    )
    assert "```text\nPlease reason step by step" in card and "\n\n{question}\n\n\n```" in card
    assert "| gsm8k | greedy | 1319 | 50.0 | 62.5 |" in card  # each score with its n
    # the header is huggingface_hub's ModelCardData: each key and tag once, the Hub dataset named
    from huggingface_hub import ModelCard

    meta = ModelCard(card).data.to_dict()
    assert meta["base_model"] == "Qwen/Qwen3-4B-Base" and meta["datasets"] == ["openai/gsm8k"]
    assert meta["library_name"] == "transformers" and len(meta["tags"]) == len(set(meta["tags"]))
    assert "license" not in meta  # a base whose licence is recorded nowhere here: none is claimed
    assert str(tmp_path) not in card and snapshot not in card  # no local paths


def test_an_export_has_ordinary_file_modes_and_no_local_path(tmp_path: Path, smollm2: Path) -> None:
    """Files the run wrote atomically are readable as open() would make them (umask), not
    mkstemp's 0600, and coevolve.json names the weights without this machine's absolute path."""
    import os

    from coevolve.export import export_checkpoint
    from coevolve.run.files import atomic_write_text

    run, ck = fake_run(tmp_path, smollm2, False, None)
    atomic_write_text(ck / "coevolve.json", (ck / "coevolve.json").read_text())
    out = export_checkpoint(ck, tmp_path / "exported")
    umask = os.umask(0)
    os.umask(umask)
    modes = {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()}
    assert modes and set(modes.values()) == {0o666 & ~umask}, modes
    meta = json.loads((out / "coevolve.json").read_text())
    assert meta["exported_from"] == "run/checkpoints/solver_r02_s000020" and str(tmp_path) not in json.dumps(meta)


class FakeHub:
    def __init__(self, fail: Exception | None = None):
        self.calls: list[tuple] = []
        self.fail = fail

    def create_repo(self, repo, **kw):
        self.calls.append(("create_repo", repo, kw))
        if self.fail:
            raise self.fail
        return f"https://hub.example/{repo}"

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", kw))


def test_push_to_hub_uploads_or_says_how_to_later(tmp_path: Path) -> None:
    api = FakeHub()
    assert push_to_hub(tmp_path, "me/my-model", private=True, api=api) == "https://hub.example/me/my-model"
    assert api.calls == [
        ("create_repo", "me/my-model", {"repo_type": "model", "private": True, "exist_ok": True}),
        (
            "upload_folder",
            {
                "folder_path": str(tmp_path),
                "repo_id": "me/my-model",
                "repo_type": "model",
                "commit_message": "coevolve export",
            },
        ),
    ]
    with pytest.raises(
        CoevolveError,
        match=rf"ConnectionError: no network; the exported folder {tmp_path} is complete: "
        r"upload it later with `hf upload me/m ",
    ):
        push_to_hub(tmp_path, "me/m", api=FakeHub(ConnectionError("no network")))
    with pytest.raises(CoevolveError, match="owner/name"):
        push_to_hub(tmp_path, "no-owner", api=FakeHub())


def test_push_to_hub_offline_is_refused_before_exporting(tmp_path: Path, smollm2: Path, monkeypatch) -> None:
    run, _ = fake_run(tmp_path, smollm2, True, None)
    import os
    import subprocess
    import sys

    from test_cli import SRC

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": SRC}
    r = subprocess.run(
        [sys.executable, "-m", "coevolve", "export", str(run), "--out", str(tmp_path / "x"), "--push-to-hub", "me/m"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2 and "HF_HUB_OFFLINE" in r.stderr and not (tmp_path / "x").exists()


@pytest.mark.parametrize(("base", "license"), [("toy", "mit"), ("smollm2", "apache-2.0")])
def test_model_card_names_the_base_licence(tmp_path: Path, smollm2: Path, base: str, license: str) -> None:
    """The toy base is coevolve's own (MIT); a built SmolLM2 folder records its Apache-2.0 licence."""
    from huggingface_hub import ModelCard

    run, ck = fake_run(tmp_path, smollm2, False, None if base == "toy" else str(smollm2))
    out = tmp_path / "exported"
    shutil.copytree(ck, out)
    finish_export(out, run, ck, "solver")
    assert ModelCard((out / "README.md").read_text()).data.to_dict()["license"] == license
