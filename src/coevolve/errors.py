"""Project exceptions. Every user-facing failure is a ``CoevolveError`` whose message names the
problem (file, line, field); the CLI prints it without a traceback."""

from __future__ import annotations


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
