package mlx_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// gdnRef is the gated delta rule of spec/qwen35.md section 7 in float64,
// written from the spec: for each value head h (key head h / (Hv/Hk)) and
// token t, S ← α·S; kv ← S·k; δ ← β·(v − kv); S ← S + δ ⊗ k; o ← S·q, with
// S [Dv, Dk]. It returns the outputs [1, L, Hv, Dv] and the states
// [1, Hv, Dv, Dk] after each bound.
func gdnRef(q, k, v, alpha, beta, state *tensor, bounds []int) (*tensor, []*tensor) {
	L, hk, dk := q.shape[1], q.shape[2], q.shape[3]
	hv, dv := v.shape[2], v.shape[3]
	s := newTensor(1, hv, dv, dk)
	copy(s.data, state.data)
	out := newTensor(1, L, hv, dv)
	var states []*tensor
	next := 0
	for t := range L {
		for h := range hv {
			g := h / (hv / hk)
			a, b := alpha.at(0, t, h), beta.at(0, t, h)
			for i := range dv {
				kv := 0.0
				for j := range dk {
					s.data[s.index([]int{0, h, i, j})] *= a
					kv += s.at(0, h, i, j) * k.at(0, t, g, j)
				}
				d := b * (v.at(0, t, h, i) - kv)
				o := 0.0
				for j := range dk {
					s.data[s.index([]int{0, h, i, j})] += d * k.at(0, t, g, j)
					o += s.at(0, h, i, j) * q.at(0, t, g, j)
				}
				out.data[out.index([]int{0, t, h, i})] = o
			}
		}
		if next < len(bounds) && bounds[next] == t+1 {
			snap := newTensor(1, hv, dv, dk)
			copy(snap.data, s.data)
			states = append(states, snap)
			next++
		}
	}
	return out, states
}

// gdnInputs are random scan inputs as the delta-net makes them: q and k of
// unit norm per head, α and β in (0, 1), a small state; rounded to float32.
func gdnInputs(r *rand.Rand, L, hk, hv, dk, dv int) (q, k, v, alpha, beta, state *tensor) {
	unit := func(x *tensor) *tensor {
		d := x.shape[3]
		for i := 0; i < len(x.data); i += d {
			n := 0.0
			for _, e := range x.data[i : i+d] {
				n += e * e
			}
			for j := range d {
				x.data[i+j] /= math.Sqrt(n)
			}
		}
		return x.roundF32()
	}
	q = unit(randTensor(r, 1, L, hk, dk))
	k = unit(randTensor(r, 1, L, hk, dk))
	v = randTensor(r, 1, L, hv, dv).roundF32()
	alpha = mapT(randTensor(r, 1, L, hv), func(x float64) float64 { return 0.5 + 0.5*sigmoid(x) }).roundF32()
	beta = mapT(randTensor(r, 1, L, hv), sigmoid).roundF32()
	state = mapT(randTensor(r, 1, hv, dv, dk), func(x float64) float64 { return 0.1 * x }).roundF32()
	return
}

// The one-node CPU scan computes the rule as written in the spec, for the
// outputs and for the state at every bound a speculative round snapshots;
// shapes include shared key heads and a Dv that is not a multiple of any
// vector width. Tolerance: float32 against a float64 reference, 1e-5
// relative + 2e-6 absolute (the sums run in another order).
func TestGatedDeltaScanMatchesSpec(t *testing.T) {
	for _, sh := range []struct {
		name              string
		L, hk, hv, dk, dv int
	}{
		{"go-tiny heads", 9, 3, 6, 64, 64},
		{"odd sizes", 5, 2, 4, 12, 7},
		{"one token", 1, 1, 2, 16, 16},
	} {
		t.Run(sh.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				q, k, v, alpha, beta, state := gdnInputs(newRand(t), sh.L, sh.hk, sh.hv, sh.dk, sh.dv)
				every := make([]int, sh.L)
				for i := range every {
					every[i] = i + 1
				}
				cases := [][]int{{sh.L}, every}
				if mid := (sh.L + 1) / 2; mid < sh.L {
					cases = append(cases, []int{mid, sh.L})
				}
				for _, bounds := range cases {
					wantOut, wantStates := gdnRef(q, k, v, alpha, beta, state, bounds)
					out, states := mlx.GatedDeltaScan(q.mlx(), k.mlx(), v.mlx(), alpha.mlx(), beta.mlx(), state.mlx(), bounds)
					check(t, "outputs", out, wantOut, 1e-5, 2e-6)
					for i := range bounds {
						check(t, "state", states[i], wantStates[i], 1e-5, 2e-6)
					}
				}
			})
		})
	}
}

// A speculative round scans its tokens from the state the previous scan
// left: the states the primitive returns (held in the scan's own layout,
// shaped by their strides) must serve as the next scan's initial state. Two
// chained scans — the first's state at its split, then the rest — equal,
// bit for bit, one scan with a bound at the split, for every split; the
// states also read back as the float64 reference's through MLX ops.
func TestGatedDeltaScanChainsItsStates(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const L, hk, hv, dk, dv = 7, 3, 6, 64, 64
		q, k, v, alpha, beta, state := gdnInputs(newRand(t), L, hk, hv, dk, dv)
		in := []*mlx.Array{q.mlx(), k.mlx(), v.mlx(), alpha.mlx(), beta.mlx(), state.mlx()}
		tokens := func(a *mlx.Array, from, to int) *mlx.Array { return mlx.SliceAxis(a, 1, from, to) }
		for split := 1; split < L; split++ {
			whole, wholeStates := mlx.GatedDeltaScan(in[0], in[1], in[2], in[3], in[4], in[5], []int{split, L})
			first, firstStates := mlx.GatedDeltaScan(tokens(in[0], 0, split), tokens(in[1], 0, split), tokens(in[2], 0, split),
				tokens(in[3], 0, split), tokens(in[4], 0, split), in[5], []int{split})
			rest, restStates := mlx.GatedDeltaScan(tokens(in[0], split, L), tokens(in[1], split, L), tokens(in[2], split, L),
				tokens(in[3], split, L), tokens(in[4], split, L), firstStates[0], []int{L - split})
			pairs := [][2]*mlx.Array{
				{mlx.Concatenate(1, first, rest), whole}, {firstStates[0], wholeStates[0]}, {restStates[0], wholeStates[1]},
			}
			for i, p := range pairs {
				a, b := t.Float32s(p[0]), t.Float32s(p[1])
				for j := range a {
					if a[j] != b[j] {
						t.Fatalf("split %d, pair %d (outputs, state at the split, final state), element %d: chained %v, one scan %v", split, i, j, a[j], b[j])
					}
				}
			}
			_, wantStates := gdnRef(q, k, v, alpha, beta, state, []int{split, L})
			check(t, "state through an MLX op", mlx.Multiply(restStates[0], mlx.Scalar(1, mlx.Float32)), wantStates[1], 1e-5, 2e-6)
		}
	})
}

// Inputs that are views — a slice of wider rows (as v is of the convolution
// output), a transposed array, a broadcast — are read through their strides.
func TestGatedDeltaScanReadsViews(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const L, hk, hv, dk, dv = 4, 2, 4, 16, 8
		q, k, v, alpha, beta, state := gdnInputs(newRand(t), L, hk, hv, dk, dv)
		alpha1 := newTensor(1, 1, hv) // one decay per head for every token, as a broadcast gives
		for h := range hv {
			alpha1.data[h] = 0.75 + 0.0625*float64(h)
		}
		for i := range L {
			copy(alpha.data[i*hv:(i+1)*hv], alpha1.data)
		}
		wantOut, wantStates := gdnRef(q, k, v, alpha, beta, state, []int{2, L})

		wide := mlx.Concatenate(3, v.mlx(), mlx.Zeros(mlx.Float32, 1, L, hv, 3))
		vView := mlx.SliceAxis(wide, 3, 0, dv)
		qT := mlx.Contiguous(mlx.Transpose(q.mlx(), 0, 2, 1, 3)) // [1, Hk, L, Dk] in memory
		qView := mlx.Transpose(qT, 0, 2, 1, 3)
		aView := mlx.BroadcastTo(alpha1.mlx(), 1, L, hv)
		out, states := mlx.GatedDeltaScan(qView, k.mlx(), vView, aView, beta.mlx(), state.mlx(), []int{2, L})
		check(t, "outputs", out, wantOut, 1e-5, 2e-6)
		check(t, "state at 2", states[0], wantStates[0], 1e-5, 2e-6)
		check(t, "state at L", states[1], wantStates[1], 1e-5, 2e-6)
	})
}

// The scan is one graph node whatever the number of tokens.
func TestGatedDeltaScanIsOneNode(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		q, k, v, alpha, beta, state := gdnInputs(newRand(t), 16, 1, 2, 8, 8)
		in := []*mlx.Array{q.mlx(), k.mlx(), v.mlx(), alpha.mlx(), beta.mlx(), state.mlx()}
		t.Eval(in...)
		out, states := mlx.GatedDeltaScan(in[0], in[1], in[2], in[3], in[4], in[5], []int{8, 16})
		wantOneNode(t, "a 16-token scan", "GatedDeltaScan", true, append([]*mlx.Array{out}, states...)...)
	})
}

// Bad shapes, dtypes and bounds are errors naming the problem, not crashes.
func TestGatedDeltaScanRejects(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const L, hk, hv, dk, dv = 3, 1, 2, 4, 4
		q, k, v, alpha, beta, state := gdnInputs(newRand(t), L, hk, hv, dk, dv)
		for _, tc := range []struct {
			name   string
			in     func() []*mlx.Array
			bounds []int
			want   string
		}{
			{"bound past L", nil, []int{L + 1}, "bounds must ascend"},
			{"bounds not ascending", nil, []int{2, 2}, "bounds must ascend"},
			{"no bounds", nil, nil, "at least one bound"},
			{"bfloat16 v", func() []*mlx.Array {
				return []*mlx.Array{q.mlx(), k.mlx(), mlx.AsType(v.mlx(), mlx.BFloat16), alpha.mlx(), beta.mlx(), state.mlx()}
			}, []int{L}, "v must be float32"},
			{"state of other heads", func() []*mlx.Array {
				return []*mlx.Array{q.mlx(), k.mlx(), v.mlx(), alpha.mlx(), beta.mlx(), mlx.Zeros(mlx.Float32, 1, hv+1, dv, dk)}
			}, []int{L}, "state has shape [1, 3, 4, 4], want [1, 2, 4, 4]"},
		} {
			in := []*mlx.Array{q.mlx(), k.mlx(), v.mlx(), alpha.mlx(), beta.mlx(), state.mlx()}
			if tc.in != nil {
				in = tc.in()
			}
			out, _ := mlx.GatedDeltaScan(in[0], in[1], in[2], in[3], in[4], in[5], tc.bounds)
			err := mlx.Eval(out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: error %v, want one containing %q", tc.name, err, tc.want)
			}
		}
	})
}
