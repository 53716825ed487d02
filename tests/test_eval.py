"""Tests for coevolve.eval: the core loop, benchmark registry, loaders and result tables.

A scripted fake sampler returns known outputs so every metric has a hand-computed expectation.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from coevolve.answers.extract import last_boxed
from coevolve.errors import ConfigError, DataError
from coevolve.eval import benchmarks as B
from coevolve.eval.core import EvalResult, evaluate_tasks
from coevolve.eval.suite import evaluate_benchmark, evaluate_suite, format_table, load_results
from coevolve.evaluate import evaluate_model
from coevolve.lab.compare import compare_results as compare
from coevolve.prompts.chat import ChatPrompter
from coevolve.types import Completion, SamplingParams, Task


class ScriptedSampler:
    """Returns outputs from a table keyed by (prompt, temperature==0); records every call."""

    tokenizer = None

    def __init__(self, greedy: dict[str, str], sampled: dict[str, list[str]] | None = None):
        self.greedy = greedy
        self.sampled = sampled or {}
        self.calls: list[tuple[int, int, SamplingParams]] = []

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((len(prompts), n, params))
        out = []
        for p in prompts:
            if params.temperature == 0:
                texts = [self.greedy[p]] * n
            else:
                texts = self.sampled[p][:n]
            out.append([Completion(text=t, token_ids=[1], prompt_ids=[0]) for t in texts])
        return out


class EchoPrompter:
    def solver(self, question: str) -> str:
        return f"Q:{question}\nA:"


def _prompts(tasks: Sequence[Task]) -> list[str]:
    return [EchoPrompter().solver(t.question) for t in tasks]


def _exact_grader(gold: str, text: str) -> bool:
    return text.strip() == f"\\boxed{{{gold}}}"


def _extract(text: str) -> str | None:
    return text[7:-1] if text.startswith("\\boxed{") else None


def test_greedy_and_mean_at_k_by_level() -> None:
    tasks = [
        Task("a", "1+1", "2", features={"level": 1}),
        Task("b", "2+2", "4", features={"level": 1}),
        Task("c", "3*3", "9", features={"level": 2}),
    ]
    greedy = {"Q:1+1\nA:": "\\boxed{2}", "Q:2+2\nA:": "\\boxed{5}", "Q:3*3\nA:": "\\boxed{9}"}
    sampled = {
        "Q:1+1\nA:": ["\\boxed{2}"] * 4,
        "Q:2+2\nA:": ["\\boxed{4}", "x", "x", "x"],
        "Q:3*3\nA:": ["\\boxed{9}", "\\boxed{9}", "x", "x"],
    }
    s = ScriptedSampler(greedy, sampled)
    r = evaluate_tasks(
        s, tasks, _prompts(tasks), samples=4, max_new_tokens=7, seed=3, grade=_exact_grader, extract=_extract
    )
    assert isinstance(r, EvalResult)
    assert r.n == 3
    assert r.greedy == pytest.approx(2 / 3)
    assert r.sampled == pytest.approx((1 + 0.25 + 0.5) / 3)
    assert r.sampled_any == pytest.approx(1.0)
    assert r.by_group["1"] == {"n": 2, "greedy": 0.5, "sampled": pytest.approx(0.625)}
    assert r.by_group["2"]["greedy"] == 1.0
    # one greedy call and one sampling call for the whole list, with the protocol's params
    assert [(c[0], c[1]) for c in s.calls] == [(3, 1), (3, 4)]
    gp, sp = s.calls[0][2], s.calls[1][2]
    assert gp.temperature == 0 and sp.temperature == 1.0 and sp.seed == 3
    assert gp.max_new_tokens == 7 and sp.top_p == 1.0 and sp.top_k == 0
    rec = r.records[1]
    assert rec["id"] == "b" and rec["extracted"] == "5" and rec["correct"] is False
    assert rec["sampled_correct"] == [True, False, False, False]


def test_greedy_only_and_chunking() -> None:
    tasks = [Task(str(i), str(i), str(i)) for i in range(5)]
    s = ScriptedSampler({f"Q:{i}\nA:": f"\\boxed{{{i}}}" for i in range(5)})
    r = evaluate_tasks(s, tasks, _prompts(tasks), grade=_exact_grader, extract=_extract, batch_size=2)
    assert r.greedy == 1.0 and r.sampled is None and r.by_group == {}
    assert [c[0] for c in s.calls] == [2, 2, 1]


def test_missing_gold_is_data_error() -> None:
    with pytest.raises(DataError, match="'x'"):
        evaluate_tasks(ScriptedSampler({}), [Task("x", "q", None)], ["q"], grade=_exact_grader, extract=_extract)


# ---------------------------------------------------------------------------------------------
# benchmark registry: extraction, metrics, loaders


class BoxedGrader:
    """Math grading by exact last-box match (no math-verify), with the grader interface."""

    def grade(self, gold: str, text: str) -> bool:
        return last_boxed(text) == gold


@pytest.mark.parametrize(
    "text, want",
    [
        ("so \\boxed{C}", "C"),
        ("\\boxed{(b)}", "B"),
        ("\\boxed{\\text{D}}", "D"),
        ("\\boxed{A. 10^-4 eV}", "A"),
        ("The answer is (C).", "C"),
        ("the correct answer is: option B", "B"),
        ("**Answer:** D", "D"),
        ("Answer: A then later Answer: (B)", "B"),
        ("\\boxed{10^-4 eV} but the answer is C", "C"),
        ("I think it is about Avogadro. The answer is Avogadro", None),
        ("no letter here at all", None),
        ("\\boxed{42}", None),
        ("Answer: E", None),  # out of range for 4 choices
    ],
)
def test_extract_choice(text: str, want: str | None) -> None:
    assert B.extract_choice(text, n_choices=4) == want


def test_no_letter_is_wrong_never_a_guess() -> None:
    assert B.grade_choice("A", "I cannot decide") is False
    assert B.grade_choice("C", "The answer is (C)") is True
    assert B.grade_choice("c", "\\boxed{C}") is True
    assert B.grade_choice("B", "\\boxed{C}") is False


@pytest.mark.parametrize(
    "gold, text, want",
    [
        ("disproved", "... The answer is: Disproved.", True),
        ("(a)", "\\boxed{a}", True),
        ("a", "The answer is (a)", True),
        ("12", "The final answer is 12.0", True),
        ("x, y, z", "The answer is: x,y,z", True),
        ("dog", "The answer is: cat", False),
        ("dog", "\\boxed{\\text{Dog}}", True),
        ("yes", "no idea", False),
        ("He really cried.", "The answer is: He really cried.", True),  # gold ending in "."
    ],
)
def test_bbeh_grading(gold: str, text: str, want: bool) -> None:
    assert B.grade_bbeh(gold, text) is want


def test_last_boxed_nested() -> None:
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("nothing") is None


def _write_jsonl(path: Path, rows: list, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_loader_broken_line_names_file_and_line(tmp_path: Path) -> None:
    p = _write_jsonl(
        tmp_path / "gpqa_diamond" / "test.jsonl",
        [{"id": "1", "question": "q", "choices": ["a", "b"], "answer": "A"}, "", "{not json"],
    )
    with pytest.raises(DataError, match=r"gpqa_diamond/test.jsonl:3: not valid JSON"):
        B.load_tasks("gpqa_diamond", tmp_path)
    _write_jsonl(p, [{"id": "1", "question": "q", "choices": ["a", "b"], "answer": "C"}], gz=False)
    with pytest.raises(DataError, match=r"test.jsonl:1: field 'answer' must be a letter A-B"):
        B.load_tasks("gpqa_diamond", tmp_path)
    _write_jsonl(p, [{"id": "1", "question": "q", "answer": "A"}])
    with pytest.raises(DataError, match=r"test.jsonl:1: field 'choices'"):
        B.load_tasks("gpqa_diamond", tmp_path)
    _write_jsonl(
        tmp_path / "bbeh" / "test.jsonl.gz",
        [{"id": "a", "question": "q", "answer": "x"}, {"id": "a", "question": "q", "answer": "y"}],
        gz=True,
    )
    with pytest.raises(DataError, match=r"test.jsonl.gz:2: duplicate id 'a'"):
        B.load_tasks("bbeh", tmp_path)


def test_missing_large_set_is_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COEVOLVE_DATA", raising=False)
    with pytest.raises(DataError, match="bbeh.*--data-dir"):
        B.load_tasks("bbeh", tmp_path)


def test_shipped_sets_load_with_expected_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COEVOLVE_DATA", raising=False)
    sizes = {
        "gsm8k": 1319,
        "math500": 500,
        "aime24": 30,
        "aime25": 30,
        "amc23": 40,
        "minerva": 272,
        "olympiadbench": 675,
    }
    for name, n in sizes.items():
        tasks = B.load_tasks(name, None)
        assert len(tasks) == n, name
        assert all(t.answer for t in tasks)
    first = B.load_tasks("math500", None, limit=3)
    assert [t.id for t in first] == [t.id for t in B.load_tasks("math500", None)[:3]]
    assert first[0].features["level"] == 2


def test_env_data_dir_and_resolve_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_jsonl(
        tmp_path / "supergpqa" / "sample300.jsonl",
        [{"id": "s1", "question": "q", "choices": ["x", "y", "z"], "answer": "b"}],
    )
    monkeypatch.setenv("COEVOLVE_DATA", str(tmp_path))
    (t,) = B.load_tasks("supergpqa")
    assert t.answer == "B" and t.features["choices"] == ["x", "y", "z"]
    names = [b.name for b in B.resolve_benches(["math7", "gsm8k,general"])]
    assert names == [
        "amc23",
        "minerva",
        "math500",
        "gsm8k",
        "olympiadbench",
        "aime24",
        "aime25",
        "mmlu_pro",
        "supergpqa",
        "gpqa_diamond",
        "bbeh",
    ]
    assert [b.name for b in B.resolve_benches(["toy"])] == ["toy"]
    with pytest.raises(ConfigError, match="unknown benchmark 'gsm9k'"):
        B.resolve_benches(["gsm9k"])


def test_mc_prompt_lists_choices_and_chat_template() -> None:
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in msgs) + "<assistant>"

    p = ChatPrompter(Tok(), use_chat_template=True)
    task = Task("1", "Which?", "B", features={"choices": ["red", "blue"]})
    (prompt,) = B.build_prompts(B.BENCHMARKS["gpqa_diamond"], [task], p)
    assert "<user>Which?\n\nA. red\nB. blue\n\n" in prompt and "\\boxed{}" in prompt
    (math_prompt,) = B.build_prompts(B.BENCHMARKS["math500"], [Task("2", "1+1?", "2")], p)
    assert math_prompt == p.solver("1+1?")  # the training prompt, unchanged


# ---------------------------------------------------------------------------------------------
# suites, results.json, group averages, compare


class KeywordSampler:
    """Answers by the first key of ``table`` found inside the prompt (greedy and sampled)."""

    tokenizer = None

    def __init__(self, table: dict[str, str], sampled: dict[str, list[str]] | None = None):
        self.table, self.sampled_table = table, sampled or {}
        self.calls: list[tuple[int, int]] = []

    def sample(self, prompts, n, params):
        self.calls.append((len(prompts), n))
        out = []
        for p in prompts:
            key = next(k for k in self.table if k in p)
            texts = (
                [self.table[key]] * n
                if params.temperature == 0
                else (self.sampled_table.get(key) or [self.table[key]] * n)[:n]
            )
            out.append([Completion(text=t, token_ids=[], prompt_ids=[]) for t in texts])
        return out


def _fixture_data(root: Path) -> None:
    _write_jsonl(
        root / "gpqa_diamond" / "test.jsonl",
        [
            {"id": "g1", "question": "QG1", "choices": ["a", "b", "c", "d"], "answer": "A"},
            {"id": "g2", "question": "QG2", "choices": ["a", "b", "c", "d"], "answer": "B"},
        ],
    )
    _write_jsonl(
        root / "bbeh" / "test.jsonl.gz",
        [
            {"id": "b1", "question": "QB1", "answer": "yes", "task": "t1"},
            {"id": "b2", "question": "QB2", "answer": "(c)", "task": "t2"},
            {"id": "b3", "question": "QB3", "answer": "no", "task": "t2"},
            {"id": "b4", "question": "QB4", "answer": "no", "task": "t2"},
        ],
        gz=True,
    )
    _write_jsonl(
        root / "amc23" / "test.jsonl",
        [{"id": "m1", "question": "QM1", "answer": "27"}, {"id": "m2", "question": "QM2", "answer": "5"}],
    )


def test_suite_results_group_averages_and_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fixture_data(data)
    sampler = KeywordSampler(
        {
            "QG1": "The answer is (A)",
            "QG2": "hmm, no idea",  # gpqa: 1/2, no letter -> wrong
            "QB1": "The answer is: Yes.",
            "QB2": "\\boxed{c}",
            "QB3": "The answer is: yes",
            "QB4": "\\boxed{No}",  # bbeh: 3/4
            "QM1": "\\boxed{27}",
            "QM2": "\\boxed{4}",
        },  # amc greedy: 1/2
        sampled={"QM1": ["\\boxed{27}"] * 16 + ["\\boxed{1}"] * 16, "QM2": ["\\boxed{5}"] * 8 + ["x"] * 24},
    )
    out = tmp_path / "run_a"
    res = evaluate_suite(
        sampler,
        ChatPrompter(),
        ["gpqa_diamond", "bbeh", "amc23"],
        grader=BoxedGrader(),
        samples=-1,
        data_dir=data,
        max_new_tokens=9,
        seed=1,
        out_dir=out,
    )
    assert res["rollouts"] == 2 + 4 + 2 * 33
    bm = res["benchmarks"]
    assert bm["gpqa_diamond"]["score"] == 0.5 and bm["gpqa_diamond"]["metric"] == "greedy"
    assert bm["bbeh"]["score"] == 0.75 and bm["bbeh"]["by_group"]["t2"]["greedy"] == pytest.approx(2 / 3)
    # amc23 uses its default mean@32: (16/32 + 8/32) / 2
    assert bm["amc23"]["metric"] == "mean@32" and bm["amc23"]["score"] == pytest.approx(0.375)
    assert bm["amc23"]["greedy"] == 0.5
    assert res["averages"]["general"] == pytest.approx((0.5 + 0.75) / 2)
    assert res["averages"]["math"] == pytest.approx(0.375)
    assert res["averages"]["overall"] == pytest.approx((0.5 + 0.75 + 0.375) / 3)
    # one greedy call per benchmark, one sampling call only where k > 0
    assert sampler.calls == [(2, 1), (4, 1), (2, 1), (2, 32)]
    assert load_results(out) == json.loads((out / "results.json").read_text())
    items = [json.loads(l) for l in (out / "items_gpqa_diamond.jsonl").read_text().splitlines()]
    assert items[1]["extracted"] is None and items[1]["correct"] is False
    assert "A. a\nB. b" in items[0]["prompt"]
    table = format_table(res)
    assert "| gpqa_diamond | general | 2 | greedy | 50.0 |" in table
    assert "**avg overall**" in table
    # one evaluation run: no spread fields, results.json as before repeats existed
    assert "averages_std" not in res and "repeats" not in res["config"]
    assert not any(k in bm["amc23"] for k in ("score_std", "score_runs", "sampled_runs", "sampled_std"))
    assert "sampled_acc_runs" not in json.loads((out / "items_amc23.jsonl").read_text().splitlines()[0])

    # a second run: everything right on gpqa, compare side by side
    sampler2 = KeywordSampler({**sampler.table, "QG2": "\\boxed{B}"})
    out_b = tmp_path / "run_b"
    evaluate_suite(
        sampler2, ChatPrompter(), ["gpqa_diamond"], grader=BoxedGrader(), data_dir=data, out_dir=out_b, max_new_tokens=9
    )
    cmp = compare([out, out_b])
    assert cmp.splitlines()[0] == "| benchmark | run_a | run_b | Δ last−first |"
    assert "| gpqa_diamond | 50.0 | 100.0 | +50.0 |" in cmp
    assert "| bbeh | 75.0 | – | – |" in cmp
    with pytest.raises(DataError, match="no results.json"):
        compare([tmp_path / "nowhere"])


def test_evaluate_model_loads_through_the_engine_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coevolve.engine as engine

    _fixture_data(tmp_path / "data")
    seen: dict = {}

    def fake_load_sampler(cfg, path, device="auto", dtype="auto"):
        seen.update(path=path, max_batch=cfg.max_batch)
        return KeywordSampler({"QM1": "\\boxed{27}", "QM2": "\\boxed{5}"})

    monkeypatch.setattr(engine, "load_sampler", fake_load_sampler)
    res = evaluate_model(
        "some/model",
        ["amc23"],
        limit=1,
        samples=0,
        max_new_tokens=8,
        out_dir=tmp_path / "o",
        data_dir=tmp_path / "data",
        seed=0,
        batch_size=7,
        progress=False,
    )
    assert seen == {"path": "some/model", "max_batch": 7}
    assert res["benchmarks"]["amc23"]["n"] == 1 and res["benchmarks"]["amc23"]["score"] == 1.0
    assert res["config"]["model"] == "some/model" and res["config"]["world"] == "real"
    with pytest.raises(ConfigError):
        evaluate_model("x", ["nope"], out_dir=tmp_path / "p")


def test_benchmark_protocol_scores_multiple_choice(tmp_path: Path) -> None:
    """evaluate_benchmark builds the benchmark's prompt form and applies its metric."""
    _fixture_data(tmp_path)
    bench = B.get("gpqa_diamond")
    tasks = bench.load(data_dir=tmp_path)
    sampler = KeywordSampler({"QG1": "Answer: A", "QG2": "\\boxed{B}"})
    r = evaluate_benchmark(sampler, bench, tasks, ChatPrompter(), BoxedGrader(), max_new_tokens=8)
    assert r.greedy == 1.0 and [x["extracted"] for x in r.records] == ["A", "B"]
    assert "A. a" in r.records[0]["prompt"]
    assert [b.name for b in B.resolve_benches(["general"])] == ["mmlu_pro", "supergpqa", "gpqa_diamond", "bbeh"]
    with pytest.raises(ConfigError):
        B.get("nope")


def test_real_math_grader_on_shipped_math500(monkeypatch: pytest.MonkeyPatch) -> None:
    from coevolve.answers import Grader

    monkeypatch.delenv("COEVOLVE_DATA", raising=False)
    tasks = B.load_tasks("math500", None, limit=4)
    table = {t.question[:60]: f"so the result is \\boxed{{{t.answer}}}." for t in tasks[:3]}
    table[tasks[3].question[:60]] = "no boxed answer here"
    with Grader() as grader:
        res = evaluate_benchmark(
            KeywordSampler(table), B.get("math500"), tasks, ChatPrompter(), grader, max_new_tokens=8
        )
    assert [r["correct"] for r in res.records] == [True, True, True, False]
    assert res.records[3]["extracted"] is None


def test_toy_benchmark_comes_from_the_toy_world() -> None:
    from coevolve.world.toy.world import ToyWorld

    world = ToyWorld(heldout_size=12)
    tasks = world.bench_tasks("toy", None, None)
    assert len(tasks) == 12 and world.bench_tasks("math500", None, None) is None
    good = {world.prompter.solver(t.question): f"<think></think>\\boxed{{{t.answer}}}" for t in tasks[::2]}
    bad = {world.prompter.solver(t.question): "<think></think>\\boxed{?}" for t in tasks[1::2]}
    res = evaluate_suite(
        KeywordSampler({**good, **bad}),
        world.prompter,
        ["toy"],
        grader=BoxedGrader(),
        bench_tasks=world.bench_tasks,
        max_new_tokens=8,
    )
    toy = res["benchmarks"]["toy"]
    assert toy["greedy"] == pytest.approx(0.5) and toy["n"] == 12
    assert set(toy["by_group"]) <= {"1", "2", "3", "4"} and sum(g["n"] for g in toy["by_group"].values()) == 12
    assert len(B.load_tasks("toy", limit=3)) == 3  # any world can be scored on the toy set


def test_coevolve_eval_budget_is_the_runs_budget():
    """One answer budget per world: ``coevolve eval`` without --max-new-tokens evaluates as a
    run of the model's world does (the toy config's 64; the real preset's 4096)."""
    from coevolve.config import load_config
    from coevolve.config.base import real_preset
    from coevolve.evaluate import run_eval

    assert run_eval("toy").max_new_tokens == load_config("grpo", None, []).eval.max_new_tokens
    for recipe in ("grpo", "d2evo", "diagevo"):
        assert run_eval("real").max_new_tokens == real_preset(recipe)["eval"]["max_new_tokens"]
    arith = load_config("grpo", Path(__file__).resolve().parents[1] / "configs" / "smollm2" / "grpo.yaml").eval
    assert run_eval("arith").max_new_tokens == arith.max_new_tokens  # the arith presets' budget


@pytest.mark.parametrize("recipe", ["grpo", "d2evo", "diagevo", "rzero"])
def test_coevolve_eval_of_a_skill_checkpoint_evaluates_as_the_skill_runs(tmp_path, recipe):
    """``coevolve eval --model <skill checkpoint>``: the checkpoint's world is skill, and its
    evaluation defaults are the skill presets' (4 samples, 80 tokens), not a real model's."""
    import yaml

    from coevolve.evaluate import run_eval
    from coevolve.world import CHECKPOINT_META, world_of_model

    ckpt = tmp_path / "solver_r01"
    ckpt.mkdir()
    (ckpt / CHECKPOINT_META).write_text(json.dumps({"world": "skill"}))
    world = world_of_model(ckpt, None)
    preset = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "skill" / f"{recipe}.yaml").read_text())
    got = run_eval(world.name)
    assert world.name == "skill"
    assert (got.samples, got.max_new_tokens) == (preset["eval"]["samples"], preset["eval"]["max_new_tokens"])


class SeededSampler(KeywordSampler):
    """A KeywordSampler whose T=1 answers depend on the sampling seed (one table per seed)."""

    def __init__(self, table: dict[str, str], by_seed: dict[int, dict[str, list[str]]]):
        super().__init__(table)
        self.by_seed, self.seeds = by_seed, []

    def sample(self, prompts, n, params):
        self.seeds.append(params.seed)
        if params.temperature != 0:
            self.sampled_table = self.by_seed[params.seed]
        return super().sample(prompts, n, params)


def test_mean_std_against_the_textbook_sample_std() -> None:
    import statistics

    from coevolve.eval.core import mean_std

    for xs in ([0.1, 0.4, 0.4], [0.375, 0.5, 0.25], [0.9, 0.2], [0.3, 0.3, 0.3, 0.3]):
        m, s = mean_std(xs)
        assert m == pytest.approx(statistics.fmean(xs)) and s == pytest.approx(statistics.stdev(xs))
    assert mean_std([0.7]) == (0.7, None)
    with pytest.raises(ValueError):
        mean_std([])


def test_repeated_evaluation_reports_mean_and_sample_std(tmp_path: Path) -> None:
    """Three evaluation runs with derived seeds: AMC's mean@32 per run 0.375, 0.5, 0.25 -> mean
    0.375, sample std sqrt((0 + 0.125² + 0.125²) / 2) = 0.125; greedy GPQA once (std 0)."""
    from coevolve.eval.core import repeat_seed
    from coevolve.eval.suite import group_averages
    from coevolve.run import derive_seed

    data = tmp_path / "data"
    _fixture_data(data)
    seeds = [repeat_seed(1, r) for r in range(3)]
    assert seeds[0] == 1 and seeds[1:] == [derive_seed(1, "eval_repeat", 1), derive_seed(1, "eval_repeat", 2)]
    assert len(set(seeds)) == 3
    runs = {
        seeds[0]: {"QM1": ["\\boxed{27}"] * 16 + ["x"] * 16, "QM2": ["\\boxed{5}"] * 8 + ["x"] * 24},
        seeds[1]: {"QM1": ["\\boxed{27}"] * 32, "QM2": ["x"] * 32},
        seeds[2]: {"QM1": ["\\boxed{27}"] * 8 + ["x"] * 24, "QM2": ["x"] * 24 + ["\\boxed{5}"] * 8},
    }
    sampler = SeededSampler({"QG1": "The answer is (A)", "QG2": "hmm", "QM1": "\\boxed{27}", "QM2": "\\boxed{4}"}, runs)
    out = tmp_path / "three"
    res = evaluate_suite(
        sampler,
        ChatPrompter(),
        ["gpqa_diamond", "amc23"],
        grader=BoxedGrader(),
        samples=-1,
        data_dir=data,
        max_new_tokens=9,
        seed=1,
        out_dir=out,
        repeats=3,
    )
    # greedy once per benchmark, then amc23's three sampled runs, each with its own seed
    assert sampler.calls == [(2, 1), (2, 1), (2, 32), (2, 32), (2, 32)]
    assert sampler.seeds == [1, 1, *seeds]
    assert res["rollouts"] == 2 + 2 * (1 + 3 * 32)
    amc, gpqa = res["benchmarks"]["amc23"], res["benchmarks"]["gpqa_diamond"]
    assert amc["score_runs"] == pytest.approx([0.375, 0.5, 0.25]) and amc["sampled_runs"] == amc["score_runs"]
    assert amc["score"] == pytest.approx(0.375) and amc["sampled"] == pytest.approx(0.375)
    assert amc["score_std"] == pytest.approx(0.125) and amc["sampled_std"] == pytest.approx(0.125)
    assert amc["repeats"] == 3 and amc["greedy"] == 0.5
    assert amc["sampled_any"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)  # mean of the runs' pass@32
    assert gpqa["score_runs"] == [0.5, 0.5, 0.5] and gpqa["score_std"] == 0.0 and gpqa["score"] == 0.5
    # averages: the run-level average first, then its spread over runs
    assert res["averages"]["overall"] == pytest.approx((0.5 + 0.375) / 2)
    assert res["averages_std"] == {"math": pytest.approx(0.125), "general": 0.0, "overall": pytest.approx(0.0625)}
    assert res["config"]["repeats"] == 3
    # a group over a greedy and a sampled member: runs (0.5+0.2)/2, (0.5+0.3)/2, (0.5+0.4)/2 -> std 0.05
    g = group_averages(
        ["diagevo_general4"],
        {
            "gpqa_diamond": {"score": 0.5, "score_runs": [0.5] * 3},
            "bbeh": {"score": 0.3, "score_runs": [0.2, 0.3, 0.4]},
        },
    )
    assert g["diagevo_general4"]["score"] == pytest.approx(0.4) and g["diagevo_general4"]["std"] == pytest.approx(0.05)
    assert g["diagevo_general4"]["score_runs"] == pytest.approx([0.35, 0.4, 0.45])
    # the records keep every run's verdicts, run after run
    rec = json.loads((out / "items_amc23.jsonl").read_text().splitlines()[0])
    assert len(rec["sampled_correct"]) == 96 and rec["sampled_acc_runs"] == [0.5, 1.0, 0.25]
    table = format_table(res)
    assert "| amc23 | math | 2 | mean@32 | 37.5 ± 12.5 |" in table
    assert "| **avg overall** | | | | **43.8 ± 6.2** | | |" in table
    assert "sample std (ddof 1) over 3 evaluation runs" in table
    # compare and the study read the mean as the score
    assert "| amc23 | 37.5 |" in compare([out])


def test_repeats_below_one_are_refused(tmp_path: Path) -> None:
    from coevolve.config import load_config

    with pytest.raises(ConfigError, match="repeats"):
        load_config("grpo", None, ["eval.repeats=0"])
    with pytest.raises(DataError, match="--repeats"):
        evaluate_model("x", ["amc23"], out_dir=tmp_path / "o", repeats=0)


@pytest.mark.slow
def test_toy_model_evaluated_twice_keeps_its_first_run(toy_base: Path, tmp_path: Path) -> None:
    """The toy base evaluated with 2 runs: run 0 draws exactly what a single evaluation draws,
    and the reported std is the sample std of the two runs' mean@4, recomputed from the records."""
    import math

    one = evaluate_model(str(toy_base), ["toy"], limit=12, samples=4, out_dir=tmp_path / "one", progress=False)
    two = evaluate_model(
        str(toy_base), ["toy"], limit=12, samples=4, out_dir=tmp_path / "two", progress=False, repeats=2
    )
    a, b = one["benchmarks"]["toy"], two["benchmarks"]["toy"]
    assert b["greedy"] == a["greedy"] and b["sampled_runs"][0] == a["sampled"]
    recs = [json.loads(line) for line in (tmp_path / "two" / "items_toy.jsonl").read_text().splitlines()]
    per_run = [sum(sum(r["sampled_correct"][j * 4 : (j + 1) * 4]) / 4 for r in recs) / len(recs) for j in (0, 1)]
    assert b["sampled_runs"] == pytest.approx(per_run)
    assert b["sampled"] == pytest.approx(sum(per_run) / 2)
    assert b["sampled_std"] == pytest.approx(abs(per_run[0] - per_run[1]) / math.sqrt(2))
    assert b["metric"] == "greedy" and b["score_std"] == 0.0 and two["config"]["repeats"] == 2
