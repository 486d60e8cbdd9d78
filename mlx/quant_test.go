package mlx_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The references below pack and unpack quantized weights by hand from the
// formats' definitions (spec/quantized.md "Tensors"), independently of MLX.

// packBits packs values of width bits into uint32 words as one little-endian
// bit stream per row (for 1, 2, 4 and 8 bits that is "low bits first within
// each word"; 3, 5 and 6 bits cross word boundaries).
func packBits(vals []uint32, bits int) []uint32 {
	out := make([]uint32, len(vals)*bits/32)
	for i, v := range vals {
		for b := range bits {
			if v>>b&1 == 1 {
				pos := i*bits + b
				out[pos/32] |= 1 << (pos % 32)
			}
		}
	}
	return out
}

// affineCase is a random affine-quantized matrix [out, in] with its
// dequantized values computed as scale·q + bias.
type affineCase struct {
	out, in        int
	q              mlx.Quant
	packed         []uint32  // [out, in·bits/32]
	scales, biases []float32 // [out, in/gs]
	dense          *tensor   // [out, in]
}

func newAffineCase(r *rand.Rand, out, in int, q mlx.Quant) *affineCase {
	c := &affineCase{out: out, in: in, q: q, dense: newTensor(out, in)}
	groups := in / q.GroupSize
	for o := range out {
		vals := make([]uint32, in)
		for g := range groups {
			// Scales and biases that are exact in float32 keep the
			// reference exact.
			s := float32(r.IntN(64)+1) / 256
			b := float32(r.IntN(129)-64) / 64
			c.scales = append(c.scales, s)
			c.biases = append(c.biases, b)
			for j := range q.GroupSize {
				v := uint32(r.IntN(1 << q.Bits))
				vals[g*q.GroupSize+j] = v
				c.dense.data[o*in+g*q.GroupSize+j] = float64(s)*float64(v) + float64(b)
			}
		}
		c.packed = append(c.packed, packBits(vals, q.Bits)...)
	}
	return c
}

func (c *affineCase) arrays() (w, scales, biases *mlx.Array) {
	g := c.in / c.q.GroupSize
	return mlx.FromUint32s(c.packed, c.out, c.in*c.q.Bits/32),
		mlx.FromFloat32s(c.scales, c.out, g), mlx.FromFloat32s(c.biases, c.out, g)
}

func TestAffineDequantizeAndMatmul(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, gs := range []int{32, 64, 128} {
				q := mlx.Quant{Mode: mlx.Affine, Bits: bits, GroupSize: gs}
				c := newAffineCase(r, 6, 128, q)
				w, s, b := c.arrays()
				check(t, q.String()+" dequantize", mlx.Dequantize(w, s, b, q, mlx.Float32), c.dense, 0, 0)

				x := randTensor(r, 3, 128).roundF32()
				want := matmulRef(x, transposeRef(c.dense))
				check(t, q.String()+" quantized_matmul", mlx.QuantizedMatmul(x.mlx(), w, s, b, q, true), want, 1e-5, 1e-5)
			}
		}
	})
}

// e2m1 is the value of a 4-bit float (sign, 2 exponent bits, 1 mantissa
// bit), the element type of mxfp4 and nvfp4.
func e2m1(v uint32) float64 {
	mag := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}[v&7]
	if v&8 != 0 {
		return -mag
	}
	return mag
}

func TestMXFP4DequantizeAndMatmul(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		const out, in = 5, 96
		q := mlx.Quant{Mode: mlx.MXFP4, Bits: 4, GroupSize: 32}
		dense := newTensor(out, in)
		var packed []uint32
		var scales []uint8
		for o := range out {
			vals := make([]uint32, in)
			for g := range in / 32 {
				e := uint8(127 + r.IntN(7) - 3) // e8m0: 2^(e−127)
				scales = append(scales, e)
				for j := range 32 {
					v := uint32(r.IntN(16))
					vals[g*32+j] = v
					dense.data[o*in+g*32+j] = math.Ldexp(e2m1(v), int(e)-127)
				}
			}
			packed = append(packed, packBits(vals, 4)...)
		}
		w := mlx.FromUint32s(packed, out, in/8)
		s := mlx.FromUint8s(scales, out, in/32)
		check(t, "mxfp4 dequantize", mlx.Dequantize(w, s, nil, q, mlx.Float32), dense, 0, 0)
		x := randTensor(r, 2, in).roundF32()
		check(t, "mxfp4 quantized_matmul", mlx.QuantizedMatmul(x.mlx(), w, s, nil, q, true), matmulRef(x, transposeRef(dense)), 1e-5, 1e-5)
	})
}

// Quantize then dequantize stays within one quantization step (the group's
// scale) of the input for affine (MLX picks the scale from the group's range
// and then nudges it so the larger extreme is exact), and every mode gives
// the documented shapes and dtypes.
func TestQuantizeRoundTrip(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		const out, in = 4, 128
		x := randTensor(r, out, in).roundF32()
		for _, q := range []mlx.Quant{
			{Mode: mlx.Affine, Bits: 4, GroupSize: 64},
			{Mode: mlx.Affine, Bits: 3, GroupSize: 32},
			{Mode: mlx.Affine, Bits: 8, GroupSize: 128},
			{Mode: mlx.MXFP4, Bits: 4, GroupSize: 32},
			{Mode: mlx.NVFP4, Bits: 4, GroupSize: 16},
			{Mode: mlx.MXFP8, Bits: 8, GroupSize: 32},
		} {
			w, s, b := mlx.Quantize(x.mlx(), q)
			t.Shape(w, out, in*q.Bits/32)
			t.Shape(s, out, in/q.GroupSize)
			if w.DType() != mlx.Uint32 {
				t.Fatalf("%s: packed weight is %s, want uint32", q, w.DType())
			}
			if q.HasBiases() != (b != nil) {
				t.Fatalf("%s: biases %v, want present = %v", q, b, q.HasBiases())
			}
			if !q.HasBiases() && s.DType() != mlx.Uint8 {
				t.Fatalf("%s: scales are %s, want uint8", q, s.DType())
			}
			got := t.Float32s(mlx.Dequantize(w, s, b, q, mlx.Float32))
			if q.Mode != mlx.Affine {
				continue // fp modes round to a float grid; the matmul tests cover them
			}
			scales := t.Float32s(s)
			for k := range got {
				step := math.Abs(float64(scales[k/q.GroupSize]))
				if d := math.Abs(float64(got[k]) - x.data[k]); d > step+1e-6 {
					t.Fatalf("%s: element %d is %v after a round trip of %v (step %v)", q, k, got[k], x.data[k], step)
				}
			}
		}
	})
}

// GatherQMM picks the stacked weight of each row's index.
func TestGatherQMM(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		q := mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 32}
		cases := []*affineCase{newAffineCase(r, 3, 64, q), newAffineCase(r, 3, 64, q)}
		var ws, ss, bs []*mlx.Array
		for _, c := range cases {
			w, s, b := c.arrays()
			ws, ss, bs = append(ws, w), append(ss, s), append(bs, b)
		}
		x := randTensor(r, 2, 1, 64).roundF32() // two rows, one per index
		idx := mlx.FromInt32s([]int32{1, 0}, 2)
		got := mlx.GatherQMM(x.mlx(), mlx.Stack(0, ws...), mlx.Stack(0, ss...), mlx.Stack(0, bs...), nil, idx, q, true, false)
		t.Shape(got, 2, 1, 3)
		vals := t.Float32s(got)
		for row, e := range []int{1, 0} {
			xr := &tensor{shape: []int{1, 64}, data: x.data[row*64 : (row+1)*64]}
			closeTo(t, "gather_qmm row", vals[row*3:(row+1)*3], matmulRef(xr, transposeRef(cases[e].dense)), 1e-5, 1e-5)
		}
	})
}

func TestQuantValidate(t *testing.T) {
	for _, c := range []struct {
		q  mlx.Quant
		ok bool
	}{
		{mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 64}, true},
		{mlx.Quant{Mode: mlx.Affine, Bits: 7, GroupSize: 64}, false},
		{mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 16}, false},
		{mlx.Quant{Mode: mlx.MXFP4, Bits: 4, GroupSize: 32}, true},
		{mlx.Quant{Mode: mlx.MXFP4, Bits: 4, GroupSize: 64}, false},
		{mlx.Quant{Mode: mlx.NVFP4, Bits: 4, GroupSize: 16}, true},
		{mlx.Quant{Mode: mlx.MXFP8, Bits: 4, GroupSize: 32}, false},
		{mlx.Quant{Mode: "int4", Bits: 4, GroupSize: 32}, false},
	} {
		if err := c.q.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate = %v, want ok = %v", c.q, err, c.ok)
		}
	}
}

// An invalid Quant fails like any op: the error surfaces at Eval and the
// process keeps running.
func TestQuantizedMatmulInvalidQuantIsAnError(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := mlx.Zeros(mlx.Float32, 1, 64)
		w := mlx.Zeros(mlx.Uint32, 2, 8)
		s := mlx.Zeros(mlx.Float32, 2, 1)
		y := mlx.QuantizedMatmul(x, w, s, s, mlx.Quant{Mode: mlx.Affine, Bits: 7, GroupSize: 64}, true)
		if err := mlx.Eval(y); err == nil {
			t.Fatal("7-bit affine matmul evaluated without an error")
		}
	})
}

func transposeRef(a *tensor) *tensor {
	out := newTensor(a.shape[1], a.shape[0])
	for i := range a.shape[0] {
		for j := range a.shape[1] {
			out.data[j*a.shape[0]+i] = a.data[i*a.shape[1]+j]
		}
	}
	return out
}

// Affine quantized products at prompt-sized row counts against the hand
// reference. On an H200 the 4-bit, group-64 MLX-format fixture's prompt
// logits (float32) came out 10.1 away from mlx-lm's: MLX 0.32.4 on CUDA
// sends a multi-row product whose input is one group wide (in ≤ group
// size: the fixture's 64-wide layers) to its Hopper kernel, and
// QuantizedMatmul now dequantizes those first (dequantizeFirst). The cases
// cover both sides of that rule — wide inputs (many groups) and one-group
// inputs — at 1 to 64 rows, in float32 everywhere and in bfloat16 on the
// GPU (MLX's CPU kernel sums half types in their own precision, ~10 % off
// on these sums, so the CPU is held to float32 only).
func TestAffineQuantizedMatmulRows(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		const out = 256
		cases := []struct {
			in int
			q  mlx.Quant
		}{
			{1024, mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 64}},
			{1024, mlx.Quant{Mode: mlx.Affine, Bits: 8, GroupSize: 32}},
			{64, mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 64}},
			{64, mlx.Quant{Mode: mlx.Affine, Bits: 8, GroupSize: 64}},
			{128, mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 128}},
		}
		dtypes := []mlx.DType{mlx.Float32}
		if mlx.CurrentDevice() == mlx.GPU {
			dtypes = append(dtypes, mlx.BFloat16)
		}
		// Float32 first: on the GPU, MLX's JIT compile of its bfloat16
		// multi-row kernels takes minutes.
		for _, dt := range dtypes {
			for _, c := range cases {
				ac := newAffineCase(r, out, c.in, c.q)
				w, s, b := ac.arrays()
				for _, rows := range []int{1, 4, 16, 64} {
					x := randTensor(r, rows, c.in).roundF32()
					if dt == mlx.BFloat16 {
						// Scales k/256 and biases m/64 are exact in bfloat16.
						x = x.roundBF16()
					}
					want := matmulRef(x, transposeRef(ac.dense))
					name := fmt.Sprintf("%s, in %d, %s, %d rows", c.q, c.in, dt, rows)
					y := mlx.QuantizedMatmul(mlx.AsType(x.mlx(), dt), w, mlx.AsType(s, dt), mlx.AsType(b, dt), c.q, true)
					got := t.Float32s(mlx.AsType(y, mlx.Float32))
					top, worst := 0.0, 0.0
					for i, v := range want.data {
						top = max(top, math.Abs(v))
						worst = max(worst, math.Abs(float64(got[i])-v))
					}
					// float32: sums of ≤1024 terms in another order, |y| up
					// to ~3000. bfloat16: the output's rounding (2⁻⁸) plus
					// MLX's half-precision partial sums in its 4-bit gemv.
					tol := 1e-5 * float64(c.in) * top / 100
					if dt == mlx.BFloat16 {
						tol = 2e-2 * top
					}
					if worst > tol {
						t.Errorf("%s: worst error %.3g (largest |y| %.3g, tolerance %.3g)", name, worst, top, tol)
					} else {
						t.Logf("%s: worst error %.3g of |y| ≤ %.3g", name, worst, top)
					}
				}
			}
		}
	})
}
