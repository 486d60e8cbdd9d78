// cgo compiles only C/C++ files in the package's own folder; the shim lives in
// shim/ and is built here as a single translation unit. The digest below
// (scripts/shim-stamp.sh) changes with the shim, so Go's build cache, which
// does not see files in shim/, rebuilds when the shim changes.
// shim digest: 0e447077f43ef052c2b5554e66d3c099
#include "shim/shim.cpp"
#include "shim/compile.cpp"
#include "shim/blas.cpp"
