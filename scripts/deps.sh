#!/usr/bin/env bash
# deps.sh fetches the pinned MLX Linux wheel with pip (download only) and unpacks
# its headers and libmlx.so into .deps/, laid out like a site-packages folder so
# the RPATH baked into libmlx.so ($ORIGIN/../../<dist>.libs, and for CUDA
# $ORIGIN/../../nvidia/<lib>/lib) resolves. It is idempotent: stamp files record
# what was unpacked, so a rerun with nothing to do takes a moment.
#
#   MLX_BACKEND=cpu   -> mlx-cpu==$MLX_VERSION
#   MLX_BACKEND=cuda  -> mlx-cuda-13==$MLX_VERSION and its CUDA runtime:
#     CUDA_RUNTIME=wheels (default)  the nvidia-* wheels pinned below (about 2 GB
#                                    to download, 2.8 GB unpacked into .deps/nvidia)
#     CUDA_RUNTIME=system            no download: .deps/nvidia links to the CUDA 13
#                                    libraries already on this machine (a PyTorch
#                                    install's site-packages/nvidia, or the folder
#                                    $SPECULA_CUDA_LIBS names); see
#                                    scripts/runtime-libs.sh
# MLX_BACKEND left unset keeps the backend .deps/ already holds (cpu on a fresh
# checkout), so `make build` after `MLX_BACKEND=cuda make deps` stays on CUDA.
# Only the driver's libcuda.so.1 must come from the system.
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
# scipy-openblas32 is OpenBLAS built for SciPy (symbols prefixed scipy_); the
# shim routes MLX's CPU matmuls to it (mlx/shim/blas.cpp): about 50x the
# reference BLAS the mlx-cpu wheel bundles.
OPENBLAS_VERSION="${OPENBLAS_VERSION:-0.3.34.481.3}"

# nvidia-cuda-crt brings cu13/include/crt/, which MLX does not require but
# compiles some kernels with: the runtime wheel's mma.h includes crt/mma.h
# (MLX's sm90 quantized matrix kernels failed to build without it on an
# H200, 2026-12-04). It is fetched for both runtimes: with
# CUDA_RUNTIME=system its headers complete the machine's (runtime-libs.sh
# link), which lack it in PyTorch's environment too.
CUDA_CRT_WHEEL="nvidia-cuda-crt==13.5.37 e898b7f73d3035fa89915a3f7bf3b54a73e90249746111aed295822c4729bb29"

# The CUDA runtime of mlx-cuda-13 0.32.4: its Requires-Dist (nvidia-cublas 13.*,
# nvidia-cuda-nvrtc 13.*, nvidia-cuda-runtime 13.*, nvidia-cudnn-cu13 9.*,
# nvidia-cufft 12.*, nvidia-cusolver 12.*, nvidia-nccl-cu13) and what those
# require in turn (nvidia-cusparse, nvidia-nvjitlink), each pinned to the
# release pip resolved on 2026-12-03, with the sha256 PyPI lists for it. The
# check after unpacking the MLX wheel fails when a new MLX requires a package
# that is missing here.
CUDA_WHEELS="
nvidia-cublas==13.10.0.20 dcc6d63884c53d07e267ce7e6feac17b2538cebaafec5db865736c3e28e4dc84
nvidia-cuda-nvrtc==13.5.37 86b4d68058807988b7d9af5b44917a0601e9c337f35ccd657bfb3c759ff8d8bc
nvidia-cuda-runtime==13.5.37 df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d
nvidia-cudnn-cu13==9.28.1.4 a54f205b1db1f2895d99f398754db1369816f0569dd459731f925635cf7b65ec
nvidia-cufft==12.5.0.14 b8be26837a5abad2b5b74f3e92dd29f622a42934b355be0961a48712cbba23ad
nvidia-cusolver==12.4.1.2 b3b8e02fd2f2df869369af075dc3a179d43f6f7b85e94632a7dce556697be044
nvidia-nccl-cu13==2.32.6 76e7aad00482092baf01e13e66f441d54c96b5cf1e3f143dee27db7f731d41ba
nvidia-cusparse==12.9.4.2 072667e58c851a318738f5527a12eb225cbf058803f2ea451c722d8cf8edddec
nvidia-nvjitlink==13.5.37 280d7cb9649704145f074b8dbde500de04ce02d0872e066e20a83c17bcaa93eb
$CUDA_CRT_WHEEL
"

root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/.deps"
stamp="$deps/mlx.stamp"

# The backend .deps/ holds now, from the first line of the stamp.
current=""
if [ -f "$stamp" ]; then
  case "$(head -n1 "$stamp")" in
    mlx-cpu==*) current=cpu ;;
    mlx-cuda-13==*) current=cuda ;;
  esac
fi
MLX_BACKEND="${MLX_BACKEND:-${current:-cpu}}"
# CUDA_RUNTIME sticks the same way (.deps/cuda-runtime records the last one).
CUDA_RUNTIME="${CUDA_RUNTIME:-$(cat "$deps/cuda-runtime" 2>/dev/null || echo wheels)}"
case "$MLX_BACKEND" in
  cpu) dist="mlx-cpu" ;;
  cuda) dist="mlx-cuda-13" ;;
  *) echo "deps: MLX_BACKEND must be cpu or cuda, not '$MLX_BACKEND'" >&2; exit 2 ;;
esac
case "$CUDA_RUNTIME" in
  wheels | system) ;;
  *) echo "deps: CUDA_RUNTIME must be wheels or system, not '$CUDA_RUNTIME'" >&2; exit 2 ;;
esac
want="$dist==$MLX_VERSION"

python=""
for p in python3 python; do
  if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
done

# The manylinux tags of this machine's glibc (2.35) and older: the nvidia-*
# wheels are tagged anywhere from manylinux_2_5 to manylinux_2_27, and pip
# download for another platform matches only the tags it is given.
platforms=()
for v in 35 34 31 28 27 24 17 12 5; do platforms+=(--platform "manylinux_2_${v}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

pip_download() { # dest args...
  local dest="$1"
  shift
  "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 "${platforms[@]}" -d "$dest" "$@" >&2
}

fetch_openblas() {
  local lib="$deps/openblas/libscipy_openblas.so" ob="$deps/openblas/version"
  if [ -f "$lib" ] && [ "$(cat "$ob" 2>/dev/null)" = "$OPENBLAS_VERSION" ]; then
    return 0
  fi
  if [ -z "$python" ]; then
    echo "deps: warning: no python3 to download OpenBLAS; CPU matmuls use MLX's bundled reference BLAS (slow)" >&2
    return 0
  fi
  mkdir -p "$deps/wheels" "$deps/openblas"
  local wheel
  wheel="$(ls "$deps"/wheels/scipy_openblas32-"$OPENBLAS_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ]; then
    echo "deps: downloading scipy-openblas32==$OPENBLAS_VERSION with pip (download only)"
    if ! pip_download "$deps/wheels" "scipy-openblas32==$OPENBLAS_VERSION"; then
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

fetch_mlx() {
  if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && [ -f "$deps/mlx/lib/libmlx.so" ] && [ -f "$deps/mlx/include/mlx/mlx.h" ]; then
    return 0
  fi
  changed=1
  if [ -z "$python" ]; then
    echo "deps: python3 with pip is needed to download $want (pip download only; nothing is installed)" >&2
    exit 1
  fi
  mkdir -p "$deps/wheels"
  local wheel
  wheel="$(ls "$deps"/wheels/"${dist//-/_}"-"$MLX_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ]; then
    echo "deps: downloading $want with pip (download only)"
    pip_download "$deps/wheels" "$want"
    wheel="$(ls "$deps"/wheels/"${dist//-/_}"-"$MLX_VERSION"-*.whl | head -n1)"
  fi

  echo "deps: unpacking $(basename "$wheel") into .deps/"
  rm -rf "$deps/mlx" "$deps"/mlx_*.libs "$deps"/mlx_*.dist-info "$stamp"
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
  local f
  for f in mlx/lib/libmlx.so mlx/include/mlx/mlx.h mlx/include/mlx/version.h; do
    if [ ! -f "$deps/$f" ]; then
      echo "deps: $(basename "$wheel") did not contain $f" >&2
      exit 1
    fi
  done
  local got
  got="$(sed -n 's/^#define MLX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$deps/mlx/include/mlx/version.h" | paste -sd. -)"
  if [ "$got" != "$MLX_VERSION" ]; then
    echo "deps: headers say MLX $got, expected $MLX_VERSION" >&2
    exit 1
  fi
  local digest
  digest="$(sha256sum "$wheel" | cut -d' ' -f1)"
  printf '%s\n%s  %s\n' "$want" "$digest" "$(basename "$wheel")" > "$stamp"
  echo "deps: MLX $MLX_VERSION ($MLX_BACKEND) ready in .deps/mlx (wheel sha256 $digest)"
  # go test caches results by the test binary, which does not change when
  # another libmlx.so is unpacked under it: results from the other backend
  # must not be reused.
  if command -v go >/dev/null 2>&1; then go clean -testcache || true; fi
}

# check_cuda_requires fails when the MLX wheel requires an nvidia-* package
# that CUDA_WHEELS does not pin, or pins outside the version it asks for.
check_cuda_requires() {
  "$python" - "$deps/${dist//-/_}-$MLX_VERSION.dist-info/METADATA" "$CUDA_WHEELS" <<'PY'
import re, sys
meta, pinned_text = sys.argv[1], sys.argv[2]
pinned = {}
for line in pinned_text.split("\n"):
    if line.strip():
        name, version = line.split()[0].split("==")
        pinned[name] = version
bad = []
for line in open(meta, encoding="utf-8"):
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].split(";")[0].strip()
    m = re.match(r"([A-Za-z0-9_.-]+)\s*(?:==\s*([0-9.*]+))?", req)
    name, want = m.group(1).lower(), m.group(2)
    if not name.startswith("nvidia-"):
        continue
    have = pinned.get(name)
    if have is None:
        bad.append(f"{req} is not pinned")
    elif want and not (have + ".").startswith(want.rstrip("*")) and have != want:
        bad.append(f"{req} but {name}=={have} is pinned")
if bad:
    sys.exit("deps: the MLX wheel requires " + "; ".join(bad) + ": update CUDA_WHEELS in scripts/deps.sh")
PY
}

# unpack_nvidia_wheels SRC DEST unpacks the nvidia/ tree of every
# nvidia_*.whl in SRC into DEST, keeping the files' modes.
unpack_nvidia_wheels() {
  "$python" - "$1" "$2" <<'PY'
import glob, os, sys, zipfile
src, dest = sys.argv[1], sys.argv[2]
for wheel in sorted(glob.glob(os.path.join(src, "nvidia_*.whl"))):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if not info.filename.startswith("nvidia/") or info.is_dir():
                continue
            rel = info.filename[len("nvidia/"):]
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as f, open(out, "wb") as o:
                while chunk := f.read(1 << 20):
                    o.write(chunk)
            # Zip entries keep the Unix mode in the high 16 bits.
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(out, mode or 0o644)
PY
}

# is_unpacked WANTED DIR [STAMP]: DIR's stamp file (default .specula-wheels)
# names exactly the wheels WANTED pins.
is_unpacked() {
  [ "$(cat "$2/${3:-.specula-wheels}" 2>/dev/null)" = "$1" ]
}

# fetch_cuda_wheels downloads the pinned nvidia-* wheels (pip checks their
# sha256) and unpacks their nvidia/ trees into .deps/nvidia. The wheels are
# deleted once unpacked: they are 2 GB, and the stamp in .deps/nvidia says
# what is there.
fetch_cuda_wheels() {
  local nv="$deps/nvidia"
  local wanted
  wanted="$(printf '%s\n' "$CUDA_WHEELS" | sed '/^$/d')"
  if [ ! -L "$nv" ] && is_unpacked "$wanted" "$nv"; then
    return 0
  fi
  changed=1
  if [ -z "$python" ]; then
    echo "deps: python3 with pip is needed to download the CUDA runtime wheels" >&2
    exit 1
  fi
  local dl="$deps/wheels/nvidia" req="$deps/wheels/nvidia-requirements.txt"
  mkdir -p "$dl"
  printf '%s\n' "$wanted" | awk '{print $1 " --hash=sha256:" $2}' > "$req"
  echo "deps: downloading the CUDA runtime wheels mlx-cuda-13 needs with pip (download only, about 2 GB):"
  printf '%s\n' "$wanted" | awk '{print "  " $1}'
  if ! pip_download "$dl" --require-hashes -r "$req"; then
    echo "deps: could not download the CUDA runtime wheels. On a machine that already has them" >&2
    echo "  (for example in PyTorch's site-packages/nvidia), use CUDA_RUNTIME=system instead." >&2
    exit 1
  fi
  echo "deps: unpacking the CUDA runtime into .deps/nvidia"
  rm -rf "$nv" "$nv.partial"
  unpack_nvidia_wheels "$dl" "$deps/nvidia.partial"
  printf '%s\n' "$wanted" > "$deps/nvidia.partial/.specula-wheels"
  mv "$deps/nvidia.partial" "$nv"
  rm -rf "$dl" "$req"
  echo "deps: CUDA runtime ready in .deps/nvidia ($(du -sh "$nv" | cut -f1))"
}

# unpack_pinned WANTED DIR [STAMP] makes DIR hold the nvidia/ trees of the
# wheels WANTED pins (lines "name==version sha256"), unless DIR's stamp file
# (STAMP, default .specula-wheels) already names them: it downloads them with
# pip, their hashes checked, unpacks them beside DIR and then replaces DIR
# whole. It returns 1, leaving DIR as it was, when the download fails.
unpack_pinned() {
  local wanted="$1" dir="$2" stamp="${3:-.specula-wheels}"
  local dl="$deps/wheels/$(basename "$dir")"
  if is_unpacked "$wanted" "$dir" "$stamp"; then
    return 0
  fi
  mkdir -p "$dl"
  printf '%s\n' "$wanted" | awk '{print $1 " --hash=sha256:" $2}' > "$dl/requirements.txt"
  if ! pip_download "$dl" --require-hashes -r "$dl/requirements.txt"; then
    return 1
  fi
  rm -rf "$dir.partial"
  unpack_nvidia_wheels "$dl" "$dir.partial"
  printf '%s\n' "$wanted" > "$dir.partial/$stamp"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
  rm -rf "$dl"
}

# fetch_cuda_crt unpacks the pinned nvidia-cuda-crt wheel's nvidia/ tree into
# .deps/cuda-crt (for CUDA_RUNTIME=system: see CUDA_CRT_WHEEL).
fetch_cuda_crt() {
  if ! unpack_pinned "$CUDA_CRT_WHEEL" "$deps/cuda-crt" .specula-wheel; then
    echo "deps: could not download ${CUDA_CRT_WHEEL%% *}: MLX's sm90 quantized kernels will not build on this runtime" >&2
  fi
}

# fetch_nvrtc unpacks NVRTC (the pinned nvidia-cuda-nvrtc wheel) and the
# CUDA headers our kernels include (nvidia-cuda-runtime, nvidia-cuda-crt)
# into .deps/nvrtc, for the tests that compile every CUDA kernel's source
# on a machine without a GPU (mlxtest.CompileCUDA; make test sets NVRTC=1).
# About 60 MB to download; nothing of it is used at run time.
fetch_nvrtc() {
  local dir="$deps/nvrtc" wanted
  wanted="$(printf '%s\n' "$CUDA_WHEELS" | grep -E '^nvidia-cuda-(nvrtc|runtime|crt)==')"
  # A stamp whose library was deleted since is no stamp.
  [ -f "$dir/cu13/lib/libnvrtc.so.13" ] || rm -f "$dir/.specula-wheels"
  if is_unpacked "$wanted" "$dir"; then
    return 0
  fi
  if [ -z "$python" ]; then
    echo "deps: python3 with pip is needed to download NVRTC" >&2
    exit 1
  fi
  echo "deps: downloading NVRTC and the CUDA headers with pip (download only, about 60 MB), to compile our kernels in tests"
  if ! unpack_pinned "$wanted" "$dir"; then
    echo "deps: could not download NVRTC (NVRTC=1)" >&2
    exit 1
  fi
  echo "deps: NVRTC ready in .deps/nvrtc"
}

# link_system_cuda points .deps/nvidia at the CUDA 13 libraries this machine
# already has. Finding none is not an error: a CUDA program can be built (and
# bundled) on a machine without them; it runs where they are.
link_system_cuda() {
  local nv="$deps/nvidia" found
  fetch_cuda_crt # also without a runtime here: a bundle made here carries it
  if [ -f "$nv/.specula-wheels" ]; then
    echo "deps: CUDA_RUNTIME=system: removing the CUDA runtime wheels unpacked in .deps/nvidia"
    rm -rf "$nv"
  fi
  # The folder linked before stays unless SPECULA_CUDA_LIBS names another:
  # the search may not find what a user pointed at once.
  local source
  source="$(cat "$nv/.specula-source" 2>/dev/null || true)"
  if [ -z "${SPECULA_CUDA_LIBS:-}" ] && [ -n "$source" ] && [ -f "$nv/cu13/include/crt/mma.h" ] &&
    SPECULA_CUDA_LIBS="$source" "$root/scripts/runtime-libs.sh" find >/dev/null 2>&1; then
    echo "deps: CUDA runtime from this machine: .deps/nvidia -> $source"
  elif found="$("$root/scripts/runtime-libs.sh" find 2>/dev/null)"; then
    if [ "$source" != "$found" ] || [ ! -f "$nv/cu13/include/crt/mma.h" ]; then
      rm -f "$nv" 2>/dev/null || true
      "$root/scripts/runtime-libs.sh" link "$found" "$deps/cuda-crt" "$nv"
    fi
    echo "deps: CUDA runtime from this machine: .deps/nvidia -> $found (with the nvidia-cuda-crt headers)"
  else
    rm -rf "$nv"
    echo "deps: CUDA_RUNTIME=system: no CUDA 13 runtime found on this machine (set SPECULA_CUDA_LIBS to a"
    echo "  folder like <site-packages>/nvidia); programs built here run where the runtime is"
  fi
}

changed=0
fetch_mlx
fetch_openblas
if [ "${NVRTC:-0}" = 1 ]; then
  fetch_nvrtc
fi

runtime="none"
if [ "$MLX_BACKEND" = cuda ]; then
  check_cuda_requires
  echo "$CUDA_RUNTIME" > "$deps/cuda-runtime"
  if [ "$CUDA_RUNTIME" = wheels ]; then
    fetch_cuda_wheels
    runtime="pinned nvidia-* wheels in .deps/nvidia"
    # Every library libmlx.so needs must now resolve, except the driver's.
    if [ "$changed" = 1 ]; then "$root/scripts/runtime-libs.sh" check "$deps"; fi
  else
    link_system_cuda
    runtime="this machine's (CUDA_RUNTIME=system)"
  fi
  echo "deps: backend cuda (MLX $MLX_VERSION, mlx-cuda-13; CUDA runtime: $runtime). For the CPU: MLX_BACKEND=cpu make deps"
else
  echo "deps: backend cpu (MLX $MLX_VERSION, mlx-cpu). For NVIDIA GPUs: MLX_BACKEND=cuda make deps (add CUDA_RUNTIME=system to use this machine's CUDA 13 libraries)"
fi
