package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"sort"
	"unsafe"
)

// LoadSafetensors maps every tensor of a safetensors file to a lazy array that
// MLX reads from the file on the current stream when it is evaluated. This is
// the path for weights: MLX reads into its own allocations (on CUDA into
// device memory through a staging buffer), never through Go memory. The
// caller must have validated the file first (package loader).
func LoadSafetensors(path string) (map[string]*Array, error) {
	mustWorker()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var m C.spx_tensor_map
	if err := status(C.spx_load_safetensors(&m, cpath, defaultStream)); err != nil {
		return nil, err
	}
	defer C.spx_tensor_map_free(m)
	var n C.size_t
	if err := status(C.spx_tensor_map_size(&n, m)); err != nil {
		return nil, err
	}
	out := make(map[string]*Array, int(n))
	for i := C.size_t(0); i < n; i++ {
		var name *C.char
		var a C.spx_array
		if err := status(C.spx_tensor_map_get(&name, &a, m, i)); err != nil {
			return nil, err
		}
		out[C.GoString(name)] = wrap(a)
	}
	return out, nil
}

// SaveSafetensors evaluates the arrays and writes them with metadata to path.
func SaveSafetensors(path string, arrays map[string]*Array, metadata map[string]string) error {
	mustWorker()
	if err := takeErr(); err != nil {
		return err
	}
	names := make([]string, 0, len(arrays))
	for name := range arrays {
		names = append(names, name)
	}
	sort.Strings(names)
	cnames := make([]*C.char, len(names))
	hs := make([]C.spx_array, len(names))
	for i, name := range names {
		a := arrays[name]
		a.checkLive()
		if !a.Valid() {
			return ErrEmpty
		}
		cnames[i] = C.CString(name)
		defer C.free(unsafe.Pointer(cnames[i]))
		hs[i] = a.c
	}
	keys := make([]*C.char, 0, len(metadata))
	vals := make([]*C.char, 0, len(metadata))
	for k, v := range metadata {
		ck, cv := C.CString(k), C.CString(v)
		defer C.free(unsafe.Pointer(ck))
		defer C.free(unsafe.Pointer(cv))
		keys = append(keys, ck)
		vals = append(vals, cv)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var pn **C.char
	var ph *C.spx_array
	if len(names) > 0 {
		pn, ph = &cnames[0], &hs[0]
	}
	var pk, pv **C.char
	if len(keys) > 0 {
		pk, pv = &keys[0], &vals[0]
	}
	return status(C.spx_save_safetensors(cpath, pn, ph, C.size_t(len(names)), pk, pv, C.size_t(len(keys))))
}
