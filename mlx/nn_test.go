package mlx_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

func TestDepthwiseConv1d(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		const L, C, K = 6, 5, 3
		x := randTensor(r, 1, L, C).roundF32()
		w := randTensor(r, C, K, 1).roundF32() // MLX layout [Cout, K, Cin/groups]
		// Causal depthwise: pad K-1 zeros in front, then valid convolution.
		want := newTensor(1, L, C)
		for tt := range L {
			for c := range C {
				var s float64
				for j := range K {
					src := tt - (K - 1) + j
					if src >= 0 {
						s += w.at(c, j, 0) * x.at(0, src, c)
					}
				}
				want.data[want.index([]int{0, tt, c})] = s
			}
		}
		padded := mlx.Pad(x.mlx(), []int{1}, []int{K - 1}, []int{0}, nil)
		check(t, "conv1d", mlx.Conv1d(padded, w.mlx(), 1, 0, 1, C), want, 1e-5, 1e-6)
	})
}

// RMSNorm over the last axis against a float64 reference, for a last axis
// that fills whole 8-float groups (8) and one that does not (37), for a
// contiguous input and for a transposed view, with and without a weight. On
// the CPU a float32 norm is one graph node (shim/norm.cpp) equal to the bit
// to MLX's own composition of the norm.
func TestRMSNorm(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		const eps = 1e-6
		for _, D := range []int{8, 37} {
			x := randTensor(r, 3, D).roundF32()
			w := randTensor(r, D).roundF32()
			want, plain := newTensor(3, D), newTensor(3, D)
			for i := range 3 {
				var ms float64
				for j := range D {
					ms += x.at(i, j) * x.at(i, j)
				}
				inv := 1 / math.Sqrt(ms/float64(D)+eps)
				for j := range D {
					plain.data[i*D+j] = x.at(i, j) * inv
					want.data[i*D+j] = x.at(i, j) * inv * w.data[j]
				}
			}
			got := mlx.RMSNorm(x.mlx(), w.mlx(), eps)
			if mlx.CurrentDevice() == mlx.CPU {
				wantOneNode(t, "float32 RMSNorm on the CPU", "RMSNormCPU", true, got)
			}
			check(t, fmt.Sprintf("rms_norm D=%d", D), got, want, 1e-5, 1e-6)
			// Bit for bit what MLX's fallback composes from ops (its
			// x · rsqrt(mean(x²) + ε) · w), so models keep their values.
			xm := x.mlx()
			composed := mlx.Multiply(mlx.Multiply(xm, mlx.Rsqrt(mlx.AddScalar(mlx.Mean(mlx.Square(xm), true, -1), eps))), w.mlx())
			g, c := t.Float32s(got), t.Float32s(composed)
			for i := range g {
				if g[i] != c[i] {
					t.Fatalf("rms_norm D=%d: element %d is %v, MLX's composition gives %v", D, i, g[i], c[i])
				}
			}
			check(t, fmt.Sprintf("rms_norm weightless D=%d", D), mlx.RMSNorm(x.mlx(), nil, eps), plain, 1e-5, 1e-6)
			// The same rows read through a transposed view of [D, 3].
			xt := mlx.Contiguous(mlx.Transpose(x.mlx(), 1, 0))
			check(t, fmt.Sprintf("rms_norm of a view D=%d", D), mlx.RMSNorm(mlx.Transpose(xt, 1, 0), w.mlx(), eps), want, 1e-5, 1e-6)
			// bfloat16 takes MLX's own op.
			bf := mlx.AsType(mlx.RMSNorm(mlx.AsType(x.mlx(), mlx.BFloat16), mlx.AsType(w.mlx(), mlx.BFloat16), eps), mlx.Float32)
			check(t, fmt.Sprintf("rms_norm bfloat16 D=%d", D), bf, want, 2e-2, 2e-2)
		}
	})
}

// ropeRef rotates the first dims features of x [B, H, L, D] at positions
// offset+l, pairing j with j+dims/2 (neox) or 2j with 2j+1 (traditional).
func ropeRef(x *tensor, dims int, traditional bool, base float64, offset int) *tensor {
	out := x.clone()
	B, H, L, D := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	half := dims / 2
	for b := range B {
		for h := range H {
			for l := range L {
				pos := float64(offset + l)
				for j := range half {
					theta := pos * math.Pow(base, -2*float64(j)/float64(dims))
					c, s := math.Cos(theta), math.Sin(theta)
					i1, i2 := j, j+half
					if traditional {
						i1, i2 = 2*j, 2*j+1
					}
					a1 := x.at(b, h, l, i1)
					a2 := x.at(b, h, l, i2)
					out.data[out.index([]int{b, h, l, i1})] = a1*c - a2*s
					out.data[out.index([]int{b, h, l, i2})] = a1*s + a2*c
				}
			}
		}
	}
	_ = D
	return out
}

func TestRoPE(t *testing.T) {
	cases := []struct {
		name        string
		dims        int
		traditional bool
		offset      int
	}{
		{"neox full", 16, false, 0},
		{"neox partial (Qwen3.5: 64 of 256 dims)", 8, false, 37},
		{"traditional full", 16, true, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				x := randTensor(newRand(t), 1, 2, 5, 16).roundF32()
				const base = 1e6
				want := ropeRef(x, c.dims, c.traditional, base, c.offset)
				check(t, "rope", mlx.RoPE(x.mlx(), c.dims, c.traditional, base, 1, c.offset), want, 1e-4, 1e-5)
				off := mlx.FromInt32s([]int32{int32(c.offset)}, 1)
				check(t, "rope dynamic offset", mlx.RoPEDynamic(x.mlx(), c.dims, c.traditional, base, 1, off), want, 1e-4, 1e-5)
			})
		})
	}
}

// sdpaRef computes attention for q [1, Hq, Lq, D], k/v [1, Hkv, Lk, D] with a
// visibility function (nil: every key visible).
func sdpaRef(q, k, v *tensor, scale float64, visible func(i, j int) bool) *tensor {
	Hq, Lq, D := q.shape[1], q.shape[2], q.shape[3]
	Hkv, Lk := k.shape[1], k.shape[2]
	out := newTensor(1, Hq, Lq, D)
	for h := range Hq {
		kh := h / (Hq / Hkv)
		for i := range Lq {
			scores := make([]float64, Lk)
			m := math.Inf(-1)
			for j := range Lk {
				if visible != nil && !visible(i, j) {
					scores[j] = math.Inf(-1)
					continue
				}
				var s float64
				for d := range D {
					s += q.at(0, h, i, d) * k.at(0, kh, j, d)
				}
				scores[j] = s * scale
				m = math.Max(m, scores[j])
			}
			var z float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				z += scores[j]
			}
			for d := range D {
				var s float64
				for j := range Lk {
					s += scores[j] / z * v.at(0, kh, j, d)
				}
				out.data[out.index([]int{0, h, i, d})] = s
			}
		}
	}
	return out
}

func TestScaledDotProductAttention(t *testing.T) {
	const Hq, Hkv, Lq, Lk, D = 4, 2, 3, 7, 8
	scale := 1 / math.Sqrt(D)
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		q := randTensor(r, 1, Hq, Lq, D).roundF32()
		k := randTensor(r, 1, Hkv, Lk, D).roundF32()
		v := randTensor(r, 1, Hkv, Lk, D).roundF32()
		sdpa := func(m mlx.AttentionMask) *mlx.Array {
			return mlx.ScaledDotProductAttention(q.mlx(), k.mlx(), v.mlx(), float32(scale), m)
		}
		check(t, "no mask (GQA)", sdpa(mlx.AttentionMask{}), sdpaRef(q, k, v, scale, nil), 1e-4, 1e-5)
		// Causal aligns the queries to the end of the keys: query i sits at key
		// slot Lk-Lq+i.
		causal := func(i, j int) bool { return j <= Lk-Lq+i }
		check(t, "causal", sdpa(mlx.AttentionMask{Causal: true}), sdpaRef(q, k, v, scale, causal), 1e-4, 1e-5)
		// A boolean mask: a sliding band of width 3 ending at each query.
		band := func(i, j int) bool { p := Lk - Lq + i; return j <= p && p-j < 3 }
		vis := make([]bool, Lq*Lk)
		for i := range Lq {
			for j := range Lk {
				vis[i*Lk+j] = band(i, j)
			}
		}
		boolMask := mlx.FromBools(vis, 1, 1, Lq, Lk)
		check(t, "bool mask", sdpa(mlx.AttentionMask{Array: boolMask}), sdpaRef(q, k, v, scale, band), 1e-4, 1e-5)
		// The same mask as additive -inf/0 float values.
		add := make([]float32, Lq*Lk)
		for i, ok := range vis {
			if !ok {
				add[i] = float32(math.Inf(-1))
			}
		}
		addMask := mlx.FromFloat32s(add, 1, 1, Lq, Lk)
		check(t, "additive mask", sdpa(mlx.AttentionMask{Array: addMask}), sdpaRef(q, k, v, scale, band), 1e-4, 1e-5)
	})
}

// The composed attention (matmuls and a softmax: what a GPU runs for a
// verification's or a draft's block of 2-32 half-precision queries instead of
// cuDNN) against the float64 reference, for blocks of 2, 4, 5 and 8 queries,
// with and without grouped-query heads, in every mask mode, and in bfloat16
// against the reference on the bfloat16-rounded inputs to within the output's
// own rounding (scores and sums in float32, as MLX's one-query kernel keeps
// them: rounding the scores to bfloat16 first was off by up to 1e-2).
func TestScaledDotProductAttentionComposed(t *testing.T) {
	const Lk, D = 37, 16
	scale := 1 / math.Sqrt(D)
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		for _, shape := range []struct{ Hq, Hkv, Lq int }{{6, 2, 8}, {4, 4, 4}, {4, 1, 5}, {4, 2, 2}} {
			Hq, Hkv, Lq := shape.Hq, shape.Hkv, shape.Lq
			q := randTensor(r, 1, Hq, Lq, D).roundF32()
			k := randTensor(r, 1, Hkv, Lk, D).roundF32()
			v := randTensor(r, 1, Hkv, Lk, D).roundF32()
			name := fmt.Sprintf("Hq %d Hkv %d Lq %d", Hq, Hkv, Lq)
			composed := func(m mlx.AttentionMask) *mlx.Array {
				return mlx.SDPAComposed(q.mlx(), k.mlx(), v.mlx(), float32(scale), m)
			}
			check(t, name+" no mask", composed(mlx.AttentionMask{}), sdpaRef(q, k, v, scale, nil), 1e-4, 1e-5)
			causal := func(i, j int) bool { return j <= Lk-Lq+i }
			check(t, name+" causal", composed(mlx.AttentionMask{Causal: true}), sdpaRef(q, k, v, scale, causal), 1e-4, 1e-5)
			// A per-head boolean mask [1, Hq, Lq, Lk]: head h sees a band of
			// width 3+h ending at each query, so a mask split by the wrong
			// head group gives wrong rows.
			vis := make([]bool, Hq*Lq*Lk)
			for hd := range Hq {
				for i := range Lq {
					for j := range Lk {
						p := Lk - Lq + i
						vis[(hd*Lq+i)*Lk+j] = j <= p && p-j < 3+hd
					}
				}
			}
			got := composed(mlx.AttentionMask{Array: mlx.FromBools(vis, 1, Hq, Lq, Lk)})
			for hd := range Hq {
				band := func(i, j int) bool { p := Lk - Lq + i; return j <= p && p-j < 3+hd }
				want := sdpaRef(q, k, v, scale, band)
				check(t, fmt.Sprintf("%s head %d of a per-head mask", name, hd),
					mlx.SliceAxis(got, 1, hd, hd+1), want.head(hd), 1e-4, 1e-5)
			}
			// bfloat16 inputs: within bfloat16's rounding of the reference.
			qb, kb, vb := mlx.AsType(q.mlx(), mlx.BFloat16), mlx.AsType(k.mlx(), mlx.BFloat16), mlx.AsType(v.mlx(), mlx.BFloat16)
			out := mlx.AsType(mlx.SDPAComposed(qb, kb, vb, float32(scale), mlx.AttentionMask{Causal: true}), mlx.Float32)
			check(t, name+" bfloat16 causal", out, sdpaRef(q.roundBF16(), k.roundBF16(), v.roundBF16(), scale, causal), 4e-3, 1e-4)
		}
	})
}

// SigmoidMulCPU: silu(a) ⊙ b and a ⊙ σ(b) against a float64 reference, and
// bit for bit against MLX's compiled kernel of the same ops (the models'
// values before the shim served them), for rows that fill whole 8-float
// groups (16) and rows with a remainder (37), for contiguous operands and for
// the two halves of one fused projection (strided views, as SwiGLU splits
// gate_up), over values from the normal range to the exp kernel's edges
// (|x| near and beyond 88, zeros of both signs, NaN, infinities).
func TestSigmoidMulCPU(t *testing.T) {
	compiled := map[bool]*mlx.Compiled{
		true: mlx.Compile("test_silu_mul", 1, func(in []*mlx.Array) []*mlx.Array {
			return []*mlx.Array{mlx.Multiply(mlx.Silu(in[0]), in[1])}
		}),
		false: mlx.Compile("test_sigmoid_gate", 1, func(in []*mlx.Array) []*mlx.Array {
			return []*mlx.Array{mlx.Multiply(in[0], mlx.Sigmoid(in[1]))}
		}),
	}
	sigmoid := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			if _, ok := mlx.SigmoidMulCPU(mlx.Zeros(mlx.Float32, 2), mlx.Zeros(mlx.Float32, 2), true); ok {
				t.Fatalf("SigmoidMulCPU served a call off the CPU")
			}
			return
		}
		r := newRand(t)
		edges := []float64{0, math.Copysign(0, -1), 87.9, 88, 88.1, -87.9, -88, -88.1, 100, -100, 1e30, -1e30,
			0.5, -0.5, 1.5, -2.5, 1e-8, -1e-8, math.Inf(1), math.Inf(-1), math.NaN()}
		for _, D := range []int{16, 37} {
			fused := randTensor(r, 3, 2*D)
			for i := range fused.data {
				fused.data[i] *= 4
			}
			copy(fused.data, edges)
			copy(fused.data[len(fused.data)-len(edges):], edges)
			fused.roundF32()
			fm := fused.mlx()
			halves := mlx.Split(fm, -1, D)
			a, b := mlx.Contiguous(halves[0]), mlx.Contiguous(halves[1])
			for _, silu := range []bool{true, false} {
				want := newTensor(3, D)
				for i := range 3 {
					for j := range D {
						x, y := fused.at(i, j), fused.at(i, D+j)
						if silu {
							want.data[i*D+j] = x * sigmoid(x) * y
						} else {
							want.data[i*D+j] = x * sigmoid(y)
						}
					}
				}
				for _, in := range []struct {
					name string
					a, b *mlx.Array
				}{{"contiguous", a, b}, {"views", halves[0], halves[1]}} {
					name := fmt.Sprintf("silu=%v D=%d %s", silu, D, in.name)
					got, ok := mlx.SigmoidMulCPU(in.a, in.b, silu)
					if !ok {
						t.Fatalf("%s: the CPU kernel did not serve float32 operands of one shape", name)
					}
					wantOneNode(t, name, "SigmoidMulCPU", false, got)
					g := t.Float32s(got)
					sameBits(t, name, g, t.Float32s(compiled[silu].Call(in.a, in.b)[0]), func(i int) string {
						return fmt.Sprintf("inputs %v, %v", fused.at(i/D, i%D), fused.at(i/D, D+i%D))
					})
					// The float64 reference, over the finite values only.
					finite := newTensor(3, D)
					gotFinite := make([]float32, len(g))
					for i := range g {
						w := want.data[i]
						if math.IsNaN(w) || math.IsInf(w, 0) || math.Abs(w) > 1e30 {
							w = 0
							gotFinite[i] = 0
						} else {
							gotFinite[i] = g[i]
						}
						finite.data[i] = w
					}
					check(t, name, mlx.FromFloat32s(gotFinite, 3, D), finite, 1e-5, 1e-6)
				}
			}
		}
		// bfloat16, or operands of different shapes, are left to the caller.
		if _, ok := mlx.SigmoidMulCPU(mlx.AsType(mlx.Zeros(mlx.Float32, 4), mlx.BFloat16), mlx.AsType(mlx.Zeros(mlx.Float32, 4), mlx.BFloat16), true); ok {
			t.Fatalf("SigmoidMulCPU served bfloat16 operands")
		}
		if _, ok := mlx.SigmoidMulCPU(mlx.Zeros(mlx.Float32, 2, 4), mlx.Zeros(mlx.Float32, 4), true); ok {
			t.Fatalf("SigmoidMulCPU served operands of different shapes")
		}
	})
}

// ConvSiLUCPU: silu of the causal depthwise convolution against a float64
// reference, and bit for bit against MLX's compiled kernel of the same ops
// (qwen35's causalConvSiLU, the models' values before the shim served them),
// for one and several output rows, channel counts that fill whole 8-float
// groups (16) and leave a remainder (37), one tap and four, contiguous
// operands and transposed views (the strided path), with inputs at the exp
// kernel's edges.
func TestConvSiLUCPU(t *testing.T) {
	compiled := mlx.Compile("test_conv_silu", 1, func(in []*mlx.Array) []*mlx.Array {
		x, w := in[0], in[1]
		taps := w.Dim(0)
		L := x.Dim(1) - taps + 1
		var sum *mlx.Array
		for j := range taps {
			term := mlx.Multiply(mlx.SliceAxis(x, 1, j, j+L), mlx.SliceAxis(w, 0, j, j+1))
			if sum == nil {
				sum = term
			} else {
				sum = mlx.Add(sum, term)
			}
		}
		return []*mlx.Array{mlx.Silu(sum)}
	})
	sigmoid := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			if _, ok := mlx.ConvSiLUCPU(mlx.Zeros(mlx.Float32, 1, 4, 8), mlx.Zeros(mlx.Float32, 4, 8)); ok {
				t.Fatalf("ConvSiLUCPU served a call off the CPU")
			}
			return
		}
		r := newRand(t)
		edges := []float64{0, math.Copysign(0, -1), 30, 40, -30, -40, 1e-8, -1e-8, 1e30, math.Inf(1), math.Inf(-1), math.NaN()}
		for _, taps := range []int{4, 1} {
			for _, C := range []int{16, 37} {
				for _, L := range []int{1, 8} {
					x := randTensor(r, 1, L+taps-1, C)
					for i := range x.data {
						x.data[i] *= 3
					}
					copy(x.data[len(x.data)-len(edges):], edges)
					x.roundF32()
					w := randTensor(r, taps, C).roundF32()
					want := newTensor(1, L, C)
					for tt := range L {
						for c := range C {
							s := 0.0
							for j := range taps {
								s += x.at(0, tt+j, c) * w.at(j, c)
							}
							want.data[tt*C+c] = s * sigmoid(s)
						}
					}
					xm, wm := x.mlx(), w.mlx()
					// The same values through transposed views: x's channels and
					// w's taps strided.
					xt := mlx.Transpose(mlx.Contiguous(mlx.Transpose(xm, 0, 2, 1)), 0, 2, 1)
					wt := mlx.Transpose(mlx.Contiguous(mlx.Transpose(wm, 1, 0)), 1, 0)
					for _, in := range []struct {
						name string
						x, w *mlx.Array
					}{{"contiguous", xm, wm}, {"views", xt, wt}} {
						name := fmt.Sprintf("taps %d, C %d, L %d, %s", taps, C, L, in.name)
						got, ok := mlx.ConvSiLUCPU(in.x, in.w)
						if !ok {
							t.Fatalf("%s: the CPU kernel did not serve float32 operands", name)
						}
						wantOneNode(t, name, "ConvSiLUCPU", false, got)
						g := t.Float32s(got)
						sameBits(t, name, g, t.Float32s(compiled.Call(in.x, in.w)[0]), nil)
						finite := newTensor(1, L, C)
						gotFinite := make([]float32, len(g))
						for i := range g {
							if w := want.data[i]; !math.IsNaN(w) && !math.IsInf(w, 0) && math.Abs(w) < 1e20 {
								finite.data[i], gotFinite[i] = w, g[i]
							}
						}
						check(t, name, mlx.FromFloat32s(gotFinite, 1, L, C), finite, 1e-5, 1e-5)
					}
				}
			}
		}
		if _, ok := mlx.ConvSiLUCPU(mlx.AsType(mlx.Zeros(mlx.Float32, 1, 4, 8), mlx.BFloat16), mlx.Zeros(mlx.Float32, 4, 8)); ok {
			t.Fatalf("ConvSiLUCPU served a bfloat16 input")
		}
		if _, ok := mlx.ConvSiLUCPU(mlx.Zeros(mlx.Float32, 1, 3, 8), mlx.Zeros(mlx.Float32, 4, 8)); ok {
			t.Fatalf("ConvSiLUCPU served fewer input rows than taps")
		}
	})
}

// DynamicConvCPU against the composition of MLX ops it replaces in DFlash2
// (arch/dflash2 dynamicConv), bit for bit including the signs of zeros, and
// a float64 reference, for blocks shorter and longer than the kernel, with
// the taps read through the strided views the draft passes (slices of one
// projection and of the stacked base kernels).
func TestDynamicConvCPU(t *testing.T) {
	composed := func(x, w, b *mlx.Array, groupSize int) *mlx.Array {
		L, H := x.Dim(1), x.Dim(2)
		kernel, groups := w.Dim(2), w.Dim(3)
		var out *mlx.Array
		for j := range min(kernel, L) {
			shifted := x
			if j > 0 {
				shifted = mlx.Concatenate(1, mlx.Zeros(x.DType(), 1, j, H), mlx.SliceAxis(x, 1, 0, L-j))
			}
			dj := mlx.Reshape(mlx.SliceAxis(w, 2, j, j+1), 1, L, groups, 1)
			dj = mlx.Reshape(mlx.BroadcastTo(dj, 1, L, groups, groupSize), 1, L, H)
			term := mlx.Multiply(mlx.Add(dj, mlx.Reshape(mlx.SliceAxis(b, 0, j, j+1), H)), shifted)
			if out == nil {
				out = term
			} else {
				out = mlx.Add(out, term)
			}
		}
		return out
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			if _, ok := mlx.DynamicConvCPU(mlx.Zeros(mlx.Float32, 1, 2, 8), mlx.Zeros(mlx.Float32, 1, 2, 4, 2), mlx.Zeros(mlx.Float32, 4, 8)); ok {
				t.Fatalf("DynamicConvCPU served a call off the CPU")
			}
			return
		}
		r := newRand(t)
		const K = 4
		for _, g := range []struct{ groups, size int }{{4, 4}, {3, 5}} {
			H := g.groups * g.size
			for _, L := range []int{1, 3, 8} {
				x := randTensor(r, 1, L, H).roundF32()
				y := randTensor(r, 1, L, 2*K*g.groups).roundF32()
				base := randTensor(r, 2, K, H).roundF32()
				dyn := mlx.Reshape(y.mlx(), 1, L, 2, K, g.groups)
				w := mlx.Squeeze(mlx.SliceAxis(dyn, 2, 1, 2), 2)
				b := mlx.Squeeze(mlx.SliceAxis(base.mlx(), 0, 1, 2), 0)
				xm := x.mlx()
				t.Eval(xm, w, b)
				name := fmt.Sprintf("H %d (%d groups), L %d", H, g.groups, L)
				got, ok := mlx.DynamicConvCPU(xm, w, b)
				if !ok {
					t.Fatalf("%s: the CPU kernel did not serve float32 operands", name)
				}
				wantOneNode(t, name, "DynamicConvCPU", true, got)
				gv := t.Float32s(got)
				cv := t.Float32s(composed(xm, w, b, g.size))
				for i := range gv {
					if math.Float32bits(gv[i]) != math.Float32bits(cv[i]) {
						t.Fatalf("%s: element %d is %v, the composed ops give %v", name, i, gv[i], cv[i])
					}
				}
				want := newTensor(1, L, H)
				for tt := range L {
					for c := range H {
						s := 0.0
						for j := range min(K, L) {
							if tt >= j {
								s += (y.at(0, tt, K*g.groups+j*g.groups+c/g.size) + base.at(1, j, c)) * x.at(0, tt-j, c)
							}
						}
						want.data[tt*H+c] = s
					}
				}
				check(t, name, got, want, 1e-5, 1e-5)
			}
		}
		if _, ok := mlx.DynamicConvCPU(mlx.Zeros(mlx.Float32, 1, 2, 8), mlx.Zeros(mlx.Float32, 1, 2, 4, 3), mlx.Zeros(mlx.Float32, 4, 8)); ok {
			t.Fatalf("DynamicConvCPU served channels that do not divide into the groups")
		}
	})
}

// roundBF16 returns a copy of t with every value rounded to bfloat16 (to
// nearest, ties to even), as an AsType to bfloat16 rounds it.
func (t *tensor) roundBF16() *tensor {
	out := t.clone()
	for i, x := range out.data {
		b := math.Float32bits(float32(x))
		b = (b + 0x7fff + (b>>16)&1) &^ 0xffff
		out.data[i] = float64(math.Float32frombits(b))
	}
	return out
}

// head returns head h of a [1, H, L, D] tensor as [1, 1, L, D].
func (t *tensor) head(h int) *tensor {
	L, D := t.shape[2], t.shape[3]
	out := newTensor(1, 1, L, D)
	copy(out.data, t.data[h*L*D:(h+1)*L*D])
	return out
}

// ropeComposed is MLX's own CPU composition of RoPE (mlx/fast.cpp's
// fallback, node for node) for float32 x [..., T, D]: positions (t + offset)
// · scale, inverse frequencies exp(−j · (log(base) / (dims/2))), their
// product's cos and sin, and the rotation of the pairs (j, j + dims/2), or
// (2j, 2j+1) when traditional, the features from dims on kept.
func ropeComposed(x *mlx.Array, dims int, traditional bool, base, scale float32, offset *mlx.Array) *mlx.Array {
	nd, T, D := x.NDim(), x.Dim(-2), x.Dim(-1)
	half := dims / 2
	positions := mlx.Multiply(mlx.Add(mlx.Arange(0, float64(T), 1, mlx.Float32), offset), mlx.Scalar(float64(scale), mlx.Float32))
	step := mlx.Divide(mlx.Log(mlx.Scalar(float64(base), mlx.Float32)), mlx.Scalar(float64(half), mlx.Float32))
	inv := mlx.Exp(mlx.Multiply(mlx.Arange(0, -float64(half), -1, mlx.Float32), step))
	theta := mlx.Multiply(mlx.ExpandDims(positions, -1), inv)
	c, s := mlx.Cos(theta), mlx.Sin(theta)
	var x1, x2 *mlx.Array
	lead := x.Shape()[:nd-1]
	if traditional {
		pairs := mlx.Reshape(mlx.SliceAxis(x, nd-1, 0, dims), append(append([]int{}, lead...), half, 2)...)
		x1 = mlx.Reshape(mlx.SliceAxis(pairs, nd, 0, 1), append(append([]int{}, lead...), half)...)
		x2 = mlx.Reshape(mlx.SliceAxis(pairs, nd, 1, 2), append(append([]int{}, lead...), half)...)
	} else {
		x1, x2 = mlx.SliceAxis(x, nd-1, 0, half), mlx.SliceAxis(x, nd-1, half, dims)
	}
	first := mlx.Subtract(mlx.Multiply(x1, c), mlx.Multiply(x2, s))
	second := mlx.Add(mlx.Multiply(x1, s), mlx.Multiply(x2, c))
	var out *mlx.Array
	if traditional {
		out = mlx.Reshape(mlx.Concatenate(-1, mlx.ExpandDims(first, -1), mlx.ExpandDims(second, -1)), append(append([]int{}, lead...), dims)...)
	} else {
		out = mlx.Concatenate(-1, first, second)
	}
	if dims < D {
		out = mlx.Concatenate(-1, out, mlx.SliceAxis(x, nd-1, dims, D))
	}
	return out
}

// On the CPU a float32 RoPE is one graph node (shim/rope.cpp) with, to the
// bit, the values of MLX's own composition of it, for neox and traditional
// pairs, full and partial rotation, 3- and 4-dimensional inputs, a
// transposed view, large positions, a scale, and an offset given as an
// array.
func TestRoPEOnTheCPUIsMLXsComposition(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			t.Skip("the one-node RoPE is the CPU's")
		}
		r := newRand(t)
		view := mlx.Transpose(randTensor(r, 1, 6, 3, 64).roundF32().mlx(), 0, 2, 1, 3) // [1, 3, 6, 64], strided
		for _, c := range []struct {
			name        string
			x           *mlx.Array
			dims        int
			traditional bool
			base, scale float32
			offset      int
		}{
			{"neox full", randTensor(r, 1, 2, 5, 16).roundF32().mlx(), 16, false, 1e6, 1, 0},
			{"neox partial, Qwen3.5's 64 of 256", randTensor(r, 1, 2, 3, 256).roundF32().mlx(), 64, false, 1e7, 1, 37},
			{"traditional partial", randTensor(r, 1, 2, 5, 16).roundF32().mlx(), 8, true, 1e4, 1, 5},
			{"three dimensions, far positions", randTensor(r, 2, 4, 32).roundF32().mlx(), 32, false, 1e6, 1, 40000},
			{"scaled positions", randTensor(r, 1, 1, 4, 16).roundF32().mlx(), 16, false, 1e4, 0.25, 9},
			{"a transposed view", view, 64, false, 1e6, 1, 123},
		} {
			got := mlx.RoPE(c.x, c.dims, c.traditional, c.base, c.scale, c.offset)
			wantOneNode(t, c.name, "RoPECPU", false, got)
			off := mlx.FromInt32s([]int32{int32(c.offset)}, 1)
			want := t.Float32s(ropeComposed(c.x, c.dims, c.traditional, c.base, c.scale, off))
			t.SameBits(c.name, t.Float32s(got), want)
			dyn := mlx.RoPEDynamic(c.x, c.dims, c.traditional, c.base, c.scale, off)
			t.SameBits(c.name+", offset as an array", t.Float32s(dyn), want)
		}
		// bfloat16 takes MLX's own composition: many nodes.
		ops, err := mlx.GraphOps(mlx.RoPE(mlx.AsType(view, mlx.BFloat16), 64, false, 1e6, 1, 3))
		t.NoErr(err)
		if ops["RoPECPU"] != 0 {
			t.Fatalf("a bfloat16 RoPE took the float32 node: %v", ops)
		}
	})
}
