package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/cgo"
	"runtime/debug"
	"strconv"
	"strings"
	"unsafe"
)

// Compiled is a function of arrays that MLX compiles (mx::compile): the
// first call with a new signature of inputs (shapes and dtypes) traces the Go
// function, MLX simplifies the traced graph and fuses its chains of
// element-wise ops into single kernels, and later calls with that signature
// reuse the trace without running the Go function. On a GPU, where a decode
// step is bound by kernel launches, fusing a chain of k element-wise ops
// saves k−1 launches per call. (On the CPU MLX builds fused kernels with the
// system C++ compiler, once per kernel, cached on disk.)
//
// The function must be pure in its inputs: an array it reads that is not an
// input (a weight captured by the closure) is baked into the trace and reused
// by later calls, so pass such arrays as inputs. Go values it captures (an
// epsilon, a shape) are likewise fixed at the first trace; make one Compiled
// per distinct value.
//
// Setting SPECULA_COMPILE=0 (or MLX's MLX_DISABLE_COMPILE) runs the Go
// function directly on every call, which gives the same values op by op.
type Compiled struct {
	name   string
	nout   int
	fn     func(in []*Array) []*Array
	handle cgo.Handle
	c      C.spx_closure // created on the worker at the first call
	freed  bool
	// sigs are the input signatures MLX holds traces for (worker-owned).
	sigs map[string]struct{}
	// outs receives the output handles of a call (worker-owned, reused).
	outs []C.spx_array
}

// compileDisabled is read once: SPECULA_COMPILE=0 turns compilation off.
var compileDisabled = os.Getenv("SPECULA_COMPILE") == "0"

// CompileEnabled reports whether Compiled functions are compiled (false
// under SPECULA_COMPILE=0).
func CompileEnabled() bool { return !compileDisabled }

// Compile returns fn as a compiled function with nout outputs. name appears
// in errors. Nothing is traced until the first Call.
func Compile(name string, nout int, fn func(in []*Array) []*Array) *Compiled {
	if nout < 1 {
		panic("mlx: Compile needs at least one output")
	}
	f := &Compiled{name: name, nout: nout, fn: fn, outs: make([]C.spx_array, nout)}
	f.handle = cgo.NewHandle(f)
	return f
}

// MaxTracedSignatures bounds the input signatures whose traces MLX keeps
// per compiled function. MLX looks a call's trace up by scanning them, and
// every distinct prompt length adds one, so a long-running process would
// slow down and grow; past the bound the traces are dropped and the
// signatures in use (a decode step's, a verification's) are traced again.
const MaxTracedSignatures = 64

// Call runs the compiled function on inputs and returns its nout outputs
// (lazy, like any op). If an input is empty or tracing fails, the error is
// recorded like an op's and every output is empty.
func (f *Compiled) Call(inputs ...*Array) []*Array {
	mustWorker()
	if f.freed {
		panic(fmt.Sprintf("mlx: call of the freed compiled function %s", f.name))
	}
	if compileDisabled {
		out := f.fn(inputs)
		f.checkOutputs(len(out))
		return out
	}
	outs := make([]*Array, f.nout)
	hs, ok := handles(inputs)
	if !ok {
		for i := range outs {
			outs[i] = empty()
		}
		return outs
	}
	if f.c.ctx == nil {
		if err := status(C.spx_compile(&f.c, C.uintptr_t(f.handle), false)); err != nil {
			panic(fmt.Sprintf("mlx: compiling %s: %v", f.name, err)) // allocation only: cannot fail for a user reason
		}
		f.sigs = map[string]struct{}{}
	}
	if sig := signature(inputs); !f.hasTrace(sig) {
		if len(f.sigs) >= MaxTracedSignatures {
			C.spx_compiled_reset(f.c)
			clear(f.sigs)
		}
		f.sigs[sig] = struct{}{}
	}
	// One slot per declared output (the shim refuses to write more).
	cs := f.outs
	clear(cs)
	var n C.size_t
	var in *C.spx_array
	if len(hs) > 0 {
		in = &hs[0]
	}
	rc := C.spx_compiled_call(&cs[0], C.size_t(f.nout), &n, f.c, in, C.size_t(len(hs)))
	if p := tracePanic; p != nil {
		tracePanic = nil
		for _, c := range cs[:n] {
			if c.ctx != nil {
				C.spx_array_free(c)
			}
		}
		panic(p)
	}
	traced := traceFailed
	traceFailed = false
	if err := status(rc); err != nil {
		if !traced { // a failure inside MLX's compile, not in the Go function
			err = fmt.Errorf("compiled function %s: %w", f.name, err)
		}
		record(err)
		for i := range outs {
			outs[i] = empty()
		}
		return outs
	}
	f.checkOutputs(int(n))
	for i := range outs {
		outs[i] = wrap(cs[i])
	}
	return outs
}

// Free releases the compiled function and MLX's cached traces of it.
// Package-level compiled functions live as long as the program; free those
// made per model instance when the instance goes. A freed function must not
// be called again.
func (f *Compiled) Free() {
	mustWorker()
	if f.freed {
		return
	}
	if f.c.ctx != nil {
		C.spx_compiled_free(f.c)
		f.c.ctx = nil
	}
	f.handle.Delete()
	f.freed = true
}

func (f *Compiled) hasTrace(sig string) bool {
	_, ok := f.sigs[sig]
	return ok
}

// signature is what MLX matches a call's trace by: every input's dtype and
// shape.
func signature(inputs []*Array) string {
	b := make([]byte, 0, 16*len(inputs))
	for _, a := range inputs {
		b = strconv.AppendInt(b, int64(a.DType()), 10)
		for _, d := range a.Shape() {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, ';')
	}
	return string(b)
}

func (f *Compiled) checkOutputs(n int) {
	if n != f.nout {
		panic(fmt.Sprintf("mlx: compiled function %s returned %d outputs, declared %d", f.name, n, f.nout))
	}
}

// traceFailed says that the last trace failed in the Go function, whose
// error already names the compiled function (worker-owned).
var traceFailed bool

// tracePanic carries a panic of a traced Go function across the C++ frames
// of MLX's compile back to Call, which re-raises it (worker-owned).
var tracePanic *WorkerPanic

// spxGoTrace runs the Go function of the Compiled behind handle on the
// tracer arrays MLX lends it and pushes the outputs to sink. Arrays the
// function creates are freed here; the outputs live on in sink.
//
//export spxGoTrace
func spxGoTrace(handle C.uintptr_t, inputs *C.spx_array, nin C.size_t, sink unsafe.Pointer) (rc C.int) {
	f := cgo.Handle(handle).Value().(*Compiled)
	lent := make([]*Array, int(nin))
	for i, c := range unsafe.Slice(inputs, int(nin)) {
		// Owned by the C++ caller: never registered, never freed here.
		lent[i] = &Array{c: c, shared: true}
	}
	defer func() {
		for _, a := range lent {
			a.c.ctx, a.freed = nil, true
		}
		if r := recover(); r != nil {
			tracePanic = &WorkerPanic{Value: r, Stack: debug.Stack()}
			setTraceError(fmt.Sprintf("compiled function %s panicked while tracing: %v", f.name, r))
			rc = 1
		}
	}()
	err := withScope(func() error {
		out := f.fn(lent)
		f.checkOutputs(len(out))
		for i, a := range out {
			a.checkLive()
			if !a.Valid() {
				return fmt.Errorf("output %d is empty", i)
			}
			C.spx_sink_push(sink, a.c)
		}
		return nil
	})
	if err != nil {
		setTraceError(fmt.Sprintf("compiled function %s: %v", f.name, err))
		return 1
	}
	pendingTraces++ // the next evaluation may build its kernels
	return 0
}

func setTraceError(msg string) {
	traceFailed = true
	cs := C.CString(msg)
	defer C.free(unsafe.Pointer(cs))
	C.spx_set_error(cs)
}

// GraphOps counts the pending nodes of the graph behind arrays (those the
// next evaluation will compute) by MLX primitive name: a fused chain of a
// Compiled function is one "Compiled…" node. It is a diagnostic for kernel
// counts per step; views (reshape, slice) are counted too, though they
// launch nothing.
func GraphOps(arrays ...*Array) (map[string]int, error) {
	mustWorker()
	hs, ok := handles(arrays)
	if !ok {
		return nil, ErrEmpty
	}
	ops, err := pendingOps(hs)
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(ops))
	for name, n := range ops {
		counts[name] = int(n)
	}
	return counts, nil
}

// pendingOps counts the pending nodes behind hs by primitive name (GraphOps,
// and the node counting of EvalTimes).
func pendingOps(hs []C.spx_array) (map[string]int64, error) {
	var text *C.char
	var in *C.spx_array
	if len(hs) > 0 {
		in = &hs[0]
	}
	if err := status(C.spx_graph_ops(&text, in, C.size_t(len(hs)))); err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(text))
	counts := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(C.GoString(text)), "\n") {
		name, n, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("mlx: graph ops: bad line %q", line)
		}
		counts[name] = v
	}
	return counts, nil
}
