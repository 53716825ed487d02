"""math-verify running in a persistent child process.

Why a process: math-verify's own timeouts use ``signal.alarm`` (main thread only) and sympy can
loop for minutes on adversarial LaTeX (R-Zero / EasyR1 report hung runs). The parent talks to
one child over a pipe and kills it when a call exceeds its wall-clock budget, so no input can
hang or crash the trainer, and it works from any thread.

The worker is a fork server: the process the parent starts imports math-verify once and serves
through a forked child; when that child ends other than by shutdown (killed at the parent's
timeout, over the memory limit, crashed), the server forks a fresh one at once, while the parent
goes on. Why: a new interpreter re-imports sympy (0.5-1 s of CPU per straggler, on the cores the
batch needs); a fork costs milliseconds. Messages carry the request's number, so a reply written
just before its child was killed is never taken for the next request's.

The child runs ``verify_fn`` (a ``"module:function"`` path, resolved in the worker) on each
request. The default is ``verify_any`` below; tests inject a function that never returns.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import os
import resource
import signal
from collections.abc import Callable, Sequence
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

from coevolve.faults import fault_point

from .normalize import FLOAT_ROUNDING

DEFAULT_VERIFY_FN = "coevolve.answers.worker:verify_any"
WORKER_MEMORY_MB = 512
"""Address-space limit of a worker process (ours): sympy expands ``(x+1)^{99999}``, a 25-character
answer, to ~580 MB until the timeout, and a pool multiplies that by its workers. A request past the
limit is "not equal" and counted (``GraderStats.memory``), and ends in about a second instead of at
the timeout. The worker itself takes ~70 MB; every case of the regression sets stays under it."""
_DELIMS = ("$", "\\(", "\\[", "\\boxed", "\\fbox")


def wrap_latex(s: str) -> str:
    """Put ``$...$`` around a bare answer so math-verify's LaTeX extractor sees it.

    math-verify only extracts LaTeX inside delimiters (or boxes); a bare ``\\frac34i`` would
    otherwise fall through to the plain-expression parser and fail.
    """
    if any(d in s for d in _DELIMS):
        return s
    return "$" + s + "$"


def verify_any(pairs: Sequence[tuple[str, str]], both_directions: bool) -> bool:
    """True when math-verify finds any (gold, pred) candidate pair equal.

    Candidates are alternative renderings of the same two answers (as written wrapped in ``$..$``,
    normalised, full text), tried in order. ``both_directions`` also tries verify(pred, gold)
    (used by the vote: math-verify is asymmetric). The extraction config is the one of
    math-verify's own test suite (boxed answers first).

    Parsing fails closed (``extraction_mode="first_match"``): when the match math-verify tries
    first (the last box or final-answer anchor, else the last ``$..$`` / number) does not parse,
    that side has no value. Its default ``"any_match"`` falls back to the next regex match instead,
    which for an unparseable answer is a *number inside it*: ``$1+1+…+1$`` with 1,000 terms (a
    RecursionError in the LaTeX parser) became ``1``, ``$7+1+…+1$`` became ``7``, ``$3+\\foo{2}$``
    and ``$3+$`` became ``3`` -- each graded equal to that number, a reward wrong in the model's
    favour.
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    for gold, pred in pairs:
        try:
            g = parse(gold, extraction_config=cfg, extraction_mode="first_match")
            p = parse(pred, extraction_config=cfg, extraction_mode="first_match")
            if not g or not p:
                continue
            exact = _decimal_verdict(g[0], p[0], "%" in gold, "%" in pred)
            if exact is not None:
                if exact:
                    return True
                continue
            if _differ_at_points(g[0], p[0]):
                continue
            if verify(g, p):
                return True
            if both_directions and verify(p, g):
                return True
        except MemoryError:
            raise  # over the worker's memory limit: reported to the parent, which counts it
        except Exception:  # noqa: BLE001 - a parse/verify failure means "not shown equal"
            continue
    return False


PROBE_POINTS = ("0.3719", "0.5813", "0.8347")
"""Where ``_differ_at_points`` evaluates two expressions in their variables (ours): fixed, so a
verdict is reproducible; positive and below 1, away from the branch cuts of roots and logarithms."""
PROBE_DIGITS = 60
PROBE_TOLERANCE = 1e-9


def _differ_at_points(a: Any, b: Any) -> bool:
    """True when two expressions take clearly different values at every probe point (each
    variable of either side set to the point): they are not the same function, so the pair is
    "not equal" without sympy's algebra.

    Why: proving that two polynomials differ is what costs math-verify most -- ``(x+1)^{100}``
    against ``(x+1)^{99}`` takes 0.6 s, ``(x+1)^{300}`` 3 s, ``(x+1)^{99999}`` runs to the worker's
    memory limit -- while equal functions agree at every point (a difference at one point is a
    proof of inequality; Schwartz-Zippel). Only ever says "differ": when the values agree at any
    point, are not finite numbers, or a side is not a plain expression (equations, sets,
    intervals, matrices) or neither has a variable, math-verify decides as before. (Sides in
    different variables that differ on the diagonal x = y differ as functions too.) Values are computed to
    ``PROBE_DIGITS`` digits (sympy's adaptive ``evalf``) and differ when
    ``|a - b| > PROBE_TOLERANCE * max(1, |a|, |b|)``.
    """
    import sympy

    try:
        if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)) or a.is_Matrix or b.is_Matrix:
            return False
        if not (a.free_symbols or b.free_symbols):
            return False  # two numbers: the cheap path and math-verify's numeric comparison decide
        for point in PROBE_POINTS:
            value = sympy.Rational(point)
            va = a.evalf(PROBE_DIGITS, subs=dict.fromkeys(a.free_symbols, value))
            vb = b.evalf(PROBE_DIGITS, subs=dict.fromkeys(b.free_symbols, value))
            if not all(v.is_number and v.is_finite for v in (va, vb)):
                return False
            gap, scale = abs(va - vb).evalf(PROBE_DIGITS), max(sympy.Integer(1), abs(va), abs(vb))
            if not bool(gap > PROBE_TOLERANCE * scale):  # sympy numbers: no float overflow at 1e13732
                return False
        return True
    except Exception:  # noqa: BLE001 - no numeric reading: math-verify decides
        return False


def _exact(expr: Any) -> Any:
    """``expr`` with every ``Float`` replaced by the decimal it was written as (``Float('49.52')``
    -> 1238/25), then evaluated (math-verify keeps ``a \\times b`` unevaluated)."""
    import sympy

    return expr.xreplace({f: sympy.Rational(str(f)) for f in expr.atoms(sympy.Float)}).doit()


def _decimal_verdict(a: Any, b: Any, a_percent: bool = False, b_percent: bool = False) -> bool | None:
    """Exact verdict on two numbers when either is written with a decimal; None = not such a pair.

    math-verify compares a decimal (a sympy ``Float``) with about 15 significant digits, so
    ``(2190.5^2 \\cdot 3339)^3`` (4.1e30) was graded equal to a fraction 1/2 away from it, while
    ``97 \\times 0.474`` was graded unequal to ``\\frac{22989}{500}``, its exact value. When a side
    holds a ``Float`` and both are rational numbers once each decimal is read exactly as written,
    the verdict is the cheap path's rule: equal after rounding to ``FLOAT_ROUNDING`` places,
    directly or, when exactly one side is written with a percent sign, as its x100 reading (as
    math-verify and ``cheap_equiv`` accept ``10\\%`` = 0.1 = 10; without the sign 0.1 is not 10).
    """
    import sympy

    try:
        if not (isinstance(a, sympy.Basic) and isinstance(b, sympy.Basic)) or not (
            a.has(sympy.Float) or b.has(sympy.Float)
        ):
            return None
        ra, rb = _exact(a), _exact(b)
        if not (ra.is_Rational and rb.is_Rational):
            return None
        fa, fb = Fraction(int(ra.p), int(ra.q)), Fraction(int(rb.p), int(rb.q))
    except Exception:  # noqa: BLE001 - no exact reading: math-verify decides
        return None
    readings = [(fa, fb)]
    if a_percent != b_percent:  # "10\\%" also reads as 10 -- only where a percent sign is written
        readings.append((fa * 100, fb) if a_percent else (fa, fb * 100))
    return any(round(x, FLOAT_ROUNDING) == round(y, FLOAT_ROUNDING) for x, y in readings)


def resolve(path: str) -> Callable[..., Any]:
    """Import ``"package.module:function"``."""
    mod, _, name = path.partition(":")
    if not mod or not name:
        raise ValueError(f"verify_fn must look like 'module:function', got {path!r}")
    return getattr(importlib.import_module(mod), name)


def main(argv: Sequence[str] | None = None) -> None:
    """Worker entry point: ``python -c '...main()' <read_fd> <write_fd> <verify_fn> [<memory MB>]``
    (a memory limit of 0: none).

    Runs under ``subprocess`` rather than ``multiprocessing`` so the worker never re-imports the
    parent's ``__main__`` (scripts without a main guard, pytest, notebooks all work).
    """
    import logging
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)
    r_fd, w_fd, verify_fn = int(args[0]), int(args[1]), args[2]
    limit = (int(args[3]) if len(args) > 3 else WORKER_MEMORY_MB) * 2**20
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    fn = resolve(verify_fn)
    if verify_fn == DEFAULT_VERIFY_FN:
        import math_verify  # noqa: F401  (imported once, before any child is forked)
    with Connection(r_fd, writable=False) as rconn, Connection(w_fd, readable=False) as wconn:
        serve_forked(rconn, wconn, fn, limit)
    # the child that served ran the exit handlers; the server's would overwrite its fault counts
    # (run.faults names the file by the pid the server had when it armed them)
    os._exit(0)


KILL_CHILD = signal.SIGUSR1
"""The signal the parent sends the fork server to kill its current child (the server's own child,
so the parent never signals a pid that may have been reused)."""
_SHUTDOWN, _REPLACE = 0, 3  # a child's exit codes: the parent said stop / a fresh child is needed


def serve_forked(rconn: Connection, wconn: Connection, fn: Callable[..., Any], memory_limit: int = 0) -> None:
    """Fork a child that ``serve_split`` s; fork a fresh one whenever a child ends other than by
    shutdown; return when one shuts down (the parent sent ``None`` or closed its end)."""
    child = 0

    def kill_child(_signum: int, _frame: object) -> None:
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass

    signal.signal(KILL_CHILD, kill_child)
    while True:
        pid = os.fork()
        if pid == 0:
            signal.signal(KILL_CHILD, signal.SIG_DFL)
            _die_with_parent()
            code = _REPLACE
            try:
                code = serve_split(rconn, wconn, fn, memory_limit)
            finally:
                if code == _SHUTDOWN:
                    atexit._run_exitfuncs()  # fault counting (run.faults) writes its file at exit
                os._exit(code)
        child = pid
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                status = 0
                break
        child = 0
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _SHUTDOWN:
            return


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when the fork server dies (the parent kills the server on
    close or when it stops answering; a child busy on a straggler must not outlive it)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def peak_memory() -> int | None:
    """The process's peak address-space size in bytes (``VmPeak``; None where /proc has none)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


_LIMIT_SLACK = 16 * 2**20  # a peak this close to the limit means an allocation hit it


def serve_split(rconn: Connection, wconn: Connection, fn: Callable[..., Any], memory_limit: int = 0) -> int:
    """Serve requests ``(number, args, kwargs)`` with replies ``(number, status, value)`` over two
    one-way connections (the parent holds the other ends), after ``(0, "ready", pid)``; return the
    exit code for the fork server: ``_SHUTDOWN`` when the parent stops, ``_REPLACE`` after a request
    that hit the memory limit (a fresh child gets the whole limit again).

    A request that hit ``memory_limit`` (bytes; 0: none) answers ``"memory"``: either its
    MemoryError reached here, or math-verify caught it inside (it catches every exception) and the
    process's peak address space reached the limit during the request."""
    wconn.send((0, "ready", os.getpid()))
    while True:
        try:
            msg = rconn.recv()
        except (EOFError, OSError):
            return _SHUTDOWN
        if msg is None:
            return _SHUTDOWN
        number, args, kwargs = msg
        fault_point("worker")
        peak0 = peak_memory() if memory_limit else None
        try:
            value = fn(*args, **kwargs)
            peak = peak_memory() if peak0 is not None else None
            hit = peak is not None and peak > peak0 and peak >= memory_limit - _LIMIT_SLACK  # type: ignore[operator]
            if hit:
                wconn.send((number, "memory", None))
                return _REPLACE
            wconn.send((number, "ok", value))
        except MemoryError:
            wconn.send((number, "memory", None))
            return _REPLACE
        except Exception as exc:  # noqa: BLE001 - reported to the parent as an error
            wconn.send((number, "err", f"{type(exc).__name__}: {exc}"))
