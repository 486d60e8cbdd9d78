#!/usr/bin/env bash
# runtime-libs.sh finds and checks the shared libraries specula loads at run
# time. A "library tree" is laid out like a site-packages folder, as the MLX
# wheel expects: mlx/lib/libmlx.so, mlx_<dist>.libs/, openblas/, and for the
# CUDA backend nvidia/<lib>/lib (libmlx.so's RPATH is $ORIGIN/../../nvidia/...)
# and the JIT headers (mlx/include/{cccl,cute,cutlass}, nvidia/cu13/include).
# The checkout's tree is .deps/; an installed one is PREFIX/lib/specula/.
#
#   runtime-libs.sh check TREE [FILE...]
#       ldd libmlx.so, OpenBLAS, every nvidia/*/lib library and each FILE (a
#       program or plugin linked against the tree); fails, naming each missing
#       library and who needs it, unless the only one missing is the NVIDIA
#       driver's libcuda.so.1 (absent on machines without a GPU). For a CUDA
#       tree it also checks the headers MLX compiles its kernels with.
#   runtime-libs.sh find
#       prints the folder of this machine's CUDA 13 runtime libraries laid out
#       as the nvidia-* wheels install them (cu13/lib, cudnn/lib, nccl/lib):
#       $SPECULA_CUDA_LIBS if set, else the first site-packages/nvidia of the
#       Python installs found ($PYTHON, python3, /usr/bin/python3, then the
#       usual site-packages folders) that holds them all. PyTorch's CUDA 13
#       wheels bring exactly these.
#   runtime-libs.sh link RUNTIME CRT DEST
#       makes DEST (a tree's nvidia/ folder) this machine's CUDA runtime
#       RUNTIME (as find prints it) plus the headers of the nvidia-cuda-crt
#       wheel unpacked in CRT (cu13/include/crt/): MLX compiles kernels with
#       RUNTIME's cu13/include, whose mma.h includes crt/mma.h, and neither
#       the nvidia-cuda-runtime wheel nor PyTorch's environment has it (MLX's
#       sm90 quantized matrix kernels then fail to build). DEST is a folder of
#       links into RUNTIME with crt/ completed from CRT; its .specula-source
#       names RUNTIME.
set -euo pipefail

# The libraries libmlx.so (mlx-cuda-13) needs from the runtime, relative to
# an nvidia/ folder; libcudart and the headers come with nvidia-cuda-runtime.
cuda_needs="cu13/lib/libcublasLt.so.13 cu13/lib/libcublas.so.13 cu13/lib/libnvrtc.so.13
cu13/lib/libcufft.so.12 cu13/lib/libcusolver.so.12 cu13/lib/libcusparse.so.12
cu13/lib/libnvJitLink.so.13 cudnn/lib/libcudnn.so.9 nccl/lib/libnccl.so.2
cu13/include/cuda_runtime.h"

missing_in() { # nvidia-folder -> prints what it lacks
  local dir="$1" f
  for f in $cuda_needs; do
    [ -e "$dir/$f" ] || echo "$f"
  done
}

find_cuda() {
  if [ -n "${SPECULA_CUDA_LIBS:-}" ]; then
    local lack
    lack="$(missing_in "$SPECULA_CUDA_LIBS")"
    if [ -n "$lack" ]; then
      echo "runtime-libs: SPECULA_CUDA_LIBS=$SPECULA_CUDA_LIBS lacks:" $lack >&2
      echo "  it should name a folder laid out like <site-packages>/nvidia (cu13/lib, cudnn/lib, nccl/lib)" >&2
      return 1
    fi
    (cd "$SPECULA_CUDA_LIBS" && pwd -P)
    return 0
  fi
  local sites=() py s
  for py in "${PYTHON:-}" python3 /usr/bin/python3 python; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    while IFS= read -r s; do sites+=("$s"); done < <("$py" -c '
import site, sys
for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    print(p)' 2>/dev/null || true)
  done
  for s in /usr/local/lib/python3*/dist-packages /usr/local/lib/python3*/site-packages \
    /usr/lib/python3/dist-packages /usr/lib/python3*/site-packages /opt/conda/lib/python3*/site-packages \
    "${HOME:-/nonexistent}"/.local/lib/python3*/site-packages; do
    sites+=("$s")
  done
  local partial=""
  for s in "${sites[@]}"; do
    [ -d "$s/nvidia" ] || continue
    local lack
    lack="$(missing_in "$s/nvidia")"
    if [ -z "$lack" ]; then
      (cd "$s/nvidia" && pwd -P)
      return 0
    fi
    partial="$partial  $s/nvidia lacks: $(echo $lack)"$'\n'
  done
  echo "runtime-libs: no CUDA 13 runtime found in any site-packages/nvidia folder" >&2
  [ -n "$partial" ] && printf '%s' "$partial" >&2
  echo "  install the nvidia-* CUDA 13 wheels (PyTorch's CUDA 13 build brings them), or set SPECULA_CUDA_LIBS" >&2
  return 1
}

# link_runtime RUNTIME CRT DEST: see the header.
link_runtime() {
  local runtime="$1" crt="$2" dest="$3" e f
  runtime="$(cd "$runtime" && pwd -P)"
  rm -rf "$dest.partial"
  mkdir -p "$dest.partial"
  # Every entry is a link into RUNTIME, except the folders on the way to
  # cu13/include/crt, which are made here and filled the same way.
  mirror() { # from to skip
    local from="$1" to="$2" skip="$3"
    mkdir -p "$to"
    for e in "$from"/* "$from"/.[!.]*; do
      [ -e "$e" ] || continue
      [ "$(basename "$e")" = "$skip" ] && continue
      ln -s "$e" "$to/$(basename "$e")"
    done
  }
  mirror "$runtime" "$dest.partial" cu13
  mirror "$runtime/cu13" "$dest.partial/cu13" include
  mirror "$runtime/cu13/include" "$dest.partial/cu13/include" crt
  mirror "$runtime/cu13/include/crt" "$dest.partial/cu13/include/crt" ""
  if [ -d "$crt/cu13/include/crt" ]; then
    for f in "$crt"/cu13/include/crt/*; do
      [ -e "$dest.partial/cu13/include/crt/$(basename "$f")" ] || cp "$f" "$dest.partial/cu13/include/crt/"
    done
  fi
  echo "$runtime" > "$dest.partial/.specula-source"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
}

check_tree() {
  local tree="$1"
  shift
  local mlx="$tree/mlx/lib/libmlx.so"
  if [ ! -f "$mlx" ]; then
    echo "runtime-libs: $mlx does not exist (run make deps, or give the library tree of an install: PREFIX/lib/specula)" >&2
    return 1
  fi
  local backend=cpu
  if ls -d "$tree"/mlx_cuda_*.libs >/dev/null 2>&1; then backend=cuda; fi
  local objs=("$mlx") f
  [ -f "$tree/openblas/libscipy_openblas.so" ] && objs+=("$tree/openblas/libscipy_openblas.so")
  if [ -d "$tree/nvidia" ]; then
    while IFS= read -r f; do objs+=("$f"); done < <(find -L "$tree/nvidia" -path '*/lib/*.so*' -type f | sort)
  fi
  objs+=("$@")
  local bad="" driver="" out
  for f in "${objs[@]}"; do
    out="$(ldd "$f" 2>&1 || true)"
    while IFS= read -r line; do
      local name="${line%% *}"
      if [ "$name" = libcuda.so.1 ]; then
        driver=missing
      else
        bad="$bad  $name (needed by $f)"$'\n'
      fi
    done < <(printf '%s\n' "$out" | sed -n 's/^[[:space:]]*\([^[:space:]]*\) => not found.*/\1 x/p')
  done
  if [ "$backend" = cuda ]; then
    for h in cccl cute cutlass; do
      [ -d "$tree/mlx/include/$h" ] || bad="$bad  $tree/mlx/include/$h (headers MLX compiles its kernels with at run time)"$'\n'
    done
    if [ -f "$tree/nvidia/cu13/include/mma.h" ] && [ ! -f "$tree/nvidia/cu13/include/crt/mma.h" ]; then
      # Only some kernels include it: a warning, not a failure.
      echo "runtime-libs: warning: $tree/nvidia/cu13/include/crt/mma.h is missing: MLX's sm90 quantized matrix" >&2
      echo "  kernels will not build; relink with runtime-libs.sh link RUNTIME CRT $tree/nvidia (CRT: the nvidia-cuda-crt wheel's nvidia/)" >&2
    fi
    if [ ! -f "$tree/nvidia/cu13/include/cuda_runtime.h" ]; then
      local home="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
      [ -f "$home/include/cuda_runtime.h" ] ||
        bad="$bad  cuda_runtime.h: neither $tree/nvidia/cu13/include nor $home/include has the CUDA headers MLX compiles kernels with"$'\n'
    fi
  fi
  if [ -n "$bad" ]; then
    echo "runtime-libs: missing for $mlx ($backend):" >&2
    printf '%s' "$bad" | sort -u >&2
    if [ "$backend" = cuda ] && [ ! -e "$tree/nvidia" ]; then
      echo "  $tree/nvidia is missing: run scripts/runtime-libs.sh find to locate a CUDA 13 runtime and link it there" >&2
    fi
    return 1
  fi
  local note=""
  if [ "$backend" = cuda ]; then
    if [ -n "$driver" ]; then
      note="; libcuda.so.1 (the NVIDIA driver's) is not on this machine: needed only to run"
    else
      note="; driver: $(ldd "$mlx" | sed -n 's/^[[:space:]]*libcuda.so.1 => \([^ ]*\).*/\1/p' | head -n1)"
    fi
  fi
  echo "runtime-libs: $backend: every library resolves (${#objs[@]} files checked)$note"
}

case "${1:-}" in
  find) find_cuda ;;
  check)
    [ $# -ge 2 ] || { echo "usage: runtime-libs.sh check TREE [FILE...]" >&2; exit 2; }
    shift
    check_tree "$@"
    ;;
  link)
    [ $# -eq 4 ] || { echo "usage: runtime-libs.sh link RUNTIME CRT DEST" >&2; exit 2; }
    link_runtime "$2" "$3" "$4"
    ;;
  *)
    echo "usage: runtime-libs.sh check TREE [FILE...] | runtime-libs.sh find | runtime-libs.sh link RUNTIME CRT DEST" >&2
    exit 2
    ;;
esac
