#!/usr/bin/env bash
# bench-moe.sh: the Qwen3.5 MoE measurements of docs/PERFORMANCE.md, on random
# weights with Qwen3.5-35B-A3B shapes (written by `specula synth`):
#
#   speed   plain greedy decode, bfloat16, LAYERS layers (default 16) and the
#           full vocabulary: specula against mlx-lm on the same checkpoint,
#           prompts and token counts in the same run, and each engine's
#           fraction of the bandwidth bound counting only the parameters a
#           token reads (scripts/bench-vs-mlx-lm.sh, BANDWIDTH);
#   oracle  the oracle depth sweep (`specula bench --oracle`): the target's
#           own greedy continuation as the draft at each depth, in float32
#           with TF32 off on ORACLE_LAYERS layers (default 8), where a
#           verification forward and single steps agree bit for bit (on
#           random bfloat16 weights near-tied logits flip between the two
#           and the replay is rejected; docs/PERFORMANCE.md).
#
#   scripts/bench-moe.sh [speed] [oracle]      (default: both)
#
# Environment: OUT (default .deps/bench/moe), LAYERS, ORACLE_LAYERS, TOKENS
# (default 128), REPEATS (default 3), DEPTHS (default 1,2,3,5,7,11,15),
# SHAPE (default 35B-A3B; a smaller one tries the script out) and VOCAB
# (default the release's 248320),
# SPECULA (default build/specula), PYTHON (mlx-lm's Python; see
# bench-vs-mlx-lm.sh), KEEP=1 keeps the checkpoints (each step removes its
# own when done: the speed checkpoint is 29 GB at 16 layers, the oracle one
# 28 GB at 8).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${OUT:-$root/.deps/bench/moe}"
specula="${SPECULA:-$root/build/specula}"
tokens="${TOKENS:-128}"
shape="${SHAPE:-35B-A3B}"
steps="${*:-speed oracle}"
mkdir -p "$out"
[ -x "$specula" ] || make build >&2

for step in $steps; do
  case "$step" in
  speed)
    OUT="$out/speed" DTYPE=bfloat16 TOKENS="$tokens" REPEATS="${REPEATS:-3}" SPECULA="$specula" VOCAB="${VOCAB:-0}" \
      "$root/scripts/bench-vs-mlx-lm.sh" "$shape" "${LAYERS:-16}"
    [ -n "${KEEP:-}" ] || rm -rf "$out/speed/target" "$out/speed/manifest.toml"
    ;;
  oracle)
    dir="$out/oracle"
    if [ ! -f "$dir/manifest.toml" ]; then
      rm -rf "$dir"
      "$specula" synth --shape "$shape" --layers "${ORACLE_LAYERS:-8}" --vocab "${VOCAB:-0}" --dtype float32 --out "$dir" >/dev/null
    fi
    # Three fixed prompts of 16, 32 and 64 random ids.
    vocab="$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$dir/target/config.json")"
    awk -v v="$vocab" 'BEGIN { srand(20261204); for (n = 16; n <= 64; n *= 2) { s = "["; for (i = 0; i < n; i++) s = s (i ? "," : "") int(rand() * (v - 1)); print s "]" } }' > "$dir/prompts.jsonl"
    MLX_ENABLE_TF32=0 "$specula" bench -m "$dir/manifest.toml" --prompts "$dir/prompts.jsonl" --max-tokens "$tokens" \
      --repeats 1 --oracle --depths "${DEPTHS:-1,2,3,5,7,11,15}" --quiet | tee "$dir/oracle.txt"
    [ -n "${KEEP:-}" ] || rm -rf "$dir/target" "$dir/manifest.toml"
    ;;
  *)
    echo "bench-moe: unknown step $step (want speed or oracle)" >&2
    exit 2
    ;;
  esac
done
