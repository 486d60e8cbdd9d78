"""Stage 3: the prompts the target will continue (drafts' data, evaluation).

A prompt is a window of `prompt_len` tokens holding no document boundary.

- train: windows of the training split; a `rename_fraction` of them come from
  a copy of the split whose identifiers were renamed (rename.py), so the
  drafts also learn the target's continuations of code whose names it has
  never seen — what it meets outside its corpus.
- eval: windows of the held-out packages.
- refine (refine_sequences > 0): more training-split windows, none of them a
  plain train window, and windows of a second renaming: DFlash2's refining
  pass learns from these.
- outside (with --outside DIR): windows of the .go files under DIR, code that
  is not the corpus at all, to report acceptance where users will run it.

Everything is written to WORK/prompts.npz (uint16 ids, uint32 for vocabularies
over 65,536) and WORK/prompts.json, a few
MB: the GPU stages need these and the target, not the corpus.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

import corpus
import rename
from common import EOT, id_dtype, log, preset, seed_everything, write_json


def prompt_starts(stream: np.ndarray, eot: int, count: int, length: int, rng: np.random.Generator,
                  exclude: np.ndarray | None = None) -> np.ndarray:
    """`count` distinct window starts whose windows hold no <|endoftext|>,
    none of them in `exclude`."""
    boundary = np.concatenate([[0], np.cumsum(stream == eot)])
    n = len(stream) - length + 1  # starts whose window fits
    ok = np.flatnonzero(boundary[length:length + n] == boundary[:n])
    if exclude is not None:
        ok = np.setdiff1d(ok, exclude, assume_unique=True)
    if len(ok) < count:
        raise SystemExit(f"prompts: only {len(ok)} windows of {length} tokens without a document boundary, "
                         f"{count} wanted; lower prompt_len or the count")
    return np.sort(rng.choice(ok, size=count, replace=False))


def encode(tok: Tokenizer, texts: list[str]) -> np.ndarray:
    """Documents as one stream of ids, each followed by <|endoftext|>."""
    eot = tok.token_to_id(EOT)
    dtype = id_dtype(tok.get_vocab_size())
    parts = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        parts.append(np.asarray(enc.ids, dtype=dtype))
        parts.append(np.asarray([eot], dtype=dtype))
    return np.concatenate(parts)


def windows(stream: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    idx = starts[:, None] + np.arange(length)[None, :]
    return stream[idx]


def outside_files(folder: Path) -> list[Path]:
    files = [f for f in folder.rglob("*.go") if f.is_file() and not f.name.endswith("_test.go")
             and "testdata" not in f.relative_to(folder).parts]
    return sorted(files, key=lambda f: f.relative_to(folder).as_posix())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="full")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--outside", type=Path, help="a folder of Go code outside the corpus: a third prompt set")
    args = ap.parse_args()
    p = preset(args.preset)
    seed_everything(p.seed)
    rng = np.random.default_rng(p.seed + 1)
    tok = Tokenizer.from_file(str(args.work / "tokenizer" / "tokenizer.json"))
    eot = tok.token_to_id(EOT)
    train_docs = [d["text"] for d in corpus.read(args.work / "corpus", "train")]
    heldout_docs = [d["text"] for d in corpus.read(args.work / "corpus", "heldout")]
    record = {"prompt_len": p.prompt_len, "sets": {}}
    sets = {}

    train_stream = encode(tok, train_docs)
    vocabulary = []  # the identifier pieces new names are built from, counted once

    def training_set(count: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """`count` shuffled windows of the training split, a rename_fraction of
        them from a fresh renaming of it; the plain windows' starts avoid
        `exclude`. Returns the windows, the plain starts and the renamed count."""
        renamed = int(round(count * p.rename_fraction))
        starts = prompt_starts(train_stream, eot, count - renamed, p.prompt_len, rng, exclude=exclude)
        parts = [windows(train_stream, starts, p.prompt_len)]
        if renamed:
            if not vocabulary:
                vocabulary.extend(rename.pieces(train_docs))
            renamer = rename.Renamer(vocabulary, p.rename_share, rng)
            stream = encode(tok, [renamer(t) for t in train_docs])
            parts.append(windows(stream, prompt_starts(stream, eot, renamed, p.prompt_len, rng), p.prompt_len))
        drawn = np.concatenate(parts)
        return drawn[rng.permutation(len(drawn))], starts, renamed

    sets["train"], plain_starts, renamed = training_set(p.regen_sequences)
    if renamed:
        log(f"prompts: {renamed} of {p.regen_sequences} training prompts from renamed documents "
            f"(share {p.rename_share} of each document's identifiers)")
    record["sets"]["train"] = {"count": p.regen_sequences, "renamed": renamed, "rename_share": p.rename_share}

    stream = encode(tok, heldout_docs)
    sets["eval"] = windows(stream, prompt_starts(stream, eot, p.eval_prompts, p.prompt_len, rng), p.prompt_len)
    record["sets"]["eval"] = {"count": p.eval_prompts, "source": "held-out packages"}

    if args.outside:
        files = outside_files(args.outside)
        if not files:
            raise SystemExit(f"prompts: no .go files under {args.outside}")
        texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
        digest = hashlib.sha256("\n".join(f.relative_to(args.outside).as_posix() for f in files).encode()).hexdigest()
        stream = encode(tok, texts)
        sets["outside"] = windows(stream, prompt_starts(stream, eot, p.eval_prompts, p.prompt_len, rng), p.prompt_len)
        record["sets"]["outside"] = {"count": p.eval_prompts, "source": args.outside.name, "files": len(files),
                                     "characters": sum(len(t) for t in texts), "file_list_sha256": digest,
                                     "chars_per_token": round(sum(len(t) for t in texts) / (len(stream) - len(files)), 2)}
    if p.refine_sequences:
        # Drawn last, so the sets above are the same with or without it.
        sets["refine"], _, renamed = training_set(p.refine_sequences, exclude=plain_starts)
        record["sets"]["refine"] = {"count": p.refine_sequences, "renamed": renamed, "rename_share": p.rename_share,
                                    "source": "training split: windows other than train's, a second renaming"}
    np.savez_compressed(args.work / "prompts.npz", **sets)
    write_json(args.work / "prompts.json", record)
    size = (args.work / "prompts.npz").stat().st_size
    log(f"prompts: {', '.join(f'{k} {v.shape[0]} x {v.shape[1]}' for k, v in sets.items())}; prompts.npz {size:,} bytes")


if __name__ == "__main__":
    main()
