"""The request handler the tests' stand-in OpenAI-compatible servers share: quiet, and one way
to answer with a JSON object (``vllm serve``'s stand-in script imports it from this folder)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *a):  # quiet: the tests read the bodies, not the access log
        pass

    def _send(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
