package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"os"
	"path/filepath"
	"runtime"
	"unsafe"
)

// openBLASFile is where `make deps` unpacks scipy-openblas32, relative to
// the module root.
const openBLASFile = ".deps/openblas/libscipy_openblas.so"

// setDefaultBLAS tells the shim which OpenBLAS to load for CPU matmuls when
// SPECULA_BLAS is unset: the one `make deps` unpacked beside this source
// file's module, when the binary was built from a checkout that has it.
// (Passing the folder as a -D cgo flag would refuse checkouts whose path
// holds a '-', which cgo does not allow in macro values.)
func setDefaultBLAS() {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return
	}
	path := filepath.Join(filepath.Dir(file), "..", openBLASFile)
	if _, err := os.Stat(path); err != nil {
		return
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	C.spx_blas_set_default(cs)
}
