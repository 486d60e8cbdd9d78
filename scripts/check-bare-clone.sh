#!/usr/bin/env bash
# check-bare-clone.sh proves that the repository alone is enough: it clones
# the committed HEAD into an empty temporary folder (no ../shared beside it),
# and runs `make test` and then `make demo` there with an empty HOME, an empty
# Go build cache and module cache, and no SPECULA_* settings, as a new user
# would. Everything the tests need must come from the clone or from
# `make deps` (pip, npm and the Go module proxy).
#
#   scripts/check-bare-clone.sh [REPO]   REPO: a path or URL (default: this
#                                        checkout; uncommitted changes are
#                                        not part of a clone)
#   KEEP=1        keep the temporary folder (the clone, its .deps/, the log)
#   TARGETS=...   the make targets to run (default: "test demo")
#
# It takes long (a cold Go build of the cgo packages, every test, the short
# fuzz runs): about 10 minutes on a 2-core machine. make test does not run it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
repo="${1:-$root}"
targets="${TARGETS:-test demo}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/specula-bare-clone.XXXXXX")"
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$tmp"' EXIT; else echo "check-bare-clone: keeping $tmp"; fi

mkdir -p "$tmp/home" "$tmp/gocache" "$tmp/parent"
git clone --quiet "$repo" "$tmp/parent/specula"
echo "check-bare-clone: cloned $repo at $(git -C "$tmp/parent/specula" rev-parse --short HEAD) into $tmp/parent/specula"
if [ -e "$tmp/parent/shared" ]; then
  echo "check-bare-clone: $tmp/parent/shared exists; the check needs no shared folder beside the clone" >&2
  exit 1
fi

# A clean environment: only PATH (to find go, python3, npm, g++), a C locale
# and the temporary folders.
log="$tmp/make.log"
start=$(date +%s)
status=0
env -i PATH="$PATH" LANG=C.UTF-8 TERM=dumb TMPDIR="${TMPDIR:-/tmp}" \
  HOME="$tmp/home" GOCACHE="$tmp/gocache" GOPATH="$tmp/home/go" \
  bash -c 'cd "$1" && for t in $2; do echo "== make $t"; make "$t" || exit 1; done' _ "$tmp/parent/specula" "$targets" \
  > "$log" 2>&1 || status=$?
took=$(( $(date +%s) - start ))
if [ "$status" != 0 ]; then
  tail -n 60 "$log"
  echo "check-bare-clone: FAILED after ${took}s (make $targets; full log: $log${KEEP:+, kept})" >&2
  exit 1
fi
grep -E '^(== make|ok |FAIL|--- FAIL|test-install:|The outputs are identical)' "$log" | tail -n 80
echo "check-bare-clone: passed in ${took}s (make $targets in a bare clone)"
