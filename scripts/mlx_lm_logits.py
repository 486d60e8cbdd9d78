#!/usr/bin/env python3
"""Prompt logits of mlx-lm on a checkpoint folder, saved like `specula
forward` saves its own (a float32 tensor "logits" [T, V]), so the two engines
can be compared on the same weights and ids:

    mlx_lm_logits.py CHECKPOINT_DIR --ids 1,2,3 [--dtype bfloat16] --out F.safetensors
    mlx_lm_logits.py --agree REF.safetensors A.safetensors [B.safetensors ...]

--dtype float32 casts the model's parameters to float32 before the forward
(after mlx-lm's loader has folded Qwen3.5's (1 + w) norms in the stored
dtype, so it is not a float32 reference for bfloat16 checkpoints: `specula
forward --dtype float32`, which folds in float32 as transformers does, is).
--agree prints, for each file against REF: the largest absolute logit
difference, and at how many positions the argmax equals REF's and, where it
does not, the gap between REF's top two logits there (a small gap means the
rows were near-tied, so rounding alone can flip them).
"""
import argparse
import shutil
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlx_lm_bench import prepare  # noqa: E402


def logits(checkpoint: Path, ids, dtype: str):
    from mlx_lm.utils import load_model

    path = prepare(checkpoint)
    model, _ = load_model(path)
    if path != checkpoint:
        shutil.rmtree(path)
    if dtype == "float32":
        model.set_dtype(mx.float32)
    out = model(mx.array([ids]))[0].astype(mx.float32)
    mx.eval(out)
    return out


def agree(ref_path: str, others):
    import numpy as np

    ref = np.array(mx.load(ref_path)["logits"].astype(mx.float32))
    top2 = np.sort(ref, axis=-1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    ref_arg = ref.argmax(-1)
    n = ref.shape[0]
    print(f"reference {ref_path}: {n} positions, top-1/top-2 gap median {np.median(gap):.4g}, min {gap.min():.4g}")
    for p in others:
        x = np.array(mx.load(p)["logits"].astype(mx.float32))
        same = ref_arg == x.argmax(-1)
        diff = np.abs(x - ref).max()
        flipped = ", ".join(f"{g:.3g}" for g in gap[~same])
        print(f"  {p}: max |dlogit| {diff:.4g}; argmax equal at {int(same.sum())}/{n} positions"
              + (f"; reference top-2 gaps where it differs: {flipped}" if flipped else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", nargs="?")
    ap.add_argument("--ids")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--out")
    ap.add_argument("--agree", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if args.agree:
        if len(args.agree) < 2:
            ap.error("--agree needs a reference and at least one file")
        agree(args.agree[0], args.agree[1:])
        return
    if not (args.checkpoint and args.ids and args.out):
        ap.error("CHECKPOINT_DIR, --ids and --out are required")
    if not args.out.endswith(".safetensors"):
        ap.error("--out must end in .safetensors (MLX would append the suffix)")
    ids = [int(t) for t in args.ids.split(",")]
    mx.save_safetensors(args.out, {"logits": logits(Path(args.checkpoint), ids, args.dtype)})
    print(f"wrote {args.out}: logits [{len(ids)}, V] from mlx-lm {mx.__version__} ({args.dtype})")


if __name__ == "__main__":
    main()
