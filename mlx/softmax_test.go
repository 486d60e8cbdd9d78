package mlx_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// wantOneNode fails unless the graph of arrays holds one node of kind
// (and, with alone, no other node): a CPU kernel served the call whole.
func wantOneNode(t *mlxtest.T, name, kind string, alone bool, arrays ...*mlx.Array) {
	t.Helper()
	ops, err := mlx.GraphOps(arrays...)
	t.NoErr(err)
	if ops[kind] != 1 || alone && len(ops) != 1 {
		only := ""
		if alone {
			only = " and nothing else"
		}
		t.Fatalf("%s: graph %v, want one %s node%s", name, ops, kind, only)
	}
}

// sameBits fails unless got and want (MLX's result) agree element for
// element to the bit (two NaNs agree whatever their payloads); inputs, when
// not nil, describes the inputs of a differing element for the message.
func sameBits(t *mlxtest.T, name string, got, want []float32, inputs func(i int) string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, MLX gives %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			at := ""
			if inputs != nil {
				at = " (" + inputs(i) + ")"
			}
			t.Fatalf("%s: element %d%s is %v (%#08x), MLX gives %v (%#08x)", name, i, at,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// softmaxRows64 is the softmax of each row of n values in float64.
func softmaxRows64(x []float32, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x); r += n {
		m := math.Inf(-1)
		for _, v := range x[r : r+n] {
			m = math.Max(m, float64(v))
		}
		var z float64
		for j := range n {
			out[r+j] = math.Exp(float64(x[r+j]) - m)
			z += out[r+j]
		}
		for j := range n {
			out[r+j] /= z
		}
	}
	return out
}

// SoftmaxCPU against MLX's own Softmax on the CPU, bit for bit, and against
// a float64 reference: row lengths below, at and past whole 8-float groups
// (1, 7, 8, 13, 37, 300), row counts that leave partial groups of eight rows
// (1, 3, 8, 13), causal rows (a −inf tail), rows masked with float32's
// lowest value (MLX's bool-mask fill), all-equal rows, large and tiny values,
// the exp's edges (differences near ±88), a NaN, +inf and an all −inf row
// (MLX's NaN and uniform results, not the vector path's), and strided views
// (a transpose, every other element).
func TestSoftmaxCPU(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			if _, ok := mlx.SoftmaxCPU(mlx.Zeros(mlx.Float32, 2)); ok {
				t.Fatalf("SoftmaxCPU served a call off the CPU")
			}
			return
		}
		r := newRand(t)
		inf := float32(math.Inf(1))
		lowest := -math.MaxFloat32
		compare := func(name string, x *mlx.Array, vals []float32, n int, refCheck bool) {
			got, ok := mlx.SoftmaxCPU(x)
			if !ok {
				t.Fatalf("%s: the CPU kernel did not serve a float32 array", name)
			}
			wantOneNode(t, name, "SoftmaxCPU", false, got)
			g := t.Float32s(got)
			sameBits(t, name, g, t.Float32s(mlx.Softmax(x, true, -1)), func(i int) string { return fmt.Sprintf("input %v", vals[i]) })
			if !refCheck {
				return
			}
			want := softmaxRows64(vals, n)
			for i := range g {
				if d := math.Abs(float64(g[i]) - want[i]); d > 1e-5*want[i]+1e-7 {
					t.Fatalf("%s: element %d is %v, float64 gives %v", name, i, g[i], want[i])
				}
			}
		}
		for _, n := range []int{1, 7, 8, 13, 37, 300} {
			for _, rows := range []int{1, 3, 8, 13} {
				vals := make([]float32, rows*n)
				for i := range vals {
					vals[i] = float32(r.NormFloat64() * 4)
				}
				for row := range rows {
					x := vals[row*n : (row+1)*n]
					switch row % 7 {
					case 1: // causal: the keys after the query's slot masked
						for j := 1 + row%n; j < n; j++ {
							x[j] = -inf
						}
					case 2: // all equal
						for j := range x {
							x[j] = 0.375
						}
					case 3: // large and tiny values, the exp's edges
						edges := []float32{1e30, -1e30, 87.9, -87.9, 88.1, -88.1, 1e-30, -1e-30, 0, float32(math.Copysign(0, -1)), 3e4, -3e4}
						for j := range x {
							x[j] = edges[(j+row)%len(edges)]
						}
					case 4: // masked with float32's lowest value (MLX's bool-mask fill)
						for j := range x {
							if j%3 != 0 {
								x[j] = float32(lowest)
							}
						}
					case 5: // a small spread around a large offset
						for j := range x {
							x[j] = 1000 + x[j]/64
						}
					}
				}
				name := fmt.Sprintf("n=%d rows=%d", n, rows)
				compare(name, mlx.FromFloat32s(vals, rows, n), vals, n, true)
			}
		}
		// Rows MLX's kernel turns into NaN (a NaN, +inf, only −inf), or in
		// which a NaN sits after the maximum, next to ordinary rows of their
		// group of eight.
		const n = 19
		special := [][]float32{
			{1, 2, float32(math.NaN()), 3},
			{1, inf, 2},
			{-inf, -inf, -inf},
			{inf, inf},
			{5, 4, 3, float32(math.NaN())},
		}
		for _, sp := range special {
			vals := make([]float32, 9*n)
			for i := range vals {
				vals[i] = float32(r.NormFloat64())
			}
			for _, row := range []int{0, 4} {
				x := vals[row*n : (row+1)*n]
				if len(sp) == 3 && sp[0] == -inf {
					for j := range x {
						x[j] = -inf
					}
				} else {
					copy(x[3:], sp)
				}
			}
			compare(fmt.Sprintf("special %v", sp), mlx.FromFloat32s(vals, 9, n), vals, n, false)
		}
		// Strided views: the last axis of a transpose, and every other element.
		vals := make([]float32, 12*29)
		for i := range vals {
			vals[i] = float32(r.NormFloat64() * 3)
		}
		base := mlx.FromFloat32s(vals, 12, 29)
		tr := mlx.Transpose(base, 1, 0)
		trVals := make([]float32, 29*12)
		for i := range 12 {
			for j := range 29 {
				trVals[j*12+i] = vals[i*29+j]
			}
		}
		compare("transposed", tr, trVals, 12, true)
		step := mlx.SliceStrided(base, []int{0, 0}, []int{12, 29}, []int{1, 2})
		stepVals := make([]float32, 0, 12*15)
		for i := range 12 {
			for j := 0; j < 29; j += 2 {
				stepVals = append(stepVals, vals[i*29+j])
			}
		}
		compare("every other element", step, stepVals, 15, true)
		// Other dtypes are left to MLX.
		if _, ok := mlx.SoftmaxCPU(mlx.AsType(mlx.Zeros(mlx.Float32, 4), mlx.BFloat16)); ok {
			t.Fatalf("SoftmaxCPU served bfloat16")
		}
	})
}

// Attention on the CPU in float32 (MLX's composition with SoftmaxCPU in
// place of MLX's Softmax) against MLX's own scaled_dot_product_attention, bit
// for bit: one and several queries (decode, verification, prefill-like
// blocks), key lengths that leave partial 8-float groups, grouped and plain
// heads, causal, boolean and additive masks (−inf entries), and a batch of
// two.
func TestSDPACPUEqualsMLX(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			return
		}
		r := newRand(t)
		for _, c := range []struct{ B, Hq, Hkv, Lq, Lk, D int }{
			{1, 4, 2, 1, 5, 8}, {1, 4, 2, 8, 37, 16}, {1, 6, 6, 3, 19, 8}, {2, 8, 2, 5, 64, 32},
			{1, 2, 1, 13, 13, 8}, {1, 4, 4, 8, 300, 16},
		} {
			q := randTensor(r, c.B, c.Hq, c.Lq, c.D).roundF32().mlx()
			k := randTensor(r, c.B, c.Hkv, c.Lk, c.D).roundF32().mlx()
			v := randTensor(r, c.B, c.Hkv, c.Lk, c.D).roundF32().mlx()
			vis := make([]bool, c.Lq*c.Lk)
			add := make([]float32, c.Lq*c.Lk)
			for i := range c.Lq {
				for j := range c.Lk {
					p := c.Lk - c.Lq + i
					vis[i*c.Lk+j] = j <= p && p-j < 4
					if !vis[i*c.Lk+j] {
						add[i*c.Lk+j] = float32(math.Inf(-1))
					} else {
						add[i*c.Lk+j] = float32(-0.25 * float64(j%3))
					}
				}
			}
			// A per-head boolean mask too (its head axis unflattened into groups).
			heads := make([]bool, c.Hq*c.Lq*c.Lk)
			for h := range c.Hq {
				for i := range c.Lq * c.Lk {
					heads[h*c.Lq*c.Lk+i] = vis[i] || (h%2 == 0 && i%5 == 0)
				}
			}
			scale := float32(1 / math.Sqrt(float64(c.D)))
			for _, m := range []struct {
				name string
				mask mlx.AttentionMask
			}{
				{"none", mlx.AttentionMask{}},
				{"causal", mlx.AttentionMask{Causal: true}},
				{"bool", mlx.AttentionMask{Array: mlx.FromBools(vis, 1, 1, c.Lq, c.Lk)}},
				{"bool per head", mlx.AttentionMask{Array: mlx.FromBools(heads, 1, c.Hq, c.Lq, c.Lk)}},
				{"additive", mlx.AttentionMask{Array: mlx.FromFloat32s(add, 1, 1, c.Lq, c.Lk)}},
			} {
				name := fmt.Sprintf("%+v %s", c, m.name)
				got := mlx.ScaledDotProductAttention(q, k, v, scale, m.mask)
				ops, err := mlx.GraphOps(got)
				t.NoErr(err)
				if ops["SoftmaxCPU"] != 1 || ops["Softmax"] != 0 {
					t.Fatalf("%s: graph %v, want one SoftmaxCPU node and no Softmax", name, ops)
				}
				want := mlx.SDPAMLX(q, k, v, scale, m.mask)
				sameBits(t, name, t.Float32s(got), t.Float32s(want), nil)
			}
		}
		// bfloat16 attention is left to MLX.
		q := mlx.AsType(randTensor(r, 1, 2, 3, 8).mlx(), mlx.BFloat16)
		got := mlx.ScaledDotProductAttention(q, q, q, 0.5, mlx.AttentionMask{Causal: true})
		ops, err := mlx.GraphOps(got)
		t.NoErr(err)
		if ops["SoftmaxCPU"] != 0 {
			t.Fatalf("bfloat16 attention took SoftmaxCPU: %v", ops)
		}
	})
}
