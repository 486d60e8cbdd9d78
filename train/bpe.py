"""Stage 2: a byte-level BPE tokenizer trained on the corpus's training split.

The pre-tokenizer is Qwen3.5's (its split pattern, then byte-level without a
second regex pass), so specula's tokenizer/ runs it unchanged. The special
tokens are added after training so they take the last ids, as Qwen's do:
<|endoftext|> ends every document and <|mask|> fills DFlash's draft blocks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import corpus
from common import SPECIAL_TOKENS, EOT, MASK, log, preset, write_json

QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train(docs: list[str], vocab_size: int) -> Tokenizer:
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=2,
        show_progress=False,
        # Every byte gets a token even if training never saw it; without this
        # unseen bytes are dropped at encode time.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, want {vocab_size}: corpus too small for this vocabulary")
    return tok


def save(tok: Tokenizer, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "bos_token": None,
        "eos_token": EOT,
        "pad_token": EOT,
        "mask_token": MASK,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="full")
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    p = preset(args.preset)
    docs = [d["text"] for d in corpus.read(args.corpus, "train")]
    tok = train(docs, p.vocab_size)
    save(tok, args.out)
    sample = "".join(docs[:200])
    ids = tok.encode(sample).ids
    log(f"tokenizer: {tok.get_vocab_size()} tokens, {len(sample) / max(len(ids), 1):.2f} chars/token on the first 200 files")


if __name__ == "__main__":
    main()
