package qwen35moe

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// hostMoE is the sparse block computed on the host in float64 from the
// same weights, straight from spec/qwen35.md section 9: softmax over all
// experts, the k most probable, their probabilities renormalised (or not),
// each expert's SwiGLU, plus the shared expert times σ(its gate).
type hostMoE struct {
	H, E, k, ie, is int
	norm            bool
	router          []float32 // [E, H]
	sharedGate      []float32 // [1, H]
	sg, su, sd      []float32 // [Is, H], [Is, H], [H, Is]
	gateUp, down    []float32 // [E, 2·Ie, H], [E, H, Ie]
}

// matvec returns w·x for w [rows, len(x)] stored at w[off:].
func matvec(w []float32, off, rows int, x []float64) []float64 {
	out := make([]float64, rows)
	for r := range rows {
		for c, xc := range x {
			out[r] += float64(w[off+r*len(x)+c]) * xc
		}
	}
	return out
}

func silu(v float64) float64    { return v / (1 + math.Exp(-v)) }
func sigmoid(v float64) float64 { return 1 / (1 + math.Exp(-v)) }

// forward returns the block's output for one row x and the smallest gap,
// in router logits, between a chosen and an unchosen expert.
func (h *hostMoE) forward(x []float64) (y []float64, margin float64) {
	logits := matvec(h.router, 0, h.E, x)
	order := make([]int, h.E)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if logits[a] > logits[b] {
			return -1
		}
		return 1
	})
	margin = math.Inf(1)
	if h.k < h.E {
		margin = logits[order[h.k-1]] - logits[order[h.k]]
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(l)
	}
	var chosen float64
	for _, e := range order[:h.k] {
		chosen += math.Exp(logits[e]) / z
	}
	y = make([]float64, h.H)
	for _, e := range order[:h.k] {
		w := math.Exp(logits[e]) / z
		if h.norm {
			w /= chosen
		}
		gu := matvec(h.gateUp, e*2*h.ie*h.H, 2*h.ie, x)
		act := make([]float64, h.ie)
		for i := range act {
			act[i] = silu(gu[i]) * gu[h.ie+i]
		}
		for i, v := range matvec(h.down, e*h.H*h.ie, h.H, act) {
			y[i] += w * v
		}
	}
	g, u := matvec(h.sg, 0, h.is, x), matvec(h.su, 0, h.is, x)
	act := make([]float64, h.is)
	for i := range act {
		act[i] = silu(g[i]) * u[i]
	}
	gate := sigmoid(matvec(h.sharedGate, 0, 1, x)[0])
	for i, v := range matvec(h.sd, 0, h.H, act) {
		y[i] += gate * v
	}
	return y, margin
}

// randomBlock builds a sparse block of random dense weights and its host
// twin. The router's scale spreads the logits so the expert choices are
// well separated (the test checks the margin it got).
func randomBlock(t *mlxtest.T, seed uint64, H, E, k, ie, is int, norm bool) (*sparseMoE, *hostMoE) {
	n := uint64(0)
	draw := func(std float64, shape ...int) (*mlx.Array, []float32) {
		n++
		a := mlx.RandomNormal(mlx.RandomKey(seed<<16+n), mlx.Float32, 0, float32(std), shape...)
		t.Eval(a)
		return a, t.Float32s(a)
	}
	s := 1 / math.Sqrt(float64(H))
	router, hr := draw(3*s, E, H)
	sgate, hsg := draw(s, 1, H)
	sg, hsgp := draw(s, is, H)
	su, hsu := draw(s, is, H)
	sd, hsd := draw(1/math.Sqrt(float64(is)), H, is)
	gateUp, hgu := draw(s, E, 2*ie, H)
	down, hd := draw(1/math.Sqrt(float64(ie)), E, H, ie)
	cfg := &Config{Config: &qwen35.Config{HiddenSize: H}, NumExperts: E, TopK: k, ExpertSize: ie, SharedSize: is, NormTopK: norm}
	m := &sparseMoE{
		cfg:        cfg,
		in:         nn.ConcatLinear(nn.Dense(router, nil), nn.Dense(sgate, nil), nn.Dense(sg, nil), nn.Dense(su, nil)),
		sharedDown: nn.Dense(sd, nil),
		gateUp:     nn.Dense(gateUp, nil),
		down:       nn.Dense(down, nil),
	}
	return m, &hostMoE{H: H, E: E, k: k, ie: ie, is: is, norm: norm, router: hr, sharedGate: hsg, sg: hsgp, su: hsu, sd: hsd, gateUp: hgu, down: hd}
}

// The block equals the host computation for one row (a decode step), a few
// rows (unsorted: fewer than sortThreshold row–expert pairs) and many rows
// (sorted by expert), with and without renormalised weights; and a forward
// of L rows equals L single-row forwards, row for row.
func TestSparseBlockMatchesHostReference(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const H, E, k, ie, is = 32, 8, 3, 16, 24
		for _, norm := range []bool{true, false} {
			m, host := randomBlock(t, 7, H, E, k, ie, is, norm)
			for _, L := range []int{1, 5, 40} {
				name := fmt.Sprintf("norm_topk_prob %v, %d rows (%d pairs, sorted %v)", norm, L, L*k, L*k >= sortThreshold)
				x := mlx.RandomNormal(mlx.RandomKey(uint64(100+L)), mlx.Float32, 0, 1, 1, L, H)
				t.Eval(x)
				xs := t.Float32s(x)
				got := m.Forward(x)
				t.Shape(got, 1, L, H)
				gv := t.Float32s(got)
				var worst, scale float64
				margin := math.Inf(1)
				for r := range L {
					row := make([]float64, H)
					for i := range row {
						row[i] = float64(xs[r*H+i])
					}
					want, mg := host.forward(row)
					margin = min(margin, mg)
					for i, w := range want {
						worst = max(worst, math.Abs(float64(gv[r*H+i])-w))
						scale = max(scale, math.Abs(w))
					}
				}
				if margin < 1e-3 {
					t.Fatalf("%s: the test's random router has a choice margin of %g; pick another seed", name, margin)
				}
				if worst > 1e-5*max(scale, 1) {
					t.Errorf("%s: max abs error %.3g (outputs up to %.3g) against the host computation", name, worst, scale)
				} else {
					t.Logf("%s: max abs error %.3g, outputs up to %.3g, routing margin %.3g", name, worst, scale, margin)
				}

				// Row r of the L-row forward equals the forward of row r alone.
				for r := range L {
					one := m.Forward(mlx.SliceAxis(x, 1, r, r+1))
					if d := maxAbs(t, one, mlx.SliceAxis(got, 1, r, r+1)); d > 1e-5 {
						t.Fatalf("%s: row %d differs from its single-row forward by %.3g", name, r, d)
					}
				}
			}
		}
	})
}

func maxAbs(t *mlxtest.T, a, b *mlx.Array) float64 {
	t.Helper()
	v, err := mlx.Max(mlx.Abs(mlx.Subtract(a, b)), false).Item()
	t.NoErr(err)
	return float64(v)
}
