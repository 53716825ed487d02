"""A stand-in for ``vllm serve`` (the default lane has no vLLM server): ``python
solver_server_standin.py --model FOLDER --served-model-name NAME --port P ...`` serves
``GET /v1/models`` (NAME) and ``POST /v1/completions`` (every answer ``\\boxed{3}``) on
127.0.0.1:P until SIGTERM. ``$STANDIN_SERVED`` names a JSONL file that gets one line per start:
the name, the folder, and a digest of the folder's weights (which solver the server holds).

``$STANDIN_SERVER_FAIL=1`` exits with status 4 before listening (a server that cannot start).
With ``$VLLM_API_KEY`` set, as ``vllm serve``, every request must carry ``Authorization: Bearer``
that key (else HTTP 401), unless ``$STANDIN_IGNORE_KEY=1`` (a server that ignores it); the key it
got is in its ``$STANDIN_SERVED`` line.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path

from json_http import JsonHandler  # this folder is on sys.path when the script runs


def _arg(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


def weights_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def main() -> None:
    folder, name, port = Path(_arg("--model")), _arg("--served-model-name"), int(_arg("--port"))
    print("standin solver server:", " ".join(sys.argv[1:]), flush=True)
    if os.environ.get("STANDIN_SERVER_FAIL"):
        print("cannot start (STANDIN_SERVER_FAIL)", flush=True)
        sys.exit(4)
    if os.environ.get("STANDIN_SERVED"):
        with open(os.environ["STANDIN_SERVED"], "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps(
                    {
                        "name": name,
                        "folder": str(folder),
                        "weights": weights_digest(folder),
                        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "key": os.environ.get("VLLM_API_KEY"),
                    }
                )
                + "\n"
            )

    key = None if os.environ.get("STANDIN_IGNORE_KEY") else os.environ.get("VLLM_API_KEY")

    class H(JsonHandler):
        def parse_request(self):
            if not super().parse_request():
                return False
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send({"error": "Unauthorized"}, 401)
                return False
            return True

        def do_GET(self):
            if self.path == "/v1/models":
                return self._send({"data": [{"id": name}]})
            self._send({"error": "no"}, 404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body.get("model") != name:
                return self._send({"error": "unknown model"}, 404)
            self._send(
                {"choices": [{"index": i, "text": "\\boxed{3}", "finish_reason": "stop"} for i in range(body["n"])]}
            )

    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(0)))
    try:
        srv.serve_forever()
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
