"""Try hostile inputs and faults through the CLI, each in a fresh process, and print a table:
input or fault -> first line of the message -> exit status -> wall time -> peak memory.

    PYTHONPATH=src nice -n 19 python dev/fault_table.py --out runs/faults [--only SUBSTRING ...] [--docs]

A run folder for the resume cases is made first (a tiny toy grpo run, about 20 s), only when a
chosen case needs it. ``--only`` keeps the cases whose name contains one of the substrings.
The served-model cases ask a stand-in server on 127.0.0.1 started here (``Served``: a server that
needs a key, hangs, trickles, redirects or answers too much). ``--docs`` writes the table into
docs/errors.md between its ``fault_table`` markers, the scratch folder shown as ``W`` (with
``--only``: the rows of those cases)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import kill_fuzz  # noqa: E402

TINY = [*kill_fuzz.QUICK["grpo"], "run.progress=false", "run.threads=1"]
KEY = "sk-fault-table-7Qz"
DOCS = ROOT / "docs" / "errors.md"
BEGIN, END = "<!-- fault_table: begin -->", "<!-- fault_table: end -->"


class _Served(BaseHTTPRequestHandler):
    """What a served model's server can do, by the first part of the path: ``/key`` needs
    ``Bearer KEY``, ``/hang`` never answers, ``/trickle`` sends its body a byte every 0.2 s,
    ``/redirect`` answers 307, ``/big`` sends 65 MiB, ``/err`` HTTP 500 with HTML."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        mode = self.path.split("/")[1]
        models = json.dumps({"data": [{"id": "m"}]}).encode()
        if mode == "key":
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                return self._send(401, json.dumps({"error": f"got {self.headers.get('Authorization')}"}).encode())
            return self._send(200, models)
        if mode == "hang":
            threading.Event().wait(120)
        elif mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", str(len(models)))
            self.end_headers()
            for b in models:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                threading.Event().wait(0.2)
        elif mode == "redirect":
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:9/v1/models")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif mode == "big":
            self.send_response(200)
            self.send_header("Content-Length", str(65 * 2**20))
            self.end_headers()
            for _ in range(65):
                self.wfile.write(b" " * 2**20)
        else:
            self._send(500, b"<html>oops</html>", "text/html")


def served() -> str:
    """The base URL of a ``_Served`` server on 127.0.0.1 (a daemon thread of this process)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Served)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}"


def _cli(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, float, int]:
    """exit status, stderr+stdout, seconds, peak RSS (MiB) of one ``coevolve`` process (GNU time)."""
    t0 = time.perf_counter()
    r = subprocess.run(
        ["/usr/bin/time", "-f", "@@peak %M", sys.executable, "-m", "coevolve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        text=True,
        errors="replace",
    )
    s = time.perf_counter() - t0
    lines = r.stdout.splitlines()
    peak = next((int(x.split()[-1]) for x in reversed(lines) if x.startswith("@@peak")), 0)
    out = "\n".join(x for x in lines if not x.startswith(("@@peak", "Command exited with")))
    return r.returncode, out, s, peak // 1024


def _message(out: str) -> str:
    lines = [x for x in out.splitlines() if x.strip() and not x.startswith(("resuming", "running"))]
    bad = [x for x in lines if "Traceback" in x]
    pick = (
        bad[0] if bad else next((x for x in lines if "error" in x.lower() or "[warn" in x), lines[-1] if lines else "")
    )
    return pick.strip()[:150].replace("|", "/")


def cases(w: Path, ref: Callable[[], Path], url: str) -> list[tuple[str, list[str], Callable[[], None] | None]]:
    def copy_run(name: str, edit: Callable[[Path], None]) -> Callable[[], None]:
        def make() -> None:
            d = w / name
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(ref(), d)
            edit(d)

        return make

    def files() -> None:
        (w / "cfgdir").mkdir(exist_ok=True)
        (w / "bad.yaml").write_bytes(b"a: \xff\n")
        (w / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
        (w / "bomb.yaml").write_text(
            'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
            + "".join(f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
        )
        (w / "notjson.jsonl").write_text("{nope\n")
        (w / "empty.jsonl").write_text("")
        (w / "nonutf8.jsonl").write_bytes(b'{"question": "1+1", "answer": "\xe9"}\n')
        (w / "surrogate.jsonl").write_text('{"question": "\\ud800", "answer": "1"}\n')
        (w / "bigint.jsonl").write_text('{"question": "q", "answer": ' + "9" * 5000 + "}\n")
        (w / "deep.jsonl").write_text('{"question": ' + "[" * 100000 + "]" * 100000 + ', "answer": "1"}\n')
        with gzip.open(w / "trunc.jsonl.gz", "wb") as f:
            f.write("".join(f'{{"question": "{i}+{i}", "answer": "{2 * i}"}}\n' for i in range(1000)).encode())
        (w / "trunc.jsonl.gz").write_bytes((w / "trunc.jsonl.gz").read_bytes()[:200])
        (w / "g.jsonl").write_bytes(b'{"pred": "1", "gold": "1"}\n{"pred": "\xff", "gold": "1"}\n')
        (w / "brokenmodel").mkdir(exist_ok=True)
        (w / "brokenmodel" / "config.json").write_text("{\n")
        (w / "m_list").mkdir(exist_ok=True)
        (w / "m_list" / "config.json").write_text("[]")
        (w / "wide.csv").write_text("question,answer\n" + "x" * 200_000 + ",1\n")
        (w / "project" / ".git").mkdir(parents=True, exist_ok=True)
        (w / "project" / "summary.json").write_text("mine")
        (w / "g2.jsonl").write_text('{"pred": "1", "gold": "1"}\n')
        long = " ".join(f"{i}+{i}" for i in range(3000))
        (w / "long.jsonl").write_text(json.dumps({"question": long, "answer": "1"}) + "\n")
        (w / "dangling").unlink(missing_ok=True)
        (w / "dangling").symlink_to(w / "nowhere" / "x")

    def flip(rel_glob: str) -> Callable[[Path], None]:
        def edit(d: Path) -> None:
            f = sorted(d.glob(rel_glob))[0]
            b = bytearray(f.read_bytes())
            b[len(b) // 2] ^= 1
            f.write_bytes(bytes(b))

        return edit

    def state_edit(fn: Callable[[dict], None]) -> Callable[[Path], None]:
        def edit(d: Path) -> None:
            s = json.loads((d / "state.json").read_text())
            fn(s)
            (d / "state.json").write_text(json.dumps(s))

        return edit

    def lock_link(d: Path) -> None:
        (d / "run.lock").unlink(missing_ok=True)
        (w / "precious.txt").write_text("keep\n")
        (d / "run.lock").symlink_to(w / "precious.txt")

    def torn(d: Path) -> None:  # cut inside a line the last phase mark counted (bytes after it are cut anyway)
        m, kept = d / "metrics.jsonl", json.loads((d / "state.json").read_text())["metrics_bytes"]
        m.write_bytes(m.read_bytes()[: kept - 9])

    def lr(d: Path) -> None:
        c = (d / "config.yaml").read_text()
        (d / "config.yaml").write_text(c.replace("lr: ", "lr: 0.5 #", 1))

    same = copy_run("same", lambda d: None)
    c = [
        ("setup files", ["--help"], files),
        ("override without =", ["config", "grpo", "solver.steps"], None),
        ("a bad int value", ["config", "grpo", "solver.steps=abc"], None),
        ("a boolean for a number", ["config", "grpo", "solver.steps=true"], None),
        ("solver.steps=1e23", ["config", "grpo", "solver.steps=1e23"], None),
        ("an int of 5000 digits", ["config", "grpo", "solver.steps=" + "9" * 5000], None),
        ("a 100 kB run.name", ["config", "grpo", "run.name=" + "x" * 100000], None),
        ("unknown key", ["config", "grpo", "solver.nope=1"], None),
        ("unknown benchmark", ["config", "grpo", "eval.benches=[math8]"], None),
        ("unknown device", ["config", "grpo", "model.device=banana"], None),
        ("toy levels outside 1-4", ["config", "grpo", "data.levels=[5]"], None),
        ("unknown recipe", ["config", "nope"], None),
        ("--config a folder", ["config", "grpo", "--config", str(w / "cfgdir")], None),
        ("--config non-UTF-8", ["config", "grpo", "--config", str(w / "bad.yaml")], None),
        ("--config missing", ["config", "grpo", "--config", str(w / "missing.yaml")], None),
        ("YAML nested 5000 deep", ["config", "grpo", "--config", str(w / "deep.yaml")], None),
        ("YAML alias bomb", ["config", "grpo", "--config", str(w / "bomb.yaml")], None),
        ("data file missing", ["run", "grpo", *TINY, "data.source=nope.jsonl", "--run-dir", str(w / "r1")], None),
        ("data line not JSON", ["data", str(w / "notjson.jsonl")], None),
        ("empty data file", ["data", str(w / "empty.jsonl")], None),
        ("data non-UTF-8", ["data", str(w / "nonutf8.jsonl")], None),
        ("data lone surrogate", ["data", str(w / "surrogate.jsonl")], None),
        ("data int of 5000 digits", ["data", str(w / "bigint.jsonl")], None),
        ("data JSON nested 100000 deep", ["data", str(w / "deep.jsonl")], None),
        ("CSV field of 200 kB", ["data", str(w / "wide.csv")], None),
        ("truncated .jsonl.gz", ["data", str(w / "trunc.jsonl.gz")], None),
        ("grade file non-UTF-8", ["grade", "--jsonl", str(w / "g.jsonl")], None),
        ("grade file a folder", ["grade", "--jsonl", str(w / "cfgdir")], None),
        ("model config.json not JSON", ["eval", "--model", str(w / "brokenmodel")], None),
        ("model config.json a list", ["eval", "--model", str(w / "m_list")], None),
        ("eval endpoint refused", ["eval", "--endpoint", "http://127.0.0.1:9"], None),
        ("run dir is a file", ["run", "grpo", *TINY, "--run-dir", str(w / "bad.yaml")], None),
        ("resume a missing folder", ["resume", str(w / "nowhere")], None),
        ("resume a folder with no run", ["resume", str(w / "cfgdir")], None),
        ("resume unchanged (finished)", ["resume", str(w / "same")], same),
        ("resume learner.lr=1e-5", ["resume", str(w / "same"), "learner.lr=1e-5"], same),
        ("resume run.seed=1", ["resume", str(w / "same"), "run.seed=1"], same),
        ("resume run.threads=2 (safe)", ["resume", str(w / "same"), "run.threads=2"], same),
        ("resume edited lr in config.yaml", ["resume", str(w / "lr")], copy_run("lr", lr)),
        ("resume rounds=3 on grpo", ["resume", str(w / "same"), "rounds=3"], same),
        ("resume solver.steps=0", ["resume", str(w / "same"), "solver.steps=0"], same),
        ("flipped bit in weights", ["resume", str(w / "w")], copy_run("w", flip("checkpoints/*/model.safetensors"))),
        ("flipped bit in optimiser", ["resume", str(w / "o")], copy_run("o", flip("checkpoints/*/learner_optim.pt"))),
        ("edited eval artefact", ["resume", str(w / "e")], copy_run("e", flip("round_01/*.json*"))),
        (
            "state.json ../x checkpoint",
            ["resume", str(w / "s")],
            copy_run("s", state_edit(lambda s: s["checkpoint_history"].update(solver=["../x"]))),
        ),
        (
            "state.json not JSON",
            ["resume", str(w / "sj")],
            copy_run("sj", lambda d: (d / "state.json").write_text("{")),
        ),
        ("run.lock a symlink", ["resume", str(w / "l")], copy_run("l", lock_link)),
        ("torn metrics.jsonl line", ["resume", str(w / "t")], copy_run("t", torn)),
        (
            "full disk at a phase mark",
            ["run", "grpo", *TINY, "--run-dir", str(w / "fd")],
            lambda: shutil.rmtree(w / "fd", ignore_errors=True),
        ),
        ("full disk at config.yaml", ["run", "grpo", *TINY, "--run-dir", str(w / "fd2")], None),
        ("run into a project folder", ["run", "grpo", *TINY, "--run-dir", str(w / "project")], None),
        ("grade a file onto itself", ["grade", "--jsonl", str(w / "g2.jsonl"), "--out", str(w / "g2.jsonl")], None),
        (
            "question over the model's context",
            ["run", "grpo", "model.path=smollm2", f"data.source={w / 'long.jsonl'}", "--run-dir", str(w / "ctx")],
            None,
        ),
        ("compare an unfinished run", ["compare", str(w / "cfgdir"), str(w / "same")], None),
        *served_cases(url),
    ]
    return c


def served_cases(url: str) -> list[tuple[str, list[str], None]]:
    """``coevolve eval --endpoint`` against what a server can do (``_Served``) and hostile flags."""
    ev = ["eval", "--bench", "amc23"]
    key = ["--api-key-env", "COEVOLVE_FT_KEY"]
    return [
        ("endpoint needs a key, none given", [*ev, "--endpoint", f"{url}/key/v1"], None),
        ("endpoint given a wrong key", [*ev, "--endpoint", f"{url}/key/v1", *key], None),
        ("--api-key-env unset", [*ev, "--endpoint", f"{url}/key/v1", "--api-key-env", "COEVOLVE_FT_UNSET"], None),
        ("--api-key-env given the key itself", [*ev, "--endpoint", f"{url}/key/v1", "--api-key-env", KEY], None),
        ("--api-key-env without --endpoint", [*ev, "--model", "toy", *key], None),
        ("--endpoint file:///etc/passwd", [*ev, "--endpoint", "file:///etc/passwd"], None),
        ("--endpoint with ?api_key=", [*ev, "--endpoint", f"{url}/key/v1?api_key={KEY}"], None),
        ("--endpoint with user:password@", [*ev, "--endpoint", f"http://user:{KEY}@127.0.0.1:9/v1"], None),
        ("--timeout 0", [*ev, "--endpoint", f"{url}/key/v1", "--timeout", "0"], None),
        ("server hangs", [*ev, "--endpoint", f"{url}/hang/v1", "--timeout", "2", "--deadline", "5"], None),
        ("server trickles its answer", [*ev, "--endpoint", f"{url}/trickle/v1", "--timeout", "2"], None),
        ("server redirects", [*ev, "--endpoint", f"{url}/redirect/v1"], None),
        ("server answers 65 MiB", [*ev, "--endpoint", f"{url}/big/v1"], None),
        ("server answers HTTP 500 HTML", [*ev, "--endpoint", f"{url}/err/v1"], None),
    ]


FAULTS = {"full disk at a phase mark": "state:5:enospc", "full disk at config.yaml": "write:1:enospc"}
ENV = {"endpoint given a wrong key": {"COEVOLVE_FT_KEY": "sk-wrong-key-9"}}
"""Environment variables of a case (a key the served cases send)."""


def write_docs(rows: list[str], out: Path, command: str, only: bool) -> None:
    """The table into docs/errors.md between ``BEGIN`` and ``END``, the scratch folder as ``W``;
    ``only``: the rows of the cases tried replace theirs (by name), the others stay."""
    text = DOCS.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} section")
    rows = [r.replace(str(out.resolve()), "W").replace(str(out), "W") for r in rows]
    head, _, rest = text.partition(BEGIN)
    old, _, tail = rest.partition(END)
    if only:
        new = {r.split(" | ")[1]: r for r in rows[2:]}
        kept = [r for r in old.splitlines() if r.startswith("| ") and not r.startswith("| #")]
        if not kept:
            raise SystemExit("--docs --only updates rows of a table written before: run --docs alone first")
        rows = rows[:2] + [new.get(r.split(" | ")[1], r) for r in kept]
        rows[2:] = [f"| {i} | {r.split(' | ', 1)[1]}" for i, r in enumerate(rows[2:], 1)]
    body = "\n".join(rows)
    made = f"{BEGIN}\n<!-- generated by `{command}`; do not edit by hand -->\n\n{body}\n\n{END}"
    DOCS.write_text(head + made + tail, encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="+", default=[], metavar="SUBSTRING", help="run only the cases whose name has one")
    ap.add_argument(
        "--docs", action="store_true", help="write the table into docs/errors.md (with --only: those rows only)"
    )
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []

    def ref() -> Path:  # the finished tiny run the resume cases copy, made on first use
        if not made:
            shutil.rmtree(a.out / "ref", ignore_errors=True)
            (a.out / "ref").mkdir()
            made.append(kill_fuzz.reference("grpo", kill_fuzz.QUICK["grpo"], a.out / "ref")[0])
        return made[0]

    url = served()
    chosen = [
        c for c in cases(a.out, ref, url) if c[0] == "setup files" or not a.only or any(s in c[0] for s in a.only)
    ]
    rows = ["| # | input or fault | message (first line) | exit | s | peak MiB |", "|---|---|---|---|---|---|"]
    print("\n".join(rows))
    for name, args, make in chosen:
        if make is not None:
            make()
        if name == "setup files":
            continue
        env = {**({"COEVOLVE_FAULT": FAULTS[name]} if name in FAULTS else {}), **ENV.get(name, {})}
        rc, out, s, rss = _cli(args, env)
        if KEY in out:  # a key the served cases give must never be shown
            raise SystemExit(f"{name}: the API key appears in the output:\n{out}")
        msg = re.sub(r"127\.0\.0\.1:\d{4,5}", "127.0.0.1:PORT", _message(out))
        rows.append(f"| {len(rows) - 1} | {name} | `{msg}` | {rc} | {s:.1f} | {rss} |")
        print(rows[-1], flush=True)
    if a.docs:
        write_docs(
            rows, a.out, "PYTHONPATH=src nice -n 19 python dev/fault_table.py --out runs/faults --docs", bool(a.only)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
