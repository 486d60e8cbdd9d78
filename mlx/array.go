package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Array is a handle to an MLX array: a node of MLX's lazy graph. Arrays are
// immutable; ops return new arrays. An Array made by a failed op is empty: it
// carries no node, ops on it return empty arrays at no cost, and the failure
// is returned by the next Eval (see Err). An Array may only be used on the MLX
// worker (inside Do or Call).
type Array struct {
	c     C.spx_array
	pins  int32
	freed bool
	scope *scope // scope owning the handle; nil while pinned past a sweep

	// shape and dtype are cached on first use (arrays are immutable).
	shape []int
	dtype DType
	known bool

	// t is the cached transposed view used by Linear (owned by a: released
	// with it). Weights are transposed once instead of once per use.
	t *Array
	// tb is t as [1, in, out] (owned by a), for Linear of a batch of one.
	tb *Array
	// shared marks worker-wide constants (cached scalars): never freed.
	shared bool
}

// wrap registers a freshly created C handle in the current scope.
func wrap(c C.spx_array) *Array {
	a := &Array{c: c}
	register(a)
	return a
}

// empty returns an empty array (the result of a failed op).
func empty() *Array { return &Array{} }

// Valid reports whether a holds a graph node (it is not the empty result of a
// failed op, and not freed).
func (a *Array) Valid() bool { return a != nil && a.c.ctx != nil }

func (a *Array) checkLive() {
	if a == nil {
		panic("mlx: nil *Array")
	}
	if a.freed {
		panic("mlx: use of a freed array")
	}
}

// status converts a shim return code: 0 is success, 1 an MLX error (returned),
// 2 a call off the worker (a programmer error, so a panic).
func status(rc C.int) error {
	switch rc {
	case C.SPX_OK:
		return nil
	case C.SPX_OFF_WORKER:
		panic(errOffWorker)
	default:
		return &Error{Msg: C.GoString(C.spx_last_error())}
	}
}

// Error is an error raised by MLX (shape mismatch, bad dtype, allocation
// failure, ...).
type Error struct {
	Msg string
}

func (e *Error) Error() string { return "mlx: " + e.Msg }

// ErrEmpty is returned when reading an array whose op failed before any error
// was recorded in the current scope (the error went to an outer scope or was
// already consumed).
var ErrEmpty = errors.New("mlx: empty array (an earlier op failed)")

func (a *Array) describe() {
	if a.known || !a.Valid() {
		return
	}
	var nd C.int
	if err := status(C.spx_array_ndim(&nd, a.c)); err != nil {
		panic(err) // a live handle always has a shape
	}
	a.shape = make([]int, int(nd))
	if nd > 0 {
		dims := make([]C.int, int(nd))
		if err := status(C.spx_array_shape(&dims[0], nd, a.c)); err != nil {
			panic(err)
		}
		for i, d := range dims {
			a.shape[i] = int(d)
		}
	}
	var dt C.int
	if err := status(C.spx_array_dtype(&dt, a.c)); err != nil {
		panic(err)
	}
	a.dtype = DType(dt)
	a.known = true
}

// Shape returns the dimensions of a (nil for an empty array). The slice must
// not be modified.
func (a *Array) Shape() []int {
	a.checkLive()
	a.describe()
	return a.shape
}

// Dim returns dimension i; negative i counts from the end.
func (a *Array) Dim(i int) int {
	s := a.Shape()
	if i < 0 {
		i += len(s)
	}
	return s[i]
}

// NDim is the number of dimensions.
func (a *Array) NDim() int { return len(a.Shape()) }

// DType returns the element type.
func (a *Array) DType() DType {
	a.checkLive()
	a.describe()
	return a.dtype
}

// Size is the number of elements.
func (a *Array) Size() int {
	n := 1
	for _, d := range a.Shape() {
		n *= d
	}
	return n
}

// NBytes is the size of the array's data in bytes (elements × dtype size).
func (a *Array) NBytes() int64 {
	return int64(a.Size()) * int64(a.DType().Size())
}

// Evaluated reports whether an evaluation has reached a: its value has
// been computed (or read from a file), or is being. A lazy array that no
// evaluation needed reports false; so does an empty one. Tests use it to
// show what a load did not read.
func (a *Array) Evaluated() bool {
	if !a.Valid() {
		return false
	}
	a.checkLive()
	var out C.bool
	if err := status(C.spx_array_evaluated(&out, a.c)); err != nil {
		return false
	}
	return bool(out)
}

// String describes the array's shape and dtype (not its values).
func (a *Array) String() string {
	if a == nil {
		return "<nil array>"
	}
	if a.freed {
		return "<freed array>"
	}
	if !a.Valid() {
		return "<empty array>"
	}
	return fmt.Sprintf("array(%v, %s)", a.Shape(), a.DType())
}

func cInts(v []int) (*C.int, C.int) {
	if len(v) == 0 {
		return nil, 0
	}
	out := make([]C.int, len(v))
	for i, x := range v {
		out[i] = C.int(x)
	}
	return &out[0], C.int(len(v))
}

// FromBytes copies little-endian, row-major host data into a new array of
// the given dtype and shape. MLX on Linux always copies host buffers; large
// weights should come through LoadSafetensors instead (on CUDA a host-built
// array lands in managed memory).
func FromBytes(data []byte, dtype DType, shape ...int) *Array {
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	dims, nd := cInts(shape)
	var out C.spx_array
	if err := status(C.spx_array_from_data(&out, p, C.size_t(len(data)), dims, nd, C.int(dtype))); err != nil {
		record(err)
		return empty()
	}
	return wrap(out)
}

func checkLen(n int, shape []int) {
	want := 1
	for _, d := range shape {
		want *= d
	}
	if want != n {
		panic(fmt.Sprintf("mlx: %d values for shape %v (%d elements)", n, shape, want))
	}
}

// FromFloat32s copies values into a float32 array of the given shape (a 1-D
// array when shape is omitted).
func FromFloat32s(v []float32, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	checkLen(len(v), shape)
	return FromBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), Float32, shape...)
}

// FromInt32s copies values into an int32 array of the given shape.
func FromInt32s(v []int32, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	checkLen(len(v), shape)
	return FromBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), Int32, shape...)
}

// FromUint32s copies values into a uint32 array of the given shape.
func FromUint32s(v []uint32, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	checkLen(len(v), shape)
	return FromBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), Uint32, shape...)
}

// FromInt64s copies values into an int64 array of the given shape.
func FromInt64s(v []int64, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	checkLen(len(v), shape)
	return FromBytes(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v)), Int64, shape...)
}

// FromUint8s copies values into a uint8 array of the given shape.
func FromUint8s(v []uint8, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	checkLen(len(v), shape)
	return FromBytes(v, Uint8, shape...)
}

// FromBools copies values into a bool array of the given shape.
func FromBools(v []bool, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	checkLen(len(v), shape)
	b := make([]byte, len(v))
	for i, x := range v {
		if x {
			b[i] = 1
		}
	}
	return FromBytes(b, Bool, shape...)
}

// scalarKey identifies a cached scalar constant.
type scalarKey struct {
	v     float64
	dtype DType
}

// scalars caches Scalar results (worker-owned): models use a handful of
// constants (0, 1, eps, scales) in every layer of every step, and each would
// otherwise be a new graph node.
var scalars = map[scalarKey]*Array{}

// Scalar returns a rank-0 array holding v converted to dtype. Use the dtype
// of the operand it meets: MLX promotes bfloat16 ⊕ float32 to float32. The
// array is a shared constant: Free and Unpin leave it alone.
func Scalar(v float64, dtype DType) *Array {
	mustWorker()
	key := scalarKey{v, dtype}
	if a, ok := scalars[key]; ok && a.Valid() {
		return a
	}
	a := newScalar(v, dtype)
	if a.Valid() {
		// Own it outside every scope.
		a.scope, a.pins, a.shared = nil, 1, true
		scalars[key] = a
	}
	return a
}

// constantKey identifies a cached constant vector.
type constantKey struct {
	v     float64
	dtype DType
	n     int
}

// constants caches Constant results (worker-owned).
var constants = map[constantKey]*Array{}

// Constant returns the vector [n] whose elements all hold v in dtype, as a
// shared constant like Scalar's: made once (evaluated with the first graph
// that reads it) and reused by every step (a norm weight that only scales,
// say).
func Constant(v float64, dtype DType, n int) *Array {
	mustWorker()
	key := constantKey{v, dtype, n}
	if a, ok := constants[key]; ok && a.Valid() {
		return a
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(v)
	}
	a := FromFloat32s(vals, n)
	if dtype != Float32 {
		a = AsType(a, dtype)
	}
	if !a.Valid() {
		return a
	}
	a.scope, a.pins, a.shared = nil, 1, true
	constants[key] = a
	return a
}

func newScalar(v float64, dtype DType) *Array {
	var out C.spx_array
	var rc C.int
	if dtype.IsFloat() {
		rc = C.spx_array_scalar_float(&out, C.double(v), C.int(dtype))
	} else {
		rc = C.spx_array_scalar_int(&out, C.int64_t(int64(v)), C.int(dtype))
	}
	if err := status(rc); err != nil {
		record(err)
		return empty()
	}
	return wrap(out)
}

// Bytes evaluates a and returns a copy of its elements as little-endian,
// row-major bytes in a's dtype. Strided or broadcast arrays are made
// contiguous first.
func (a *Array) Bytes() ([]byte, error) {
	a.checkLive()
	if !a.Valid() {
		if err := takeErr(); err != nil {
			return nil, err
		}
		return nil, ErrEmpty
	}
	if err := takeErr(); err != nil {
		return nil, err
	}
	var n C.size_t
	if err := status(C.spx_array_nbytes(&n, a.c)); err != nil {
		return nil, err
	}
	buf := make([]byte, int(n))
	var p unsafe.Pointer
	if n > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	// Reading evaluates a first.
	hs := []C.spx_array{a.c}
	countPending(hs)
	submit := func() error { return submitHandles(hs, true) }
	read := func() error { return withJITLock(func() error { return status(C.spx_array_read(p, n, a.c)) }) }
	if err := timedSync(submit, read); err != nil {
		return nil, err
	}
	return buf, nil
}

// as returns a cast to dtype (a itself if it already has it).
func (a *Array) as(dtype DType) *Array {
	if a.Valid() && a.DType() == dtype {
		return a
	}
	return AsType(a, dtype)
}

// Float32s evaluates a and returns its elements as float32 (cast on the
// device first when a has another dtype).
func (a *Array) Float32s() ([]float32, error) {
	b, err := a.as(Float32).Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// Int32s evaluates a and returns its elements as int32 (cast first if needed).
func (a *Array) Int32s() ([]int32, error) {
	b, err := a.as(Int32).Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// Int64s evaluates a and returns its elements as int64 (cast first if needed).
func (a *Array) Int64s() ([]int64, error) {
	b, err := a.as(Int64).Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out, nil
}

// Bools evaluates a and returns its elements as bool (cast first if needed).
func (a *Array) Bools() ([]bool, error) {
	b, err := a.as(Bool).Bytes()
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(b))
	for i, x := range b {
		out[i] = x != 0
	}
	return out, nil
}

// Item evaluates a one-element array and returns its value (through float32,
// which every backend supports).
func (a *Array) Item() (float32, error) {
	if a.Valid() && a.Size() != 1 {
		return 0, fmt.Errorf("mlx: Item of an array with %d elements", a.Size())
	}
	v, err := a.Float32s()
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// Eval evaluates the arrays (and everything they depend on) and returns the
// first MLX error recorded in the current scope since the last Eval, or the
// error raised while evaluating. The sticky error is cleared.
func Eval(arrays ...*Array) error {
	return eval(false, arrays)
}

// AsyncEval starts evaluating the arrays and returns at once; Eval them (or
// read them) before use.
func AsyncEval(arrays ...*Array) error {
	return eval(true, arrays)
}

func eval(async bool, arrays []*Array) error {
	mustWorker()
	if err := takeErr(); err != nil {
		return err
	}
	hs := make([]C.spx_array, 0, len(arrays))
	for _, a := range arrays {
		if a == nil {
			continue
		}
		a.checkLive()
		if !a.Valid() {
			return ErrEmpty
		}
		hs = append(hs, a.c)
	}
	if len(hs) == 0 {
		return nil
	}
	if async {
		countPending(hs)
		return timedSubmit(func() error { return submitHandles(hs, false) })
	}
	return syncHandles(hs)
}

// syncHandles evaluates hs and waits for them (timed by timedSync).
func syncHandles(hs []C.spx_array) error {
	countPending(hs)
	return timedSync(func() error { return submitHandles(hs, true) }, func() error {
		return withJITLock(func() error { return status(C.spx_eval(&hs[0], C.size_t(len(hs)))) })
	})
}
