// cgo compiles only C/C++ files in the package's own folder; the shim lives in
// shim/ and is built here as a single translation unit. The digest below
// (scripts/shim-stamp.sh) changes with the shim, so Go's build cache, which
// does not see files in shim/, rebuilds when the shim changes.
// shim digest: 24752a6d3e0cb9fa5aa051ef2d66a8ec
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
