"""``coevolve eval`` as users run it: a model served behind an OpenAI-compatible API (a fake
``vllm serve`` on the loopback address here), ``--engine vllm``, defaults equal to a run's
evaluation; ``coevolve compare`` over run folders."""

from __future__ import annotations

import csv
import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from coevolve.errors import CoevolveError, DataError
from coevolve.evaluate import evaluate_model, run_eval
from coevolve.prompts.chat import ChatPrompter
from json_http import JsonHandler
from test_cli import cli
from test_eval import _fixture_data


class FakeServer:
    """``/v1/models`` and ``/v1/completions`` answering by keyword found in the prompt (greedy:
    the first answer; sampled: alternating right and wrong); the request bodies are kept."""

    def __init__(self, model: str, answers: dict[str, tuple[str, str]]):
        self.bodies: list[dict] = []
        server = self

        class H(JsonHandler):
            def do_GET(self):
                self._send({"data": [{"id": model}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                good, bad = next(v for k, v in answers.items() if k in body["prompt"])
                texts = (
                    [good] * body["n"] if body["temperature"] == 0 else [(good, bad)[i % 2] for i in range(body["n"])]
                )
                self._send({"choices": [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)]})

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def server():
    s = FakeServer("my-solver", {"QM1": ("so \\boxed{27}", "\\boxed{2}"), "QM2": ("\\boxed{4}", "\\boxed{5}")})
    yield s
    s.close()


def test_served_model_is_asked_the_training_prompt_with_the_runs_protocol(tmp_path: Path, server: FakeServer) -> None:
    data = tmp_path / "data"
    _fixture_data(data)
    res = evaluate_model(
        None,
        ["amc23"],
        out_dir=tmp_path / "o",
        data_dir=data,
        endpoint=server.url,
        served_model="my-solver",
        progress=False,
        concurrency=4,
    )
    row = res["benchmarks"]["amc23"]
    # a real model's run protocol: AIME/AMC as mean@32 (greedy 1/2; sampled: QM1 half right, QM2 half right)
    assert (row["metric"], row["greedy"], row["sampled"], row["samples"]) == ("mean@32", 0.5, 0.5, 32)
    greedy = [b for b in server.bodies if b["temperature"] == 0]
    assert sorted(b["prompt"] for b in greedy) == sorted(ChatPrompter().solver(q) for q in ("QM1", "QM2"))
    assert {b["max_tokens"] for b in server.bodies} == {4096} and {b["model"] for b in server.bodies} == {"my-solver"}
    assert all(b["stop"] == list(ChatPrompter().stop("answer").strings) for b in server.bodies)
    assert res["config"]["engine"] == "endpoint" and res["config"]["endpoint"] == server.url
    items = [json.loads(x) for x in (tmp_path / "o" / "items_amc23.jsonl").read_text().splitlines()]
    assert [i["correct"] for i in items] == [True, False]


def test_served_model_errors_are_named(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(CoevolveError, match=r"serves \['my-solver'\], not --served-model='other'"):
        evaluate_model(None, ["amc23"], out_dir=tmp_path / "o", endpoint=server.url, served_model="other")
    with pytest.raises(DataError, match="--chat-template with --endpoint needs --model"):
        evaluate_model(None, ["amc23"], out_dir=tmp_path / "o", endpoint=server.url, chat_template=True)
    with pytest.raises(CoevolveError, match=r"evaluation server http://127.0.0.1:9/models: .*--endpoint"):
        evaluate_model(None, ["amc23"], out_dir=tmp_path / "o", endpoint="http://127.0.0.1:9")


def test_cli_eval_against_an_endpoint(tmp_path: Path, server: FakeServer) -> None:
    data = tmp_path / "data"
    _fixture_data(data)
    r = cli(
        "eval",
        "--endpoint",
        server.url,
        "--bench",
        "amc23",
        "--samples",
        "0",
        "--max-new-tokens",
        "50",
        "--data-dir",
        str(data),
        "--out",
        str(tmp_path / "o"),
    )
    assert r.returncode == 0, r.stderr
    assert "| amc23 | math | 2 | greedy | 50.0 |" in r.stdout and {b["max_tokens"] for b in server.bodies} == {50}
    before = (tmp_path / "o" / "results.json").read_bytes()
    again = cli("eval", "--endpoint", server.url, "--bench", "amc23", "--out", str(tmp_path / "o"))
    assert again.returncode == 2 and "already holds an evaluation (items_amc23.jsonl, results.json)" in again.stderr
    assert (tmp_path / "o" / "results.json").read_bytes() == before  # a second model's items never mix in


def test_eval_defaults_are_a_runs_evaluation() -> None:
    from coevolve.config import load_config

    toy, real = run_eval("toy"), run_eval("real")
    run_toy, run_real = load_config("grpo").eval, load_config("grpo", None, ["model.path=/models/x"]).eval
    assert (toy.samples, toy.max_new_tokens) == (run_toy.samples, run_toy.max_new_tokens) == (8, 64)
    assert (real.samples, real.max_new_tokens) == (run_real.samples, run_real.max_new_tokens) == (-1, 4096)


def test_engine_vllm_is_passed_to_the_engine_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coevolve.engine as engine
    from test_eval import KeywordSampler

    _fixture_data(tmp_path / "data")
    seen = {}

    def fake_load_sampler(cfg, path, device="auto", dtype="auto"):
        seen.update(kind=cfg.kind, path=path)
        return KeywordSampler({"QM1": "\\boxed{27}", "QM2": "\\boxed{5}"})

    monkeypatch.setattr(engine, "load_sampler", fake_load_sampler)
    res = evaluate_model(
        "some/folder",
        ["amc23"],
        samples=0,
        out_dir=tmp_path / "o",
        data_dir=tmp_path / "data",
        engine="vllm",
        progress=False,
    )
    assert seen == {"kind": "vllm", "path": "some/folder"} and res["config"]["engine"] == "vllm"
    assert res["config"]["max_new_tokens"] == 4096  # a real model's run budget
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        r = cli("eval", "--model", str(tmp_path), "--engine", "vllm")
        assert r.returncode == 2 and "vllm" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------ coevolve compare


def fake_run(root: Path, name: str, cfg: dict, base: float, final: float, ok: bool = True) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "ok": ok,
                "eval": {
                    "base": {"toy": {"score": base, "metric": "greedy"}},
                    "final": {"toy": {"score": final, "metric": "greedy"}},
                },
                "compute": {
                    "train": {"rollouts": 1000, "generated_tokens": 20000, "trained_tokens": 15000, "labels": 0},
                    "eval": {"rollouts": 4500},
                },
                "wall_seconds": 3600.0,
            }
        )
    )
    return d


def test_compare_writes_one_table_of_runs(tmp_path: Path) -> None:
    runs = [
        fake_run(tmp_path, "grpo-s0", {"recipe": "grpo", "run": {"seed": 0}}, 0.40, 0.55),
        fake_run(
            tmp_path,
            "d2evo-noq-s1",
            {"recipe": "d2evo", "questioner": {"enabled": False}, "run": {"seed": 1}},
            0.40,
            0.50,
        ),
        fake_run(
            tmp_path,
            "rzero-s0",
            {
                "recipe": "diagevo",
                "challenger": {"reward": {"kind": "rzero"}},
                "memory": {"enabled": False, "schedule": "explore_only"},
                "pool": {"voting": {"filter": "absolute"}},
                "run": {"seed": 0},
            },
            0.40,
            0.45,
            ok=False,
        ),
    ]
    out = tmp_path / "cmp"
    r = cli("compare", *map(str, runs), "--out", str(out))
    assert r.returncode == 0, r.stderr
    md = (out / "compare.md").read_text()
    assert md.splitlines()[0].startswith(
        "| run | method | settings | seed | model | toy base | toy final | toy delta |"
    )
    assert (
        "| grpo-s0 | grpo | – | 0 | toy | 40.0 | 55.0 | +15.0 | 1,000 | 20,000 | 15,000 | 4,500 | 3,600 | yes |" in md
    )
    assert "| d2evo-noq-s1 | d2evo | questioner=False | 1 |" in md and "| rzero-s0 | rzero | – | 0 |" in md
    assert "**no** |" in md and md in r.stdout
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert [r["method"] for r in rows] == ["grpo", "d2evo", "rzero"]
    assert float(rows[0]["toy delta"]) == pytest.approx(0.15) and rows[2]["ok"] == "False"
    r = cli("compare", str(tmp_path / "nope"))
    assert r.returncode == 2 and "not a finished run folder" in r.stderr


def selected_run(root: Path, name: str, scores: list[float], chosen: int) -> Path:
    """A run folder as the run writes it (state.json through ``PhaseState``, summary.json through
    ``write_summary``): a base evaluation, one per round with ``scores[r - 1]``, and run.select
    having picked round ``chosen``."""
    from types import SimpleNamespace

    from coevolve.recipes.summary import write_summary
    from coevolve.run import Phase, PhaseRecord, PhaseState

    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"recipe": "grpo", "run": {"seed": 0, "select": "best_signal:p1"}}))
    state = PhaseState.new(d / "state.json", "grpo")
    for rnd, score in [(None, 0.25), *enumerate(scores, 1)]:
        phase = Phase("eval", rnd, "base" if rnd is None else "round")
        row = {"greedy": score, "sampled": score, "n": 8, "score": score, "metric": "greedy"}
        (d / phase.folder / "eval").mkdir(parents=True)
        (d / phase.folder / "eval" / "results.json").write_text(
            json.dumps({"benchmarks": {"toy": {**row, "category": "toy"}}, "averages": {"toy": score}})
        )
        rec = PhaseRecord(phase.key, "eval", rnd, phase.stage, {"eval": {"toy": row}}, rollouts=72)
        state.finish(rec, {}, keep=2, metrics_bytes=0)
    write_summary(SimpleNamespace(state=state, path=d), {"selection": {"round": chosen, "why": "best p1"}})
    return d


def test_compare_and_eval_compare_show_the_same_final_scores(tmp_path: Path) -> None:
    """`coevolve compare` and `coevolve eval --compare` put the same final score on a run: the
    evaluation its summary calls final (here the round run.select picked, not the last one)."""
    from coevolve.lab.compare import compare_results, compare_runs

    runs = [selected_run(tmp_path, "a", [0.5, 0.375], chosen=1), selected_run(tmp_path, "b", [0.5, 0.625], chosen=2)]
    by_run, _ = compare_runs(runs)
    head, *body = [[c.strip() for c in line.strip("|").split("|")] for line in by_run.splitlines() if "---" not in line]
    finals = {row[0]: row[head.index("toy final")] for row in body}
    by_bench = compare_results(runs)
    head, *body = [
        [c.strip() for c in line.strip("|").split("|")] for line in by_bench.splitlines() if "---" not in line
    ]
    toy = next(row for row in body if row[0] == "toy")
    assert finals == {name: toy[head.index(name)] for name in ("a", "b")} == {"a": "50.0", "b": "62.5"}
    assert "| **avg toy** | 50.0 | 62.5 | +12.5 |" in by_bench
