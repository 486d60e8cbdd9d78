package nn_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// vals returns n deterministic values in [-1, 1).
func vals(n int, seed float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.Sin(seed*float64(i+1)*1.7 + seed))
	}
	return out
}

func near(t *mlxtest.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
		}
	}
}

func TestNorms(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const rows, d, eps = 3, 8, 1e-6
		x, z, w := vals(rows*d, 1), vals(rows*d, 2), vals(d, 3)
		var gated, l2, rms []float64
		for r := range rows {
			var ss float64
			for j := range d {
				ss += float64(x[r*d+j]) * float64(x[r*d+j])
			}
			inv, invL2 := 1/math.Sqrt(ss/d+eps), 1/math.Sqrt(ss+eps)
			for j := range d {
				xv, zv := float64(x[r*d+j]), float64(z[r*d+j])
				rms = append(rms, xv*inv*float64(w[j]))
				gated = append(gated, xv*inv*float64(w[j])*zv/(1+math.Exp(-zv)))
				l2 = append(l2, xv*invL2)
			}
		}
		X, Z, W := mlx.FromFloat32s(x, rows, d), mlx.FromFloat32s(z, rows, d), mlx.FromFloat32s(w)
		near(t, "RMSNorm", t.Float32s(nn.RMSNorm(X, W, eps)), rms, 1e-5)
		g := nn.GatedRMSNorm(mlx.AsType(X, mlx.BFloat16), Z, W, eps, mlx.BFloat16)
		if g.DType() != mlx.BFloat16 {
			t.Fatalf("GatedRMSNorm returns %s, want the requested bfloat16", g.DType())
		}
		near(t, "GatedRMSNorm", t.Float32s(nn.GatedRMSNorm(X, Z, W, eps, mlx.Float32)), gated, 1e-5)
		near(t, "L2Norm", t.Float32s(nn.L2Norm(X, eps, 1)), l2, 1e-5)
		// With a scale (q's Dk^-0.5): the reference times 0.25.
		scaled := make([]float64, len(l2))
		for i, v := range l2 {
			scaled[i] = 0.25 * v
		}
		near(t, "L2Norm scaled", t.Float32s(nn.L2Norm(X, eps, 0.25)), scaled, 1e-5)
	})
}

func TestSwiGLUAndLinear(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const in, hid, out = 4, 3, 2
		x, g, u, dn, b := vals(in, 1), vals(hid*in, 2), vals(hid*in, 3), vals(out*hid, 4), vals(out, 5)
		h := make([]float64, hid)
		for i := range hid {
			var gv, uv float64
			for j := range in {
				gv += float64(g[i*in+j]) * float64(x[j])
				uv += float64(u[i*in+j]) * float64(x[j])
			}
			h[i] = gv / (1 + math.Exp(-gv)) * uv
		}
		want, lin := make([]float64, out), make([]float64, out)
		for i := range out {
			for j := range hid {
				want[i] += float64(dn[i*hid+j]) * h[j]
				lin[i] += float64(dn[i*hid+j]) * float64(g[j*in]) // x' = first column of g
			}
			lin[i] += float64(b[i])
		}
		X := mlx.FromFloat32s(x, 1, in)
		gateUp := nn.ConcatLinear(nn.Dense(mlx.FromFloat32s(g, hid, in), nil), nn.Dense(mlx.FromFloat32s(u, hid, in), nil))
		y := nn.SwiGLU(X, gateUp, nn.Dense(mlx.FromFloat32s(dn, out, hid), nil))
		near(t, "SwiGLU", t.Float32s(y), want, 1e-5)
		col := make([]float32, hid)
		for j := range hid {
			col[j] = g[j*in]
		}
		near(t, "Linear", t.Float32s(nn.Dense(mlx.FromFloat32s(dn, out, hid), mlx.FromFloat32s(b)).Forward(mlx.FromFloat32s(col, 1, hid))), lin, 1e-5)
	})
}

// RoPE over the first Dims features leaves the rest untouched and is
// rotate-half within them.
func TestRoPEPartial(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const D, dims, L, offset = 8, 4, 3, 5
		const base = 1e4
		x := vals(L*D, 1)
		var want []float64
		for l := range L {
			p := float64(offset + l)
			row := x[l*D : (l+1)*D]
			out := make([]float64, D)
			for j := range dims / 2 {
				th := p * math.Pow(base, -2*float64(j)/dims)
				a, b := float64(row[j]), float64(row[j+dims/2])
				out[j] = a*math.Cos(th) - b*math.Sin(th)
				out[j+dims/2] = b*math.Cos(th) + a*math.Sin(th)
			}
			for j := dims; j < D; j++ {
				out[j] = float64(row[j])
			}
			want = append(want, out...)
		}
		r := nn.RoPE{Dims: dims, Base: base}
		near(t, "RoPE", t.Float32s(r.Apply(mlx.FromFloat32s(x, 1, 1, L, D), offset)), want, 1e-4)
	})
}

func TestHeadsRoundTrip(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := mlx.FromFloat32s(vals(2*3*8, 1), 2, 3, 8)
		s := nn.SplitHeads(x, 4, 2)
		t.Shape(s, 2, 4, 3, 2)
		if d := t.Float32s(mlx.Max(mlx.Abs(mlx.Subtract(nn.MergeHeads(s), x)), false))[0]; d != 0 {
			t.Fatalf("MergeHeads(SplitHeads(x)) differs by %g", d)
		}
	})
}

// CachedAttention equals attention over the concatenated history with a
// causal mask, with grouped-query heads.
func TestCachedAttention(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const hq, hkv, d = 4, 2, 4
		c := cache.NewKV()
		qa := mlx.FromFloat32s(vals(hq*3*d, 1), 1, hq, 3, d)
		ka := mlx.FromFloat32s(vals(hkv*3*d, 2), 1, hkv, 3, d)
		va := mlx.FromFloat32s(vals(hkv*3*d, 3), 1, hkv, 3, d)
		first := nn.CachedAttention(qa, ka, va, c, 0.5, nil)
		qb := mlx.FromFloat32s(vals(hq*2*d, 4), 1, hq, 2, d)
		kb := mlx.FromFloat32s(vals(hkv*2*d, 5), 1, hkv, 2, d)
		vb := mlx.FromFloat32s(vals(hkv*2*d, 6), 1, hkv, 2, d)
		second := nn.CachedAttention(qb, kb, vb, c, 0.5, nil)

		q := mlx.Concatenate(2, qa, qb)
		k := mlx.Concatenate(2, ka, kb)
		v := mlx.Concatenate(2, va, vb)
		// Reference: explicit softmax over repeated KV heads with a causal mask.
		kr := mlx.Reshape(mlx.BroadcastTo(mlx.ExpandDims(k, 2), 1, hkv, hq/hkv, 5, d), 1, hq, 5, d)
		vr := mlx.Reshape(mlx.BroadcastTo(mlx.ExpandDims(v, 2), 1, hkv, hq/hkv, 5, d), 1, hq, 5, d)
		s := mlx.MultiplyScalar(mlx.Matmul(q, mlx.SwapAxes(kr, -1, -2)), 0.5)
		s = mlx.Where(mlx.Tri(5, 5, 0, mlx.Bool), s, mlx.Scalar(math.Inf(-1), mlx.Float32))
		want := mlx.Matmul(mlx.Softmax(s, true, -1), vr)
		got := mlx.Concatenate(2, first, second)
		if d := t.Float32s(mlx.Max(mlx.Abs(mlx.Subtract(got, want)), false))[0]; d > 1e-5 {
			t.Fatalf("cached attention differs from the reference by %g", d)
		}
	})
}

// CausalMask(L, offset) keeps slot s for row i iff s <= offset+i, and
// CachedAttention given it returns what it returns making its own causal
// mask, to the bit (grouped-query heads, a block written after a history).
func TestCausalMask(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := nn.CausalMask(2, 1)
		t.Shape(m, 2, 3)
		if got, want := t.Int32s(mlx.AsType(m, mlx.Int32)), []int32{1, 1, 0, 1, 1, 1}; !slices.Equal(got, want) {
			t.Fatalf("CausalMask(2, 1) = %v, want %v", got, want)
		}

		const hq, hkv, d = 4, 2, 4
		own, shared := cache.NewKV(), cache.NewKV()
		in := func(h, L int, seed float64) *mlx.Array { return mlx.FromFloat32s(vals(h*L*d, seed), 1, h, L, d) }
		for _, c := range []*cache.KV{own, shared} {
			nn.CachedAttention(in(hq, 3, 1), in(hkv, 3, 2), in(hkv, 3, 3), c, 0.5, nil)
		}
		q, k, v := in(hq, 2, 4), in(hkv, 2, 5), in(hkv, 2, 6)
		want := nn.CachedAttention(q, k, v, own, 0.5, nil)
		got := nn.CachedAttention(q, k, v, shared, 0.5, nn.CausalMask(2, 3))
		t.SameBits("attention with the shared mask", t.Float32s(got), t.Float32s(want))

		defer func() {
			if recover() == nil {
				t.Fatalf("a mask for another offset was taken")
			}
		}()
		nn.CachedAttention(q, k, v, cache.NewKV(), 0.5, nn.CausalMask(2, 3))
	})
}

func TestWindowMask(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		// Keys at slots 4, 5, 2, 3 (a wrapped ring), queries at 5 and 6,
		// window 3: query 5 sees 3, 4, 5; query 6 sees 4, 5 (6 is not among
		// the keys).
		m := nn.WindowMask([]int{4, 5, 2, 3}, 5, 2, 3, true)
		got := fmt.Sprint(t.Int32s(mlx.AsType(m, mlx.Int32)))
		if got != "[1 1 0 1 1 1 0 0]" {
			t.Fatalf("causal window mask %s", got)
		}
		m = nn.WindowMask([]int{4, 5, 6, 7}, 5, 1, 3, false)
		if got := fmt.Sprint(t.Int32s(mlx.AsType(m, mlx.Int32))); got != "[1 1 1 1]" {
			t.Fatalf("non-causal window mask %s (the cache bounds only the past)", got)
		}
	})
}
