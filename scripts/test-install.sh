#!/usr/bin/env bash
# test-install.sh checks that an installed specula runs without the checkout
# it was built from (make test-install; make test runs it):
#
#   1. scripts/install.sh into a new temporary PREFIX, which is then moved
#      (the install must not depend on where it was put either);
#   2. the program's rpath must be $ORIGIN-relative only;
#   3. with the checkout hidden (a private mount namespace with an empty
#      folder over it, where unshare is allowed; everywhere, the dynamic
#      loader's log must show no file loaded from the checkout), from a
#      working folder outside it and an empty HOME:
#        specula archs                   lists the built-in architectures
#        specula plugins                 the installed example plugins start
#                                        and describe themselves (status ok)
#        specula run (fixture manifest)  the installed example manifest over
#                                        copies of testdata/fixtures: greedy
#                                        ids equal the fixture's reference
#                                        (transformers, float64)
#        specula demo --random           the random demo pair, outputs identical
#        specula demo                    the installed go-tiny family, when
#                                        models/ has its data
#
#   scripts/test-install.sh    KEEP=1 keeps the temporary folder; NO_UNSHARE=1
#                              checks by the loader's log alone
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

# The checks proper, run by the outer part (possibly inside unshare).
if [ "${1:-}" = --checks ]; then
  prefix="$2" work="$3"
  cd "$work"
  export HOME="$work/home"
  unset SPECULA_PLUGIN_PATH SPECULA_GO_TINY SPECULA_FIXTURES XDG_CONFIG_HOME XDG_CACHE_HOME
  mkdir -p "$HOME" "$work/ld"
  # The loader logs every file it loads, in the plugins' processes too.
  spec() { LD_DEBUG=files LD_DEBUG_OUTPUT="$work/ld/log" "$prefix/bin/specula" "$@"; }

  spec archs > archs.txt
  grep -q '^Qwen3_5ForCausalLM' archs.txt || { echo "specula archs does not list Qwen3_5ForCausalLM:"; cat archs.txt; exit 1; }
  echo "ok: specula archs ($(wc -l < archs.txt) lines)"

  spec plugins --plugin-dir "$prefix/lib/specula/plugins" --json > plugins.json
  python3 - plugins.json <<'PY'
import json, sys
found = json.load(open(sys.argv[1]))
bad = [p for p in found if p.get("status") != "ok"]
names = sorted(p.get("name") for p in found)
if len(found) < 2 or bad:
    sys.exit(f"installed plugins not usable: {json.dumps(found, indent=1)}")
print("ok: specula plugins:", ", ".join(names))
PY

  ref="$work/testdata/fixtures/qwen35-tiny/reference.json"
  ids="$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$ref")"
  spec run -m manifests/fixture-dflash.toml --ids "$ids" --max-tokens 32 --json > run.json 2> run.err ||
    { cat run.err; exit 1; }
  python3 - run.json "$ref" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))["ids"]
want = json.load(open(sys.argv[2]))["greedy_ids"][:32]
if got != want:
    sys.exit(f"specula run with fixture-dflash.toml: ids {got}, the fixture's greedy reference is {want}")
print(f"ok: specula run -m fixture-dflash.toml: {len(got)} ids equal the fixture's greedy reference")
PY

  spec demo --random --dir "$work/demo" --max-tokens 16 --json > demo.json 2> demo.err || { cat demo.err; exit 1; }
  grep -q '"identical": true' demo.json || { echo "specula demo --random: outputs not identical:"; cat demo.json; exit 1; }
  echo "ok: specula demo --random (speculative output identical to plain)"
  if [ -f "$prefix/share/specula/models/go-tiny/config.json" ]; then
    # The family is found beside the installed program, not in the checkout.
    spec demo --max-tokens 16 --repeats 1 --json > gotiny.json 2> gotiny.err || { cat gotiny.err; exit 1; }
    grep -q '"identical": true' gotiny.json || { echo "specula demo: outputs not identical:"; cat gotiny.json; exit 1; }
    echo "ok: specula demo (the installed go-tiny family; outputs identical)"
  else
    echo "note: no models/go-tiny data installed; specula demo of the family not run"
  fi

  if grep -l "$CHECKOUT" "$work"/ld/log.* >/dev/null 2>&1; then
    echo "the installed program loaded files from the checkout $CHECKOUT:"
    grep -h "file=$CHECKOUT" "$work"/ld/log.* | sort -u | head
    exit 1
  fi
  echo "ok: the dynamic loader loaded nothing from the checkout"
  exit 0
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/specula-install-test.XXXXXX")"
case "$tmp/" in
  "$root"/*) echo "test-install: TMPDIR is inside the checkout; set TMPDIR elsewhere" >&2; exit 2 ;;
esac
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$tmp"' EXIT; else echo "test-install: keeping $tmp"; fi

if ! "$root/scripts/install.sh" "$tmp/first" > "$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "test-install: scripts/install.sh failed" >&2
  exit 1
fi
mv "$tmp/first" "$tmp/prefix"
prefix="$tmp/prefix"
echo "ok: installed, then moved to $prefix"

# The installed program and plugins may name no folder but their own.
for f in "$prefix/bin/specula" $(find "$prefix/lib/specula/plugins" -type f ! -name '*_SHA256SUM'); do
  rp="$(readelf -d "$f" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\]/\2/p')"
  case "$rp" in
    '$ORIGIN/'*) ;;
    *) echo "test-install: $f has rpath '$rp'; want only \$ORIGIN-relative folders" >&2; exit 1 ;;
  esac
  case "$rp" in *:*) echo "test-install: $f has more than one rpath folder: '$rp'" >&2; exit 1 ;; esac
done
echo "ok: rpaths are \$ORIGIN-relative"

# A working folder with the installed example manifest over copies of the
# fixtures it names (paths are relative to the manifest's folder).
work="$tmp/work"
mkdir -p "$work/manifests" "$work/testdata/fixtures"
cp "$prefix/share/specula/manifests/fixture-dflash.toml" "$work/manifests/"
cp -R "$root/testdata/fixtures/qwen35-tiny" "$root/testdata/fixtures/dflash-tiny" "$work/testdata/fixtures/"

export CHECKOUT="$root"
self="$tmp/test-install.sh"
cp "$0" "$self"
if [ -z "${NO_UNSHARE:-}" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  echo "ok: checking with the checkout hidden (unshare -m, empty tmpfs over $root)"
  unshare -m bash -c 'mount -t tmpfs -o size=1m specula-hidden "$CHECKOUT" && exec bash "$0" --checks "$1" "$2"' \
    "$self" "$prefix" "$work"
else
  echo "note: cannot hide the checkout (unshare -m needs root); relying on the loader's log"
  bash "$self" --checks "$prefix" "$work"
fi
echo "test-install: passed"
