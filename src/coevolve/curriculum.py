"""Curriculum building blocks shared by D²Evo and DiagEvo: difficulty measurement, anchor mining,
pseudo-labelling by vote, confidence filters, label verification, the hybrid buffer.

Everything here is a function over plain records (``PassRecord``, ``VoteRecord``, ``Task``); only
``estimate_difficulty``, ``label_questions`` and ``JudgeVerifier`` call a ``Sampler``, and they do
so in as few batched calls as possible (one ``sample`` call per chunk of prompts) because on every
backend the cost of sampling is dominated by per-call overhead at small batch sizes.
Recipes translate their config into the explicit arguments taken here.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Literal, Protocol, Sequence, TypeVar, runtime_checkable

from coevolve.errors import CoevolveError, ConfigError
from coevolve.rewards import in_band_value
from coevolve.types import Completion, SamplingParams, Task, Vote

T = TypeVar("T")

GradeFn = Callable[[str, str], bool]
"""``grade(gold, completion_text) -> correct``."""
ExtractFn = Callable[[str], "str | None"]
"""``extract(completion_text) -> final answer or None``."""
VoteFn = Callable[[list["str | None"]], Vote]
"""``vote(answers) -> Vote`` (``coevolve.answers.vote``)."""
EquivFn = Callable[[str, str], bool]
"""``equiv(gold, pred) -> bool`` (``coevolve.answers.is_equiv``)."""
OracleFn = Callable[[str], "str | None"]
"""``oracle(question) -> exact answer or None`` (toy world)."""


class CurriculumError(CoevolveError, ValueError):
    """Inconsistent curriculum inputs (empty sample groups, values out of range)."""


class Sampler(Protocol):
    def sample(
        self, prompts: Sequence[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]: ...


class _SolverPrompter(Protocol):
    def solver(self, question: str) -> str: ...


def _default_extract() -> ExtractFn:
    # Lazy: coevolve.answers starts a math-verify worker that toy callers may never need.
    from coevolve.answers import extract_answer

    return extract_answer


def _default_vote() -> VoteFn:
    from coevolve.answers import vote

    return vote


def _default_equiv() -> EquivFn:
    from coevolve.answers import is_equiv

    return lambda gold, pred: bool(is_equiv(gold, pred))


def _chunk_params(params: SamplingParams, chunk: int) -> SamplingParams:
    """Per-chunk seed (seed + chunk) so chunking changes no result when the seed is fixed and
    different chunks do not replay the same random stream."""
    if params.seed is None:
        return params
    return replace(params, seed=params.seed + chunk)


def _sample_batched(
    sampler: Sampler, prompts: Sequence[str], n: int, params: SamplingParams, batch_prompts: int
) -> list[list[Completion]]:
    if n < 1:
        raise CurriculumError(f"number of samples per prompt must be >= 1, got {n}")
    if batch_prompts < 1:
        raise ConfigError(f"batch_prompts must be >= 1, got {batch_prompts}")
    out: list[list[Completion]] = []
    for c, start in enumerate(range(0, len(prompts), batch_prompts)):
        chunk = list(prompts[start : start + batch_prompts])
        groups = sampler.sample(chunk, n, _chunk_params(params, c))
        if len(groups) != len(chunk) or any(len(g) != n for g in groups):
            raise CurriculumError(
                f"sampler returned {len(groups)} groups of sizes {[len(g) for g in groups]} "
                f"for {len(chunk)} prompts x {n} samples"
            )
        out.extend(groups)
    return out


# --------------------------------------------------------------------------------------------
# difficulty estimation and anchors


@dataclass
class PassRecord:
    """Measured difficulty of one labelled question under the frozen solver (D²Evo §1 step 1).

    ``pass_rate = correct / n``; ``difficulty = (1 - correct/n) * 100`` (the paper's scale, shown
    to the questioner). ``answers`` are the extracted final answers (None = unparseable).
    """

    task_id: str
    question: str
    answer: str
    n: int
    correct: int
    pass_rate: float
    difficulty: float
    answers: list[str | None] = field(default_factory=list)
    features: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_counts(
        cls, task: Task, correct: int, n: int, answers: list[str | None] | None = None
    ) -> "PassRecord":
        if task.answer is None:
            raise CurriculumError(f"task {task.id!r} has no answer: difficulty needs a labelled question")
        if not 0 <= correct <= n or n < 1:
            raise CurriculumError(f"task {task.id!r}: correct={correct} out of n={n}")
        rate = correct / n
        return cls(task.id, task.question, task.answer, n, correct, rate, (1.0 - rate) * 100.0,
                   list(answers or []), dict(task.features))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PassRecord":
        return cls(**d)

    def to_task(self) -> Task:
        return Task(self.task_id, self.question, self.answer, features=dict(self.features))


def estimate_difficulty(
    sampler: Sampler,
    prompter: _SolverPrompter,
    tasks: Sequence[Task],
    n: int,
    params: SamplingParams,
    grade_fn: GradeFn,
    batch_prompts: int = 64,
    extract_fn: ExtractFn | None = None,
) -> list[PassRecord]:
    """Sample ``n`` solver answers per labelled task and count the correct ones.

    One ``sampler.sample`` call per chunk of ``batch_prompts`` prompts (``len(tasks) * n``
    rollouts in all). ``grade_fn(gold, completion_text)`` decides correctness;
    ``extract_fn`` only records what answer was parsed (default ``coevolve.answers.extract_answer``).
    """
    extract = extract_fn if extract_fn is not None else _default_extract()
    for t in tasks:
        if t.answer is None:
            raise CurriculumError(f"task {t.id!r} has no answer: difficulty needs labelled questions")
    groups = _sample_batched(sampler, [prompter.solver(t.question) for t in tasks], n, params, batch_prompts)
    records = []
    for t, g in zip(tasks, groups):
        assert t.answer is not None
        correct = sum(bool(grade_fn(t.answer, c.text)) for c in g)
        records.append(PassRecord.from_counts(t, correct, n, [extract(c.text) for c in g]))
    return records


def in_band(x: float, lo: float, hi: float) -> bool:
    """``lo <= x <= hi`` with a 1e-9 tolerance, so 2/5 counts as 0.4.

    >>> in_band(0.4, 0.4, 0.8), in_band(0.81, 0.4, 0.8)
    (True, False)
    """
    return in_band_value(x, lo, hi)


def mine_anchors(records: Sequence[PassRecord], low: float = 0.4, high: float = 0.8) -> list[PassRecord]:
    """D²Evo anchors D_real^mid: the records with ``low <= pass_rate <= high`` (inclusive)."""
    if not 0.0 <= low <= high <= 1.0:
        raise ConfigError(f"anchor band: need 0 <= low <= high <= 1, got low={low}, high={high}")
    return [r for r in records if in_band(r.pass_rate, low, high)]


def random_anchors(records: Sequence[PassRecord], k: int, rng: random.Random) -> list[PassRecord]:
    """Ablation "w/ random anchor data": ``k`` records drawn uniformly without replacement
    (all of them when fewer), ignoring their pass rate. ``k`` is normally the band count, so
    the comparison with band mining holds the anchor count fixed."""
    if k < 0:
        raise CurriculumError(f"random_anchors: k must be >= 0, got {k}")
    return rng.sample(list(records), min(k, len(records)))


def _fmt_edge(e: float) -> str:
    return f"{e:g}"


def histogram_labels(edges: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)) -> list[str]:
    """Bin names of ``pass_rate_histogram``: ``=0, (0,0.2), [0.2,0.4), ..., [0.8,1), =1``."""
    e = list(edges)
    labels = [f"={_fmt_edge(e[0])}", f"({_fmt_edge(e[0])},{_fmt_edge(e[1])})"]
    labels += [f"[{_fmt_edge(a)},{_fmt_edge(b)})" for a, b in zip(e[1:-1], e[2:])]
    labels.append(f"={_fmt_edge(e[-1])}")
    return labels


def pass_rate_histogram(
    rates: Iterable[float], edges: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
) -> dict[str, int]:
    """Counts per bin with the exact-0 and exact-1 bins separated (=0, (0,.2), [.2,.4), …,
    [.8,1), =1): the never-solved and always-solved questions carry no GRPO signal, so they
    are the two numbers that matter most when watching anchors shift.

    >>> pass_rate_histogram([0, 0.1, 0.2, 0.5, 0.8, 0.99, 1.0])
    {'=0': 1, '(0,0.2)': 1, '[0.2,0.4)': 1, '[0.4,0.6)': 1, '[0.6,0.8)': 0, '[0.8,1)': 2, '=1': 1}
    """
    e = [float(x) for x in edges]
    if len(e) < 2 or any(b <= a for a, b in zip(e, e[1:])):
        raise ConfigError(f"histogram edges must be >= 2 increasing values, got {list(edges)}")
    labels = histogram_labels(e)
    counts = dict.fromkeys(labels, 0)
    for r in rates:
        if not e[0] <= r <= e[-1]:
            raise CurriculumError(f"pass rate {r} outside the histogram range [{e[0]}, {e[-1]}]")
        if r == e[0]:
            counts[labels[0]] += 1
        elif r == e[-1]:
            counts[labels[-1]] += 1
        else:
            k = max(i for i in range(len(e) - 1) if r >= e[i])  # bin [e_k, e_k+1); k=0 is (e0, e1)
            counts[labels[k + 1]] += 1
    return counts


# --------------------------------------------------------------------------------------------
# pseudo-labels by vote


@dataclass
class VoteRecord:
    """Majority vote over ``n`` solver answers to one (generated) question.

    ``p1`` = share of all n answers in the majority cluster (unparseable ones count as
    disagreeing), ``p2`` = share of the runner-up, ``label`` = the majority answer (pseudo-label).
    ``meta`` carries provenance (anchor id, round, oracle answer...) for the saved artefacts.
    """

    question: str
    n: int
    answers: list[str | None]
    label: str | None
    p1: float
    p2: float
    sizes: list[int] = field(default_factory=list)
    id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VoteRecord":
        return cls(**d)


def label_questions(
    sampler: Sampler,
    prompter: _SolverPrompter,
    questions: Sequence[str],
    n: int,
    params: SamplingParams,
    vote_fn: VoteFn | None = None,
    extract_fn: ExtractFn | None = None,
    batch_prompts: int = 64,
) -> list[VoteRecord]:
    """Sample ``n`` solver answers per question, extract the final answers and vote.

    Used for the questioner reward (x = p1), for pseudo-labels and for the DiagEvo filter: the
    one place where p1/p2 are computed (via ``coevolve.answers.vote`` by default).
    """
    extract = extract_fn if extract_fn is not None else _default_extract()
    vote = vote_fn if vote_fn is not None else _default_vote()
    groups = _sample_batched(sampler, [prompter.solver(q) for q in questions], n, params, batch_prompts)
    out = []
    for q, g in zip(questions, groups):
        answers = [extract(c.text) for c in g]
        v = vote(answers)
        out.append(VoteRecord(q, n, answers, v.label, float(v.p1), float(v.p2), list(v.sizes)))
    return out


FilterMode = Literal["dual", "absolute", "none"]


def dual_confidence_filter(
    records: Sequence[VoteRecord],
    p_low: float = 0.3,
    p_high: float = 0.8,
    tau: float = 1.6,
    mode: FilterMode = "dual",
) -> list[VoteRecord]:
    """DiagEvo dual-confidence filter (METHODS §2 step 2); also D²Evo's band filter (``absolute``).

    * ``dual``: keep when ``p_low <= p1 <= p_high`` (absolute: not trivial, not hopeless) and
      ``p1 >= tau * p2`` (relative: the majority clearly beats the runner-up, so the
      pseudo-label is trustworthy);
    * ``absolute``: only the band;
    * ``none``: keep everything (ablation "no filter").

    Records without a label (nothing parsed) are always dropped: there is nothing to train on.
    """
    if mode not in ("dual", "absolute", "none"):
        raise ConfigError(f"filter mode must be 'dual', 'absolute' or 'none', got {mode!r}")
    if not 0.0 <= p_low <= p_high <= 1.0:
        raise ConfigError(f"filter band: need 0 <= p_low <= p_high <= 1, got {p_low}, {p_high}")
    if tau < 0:
        raise ConfigError(f"filter tau must be >= 0, got {tau}")
    kept = []
    for r in records:
        if r.label is None:
            continue
        if mode != "none" and not in_band(r.p1, p_low, p_high):
            continue
        if mode == "dual" and r.p1 < tau * r.p2 - 1e-12:
            continue
        kept.append(r)
    return kept


# --------------------------------------------------------------------------------------------
# label verification


@runtime_checkable
class LabelVerifier(Protocol):
    """A second, independent check of pseudo-labels (D²Evo §1 step 3, optional).

    ``verify`` returns per record True (confirmed), False (rejected) or None (unknown).
    ``enforce``: whether the recipe drops rejected records (False = measure only).
    """

    enforce: bool

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]: ...


class NoVerifier:
    """The paper's default-off check: every label is 'unknown' and nothing is dropped."""

    enforce = False

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]:
        return [None] * len(records)


class OracleVerifier:
    """Compares pseudo-labels with the world's exact answer (toy world only).

    Measure-only by default (``enforce=False``): dropping by oracle would leak ground truth into
    a label-free method; it exists to report how often a perfect checker would disagree.
    """

    def __init__(self, oracle_fn: OracleFn, equiv_fn: EquivFn | None = None, enforce: bool = False):
        self.oracle_fn = oracle_fn
        self.equiv_fn = equiv_fn
        self.enforce = enforce

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]:
        equiv = self.equiv_fn if self.equiv_fn is not None else _default_equiv()
        out: list[bool | None] = []
        for r in records:
            gold = self.oracle_fn(r.question)
            out.append(None if gold is None or r.label is None else bool(equiv(gold, r.label)))
        return out


DEFAULT_JUDGE_TEMPLATE = (
    "Question: {question}\nProposed final answer: {answer}\n"
    "Is {answer} the correct final answer to the question above? Reply yes or no.\nReply:"
)


def parse_yes_no(text: str) -> bool | None:
    """First yes/no word in the reply; anything else is unknown.

    >>> parse_yes_no(" Yes, it is."), parse_yes_no("no"), parse_yes_no("maybe"), parse_yes_no("yes or no")
    (True, False, None, None)
    """
    words = re.findall(r"[a-z]+", text.lower())
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes == has_no:
        return None
    return has_yes


class JudgeVerifier:
    """Asks any ``Sampler`` (a stronger model, or the solver itself) whether the pseudo-label is
    the correct final answer; one batched greedy call per ``batch_prompts`` records.
    ``prompt_template`` must contain ``{question}`` and ``{answer}``. Garbage replies -> None."""

    def __init__(
        self,
        sampler: Sampler,
        prompt_template: str = DEFAULT_JUDGE_TEMPLATE,
        max_new_tokens: int = 8,
        batch_prompts: int = 64,
        enforce: bool = True,
    ):
        if "{question}" not in prompt_template or "{answer}" not in prompt_template:
            raise ConfigError("judge prompt_template must contain {question} and {answer}")
        self.sampler = sampler
        self.prompt_template = prompt_template
        self.max_new_tokens = max_new_tokens
        self.batch_prompts = batch_prompts
        self.enforce = enforce

    def verify(self, records: Sequence[VoteRecord]) -> list[bool | None]:
        idx = [i for i, r in enumerate(records) if r.label is not None]
        prompts = [self.prompt_template.format(question=records[i].question, answer=records[i].label) for i in idx]
        params = SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens)
        out: list[bool | None] = [None] * len(records)
        if prompts:
            groups = _sample_batched(self.sampler, prompts, 1, params, self.batch_prompts)
            for i, g in zip(idx, groups):
                out[i] = parse_yes_no(g[0].text)
        return out


def make_verifier(
    kind: Literal["none", "oracle", "judge"],
    *,
    oracle_fn: OracleFn | None = None,
    sampler: Sampler | None = None,
    prompt_template: str = DEFAULT_JUDGE_TEMPLATE,
    equiv_fn: EquivFn | None = None,
) -> LabelVerifier:
    """Config value -> verifier, with a clear error when its dependency is missing."""
    if kind == "none":
        return NoVerifier()
    if kind == "oracle":
        if oracle_fn is None:
            raise ConfigError("label_verifier=oracle needs a world with an oracle (the toy world)")
        return OracleVerifier(oracle_fn, equiv_fn)
    if kind == "judge":
        if sampler is None:
            raise ConfigError("label_verifier=judge needs a judge sampler")
        return JudgeVerifier(sampler, prompt_template)
    raise ConfigError(f"label_verifier must be 'none', 'oracle' or 'judge', got {kind!r}")


# --------------------------------------------------------------------------------------------
# buffer


def normalize_question(text: str) -> str:
    """Case- and whitespace-insensitive key used for deduplication.

    >>> normalize_question("  What is  2+2 ? ") == normalize_question("what is 2+2?")
    True
    """
    return re.sub(r"\s+", "", text.lower())


def dedupe(items: Sequence[T], against: Iterable[str] = (), key: Callable[[T], str] = str) -> list[T]:
    """Drop items whose normalised question equals one in ``against`` or an earlier item.

    >>> dedupe(["1+2=", "1 + 2=", "3+4=", "5+6="], against=["5+6="])
    ['1+2=', '3+4=']
    """
    seen = {normalize_question(a) for a in against}
    out = []
    for it in items:
        k = normalize_question(key(it))
        if k in seen:
            continue
        seen.add(k)
        out.append(it)
    return out


def build_hybrid_buffer(
    anchors: Sequence[PassRecord],
    generated: Sequence[VoteRecord],
    round_idx: int = 0,
    source: str = "",
) -> list[Task]:
    """D_hybrid = D_real^mid ∪ D_gen^mid as solver tasks.

    Anchors keep their real answer; generated questions carry their pseudo-label. Generated
    questions that duplicate an anchor or each other (normalised text) or have no label are
    dropped here too, so the buffer never double-weights a question.
    ``features["origin"]`` is ``"real"`` or ``"generated"`` so the solver phase and the metrics can
    tell them apart.
    """
    buf = [
        Task(a.task_id, a.question, a.answer, source=source or "anchor",
             features={**a.features, "origin": "real", "pass_rate": a.pass_rate})
        for a in anchors
    ]
    gen = dedupe([g for g in generated if g.label is not None], [a.question for a in anchors], key=lambda g: g.question)
    for i, g in enumerate(gen):
        buf.append(Task(g.id or f"gen-r{round_idx:02d}-{i:05d}", g.question, g.label, source="generated",
                        features={"origin": "generated", "p1": g.p1, "p2": g.p2}))
    return buf


def pseudo_label_accuracy(
    records: Sequence[VoteRecord], oracle_fn: OracleFn, equiv_fn: EquivFn | None = None
) -> float | None:
    """Share of labelled records whose pseudo-label equals the oracle answer; None when no record
    can be checked (no oracle answers, e.g. real data). Unlabelled records count as wrong."""
    equiv = equiv_fn if equiv_fn is not None else _default_equiv()
    hits = total = 0
    for r in records:
        gold = oracle_fn(r.question)
        if gold is None:
            continue
        total += 1
        hits += int(r.label is not None and bool(equiv(gold, r.label)))
    return hits / total if total else None
