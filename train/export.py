"""Stage 9: assemble the family folder that ships in the repository.

    OUT/                target (config.json, bfloat16 shards + index), tokenizer files
    OUT/dflash/         DFlash draft
    OUT/dflash2/        DFlash2 draft
    OUT/family.json     every stage's record: data, parameters, tokens, times, losses, acceptance

It refuses a family larger than 40 MB or with a file over 16 MiB, the limits
of the repository and of the device tool's transfers.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from common import log, preset, read_json, write_json

MAX_FAMILY_BYTES = 40_000_000
MAX_FILE_BYTES = 16 << 20
RECORDS = ("corpus/corpus.json", "prompts.json", "target-train.json", "dflash-train.json", "dflash2-train.json",
           "dflash2-refine-train.json", "eval.json")


def copy_checkpoint(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.suffix in (".json", ".safetensors") and not f.name.endswith(".tmp"):
            shutil.copyfile(f, dst / f.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="full")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    p = preset(args.preset)
    tmp = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    copy_checkpoint(args.work / "target", tmp)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(args.work / "tokenizer" / name, tmp / name)
    for kind in ("dflash", "dflash2"):
        copy_checkpoint(args.work / kind, tmp / kind)
    family = {"preset": p.to_json()}
    for rel in RECORDS:
        path = args.work / rel
        if path.exists():
            family[Path(rel).stem] = read_json(path)
    write_json(tmp / "family.json", family)
    files = [f for f in tmp.rglob("*") if f.is_file()]
    total = sum(f.stat().st_size for f in files)
    big = [f"{f.relative_to(tmp)} ({f.stat().st_size:,} bytes)" for f in files if f.stat().st_size > MAX_FILE_BYTES]
    if big:
        raise SystemExit(f"export: files over 16 MiB: {', '.join(big)}; lower the shard size")
    if total > MAX_FAMILY_BYTES:
        raise SystemExit(f"export: the family is {total:,} bytes, over the 40 MB limit; shrink the preset's shapes")
    for f in files:
        f.chmod(0o644)
    # Keep what is not ours (the model card, Go sources) and replace the rest.
    if args.out.exists():
        for f in args.out.rglob("*"):
            if f.is_file() and (f.suffix in (".json", ".safetensors")):
                f.unlink()
    args.out.mkdir(parents=True, exist_ok=True)
    for f in files:
        dst = args.out / f.relative_to(tmp)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f, dst)
    shutil.rmtree(tmp)
    log(f"export: {len(files)} files, {total:,} bytes in {args.out}")


if __name__ == "__main__":
    main()
