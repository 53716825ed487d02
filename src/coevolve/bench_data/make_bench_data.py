"""Rebuild the shipped math benchmark files from the offline copies described in README.md.

Not imported by the package; run by hand when the source data changes:

    python src/coevolve/bench_data/make_bench_data.py /path/to/shared/data

Only the fields the evaluator needs are kept (worked solutions are dropped to keep the wheel
small); gzip is written with mtime=0 so the files are byte-reproducible.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

# shipped name -> (source folder, fields kept besides id/question/answer/source)
SETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gsm8k": ("gsm8k", ()),
    "math500": ("math500", ("level", "subject")),
    "aime24": ("aime24", ()),
    "aime25": ("aime25", ()),
    "amc23": ("amc23", ()),
    "minerva_math": ("minerva_math", ("subject",)),
    "olympiadbench": ("olympiadbench", ("subject", "unit", "answer_type", "is_multiple_answer")),
}


def _read(folder: Path) -> list[dict]:
    for name in ("test.jsonl", "test.jsonl.gz"):
        p = folder / name
        if p.exists():
            opener = gzip.open if name.endswith(".gz") else open
            with opener(p, "rt", encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
    raise FileNotFoundError(f"no test.jsonl[.gz] in {folder}")


def main(src: Path, dst: Path) -> None:
    for name, (folder, extra) in SETS.items():
        rows = _read(src / folder)
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
            for r in rows:
                keep = {k: r[k] for k in ("id", "question", "answer", "source")}
                keep.update({k: r[k] for k in extra if k in r})
                gz.write((json.dumps(keep, ensure_ascii=False) + "\n").encode("utf-8"))
        (dst / f"{name}.jsonl.gz").write_bytes(buf.getvalue())
        print(f"{name}: {len(rows)} rows, {len(buf.getvalue())} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(__file__).resolve().parent)
