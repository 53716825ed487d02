"""Project exceptions. Every user-facing failure is a ``CoevolveError`` whose message names the
problem (file, line, field); the CLI prints it without a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CoevolveError(Exception):
    """Base class: a clear, user-facing error."""


class ConfigError(CoevolveError):
    """Malformed config: unknown key, wrong type, out-of-range value."""


class DataError(CoevolveError):
    """Broken dataset rows or unreadable data files."""


class ModelLoadError(CoevolveError):
    """A model path that is missing or not a loadable Hugging Face folder."""


class GraderError(CoevolveError):
    """The answer grader failed in a way that is not a plain 'not equal'."""


class RunStateError(CoevolveError):
    """A run folder that cannot be resumed (missing or inconsistent state)."""


def clip(text: str, limit: int = 80) -> str:
    """``text`` cut to about ``limit`` characters with its full length said, so a message that
    quotes a user's value stays one readable line however long the value is."""
    return text if len(text) <= limit else f"{text[: limit - 25]}... ({len(text):,} characters)"


def unparsable(e: ValueError | RecursionError) -> str:
    """Why a JSON or YAML parser gave up with an error of Python's own rather than its format's:
    an integer over Python's digit limit (``sys.get_int_max_str_digits``) or nesting past the
    recursion limit."""
    if isinstance(e, RecursionError):
        return "nested too deeply (past Python's recursion limit)"
    if "integer string conversion" in str(e):
        return "an integer of more than 4300 digits (Python's limit for reading one)"
    return clip(str(e), 120)


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean 'solver.steps'?)`` for the closest of ``known`` to a mistyped ``word``
    (difflib's ratio >= 0.6, its default), ``prefix`` put before it, else ''; appended to the
    message that names the unknown name."""
    close = difflib.get_close_matches(word, [str(k) for k in known], n=1)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""
