package mlx

// The MLX headers and libmlx.so come from the pinned wheel unpacked by
// `make deps` into .deps/ at the module root. The cblas_* symbols are
// exported so that MLX's CPU matmuls reach the BLAS chosen in
// shim/blas.cpp. ${SRCDIR} makes the rpath
// absolute to this checkout, which suits development and CI; a distributed
// binary needs an $ORIGIN-relative rpath set by its packaging step.

/*
#cgo CXXFLAGS: -std=c++20 -O2 -I${SRCDIR}/../.deps/mlx/include -Wno-deprecated-declarations
#cgo CFLAGS: -I${SRCDIR}
#cgo LDFLAGS: -L${SRCDIR}/../.deps/mlx/lib -lmlx -Wl,-rpath,${SRCDIR}/../.deps/mlx/lib -lstdc++ -ldl
#cgo LDFLAGS: -rdynamic
#include "shim/shim.h"
*/
import "C"
