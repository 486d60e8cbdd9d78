package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// TensorFile is a safetensors file opened to read parts of its tensors
// lazily (LoadPart): a rank of a tensor-parallel model reads only its
// slices of each weight, never the whole tensor. The reads go through MLX's
// own Load primitive, as LoadSafetensors's do (on CUDA through a staging
// buffer into device memory). The caller must have validated the file
// (package loader) and derives the parts from its header.
type TensorFile struct {
	path string

	mu sync.Mutex
	c  C.spx_tensor_file // ctx nil once closed
}

// ByteRange is a range of bytes: Len bytes from Start.
type ByteRange struct{ Start, Len int64 }

// FilePart says where the bytes of a part of a stored tensor lie in its
// file: Blocks blocks, block i starting at byte Offset + i·Stride, and of
// each block the Ranges (relative to the block's start), concatenated in
// order. Rows of a matrix are one block of one range; a range of its
// columns is one block per row.
type FilePart struct {
	Offset, Blocks, Stride int64
	Ranges                 []ByteRange
}

// Bytes is the part's size: Blocks times the ranges' lengths.
func (p FilePart) Bytes() int64 {
	var n int64
	for _, r := range p.Ranges {
		n += r.Len
	}
	return p.Blocks * n
}

// OpenTensorFile opens path for LoadPart. It runs on the MLX worker.
func OpenTensorFile(path string) (*TensorFile, error) {
	mustWorker()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	f := &TensorFile{path: path}
	if err := status(C.spx_tensor_file_open(&f.c, cpath)); err != nil {
		return nil, err
	}
	return f, nil
}

// Path is the file's path, as given to OpenTensorFile.
func (f *TensorFile) Path() string { return f.path }

// LoadPart returns a lazy array of shape and stored dtype (the safetensors
// name, "BF16") whose bytes are the part p of the file, read when the array
// is evaluated; no other byte of the file is read. The part's size must be
// the array's. It runs on the MLX worker.
func (f *TensorFile) LoadPart(dtype string, shape []int, p FilePart) (*Array, error) {
	mustWorker()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c.ctx == nil {
		return nil, fmt.Errorf("mlx: LoadPart on %s after Close", f.path)
	}
	if p.Offset < 0 || p.Blocks < 1 || p.Stride < 0 || len(p.Ranges) == 0 {
		return nil, fmt.Errorf("mlx: part of %s: %d blocks of stride %d at offset %d with %d ranges: want at least one block and one range", f.path, p.Blocks, p.Stride, p.Offset, len(p.Ranges))
	}
	starts := make([]C.uint64_t, len(p.Ranges))
	lens := make([]C.uint64_t, len(p.Ranges))
	for i, r := range p.Ranges {
		if r.Start < 0 || r.Len < 1 {
			return nil, fmt.Errorf("mlx: part of %s: byte range %d is %+v: want a non-negative start and a positive length", f.path, i, r)
		}
		starts[i], lens[i] = C.uint64_t(r.Start), C.uint64_t(r.Len)
	}
	cdt := C.CString(dtype)
	defer C.free(unsafe.Pointer(cdt))
	s, n := cInts(shape)
	var out C.spx_array
	if err := status(C.spx_tensor_file_load(&out, f.c, cdt, s, n, C.uint64_t(p.Offset), C.uint64_t(p.Blocks), C.uint64_t(p.Stride),
		&starts[0], &lens[0], C.size_t(len(p.Ranges)), defaultStream)); err != nil {
		return nil, fmt.Errorf("mlx: part of %s: %w", f.path, err)
	}
	return wrap(out), nil
}

// Close releases the file; parts already loaded keep it open until they
// are read or freed. It may be called on any goroutine, more than once.
func (f *TensorFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c.ctx != nil {
		C.spx_tensor_file_free(f.c)
		f.c.ctx = nil
	}
	return nil
}
