#!/usr/bin/env python3
"""Plain greedy decode speed of mlx-lm on a checkpoint folder, for comparison
with `specula bench` on the same weights, prompts and token counts.

    mlx_lm_bench.py CHECKPOINT_DIR --prompts prompts.jsonl --max-tokens 64 \
        [--repeats 3] [--warmup 1] [--json]

prompts.jsonl holds one JSON array of token ids per line. The checkpoint is
the Hugging Face layout specula reads; mlx-lm's own loader converts it
(sanitize: conv layout, norm offsets). Tokens/s counts the tokens after the
first one, divided by the time from the first token to the last, as specula
does.
"""
import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model


# transformers saves text-only checkpoints under model types mlx-lm does not
# know; its modules are the ones without "_text".
MLX_LM_MODEL_TYPES = {"qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}


def prepare(src: Path) -> Path:
    """mlx-lm maps model_type "qwen3_5" ("qwen3_5_moe") to its Qwen3.5
    (MoE) module; transformers saves text-only checkpoints as
    "qwen3_5_text" ("qwen3_5_moe_text"). Copy the config with the name
    mlx-lm knows and link the weights."""
    cfg = json.loads((src / "config.json").read_text())
    if cfg.get("model_type") not in MLX_LM_MODEL_TYPES:
        return src
    dst = Path(tempfile.mkdtemp(prefix="mlxlm-"))
    cfg["model_type"] = MLX_LM_MODEL_TYPES[cfg["model_type"]]
    (dst / "config.json").write_text(json.dumps(cfg))
    for f in src.iterdir():
        if f.suffix == ".safetensors" or f.name.endswith(".index.json"):
            (dst / f.name).symlink_to(f.resolve())
    return dst


def run(model, prompt, max_tokens):
    """Greedy decode; returns (token ids, first-token time, decode time)."""
    start = time.perf_counter()
    ids, first = [], None
    for tok, _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens):
        t = tok.item() if hasattr(tok, "item") else int(tok)
        if first is None:
            first = time.perf_counter()
        ids.append(t)
    end = time.perf_counter()
    return ids, first - start, end - first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    prompts = [json.loads(l) for l in Path(args.prompts).read_text().splitlines() if l.strip()]
    path = prepare(Path(args.checkpoint))
    t0 = time.perf_counter()
    model, _ = load_model(path)
    mx.eval(model.parameters())
    load_s = time.perf_counter() - t0
    if path != Path(args.checkpoint):
        shutil.rmtree(path)

    for i in range(args.warmup):
        run(model, prompts[i % len(prompts)], args.max_tokens)
    tps, ttft, outputs = [], [], []
    for r in range(args.repeats):
        for p in prompts:
            ids, first, decode = run(model, p, args.max_tokens)
            if r == 0:
                outputs.append(ids)
            if len(ids) > 1 and decode > 0:
                tps.append((len(ids) - 1) / decode)
            ttft.append(first * 1000)
    res = {
        "engine": "mlx-lm",
        "mlx_version": mx.__version__,
        "device": str(mx.default_device()),
        "load_s": load_s,
        "runs": len(tps),
        "tokens_per_second": {"median": statistics.median(tps), "min": min(tps), "max": max(tps)},
        "first_token_ms": {"median": statistics.median(ttft)},
        "outputs": outputs,
    }
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        print()
    else:
        t = res["tokens_per_second"]
        print(f"mlx-lm {mx.__version__} on {res['device']}: {t['median']:.1f} tok/s (median; min {t['min']:.1f}, max {t['max']:.1f}) over {len(tps)} runs")


if __name__ == "__main__":
    main()
