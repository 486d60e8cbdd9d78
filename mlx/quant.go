package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"unsafe"
)

// QuantMode names one of MLX's weight quantization formats.
type QuantMode string

// The quantization modes of MLX 0.32. Affine stores per group a float scale
// and bias (w = scale·q + bias); the others store one shared power-of-two
// (mxfp4, mxfp8) or e4m3 (nvfp4) scale per group as uint8 and no bias.
const (
	Affine QuantMode = "affine"
	MXFP4  QuantMode = "mxfp4"
	NVFP4  QuantMode = "nvfp4"
	MXFP8  QuantMode = "mxfp8"
)

// Quant says how a weight is quantized: its mode, bits per value and the
// number of consecutive input values that share a scale. The zero value
// means "not quantized".
type Quant struct {
	Mode      QuantMode
	Bits      int
	GroupSize int
}

// affineBits and affineGroups are what MLX's affine quantize accepts.
var (
	affineBits   = []int{1, 2, 3, 4, 5, 6, 8}
	affineGroups = []int{32, 64, 128}
)

// fixedModes are the modes that allow exactly one (bits, group size) pair,
// which is also the default mlx-lm writes for them.
var fixedModes = map[QuantMode]Quant{
	MXFP4: {MXFP4, 4, 32},
	NVFP4: {NVFP4, 4, 16},
	MXFP8: {MXFP8, 8, 32},
}

// DefaultQuant returns mode's defaults as mlx_lm.convert applies them:
// affine 4 bits in groups of 64, mxfp4 (4, 32), nvfp4 (4, 16), mxfp8 (8, 32).
func DefaultQuant(mode QuantMode) (Quant, error) {
	if mode == Affine {
		return Quant{Affine, 4, 64}, nil
	}
	if q, ok := fixedModes[mode]; ok {
		return q, nil
	}
	return Quant{}, fmt.Errorf("unknown quantization mode %q (MLX has affine, mxfp4, nvfp4 and mxfp8)", mode)
}

// IsZero reports whether q means "not quantized".
func (q Quant) IsZero() bool { return q == Quant{} }

// Validate reports whether MLX can quantize with q: affine takes bits 1–6
// or 8 and groups of 32, 64 or 128; the other modes one pair each.
func (q Quant) Validate() error {
	switch q.Mode {
	case Affine:
		if !slices.Contains(affineBits, q.Bits) {
			return fmt.Errorf("affine quantization with %d bits: MLX supports 1, 2, 3, 4, 5, 6 or 8", q.Bits)
		}
		if !slices.Contains(affineGroups, q.GroupSize) {
			return fmt.Errorf("affine quantization with group size %d: MLX supports 32, 64 or 128", q.GroupSize)
		}
		return nil
	case MXFP4, NVFP4, MXFP8:
		want := fixedModes[q.Mode]
		if q != want {
			return fmt.Errorf("%s quantization with %d bits and group size %d: %s needs %d bits and group size %d", q.Mode, q.Bits, q.GroupSize, q.Mode, want.Bits, want.GroupSize)
		}
		return nil
	}
	return fmt.Errorf("unknown quantization mode %q (MLX has affine, mxfp4, nvfp4 and mxfp8)", q.Mode)
}

// HasBiases reports whether the mode stores biases (affine only).
func (q Quant) HasBiases() bool { return q.Mode == Affine }

// String reads like "affine 4-bit, group 64".
func (q Quant) String() string {
	if q.IsZero() {
		return "dense"
	}
	return fmt.Sprintf("%s %d-bit, group %d", q.Mode, q.Bits, q.GroupSize)
}

// PackedDim is the last dimension of a packed weight whose logical input
// dimension is in: in·bits/32 uint32 words. ok is false when in is not a
// whole number of groups (such a layer cannot be quantized).
func (q Quant) PackedDim(in int) (int, bool) {
	if q.GroupSize <= 0 || q.Bits <= 0 || in%q.GroupSize != 0 || (in*q.Bits)%32 != 0 {
		return 0, false
	}
	return in * q.Bits / 32, true
}

// InputDim is the logical input dimension of a packed weight whose last
// dimension is packed (the inverse of PackedDim).
func (q Quant) InputDim(packed int) int {
	if q.Bits <= 0 {
		return 0
	}
	return packed * 32 / q.Bits
}

// quantArgs validates q and returns its mode as a C string (freed by the
// caller) for the shim.
func quantArgs(q Quant) (*C.char, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return C.CString(string(q.Mode)), nil
}

// withMode validates q and runs op with q's mode as a C string; an invalid q
// is recorded as the scope's error and gives an empty array.
func withMode(q Quant, op func(mode *C.char) *Array) *Array {
	mode, err := quantArgs(q)
	if err != nil {
		record(err)
		return empty()
	}
	defer C.free(unsafe.Pointer(mode))
	return op(mode)
}

// Quantize quantizes w along its last axis. biases is nil for the modes
// without them. An invalid q is recorded as the scope's error (empty
// arrays), like any failing op.
func Quantize(w *Array, q Quant) (wq, scales, biases *Array) {
	must(w).checkLive()
	mode, err := quantArgs(q)
	if err != nil {
		record(err)
		return empty(), empty(), nil
	}
	defer C.free(unsafe.Pointer(mode))
	if !w.Valid() {
		return empty(), empty(), nil
	}
	var cw, cs, cb C.spx_array
	if err := status(C.spx_quantize(&cw, &cs, &cb, w.c, C.int(q.GroupSize), C.int(q.Bits), mode, defaultStream)); err != nil {
		for _, o := range []C.spx_array{cw, cs, cb} {
			if o.ctx != nil {
				C.spx_array_free(o)
			}
		}
		record(err)
		return empty(), empty(), nil
	}
	wq, scales = wrap(cw), wrap(cs)
	if cb.ctx != nil {
		biases = wrap(cb)
	}
	return wq, scales, biases
}

// Dequantize unpacks a quantized weight (w, scales, biases) to the float
// dtype dtype; biases is nil for modes without them.
func Dequantize(w, scales, biases *Array, q Quant, dtype DType) *Array {
	must(w)
	must(scales)
	return withMode(q, func(mode *C.char) *Array {
		return build(func(out *C.spx_array) C.int {
			return C.spx_dequantize(out, w.c, scales.c, h(biases), C.int(q.GroupSize), C.int(q.Bits), mode, C.int(dtype), defaultStream)
		}, w, scales, biases)
	})
}

// QuantizedMatmul returns x · Wᵀ (transpose) or x · W for the quantized
// weight (w, scales, biases); biases is nil for modes without them. x and
// affine scales must share a float dtype.
func QuantizedMatmul(x, w, scales, biases *Array, q Quant, transpose bool) *Array {
	must(x)
	must(w)
	must(scales)
	if dequantizeFirst(x, q, transpose) {
		wd := Dequantize(w, scales, biases, q, x.DType())
		return Matmul(x, wd.transposed())
	}
	return withMode(q, func(mode *C.char) *Array {
		return build(func(out *C.spx_array) C.int {
			return C.spx_quantized_matmul(out, x.c, w.c, scales.c, h(biases), C.bool(transpose), C.int(q.GroupSize), C.int(q.Bits), mode, defaultStream)
		}, x, w, scales, biases)
	})
}

// dequantizeFirst reports whether QuantizedMatmul takes the product
// apart (dequantize, then matmul) instead of calling MLX's: an affine
// product of several rows with a transposed weight whose whole input width
// is one quantization group (in ≤ group size), on the GPU. MLX 0.32.4 on
// CUDA sends exactly those products to its Hopper-only kernel (qmm_sm90,
// chosen when group size ≥ in), which returned wrong sums on the H200: the
// 4-bit, group-64 fixture (64-wide layers) had prompt logits 10.1 away from
// mlx-lm's, 3e-5 with this. The layers this catches are at most a group
// wide, so dequantizing them costs nothing worth keeping.
// SPECULA_MLX_SINGLE_GROUP_QMM=1 restores MLX's path (to re-check it).
func dequantizeFirst(x *Array, q Quant, transpose bool) bool {
	if q.Mode != Affine || !transpose || x.NDim() == 0 || x.Dim(-1) > q.GroupSize {
		return false
	}
	if x.Size() <= x.Dim(-1) || CurrentDevice() != GPU {
		return false
	}
	return os.Getenv("SPECULA_MLX_SINGLE_GROUP_QMM") != "1"
}

// GatherQMM is QuantizedMatmul over stacked weights w [..., E, out, in/pack]
// with a matrix-level gather: row block i of x multiplies the weight
// rhsIndices[i] (and x's batch lhsIndices[i]); either index array may be nil.
// sorted says rhsIndices is sorted, which lets MLX group the products. It is
// the expert matmul of mixture-of-experts layers.
func GatherQMM(x, w, scales, biases, lhsIndices, rhsIndices *Array, q Quant, transpose, sorted bool) *Array {
	must(x)
	must(w)
	must(scales)
	return withMode(q, func(mode *C.char) *Array {
		return build(func(out *C.spx_array) C.int {
			return C.spx_gather_qmm(out, x.c, w.c, scales.c, h(biases), h(lhsIndices), h(rhsIndices), C.bool(transpose), C.int(q.GroupSize), C.int(q.Bits), mode, C.bool(sorted), defaultStream)
		}, x, w, scales, biases, lhsIndices, rhsIndices)
	})
}

// GatherMM is the dense counterpart of GatherQMM: a · b with a matrix-level
// gather of a's batches (lhsIndices) and b's (rhsIndices); either may be nil.
func GatherMM(a, b, lhsIndices, rhsIndices *Array, sorted bool) *Array {
	must(a)
	must(b)
	return build(func(out *C.spx_array) C.int {
		return C.spx_gather_mm(out, a.c, b.c, h(lhsIndices), h(rhsIndices), C.bool(sorted), defaultStream)
	}, a, b, lhsIndices, rhsIndices)
}
