#!/usr/bin/env python3
"""Load a checkpoint folder with mlx-lm and compare its prompt logits with a
reference (float32 compute on the CPU): the check that mlx-lm reads what
`specula quantize` writes as it reads its own conversions.

    mlx_lm_load_check.py CHECKPOINT_DIR REFERENCE.safetensors

REFERENCE holds prompt_ids [T] and logits [T, V] (testdata/fixtures/
qwen35-tiny-mlx*/reference.safetensors: mlx-lm's logits on its own
conversion). Prints one JSON object: max_abs_diff, argmax_equal, mlx and
mlx-lm versions. Exits 1 if mlx-lm fails to load the folder.
"""
import json
import sys

import mlx.core as mx
import mlx_lm
from mlx_lm.utils import load_model


def main():
    path, ref_path = sys.argv[1], sys.argv[2]
    ref = mx.load(ref_path)
    from pathlib import Path

    model, config = load_model(Path(path))
    model.set_dtype(mx.float32)
    logits = model(ref["prompt_ids"].astype(mx.int32)[None])[0].astype(mx.float32)
    want = ref["logits"].astype(mx.float32)
    diff = mx.abs(logits - want).max().item()
    same = bool(mx.all(logits.argmax(-1) == want.argmax(-1)).item())
    print(json.dumps({"max_abs_diff": diff, "argmax_equal": same, "quantization": config.get("quantization"),
                      "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__}))


if __name__ == "__main__":
    main()
