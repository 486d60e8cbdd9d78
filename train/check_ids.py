"""Token ids keep their values through the recipe's arrays whatever the
vocabulary: uint16 for go-tiny's 8192, uint32 past 65,536 (the published
Qwen3.5 vocabulary is 248,320; uint16 would wrap its ids silently).

    python train/check_ids.py      # run by scripts/train-smoke.sh
"""

from __future__ import annotations

import sys

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

import prompts
from common import EOT, id_dtype


def word_tokenizer(size: int) -> Tokenizer:
    """A word-level tokenizer of `size` ids: w0 … w{size-2}, then <|endoftext|>."""
    vocab = {f"w{i}": i for i in range(size - 1)}
    vocab[EOT] = size - 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([EOT])
    return tok


def main() -> None:
    failures = []
    for size, want in ((8192, np.uint16), (65536, np.uint16), (65537, np.uint32), (248_320, np.uint32)):
        if id_dtype(size) is not want:
            failures.append(f"id_dtype({size}) = {id_dtype(size).__name__}, want {want.__name__}")
    tok = word_tokenizer(248_320)
    ids = [3, 65535, 65536, 70000, 248_318]
    stream = prompts.encode(tok, [" ".join(f"w{i}" for i in ids)])
    want = ids + [248_319]  # the document, then <|endoftext|>
    if stream.dtype != np.uint32 or stream.tolist() != want:
        failures.append(f"encode: {stream.dtype} {stream.tolist()}, want uint32 {want}")
    window = prompts.windows(stream, np.array([1]), 3)
    if window.tolist() != [ids[1:4]]:
        failures.append(f"windows: {window.tolist()}, want {[ids[1:4]]}")
    if failures:
        sys.exit("check_ids: " + "; ".join(failures))
    print("check_ids: token ids keep their values (uint16 to 65,536, uint32 beyond)")


if __name__ == "__main__":
    main()
