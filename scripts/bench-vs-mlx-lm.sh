#!/usr/bin/env bash
# bench-vs-mlx-lm.sh: plain greedy decode speed of specula and mlx-lm on the
# same random Qwen3.5 weights, prompts and token counts, in one run on one
# machine; prints both and the ratio specula / mlx-lm, and whether the two
# greedy outputs agree.
#
#   scripts/bench-vs-mlx-lm.sh [SHAPE] [LAYERS]
#
# SHAPE is a released size whose layer shapes to use (0.8B, 4B, 27B, or the
# mixture-of-experts 35B-A3B, 122B-A10B, 397B-A17B; default 0.8B), LAYERS the
# number of layers (default: the release's). Environment:
#   DTYPE=float32|bfloat16 (default float32 on CPU, bfloat16 on a GPU build)
#   VOCAB=n (default 248320), TOKENS=n (default 64), REPEATS=n (default 3)
#   PYTHON=python with mlx-lm importable; otherwise scripts/mlx-lm-venv.sh
#     makes .deps/mlx-lm-venv (mlx-lm 0.32.2 on mlx[cpu] 0.32.4)
#   OUT=folder for the JSON results (default .deps/bench/<shape>)
#   QUANT="--bits 4" (any `specula quantize` flags): both engines run the
#     MLX-format checkpoint `specula quantize` writes from the synth target
#     (mlx-lm loads it as it loads mlx-community checkpoints); the summary
#     adds the checkpoint's bytes, which every decoded token reads once.
#   BANDWIDTH=bytes/s (default on a GPU: its rate from its name, see
#     scripts/gpu-bandwidth.sh; a GPU it does not know gives no fraction; none on the
#     CPU): the summary gives each engine's fraction of the bandwidth bound,
#     tok/s × active bytes / BANDWIDTH, where the active bytes are what one
#     decoded token reads: every weight but the experts it is not routed to
#     (num_experts_per_tok of num_experts) and all but one row of an untied
#     embedding table.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
shape="${1:-0.8B}"
layers="${2:-0}"
tokens="${TOKENS:-64}"
repeats="${REPEATS:-3}"
vocab="${VOCAB:-0}"
out="${OUT:-$root/.deps/bench/$shape-$layers}"
specula="${SPECULA:-$root/build/specula}"
mkdir -p "$out"

[ -x "$specula" ] || make build >&2
if [ -z "${PYTHON:-}" ]; then
  PYTHON="$("$root/scripts/mlx-lm-venv.sh")"
fi
dtype="${DTYPE:-}"
if [ -z "$dtype" ]; then
  if "$PYTHON" -c 'import mlx.core as mx, sys; sys.exit(0 if mx.is_available(mx.gpu) else 1)' 2>/dev/null; then dtype=bfloat16; else dtype=float32; fi
fi

if [ ! -f "$out/manifest.toml" ]; then
  "$specula" synth --shape "$shape" --layers "$layers" --vocab "$vocab" --dtype "$dtype" --out "$out" >/dev/null
fi
# Fixed pseudo-random prompts of 16, 32 and 64 ids, shared by both engines.
"$PYTHON" - "$out/manifest.toml" "$out/prompts.jsonl" <<'PY'
import json, random, sys, pathlib
cfg = json.loads((pathlib.Path(sys.argv[1]).parent / "target" / "config.json").read_text())
r = random.Random(20261202)
with open(sys.argv[2], "w") as f:
    for n in (16, 32, 64):
        f.write(json.dumps([r.randrange(cfg["vocab_size"]) for _ in range(n)]) + "\n")
PY

target="$out/target"
manifest="$out/manifest.toml"
if [ -n "${QUANT:-}" ]; then
  qname="target-$(echo "$QUANT" | tr -cd 'a-z0-9')"
  target="$out/$qname"
  # shellcheck disable=SC2086
  [ -d "$target" ] || "$specula" quantize "$out/target" "$target" $QUANT >&2
  manifest="$out/manifest-$qname.toml"
  sed "s#\"target\"#\"$qname\"#" "$out/manifest.toml" > "$manifest"
  grep -q "$qname" "$manifest" || { echo "bench-vs-mlx-lm: could not point the manifest at $qname" >&2; exit 1; }
fi

"$specula" bench -m "$manifest" --prompts "$out/prompts.jsonl" --max-tokens "$tokens" --repeats "$repeats" --no-draft --json --quiet > "$out/specula.json"
"$PYTHON" "$root/scripts/mlx_lm_bench.py" "$target" --prompts "$out/prompts.jsonl" --max-tokens "$tokens" --repeats "$repeats" --json > "$out/mlx_lm.json"

# Greedy outputs of both engines for the first prompt, for the agreement check.
first="$(head -n1 "$out/prompts.jsonl" | tr -d '[] ')"
"$specula" run -m "$manifest" --ids "$first" --max-tokens "$tokens" --json --quiet > "$out/specula_run.json"

# The GPU's rate by its name, looked up only when BANDWIDTH does not set one
# (an unknown GPU's lookup asks for BANDWIDTH on stderr).
gpu_bandwidth="$([ -n "${BANDWIDTH:-}" ] || "$root/scripts/gpu-bandwidth.sh")"
"$PYTHON" - "$out" "$shape" "$layers" "$dtype" "$target" "${QUANT:-}" "${BANDWIDTH:-}" "$gpu_bandwidth" <<'PY'
import json, struct, sys, pathlib
out = pathlib.Path(sys.argv[1])
target = pathlib.Path(sys.argv[5])
weights = sum(f.stat().st_size for f in target.glob("*.safetensors"))

def active_bytes(folder):
    """Bytes one decoded token reads: the stored tensors, routed experts
    scaled by top-k / experts, an untied embedding table by one row."""
    cfg = json.loads((folder / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    experts, top_k = text.get("num_experts", 0), text.get("num_experts_per_tok", 0)
    tied = text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
    total = 0
    for f in folder.glob("*.safetensors"):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            size = t["data_offsets"][1] - t["data_offsets"][0]
            rows = t["shape"][0] if t["shape"] else 1
            if experts and (".experts." in name or ".switch_mlp." in name):
                size = size * top_k // experts
            elif name.endswith("embed_tokens.weight") or name.endswith("embed_tokens.scales") or name.endswith("embed_tokens.biases"):
                if not tied:
                    size //= rows
            total += size
    return total

active = active_bytes(target)
s = json.loads((out / "specula.json").read_text())["plain"]["tokens_per_second"]
m = json.loads((out / "mlx_lm.json").read_text())
ids_s = json.loads((out / "specula_run.json").read_text())["ids"]
ids_m = m["outputs"][0]
agree = ids_s == ids_m[: len(ids_s)]
print(f"Qwen3.5-{sys.argv[2]} shapes, layers {sys.argv[3] if sys.argv[3] != '0' else 'as released'}, {sys.argv[4]}, {m['device']}"
      + (f", quantized ({sys.argv[6]})" if sys.argv[6] else "") + f"; checkpoint {weights / 2**30:.2f} GiB, {active / 2**30:.2f} GiB read per token")
print(f"  specula: {s['median']:.1f} tok/s (min {s['min']:.1f}, max {s['max']:.1f})")
print(f"  mlx-lm:  {m['tokens_per_second']['median']:.1f} tok/s (min {m['tokens_per_second']['min']:.1f}, max {m['tokens_per_second']['max']:.1f}), mlx {m['mlx_version']}")
print(f"  ratio specula / mlx-lm: {s['median'] / m['tokens_per_second']['median']:.2f}")
print(f"  greedy outputs agree: {'yes' if agree else 'NO'}")
bandwidth = float(sys.argv[7]) if sys.argv[7] else (float(sys.argv[8]) if sys.argv[8] and "gpu" in str(m["device"]).lower() else 0)
fractions = {}
if bandwidth:
    for name, tps in (("specula", s["median"]), ("mlx-lm", m["tokens_per_second"]["median"])):
        fractions[name] = tps * active / bandwidth
    print(f"  fraction of the bandwidth bound ({bandwidth / 1e12:.1f} TB/s, {bandwidth / active:.0f} tok/s at {active / 1e9:.2f} GB per token): "
          + ", ".join(f"{k} {v * 100:.1f} %" for k, v in fractions.items()))
json.dump({"shape": sys.argv[2], "layers": sys.argv[3], "dtype": sys.argv[4], "device": m["device"],
           "quant": sys.argv[6], "checkpoint_bytes": weights, "active_bytes": active,
           "bandwidth": bandwidth, "bandwidth_fraction": fractions,
           "specula_tps": s, "mlx_lm_tps": m["tokens_per_second"], "ratio": s["median"] / m["tokens_per_second"]["median"],
           "greedy_agree": agree}, open(out / ("summary" + ("-" + target.name if sys.argv[6] else "") + ".json"), "w"), indent=2)
PY
