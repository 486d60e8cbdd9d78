#!/usr/bin/env bash
# bench-gpu-split.sh: issue 19's measurements in one run — plain decode and a
# depth-7 oracle round on random Qwen3.5 shapes, each with a switch on and off
# (VARY: the host/device pipelining, SPECULA_PIPELINE, by default; or the
# compiled segments of layers, VARY=SPECULA_SEGMENTS) or with two builds
# (SPECULA_B), the modes alternating, every bench with --split so each step
# and round is divided into host graph building, MLX submission and waiting
# on the device. Prints the host (GPU, CPU, load average) and one compact
# table; the JSON reports stay in OUT.
#
#   scripts/bench-gpu-split.sh [SHAPE ...]          # default: 0.8B 4B
#
# Environment:
#   SPECULA    the specula binary (default: `specula` on PATH, else build/specula)
#   DTYPE      synth's dtype (default bfloat16). On random bf16 weights the
#              oracle's drafts are mostly rejected (near-tied logits flip
#              between a one-token step and a verification forward), which
#              leaves the round's cost meaningful but not its speedup; use
#              DTYPE=float32 MLX_ENABLE_TF32=0 for an oracle that is accepted.
#   LAYERS     target layers (default 0: the release's)
#   VOCAB      vocabulary (default 0: the release's 248320)
#   TOKENS     new tokens per prompt (default 64); REPEATS runs per prompt
#              and mode inside one bench (default 2); ALTERNATE how many times
#              the on/off pair is repeated (default 2)
#   SPECULA_B  a second specula binary: when set, the two modes compared are
#              the binaries (SPECULA as A, SPECULA_B as B; VARY is not set),
#              alternated the same way — an A/B of two builds on one machine
#   VARY       the environment switch compared, set to 1 and 0 (default
#              SPECULA_PIPELINE; SPECULA_SEGMENTS compares the compiled
#              segments with the layer-by-layer graph)
#   VALUES     the two values VARY takes (default "1 0", shown as on/off),
#              e.g. VARY=SPECULA_ROWS_GEMV VALUES="1 verify"
#   DEPTH      the oracle's depth (default 7)
#   WARMUP     0 skips the short untimed bench of each mode before the runs
#   BANDWIDTH  bytes/s of the memory (default: the GPU's, from its name, see
#              scripts/gpu-bandwidth.sh; none for a GPU it does not know): the
#              table's "bw %" is tok/s × weight bytes / BANDWIDTH
#   OUT        folder for checkpoints and reports (default /tmp/specula-split);
#              KEEP=0 removes each shape's checkpoint after its runs
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
specula="${SPECULA:-}"
if [ -z "$specula" ]; then
  specula="$(command -v specula || true)"
  [ -n "$specula" ] || specula="$root/build/specula"
fi
[ -x "$specula" ] || { echo "bench-gpu-split: no specula binary at '$specula' (set SPECULA)" >&2; exit 2; }
dtype="${DTYPE:-bfloat16}"
layers="${LAYERS:-0}"
vocab="${VOCAB:-0}"
tokens="${TOKENS:-64}"
repeats="${REPEATS:-2}"
alternate="${ALTERNATE:-2}"
depth="${DEPTH:-7}"
vary="${VARY:-SPECULA_PIPELINE}"
read -r -a values <<< "${VALUES:-1 0}"
[ ${#values[@]} -eq 2 ] || { echo "bench-gpu-split: VALUES must hold two values, got '${VALUES:-}'" >&2; exit 2; }
specula_b="${SPECULA_B:-}"
if [ -n "$specula_b" ]; then
  [ -x "$specula_b" ] || { echo "bench-gpu-split: no specula binary at SPECULA_B='$specula_b'" >&2; exit 2; }
  vary=binary
  values=(1 0)
fi
out="${OUT:-/tmp/specula-split}"
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(0.8B 4B)
mkdir -p "$out"
python="$(command -v python3 || command -v python)"
"$specula" --version >&2 || true
# The host sets much of a step's pace (graph building, submission), and
# leases of one GPU kind differ in it: the table names the host and its load.
loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'; }
load_start="$(loadavg)"

# run_mode P ARGS...: specula in mode P — VARY set to P, or, comparing two
# binaries, binary A for 1 and B for 0.
run_mode() {
  local p="$1"
  shift
  if [ "$vary" != binary ]; then
    env "$vary=$p" "$specula" "$@"
  elif [ "$p" = 1 ]; then
    "$specula" "$@"
  else
    "$specula_b" "$@"
  fi
}

for shape in "${shapes[@]}"; do
  dir="$out/$shape-$dtype-$layers"
  if [ ! -f "$dir/manifest.toml" ]; then
    echo "bench-gpu-split: writing random $shape weights ($dtype) to $dir" >&2
    rm -rf "$dir"
    "$specula" synth --shape "$shape" --layers "$layers" --vocab "$vocab" --dtype "$dtype" --out "$dir" >/dev/null
  fi
  # Three fixed pseudo-random prompts of 16, 32 and 64 ids. (No --no-draft
  # below: it would turn the oracle off too; synth writes no draft.)
  "$python" - "$dir" <<'PY'
import json, random, sys, pathlib
d = pathlib.Path(sys.argv[1])
v = json.loads((d / "target" / "config.json").read_text())
v = v.get("text_config", v)["vocab_size"]
r = random.Random(20261204)
(d / "prompts.jsonl").write_text("".join(json.dumps([r.randrange(v) for _ in range(n)]) + "\n" for n in (16, 32, 64)))
PY
  # A short untimed bench of each mode first: the first bench after the
  # checkpoint was written ran slower in every phase (the host still busy
  # flushing it; 2026-12-06), and with two runs a mode's median is their mean.
  if [ "${WARMUP:-1}" != 0 ]; then
    for p in "${values[@]}"; do
      echo "bench-gpu-split: $shape, $vary=$p, warm-up" >&2
      run_mode "$p" bench -m "$dir/manifest.toml" --prompts "$dir/prompts.jsonl" \
        --max-tokens 8 --repeats 1 --oracle --depths "$depth" --json --quiet > /dev/null
    done
  fi
  for ((k = 1; k <= alternate; k++)); do
    # Alternate which mode goes first, so drift weighs on both.
    modes=("${values[0]}" "${values[1]}")
    [ $((k % 2)) -eq 0 ] && modes=("${values[1]}" "${values[0]}")
    for p in "${modes[@]}"; do
      echo "bench-gpu-split: $shape, $vary=$p, run $k/$alternate" >&2
      run_mode "$p" bench -m "$dir/manifest.toml" --prompts "$dir/prompts.jsonl" \
        --max-tokens "$tokens" --repeats "$repeats" --oracle --depths "$depth" \
        --split --json --quiet > "$dir/bench-$vary$p-run$k.json"
    done
  done
  # The table's "bw %" needs the weights' size after KEEP=0 removed them.
  stat -c %s "$dir"/target/*.safetensors | awk '{s += $1} END {print s}' > "$dir/weight-bytes"
  if [ "${KEEP:-1}" = 0 ]; then rm -rf "$dir/target"; fi
done

bandwidth="${BANDWIDTH:-$("$root/scripts/gpu-bandwidth.sh")}"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)"
cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
echo "host: ${gpu:-no NVIDIA GPU}; ${cpu:-CPU unknown}, $(nproc) cores; load average $load_start at the start, $(loadavg) at the end"
"$python" - "$out" "$dtype" "$layers" "$bandwidth" "$vary" "${values[0]}" "${values[1]}" "${shapes[@]}" <<'PY'
import json, sys, pathlib, statistics
out, dtype, layers, bw, vary = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4] or 0), sys.argv[5]
values = sys.argv[6:8]
shapes = sys.argv[8:]
med = statistics.median
print(f"random Qwen3.5 shapes, {dtype}, layers {'as released' if layers == '0' else layers}; ms are means per step/round after the first token,")
print("medians over the alternated runs; build = host graph building and token handling, sub = MLX submitting (encoding) kernels, wait = blocked on the device;")
print("differ = oracle runs whose output was not plain decoding's, of those compared (exactness: 0)")
head = ("shape", vary, "plain tok/s", "bw %", "step ms", "build/sub/wait", "oracle round ms", "build/sub/wait", "round/step", "accept len", "oracle tok/s", "differ", "step / round ms per run")
rows = [head]
for shape in shapes:
    d = out / f"{shape}-{dtype}-{layers}"
    sizes = d / "weight-bytes"
    wbytes = int(sizes.read_text().split()[0]) if sizes.exists() else 0
    for p in values:
        runs = [json.loads(f.read_text()) for f in sorted(d.glob(f"bench-{vary}{p}-run*.json"))]
        if not runs:
            continue
        def per_run(m, key):
            # Each run's value, NaN where a run had no round after its
            # first token (no split).
            v = [(r[m] if m == "plain" else r["oracle"][0]).get("host_device", {}).get(key) for r in runs]
            return [float("nan") if x is None else x for x in v]
        def hd(m, key):
            v = [x for x in per_run(m, key) if x == x]
            return med(v) if v else float("nan")
        tps = med([r["plain"]["tokens_per_second"]["median"] for r in runs])
        otps = med([r["oracle"][0]["tokens_per_second"]["median"] for r in runs])
        acc = med([r["oracle"][0].get("mean_acceptance_length", 0) for r in runs])
        step, rnd = hd("plain", "round_ms"), hd("oracle", "round_ms")
        split = lambda m: f"{hd(m, 'build_ms'):.2f}/{hd(m, 'submit_ms'):.2f}/{hd(m, 'wait_ms'):.2f}"
        if vary == "binary":
            mode = "A" if p == "1" else "B"
        elif values == ["1", "0"]:
            mode = "on" if p == "1" else "off"
        else:
            mode = p
        # Oracle runs whose output was not plain decoding's, of those checked.
        checks = [r["oracle"][0].get("matches_plain") or {} for r in runs]
        differ = f"{sum(c.get('differing', 0) for c in checks)}/{sum(c.get('runs', 0) for c in checks)}"
        # Each run's step and round, in run order: with two runs a median is
        # their mean, and one disturbed run moves it (a busy host after the
        # checkpoint was written); this column shows it.
        runs_ms = " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(per_run("plain", "round_ms"), per_run("oracle", "round_ms")))
        rows.append((shape, mode, f"{tps:.1f}", f"{100 * tps * wbytes / bw:.1f}" if wbytes and bw else "-",
                     f"{step:.2f}", split("plain"), f"{rnd:.2f}", split("oracle"), f"{rnd / step:.2f}" if step > 0 else "-", f"{acc:.2f}", f"{otps:.1f}", differ, runs_ms))
widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
for r in rows:
    print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
PY
