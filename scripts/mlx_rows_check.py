#!/usr/bin/env python3
"""mlx_rows_check.py: does an MLX product give a row the same value whether it
is computed alone (a decoding step) or inside a block of rows (a verification)?

Speculative output equals plain output only if the target's forward of several
rows matches its one-row steps closely enough that no argmax (and no MoE
router's top-k) flips. This script compares, in float32 on every device MLX
has (the GPU first), a block of L rows against the same rows one at a time and
both against float64 numpy, for the products specula's targets run:

  products  x @ W.T (the projections); gather_mm on the unsorted path
            (x [1, L, 1, 1, H] against the k expert indices [1, L, k] of
            each row) and on the sorted path (the L*k row-expert pairs
            ordered by expert); the router's top-k from argpartition
  attention fast.scaled_dot_product_attention, end-aligned causal, with
            grouped query heads (16 over 2, 16 over 4, 8 over 2; head 256)

Run with MLX_ENABLE_TF32=0 to see float32 proper; MLX's CUDA default (TF32)
puts a dense product of several rows about 3e-4 off float64.

    python scripts/mlx_rows_check.py [products] [attention]     (default: both)
"""
import sys

import mlx.core as mx
import numpy as np


def rel(a, b):
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))


def check_products(rng):
    experts, k, hidden, inter = 256, 8, 2048, 512
    w = rng.standard_normal((experts, 2 * inter, hidden)).astype(np.float32) * 0.02
    router = rng.standard_normal((experts, hidden)).astype(np.float32) * 0.02
    dense_w = rng.standard_normal((512, hidden)).astype(np.float32) * 0.02
    gw, grouter, gdense = mx.array(w), mx.array(router), mx.array(dense_w)
    wt = mx.swapaxes(gw, -1, -2)
    for rows in (1, 2, 3, 4, 7, 8, 9, 16):
        x = rng.standard_normal((rows, hidden)).astype(np.float32)
        gx = mx.array(x)
        block = np.array(gx @ gdense.T)
        alone = np.concatenate([np.array(gx[i:i + 1] @ gdense.T) for i in range(rows)])
        ref = x.astype(np.float64) @ dense_w.T.astype(np.float64)

        top = np.array(mx.argpartition(-(gx @ grouter.T), k - 1, axis=-1)[:, :k])
        ref_top = np.argsort(-(x.astype(np.float64) @ router.T.astype(np.float64)), axis=-1)[:, :k]
        same_experts = all(set(top[i]) == set(ref_top[i]) for i in range(rows))

        idx = mx.array(ref_top.astype(np.uint32)).reshape(1, rows, k)
        unsorted = np.array(mx.gather_mm(gx.reshape(1, rows, 1, 1, hidden), wt, None, idx,
                                         sorted_indices=False)).reshape(rows, k, -1)
        unsorted_alone = np.concatenate([
            np.array(mx.gather_mm(gx[i].reshape(1, 1, 1, 1, hidden), wt, None, idx[:, i:i + 1],
                                  sorted_indices=False)).reshape(1, k, -1)
            for i in range(rows)])
        gather_ref = np.einsum("lh,lkoh->lko", x.astype(np.float64), w[ref_top].astype(np.float64))

        flat = ref_top.reshape(-1)
        order = np.argsort(flat, kind="stable")
        pairs = mx.array(x[order // k].reshape(rows * k, 1, hidden))
        out = np.array(mx.gather_mm(pairs, wt, None, mx.array(flat[order].astype(np.uint32)),
                                    sorted_indices=True)).reshape(rows * k, -1)
        sorted_out = np.empty_like(out)
        sorted_out[order] = out
        print(f"rows {rows:2d}  dense: block-vs-alone {rel(block, alone):.1e} block-vs-f64 {rel(block, ref):.1e} "
              f"alone-vs-f64 {rel(alone, ref):.1e} | top-{k} experts as float64's: {same_experts} | "
              f"gather unsorted: block-vs-alone {rel(unsorted, unsorted_alone):.1e} vs-f64 {rel(unsorted, gather_ref):.1e} | "
              f"gather sorted vs-f64 {rel(sorted_out.reshape(rows, k, -1), gather_ref):.1e}", flush=True)


def causal_reference(q, k, v, scale):
    heads, rows, dim = q.shape
    kv_heads, keys, _ = k.shape
    group = heads // kv_heads
    out = np.empty((heads, rows, dim))
    for h in range(heads):
        scores = (q[h].astype(np.float64) @ k[h // group].T.astype(np.float64)) * scale
        for i in range(rows):
            scores[i, keys - rows + i + 1:] = -np.inf
        p = np.exp(scores - scores.max(-1, keepdims=True))
        out[h] = (p / p.sum(-1, keepdims=True)) @ v[h // group].astype(np.float64)
    return out


def check_attention(rng):
    for heads, kv_heads, dim in ((16, 2, 256), (16, 4, 256), (8, 2, 256)):
        for keys in (24, 71):
            for rows in (1, 2, 4, 8):
                q = rng.standard_normal((heads, rows, dim)).astype(np.float32)
                k = rng.standard_normal((kv_heads, keys, dim)).astype(np.float32)
                v = rng.standard_normal((kv_heads, keys, dim)).astype(np.float32)
                scale = dim ** -0.5
                mq, mk, mv = mx.array(q)[None], mx.array(k)[None], mx.array(v)[None]
                block = np.array(mx.fast.scaled_dot_product_attention(
                    mq, mk, mv, scale=scale, mask="causal" if rows > 1 else None))[0]
                alone = np.concatenate([
                    np.array(mx.fast.scaled_dot_product_attention(
                        mq[:, :, i:i + 1], mk[:, :, :keys - rows + i + 1], mv[:, :, :keys - rows + i + 1],
                        scale=scale))[0]
                    for i in range(rows)], axis=1)
                ref = causal_reference(q, k, v, scale)
                print(f"attention {heads} over {kv_heads} heads of {dim}, {keys} keys, rows {rows}: "
                      f"block-vs-f64 {rel(block, ref):.1e} alone-vs-f64 {rel(alone, ref):.1e}", flush=True)


def main():
    wanted = set(sys.argv[1:]) or {"products", "attention"}
    unknown = wanted - {"products", "attention"}
    if unknown:
        sys.exit(f"mlx_rows_check: unknown check {sorted(unknown)} (want products, attention)")
    for device in (mx.gpu, mx.cpu):
        if not mx.is_available(device):
            continue
        mx.set_default_device(device)
        print(f"== {device} (mlx {mx.__version__})", flush=True)
        rng = np.random.default_rng(0)
        if "products" in wanted:
            check_products(rng)
        if "attention" in wanted:
            check_attention(rng)


if __name__ == "__main__":
    main()
