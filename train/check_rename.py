"""Renamed prompts do not depend on the process: pieces() and a seeded
Renamer give the same output under different string-hash seeds (a set's
iteration order follows PYTHONHASHSEED), and pieces() orders equal counts
alphabetically.

    python train/check_rename.py      # run by scripts/train-smoke.sh
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import rename

# "buf" is a piece of 3 identifiers, "read" and "size" of 2 each (a tie), the rest of 1.
SAMPLE = """package p

func readBuf(buf []byte) int { return len(buf) }
func readSize(sizeHint int) int { return sizeHint }
type headerValue struct{ keyName string; bufPool int }
"""


def digest(texts: list[str]) -> str:
    """sha256 of the pieces and of a renaming of texts with a fixed seed."""
    vocab = rename.pieces(texts)
    renamer = rename.Renamer(vocab, 0.6, np.random.default_rng(1))
    out = "\0".join(vocab) + "\1" + "\0".join(renamer(t) for t in texts)
    return hashlib.sha256(out.encode()).hexdigest()


def sources() -> list[str]:
    """The sample and some of specula's own .go files (models/go-tiny's, the
    first 8 of tokenizer/), sorted."""
    root = Path(__file__).resolve().parent.parent
    files = sorted((root / "models" / "go-tiny").glob("*.go")) + sorted((root / "tokenizer").glob("*.go"))[:8]
    return [SAMPLE] + [f.read_text(encoding="utf-8") for f in files]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--digest":
        print(digest(sources()))
        return
    failures = []
    got = rename.pieces([SAMPLE])
    if got[:3] != ["buf", "read", "size"]:
        failures.append(f"pieces of the sample start {got[:3]}, want ['buf', 'read', 'size'] (counts 3, 2, 2 ... "
                        "ties alphabetical)")
    digests = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, __file__, "--digest"], env=env, capture_output=True, text=True)
        if run.returncode != 0:
            failures.append(f"child with PYTHONHASHSEED={seed} failed: {run.stderr.strip()}")
        digests.add(run.stdout.strip())
    if len(digests) != 1:
        failures.append(f"pieces and renaming differ between string-hash seeds: {sorted(digests)}")
    if failures:
        sys.exit("check_rename: " + "; ".join(failures))
    print(f"check_rename: pieces and renaming are the same under 3 hash seeds ({digests.pop()[:12]})")


if __name__ == "__main__":
    main()
