#!/usr/bin/env bash
# bundle.sh writes an offline bundle of specula for a machine without network
# access (make bundle): what scripts/install.sh installs (the program, its
# MLX/OpenBLAS libraries, the CUDA runtime unless CUDA_RUNTIME=system, the
# example plugins and manifests, models/), as one xz-compressed tar archive or
# as parts of PART_SIZE bytes (split's sizes: 50M, 60M, 1G), with
#
#   SHA256SUMS          the sha256 of the archive and of each part
#   install-bundle.sh   reassembles the parts, checks the sums, unpacks into a
#                       prefix, links the machine's CUDA runtime when the
#                       bundle has none, and runs a self-check
#
# into build/bundle/ (BUNDLE_DIR to change). Carry that folder's files and run
# `bash install-bundle.sh PREFIX` beside them. The backend is the one .deps/
# holds: MLX_BACKEND=cuda CUDA_RUNTIME=system make deps first for a GPU
# machine whose Python already has the CUDA 13 wheels (PyTorch's).
#
#   make bundle [PART_SIZE=50M] [XZ_LEVEL=9] [MODELS=0]
#
# MODELS=0 leaves models/ out (about 35 MB less): for a machine that has the
# checkout, such as the device tool's, whose manifests/ find ../models there.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${BUNDLE_DIR:-$root/build/bundle}"
part="${PART_SIZE:-}"
level="${XZ_LEVEL:-9}"
if ! command -v xz >/dev/null 2>&1; then
  echo "bundle: xz is needed to compress the bundle" >&2
  exit 1
fi

want="$(head -n1 "$root/.deps/mlx.stamp" 2>/dev/null || true)"
case "$want" in
  mlx-cpu==*) backend=cpu ;;
  mlx-cuda-13==*) backend=cuda ;;
  *) echo "bundle: .deps/ holds no MLX: run make deps (MLX_BACKEND=cuda for a GPU machine)" >&2; exit 1 ;;
esac
flavour="$backend"
if [ "$backend" = cuda ] && [ "$(cat "$root/.deps/cuda-runtime" 2>/dev/null || echo wheels)" = system ]; then
  flavour="cuda-sysruntime"
fi
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
name="specula-$commit-linux-amd64-$flavour"

rm -rf "$out"
mkdir -p "$out/.stage"
stage="$out/.stage/$name"
if ! BUNDLE=1 "$root/scripts/install.sh" "$stage" > "$out/.stage/install.log" 2>&1; then
  cat "$out/.stage/install.log"
  echo "bundle: scripts/install.sh failed" >&2
  exit 1
fi
sed 's/^/  /' "$out/.stage/install.log" | grep -v '^  install: done\|^  *plugins: --plugin-dir' || true

archive="$name.tar.xz"
echo "bundle: compressing $(du -sh "$stage" | cut -f1) with xz -$level"
tar -C "$out/.stage" --owner=0 --group=0 -cf - "$name" | xz -T0 "-$level" > "$out/$archive"
rm -rf "$out/.stage"

(
  cd "$out"
  sha256sum "$archive" > SHA256SUMS
  if [ -n "$part" ]; then
    split -b "$part" -d -a 3 "$archive" "$archive.part-"
    rm "$archive"
    sha256sum "$archive".part-* >> SHA256SUMS
  fi
)
cp "$root/scripts/install-bundle.sh" "$out/"
echo "bundle: $out"
(cd "$out" && ls -l --block-size=K SHA256SUMS install-bundle.sh "$archive"* | awk '{print "  " $5 "\t" $9}')
echo "bundle: carry these files; on the other machine: bash install-bundle.sh PREFIX"
