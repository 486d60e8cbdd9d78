package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sync"
	"unsafe"
)

// CUDAKernel is a CUDA kernel that MLX compiles at run time (NVRTC). Source
// is the kernel body: MLX writes the signature, one `const T* <input>` per
// input and one `T* <output>` per output, in order; writing `<input>_shape`
// in the source also passes that input's shape (an int array), and
// `<input>_ndim` its number of dimensions. Template
// constants become `constexpr` values inside the body. Declare kernels as
// package variables (*CUDAKernel): the first launch with given input dtypes
// makes MLX's kernel function, which every later one reuses.
type CUDAKernel struct {
	Name    string
	Source  string
	Header  string
	Inputs  []string
	Outputs []string
	// Strided takes the inputs as they are: a view (a slice of a cache's
	// buffer) is not copied to a row-contiguous array first, and the source
	// indexes it by `<input>_strides` (elements per step of each axis). A
	// kernel that reads such views this way saves a copy, and a launch, per
	// input.
	Strided bool

	mu  sync.Mutex
	fns map[string]C.spx_cuda_fn // by input dtypes (dtypeKey)
}

// CompiledName is the name the kernel compiles under when its inputs have
// these dtypes: Name, then a hash of everything in the compiled text that
// the launch's template constants do not name — the header, the source and
// the inputs' dtypes. MLX caches a compiled kernel by its name and template
// constants alone, in the process and on disk ($TMPDIR/mlx/<version>/ptx,
// kept across runs and specula versions): with a fixed name, an edited
// kernel would load a stale build, and a launch with other input dtypes
// would run code compiled for the first ones.
func (k *CUDAKernel) CompiledName(inputs []DType) string {
	h := fnv.New64a()
	io.WriteString(h, k.Header)
	h.Write([]byte{0})
	io.WriteString(h, k.Source)
	h.Write([]byte(dtypeKey(inputs)))
	return fmt.Sprintf("%s_%012x", k.Name, h.Sum64()>>16)
}

// dtypeKey is the dtypes as a string of one byte each.
func dtypeKey(dts []DType) string {
	b := make([]byte, len(dts))
	for i, d := range dts {
		b[i] = byte(d)
	}
	return string(b)
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
// first, unless the kernel is Strided. It returns the outputs (lazy, like
// any op).
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
	fn, err := k.function(inputs)
	if err != nil {
		return nil, err
	}
	var cs cStrings
	defer cs.free()
	var dims, ndims, dtypes []C.int
	for i := range k.Outputs {
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
		tnames[i], tvals[i] = cs.add(t.Name), C.int(t.Value)
		if t.Bool {
			tkinds[i] = 1
		}
	}
	outs := make([]C.spx_array, len(k.Outputs))
	rc := C.spx_cuda_kernel(&outs[0], C.size_t(len(outs)), fn, &hs[0], C.size_t(len(hs)), &dims[0], &ndims[0], &dtypes[0],
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

// function returns MLX's kernel function for inputs of these dtypes, made
// on the first launch with them.
func (k *CUDAKernel) function(inputs []*Array) (C.spx_cuda_fn, error) {
	// The key is one byte per input dtype, on the stack: a launch that
	// finds its function allocates nothing here.
	var buf [16]byte
	if len(inputs) > len(buf) {
		panic("mlx: CUDAKernel: more than 16 inputs")
	}
	for i, a := range inputs {
		buf[i] = byte(a.DType())
	}
	key := buf[:len(inputs)]
	k.mu.Lock()
	defer k.mu.Unlock()
	if fn, ok := k.fns[string(key)]; ok {
		return fn, nil
	}
	dts := make([]DType, len(inputs))
	for i, a := range inputs {
		dts[i] = a.DType()
	}
	var cs cStrings
	defer cs.free()
	inNames := make([]*C.char, len(k.Inputs))
	for i, n := range k.Inputs {
		inNames[i] = cs.add(n)
	}
	outNames := make([]*C.char, len(k.Outputs))
	for i, n := range k.Outputs {
		outNames[i] = cs.add(n)
	}
	rowContiguous := C.int(1)
	if k.Strided {
		rowContiguous = 0
	}
	var fn C.spx_cuda_fn
	rc := C.spx_cuda_fn_new(&fn, cs.add(k.CompiledName(dts)), cs.add(k.Source), cs.add(k.Header),
		&inNames[0], C.size_t(len(inNames)), &outNames[0], C.size_t(len(outNames)), rowContiguous)
	if err := status(rc); err != nil {
		return fn, err
	}
	if k.fns == nil {
		k.fns = make(map[string]C.spx_cuda_fn)
	}
	k.fns[string(key)] = fn
	return fn, nil
}

// cStrings holds C copies of Go strings until free.
type cStrings []*C.char

func (cs *cStrings) add(s string) *C.char {
	p := C.CString(s)
	*cs = append(*cs, p)
	return p
}

func (cs cStrings) free() {
	for _, p := range cs {
		C.free(unsafe.Pointer(p))
	}
}
