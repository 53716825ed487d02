"""Answer equivalence, grading and majority voting (owner of the math-verify worker process).

Decision order for ``is_equiv(gold, pred)``:
1. cheap path (no subprocess): equal normalised strings -> True; two plain numbers -> exact /
   rounded comparison (``normalize.cheap_equiv``; decimals rounded exactly to ``FLOAT_ROUNDING``
   places); two bare comma lists (``3, 5``) -> element-wise *ordered* comparison when every
   element is decidable (PRM800K / Hendrycks / Qwen semantics; math-verify would treat a bare
   list as an unordered set);
2. the over-limit rule (``over_limit``): an answer longer than ``MAX_ANSWER_CHARS`` (300
   normalised characters), nested deeper than ``MAX_NESTING`` (10 brackets), or holding a power
   whose exponent is a plain integer or integer tower above ``MAX_EXPONENT`` (100,000, e.g.
   ``9^{9^{9}}``) is "not equal" (counted in ``stats.too_long``) -- equal strings were already
   accepted in step 1. A documented rule instead of a parser's guess or a timeout;
3. math-verify in the worker process on several renderings of the pair (as written wrapped in
   ``$..$``, normalised), under a hard wall-clock timeout; a timeout is "not equal" and counted.
   Parsing fails closed (``worker.verify_any``): an answer math-verify cannot parse has no value,
   instead of being read as a number inside it (the cause of a 1,000-term ``1+1+…+1`` graded
   equal to ``1``). Two numbers of which one is written with a decimal are decided exactly, by the
   rounding rule of step 1 (``worker._decimal_verdict``), not in 15-digit floating point.

``grade(gold, completion)`` applies this to the answer ``extract.extract_answer`` reads from the
completion (the box decides; without one, an answer statement or the final sentence): the solver
reward, the vote, evaluation and the verl reward all grade through it. ``grade_pair`` reads each
side the same way, unless the side is a bare answer (``extract.answer_or_whole``).

Never a false "equal": ``dev/grader_property.py`` grades >= 10,000 random non-equal pairs with
an exactly known relation (``answers/exprgen.py``), boxed and written as free text, and counts
false "equal" (must be 0) and the false-"not equal" rate.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

from coevolve.errors import DataError, GraderError
from coevolve.faults import fault_point
from coevolve.jsonl import iter_jsonl
from coevolve.types import Vote

from .extract import answer_or_whole, extract_answer
from .normalize import Canon, canon, cheap_equiv, matching_brace
from .worker import DEFAULT_VERIFY_FN, KILL_CHILD, WORKER_MEMORY_MB, wrap_latex


@dataclass
class GraderStats:
    """Counters for monitoring: how often the cheap path decided, and how often math-verify hung."""

    calls: int = 0  # is_equiv-level comparisons (including those inside vote)
    cheap_hits: int = 0  # decided without the worker
    worker_calls: int = 0  # requests sent to math-verify
    timeouts: int = 0  # requests killed at the wall-clock limit (counted as "not equal")
    errors: int = 0  # worker crashes / exceptions (counted as "not equal")
    restarts: int = 0  # worker children forked (or worker processes started) after the first
    memory: int = 0  # requests that ran past the worker's memory limit (counted as "not equal")
    too_long: int = 0  # comparisons with an answer over_limit (long/deep/huge): "not equal" unless equal as strings
    worker_seconds: float = 0.0  # wall time spent waiting for the worker

    def decided(self) -> dict[str, int]:
        """The counts of verdicts the grader, not the answer, decided -- all "not equal": requests
        killed at the timeout, worker crashes or errors, and answers refused by the over-limit
        rule -- with the comparisons and worker requests they are out of (run metrics, report)."""
        return {
            "timeouts": self.timeouts,
            "errors": self.errors,
            "refused": self.too_long,
            "memory": self.memory,
            "calls": self.calls,
            "worker_calls": self.worker_calls,
        }

    def replay(self, decided: dict[str, int]) -> None:
        """Add counts in ``decided``'s form (a cached evaluation's, counted again as its compute is,
        so a run's figures do not depend on whether another run filled the cache first)."""
        for key, value in decided.items():
            field = "too_long" if key == "refused" else key
            setattr(self, field, getattr(self, field) + int(value))


MAX_ANSWER_CHARS = 300
"""Answers longer than this (normalised) are equal only when their normalised strings are. Real
final answers are far shorter (the regression set's longest normalised answer is under 150
characters); a long one costs math-verify seconds, and past ~1,000 terms its LaTeX parser hits
Python's recursion limit. (That failure used to be read as the *first number* of the sum, so a
1,000-term ``1+1+…+1`` was graded equal to ``1``; the root cause, math-verify's fallback to another
regex match, is closed in ``worker.verify_any``; this limit bounds the cost.)"""

MAX_NESTING = 10
"""Answers whose brackets (``( [ {``) nest deeper than this are equal only as strings: parse time
grows steeply with depth (90 nested parentheses take seconds) while real answers nest at most
4 deep in the regression set."""

MAX_EXPONENT = 100_000
"""A power whose exponent is a plain integer, or a tower of them (``9^{9^{9}}``), above this value
makes the answer equal only as a string: sympy would try to build a number with hundreds of
millions of digits and the call would end at the timeout -- "not equal" by chance instead of by
rule. (``2^{100000}`` still goes to math-verify: about a second.)"""

_POWER_RE = re.compile(r"\^\s*(\{|\d+|.)")
_INT_TOWER_RE = re.compile(r"(\d+)\s*\^\s*(?:\{(.*)\}|(\d))")


def _int_exponent(s: str) -> float | None:
    """Value of ``s`` when it is a plain integer or a tower of them (``9^{9^9}``), capped: any value
    above ``MAX_EXPONENT`` comes back as ``inf`` without being computed. None when not such a tower."""
    s = s.strip()
    while len(s) >= 2 and s[0] == "{" and s[-1] == "}":
        s = s[1:-1].strip()
    if s.isdigit():
        return float(int(s)) if len(s) <= 7 else float("inf")
    m = _INT_TOWER_RE.fullmatch(s)
    if m is None:
        return None
    base = int(m.group(1)) if len(m.group(1)) <= 7 else 10**7
    exp = _int_exponent(m.group(2) if m.group(2) is not None else m.group(3))
    if exp is None:
        return None
    if base <= 1:
        return float(base)
    if exp > 64 or base**exp > MAX_EXPONENT:  # float exp: no huge int is ever built
        return float("inf")
    return float(base ** int(exp))


def _brace_group(s: str, open_idx: int) -> str | None:
    """Text inside the ``{`` at ``open_idx`` and its matching ``}`` (None when unbalanced)."""
    close = matching_brace(s, open_idx)
    return None if close is None else s[open_idx + 1 : close]


def _nesting(s: str) -> int:
    """Deepest bracket nesting of ``s`` (unbalanced closers are ignored)."""
    depth = deepest = 0
    for c in s:
        if c in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}" and depth > 0:
            depth -= 1
    return deepest


def over_limit(text: str) -> str | None:
    """Why a normalised answer is too costly for math-verify ("long", "deep", "huge"), else None.

    Such an answer is equal to another only when the two normalised strings are equal (see
    ``MAX_ANSWER_CHARS``, ``MAX_NESTING``, ``MAX_EXPONENT``): a documented "not equal", never a
    guess and never a timeout.
    """
    if len(text) > MAX_ANSWER_CHARS:
        return "long"
    if _nesting(text) > MAX_NESTING:
        return "deep"
    for m in _POWER_RE.finditer(text):
        arg = _brace_group(text, m.start(1)) if m.group(1) == "{" else m.group(1)
        exp = _int_exponent(arg) if arg is not None else None
        if exp is not None and exp > MAX_EXPONENT:
            return "huge"
    return None


_PROSE_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}\s+[a-zA-Z]{2,}|\$|\\\(|\\\[")


def _is_prose(s: str) -> bool:
    """True for text with delimiters or two consecutive words: normalising it would mangle it."""
    return bool(_PROSE_RE.search(s))


def _split_top_commas(s: str) -> list[str] | None:
    """Split a bare list ``a,b,c`` at depth-0 commas; None when not a bare list."""
    if not s or s[0] in "([{" or "\\{" in s[:2]:
        return None
    parts: list[str] = []
    depth = 0
    cur = []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    if len(parts) < 2 or any(p == "" for p in parts):
        return None
    return parts


def _ordered_list_equiv(a: Canon, b: Canon) -> bool | None:
    """Element-wise ordered comparison of two bare lists of plain numbers (None if undecidable)."""
    if "=" in a.text or "=" in b.text:  # "x = 1, 2" / "a=1, b=2": solution sets, order-free
        return None
    pa, pb = _split_top_commas(a.text), _split_top_commas(b.text)
    if pa is None or pb is None or len(pa) != len(pb):
        return None
    verdicts = [cheap_equiv(canon(x), canon(y)) for x, y in zip(pa, pb)]
    if any(v is None for v in verdicts):
        return None
    return all(verdicts)


_PRIMED_RE = re.compile(r"[A-Za-z]'+")  # normalised: A^{\prime} and A’ are A'


def _primes(text: str) -> list[str]:
    """The primed letters of a normalised answer (``E'`` -> ``["E'"]``), in order."""
    return _PRIMED_RE.findall(text)


def shape_mismatch(a: Canon, b: Canon) -> bool:
    """True when two answers that are not equal as strings differ in kind, whatever their values:
    different primed symbols (``E`` and ``E'``: math-verify drops the prime), or a bare list against
    a single value (``1,1`` and ``1``: math-verify reads the list as the set ``{1}``). Decided
    "not equal" before math-verify: a false "equal" rewards a wrong answer."""
    if _primes(a.text) != _primes(b.text):
        return True
    if "=" in a.text + b.text:
        return False
    return any(_split_top_commas(x.text) is not None and _single(y.text) for x, y in ((a, b), (b, a)))


_SEVERAL_RE = re.compile(r"[,;]|\\pm|\\mp|±|∓|(?<![a-zA-Z])(?:and|or)(?![a-zA-Z])|\d(?:and|or)\d")


def _single(text: str) -> bool:
    """True when a normalised answer states one value: no list separator, no "and" / "or", no ±."""
    return _SEVERAL_RE.search(text) is None


class Grader:
    """Owns one math-verify worker process; thread-safe; replaces the worker's child after a timeout
    (a fork, ``worker.serve_forked``) and the whole worker when it stops answering.

    ``timeout`` is the default wall-clock budget per math-verify request; ``verify_fn`` is the
    ``"module:function"`` the worker runs (tests inject a hanging one); ``start_timeout`` bounds
    worker start-up (sympy import), which is not charged to the per-call budget; ``memory_mb`` is
    the worker's address-space limit (``worker.WORKER_MEMORY_MB``; 0: none).
    """

    def __init__(
        self,
        timeout: float = 5.0,
        verify_fn: str = DEFAULT_VERIFY_FN,
        start_timeout: float = 120.0,
        ordered_bare_lists: bool = True,
        memory_mb: int = WORKER_MEMORY_MB,
    ) -> None:
        if timeout <= 0:
            raise GraderError(f"Grader timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.verify_fn = verify_fn
        self.start_timeout = start_timeout
        self.ordered_bare_lists = ordered_bare_lists
        self.memory_mb = memory_mb
        self.stats = GraderStats()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None
        self._started = 0
        self._ready = False  # the worker's current child has said "ready"
        self._number = 0  # of the last request, echoed in its reply

    # ------------------------------------------------------------------ worker management
    def _start(self) -> None:
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        env = dict(os.environ)
        # The child must import exactly what we import (src layout, tests' fake verify_fns).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        cmd = [
            sys.executable,
            "-c",
            "from coevolve.answers.worker import main; main()",
            str(p2c_r),
            str(c2p_w),
            self.verify_fn,
            str(self.memory_mb),
        ]
        try:
            proc = subprocess.Popen(cmd, pass_fds=(p2c_r, c2p_w), env=env, stdin=subprocess.DEVNULL)
        finally:
            os.close(p2c_r)
            os.close(c2p_w)
        self._proc = proc
        self._send = Connection(p2c_w, readable=False)
        self._recv = Connection(c2p_r, writable=False)
        if self._started:
            self.stats.restarts += 1
        self._started += 1
        if not self._await_ready(self.start_timeout):
            self._kill()
            raise GraderError(
                f"math-verify worker did not start within {self.start_timeout:.0f}s "
                f"(verify_fn={self.verify_fn!r}, python={sys.executable})"
            )

    def _await_ready(self, timeout: float) -> bool:
        """Wait for the worker's next child to say it is ready, dropping replies of a child that
        was killed after writing them; False when none comes (the worker is gone or stuck)."""
        deadline = time.monotonic() + timeout
        assert self._recv is not None
        try:
            while self._recv.poll(max(0.0, deadline - time.monotonic())):
                if self._recv.recv()[1] == "ready":
                    self._ready = True
                    return True
        except (EOFError, OSError):
            pass
        return False

    def _replace_child(self, kill: bool) -> None:
        """The worker's child ended its service (or is killed now, ``kill``): the fork server
        forks a fresh one, which the next request waits for."""
        self._ready = False
        self.stats.restarts += 1
        if kill and self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(KILL_CHILD)

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(KILL_CHILD)  # its child dies with it too (PR_SET_PDEATHSIG)
        for conn in (self._send, self._recv):
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
        self._proc = self._send = self._recv = None
        self._ready = False

    def _request(self, args: tuple[Any, ...], timeout: float) -> Any:
        """One worker call; returns None on timeout/crash (the child killed, a fresh one forked)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                self._start()
            elif not self._ready and not self._await_ready(self.start_timeout):
                self._kill()
                self._start()
            assert self._send is not None and self._recv is not None
            self.stats.worker_calls += 1
            self._number += 1
            t0 = time.perf_counter()
            try:
                self._send.send((self._number, args, {}))
                while True:
                    if not self._recv.poll(max(0.0, timeout - (time.perf_counter() - t0))):
                        self.stats.timeouts += 1
                        self._replace_child(kill=True)
                        return None
                    number, status, value = self._recv.recv()
                    if status == "ready":  # the child died on this request (a crash): its successor is up
                        self.stats.errors += 1
                        self.stats.restarts += 1
                        return None
                    if number == self._number:
                        break
            except (EOFError, OSError, BrokenPipeError):
                self.stats.errors += 1
                self._kill()
                return None
            finally:
                self.stats.worker_seconds += time.perf_counter() - t0
            if status == "memory":  # a fresh child gives the next request the whole limit again
                self.stats.memory += 1
                self._replace_child(kill=False)
                return None
            if status != "ok":
                self.stats.errors += 1
                return None
            return value

    def close(self) -> None:
        """Stop the worker process (a later call starts a fresh one)."""
        with self._lock:
            if self._send is not None and self._proc is not None and self._proc.poll() is None:
                try:
                    self._send.send(None)
                    self._proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill()

    def __enter__(self) -> Grader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: do not leak a child when the owner forgets close()
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ equivalence
    def _cheap(self, a: Canon, b: Canon) -> bool | None:
        verdict = cheap_equiv(a, b)
        if verdict is None and shape_mismatch(a, b):
            return False
        if verdict is None and self.ordered_bare_lists:
            verdict = _ordered_list_equiv(a, b)
        return verdict

    def _mv_pairs(self, gold: str, pred: str, a: Canon, b: Canon) -> list[tuple[str, str]]:
        """Renderings tried by math-verify: wrapped as written, normalised (bare answers only: on a
        sentence the space-free normal form glues words to numbers), and raw (plain-expression
        extractor; reads "1000,99" as a decimal comma)."""
        gold, pred = gold.strip(), pred.strip()
        pairs = [(wrap_latex(gold), wrap_latex(pred))]
        norm = (wrap_latex(a.text), wrap_latex(b.text))
        if a.text and b.text and not _is_prose(gold) and not _is_prose(pred) and norm not in pairs:
            pairs.append(norm)
        return pairs

    def _equiv(
        self,
        gold: str,
        pred: str,
        timeout: float | None,
        both_directions: bool,
        a: Canon | None = None,
        b: Canon | None = None,
    ) -> bool:
        """The decision order of the module docstring, on two answers (``a``/``b``: their canon
        forms when the caller has them)."""
        self.stats.calls += 1
        fault_point("grade")
        a = canon(gold) if a is None else a
        b = canon(pred) if b is None else b
        verdict = self._cheap(a, b)
        if verdict is not None:
            self.stats.cheap_hits += 1
            return verdict
        if over_limit(a.text) or over_limit(b.text):
            self.stats.too_long += 1
            return False
        pairs = self._mv_pairs(gold, pred, a, b)
        return bool(self._request((pairs, both_directions), self.timeout if timeout is None else timeout))

    def is_equiv(self, gold: str | None, pred: str | None, timeout: float | None = None) -> bool:
        """True when ``pred`` is mathematically equal to ``gold`` (gold first: math-verify is asymmetric)."""
        if gold is None or pred is None or not gold.strip() or not pred.strip():
            return False
        return self._equiv(gold, pred, timeout, both_directions=False)

    def grade(self, gold: str, completion: str, timeout: float | None = None) -> bool:
        """Extract the final answer of ``completion`` and compare it with ``gold``."""
        return self.is_equiv(gold, extract_answer(completion), timeout)

    def grade_batch(self, golds: Sequence[str], completions: Sequence[str], timeout: float | None = None) -> list[bool]:
        """``grade`` over aligned lists (one worker: in order; a pool can spread the work)."""
        if len(golds) != len(completions):
            raise GraderError(f"grade_batch: {len(golds)} golds but {len(completions)} completions")
        return [self.grade(g, c, timeout) for g, c in zip(golds, completions)]

    def grade_pair(self, gold: str, pred: str, timeout: float | None = None) -> bool:
        """Compare two strings that may each be a whole model output or a bare answer.

        Each side is read once by ``extract.answer_or_whole``: its last box when it has one, the
        whole string when it is a bare answer (``x = 3``, ``\\$5``), else the free-text reading
        that rewards and votes use (``extract_answer``). A side that states no answer is "not
        equal"; two answers are compared by ``is_equiv``.
        """
        if not gold.strip() or not pred.strip():
            return False
        return self.is_equiv(answer_or_whole(gold), answer_or_whole(pred), timeout)

    # ------------------------------------------------------------------ voting
    def vote(self, answers: list[str | None], timeout: float | None = None) -> Vote:
        """Cluster equivalent answers; the largest cluster's first-seen answer is the label.

        Two answers share a cluster when their normalised strings match, their numeric values are
        equal, or math-verify finds them equal in either direction (compared against each
        cluster's representative, clusters in first-seen order). None/empty answers are counted
        in ``n`` with cluster -1. Ties between cluster sizes go to the first-seen cluster.
        """
        n = len(answers)
        reps: list[tuple[str, Canon]] = []
        members: list[list[int]] = []
        by_text: dict[str, int] = {}
        raw_of: list[int] = [-1] * n
        for i, ans in enumerate(answers):
            if ans is None or not ans.strip():
                continue
            c = canon(ans)
            cid = by_text.get(c.text)
            if cid is None:
                for k, (rep, rc) in enumerate(reps):
                    verdict = self._cheap(rc, c)
                    if verdict is None and rc.value is not None and c.value is not None:
                        verdict = False
                    if verdict is None:
                        verdict = self._equiv(rep, ans, timeout, both_directions=True, a=rc, b=c)
                    else:
                        self.stats.calls += 1
                        self.stats.cheap_hits += 1
                    if verdict:
                        cid = k
                        break
                if cid is None:
                    cid = len(reps)
                    reps.append((ans, c))
                    members.append([])
                by_text[c.text] = cid
            members[cid].append(i)
            raw_of[i] = cid
        order = sorted(range(len(reps)), key=lambda k: (-len(members[k]), k))
        rank = {k: r for r, k in enumerate(order)}
        sizes = [len(members[k]) for k in order]
        cluster_of = [rank[c] if c >= 0 else -1 for c in raw_of]
        if not sizes or n == 0:
            return Vote(label=None, p1=0.0, p2=0.0, n=n, cluster_of=cluster_of, sizes=[])
        label = reps[order[0]][0].strip()
        p2 = sizes[1] / n if len(sizes) > 1 else 0.0
        return Vote(label=label, p1=sizes[0] / n, p2=p2, n=n, cluster_of=cluster_of, sizes=sizes)

    def vote_batch(self, groups: Sequence[list[str | None]], timeout: float | None = None) -> list[Vote]:
        """``vote`` over many answer groups."""
        return [self.vote(list(g), timeout) for g in groups]

    # ------------------------------------------------------------------ files
    def grade_jsonl(
        self,
        path: str | Path,
        out: TextIO | Path | None = None,
        on_error: Literal["raise", "skip"] = "raise",
        timeout: float | None = None,
    ) -> tuple[int, int]:
        """Grade ``{"gold": ..., "pred": ...}`` lines; write each back with ``"equal"`` added.

        ``out``: a text stream, a file path, or None for stdout. The file may be gzip
        (``.jsonl.gz``). Bad lines (not UTF-8, not JSON, not an object, missing/non-string
        ``gold``/``pred``) raise ``DataError`` naming file and line, or with ``on_error="skip"``
        are reported on stderr and skipped. Returns (n_equal, n_graded).
        """
        path = Path(path)
        _check_grade_paths(path, out, on_error)
        n_equal = n_total = 0
        problems: list[str] = []  # lines iter_jsonl skipped, reported in order
        with contextlib.ExitStack() as files:
            stream: TextIO = (
                files.enter_context(out.open("w", encoding="utf-8"))
                if isinstance(out, Path)
                else (sys.stdout if out is None else out)
            )
            for lineno, obj in iter_jsonl(path, on_error=on_error, problems=problems):
                _report_skipped(problems)
                try:
                    row = _check_grade_row(obj)
                except ValueError as exc:
                    if on_error == "raise":
                        raise DataError(f"{path}:{lineno}: {exc}") from None
                    _report_skipped([f"{path}:{lineno}: {exc}"])
                    continue
                row["equal"] = equal = self.grade_pair(row["gold"], row["pred"], timeout)
                stream.write(json.dumps(row, ensure_ascii=False) + "\n")
                n_equal += int(equal)
                n_total += 1
            _report_skipped(problems)
        return n_equal, n_total


def _check_grade_paths(path: Path, out: TextIO | Path | None, on_error: str) -> None:
    """Refuse what ``grade_jsonl`` cannot serve before any file is opened for writing."""
    if on_error not in ("raise", "skip"):
        raise GraderError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not path.is_file():
        raise DataError(
            f"{path}: cannot read grading file (no such file)"
            if not path.exists()
            else f"{path}: cannot read grading file (a folder, not a JSONL file)"
        )
    if isinstance(out, Path) and out.exists() and os.path.samefile(out, path):
        raise DataError(f"--out {out} is the --jsonl file itself: writing it would empty it before it is read")


def _report_skipped(problems: list[str]) -> None:
    for msg in problems:
        print(f"skipping {msg}", file=sys.stderr)
    problems.clear()


def _check_grade_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with numeric gold/pred turned into strings; ValueError naming the bad field."""
    for key in ("gold", "pred"):
        if key not in row:
            raise ValueError(f"missing field {key!r}")
        if isinstance(row[key], (int, float)) and not isinstance(row[key], bool):
            row[key] = str(row[key])
        if not isinstance(row[key], str):
            raise ValueError(f"field {key!r} must be a string, got {type(row[key]).__name__}")
    return row
