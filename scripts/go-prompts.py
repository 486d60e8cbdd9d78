#!/usr/bin/env python3
"""go-prompts.py: the Go prompts of `specula bench` for the go-tiny family.

go-tiny was trained on the Go standard library only, so its benchmark prompts
come from Go code outside it: specula's own non-test .go sources (the files
`git ls-files` lists, without tests, generated code, testdata and train/).
Each prompt ends mid-function, so that the continuation is code the target
has to predict:

  - three of every four prompts are a function: its doc comment, its
    signature and the first lines of its body (half the body, at most 20
    lines);
  - one in four is a file's start: the package clause, the imports and
    what follows, up to the middle of the file's first long function (when
    that is at most 60 lines).

Selection is deterministic: candidate functions (bodies of 12 lines or more)
are ordered by the SHA-256 of "path:line" and taken one per file. Each
prompt is written as one JSON string per line (newlines escaped), which
`specula bench --prompts` reads.

  scripts/go-prompts.py [--count 32] [--out testdata/go-prompts.txt]
"""

import argparse
import hashlib
import json
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIN_BODY = 12   # lines: shorter functions leave too little to continue
MAX_PREFIX = 20  # body lines kept at most
MAX_FILE_START = 60  # lines: a longer file start is mostly comments and imports


def sources():
    """Non-test, non-generated Go files of the repository, sorted."""
    out = subprocess.run(["git", "ls-files", "*.go"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    keep = []
    for path in sorted(out):
        parts = pathlib.PurePosixPath(path).parts
        if path.endswith("_test.go") or "testdata" in parts or parts[0] == "train":
            continue
        text = (ROOT / path).read_text()
        if re.search(r"^// Code generated .* DO NOT EDIT\.$", text, re.M):
            continue
        keep.append((path, text.split("\n")))
    return keep


def functions(lines):
    """(start, open, close) line indices of top-level functions with a body
    of several lines: the first doc-comment line, the line whose trailing {
    opens the body (the last line of the signature), and the closing } at
    column 0. One-line functions and declarations without a body are
    skipped."""
    found = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("func ") and not lines[i].rstrip().endswith("}"):
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].rstrip().endswith("{"):
                j += 1  # a signature over several lines
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                if k < len(lines):
                    s = i
                    while s > 0 and lines[s - 1].startswith("//"):
                        s -= 1
                    found.append((s, j, k))
                    i = k
        i += 1
    return found


def cut(lines, open_, close):
    """How many body lines to keep: half the body, at most MAX_PREFIX."""
    return min(MAX_PREFIX, (close - open_ - 1) // 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=32)
    ap.add_argument("--out", default=str(ROOT / "testdata" / "go-prompts.txt"))
    args = ap.parse_args()

    candidates = []
    for path, lines in sources():
        for start, open_, close in functions(lines):
            if close - open_ - 1 >= MIN_BODY:
                key = hashlib.sha256(f"{path}:{open_ + 1}".encode()).hexdigest()
                candidates.append((key, path, lines, start, open_, close))
    candidates.sort()

    prompts, used, starts = [], set(), 0
    for key, path, lines, start, open_, close in candidates:
        if len(prompts) == args.count:
            break
        if path in used:
            continue
        used.add(path)
        text = "\n".join(lines[start: open_ + 1 + cut(lines, open_, close)])
        if starts < (len(prompts) + 1) // 4:
            # One prompt in four is a file's start, up to the middle of its
            # first long function, when that is short enough (else the next
            # file tries).
            _, o, c = next(f for f in functions(lines) if f[2] - f[1] - 1 >= MIN_BODY)
            if o + 1 + cut(lines, o, c) <= MAX_FILE_START:
                text = "\n".join(lines[: o + 1 + cut(lines, o, c)])
                starts += 1
        prompts.append((path, text + "\n"))

    if len(prompts) < args.count:
        raise SystemExit(f"only {len(prompts)} files have a function of {MIN_BODY}+ lines; asked for {args.count}")
    with open(args.out, "w") as f:
        for _, text in prompts:
            f.write(json.dumps(text, ensure_ascii=False) + "\n")
    for path, text in prompts:
        print(f"{path}: {text.count(chr(10))} lines")


if __name__ == "__main__":
    main()
