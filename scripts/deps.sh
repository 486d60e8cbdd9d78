#!/usr/bin/env bash
# deps.sh fetches the pinned MLX Linux wheel with pip (download only) and unpacks
# its headers and libmlx.so into .deps/, laid out like a site-packages folder so
# the RPATH baked into libmlx.so ($ORIGIN/../../<dist>.libs or ../../nvidia/...)
# resolves. It is idempotent: a stamp file records what was unpacked.
#
#   MLX_BACKEND=cpu (default) -> mlx-cpu==$MLX_VERSION
#   MLX_BACKEND=cuda          -> mlx-cuda-13==$MLX_VERSION (the nvidia-* runtime
#                                wheels it needs must come from the host's Python
#                                or be unpacked beside it; see docs/PERFORMANCE.md)
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
# scipy-openblas32 is OpenBLAS built for SciPy (symbols prefixed scipy_); the
# shim routes MLX's CPU matmuls to it (mlx/shim/blas.cpp): about 50x the
# reference BLAS the mlx-cpu wheel bundles.
OPENBLAS_VERSION="${OPENBLAS_VERSION:-0.3.34.481.3}"
MLX_BACKEND="${MLX_BACKEND:-cpu}"
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/.deps"
case "$MLX_BACKEND" in
  cpu) dist="mlx-cpu" ;;
  cuda) dist="mlx-cuda-13" ;;
  *) echo "deps: MLX_BACKEND must be cpu or cuda, not '$MLX_BACKEND'" >&2; exit 2 ;;
esac
want="$dist==$MLX_VERSION"
stamp="$deps/mlx.stamp"

fetch_openblas() {
  local lib="$deps/openblas/libscipy_openblas.so" ob="$deps/openblas/version"
  if [ -f "$lib" ] && [ "$(cat "$ob" 2>/dev/null)" = "$OPENBLAS_VERSION" ]; then
    return 0
  fi
  mkdir -p "$deps/wheels" "$deps/openblas"
  local wheel
  wheel="$(ls "$deps"/wheels/scipy_openblas32-"$OPENBLAS_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ]; then
    echo "deps: downloading scipy-openblas32==$OPENBLAS_VERSION with pip (download only)"
    if ! "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 \
        -d "$deps/wheels" "scipy-openblas32==$OPENBLAS_VERSION" >&2; then
      echo "deps: warning: could not download OpenBLAS; CPU matmuls use MLX's bundled reference BLAS (slow)" >&2
      return 0
    fi
    wheel="$(ls "$deps"/wheels/scipy_openblas32-"$OPENBLAS_VERSION"-*.whl | head -n1)"
  fi
  "$python" - "$wheel" "$lib" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    with z.open("scipy_openblas32/lib/libscipy_openblas.so") as src, open(dest, "wb") as out:
        out.write(src.read())
PY
  echo "$OPENBLAS_VERSION" > "$ob"
  echo "deps: OpenBLAS $OPENBLAS_VERSION ready in .deps/openblas (CPU matmuls)"
}

python=""
for p in python3 python; do
  if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
done

if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && [ -f "$deps/mlx/lib/libmlx.so" ] && [ -f "$deps/mlx/include/mlx/mlx.h" ]; then
  if [ -n "$python" ]; then fetch_openblas; fi
  exit 0
fi

if [ -z "$python" ]; then
  echo "deps: python3 with pip is needed to download $want (pip download only; nothing is installed)" >&2
  exit 1
fi

mkdir -p "$deps/wheels"
wheel="$(ls "$deps"/wheels/"${dist//-/_}"-"$MLX_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$wheel" ]; then
  echo "deps: downloading $want with pip (download only)"
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --platform manylinux_2_35_x86_64 \
    -d "$deps/wheels" "$want" >&2
  wheel="$(ls "$deps"/wheels/"${dist//-/_}"-"$MLX_VERSION"-*.whl | head -n1)"
fi

echo "deps: unpacking $(basename "$wheel") into .deps/"
rm -rf "$deps/mlx" "$deps"/mlx_*.libs "$deps"/mlx_*.dist-info
"$python" - "$wheel" "$deps" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if name.startswith("mlx/share/"):
            continue  # CMake package files: cgo does not need them
        z.extract(info, dest)
PY

# Check what was unpacked before recording it.
for f in mlx/lib/libmlx.so mlx/include/mlx/mlx.h mlx/include/mlx/version.h; do
  if [ ! -f "$deps/$f" ]; then
    echo "deps: $(basename "$wheel") did not contain $f" >&2
    exit 1
  fi
done
got="$(sed -n 's/^#define MLX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$deps/mlx/include/mlx/version.h" | paste -sd. -)"
if [ "$got" != "$MLX_VERSION" ]; then
  echo "deps: headers say MLX $got, expected $MLX_VERSION" >&2
  exit 1
fi
digest="$(sha256sum "$wheel" | cut -d' ' -f1)"
printf '%s\n%s  %s\n' "$want" "$digest" "$(basename "$wheel")" > "$stamp"
echo "deps: MLX $MLX_VERSION ($MLX_BACKEND) ready in .deps/mlx (wheel sha256 $digest)"
fetch_openblas
