"""A model served behind an OpenAI-compatible API (``vllm serve``, SGLang, TGI ...) as a ``Sampler``:
``POST {url}/completions`` with the prompt text coevolve renders, so a served model is asked
exactly what a local one is (the same prompts, stops and grader).

Two users: ``coevolve eval --endpoint URL --served-model NAME`` (a model evaluated where it is
served) and ``backend=verl``'s writer rewards (``backend.verl.solver_url``: the frozen solver of
R-Zero's setup). The answers come back as text only (no token ids), which is all either needs.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse
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
CHUNK = 2**16

_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_QUERY_SECRET = re.compile(r"(?i)([?&][^=&#\s]*(?:key|token|secret|password|auth)[^=&#\s]*=)[^&#\s]*")


def redacted(url: str) -> str:
    """``url`` with any ``user:password@`` and the value of a query field named like a secret
    (``?api_key=``, ``&token=``) replaced, for messages and files."""
    return _QUERY_SECRET.sub(r"\1***", _CREDENTIALS.sub("***@", url))


VERL_HINT = "backend.verl.solver_url; is `vllm serve` running and reachable from the reward workers?"
"""What a failed request says to do, for the frozen solver of ``backend=verl``."""


def check_url(url: str, field: str) -> None:
    """An http(s) base URL with a host and no query or fragment (``/models`` and ``/completions``
    are appended to it); else a one-line ``SolverServerError`` naming ``field``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SolverServerError(f"{field}={redacted(url)!r}: an http:// or https:// URL with a host is needed")
    if parts.query or parts.fragment:
        raise SolverServerError(
            f"{field}={redacted(url)!r}: a base URL without ?query or #fragment (an API key: --api-key-env NAME)"
        )


def api_key(env: str | None, what: str = "frozen solver server") -> str | None:
    """The API key in the environment variable ``env`` (None: no key), read when a request is
    made, so the key itself is never held by a config, a spec file or a sampler's fields."""
    if not env:
        return None
    key = os.environ.get(env, "")
    if not key:
        name = env if re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", env) else "named"  # a mistyped key is not echoed
        raise SolverServerError(f"{what}: the API key's environment variable {name} is not set (or empty)")
    return key


def check_endpoint(url: str, api_key_env: str | None, timeout: float, deadline: float | None) -> None:
    """``coevolve eval --endpoint``'s served-model flags, checked before any work (one line each)."""
    check_url(url, "--endpoint")
    if api_key_env is not None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env):  # not echoed: it may be the key itself
            raise SolverServerError("--api-key-env takes the name of an environment variable (letters, digits, _)")
        api_key(api_key_env, "--api-key-env")
    if not timeout > 0 or not (deadline is None or deadline > 0):
        raise SolverServerError(f"--timeout and --deadline must be > 0 seconds, got {timeout:g} and {deadline:g}")


def proxy_for(url: str) -> str | None:
    """The proxy a request to ``url`` goes through: ``http_proxy`` / ``https_proxy`` from the
    environment (``urllib.request.getproxies``), none for a host ``no_proxy`` names, and none for a
    loopback host (a server coevolve started on this machine is never reached through a proxy)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        return None
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _basic(userinfo: str) -> str | None:
    """``Basic ...`` for a ``user:password`` (percent-decoded), None for none."""
    if not userinfo:
        return None
    user, _, pw = userinfo.partition(":")
    raw = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(pw)}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


def _headers(url: str, key: str | None, body: bytes | None) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    basic = _basic(urllib.parse.urlsplit(url).netloc.rpartition("@")[0])
    if key:
        headers["Authorization"] = f"Bearer {key}"
    elif basic:  # http://user:password@host: basic authentication, as a browser would send it
        headers["Authorization"] = basic
    return headers


class _Attempt:
    """One HTTP request bounded by ``limit_s`` in all (connect, headers, body), however slowly the
    server answers: a watchdog shuts the socket down at the limit. Redirects are not followed (a
    redirect would carry the key to another address); the environment's proxy is (``proxy_for``). Returns (status, reason, body); the body is
    read up to ``MAX_BODY + 1`` bytes."""

    def __init__(self, url: str, limit_s: float):
        parts = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        self.proxy_headers: dict[str, str] = {}
        proxy = proxy_for(url)
        if proxy is None:
            self.conn = cls(parts.hostname, parts.port, timeout=limit_s)
        else:  # http: the absolute URL to the proxy; https: a CONNECT tunnel through it
            pp = urllib.parse.urlsplit(proxy)
            auth = _basic(pp.netloc.rpartition("@")[0])
            self.conn = cls(pp.hostname, pp.port or 8080, timeout=limit_s)
            if parts.scheme == "https":
                self.conn.set_tunnel(
                    parts.hostname, parts.port, headers={"Proxy-Authorization": auth} if auth else None
                )
            else:
                self.target = urllib.parse.urlunsplit(
                    ("http", parts.netloc.rpartition("@")[2], parts.path or "/", parts.query, "")
                )
                self.proxy_headers = {"Proxy-Authorization": auth} if auth else {}
        self.limit_s, self.expired = limit_s, False

    def _expire(self) -> None:
        self.expired = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __call__(self, method: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, str, bytes]:
        watchdog = threading.Timer(self.limit_s, self._expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            self.conn.request(method, self.target, body=body, headers={**headers, **self.proxy_headers})
            resp = self.conn.getresponse()
            chunks, size = [], 0
            while size <= MAX_BODY:
                chunk = resp.read(min(CHUNK, MAX_BODY + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if self.expired:
                raise TimeoutError
            return resp.status, resp.reason, b"".join(chunks)
        except (OSError, http.client.HTTPException) as e:
            # the watchdog, or the socket's own timeout (the same limit, one operation) when it fires first
            if self.expired or isinstance(e, TimeoutError):
                raise TimeoutError(f"no complete answer within {self.limit_s:.3g} s") from None
            raise OSError(str(e) or type(e).__name__) from None
        finally:
            watchdog.cancel()
            self.conn.close()


def _refusal(status: int, reason: str, raw: bytes) -> str:
    """What an answer other than 2xx says, for the message."""
    if 300 <= status < 400:
        return f"HTTP {status} {reason}: a redirect, not followed (the key would go to another address)"
    said = f"HTTP {status} {reason}: {raw[:300].decode('utf-8', 'replace')}"
    return said + " (refused: is the API key right?)" if status in (401, 403) else said


def _request(
    url: str,
    body: dict[str, Any] | None,
    timeout: float,
    retries: int,
    what: str = "frozen solver server",
    hint: str = VERL_HINT,
    *,
    api_key_env: str | None = None,
    deadline: float | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """GET (``body`` None) or POST JSON, with ``retries`` retries on connection errors, timeouts
    and 5xx. Each attempt ends within ``timeout`` seconds; all attempts and the waits between them
    end within ``deadline`` seconds (None: no bound beyond the attempts'). The API key: ``key``
    itself (a server's own starter holds it), else the one in the variable ``api_key_env``."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    key = key or api_key(api_key_env, what)
    headers = _headers(url, key, data)
    end = None if deadline is None else time.monotonic() + deadline
    last = ""
    for attempt in range(retries + 1):
        left = timeout if end is None else min(timeout, end - time.monotonic())
        if left <= 0:
            last = f"{last}; no answer within the deadline of {deadline:g} s ({attempt} attempts)"
            break
        try:
            status, reason, raw = _Attempt(url, left)("GET" if body is None else "POST", data, headers)
        except (TimeoutError, OSError) as e:
            last = str(e) or "timed out"
        else:
            if len(raw) > MAX_BODY:
                last = f"the response is over {MAX_BODY // 2**20} MiB"
                break
            if 200 <= status < 300:
                try:
                    return json.loads(raw.decode("utf-8"))
                except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
                    last = f"not JSON ({getattr(e, 'msg', e)})"
                    break
            last = _refusal(status, reason, raw)
            if status < 500:
                break
        if attempt < retries:  # back off, within the deadline
            pause = min(2.0**attempt, 10.0)
            time.sleep(pause if end is None else min(pause, max(0.0, end - time.monotonic())))
    if key:
        last = last.replace(key, "***")
    raise SolverServerError(f"{what} {redacted(url)}: {redacted(last)} ({hint})")


def status_with_key(url: str, key: str, timeout: float = 5.0) -> int | None:
    """The HTTP status ``GET {url}/models`` gets with the API key ``key`` (None: no answer)."""
    try:
        return _Attempt(url.rstrip("/") + "/models", timeout)("GET", None, _headers(url, key, None))[0]
    except OSError:
        return None


def served_models(
    url: str,
    timeout: float = 30.0,
    retries: int = 1,
    what: str = "frozen solver server",
    hint: str = VERL_HINT,
    *,
    api_key_env: str | None = None,
    key: str | None = None,
    deadline: float | None = None,
) -> list[str]:
    """The model names ``GET {url}/models`` lists."""
    got = _request(
        url.rstrip("/") + "/models",
        None,
        timeout,
        retries,
        what,
        hint,
        api_key_env=api_key_env,
        key=key,
        deadline=deadline,
    )
    data = got.get("data", []) if isinstance(got, dict) else []
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


def check_served_model(
    url: str,
    model: str | None,
    timeout: float = 30.0,
    retries: int = 1,
    what: str = "frozen solver server",
    field: str = "backend.verl.solver_model",
    hint: str = VERL_HINT,
    *,
    api_key_env: str | None = None,
    deadline: float | None = None,
) -> str:
    """The served model name, checked against ``field`` (``model``): the server must serve the
    model meant (nothing here can tell which weights it holds); None = the first one it lists."""
    names = served_models(url, timeout, retries, what, hint, api_key_env=api_key_env, deadline=deadline)
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
    at once (the results keep the prompts' order). Each request: ``timeout`` seconds an attempt,
    ``retries`` more attempts, all within ``deadline`` seconds; the key (if any) is read from the
    environment variable ``api_key_env`` at each request."""

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
        *,
        api_key_env: str | None = None,
        deadline: float | None = None,
    ):
        self.url, self.model, self.timeout, self.retries = url.rstrip("/"), model, timeout, retries
        self.workers, self.what, self.hint = max(1, workers), what, hint
        self.api_key_env, self.deadline = api_key_env, deadline

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
        got = _request(
            self.url + "/completions",
            body,
            self.timeout,
            self.retries,
            self.what,
            self.hint,
            api_key_env=self.api_key_env,
            deadline=self.deadline,
        )
        choices = got.get("choices", []) if isinstance(got, dict) else []
        choices = sorted((c for c in choices if isinstance(c, dict)), key=lambda c: c.get("index", 0))
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


__all__ = [
    "RemoteSolver",
    "SolverServerError",
    "api_key",
    "check_endpoint",
    "check_served_model",
    "check_url",
    "served_models",
]
