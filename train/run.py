"""Run the go-tiny recipe's stages in order (or a chosen subset).

    python train/run.py --work WORK [--preset full|smoke] [--stages a,b,...] [--out models/go-tiny]

Stages: corpus, tokenizer, prompts, target, regenerate, dflash, dflash2, dflash2-refine, evaluate,
export, parity. Each reads what the earlier ones left in WORK, so a run can be
split across machines (the corpus is made where Go is installed, the rest on
the GPU) by carrying WORK.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from common import log

HERE = Path(__file__).resolve().parent
STAGES = {
    "corpus": ("corpus.py", ["--out", "{work}/corpus"]),
    "tokenizer": ("bpe.py", ["--corpus", "{work}/corpus", "--out", "{work}/tokenizer"]),
    "prompts": ("prompts.py", ["--work", "{work}"]),
    "target": ("target.py", ["--work", "{work}"]),
    "regenerate": ("regenerate.py", ["--work", "{work}"]),
    "dflash": ("draft.py", ["--work", "{work}", "--kind", "dflash"]),
    "dflash2": ("draft.py", ["--work", "{work}", "--kind", "dflash2"]),
    "dflash2-refine": ("draft.py", ["--work", "{work}", "--kind", "dflash2", "--refine"]),
    "evaluate": ("evaluate.py", ["--work", "{work}"]),
    "export": ("export.py", ["--work", "{work}", "--out", "{out}"]),
    "parity": ("parity.py", ["--family", "{out}", "--out", "{parity}"]),
}
NEEDS_DEVICE = {"target", "regenerate", "dflash", "dflash2", "dflash2-refine", "evaluate"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--preset", default="full")
    ap.add_argument("--device", help="torch device (default: the preset's)")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--outside", type=Path, help="prompts stage: Go code outside the corpus, a third evaluation set")
    ap.add_argument("--out", type=Path, default=Path("models/go-tiny"))
    ap.add_argument("--parity", type=Path, default=Path("testdata/fixtures/go-tiny"))
    args = ap.parse_args()
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        sys.exit(f"unknown stage(s) {', '.join(unknown)}: choose from {', '.join(STAGES)}")
    for stage in stages:
        script, template = STAGES[stage]
        cmd = [sys.executable, str(HERE / script), "--preset", args.preset]
        if args.device and stage in NEEDS_DEVICE:
            cmd += ["--device", args.device]
        cmd += [a.format(work=args.work, out=args.out, parity=args.parity) for a in template]
        if stage == "prompts" and args.outside:
            cmd += ["--outside", str(args.outside)]
        log(f"stage {stage}: {' '.join(cmd[1:])}")
        start = time.monotonic()
        if subprocess.run(cmd).returncode != 0:
            sys.exit(f"stage {stage} failed (command: {' '.join(cmd)})")
        log(f"stage {stage} done in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
