#!/usr/bin/env bash
# train-smoke.sh keeps the training recipe alive in CI: every stage of
# train/run.py at the smoke preset (a 600 kB slice of the Go standard library,
# a 512-token BPE, a 4-layer target of hidden 64, drafts of a few steps) on
# the CPU into a temporary folder — corpus, tokenizer, target, regeneration,
# DFlash, DFlash2, evaluation, export, parity — then
# train/check_draft_fixtures.py (the training forward against z-lab's
# reference drafts), check_ids.py, check_rename.py and the parity of the shipped family
# (train/parity.py over models/go-tiny must reproduce
# testdata/fixtures/go-tiny). The Python environment is .deps/train-venv
# (scripts/train-env.sh: a few minutes the first time, then a stamp check).
#
#   scripts/train-smoke.sh          # part of make test
#   KEEP=1 scripts/train-smoke.sh   # keep the work folder
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
./scripts/train-env.sh
py="$root/.deps/train-venv/bin/python"
work="$(mktemp -d "${TMPDIR:-/tmp}/specula-train-smoke.XXXXXX")"
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$work"' EXIT
start=$(date +%s)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
log="$work/log.txt"
if ! "$py" train/run.py --preset smoke --work "$work" --out "$work/family" --parity "$work/parity" \
    --stages corpus,tokenizer,prompts,target,regenerate,dflash,dflash2,dflash2-refine,evaluate,export,parity \
    --outside "$root/tokenizer" >"$log" 2>&1; then
  cat "$log" >&2
  echo "train-smoke: a stage failed (log above; the work folder is $work with KEEP=1)" >&2
  exit 1
fi
for f in config.json tokenizer.json dflash/config.json dflash2/config.json family.json; do
  [ -f "$work/family/$f" ] || { cat "$log" >&2; echo "train-smoke: the export has no $f" >&2; exit 1; }
done
"$py" train/check_draft_fixtures.py >"$work/check.txt" 2>&1 || {
  cat "$work/check.txt" >&2; echo "train-smoke: train/check_draft_fixtures.py failed" >&2; exit 1; }
"$py" train/check_ids.py >"$work/ids.txt" 2>&1 || {
  cat "$work/ids.txt" >&2; echo "train-smoke: train/check_ids.py failed" >&2; exit 1; }
"$py" train/check_rename.py >"$work/rename.txt" 2>&1 || {
  cat "$work/rename.txt" >&2; echo "train-smoke: train/check_rename.py failed" >&2; exit 1; }
# The shipped family's parity fixture must be what train/parity.py computes
# now (numbers to float32 round-off; the files themselves may differ in order).
"$py" train/parity.py --family models/go-tiny --out "$work/shipped" >/dev/null 2>&1
"$py" - "$work/shipped" testdata/fixtures/go-tiny <<'PY'
import json, sys
import numpy as np
from safetensors.numpy import load_file
new, old = sys.argv[1], sys.argv[2]
a, b = json.load(open(f"{new}/reference.json")), json.load(open(f"{old}/reference.json"))
for k in ("prompt_ids", "anchor", "dflash_argmax", "dflash2_argmax", "dflash2_selector_path", "taps"):
    if a[k] != b[k]:
        sys.exit(f"train-smoke: {old}/reference.json: {k} is {b[k]}, train/parity.py now gives {a[k]}: rerun it (see its README)")
ta, tb = load_file(f"{new}/reference.safetensors"), load_file(f"{old}/reference.safetensors")
for k in sorted(tb):
    if ta[k].shape != tb[k].shape or not np.allclose(ta[k], tb[k], rtol=1e-4, atol=1e-4):
        sys.exit(f"train-smoke: {old}/reference.safetensors: {k} differs from what train/parity.py now computes: rerun it")
PY
echo "train-smoke: every stage ran; check_draft_fixtures, check_ids, check_rename and the go-tiny parity fixture agree ($(( $(date +%s) - start )) s)"
