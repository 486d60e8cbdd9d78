package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// CUDAKernel is a CUDA kernel that MLX compiles at run time (NVRTC) and
// caches by name and template constants. Source is the kernel body: MLX
// writes the signature, one `const T* <input>` per input and one `T*
// <output>` per output, in order; writing `<input>_shape` in the source also
// passes that input's shape (an int array). Template constants become
// `constexpr` values inside the body.
type CUDAKernel struct {
	Name    string
	Source  string
	Header  string
	Inputs  []string
	Outputs []string
}

// KernelTemplate is a compile-time constant of a CUDAKernel: an int or a
// bool.
type KernelTemplate struct {
	Name  string
	Value int
	Bool  bool // a bool constant (Value != 0 is true)
}

// KernelLaunch describes one launch: the output shapes and dtypes, the grid
// in threads (not blocks) and the block size.
type KernelLaunch struct {
	OutputShapes [][]int
	OutputDTypes []DType
	Grid, Block  [3]int
	Templates    []KernelTemplate
}

// ErrNoCUDA is returned by CUDAKernel.Run off the GPU.
var ErrNoCUDA = errors.New("mlx: custom CUDA kernels need the GPU device of a CUDA build")

// Run launches the kernel on the GPU stream; inputs are made row-contiguous
// first. It returns the outputs (lazy, like any op).
func (k *CUDAKernel) Run(inputs []*Array, l KernelLaunch) ([]*Array, error) {
	mustWorker()
	if device != GPU {
		return nil, ErrNoCUDA
	}
	if len(inputs) != len(k.Inputs) || len(l.OutputShapes) != len(k.Outputs) || len(l.OutputDTypes) != len(k.Outputs) {
		panic("mlx: CUDAKernel.Run: inputs, output shapes and dtypes must match the kernel's names")
	}
	hs, ok := handles(inputs)
	if !ok {
		return nil, ErrEmpty
	}
	var cstrs []*C.char
	cstr := func(s string) *C.char {
		p := C.CString(s)
		cstrs = append(cstrs, p)
		return p
	}
	defer func() {
		for _, p := range cstrs {
			C.free(unsafe.Pointer(p))
		}
	}()
	inNames := make([]*C.char, len(k.Inputs))
	for i, n := range k.Inputs {
		inNames[i] = cstr(n)
	}
	outNames := make([]*C.char, len(k.Outputs))
	var dims, ndims, dtypes []C.int
	for i, n := range k.Outputs {
		outNames[i] = cstr(n)
		for _, d := range l.OutputShapes[i] {
			dims = append(dims, C.int(d))
		}
		ndims = append(ndims, C.int(len(l.OutputShapes[i])))
		dtypes = append(dtypes, C.int(l.OutputDTypes[i]))
	}
	if len(dims) == 0 {
		dims = append(dims, 0)
	}
	tnames := make([]*C.char, len(l.Templates)+1)
	tvals := make([]C.int, len(l.Templates)+1)
	tkinds := make([]C.int, len(l.Templates)+1)
	for i, t := range l.Templates {
		tnames[i], tvals[i] = cstr(t.Name), C.int(t.Value)
		if t.Bool {
			tkinds[i] = 1
		}
	}
	outs := make([]C.spx_array, len(k.Outputs))
	rc := C.spx_cuda_kernel(&outs[0], C.size_t(len(outs)), cstr(k.Name), cstr(k.Source), cstr(k.Header),
		&inNames[0], &hs[0], C.size_t(len(hs)), &outNames[0], &dims[0], &ndims[0], &dtypes[0],
		C.int(l.Grid[0]), C.int(l.Grid[1]), C.int(l.Grid[2]), C.int(l.Block[0]), C.int(l.Block[1]), C.int(l.Block[2]),
		&tnames[0], &tvals[0], &tkinds[0], C.size_t(len(l.Templates)), defaultStream)
	if err := status(rc); err != nil {
		for _, o := range outs {
			if o.ctx != nil {
				C.spx_array_free(o)
			}
		}
		return nil, err
	}
	res := make([]*Array, len(outs))
	for i, o := range outs {
		res[i] = wrap(o)
	}
	return res, nil
}
