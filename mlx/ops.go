package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"slices"
	"unsafe"
)

// Ops build graph nodes on the worker's default stream; nothing runs until
// Eval. A failing op records the first error in the current scope and returns
// an empty array; ops on an empty array return an empty array. Weights follow
// the checkpoint layout [out, in], so a linear layer is Matmul(x, T(w)) or
// Linear(x, w).

// build runs a shim call that writes one array; inputs are checked first.
func build(fn func(out *C.spx_array) C.int, inputs ...*Array) *Array {
	for _, in := range inputs {
		if in == nil {
			continue // optional input
		}
		in.checkLive()
		if !in.Valid() {
			return empty()
		}
	}
	var out C.spx_array
	if err := status(fn(&out)); err != nil {
		if out.ctx != nil {
			C.spx_array_free(out)
		}
		record(err)
		return empty()
	}
	return wrap(out)
}

// h returns the C handle of an optional array (the empty handle for nil).
func h(a *Array) C.spx_array {
	if a == nil {
		return C.spx_array{}
	}
	return a.c
}

func must(a *Array) *Array {
	if a == nil {
		panic("mlx: nil *Array where an array is required")
	}
	return a
}

// ---- element-wise ----

func unaryOp(op C.int, a *Array) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int { return C.spx_unary(out, op, a.c, defaultStream) }, a)
}

func binaryOp(op C.int, a, b *Array) *Array {
	must(a)
	must(b)
	return build(func(out *C.spx_array) C.int { return C.spx_binary(out, op, a.c, b.c, defaultStream) }, a, b)
}

// Negative returns -a.
func Negative(a *Array) *Array { return unaryOp(C.SPX_NEGATIVE, a) }

// Exp returns e^a.
func Exp(a *Array) *Array { return unaryOp(C.SPX_EXP, a) }

// Log returns the natural logarithm of a.
func Log(a *Array) *Array { return unaryOp(C.SPX_LOG, a) }

// Log1p returns log(1 + a).
func Log1p(a *Array) *Array { return unaryOp(C.SPX_LOG1P, a) }

// Sigmoid returns 1 / (1 + e^-a).
func Sigmoid(a *Array) *Array { return unaryOp(C.SPX_SIGMOID, a) }

// Tanh returns the hyperbolic tangent of a.
func Tanh(a *Array) *Array { return unaryOp(C.SPX_TANH, a) }

// Rsqrt returns 1 / sqrt(a).
func Rsqrt(a *Array) *Array { return unaryOp(C.SPX_RSQRT, a) }

// Sqrt returns the square root of a.
func Sqrt(a *Array) *Array { return unaryOp(C.SPX_SQRT, a) }

// Square returns a².
func Square(a *Array) *Array { return unaryOp(C.SPX_SQUARE, a) }

// Abs returns |a|.
func Abs(a *Array) *Array { return unaryOp(C.SPX_ABS, a) }

// Floor rounds down.
func Floor(a *Array) *Array { return unaryOp(C.SPX_FLOOR, a) }

// Ceil rounds up.
func Ceil(a *Array) *Array { return unaryOp(C.SPX_CEIL, a) }

// Sign returns -1, 0 or 1 per element.
func Sign(a *Array) *Array { return unaryOp(C.SPX_SIGN, a) }

// LogicalNot negates a boolean array.
func LogicalNot(a *Array) *Array { return unaryOp(C.SPX_LOGICAL_NOT, a) }

// Sin returns the sine of a.
func Sin(a *Array) *Array { return unaryOp(C.SPX_SIN, a) }

// Cos returns the cosine of a.
func Cos(a *Array) *Array { return unaryOp(C.SPX_COS, a) }

// IsNaN reports NaN elements.
func IsNaN(a *Array) *Array { return unaryOp(C.SPX_ISNAN, a) }

// IsInf reports infinite elements.
func IsInf(a *Array) *Array { return unaryOp(C.SPX_ISINF, a) }

// Erf returns the error function of a.
func Erf(a *Array) *Array { return unaryOp(C.SPX_ERF, a) }

// Reciprocal returns 1 / a.
func Reciprocal(a *Array) *Array { return unaryOp(C.SPX_RECIPROCAL, a) }

// StopGradient returns a unchanged, as a distinct graph node.
func StopGradient(a *Array) *Array { return unaryOp(C.SPX_STOP_GRADIENT, a) }

// Add returns a + b (broadcasting).
func Add(a, b *Array) *Array { return binaryOp(C.SPX_ADD, a, b) }

// Subtract returns a - b.
func Subtract(a, b *Array) *Array { return binaryOp(C.SPX_SUBTRACT, a, b) }

// Multiply returns a · b element-wise.
func Multiply(a, b *Array) *Array { return binaryOp(C.SPX_MULTIPLY, a, b) }

// Divide returns a / b.
func Divide(a, b *Array) *Array { return binaryOp(C.SPX_DIVIDE, a, b) }

// Maximum returns the element-wise maximum.
func Maximum(a, b *Array) *Array { return binaryOp(C.SPX_MAXIMUM, a, b) }

// Minimum returns the element-wise minimum.
func Minimum(a, b *Array) *Array { return binaryOp(C.SPX_MINIMUM, a, b) }

// Power returns a^b.
func Power(a, b *Array) *Array { return binaryOp(C.SPX_POWER, a, b) }

// LogAddExp returns log(e^a + e^b) computed stably.
func LogAddExp(a, b *Array) *Array { return binaryOp(C.SPX_LOGADDEXP, a, b) }

// Equal returns a == b.
func Equal(a, b *Array) *Array { return binaryOp(C.SPX_EQUAL, a, b) }

// NotEqual returns a != b.
func NotEqual(a, b *Array) *Array { return binaryOp(C.SPX_NOT_EQUAL, a, b) }

// Less returns a < b.
func Less(a, b *Array) *Array { return binaryOp(C.SPX_LESS, a, b) }

// LessEqual returns a <= b.
func LessEqual(a, b *Array) *Array { return binaryOp(C.SPX_LESS_EQUAL, a, b) }

// Greater returns a > b.
func Greater(a, b *Array) *Array { return binaryOp(C.SPX_GREATER, a, b) }

// GreaterEqual returns a >= b.
func GreaterEqual(a, b *Array) *Array { return binaryOp(C.SPX_GREATER_EQUAL, a, b) }

// LogicalAnd returns a && b.
func LogicalAnd(a, b *Array) *Array { return binaryOp(C.SPX_LOGICAL_AND, a, b) }

// LogicalOr returns a || b.
func LogicalOr(a, b *Array) *Array { return binaryOp(C.SPX_LOGICAL_OR, a, b) }

// Remainder returns a mod b (sign of b, as in Python).
func Remainder(a, b *Array) *Array { return binaryOp(C.SPX_REMAINDER, a, b) }

// FloorDivide returns floor(a / b).
func FloorDivide(a, b *Array) *Array { return binaryOp(C.SPX_FLOOR_DIVIDE, a, b) }

// Matmul returns the matrix product a · b, batched over leading dimensions.
func Matmul(a, b *Array) *Array { return binaryOp(C.SPX_MATMUL, a, b) }

// Addmm returns beta·c + alpha·(a · b).
func Addmm(c, a, b *Array, alpha, beta float32) *Array {
	must(c)
	must(a)
	must(b)
	return build(func(out *C.spx_array) C.int {
		return C.spx_addmm(out, c.c, a.c, b.c, C.float(alpha), C.float(beta), defaultStream)
	}, c, a, b)
}

// Where selects x where cond is true and y elsewhere (broadcasting).
func Where(cond, x, y *Array) *Array {
	must(cond)
	must(x)
	must(y)
	return build(func(out *C.spx_array) C.int { return C.spx_where(out, cond.c, x.c, y.c, defaultStream) }, cond, x, y)
}

// AsType casts a to dtype.
func AsType(a *Array, dtype DType) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int { return C.spx_astype(out, a.c, C.int(dtype), defaultStream) }, a)
}

// ---- composites used by every architecture ----

// Silu returns a · sigmoid(a) (MLX's C++ core has no SiLU op).
func Silu(a *Array) *Array { return Multiply(a, Sigmoid(a)) }

// Softplus returns log(1 + e^a) = logaddexp(a, 0).
func Softplus(a *Array) *Array { return LogAddExp(a, Scalar(0, dtypeOr(a, Float32))) }

// Linear returns x · wᵀ for a weight stored [out, in]. The transposed view
// of w is made once and kept with w (a view, not a copy); when w holds its
// data (a loaded weight) the view is evaluated at once, so that it is a
// leaf: a graph, or a compiled function's trace, holds it as a constant and
// never runs the transpose again. An x of [1, L, in] is multiplied by the
// view as [1, in, out], which spares MLX's matmul the flatten and unflatten
// nodes it puts around a 3-dimensional x and a 2-dimensional weight (the
// product and its kernel are the same).
func Linear(x, w *Array) *Array {
	if x.Valid() && x.NDim() == 3 && x.Dim(0) == 1 {
		return Matmul(x, w.transposedBatch())
	}
	return Matmul(x, w.transposed())
}

// transposed returns the cached view of a with its last two axes swapped.
func (a *Array) transposed() *Array {
	must(a).checkLive()
	if !a.Valid() {
		return empty()
	}
	if a.t == nil || !a.t.Valid() {
		a.t = a.ownedView(SwapAxes(a, -1, -2))
	}
	return a.t
}

// transposedBatch returns the cached view of a 2-dimensional a [out, in]
// as [1, in, out].
func (a *Array) transposedBatch() *Array {
	must(a).checkLive()
	if !a.Valid() || a.NDim() != 2 {
		return a.transposed()
	}
	if a.tb == nil || !a.tb.Valid() {
		a.tb = a.ownedView(ExpandDims(a.transposed(), 0))
	}
	return a.tb
}

// ownedView prepares a view v of a that a caches: outside every scope
// (released with a) and, when a holds its data and is not an input of a
// function being traced, evaluated now — a leaf sharing a's buffer. A view
// of a pending array (a weight computed per call, such as a dequantized
// one) stays a lazy node: evaluating it would stall the graph being built.
// Failures are recorded as an op's are.
func (a *Array) ownedView(v *Array) *Array {
	if !v.Valid() {
		return v
	}
	// v depends on a alone: it can be evaluated when a holds its data and
	// is not a tracer.
	var ready, tracer C.bool
	err := status(C.spx_array_state(&ready, &tracer, a.c))
	if err == nil && bool(ready) && !bool(tracer) {
		err = syncHandles([]C.spx_array{v.c})
	}
	if err != nil {
		record(err)
	}
	v.scope, v.pins = nil, 1
	return v
}

// AddScalar returns a + v with v in a's dtype.
func AddScalar(a *Array, v float64) *Array { return Add(a, Scalar(v, dtypeOr(a, Float32))) }

// MultiplyScalar returns a · v with v in a's dtype.
func MultiplyScalar(a *Array, v float64) *Array {
	return Multiply(a, Scalar(v, dtypeOr(a, Float32)))
}

// dtypeOr returns a's dtype, or def for an empty array.
func dtypeOr(a *Array, def DType) DType {
	if a.Valid() {
		return a.DType()
	}
	return def
}

// ---- reductions ----

func reduce(op C.int, a *Array, keepDims bool, axes []int) *Array {
	must(a)
	if len(axes) == 0 && a.Valid() {
		axes = make([]int, a.NDim())
		for i := range axes {
			axes[i] = i
		}
	}
	ax, n := cInts(axes)
	return build(func(out *C.spx_array) C.int {
		return C.spx_reduce(out, op, a.c, ax, n, C.bool(keepDims), defaultStream)
	}, a)
}

// Sum reduces over axes (all axes when none are given).
func Sum(a *Array, keepDims bool, axes ...int) *Array { return reduce(C.SPX_SUM, a, keepDims, axes) }

// Mean reduces over axes (all axes when none are given).
func Mean(a *Array, keepDims bool, axes ...int) *Array {
	return reduce(C.SPX_MEAN, a, keepDims, axes)
}

// Max reduces over axes (all axes when none are given).
func Max(a *Array, keepDims bool, axes ...int) *Array { return reduce(C.SPX_MAX, a, keepDims, axes) }

// Min reduces over axes (all axes when none are given).
func Min(a *Array, keepDims bool, axes ...int) *Array { return reduce(C.SPX_MIN, a, keepDims, axes) }

// Prod reduces over axes (all axes when none are given).
func Prod(a *Array, keepDims bool, axes ...int) *Array {
	return reduce(C.SPX_PROD, a, keepDims, axes)
}

// LogSumExp reduces log Σ e^a over axes, stably.
func LogSumExp(a *Array, keepDims bool, axes ...int) *Array {
	return reduce(C.SPX_LOGSUMEXP, a, keepDims, axes)
}

// All reports whether every element over axes is true.
func All(a *Array, keepDims bool, axes ...int) *Array { return reduce(C.SPX_ALL, a, keepDims, axes) }

// Any reports whether some element over axes is true.
func Any(a *Array, keepDims bool, axes ...int) *Array { return reduce(C.SPX_ANY, a, keepDims, axes) }

// Argmax returns the index of the maximum along axis (the first one on ties),
// as uint32.
func Argmax(a *Array, axis int, keepDims bool) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int {
		return C.spx_argmax(out, a.c, C.int(axis), C.bool(keepDims), defaultStream)
	}, a)
}

// Argmin returns the index of the minimum along axis, as uint32.
func Argmin(a *Array, axis int, keepDims bool) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int {
		return C.spx_argmin(out, a.c, C.int(axis), C.bool(keepDims), defaultStream)
	}, a)
}

// Softmax normalises over axes. precise computes in float32 for low-precision
// inputs.
func Softmax(a *Array, precise bool, axes ...int) *Array {
	must(a)
	if len(axes) == 0 {
		axes = []int{-1}
	}
	ax, n := cInts(axes)
	return build(func(out *C.spx_array) C.int {
		return C.spx_softmax(out, a.c, ax, n, C.bool(precise), defaultStream)
	}, a)
}

// TopK returns the k largest values along axis (in no particular order).
func TopK(a *Array, k, axis int) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int { return C.spx_topk(out, a.c, C.int(k), C.int(axis), defaultStream) }, a)
}

// Argpartition returns indices that partition a along axis around its kth
// element: those before kth are not greater, those after not smaller.
func Argpartition(a *Array, kth, axis int) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int {
		return C.spx_argpartition(out, a.c, C.int(kth), C.int(axis), defaultStream)
	}, a)
}

// Sort sorts along axis (stable, NaN last).
func Sort(a *Array, axis int) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int { return C.spx_sort(out, a.c, C.int(axis), defaultStream) }, a)
}

// Argsort returns the indices that sort a along axis (stable), as uint32.
func Argsort(a *Array, axis int) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int { return C.spx_argsort(out, a.c, C.int(axis), defaultStream) }, a)
}

// Cumsum returns the cumulative sum along axis; reverse runs from the end,
// inclusive includes the element itself.
func Cumsum(a *Array, axis int, reverse, inclusive bool) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int {
		return C.spx_cumsum(out, a.c, C.int(axis), C.bool(reverse), C.bool(inclusive), defaultStream)
	}, a)
}

// ---- shape ----

// Reshape returns a with a new shape; one dimension may be -1.
func Reshape(a *Array, shape ...int) *Array {
	must(a)
	s, n := cInts(shape)
	return build(func(out *C.spx_array) C.int { return C.spx_reshape(out, a.c, s, n, defaultStream) }, a)
}

// Transpose permutes dimensions: axes is the full permutation, or empty to
// reverse the dimensions.
func Transpose(a *Array, axes ...int) *Array {
	must(a)
	if len(axes) == 0 && a.Valid() {
		nd := a.NDim()
		axes = make([]int, nd)
		for i := range axes {
			axes[i] = nd - 1 - i
		}
	}
	ax, n := cInts(axes)
	return build(func(out *C.spx_array) C.int { return C.spx_transpose(out, a.c, ax, n, defaultStream) }, a)
}

// SwapAxes exchanges two dimensions (negative values count from the end).
func SwapAxes(a *Array, i, j int) *Array {
	must(a).checkLive()
	if !a.Valid() {
		return empty()
	}
	nd := a.NDim()
	if i < 0 {
		i += nd
	}
	if j < 0 {
		j += nd
	}
	perm := make([]int, nd)
	for k := range perm {
		perm[k] = k
	}
	if i >= 0 && i < nd && j >= 0 && j < nd {
		perm[i], perm[j] = perm[j], perm[i]
	}
	return Transpose(a, perm...)
}

// ExpandDims inserts size-1 dimensions at axes.
func ExpandDims(a *Array, axes ...int) *Array {
	must(a)
	ax, n := cInts(axes)
	return build(func(out *C.spx_array) C.int { return C.spx_expand_dims(out, a.c, ax, n, defaultStream) }, a)
}

// Squeeze removes size-1 dimensions at axes (every one when none are given).
func Squeeze(a *Array, axes ...int) *Array {
	must(a)
	ax, n := cInts(axes)
	return build(func(out *C.spx_array) C.int { return C.spx_squeeze(out, a.c, ax, n, defaultStream) }, a)
}

// BroadcastTo broadcasts a to shape. The result may have zero strides: make
// it Contiguous before reading raw memory (Bytes does so).
func BroadcastTo(a *Array, shape ...int) *Array {
	must(a)
	s, n := cInts(shape)
	return build(func(out *C.spx_array) C.int { return C.spx_broadcast_to(out, a.c, s, n, defaultStream) }, a)
}

// Contiguous returns a row-contiguous copy of a (or a itself when it is).
func Contiguous(a *Array) *Array {
	must(a)
	return build(func(out *C.spx_array) C.int { return C.spx_contiguous(out, a.c, defaultStream) }, a)
}

// Pad pads the given axes with low/high widths of a constant value (0 when
// value is nil).
func Pad(a *Array, axes, low, high []int, value *Array) *Array {
	must(a)
	if len(axes) != len(low) || len(axes) != len(high) {
		panic("mlx: Pad needs one low and one high width per axis")
	}
	ax, n := cInts(axes)
	lo, _ := cInts(low)
	hi, _ := cInts(high)
	return build(func(out *C.spx_array) C.int {
		return C.spx_pad(out, a.c, ax, lo, hi, n, h(value), defaultStream)
	}, a, value)
}

func handles(arrays []*Array) ([]C.spx_array, bool) {
	hs := make([]C.spx_array, len(arrays))
	for i, a := range arrays {
		must(a).checkLive()
		if !a.Valid() {
			return nil, false
		}
		hs[i] = a.c
	}
	return hs, true
}

// Concatenate joins arrays along axis.
func Concatenate(axis int, arrays ...*Array) *Array {
	if len(arrays) == 1 {
		return arrays[0]
	}
	hs, ok := handles(arrays)
	if !ok || len(hs) == 0 {
		return empty()
	}
	return build(func(out *C.spx_array) C.int {
		return C.spx_concatenate(out, &hs[0], C.size_t(len(hs)), C.int(axis), defaultStream)
	})
}

// Stack joins arrays along a new axis.
func Stack(axis int, arrays ...*Array) *Array {
	hs, ok := handles(arrays)
	if !ok || len(hs) == 0 {
		return empty()
	}
	return build(func(out *C.spx_array) C.int {
		return C.spx_stack(out, &hs[0], C.size_t(len(hs)), C.int(axis), defaultStream)
	})
}

// Split cuts a along axis at the given indices into len(indices)+1 parts.
func Split(a *Array, axis int, indices ...int) []*Array {
	must(a).checkLive()
	parts := make([]*Array, len(indices)+1)
	if !a.Valid() {
		for i := range parts {
			parts[i] = empty()
		}
		return parts
	}
	outs := make([]C.spx_array, len(parts))
	idx, n := cInts(indices)
	if err := status(C.spx_split(&outs[0], a.c, idx, n, C.int(axis), defaultStream)); err != nil {
		for _, o := range outs {
			if o.ctx != nil {
				C.spx_array_free(o)
			}
		}
		record(err)
		for i := range parts {
			parts[i] = empty()
		}
		return parts
	}
	for i, o := range outs {
		parts[i] = wrap(o)
	}
	return parts
}

// ---- indexing ----

// Slice returns a[start:stop] per dimension with unit strides.
func Slice(a *Array, start, stop []int) *Array {
	strides := make([]int, len(start))
	for i := range strides {
		strides[i] = 1
	}
	return SliceStrided(a, start, stop, strides)
}

// SliceStrided returns a[start:stop:stride] per dimension.
func SliceStrided(a *Array, start, stop, strides []int) *Array {
	must(a)
	if len(start) != len(stop) || len(start) != len(strides) {
		panic("mlx: slice start, stop and strides must have one entry per dimension")
	}
	st, n := cInts(start)
	sp, _ := cInts(stop)
	sd, _ := cInts(strides)
	return build(func(out *C.spx_array) C.int { return C.spx_slice(out, a.c, st, sp, sd, n, defaultStream) }, a)
}

// SliceAxis returns a[..., start:stop, ...] along one axis.
func SliceAxis(a *Array, axis, start, stop int) *Array {
	must(a).checkLive()
	if !a.Valid() {
		return empty()
	}
	shape := a.Shape()
	if axis < 0 {
		axis += len(shape)
	}
	lo := make([]int, len(shape))
	hi := append([]int(nil), shape...)
	lo[axis], hi[axis] = start, stop
	return Slice(a, lo, hi)
}

// SliceDynamic returns a slice of the given sizes whose start along axes is
// read from the int array start at evaluation time, so a graph built once
// serves every position.
func SliceDynamic(a, start *Array, axes []int, sizes []int) *Array {
	must(a)
	must(start)
	ax, na := cInts(axes)
	sz, ns := cInts(sizes)
	return build(func(out *C.spx_array) C.int {
		return C.spx_slice_dynamic(out, a.c, start.c, ax, na, sz, ns, defaultStream)
	}, a, start)
}

// SliceUpdate returns src with src[start:stop] replaced by update.
func SliceUpdate(src, update *Array, start, stop []int) *Array {
	must(src)
	must(update)
	strides := make([]int, len(start))
	for i := range strides {
		strides[i] = 1
	}
	st, n := cInts(start)
	sp, _ := cInts(stop)
	sd, _ := cInts(strides)
	return build(func(out *C.spx_array) C.int {
		return C.spx_slice_update(out, src.c, update.c, st, sp, sd, n, defaultStream)
	}, src, update)
}

// SliceUpdateDynamic returns src with update written at a start along axes
// read from the int array start at evaluation time.
func SliceUpdateDynamic(src, update, start *Array, axes []int) *Array {
	must(src)
	must(update)
	must(start)
	ax, n := cInts(axes)
	return build(func(out *C.spx_array) C.int {
		return C.spx_slice_update_dynamic(out, src.c, update.c, start.c, ax, n, defaultStream)
	}, src, update, start)
}

// Take gathers slices of a at indices along axis.
func Take(a, indices *Array, axis int) *Array {
	must(a)
	must(indices)
	return build(func(out *C.spx_array) C.int { return C.spx_take(out, a.c, indices.c, C.int(axis), defaultStream) }, a, indices)
}

// TakeAlongAxis gathers a[..., indices[...], ...] element-wise along axis.
func TakeAlongAxis(a, indices *Array, axis int) *Array {
	must(a)
	must(indices)
	return build(func(out *C.spx_array) C.int {
		return C.spx_take_along_axis(out, a.c, indices.c, C.int(axis), defaultStream)
	}, a, indices)
}

// PutAlongAxis returns a with values written at indices along axis.
func PutAlongAxis(a, indices, values *Array, axis int) *Array {
	must(a)
	must(indices)
	must(values)
	return build(func(out *C.spx_array) C.int {
		return C.spx_put_along_axis(out, a.c, indices.c, values.c, C.int(axis), defaultStream)
	}, a, indices, values)
}

// ScatterAddAxis returns a with values added at indices along axis
// (duplicates accumulate).
func ScatterAddAxis(a, indices, values *Array, axis int) *Array {
	must(a)
	must(indices)
	must(values)
	return build(func(out *C.spx_array) C.int {
		return C.spx_scatter_add_axis(out, a.c, indices.c, values.c, C.int(axis), defaultStream)
	}, a, indices, values)
}

// ---- creation ----

// Full returns an array of shape filled with value.
func Full(value float64, dtype DType, shape ...int) *Array {
	mustWorker()
	s, n := cInts(shape)
	return build(func(out *C.spx_array) C.int {
		return C.spx_full(out, s, n, C.double(value), C.int(dtype), defaultStream)
	})
}

// Zeros returns an array of zeros.
func Zeros(dtype DType, shape ...int) *Array { return Full(0, dtype, shape...) }

// Ones returns an array of ones.
func Ones(dtype DType, shape ...int) *Array { return Full(1, dtype, shape...) }

// Arange returns [start, start+step, ...) below stop.
func Arange(start, stop, step float64, dtype DType) *Array {
	mustWorker()
	return build(func(out *C.spx_array) C.int {
		return C.spx_arange(out, C.double(start), C.double(stop), C.double(step), C.int(dtype), defaultStream)
	})
}

// Tri returns an n×m array with ones at and below diagonal k.
func Tri(n, m, k int, dtype DType) *Array {
	mustWorker()
	return build(func(out *C.spx_array) C.int {
		return C.spx_tri(out, C.int(n), C.int(m), C.int(k), C.int(dtype), defaultStream)
	})
}

// ---- neural-network ops ----

// Conv1d convolves input [N, L, Cin] with weight [Cout, K, Cin/groups].
func Conv1d(input, weight *Array, stride, padding, dilation, groups int) *Array {
	must(input)
	must(weight)
	return build(func(out *C.spx_array) C.int {
		return C.spx_conv1d(out, input.c, weight.c, C.int(stride), C.int(padding), C.int(dilation), C.int(groups), defaultStream)
	}, input, weight)
}

// RMSNorm returns x · rsqrt(mean(x²) + eps) · weight over the last axis;
// weight may be nil (weightless form).
func RMSNorm(x, weight *Array, eps float32) *Array {
	must(x)
	return build(func(out *C.spx_array) C.int {
		return C.spx_rms_norm(out, x.c, h(weight), C.float(eps), defaultStream)
	}, x, weight)
}

// SigmoidMulCPU returns silu(a) ⊙ b when silu is set, else a ⊙ σ(b), as one
// vectorised node, and true, when the CPU kernel serves the call: the CPU
// device, float32 operands of one shape. Each element equals the one MLX's
// compiled kernel of the same ops computes, to the bit. Otherwise it returns
// nil and false, and the caller composes the product from MLX's ops.
func SigmoidMulCPU(a, b *Array, silu bool) (*Array, bool) {
	must(a)
	must(b)
	if !a.Valid() || !b.Valid() || CurrentDevice() != CPU || a.DType() != Float32 || b.DType() != Float32 || !slices.Equal(a.Shape(), b.Shape()) {
		return nil, false
	}
	return cpuNode(func(out *C.spx_array) C.int { return C.spx_sigmoid_mul_cpu(out, a.c, b.c, C.bool(silu), defaultStream) })
}

// SoftmaxCPU returns the softmax over a's last axis as one vectorised node,
// and true, when the CPU kernel serves the call: the CPU device, float32, a
// non-empty last axis. Each element equals the one MLX's Softmax computes on
// the CPU, to the bit (attention on the CPU uses it). Otherwise it returns
// nil and false.
func SoftmaxCPU(a *Array) (*Array, bool) {
	must(a)
	if !a.Valid() || CurrentDevice() != CPU || a.DType() != Float32 || a.NDim() == 0 || a.Dim(-1) == 0 {
		return nil, false
	}
	return cpuNode(func(out *C.spx_array) C.int { return C.spx_softmax_cpu(out, a.c, defaultStream) })
}

// cpuNode runs one of the shim's constructors of a vectorised CPU node,
// which leaves out empty when its kernel does not serve the call: the node
// and true; an empty array and true (the error recorded) when it failed;
// nil and false when the caller must compose the operation from MLX's ops.
func cpuNode(build func(out *C.spx_array) C.int) (*Array, bool) {
	outs, ok := cpuNodes(1, func(o []C.spx_array) C.int { return build(&o[0]) })
	if !ok {
		return nil, false
	}
	return outs[0], true
}

// cpuNodes is cpuNode for a node with n outputs, which the constructor
// writes to outs (all of them, or none when its kernel does not serve the
// call).
func cpuNodes(n int, build func(outs []C.spx_array) C.int) ([]*Array, bool) {
	outs := make([]C.spx_array, n)
	res := make([]*Array, n)
	if err := status(build(outs)); err != nil {
		for i, o := range outs {
			if o.ctx != nil {
				C.spx_array_free(o)
			}
			res[i] = empty()
		}
		record(err)
		return res, true
	}
	if outs[0].ctx == nil {
		return nil, false
	}
	for i, o := range outs {
		res[i] = wrap(o)
	}
	return res, true
}

// ConvSiLUCPU returns silu(Σ_j x[:, t+j, :] · w[j, :]) [B, L, C] for x
// [B, L+Kc−1, C] and w [Kc, C] — a causal depthwise convolution and its
// SiLU, as the Qwen3.5 delta-net applies them — as one vectorised node, and
// true, when the CPU kernel serves the call: the CPU device, float32
// operands of those shapes. Each element equals the one MLX's compiled
// kernel of the same multiplies and adds (in tap order) computes, to the
// bit. Otherwise it returns nil and false, and the caller composes it from
// MLX's ops.
func ConvSiLUCPU(x, w *Array) (*Array, bool) {
	must(x)
	must(w)
	if !x.Valid() || !w.Valid() || CurrentDevice() != CPU || x.DType() != Float32 || w.DType() != Float32 ||
		x.NDim() != 3 || w.NDim() != 2 || x.Dim(2) != w.Dim(1) || x.Dim(1) < w.Dim(0) {
		return nil, false
	}
	return cpuNode(func(out *C.spx_array) C.int { return C.spx_conv_silu_cpu(out, x.c, w.c, defaultStream) })
}

// DynamicConvCPU returns DFlash2's block-local dynamic convolution of x
// [1, L, H] — y[t, c] = Σ_{j < min(K, L)} (w[0, t, j, c/S] + b[j, c]) ·
// x[0, t−j, c], with x zero before row 0 and S = H / G — for per-row group
// taps w [1, L, K, G] and base taps b [K, H], as one node, and true, when the
// CPU kernel serves the call: the CPU device, float32 operands of those
// shapes. Each element equals, to the bit, what the composition of MLX ops
// (a tap's coefficient added, multiplied, then added to the sum, in tap
// order) computes. Otherwise it returns nil and false.
func DynamicConvCPU(x, w, b *Array) (*Array, bool) {
	must(x)
	must(w)
	must(b)
	if !x.Valid() || !w.Valid() || !b.Valid() || CurrentDevice() != CPU ||
		x.DType() != Float32 || w.DType() != Float32 || b.DType() != Float32 {
		return nil, false
	}
	return cpuNode(func(out *C.spx_array) C.int { return C.spx_dynamic_conv_cpu(out, x.c, w.c, b.c, defaultStream) })
}

// TopKCPU returns, for each row of a [rows, n], its k largest entries
// sorted best first, ties to the lower index — their indices (int32 [rows,
// k]) and values (float32 [rows, k]) — as one node, and true, when the CPU
// kernel serves the call: the CPU device, float32 a of rank 2, 1 ≤ k ≤ n.
// The result equals sorting the argpartition's top k by descending value,
// stably; NaN counts as smaller than every number. Otherwise it returns nils
// and false.
func TopKCPU(a *Array, k int) (ids, vals *Array, ok bool) {
	must(a)
	if !a.Valid() || CurrentDevice() != CPU || a.DType() != Float32 || a.NDim() != 2 || k < 1 || k > a.Dim(1) {
		return nil, nil, false
	}
	outs, ok := cpuNodes(2, func(o []C.spx_array) C.int { return C.spx_topk_cpu(&o[0], &o[1], a.c, C.int(k), defaultStream) })
	if !ok {
		return nil, nil, false
	}
	return outs[0], outs[1], true
}

// SelectorWalkCPU walks DFlash2's candidate lattice greedily as one node
// on the CPU: for candidate ids [n, K] (int32), their unary scores [n, K],
// the projected rows u [n, R], the candidates' successor rows succ [n, K,
// R] and the predecessor table [V, R] (all float32), starting after anchor
// [1] (int32), position p scores candidate j as unary[p, j] + Σ_r
// (table[prev, r]·u[p, r])·succ[p, j, r] with prev the token chosen at
// p − 1 (the anchor at p = 0), and chooses the first largest score. It
// returns the tokens [n] (int32), their one-hot rows [n, K] (float32), each
// position's largest softmax probability at temperature 1 [n] (float32),
// and true; nils and false when the kernel does not serve the call (not the
// CPU, other dtypes or shapes). The scores equal the composition's up to
// the order of the sum over R.
func SelectorWalkCPU(ids, unary, u, succ, table, anchor *Array) (tokens, probs, conf *Array, ok bool) {
	for _, a := range []*Array{ids, unary, u, succ, table, anchor} {
		if !must(a).Valid() {
			return nil, nil, nil, false
		}
	}
	if CurrentDevice() != CPU {
		return nil, nil, nil, false
	}
	outs, ok := cpuNodes(3, func(o []C.spx_array) C.int {
		return C.spx_selector_walk_cpu(&o[0], &o[1], &o[2], ids.c, unary.c, u.c, succ.c, table.c, anchor.c, defaultStream)
	})
	if !ok {
		return nil, nil, nil, false
	}
	return outs[0], outs[1], outs[2], true
}

// RoPE rotates the first dims features of x [..., L, D] for positions
// offset … offset+L−1. traditional pairs adjacent dims; otherwise dim j pairs
// with j + dims/2 (rotate-half, "neox").
func RoPE(x *Array, dims int, traditional bool, base, scale float32, offset int) *Array {
	must(x)
	return build(func(out *C.spx_array) C.int {
		return C.spx_rope(out, x.c, C.int(dims), C.bool(traditional), C.float(base), C.float(scale), C.int(offset), C.spx_array{}, defaultStream)
	}, x)
}

// RoPEDynamic is RoPE with the offset read from an int array at evaluation
// time (a graph that does not depend on the position).
func RoPEDynamic(x *Array, dims int, traditional bool, base, scale float32, offset *Array) *Array {
	must(x)
	must(offset)
	return build(func(out *C.spx_array) C.int {
		return C.spx_rope(out, x.c, C.int(dims), C.bool(traditional), C.float(base), C.float(scale), 0, offset.c, defaultStream)
	}, x, offset)
}

// AttentionMask selects the mask of ScaledDotProductAttention.
type AttentionMask struct {
	// Causal applies a causal mask aligned to the end of the keys.
	Causal bool
	// Array is an additive (float) or boolean mask broadcastable to
	// [B, H, Lq, Lk]; nil for none.
	Array *Array
}

// MaxComposedQueries is the longest query block ScaledDotProductAttention
// composes of graph nodes on the GPU (compose_on_gpu in shim.cpp); longer
// ones run MLX's kernels, which take causality as a mode.
const MaxComposedQueries = 32

// ScaledDotProductAttention computes softmax(q·kᵀ·scale + mask)·v for
// q [B, Hq, Lq, D], k and v [B, Hkv, Lk, D] (grouped-query when Hq > Hkv).
//
// On a GPU, a half-precision block of 2 to 32 queries is computed as float32
// matmuls and a softmax rather than by MLX's cuDNN kernel, whose plan MLX
// rebuilds for every new key length (spx_sdpa in shim.cpp says why;
// SPECULA_CUDNN_BLOCKS=1 keeps MLX's choice). On the CPU in float32 it is
// MLX's own composition with SoftmaxCPU for MLX's scalar softmax: the same
// values to the bit.
func ScaledDotProductAttention(q, k, v *Array, scale float32, mask AttentionMask) *Array {
	return sdpa(q, k, v, scale, mask, sdpaAuto)
}

// The forms sdpa can take.
const (
	sdpaAuto     = iota // the shim's choice (spx_sdpa)
	sdpaComposed        // matmuls and a softmax on any device
	sdpaMLX             // MLX's fast::scaled_dot_product_attention as it is
)

// sdpa is ScaledDotProductAttention in the given form (sdpaComposed and
// sdpaMLX let tests check the shim's forms against MLX's).
func sdpa(q, k, v *Array, scale float32, mask AttentionMask, form int) *Array {
	must(q)
	must(k)
	must(v)
	mode := C.CString("")
	if mask.Causal {
		C.free(unsafe.Pointer(mode))
		mode = C.CString("causal")
	}
	defer C.free(unsafe.Pointer(mode))
	return build(func(out *C.spx_array) C.int {
		if form == sdpaComposed {
			return C.spx_sdpa_composed(out, q.c, k.c, v.c, C.float(scale), mode, h(mask.Array), defaultStream)
		}
		return C.spx_sdpa(out, q.c, k.c, v.c, C.float(scale), mode, h(mask.Array), C.spx_array{}, C.bool(form == sdpaMLX), defaultStream)
	}, q, k, v, mask.Array)
}
