#!/usr/bin/env bash
# bench-go-tiny.sh: `specula bench` of the go-tiny family on Go code outside
# the standard library it was trained on (testdata/go-prompts.txt, made by
# scripts/go-prompts.py from specula's own sources), for each draft: DFlash,
# DFlash2, and the ngram example plugin (prompt lookup, no weights) over the
# same target. Plain and speculative runs alternate inside each bench, so
# each draft's speedup comes from paired runs. One JSON report per draft
# goes to OUT, and a table to the terminal.
#
#   scripts/bench-go-tiny.sh [extra bench flags]
#   scripts/bench-go-tiny.sh --sweep --depths 1-7     # acceptance and speedup per depth
#
# Environment:
#   SPECULA    the binary (default build/specula; `make build` when missing)
#   PROMPTS    prompt file (default testdata/go-prompts.txt)
#   TOKENS     tokens per continuation (default 128: the loop split needs 64)
#   REPEATS    measured runs per prompt and mode (default 3)
#   FAMILY     the go-tiny folder (default models/go-tiny); the ngram
#              manifest's target
#   MANIFESTS  the draft manifests (default manifests/go-tiny-dflash.toml
#              manifests/go-tiny-dflash2.toml)
#   PLUGINS    folder of built plugins (default build/plugins; `make
#              plugins` when it has no ngram plugin); PLUGINS=none skips ngram
#   DTYPE      the ngram manifest's dtype (default float32, the family's own
#              manifests' on every device: manifests/go-tiny.toml says why)
#   OUT        reports (default build/bench-go-tiny)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
specula="${SPECULA:-$root/build/specula}"
prompts="${PROMPTS:-$root/testdata/go-prompts.txt}"
tokens="${TOKENS:-128}"
repeats="${REPEATS:-3}"
family="${FAMILY:-$root/models/go-tiny}"
manifests="${MANIFESTS:-$root/manifests/go-tiny-dflash.toml $root/manifests/go-tiny-dflash2.toml}"
plugins="${PLUGINS:-$root/build/plugins}"
out="${OUT:-$root/build/bench-go-tiny}"
mkdir -p "$out"
[ -x "$specula" ] || make build >&2
[ -f "$prompts" ] || { echo "bench-go-tiny: no prompt file $prompts (scripts/go-prompts.py writes it)" >&2; exit 2; }

bench() { # name manifest [flags]
  local name="$1" manifest="$2"
  shift 2
  echo "== $name ($manifest)" >&2
  "$specula" bench -m "$manifest" --prompts "$prompts" --max-tokens "$tokens" --repeats "$repeats" \
    --json --quiet "$@" > "$out/$name.json"
  echo "   $out/$name.json" >&2
}

for m in $manifests; do
  [ -f "$m" ] || { echo "bench-go-tiny: no manifest $m" >&2; exit 2; }
  bench "$(basename "$m" .toml)" "$m" "$@"
done

if [ "$plugins" != none ]; then
  ngram="$(ls "$plugins"/specula-plugin-ngram_v* 2>/dev/null | grep -v _SHA256SUM | head -n1 || true)"
  if [ -z "$ngram" ]; then
    make plugins >&2
    plugins="$root/build/plugins"
    ngram="$(ls "$plugins"/specula-plugin-ngram_v* | grep -v _SHA256SUM | head -n1)"
  fi
  [ -d "$family" ] || { echo "bench-go-tiny: no family folder $family (set FAMILY)" >&2; exit 2; }
  family="$(cd "$family" && pwd)"
  sum="$(cut -d' ' -f1 < "${ngram}_SHA256SUM")"
  mkdir -p "$out/ngram"
  echo '{}' > "$out/ngram/config.json"
  cat > "$out/ngram/go-tiny-ngram.toml" <<EOF
# Written by scripts/bench-go-tiny.sh: go-tiny's target with the ngram
# example plugin (prompt lookup) as its draft.
schema = 1
name = "go-tiny-ngram"

[target]
path = "$family"
capabilities = ["model", "draft-target"]
dtype = "${DTYPE:-float32}"

[draft]
path = "."
architecture = "NgramDraft"
capabilities = ["draft", "block-draft"]
weights = false
plugin = "ngram"
sha256 = "$sum"
EOF
  bench go-tiny-ngram "$out/ngram/go-tiny-ngram.toml" --plugin-dir "$plugins" "$@"
fi

# The table: one line per draft (and per depth with --sweep).
python3 - "$out" $( (for m in $manifests; do basename "$m" .toml; done; [ "$plugins" = none ] || echo go-tiny-ngram) ) <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print(f"{'draft':<16} {'mode':<12} {'tok/s':>8} {'speedup':>8} {'ideal':>7} {'accept':>7}  loop split (runs: accept len)")
for name in names:
    r = json.load(open(f"{out}/{name}.json"))
    rows = [r["plain"]] + ([r["speculative"]] if r.get("speculative") else []) + r.get("sweep", [])
    for m in rows:
        ls = m.get("loop_split")
        split = ""
        if ls:
            split = "looping {}: {:.2f}, other {}: {:.2f}".format(
                ls["looping"]["runs"], ls["looping"].get("mean_acceptance_length", 0),
                ls["non_looping"]["runs"], ls["non_looping"].get("mean_acceptance_length", 0))
        mp = m.get("matches_plain")
        if mp:
            split += f"; output differs from plain in {mp['differing']} of {mp['runs']} runs"
        speed = f"{m['speedup_over_plain']:.2f}x" if m.get("speedup_over_plain") else "-"
        # ideal: acceptance length × plain step / drafting round, the rate of the rounds alone.
        ideal = f"{m['ideal_speedup']:.2f}x" if m.get("ideal_speedup") else "-"
        accept = f"{m['mean_acceptance_length']:.2f}" if m.get("mean_acceptance_length") else "-"
        print(f"{name:<16} {m['mode']:<12} {m['tokens_per_second']['median']:>8.1f} {speed:>8} {ideal:>7} {accept:>7}  {split}")
PY
