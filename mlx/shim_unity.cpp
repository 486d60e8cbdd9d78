// cgo compiles only C/C++ files in the package's own folder; the shim lives in
// shim/ and is built here as a single translation unit. The digest below
// (scripts/shim-stamp.sh) changes with the shim, so Go's build cache, which
// does not see files in shim/, rebuilds when the shim changes.
// shim digest: 3759e861a3b313d99d6c20d1237203de
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
