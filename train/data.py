"""Token streams: the corpus encoded once, documents joined by <|endoftext|>."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

import corpus
from common import EOT, log


def encode_split(tok: Tokenizer, corpus_dir: Path, split: str) -> tuple[np.ndarray, int]:
    """All documents of a split as one uint16 stream, each followed by
    <|endoftext|>; also returns the number of characters encoded."""
    docs = [d["text"] for d in corpus.read(corpus_dir, split)]
    eot = tok.token_to_id(EOT)
    parts = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        parts.append(np.asarray(enc.ids, dtype=np.uint16))
        parts.append(np.asarray([eot], dtype=np.uint16))
    return np.concatenate(parts), sum(len(d) for d in docs)


def streams(tok_dir: Path, corpus_dir: Path, cache: Path) -> dict:
    """The train and held-out streams, encoded on first use and cached as .npy."""
    cache.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    out = {}
    for split in ("train", "heldout"):
        path = cache / f"{split}.npy"
        chars_path = cache / f"{split}.chars"
        if not path.exists():
            ids, chars = encode_split(tok, corpus_dir, split)
            np.save(path, ids)
            chars_path.write_text(str(chars))
        out[split] = np.load(path)
        out[split + "_chars"] = int(chars_path.read_text())
        log(f"{split}: {len(out[split]):,} tokens, {out[split + '_chars'] / len(out[split]):.2f} chars/token")
    return out


def windows(stream: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Rows stream[s : s+length] for each start, as int64."""
    idx = starts[:, None] + np.arange(length)[None, :]
    return stream[idx].astype(np.int64)
