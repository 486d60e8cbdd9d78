"""Stage 1: the corpus — the non-test .go files of the Go standard library.

Files are listed in sorted order, so the corpus is the same on every machine
with the same toolchain. The held-out split is by package (the file's
directory): a package is held out when the first bytes of the SHA-256 of its
path fall below `heldout_percent`, so no held-out file shares a package with
a training file.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import subprocess
from pathlib import Path

from common import log, preset, write_json


def goroot_src() -> Path:
    out = subprocess.run(["go", "env", "GOROOT"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()) / "src"


def list_files(src: Path) -> list[Path]:
    files = []
    for path in src.rglob("*.go"):
        rel = path.relative_to(src)
        if path.name.endswith("_test.go") or "testdata" in rel.parts:
            continue
        files.append(rel)
    return sorted(files, key=lambda p: p.as_posix())


def heldout(package: str, percent: int) -> bool:
    digest = hashlib.sha256(package.encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < percent


def build(src: Path, out: Path, heldout_percent: int, limit_bytes: int = 0) -> dict:
    """Write train.jsonl.gz and heldout.jsonl.gz ({"path", "text"} per file) and
    corpus.json (the file list with hashes and the totals)."""
    out.mkdir(parents=True, exist_ok=True)
    splits = {"train": [], "heldout": []}
    total = 0
    for rel in list_files(src):
        text = (src / rel).read_text(encoding="utf-8", errors="replace")
        if limit_bytes and total + len(text) > limit_bytes:
            continue
        total += len(text)
        split = "heldout" if heldout(rel.parent.as_posix(), heldout_percent) else "train"
        splits[split].append({"path": rel.as_posix(), "text": text})
    record = {"source": str(src), "heldout_percent": heldout_percent, "splits": {}}
    for split, docs in splits.items():
        with gzip.open(out / f"{split}.jsonl.gz", "wt", encoding="utf-8", compresslevel=6) as f:
            for doc in docs:
                f.write(json.dumps(doc) + "\n")
        record["splits"][split] = {
            "files": len(docs),
            "chars": sum(len(d["text"]) for d in docs),
            "packages": len({d["path"].rsplit("/", 1)[0] for d in docs}),
            "sha256": hashlib.sha256("".join(d["path"] + "\0" + d["text"] for d in docs).encode()).hexdigest(),
        }
    write_json(out / "corpus.json", record)
    for split, r in record["splits"].items():
        log(f"corpus {split}: {r['files']} files, {r['packages']} packages, {r['chars']:,} chars")
    return record


def read(out: Path, split: str) -> list[dict]:
    with gzip.open(out / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="full")
    ap.add_argument("--src", type=Path, help="Go source tree (default: $(go env GOROOT)/src)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    p = preset(args.preset)
    build(args.src or goroot_src(), args.out, p.heldout_percent, p.corpus_limit_bytes)


if __name__ == "__main__":
    main()
