"""``coevolve.engine.remote``: what a served model's server can do to the client. A response body
over the cap is refused instead of read into memory, and a URL's credentials never reach a
message or results.json."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coevolve.engine import remote
from coevolve.engine.remote import SolverServerError, redacted, served_models


class _Huge(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"data": [{"id": "m" * 4096}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_response_over_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert served_models(url, retries=0) == ["m" * 4096]
        monkeypatch.setattr(remote, "MAX_BODY", 1024)
        with pytest.raises(SolverServerError, match="the response is over 0 MiB"):
            served_models(url, retries=0)
    finally:
        server.shutdown()


def test_credentials_in_a_url_are_redacted_in_messages() -> None:
    assert redacted("http://user:s3cret@host:8000/v1") == "http://***@host:8000/v1"
    assert redacted("http://127.0.0.1:9/v1") == "http://127.0.0.1:9/v1"
    with pytest.raises(SolverServerError) as e:
        served_models("http://user:s3cret@127.0.0.1:9/v1", timeout=2.0, retries=0)
    assert "s3cret" not in str(e.value) and "http://***@127.0.0.1:9/v1/models" in str(e.value)


class _Server:
    """A stdlib stand-in for an OpenAI-compatible server on 127.0.0.1: ``handler`` answers; the
    request headers it saw are kept (``seen``)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.seen: list[dict[str, str]] = []
        seen = self.seen

        class H(handler):  # type: ignore[misc, valid-type]
            def parse_request(self) -> bool:
                ok = super().parse_request()
                seen.append(dict(self.headers))
                return ok

            def log_message(self, *args: object) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def __enter__(self) -> _Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.srv.shutdown()
        self.srv.server_close()


KEY = "sk-test-Zq81LbX3"


def _send(h: BaseHTTPRequestHandler, obj: object, code: int = 200) -> None:
    body = json.dumps(obj).encode()
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class _Keyed(BaseHTTPRequestHandler):
    """Answers only a request that carries ``Authorization: Bearer KEY`` (as ``vllm serve --api-key``);
    a refusal echoes the header it got (a careless server)."""

    def _ok(self) -> bool:
        got = self.headers.get("Authorization", "")
        if got != f"Bearer {KEY}":
            _send(self, {"error": f"bad key {got!r}"}, 401)
            return False
        return True

    def do_GET(self) -> None:  # noqa: N802
        if self._ok():
            _send(self, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self._ok():
            _send(self, {"choices": [{"index": i, "text": "\\boxed{27}"} for i in range(body["n"])]})


def test_the_api_key_is_read_from_the_named_variable_and_sent_as_a_bearer_token(monkeypatch) -> None:
    with _Server(_Keyed) as s:
        with pytest.raises(SolverServerError, match="environment variable COEVOLVE_TEST_KEY is not set"):
            served_models(s.url, retries=0, api_key_env="COEVOLVE_TEST_KEY")
        monkeypatch.setenv("COEVOLVE_TEST_KEY", "sk-wrong-Pq1")
        with pytest.raises(SolverServerError, match="HTTP 401") as e:
            served_models(s.url, retries=0, api_key_env="COEVOLVE_TEST_KEY")
        assert "sk-wrong-Pq1" not in str(e.value) and "is the API key right?" in str(e.value)  # echoed, redacted
        monkeypatch.setenv("COEVOLVE_TEST_KEY", KEY)
        assert served_models(s.url, retries=0, api_key_env="COEVOLVE_TEST_KEY") == ["m"]
        solver = remote.RemoteSolver(s.url, "m", api_key_env="COEVOLVE_TEST_KEY")
        from coevolve.types import SamplingParams

        assert [c.text for c in solver.sample(["Q"], 2, SamplingParams(max_new_tokens=8))[0]] == ["\\boxed{27}"] * 2
        assert KEY not in json.dumps(vars(solver))  # the sampler holds the variable's name, not the key
        assert s.seen[-1]["Authorization"] == f"Bearer {KEY}"


class _Silent(BaseHTTPRequestHandler):
    """Accepts, reads the request and never answers (a hung server)."""

    def do_GET(self) -> None:  # noqa: N802
        threading.Event().wait(60)


class _Trickle(BaseHTTPRequestHandler):
    """Answers 200 at once, then the body one byte every 0.2 s (each read within any socket timeout)."""

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"data": [{"id": "slow"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for b in body:
            self.wfile.write(bytes([b]))
            self.wfile.flush()
            threading.Event().wait(0.2)


def test_an_attempt_ends_at_its_timeout_however_slowly_the_server_answers() -> None:
    with _Server(_Trickle) as s:
        with pytest.raises(SolverServerError, match=r"no complete answer within 1 s"):
            served_models(s.url, timeout=1.0, retries=0)  # socket reads alone would wait the whole body (~6 s)
    with _Server(_Silent) as s:
        with pytest.raises(SolverServerError, match=r"no complete answer within 0.5 s"):
            served_models(s.url, timeout=0.5, retries=0)


def test_the_deadline_bounds_a_request_and_its_retries() -> None:
    with _Server(_Silent) as s:
        with pytest.raises(SolverServerError, match=r"no answer within the deadline of 2.5 s \(\d attempts\)"):
            remote._request(s.url + "/models", None, 1.0, 20, deadline=2.5)
        assert len(s.seen) < 5  # 21 attempts of 1 s without the deadline


class _Redirect(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(307)
        self.send_header("Location", self.target + "/models")
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_redirect_is_not_followed_so_the_key_stays_with_the_server_it_was_meant_for(monkeypatch) -> None:
    monkeypatch.setenv("COEVOLVE_TEST_KEY", KEY)
    with _Server(_Keyed) as other, _Server(_Redirect) as first:
        first.srv.RequestHandlerClass.target = other.url
        with pytest.raises(SolverServerError, match="HTTP 307"):
            served_models(first.url, retries=0, api_key_env="COEVOLVE_TEST_KEY")
        assert other.seen == [] and first.seen[0]["Authorization"] == f"Bearer {KEY}"


def test_urls_that_are_not_a_servers_base_are_refused_and_secrets_in_them_redacted() -> None:
    assert redacted("http://h/v1?api_key=sk-1&x=2&token=t") == "http://h/v1?api_key=***&x=2&token=***"
    for url, says in (
        ("file:///etc/passwd", "http:// or https://"),
        ("http:///v1", "with a host"),
        ("http://h/v1?api_key=sk-1", r"without \?query"),
    ):
        with pytest.raises(SolverServerError, match=says) as e:
            remote.check_url(url, "--endpoint")
        assert "sk-1" not in str(e.value)
    with pytest.raises(SolverServerError, match="letters, digits") as e:
        remote.check_endpoint("http://h/v1", "sk-pasted-key", 1.0, 1.0)
    assert "sk-pasted-key" not in str(e.value)


def test_coevolve_eval_takes_the_key_from_the_named_variable_and_writes_it_nowhere(tmp_path, monkeypatch) -> None:
    from test_cli import cli
    from test_eval import _fixture_data

    data = tmp_path / "data"
    _fixture_data(data)
    args = ["--bench", "amc23", "--samples", "0", "--max-new-tokens", "8", "--data-dir", str(data)]
    with _Server(_Keyed) as s:
        r = cli("eval", "--endpoint", s.url, "--api-key-env", "COEVOLVE_TEST_KEY", *args, "--out", str(tmp_path / "a"))
        assert r.returncode == 2 and "environment variable COEVOLVE_TEST_KEY is not set" in r.stderr, r.stderr
        assert not (tmp_path / "a").exists() and s.seen == []  # refused before any request
        monkeypatch.setenv("COEVOLVE_TEST_KEY", KEY)
        r = cli("eval", "--endpoint", s.url, *args, "--out", str(tmp_path / "b"))
        assert r.returncode == 2 and "HTTP 401" in r.stderr and "Traceback" not in r.stderr, r.stderr
        out = tmp_path / "o"
        r = cli("eval", "--endpoint", s.url, "--api-key-env", "COEVOLVE_TEST_KEY", *args, "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert "| amc23 | math | 2 | greedy | 50.0 |" in r.stdout
    assert {h.get("Authorization") for h in s.seen[1:]} == {f"Bearer {KEY}"}
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written and not any(KEY in p.read_text(encoding="utf-8", errors="replace") for p in written)
    assert KEY not in r.stdout + r.stderr


class _Proxy(BaseHTTPRequestHandler):
    """A forward proxy stand-in: answers for any server, recording the absolute URL it was asked."""

    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        _Proxy.asked.append(self.path)
        _send(self, {"data": [{"id": "via-proxy"}]})


def test_requests_go_through_the_environments_proxy_except_to_loopback_and_no_proxy(monkeypatch) -> None:
    """``http_proxy`` is honoured as curl and urllib do (the request line carries the absolute URL,
    the proxy's credentials go in Proxy-Authorization, the server's key still in Authorization);
    ``no_proxy`` hosts and loopback (a server started on this machine) are reached directly."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    with _Server(_Proxy) as proxy, _Server(_Keyed) as direct:
        port = proxy.url.split(":")[2].split("/")[0]
        monkeypatch.setenv("http_proxy", f"http://pu:pp@127.0.0.1:{port}")
        monkeypatch.setenv("COEVOLVE_TEST_KEY", KEY)
        assert served_models("http://solver.example:8000/v1", retries=0, api_key_env="COEVOLVE_TEST_KEY") == [
            "via-proxy"
        ]
        assert _Proxy.asked[-1] == "http://solver.example:8000/v1/models"
        assert proxy.seen[-1]["Authorization"] == f"Bearer {KEY}"
        assert proxy.seen[-1]["Proxy-Authorization"] == "Basic cHU6cHA="  # pu:pp
        assert remote.proxy_for(direct.url) is None  # loopback: never through the proxy
        assert served_models(direct.url, retries=0, api_key_env="COEVOLVE_TEST_KEY") == ["m"]
        monkeypatch.setenv("no_proxy", "solver.example")
        assert remote.proxy_for("http://solver.example:8000/v1") is None
        assert remote.proxy_for("http://other.example:8000/v1") == f"http://pu:pp@127.0.0.1:{port}"
