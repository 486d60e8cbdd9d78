package dflash2

import (
	"github.com/specula-dev/specula/arch/nn"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The worked example of spec/dflash2.md 2.3 (ollama PR #17865's unit test):
// H 2, one group of 2 channels, Kc 2, a zero dynamic kernel, base taps 1
// (current row) and 10 (previous row).
func TestConvWorkedExample(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := mlx.FromFloat32s([]float32{1, 2, 3, 4, 5, 6}, 1, 3, 2)
		w := mlx.Zeros(mlx.Float32, 1, 3, 2, 1)
		b := mlx.FromFloat32s([]float32{1, 1, 10, 10}, 2, 2)
		want := []float32{1, 2, 13, 24, 35, 46}
		if got := t.Float32s(dynamicConv(x, w, b, 2)); !equal(got, want) {
			t.Errorf("dynamicConv = %v, want %v", got, want)
		}
		// The same through prepare: a zero kernel projection and the
		// example's base as the prepare kernel.
		c := conv{
			base:  mlx.FromFloat32s([]float32{1, 1, 10, 10, 0, 0, 0, 0}, 2, 2, 2),
			proj:  nn.Dense(mlx.Zeros(mlx.Float32, 2*2*1, 2), nil),
			group: 2,
		}
		got, w2 := c.prepare(x)
		if v := t.Float32s(got); !equal(v, want) {
			t.Errorf("prepare = %v, want %v", v, want)
		}
		t.Shape(w2, 1, 3, 2, 1)
	})
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// prepare and finish on random weights against a float64 reference of the
// formula of spec/dflash2.md 2.2, with the projection's output feature
// (s·Kc + j)·G + g read as half s, tap j, group g (the [L, 2, Kc, G] order).
// Sizes: H 12 in G 3 groups of S 4, Kc 3, L 5 (so tap 2 reaches before row 0
// for the first two rows); a one-row block too.
func TestConvMatchesFormula(t *testing.T) {
	const H, S, Kc = 12, 4, 3
	const G = H / S
	rng := rand.New(rand.NewPCG(3, 4))
	normal := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() * scale
		}
		return v
	}
	base := normal(2*Kc*H, 1)
	proj := normal(2*Kc*G*H, 0.5)
	for _, L := range []int{5, 1} {
		x, y := normal(L*H, 1), normal(L*H, 1)
		// dyn[t][s][j][g] = Σ_h x[t, h] · proj[(s·Kc + j)·G + g, h]
		dyn := func(t, s, j, g int) float64 {
			sum := 0.0
			for h := range H {
				sum += x[t*H+h] * proj[((s*Kc+j)*G+g)*H+h]
			}
			return sum
		}
		ref := func(in []float64, s int) []float64 {
			out := make([]float64, L*H)
			for t := range L {
				for c := range H {
					for j := range Kc {
						if t-j < 0 {
							continue
						}
						out[t*H+c] += (base[(s*Kc+j)*H+c] + dyn(t, s, j, c/S)) * in[(t-j)*H+c]
					}
				}
			}
			return out
		}
		mlxtest.Run(t, func(t *mlxtest.T) {
			c := conv{base: arr(base, 2, Kc, H), proj: nn.Dense(arr(proj, 2*Kc*G, H), nil), group: S}
			prepared, w2 := c.prepare(arr(x, 1, L, H))
			near(t, "prepare", t.Float32s(prepared), ref(x, 0))
			near(t, "finish", t.Float32s(c.finish(arr(y, 1, L, H), w2)), ref(y, 1))
		})
	}
}

func arr(v []float64, shape ...int) *mlx.Array {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return mlx.FromFloat32s(f, shape...)
}

func near(t *mlxtest.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		worst = max(worst, math.Abs(float64(got[i])-want[i])/(1+math.Abs(want[i])))
	}
	if worst > 1e-5 {
		t.Errorf("%s: relative error %.3g", what, worst)
	}
}
