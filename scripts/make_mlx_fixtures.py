#!/usr/bin/env python3
"""Make the MLX-format fixtures: mlx_lm.convert (with and without -q) run on
a tiny Qwen3.5 fixture (dense or MoE), and mlx-lm's own outputs on each
conversion as the expected values (float32 compute on the CPU).

    PY="$(scripts/mlx-lm-venv.sh)"
    "$PY" scripts/make_mlx_fixtures.py testdata/fixtures/qwen35-tiny OUT_DIR
    "$PY" scripts/make_mlx_fixtures.py testdata/fixtures/qwen35moe-tiny OUT_DIR

For every variant below (MOE_VARIANTS for the MoE fixture), OUT_DIR/
<fixture>-mlx[-<variant>]/ gets what
mlx_lm.convert wrote (config.json, model.safetensors,
model.safetensors.index.json; the throwaway tokenizer and the model card are
dropped) and reference.safetensors: prompt_ids [T] int32, logits [T, V] float32
(one uncached forward of the prompt), greedy_ids [N] int32 (greedy decoding
with mlx-lm's cache). The source differs from the fixture in one field:
model_type "qwen3_5" or "qwen3_5_moe" (mlx-lm has no "qwen3_5_text" or
"qwen3_5_moe_text"), and it gets a tiny word-level tokenizer because
mlx_lm.convert insists on one.
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx_lm
from mlx_lm.convert import convert
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model

# name -> mlx_lm.convert arguments. Bits, group sizes and modes cover what the
# parity tests need (4- and 8-bit affine, mxfp4, the unquantized MLX layout)
# and what MLX runs on the CPU (2, 3, 6 bits; nvfp4, mxfp8; bf16 scales).
# With hidden size 64, group size 128 only fits the layers whose input is 128
# wide (down_proj), so "q2-g128" is a partly quantized checkpoint.
VARIANTS = {
    "": dict(),
    "q4": dict(quantize=True, q_bits=4, q_group_size=64),
    "q8": dict(quantize=True, q_bits=8, q_group_size=32),
    "mxfp4": dict(quantize=True, q_mode="mxfp4"),
    "q3-g32": dict(quantize=True, q_bits=3, q_group_size=32),
    "q6": dict(quantize=True, q_bits=6, q_group_size=64),
    "q2-g128": dict(quantize=True, q_bits=2, q_group_size=128),
    "nvfp4": dict(quantize=True, q_mode="nvfp4"),
    "mxfp8": dict(quantize=True, q_mode="mxfp8"),
    "q4-bf16": dict(quantize=True, q_bits=4, q_group_size=64, dtype="bfloat16"),
}
# The MoE fixture (hidden 64, expert width 32): groups of 32 fit every
# expert projection; mlx-lm itself keeps the router and the shared-expert
# gate at 8 bits, group 64 (per-module overrides in config.json).
MOE_VARIANTS = {
    "q4-g32": dict(quantize=True, q_bits=4, q_group_size=32),
}
GREEDY_TOKENS = 32
KEEP = {"config.json", "model.safetensors", "model.safetensors.index.json"}


def tiny_tokenizer(dst: Path, vocab: int):
    """A word-level tokenizer over tokens t0 … t<vocab-1>: only so that
    mlx_lm.convert, which loads and saves a tokenizer, runs."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


def source(fixture: Path) -> Path:
    src = Path(tempfile.mkdtemp(prefix="qwen35-src-"))
    cfg = json.loads((fixture / "config.json").read_text())
    cfg["model_type"] = "qwen3_5_moe" if "moe" in cfg["model_type"] else "qwen3_5"
    (src / "config.json").write_text(json.dumps(cfg, indent=2))
    shutil.copy(fixture / "model.safetensors", src / "model.safetensors")
    tiny_tokenizer(src, cfg["vocab_size"])
    return src


def reference(path: Path, prompt):
    model, _ = load_model(path)
    model.set_dtype(mx.float32)  # float32 compute; quantized weights stay packed
    logits = model(mx.array([prompt]))[0].astype(mx.float32)
    greedy = []
    for tok, _ in generate_step(mx.array(prompt), model, max_tokens=GREEDY_TOKENS):
        greedy.append(int(tok))
    mx.eval(logits)
    return logits, greedy


def main():
    fixture, out = Path(sys.argv[1]), Path(sys.argv[2])
    prompt = json.loads((fixture / "reference.json").read_text())["prompt_ids"]
    src = source(fixture)
    moe = "moe" in json.loads((src / "config.json").read_text())["model_type"]
    try:
        for name, args in (MOE_VARIANTS if moe else VARIANTS).items():
            dst = out / (fixture.name + "-mlx" + (f"-{name}" if name else ""))
            if dst.exists():
                shutil.rmtree(dst)
            convert(str(src), str(dst), **args)
            for f in dst.iterdir():
                if f.name not in KEEP:
                    f.unlink()
            logits, greedy = reference(dst, prompt)
            mx.save_safetensors(str(dst / "reference.safetensors"), {
                "prompt_ids": mx.array(prompt, dtype=mx.int32),
                "logits": logits,
                "greedy_ids": mx.array(greedy, dtype=mx.int32),
            })
            print(f"{dst}: {args or 'no quantization'}; greedy {greedy[:8]}...")
    finally:
        shutil.rmtree(src)
    print(f"mlx {mx.__version__}, mlx-lm {mlx_lm.__version__}")


if __name__ == "__main__":
    main()
