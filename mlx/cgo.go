package mlx

// The MLX headers and libmlx.so come from the pinned wheel unpacked by
// `make deps` into .deps/ at the module root. The cblas_* symbols are
// exported so that MLX's CPU matmuls reach the BLAS chosen in
// shim/blas.cpp. Where the program finds libmlx.so at run time is set in
// rpath_checkout.go (this checkout's .deps/, for development and CI) or, with
// the specula_installed build tag, by the installing step's -extldflags
// (an $ORIGIN-relative rpath; see scripts/install.sh).
//
// --allow-shlib-undefined: the linker does not insist on resolving what
// libmlx.so itself needs. The CUDA libmlx.so needs the driver's libcuda.so.1,
// which a build machine without a GPU lacks, and, with CUDA_RUNTIME=system,
// CUDA libraries that only the machine running the program has; the dynamic
// loader resolves them there, and names any that is missing.

/*
#cgo CXXFLAGS: -std=c++20 -O2 -I${SRCDIR}/../.deps/mlx/include -Wno-deprecated-declarations
#cgo CFLAGS: -I${SRCDIR}
#cgo LDFLAGS: -L${SRCDIR}/../.deps/mlx/lib -lmlx -lstdc++ -ldl
#cgo LDFLAGS: -rdynamic -Wl,--allow-shlib-undefined
#include "shim/shim.h"
*/
import "C"
