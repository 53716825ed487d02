"""The skill world: procedures and their bugs against column-by-column references, the question
language, the held-out strata and labelled sets, the trace diagnosis, the injected bug rates of
the pretraining traces, the World adapter, the ground-truth scores of a run, and one tiny run."""

from __future__ import annotations

import json
import random

import pytest

from coevolve.errors import ConfigError, DataError
from coevolve.world.skill import causes as sc
from coevolve.world.skill import problems as sw
from coevolve.world.skill import procedures as sp
from coevolve.world.skill.pretrain import SkillMix, buggy_steps, draw_like, free_weights, sample_example

# ----------------------------------------------------------------------------------------------
# procedures


def test_bugs_on_the_documented_examples():
    assert sp.add_no_carry(47, 38) == 75 and 47 + 38 == 85
    assert sp.sub_no_repay(93, 27) == 76 and 93 - 27 == 66
    assert sp.mul_no_carry(58, 3) == 154 and 58 * 3 == 174
    assert sp.div_no_remainder(74, 3) == 21 and 74 // 3 == 24
    assert sp.max_last_digit(38, 71) == 38
    assert sp.dsum_no_first(174) == 11
    assert sw.PRIMITIVES["rev"].apply(85, None) == 58 and sw.PRIMITIVES["rev"].apply(85, None, buggy=True) == 85


def _carries(a: int, b: int) -> bool:
    """Slow reference: a column below the top one overflows (with the incoming carry)."""
    da, db = sp.digits(a), sp.digits(b)
    w = max(len(da), len(db))
    da, db = da + [0] * (w - len(da)), db + [0] * (w - len(db))
    c = 0
    for j in range(w - 1):
        c = (da[j] + db[j] + c) // 10
        if c:
            return True
    return False


def _borrows_below_top(a: int, b: int) -> bool:
    """Slow reference: some column below the top one borrows, and the digit it borrows from is
    then shown unreduced (the bug changes the result)."""
    da, db = sp.digits(a), sp.digits(b) + [0] * 3
    return any(da[j] < db[j] for j in range(len(da) - 1))


def test_exercises_matches_column_references():
    rng = random.Random(0)
    for _ in range(3000):
        v, x = rng.randint(10, 899), rng.randint(10, 99)
        if v + x <= 999:
            assert sw.PRIMITIVES["add"].exercises(v, x) == _carries(v, x), (v, x)
        if x <= v:
            assert sw.PRIMITIVES["sub"].exercises(v, x) == _borrows_below_top(v, x), (v, x)
        a, d = rng.randint(10, 99), rng.randint(2, 9)
        assert sw.PRIMITIVES["mul"].exercises(a, d) == ((a % 10) * d >= 10), (a, d)
        assert sw.PRIMITIVES["div"].exercises(a, d) == ((a // 10) % d != 0), (a, d)


# ----------------------------------------------------------------------------------------------
# questions


@pytest.mark.parametrize(
    "text,ok",
    [
        ("47+38~*3", True),
        ("47+38~*3=", True),
        (" 93-27/4^30# ", True),
        ("07+38", False),  # leading zero
        ("47+5", False),  # add operand must have two digits
        ("47*12", False),  # multiply by one digit only
        ("470", False),
        ("47", False),  # no operation / start out of range
        ("47+68*3", False),  # 115*3: a two-digit running value is needed
        ("12-47", False),  # negative
        ("40~", False),  # reversing a trailing zero
        ("12+10+10+10+10+10+10", False),  # depth 6
        ("47/1", False),
        ("47^5", False),
        ("47+38~~~~~", False),
    ],
)
def test_parse_chain(text, ok):
    assert (sw.parse_question(text) is not None) == ok


def test_problem_trace_answer_and_features():
    p = sw.make_problem("93-27/4^30#")
    assert p.completion() == "<think>93-27=66 66/4=16 16^30=30 #30=3</think>\\boxed{3}"
    assert sw.oracle("93-27/4^30#") == "3" and p.answer == "3"
    assert p.features["depth"] == 4 and p.features["skills"] == ["sub", "div", "max", "dsum"]
    # 66/4: the tens leave a remainder; 16^30: by the ones digit 16 would win; #30: the first digit counts
    assert p.features["exercised"] == ["sub", "div", "max", "dsum"]
    assert p.features["deficits"] == ["sub", "div"] and p.features["stratum"] == "mixed"
    for s in p.steps:
        assert sc.parse_step(s.text()) == (s.skill, s.value, s.operand, s.result)
    with pytest.raises(DataError, match="not a valid skill-world question"):
        sw.make_problem("7+7")


def test_heldout_strata_are_balanced_distinct_and_focal():
    hs = sw.heldout_problems()
    assert len(hs) == 2975 and len({p.question for p in hs}) == 2975
    counts: dict[tuple[str, int], int] = {}
    for p in hs:
        counts[(p.features["focus"], p.depth)] = counts.get((p.features["focus"], p.depth), 0) + 1
        if sw.DEFICITS.rate(p.features["focus"]) > 0:  # one deficient skill, exercised; the rest clean
            assert p.features["deficits"] == [p.features["focus"]]
        else:
            assert p.features["deficits"] == [] and p.features["focus"] in p.features["exercised"]
    assert counts == {(s, d): (25 if d == 1 else 100) for s in sw.SKILLS for d in sw.DEPTHS}
    assert sw.heldout_problems() is hs  # memoised: one object per (size, seed, profile)
    small = sw.heldout_problems(40)  # a smaller eval set is part of the default one (outside pretraining)
    assert len(small) == 1190 and {p.question for p in small} <= {p.question for p in hs}


def test_the_ladder_pool_puts_one_or_two_soft_deficits_in_its_middle_fifth():
    big = sw.labelled_set(512, seed=3)  # the default pool
    assert sw.labelled_set(512, seed=3, pool="ladder") == big and sw.labelled_set(128, seed=3) == big[:128]
    kinds = [p.features["pool_kind"] for p in big]
    assert set(kinds) == {"trivial", "out_of_reach", "ladder"} and 0.12 < kinds.count("ladder") / len(big) < 0.28
    rungs = {1: 0, 2: 0}
    for p in big:
        if p.features["pool_kind"] == "ladder":
            ex = p.features["exercised"]
            assert 2 <= p.depth <= 4 and not set(ex) & set(sw.DEFICITS.hard)
            assert sum(s in sw.DEFICITS.soft for s in ex) == p.features["rung"]
            rungs[p.features["rung"]] += 1
    assert min(rungs.values()) > 0.3 * sum(rungs.values())
    with pytest.raises(DataError, match="labelled pool 'steep': one of ladder, ushape, strata"):
        sw.labelled_set(8, pool="steep")
    with pytest.raises(DataError, match="rung 3 must be in"):
        sw.draw_rung(random.Random(0), 3, 2)


def test_labelled_sets_are_nested_outside_the_heldout_set_and_u_shaped():
    big = sw.labelled_set(512, seed=3, pool="ushape")
    assert sw.labelled_set(128, seed=3, pool="ushape") == big[:128]
    assert not {p.question for p in big} & sw.heldout_questions()
    kinds = [p.features["pool_kind"] for p in big]
    assert {k: kinds.count(k) for k in set(kinds)}.keys() == {"trivial", "out_of_reach", "between"}
    for p in big:
        if p.features["pool_kind"] == "out_of_reach":
            assert p.depth == 5 and sum(sw.DEFICITS.rate(s) > 0 for s in p.features["exercised"]) >= 3
        if p.features["pool_kind"] == "trivial":
            assert p.depth == 1 and p.features["deficits"] == []
    assert sw.labelled_set(64, seed=4, pool="ushape") != big[:64]


def test_deficit_profile():
    pr = sw.DeficitProfile.of({"div": 0.7, "sub": 0.35, "add": 0})
    assert pr.soft == ("sub",) and pr.hard == ("div",) and "add" in pr.clean and pr.key() == "sub35-div70"
    with pytest.raises(DataError, match="deficit skill 'pow'"):
        sw.DeficitProfile.of({"pow": 0.3})
    with pytest.raises(DataError, match="must be in"):
        sw.DeficitProfile((("sub", 1.5),))


# ----------------------------------------------------------------------------------------------
# diagnosis


def _completion(question: str, bugs=None, edit=None) -> str:
    p = sw.make_problem(question)
    steps = sw.run_chain(p.start, p.ops, bugs)
    texts = [s.text() for s in steps]
    if edit:
        texts = edit(texts)
    return f"<think>{' '.join(texts)}</think>\\boxed{{{steps[-1].result}}}"


def test_explain_divergence_names_the_bug_the_slip_and_the_working_causes():
    q = "93-27~*3"  # 66 -> 66 -> 198
    good = _completion(q)
    assert sc.explain_divergence(q, good, good) is None
    d = sc.explain_divergence(q, _completion(q, [True, False, False]), good)
    assert (d.step, d.cause_id, d.skill, d.bad_step) == (0, "sub_bug", "column subtraction with borrowing", "93-27=76")
    slip = "<think>93-27=65 ~65=56 56*3=168</think>\\boxed{168}"
    assert sc.explain_divergence(q, slip, good).cause_id == "sub_slip"
    assert sc.explain_divergence(q, "<think>93-72=21 ~21=12 12*3=36</think>\\boxed{36}", good).cause_id == "misread"
    assert (
        sc.explain_divergence(q, "<think>93-27=66 ~67=76 76*3=228</think>\\boxed{228}", good).cause_id == "wrong_input"
    )
    assert sc.explain_divergence(q, "<think>93-27=66 66*3=198</think>\\boxed{198}", good).cause_id == "wrong_operation"
    assert sc.explain_divergence(q, "<think>93-27=66 ~66=66</think>\\boxed{66}", good).cause_id == "stopped_early"
    assert (
        sc.explain_divergence(q, "<think>93-27=66 ~66=66 66*3=198</think>\\boxed{199}", good).cause_id
        == "answer_mismatch"
    )
    assert sc.explain_divergence(q, "no answer", good) is None
    assert sc.explain_divergence("not a question", slip, good) is None


def test_trace_bug_steps_counts_exercised_steps_on_the_correct_path():
    q = "58*3~-27"  # 174 -> 471 -> 444: every step exercises its bug (clean skills count too)
    assert sc.trace_bug_steps(q, _completion(q)) == [("mul", False), ("rev", False), ("sub", False)]
    assert sc.trace_bug_steps(q, _completion(q, [True, False, False])) == [("mul", True)]  # then off the path


def test_causes_shown_by_questions_and_written_on_demand():
    rng = random.Random(1)
    for cid in sc.CAUSES:
        p = sc.problem_for_causes(rng, [cid])
        assert sc.shows_cause(cid, p.features), (cid, p.question)
    p = sc.problem_for_causes(rng, ["sub_bug", "mul_bug"])
    assert {"sub", "mul"} <= set(p.features["exercised"])
    assert sc.cause_by_text(sc.CAUSES["div_bug"].text).id == "div_bug"
    assert sc.injected_causes() == {"sub_bug": "soft", "mul_bug": "soft", "div_bug": "hard"}


# ----------------------------------------------------------------------------------------------
# pretraining data


def test_pretraining_traces_take_the_injected_bugs_at_their_rates():
    rng = random.Random(0)
    taken = {s: [0, 0] for s in sw.SKILLS}
    for _ in range(6000):
        p = sw.make_problem(sw.question_text(*sw.draw_chain(rng, rng.choice(sw.DEPTHS), {s: 1.0 for s in sw.SKILLS})))
        bugs = buggy_steps(rng, p, sw.DEFICITS)
        v = p.start
        for o, b in zip(p.ops, bugs):
            prim = sw.PRIMITIVES[o.skill]
            if prim.exercises(v, o.operand):
                taken[o.skill][0] += b
                taken[o.skill][1] += 1
            v = prim.apply(v, o.operand, buggy=b)
    rate = {s: t / n for s, (t, n) in taken.items() if n}
    assert all(rate[s] == 0 for s in sw.DEFICITS.clean)
    # the injected rate, less the bugs refused because a later step would be undefined
    assert 0.28 < rate["sub"] <= 0.37 and 0.28 < rate["mul"] <= 0.37 and 0.55 < rate["div"] <= 0.72


def test_writer_examples_follow_their_prompts():
    rng = random.Random(2)
    banned = sw.heldout_questions()
    free_steps, n_def = 0, 0
    for _ in range(1500):
        kind, prompt, comp = sample_example(rng, sw.DEFICITS, SkillMix(), banned)
        if kind == "solver":
            continue
        q = sw.parse_question(comp.removeprefix("<question>").removesuffix("</question>"))
        assert q is not None and q not in banned
        if prompt == "NEW:":
            skills = sw.make_problem(q).features["skills"]
            free_steps += len(skills)
            n_def += sum(sw.DEFICITS.rate(s) > 0 for s in skills)
    assert n_def / free_steps < 0.08  # the free prior under-samples the deficient skills
    assert free_weights(sw.DEFICITS, SkillMix())["sub"] < free_weights(sw.DEFICITS, SkillMix())["add"]
    anchor = sw.make_problem("93-27~*3")
    like = draw_like(random.Random(0), anchor, sw.DEFICITS, banned)
    assert like.features["skills"] == anchor.features["skills"] and like.question != anchor.question


# ----------------------------------------------------------------------------------------------
# the World and the run's ground-truth scores


def _cfg(*over: str):
    from coevolve.config import load_config

    return load_config("grpo", None, ["data.source=skill", *over])


def test_config_section_validates_with_the_field_named():
    cfg = _cfg("data.skill.focus=[sub,mul]")
    assert cfg.data.skill.focus == ["sub", "mul"] and cfg.data.skill.deficits["div"] == 0.7
    with pytest.raises(ConfigError, match="data.skill.deficits"):
        _cfg("data.skill.deficits={pow: 0.3}")
    with pytest.raises(ConfigError, match="data.skill.focus"):
        _cfg("data.skill.focus=[sub,nope]")
    with pytest.raises(ConfigError, match="data.skill.heldout_per_stratum"):
        _cfg("data.skill.heldout_per_stratum=1")


def test_world_draws_pools_and_causes():
    from coevolve.memory.store import Cause
    from coevolve.world import make_world
    from coevolve.world.skill.world import SkillWorld

    w = make_world(_cfg("data.skill.focus=[sub,mul,div]"), None, lambda m: None)
    assert isinstance(w, SkillWorld) and w.name == "skill" and w.knows_truth
    drawn = w.draw(random.Random(0), 200)
    assert {t.features["focus"] for t in drawn} == {"sub", "mul", "div"}
    assert not {t.question for t in drawn} & w.excluded()
    pool = w.pool(random.Random(0), 100)
    assert len({t.question for t in pool}) == len(pool) and {t.features["pool_kind"] for t in pool} >= {"trivial"}
    fixed = make_world(_cfg("data.limit=64"), None, lambda m: None)
    assert [t.question for t in fixed.pool(random.Random(5), None)] and len(fixed.tasks) == 64
    assert len(w.bench_tasks("skill", None, None)) == 2975 and w.bench_tasks("toy", None, None) is None
    c = Cause("c1", sc.CAUSES["sub_bug"].text, "n1", source_id="sub_bug")
    assert w.shows_causes("93-27", [c]) == [True] and w.shows_causes("97-27", [c]) == [False]
    assert w.oracle("93-27~*3") == "198" and w.oracle("nonsense") is None
    assert w.prompter.parse_question("<question>93-27~*3</question>") == "93-27~*3"
    # verl's reward workers rebuild this world's prompter by its name: the skill world runs under verl
    from coevolve.verl.writer import prompter_spec

    assert prompter_spec(make_world(_cfg("backend=verl"), None, lambda m: None).prompter)["kind"] == "skill"


def test_memory_scores_against_the_injected_deficits():
    from coevolve.world.skill.world import memory_scores

    mem = {
        "causes": [
            {"source_id": "sub_bug", "total_failures": 30, "state": "mastered"},
            {"source_id": "add_slip", "total_failures": 10, "state": "active"},
            {"source_id": "max_slip", "total_failures": 0, "state": "active"},
            {"source_id": "mul_bug", "total_failures": 20, "state": "active"},
        ]
    }
    m = memory_scores(mem)
    assert m["precision"] == 0.5 and m["precision_failures"] == pytest.approx(50 / 60)
    assert m["recall_soft"] == 1.0 and m["recall"] == pytest.approx(2 / 3)
    assert m["found"] == {"sub_bug": "mastered", "mul_bug": "active", "div_bug": None}
    assert memory_scores({"causes": []})["precision"] is None


def test_stratum_accuracy_groups_items_by_focal_skill_and_depth():
    from coevolve.world.skill.world import stratum_accuracy

    items = [
        {"question": "93-27", "group": "sub", "correct": True, "sampled_acc": 0.5},
        {"question": "93-27~", "group": "sub", "correct": False, "sampled_acc": 0.25},
        {"question": "47+38", "group": "add", "correct": True, "sampled_acc": 1.0},
    ]
    acc = stratum_accuracy(items)
    assert acc["sub"] == {"n": 2, "greedy": 0.5, "sampled": 0.375}
    assert acc["sub@2"]["n"] == 1 and acc["soft"]["n"] == 2 and acc["clean"]["n"] == 1 and acc["all"]["n"] == 3
    assert "hard" not in acc


def test_a_tiny_skill_run_reports_strata_and_reuses_the_base_evaluation(tiny_skill_cache, tmp_path):
    from coevolve.config import load_config
    from coevolve.recipes import execute

    over = [
        "data.source=skill",
        f"model.toy_cache={tiny_skill_cache}",
        "data.skill.base_steps=2",
        "solver.steps=1",
        "solver.prompts_per_step=2",
        "solver.group_size=2",
        "eval.limit=30",
        "eval.samples=1",
        "sampling.max_new_tokens=8",
        "eval.max_new_tokens=60",
        "run.threads=1",
        "run.progress=false",
    ]
    summaries = []
    for name in ("a", "b"):
        cfg = load_config("grpo", None, over)
        summaries.append(execute(cfg, tmp_path / name))
    sw_ = summaries[0]["skill_world"]
    assert sw_["profile"] == {"sub": 0.35, "mul": 0.35, "div": 0.7}
    assert sw_["strata_base"]["all"]["n"] == 30 and "add@1" in sw_["strata_final"]
    assert summaries[0]["eval"]["base"]["skill"]["by_group"]["add"]["n"] == 30
    # the second run's base evaluation came from the cache beside the base: the same items, the same outputs
    a, b = (json.loads(line) for line in (tmp_path / "a" / "base" / "eval" / "items_skill.jsonl").open()), None
    b = [json.loads(line) for line in (tmp_path / "b" / "base" / "eval" / "items_skill.jsonl").open()]
    assert list(a) == b
    assert list((tiny_skill_cache / "skill").glob("*/eval_cache/*/results.json"))
    # the cached evaluation still counts as the evaluation it stands for: the same compute either way
    assert summaries[0]["compute"]["eval"]["rollouts"] > 0 and summaries[0]["compute"] == summaries[1]["compute"]
    # and the same grader counters (comparisons, worker requests, timeouts) in the metrics
    graded = [
        [
            {k: v for k, v in row.items() if "/grader_" in k}
            for row in map(json.loads, (tmp_path / n / "metrics.jsonl").open())
        ]
        for n in ("a", "b")
    ]
    assert any(row.get("phase/eval/grader_calls", 0) > 0 for row in graded[0]) and graded[0] == graded[1]
