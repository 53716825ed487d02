"""A model served behind an OpenAI-compatible API (``vllm serve``, SGLang, TGI ...) as a ``Sampler``:
``POST {url}/completions`` with the prompt text coevolve renders, so a served model is asked
exactly what a local one is (the same prompts, stops and grader).

Two users: ``coevolve eval --endpoint URL --served-model NAME`` (a model evaluated where it is
served) and ``backend=verl``'s writer rewards (``backend.verl.solver_url``: the frozen solver of
R-Zero's setup). The answers come back as text only (no token ids), which is all either needs.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coevolve.errors import CoevolveError
from coevolve.types import Completion, SamplingParams


class SolverServerError(CoevolveError):
    """The model's server failed, cannot be reached, or serves another model."""


MAX_BODY = 64 * 2**20
"""Ours: the largest response read from a server (64 MiB, far above any batch of completions),
so a broken or hostile server cannot fill the memory."""

_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")


def redacted(url: str) -> str:
    """``url`` with any ``user:password@`` replaced, for messages and files."""
    return _CREDENTIALS.sub("***@", url)


VERL_HINT = "backend.verl.solver_url; is `vllm serve` running and reachable from the reward workers?"
"""What a failed request says to do, for the frozen solver of ``backend=verl``."""


def _request(
    url: str,
    body: dict[str, Any] | None,
    timeout: float,
    retries: int,
    what: str = "frozen solver server",
    hint: str = VERL_HINT,
) -> dict[str, Any]:
    """GET (``body`` None) or POST JSON, with ``retries`` retries on connection errors and 5xx."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    last = ""
    for attempt in range(retries + 1):
        req = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="GET" if body is None else "POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read(MAX_BODY + 1)
            if len(raw) > MAX_BODY:
                last = f"the response is over {MAX_BODY // 2**20} MiB"
                break
            return json.loads(raw.decode("utf-8"))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}: {e.read()[:300].decode('utf-8', 'replace')}"
            if e.code < 500:
                break
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            last = str(getattr(e, "reason", e))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            last = f"not JSON ({getattr(e, 'msg', e)})"
            break
        if attempt < retries:
            time.sleep(min(2.0**attempt, 10.0))
    raise SolverServerError(f"{what} {redacted(url)}: {redacted(last)} ({hint})")


def served_models(
    url: str, timeout: float = 30.0, retries: int = 1, what: str = "frozen solver server", hint: str = VERL_HINT
) -> list[str]:
    """The model names ``GET {url}/models`` lists."""
    got = _request(url.rstrip("/") + "/models", None, timeout, retries, what, hint)
    return [str(m.get("id")) for m in got.get("data", []) if isinstance(m, dict)]


def check_served_model(
    url: str,
    model: str | None,
    timeout: float = 30.0,
    retries: int = 1,
    what: str = "frozen solver server",
    field: str = "backend.verl.solver_model",
    hint: str = VERL_HINT,
) -> str:
    """The served model name, checked against ``field`` (``model``): the server must serve the
    model meant (nothing here can tell which weights it holds); None = the first one it lists."""
    names = served_models(url, timeout, retries, what, hint)
    if not names:
        raise SolverServerError(f"{what} {redacted(url)}/models lists no model")
    if model is None:
        return names[0]
    if model not in names:
        raise SolverServerError(
            f"{what} {redacted(url)} serves {names}, not {field}={model!r}: serve the model under that name"
        )
    return model


class RemoteSolver:
    """A ``Sampler`` over ``POST {url}/completions`` (model, prompt, n, temperature, top_p,
    max_tokens, seed, stop strings, and vLLM's ``stop_token_ids`` when the prompts end turns with
    special tokens). Prompt i of a call is seeded ``seed + i``; ``workers`` requests are in flight
    at once (the results keep the prompts' order)."""

    tokenizer: Any = None

    def __init__(
        self,
        url: str,
        model: str,
        timeout: float = 300.0,
        retries: int = 3,
        workers: int = 1,
        what: str = "frozen solver server",
        hint: str = VERL_HINT,
    ):
        self.url, self.model, self.timeout, self.retries = url.rstrip("/"), model, timeout, retries
        self.workers, self.what, self.hint = max(1, workers), what, hint

    def _one(self, i: int, prompt: str, n: int, params: SamplingParams) -> list[Completion]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "seed": None if params.seed is None else params.seed + i,
        }
        if params.top_k:
            body["top_k"] = params.top_k
        if params.stop.strings:
            body["stop"] = list(params.stop.strings)
        if params.stop.token_ids:
            body["stop_token_ids"] = list(params.stop.token_ids)
        got = _request(self.url + "/completions", body, self.timeout, self.retries, self.what, self.hint)
        choices = sorted(got.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != n:
            raise SolverServerError(
                f"{self.what} {redacted(self.url)}/completions returned {len(choices)} choices for n={n}"
            )
        return [
            Completion(str(c.get("text", "")), [], [], finish_reason=c.get("finish_reason") or "stop") for c in choices
        ]

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        if self.workers == 1 or len(prompts) <= 1:
            return [self._one(i, p, n, params) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda ip: self._one(ip[0], ip[1], n, params), enumerate(prompts)))

    def sync_weights(self, model: Any) -> None:  # the server's weights are the user's to manage
        pass


__all__ = ["RemoteSolver", "SolverServerError", "check_served_model", "served_models"]
