#!/usr/bin/env bash
# shim-stamp.sh records a digest of mlx/shim/* in mlx/shim_unity.cpp.
#
# cgo compiles mlx/shim/shim.cpp through the one-line unity file
# mlx/shim_unity.cpp, and Go's build cache only hashes files in the package's
# own folder: without this stamp, an edit to the shim would be ignored by
# cached builds. `make` runs this before every build; TestShimStampIsCurrent
# fails when it was not run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
digest="$(cd "$root/mlx/shim" && cat shim.h shim.cpp compile.cpp blas.cpp system.cpp gdn.cpp norm.cpp rope.cpp act.cpp dist.cpp topk.cpp part.cpp | sha256sum | cut -c1-32)"
unity="$root/mlx/shim_unity.cpp"
want="// shim digest: $digest"
if ! grep -qxF "$want" "$unity" 2>/dev/null; then
  cat > "$unity" <<CPP
// cgo compiles only C/C++ files in the package's own folder; the shim lives in
// shim/ and is built here as a single translation unit. The digest below
// (scripts/shim-stamp.sh) changes with the shim, so Go's build cache, which
// does not see files in shim/, rebuilds when the shim changes.
$want
#include "shim/shim.cpp"
#include "shim/compile.cpp"
#include "shim/blas.cpp"
#include "shim/system.cpp"
#include "shim/gdn.cpp"
#include "shim/norm.cpp"
#include "shim/rope.cpp"
#include "shim/act.cpp"
#include "shim/dist.cpp"
#include "shim/topk.cpp"
#include "shim/part.cpp"
CPP
fi
