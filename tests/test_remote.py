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
