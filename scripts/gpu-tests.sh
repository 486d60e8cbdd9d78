#!/usr/bin/env bash
# gpu-tests.sh: the GPU half of the test suite, on a machine that has a
# specula bundle but no Go toolchain (a lent GPU machine without network).
# The tests of these packages run on the GPU when there is one and skip
# those parts elsewhere, so CI (no GPU) never runs them:
#
#   scripts/gpu-tests.sh build [FILE]
#       on the build machine, after MLX_BACKEND=cuda make deps: compiles the
#       test binaries (the specula_installed tag and the rpath of an
#       installed specula) and packs them with the commit into FILE
#       (default build/gpu-tests.tgz, ~35 MB)
#   scripts/gpu-tests.sh run PREFIX FILE
#       on the GPU machine, from a checkout of the same commit (tests read
#       testdata/ and models/ beside their package): unpacks into PREFIX/bin
#       (PREFIX as given to install-bundle.sh, so the binaries find MLX),
#       checks that the GPU is live, runs every package's tests, JOBS at a
#       time, prints one line per package and exits 1 when any failed
#
# Environment (run): TIMEOUT per package (default 540s), RUN and SKIP
# (-test.run / -test.skip regexes for every package), PACKAGES (the
# packages to run, space-separated; default all), JOBS (default 4),
# LOGS (each package's -test.v log; default /tmp/specula-gpu-tests);
# GPU_CHECK=0 runs without a live GPU (every test then passes or skips on
# the CPU: for trying the script itself).
# Set SPECULA_* switches as for specula itself, e.g. SPECULA_ROWS_GEMV_F32=0.
#
# Time (H100, 2026-12-06, JOBS=4): every package but mlx ends in 1–2 min.
# mlx needs more than 200 s on a fresh machine: its quantized and compiled
# tests make MLX compile CUTLASS and fused kernels with NVRTC (one test
# alone 116 s), which a later run finds in MLX's disk cache. Within a
# 10-minute call, run mlx on its own (PACKAGES=mlx), and skip
# 'MLXFormatParity|TensorParallel' elsewhere (each >145 s).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
packages=(mlx arch/nn arch/qwen35 arch/qwen35moe arch/dflash arch/dflash2 engine)

# binary is the test binary's name for a package: its path with / as _.
binary() { echo "${1//\//_}.test"; }

build() {
  local file="${1:-$root/build/gpu-tests.tgz}"
  local stage="$root/build/gpu-tests"
  case "$file" in /*) ;; *) file="$PWD/$file" ;; esac
  rm -rf "$stage"
  mkdir -p "$stage" "$(dirname "$file")"
  grep -q cuda "$root/.deps/mlx.stamp" 2>/dev/null ||
    echo "gpu-tests: .deps/mlx is not MLX's CUDA build (MLX_BACKEND=cuda make deps): the GPU tests would not run" >&2
  for p in "${packages[@]}"; do
    echo "gpu-tests: building $p" >&2
    (cd "$root" && "${GO:-go}" test -c -tags specula_installed \
      -ldflags '-w -extldflags "-Wl,-rpath,$ORIGIN/../lib/specula/mlx/lib"' \
      -o "$stage/$(binary "$p")" "./$p")
  done
  git -C "$root" rev-parse HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "gpu-tests: the checkout has uncommitted changes; the binaries hold them" >&2
    echo "+changes" >> "$stage/COMMIT"
  fi
  tar -czf "$file" -C "$stage" .
  echo "gpu-tests: $file ($(du -h "$file" | cut -f1)); on the GPU machine: scripts/gpu-tests.sh run PREFIX $(basename "$file")" >&2
}

# counts prints "passed failed skipped" of a -test.v log's top-level tests.
counts() {
  printf '%s %s %s' "$(grep -c '^--- PASS' "$1" || true)" "$(grep -c '^--- FAIL' "$1" || true)" "$(grep -c '^--- SKIP' "$1" || true)"
}

run() {
  local prefix="${1:?usage: gpu-tests.sh run PREFIX FILE}" file="${2:?usage: gpu-tests.sh run PREFIX FILE}"
  local bin="$prefix/bin" logs="${LOGS:-/tmp/specula-gpu-tests}" timeout="${TIMEOUT:-540s}" jobs="${JOBS:-4}"
  [ -d "$prefix/lib/specula/mlx/lib" ] || { echo "gpu-tests: no MLX under $prefix/lib/specula/mlx/lib: install the bundle there first (install-bundle.sh $prefix)" >&2; exit 2; }
  mkdir -p "$bin" "$logs"
  tar -xzf "$file" -C "$bin"
  local built head
  built="$(head -n1 "$bin/COMMIT")"
  head="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  [ "$built" = "$head" ] || echo "gpu-tests: the binaries are of $built, this checkout is $head: test data may not match" >&2
  # The sentinel: a test that runs a custom CUDA kernel, and skips without
  # a GPU. Everything else would pass by skipping its GPU parts.
  if [ "${GPU_CHECK:-1}" != 0 ] && ! (cd "$root/mlx" && "$bin/$(binary mlx)" -test.run '^TestCUDAKernelsOfOneNameRunTheirOwnCode$' -test.v 2>&1) | grep -q '^--- PASS'; then
    echo "gpu-tests: the GPU is not live here (MLX's CUDA backend did not run a kernel); nothing tested" >&2
    exit 2
  fi
  local args=(-test.v -test.timeout "$timeout")
  [ -z "${RUN:-}" ] || args+=(-test.run "$RUN")
  [ -z "${SKIP:-}" ] || args+=(-test.skip "$SKIP")
  local p running=0
  if [ -n "${PACKAGES:-}" ]; then
    read -r -a packages <<< "$PACKAGES"
    for p in "${packages[@]}"; do
      [ -f "$bin/$(binary "$p")" ] || { echo "gpu-tests: no test binary for package '$p' in $file" >&2; exit 2; }
    done
  fi
  for p in "${packages[@]}"; do
    (
      start=$SECONDS
      rc=0
      (cd "$root/$p" && "$bin/$(binary "$p")" "${args[@]}") > "$logs/$(binary "$p").log" 2>&1 || rc=$?
      echo "$p $rc $((SECONDS - start)) $(counts "$logs/$(binary "$p").log")" > "$logs/$(binary "$p").result"
    ) &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait
  local failed=0 rc secs pass fail skip
  printf '%-16s %-6s %6s %7s %7s %7s\n' package result s passed failed skipped
  for p in "${packages[@]}"; do
    read -r _ rc secs pass fail skip < "$logs/$(binary "$p").result"
    local result=ok
    if [ "$rc" != 0 ] || [ "$fail" != 0 ]; then
      result=FAIL
      failed=1
    fi
    printf '%-16s %-6s %6s %7s %7s %7s\n' "$p" "$result" "$secs" "$pass" "$fail" "$skip"
  done
  echo "gpu-tests: logs in $logs (binaries of $built)"
  if [ "$failed" = 1 ]; then
    for p in "${packages[@]}"; do
      grep -E -- '^--- FAIL|^panic|test timed out' "$logs/$(binary "$p").log" | head -5 | sed "s|^|$p: |"
    done
  fi
  return "$failed"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
