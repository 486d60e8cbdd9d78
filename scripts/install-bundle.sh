#!/usr/bin/env bash
# install-bundle.sh installs a specula bundle made by `make bundle`, offline.
# Run it beside the bundle's files (SHA256SUMS, the .tar.xz archive or its
# .part-NNN pieces):
#
#   bash install-bundle.sh [PREFIX]      (default: $HOME/specula)
#
# It checks every part's sha256 and the reassembled archive's, unpacks into
# PREFIX (bin/specula, lib/specula/, share/specula/; an earlier install there
# is replaced), and for a CUDA bundle made with CUDA_RUNTIME=system links
# PREFIX/lib/specula/nvidia to this machine's CUDA 13 runtime: the folder
# SPECULA_CUDA_LIBS names, else the first site-packages/nvidia holding it (the
# Python of $PYTHON, python3, /usr/bin/python3, then the usual folders;
# PyTorch's CUDA 13 wheels bring it), completed by the bundle's nvidia-cuda-crt
# headers (runtime-libs.sh link). Then it checks that every library
# resolves and runs `specula archs` and a short `specula demo` (of the go-tiny
# family when the bundle has it, else --random; SELF_CHECK=0 skips it).
#
# Needs: bash, coreutils, tar, and xz or Python 3 (to decompress).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
prefix="${1:-$HOME/specula}"
sums="$here/SHA256SUMS"
if [ ! -f "$sums" ]; then
  echo "install-bundle: $sums is missing: run this script beside the bundle's files" >&2
  exit 1
fi
archive="$(awk '$2 ~ /\.tar\.xz$/ {print $2; exit}' "$sums")"
if [ -z "$archive" ]; then
  echo "install-bundle: $sums names no .tar.xz archive" >&2
  exit 1
fi
want="$(awk -v a="$archive" '$2 == a {print $1}' "$sums")"
cd "$here"

# The archive as one stream: the file itself, or its parts in order, each
# checked first.
mapfile -t parts < <(awk -v a="$archive.part-" 'index($2, a) == 1 {print $2}' "$sums" | sort)
if [ -f "$archive" ]; then
  sources=("$archive")
elif [ "${#parts[@]}" -gt 0 ]; then
  for p in "${parts[@]}"; do
    if [ ! -f "$p" ]; then
      echo "install-bundle: part $p is missing (the bundle has ${#parts[@]} parts)" >&2
      exit 1
    fi
  done
  echo "install-bundle: checking ${#parts[@]} parts"
  if ! grep -F "$archive.part-" "$sums" | sha256sum --quiet -c -; then
    echo "install-bundle: a part's sha256 differs from SHA256SUMS: carry it again" >&2
    exit 1
  fi
  sources=("${parts[@]}")
else
  echo "install-bundle: neither $archive nor its parts are here" >&2
  exit 1
fi
got="$(cat "${sources[@]}" | sha256sum | cut -d' ' -f1)"
if [ "$got" != "$want" ]; then
  echo "install-bundle: the archive's sha256 is $got, SHA256SUMS says $want" >&2
  exit 1
fi
echo "install-bundle: $archive: sha256 ok"

unxz() {
  if command -v xz >/dev/null 2>&1; then
    xz -dc
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'
  fi
}

mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
lib="$prefix/lib/specula"
rm -rf "$lib" "$prefix/share/specula" "$prefix/bin/specula"
cat "${sources[@]}" | unxz | tar -x -C "$prefix" --strip-components=1 --no-same-owner
echo "install-bundle: unpacked into $prefix"
sed 's/^/  /' "$lib/BUILD-INFO"

backend="$(sed -n 's/^backend=//p' "$lib/BUILD-INFO")"
runtime="$(sed -n 's/^cuda_runtime=//p' "$lib/BUILD-INFO")"
if [ "$backend" = cuda ] && [ ! -e "$lib/nvidia" ]; then
  if ! found="$("$lib/runtime-libs.sh" find)"; then
    echo "install-bundle: this bundle uses the machine's CUDA 13 runtime (made with CUDA_RUNTIME=$runtime)," >&2
    echo "  and none was found: set SPECULA_CUDA_LIBS to a folder laid out like <site-packages>/nvidia and rerun" >&2
    exit 1
  fi
  echo "install-bundle: CUDA runtime found: $found"
  ls -d "$found"/*/lib 2>/dev/null | sed 's/^/  /'
  # The machine's runtime, completed by the nvidia-cuda-crt headers the
  # bundle carries (runtime-libs.sh says why).
  "$lib/runtime-libs.sh" link "$found" "$lib/cuda-crt" "$lib/nvidia"
fi

mapfile -t plugins < <(find "$lib/plugins" -type f ! -name '*_SHA256SUM' | sort)
"$lib/runtime-libs.sh" check "$lib" "$prefix/bin/specula" "${plugins[@]}"

"$prefix/bin/specula" archs > /dev/null
echo "install-bundle: specula archs ok"
"$prefix/bin/specula" --version
if [ "${SELF_CHECK:-1}" != 0 ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  demo=(demo --random --dir "$tmp/demo" --max-tokens 16)
  if [ -f "$prefix/share/specula/models/go-tiny/config.json" ]; then
    demo=(demo --max-tokens 32 --repeats 1)
  fi
  echo "install-bundle: self-check: specula ${demo[*]} (the first run on a GPU compiles kernels: up to a minute)"
  if ! (cd "$tmp" && "$prefix/bin/specula" "${demo[@]}"); then
    echo "install-bundle: specula demo failed (above)" >&2
    exit 1
  fi
fi
echo "install-bundle: done. $prefix/bin/specula is ready (add $prefix/bin to PATH)."
echo "  manifests: $prefix/share/specula/manifests; plugins: --plugin-dir $lib/plugins"
[ -d "$prefix/share/specula/models" ] && echo "  models: $prefix/share/specula/models"
exit 0
