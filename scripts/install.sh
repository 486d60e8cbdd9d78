#!/usr/bin/env bash
# install.sh installs specula from this checkout into PREFIX so that it runs
# from there alone, after the checkout is moved or deleted:
#
#   PREFIX/bin/specula                    built with the specula_installed tag
#                                         and the rpath $ORIGIN/../lib/specula/mlx/lib
#   PREFIX/lib/specula/mlx/lib/libmlx.so  the MLX wheel's library, in the wheel's
#   PREFIX/lib/specula/mlx_<dist>.libs/   layout so libmlx.so's own $ORIGIN RPATH
#   PREFIX/lib/specula/openblas/          holds (OpenBLAS: found next to libmlx.so
#                                         by mlx/shim/blas.cpp)
#   PREFIX/lib/specula/mlx/include/       CUDA only: headers MLX compiles kernels with
#                                         (cccl/, cute/, cutlass/)
#   PREFIX/lib/specula/nvidia/            CUDA only: the runtime (a copy of the
#                                         wheels in .deps/nvidia, or with
#                                         CUDA_RUNTIME=system links to this machine's,
#                                         completed by cuda-crt/: runtime-libs.sh link)
#   PREFIX/lib/specula/cuda-crt/          CUDA_RUNTIME=system: the nvidia-cuda-crt
#                                         wheel's headers
#   PREFIX/lib/specula/plugins/           the example plugins (as make plugins names
#                                         them), rpath $ORIGIN/../mlx/lib
#   PREFIX/lib/specula/runtime-libs.sh    checks or relinks the libraries later
#   PREFIX/lib/specula/BUILD-INFO         backend, MLX version, CUDA runtime, commit
#   PREFIX/share/specula/manifests/       the example manifests
#   PREFIX/share/specula/models/          models/ (the go-tiny family), data files only
#
#   scripts/install.sh PREFIX             (make install PREFIX=...)
#   BUNDLE=1 scripts/install.sh STAGE     for make bundle: with CUDA_RUNTIME=system
#                                         no nvidia/ link (install-bundle.sh makes
#                                         it on the machine that runs the bundle)
#
# It installs the backend .deps/ holds (make deps first). Installing again
# over the same PREFIX replaces what an earlier install put there.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: scripts/install.sh PREFIX   (make install PREFIX=/some/folder)" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/.deps"
GO="${GO:-go}"
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
if [ "$prefix" = "$root" ]; then
  echo "install: PREFIX is the checkout itself; pick another folder" >&2
  exit 2
fi
lib="$prefix/lib/specula"
share="$prefix/share/specula"

stamp="$deps/mlx.stamp"
if [ ! -f "$stamp" ] || [ ! -f "$deps/mlx/lib/libmlx.so" ]; then
  echo "install: .deps/ holds no MLX: run make deps first" >&2
  exit 1
fi
want="$(head -n1 "$stamp")"
case "$want" in
  mlx-cpu==*) backend=cpu ;;
  mlx-cuda-13==*) backend=cuda ;;
  *) echo "install: .deps/mlx.stamp names '$want', not an MLX wheel this script knows" >&2; exit 1 ;;
esac
runtime=none
if [ "$backend" = cuda ]; then
  runtime="$(cat "$deps/cuda-runtime" 2>/dev/null || echo wheels)"
fi
distlibs="$(ls -d "$deps"/mlx_*.libs | head -n1)"

# Build outside PREFIX first, so that a failed build leaves an earlier
# install as it was.
out="$root/build/install"
rm -rf "$out"
mkdir -p "$out/plugins"
echo "install: building specula ($backend) with an \$ORIGIN-relative rpath"
(cd "$root" && $GO build -tags specula_installed \
  -ldflags '-extldflags "-Wl,-rpath,$ORIGIN/../lib/specula/mlx/lib"' \
  -o "$out/specula" ./cmd/specula)
goos="$($GO env GOOS)"
goarch="$($GO env GOARCH)"
for dir in "$root"/plugins/examples/*/; do
  name="$(basename "$dir")"
  ver="$(sed -n 's/^const version = "\(.*\)"/\1/p' "$dir/main.go")"
  file="specula-plugin-${name}_v${ver}_x1.0_${goos}_${goarch}"
  (cd "$root" && $GO build -tags specula_installed \
    -ldflags '-extldflags "-Wl,-rpath,$ORIGIN/../mlx/lib"' \
    -o "$out/plugins/$file" "./plugins/examples/$name")
  chmod go-w "$out/plugins/$file"
  sha256sum "$out/plugins/$file" | cut -d' ' -f1 > "$out/plugins/${file}_SHA256SUM"
done

echo "install: into $prefix"
mkdir -p "$prefix/bin" "$lib" "$share"
rm -rf "$lib/mlx" "$lib"/mlx_*.libs "$lib/openblas" "$lib/plugins" "$share/manifests" "$share/models"
rm -f "$lib/nvidia" 2>/dev/null || rm -rf "$lib/nvidia"

mkdir -p "$lib/mlx/lib"
cp "$deps/mlx/lib/libmlx.so" "$lib/mlx/lib/"
cp -R "$distlibs" "$lib/"
if [ -f "$deps/openblas/libscipy_openblas.so" ]; then
  cp -R "$deps/openblas" "$lib/"
fi
if [ "$backend" = cuda ]; then
  # MLX's CUDA kernels are compiled at run time (NVRTC) with these headers,
  # found relative to libmlx.so: CCCL for every kernel, CuTe and CUTLASS for
  # the quantized products (without them every quantized matmul fails to
  # compile: "cannot open source file cute/numeric/numeric_types.hpp"); the
  # rest of mlx/include is for building only.
  mkdir -p "$lib/mlx/include"
  for h in cccl cute cutlass; do
    cp -R "$deps/mlx/include/$h" "$lib/mlx/include/"
  done
  if [ "$runtime" = wheels ]; then
    echo "install: copying the CUDA runtime wheels ($(du -sh "$deps/nvidia" | cut -f1))"
    cp -R "$deps/nvidia" "$lib/nvidia"
  else
    # CUDA_RUNTIME=system: the nvidia-cuda-crt headers travel with the
    # install, which links the machine's runtime completed by them (here
    # the one deps.sh found; for a bundle, install-bundle.sh where it runs).
    if [ -d "$deps/cuda-crt" ]; then
      cp -R "$deps/cuda-crt" "$lib/cuda-crt"
    fi
    if [ -z "${BUNDLE:-}" ] && [ -f "$deps/nvidia/.specula-source" ]; then
      "$root/scripts/runtime-libs.sh" link "$(cat "$deps/nvidia/.specula-source")" "$lib/cuda-crt" "$lib/nvidia"
    fi
  fi
fi
cp "$root/scripts/runtime-libs.sh" "$lib/"
cp -R "$out/plugins" "$lib/plugins"
install -m 0755 "$out/specula" "$prefix/bin/specula.new"
mv "$prefix/bin/specula.new" "$prefix/bin/specula"

mkdir -p "$share/manifests"
cp "$root"/manifests/*.toml "$share/manifests/"
if [ -d "$root/models" ] && [ "${MODELS:-1}" != 0 ]; then
  # The families' data files; their Go packages are part of the program.
  (cd "$root/models" && find . -type f ! -name '*.go' | while IFS= read -r f; do
    mkdir -p "$share/models/$(dirname "$f")"
    cp "$f" "$share/models/$f"
  done)
fi

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+changes"; fi
cat > "$lib/BUILD-INFO" <<EOF
backend=$backend
mlx=$want
cuda_runtime=$runtime
commit=$commit
go=$($GO env GOVERSION)
os_arch=${goos}_${goarch}
EOF

if [ "$backend" = cuda ] && [ ! -e "$lib/nvidia" ] && [ -n "${BUNDLE:-}" ]; then
  echo "install: CUDA runtime left out (CUDA_RUNTIME=system): install-bundle.sh links the one where the bundle runs"
elif [ "$backend" = cuda ] && [ ! -e "$lib/nvidia" ]; then
  echo "install: CUDA runtime not included (CUDA_RUNTIME=system): link it where specula runs with"
  echo "  $lib/runtime-libs.sh link \"\$(SPECULA_CUDA_LIBS=... $lib/runtime-libs.sh find)\" $lib/cuda-crt $lib/nvidia"
else
  mapfile -t plugins < <(find "$lib/plugins" -type f ! -name '*_SHA256SUM' | sort)
  "$lib/runtime-libs.sh" check "$lib" "$prefix/bin/specula" "${plugins[@]}"
fi
echo "install: done. Run $prefix/bin/specula (add $prefix/bin to PATH);"
echo "  plugins: --plugin-dir $lib/plugins (or SPECULA_PLUGIN_PATH); manifests: $share/manifests"
