package sample_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

func TestProb(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		tokens := mlx.FromInt32s([]int32{2, 0, 4})
		cases := []struct {
			name string
			d    sample.Distribution
			want []float32
		}{
			{
				name: "dense",
				d: dense([][]float32{
					{0.1, 0.2, 0.3, 0.4, 0},
					{0.5, 0.5, 0, 0, 0},
					{0, 0, 0, 0.25, 0.75},
				}),
				want: []float32{0.3, 0.5, 0.75},
			},
			{
				name: "sparse, absent token has probability 0",
				d: sparse(
					[][]int32{{3, 2, 1}, {1, 4, 3}, {4, 0, 2}},
					[][]float32{{0.5, 0.3, 0.2}, {0.6, 0.3, 0.1}, {0.25, 0.7, 0.05}},
				),
				want: []float32{0.3, 0, 0.25},
			},
			{
				name: "greedy one-hot",
				d:    sparse([][]int32{{2}, {1}, {4}}, [][]float32{{1}, {1}, {1}}),
				want: []float32{1, 0, 1},
			},
		}
		for _, c := range cases {
			p := sample.Prob(c.d, tokens)
			t.Shape(p, 3)
			if got := t.Float32s(p); !slices.Equal(got, c.want) {
				t.Errorf("%s: Prob = %v, want %v", c.name, got, c.want)
			}
		}
	})
}

func TestResidualByHand(t *testing.T) {
	const vocab = 5
	cases := []struct {
		name string
		p, q func() sample.Distribution
		want [][]float64 // dense over vocab
	}{
		{
			name: "dense target, dense draft",
			p:    func() sample.Distribution { return dense([][]float32{{0.125, 0.375, 0.25, 0.25, 0}}) },
			q:    func() sample.Distribution { return dense([][]float32{{0.25, 0.125, 0.25, 0.125, 0.25}}) },
			// max(p−q, 0) = [0, 0.25, 0, 0.125, 0], mass 0.375.
			want: [][]float64{{0, 2.0 / 3, 0, 1.0 / 3, 0}},
		},
		{
			name: "dense target, sparse draft with mass outside the target's support",
			p:    func() sample.Distribution { return dense([][]float32{{0.125, 0.375, 0.25, 0.25, 0}}) },
			q:    func() sample.Distribution { return sparse([][]int32{{1, 4}}, [][]float32{{0.5, 0.5}}) },
			// p − q = [0.125, −0.125, 0.25, 0.25, −0.5] → mass 0.625.
			want: [][]float64{{0.2, 0, 0.4, 0.4, 0}},
		},
		{
			name: "sparse target, dense draft",
			p:    func() sample.Distribution { return sparse([][]int32{{3, 1}}, [][]float32{{0.75, 0.25}}) },
			q:    func() sample.Distribution { return dense([][]float32{{0.25, 0.5, 0, 0.25, 0}}) },
			// At ids [3, 1]: [0.75−0.25, 0.25−0.5] → [0.5, 0].
			want: [][]float64{{0, 0, 0, 1, 0}},
		},
		{
			name: "sparse target, sparse draft with mass outside the target's support",
			p:    func() sample.Distribution { return sparse([][]int32{{2, 0, 3}}, [][]float32{{0.5, 0.25, 0.25}}) },
			q:    func() sample.Distribution { return sparse([][]int32{{0, 4}}, [][]float32{{0.875, 0.125}}) },
			// At ids [2, 0, 3]: [0.5, 0, 0.25], mass 0.75.
			want: [][]float64{{0, 0, 2.0 / 3, 1.0 / 3, 0}},
		},
		{
			name: "zero mass falls back to the target, dense",
			p:    func() sample.Distribution { return dense([][]float32{{0.25, 0.75, 0, 0, 0}}) },
			q:    func() sample.Distribution { return dense([][]float32{{0.25, 0.75, 0, 0, 0}}) },
			want: [][]float64{{0.25, 0.75, 0, 0, 0}},
		},
		{
			name: "zero mass falls back to the target, greedy",
			p:    func() sample.Distribution { return sparse([][]int32{{1}}, [][]float32{{1}}) },
			q:    func() sample.Distribution { return sparse([][]int32{{1, 2}}, [][]float32{{1, 0}}) },
			want: [][]float64{{0, 1, 0, 0, 0}},
		},
		{
			name: "zero mass falls back to the target, dense target and sparse draft",
			p:    func() sample.Distribution { return dense([][]float32{{0, 0.5, 0, 0.5, 0}}) },
			q:    func() sample.Distribution { return sparse([][]int32{{3, 1}}, [][]float32{{0.5, 0.5}}) },
			want: [][]float64{{0, 0.5, 0, 0.5, 0}},
		},
		{
			name: "greedy target, draft on another token: residual is the target",
			p:    func() sample.Distribution { return sparse([][]int32{{2}, {4}}, [][]float32{{1}, {1}}) },
			q:    func() sample.Distribution { return sparse([][]int32{{2, 0}, {3, 0}}, [][]float32{{0, 1}, {0, 1}}) },
			want: [][]float64{{0, 0, 1, 0, 0}, {0, 0, 0, 0, 1}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				p := c.p()
				r := sample.Residual(p, c.q())
				if r.Dense() != p.Dense() {
					t.Fatalf("residual layout dense=%v, target dense=%v", r.Dense(), p.Dense())
				}
				closeRows(t, "residual", hostRows(t, r, vocab), c.want, 1e-6, 1e-6)
			})
		})
	}
}

// TestResidualMatchesReference covers every layout pair over random rows,
// mixed with rows of zero residual mass, against the float64 reference.
func TestResidualMatchesReference(t *testing.T) {
	const rows, vocab, k = 6, 16, 5
	rng := rand.New(rand.NewPCG(11, 11))

	// randSparse returns k unique ids per row and random normalised probs;
	// row 0 puts zero probability on one of its ids.
	randSparse := func() ([][]int32, [][]float32) {
		ids, probs := make([][]int32, rows), make([][]float32, rows)
		for r := range rows {
			perm := rng.Perm(vocab)[:k]
			ids[r] = make([]int32, k)
			probs[r] = make([]float32, k)
			sum := float32(0)
			for j := range k {
				ids[r][j] = int32(perm[j])
				probs[r][j] = float32(rng.Float64())
				sum += probs[r][j]
			}
			if r == 0 {
				sum -= probs[r][k-1]
				probs[r][k-1] = 0
			}
			for j := range probs[r] {
				probs[r][j] /= sum
			}
		}
		return ids, probs
	}
	randDense := func() [][]float32 {
		out := make([][]float32, rows)
		for r := range out {
			out[r] = make([]float32, vocab)
			sum := float32(0)
			for i := range out[r] {
				out[r][i] = float32(rng.ExpFloat64())
				sum += out[r][i]
			}
			for i := range out[r] {
				out[r][i] /= sum
			}
		}
		return out
	}

	type layout struct {
		ids   [][]int32 // nil: dense
		probs [][]float32
	}
	randLayout := func(sparseLayout bool) layout {
		if sparseLayout {
			ids, probs := randSparse()
			return layout{ids, probs}
		}
		return layout{probs: randDense()}
	}
	host := func(l layout) [][]float64 {
		if l.ids == nil {
			out := make([][]float64, rows)
			for r := range out {
				out[r] = f64s(l.probs[r])
			}
			return out
		}
		return toDense(l.ids, l.probs, vocab)
	}
	dist := func(l layout) sample.Distribution {
		if l.ids == nil {
			return dense(l.probs)
		}
		return sparse(l.ids, l.probs)
	}

	for _, pc := range []struct {
		name         string
		pSparse      bool
		qSparse      bool
		zeroMassRows []int // rows where q is made equal to p
	}{
		{"dense-dense", false, false, []int{2}},
		{"dense-sparse", false, true, nil},
		{"sparse-dense", true, false, []int{3}},
		{"sparse-sparse", true, true, []int{1, 4}},
	} {
		t.Run(pc.name, func(t *testing.T) {
			p, q := randLayout(pc.pSparse), randLayout(pc.qSparse)
			for _, r := range pc.zeroMassRows {
				// q agrees with p on p's support, bit for bit.
				if pc.qSparse {
					q.ids[r], q.probs[r] = slices.Clone(p.ids[r]), slices.Clone(p.probs[r])
				} else {
					q.probs[r] = make([]float32, vocab)
					if p.ids == nil {
						copy(q.probs[r], p.probs[r])
					} else {
						for j, id := range p.ids[r] {
							q.probs[r][id] = p.probs[r][j]
						}
					}
				}
			}
			hp, hq := host(p), host(q)
			want := make([][]float64, rows)
			for r := range want {
				want[r] = refResidual(hp[r], hq[r])
			}
			mlxtest.Run(t, func(t *mlxtest.T) {
				got := hostRows(t, sample.Residual(dist(p), dist(q)), vocab)
				closeRows(t, "residual", got, want, 2e-6, 2e-5)
				for r, row := range got {
					sum := 0.0
					for _, v := range row {
						sum += v
					}
					if math.Abs(sum-1) > 1e-5 {
						t.Fatalf("row %d sums to %v", r, sum)
					}
				}
			})
		})
	}
}

func TestDistributionRows(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		a := sparse([][]int32{{1, 2}, {3, 4}, {5, 6}}, [][]float32{{0.5, 0.5}, {0.25, 0.75}, {1, 0}})
		if a.Rows() != 3 || a.Dense() {
			t.Fatalf("Rows %d Dense %v, want 3 false", a.Rows(), a.Dense())
		}
		mid := a.Slice(1, 3)
		if got := t.Int32s(mid.IDs); !slices.Equal(got, []int32{3, 4, 5, 6}) {
			t.Fatalf("Slice ids %v", got)
		}
		if got := t.Float32s(mid.Probs); !slices.Equal(got, []float32{0.25, 0.75, 1, 0}) {
			t.Fatalf("Slice probs %v", got)
		}
		both := sample.ConcatRows(a.Slice(2, 3), a.Slice(0, 1))
		if got := t.Int32s(both.IDs); !slices.Equal(got, []int32{5, 6, 1, 2}) {
			t.Fatalf("ConcatRows ids %v", got)
		}
		if n := len(both.Arrays()); n != 2 {
			t.Fatalf("sparse Arrays has %d arrays, want 2", n)
		}

		d := dense([][]float32{{0.5, 0.5, 0}, {0, 0, 1}})
		joined := sample.ConcatRows(d, d.Slice(1, 2))
		t.Shape(joined.Probs, 3, 3)
		if !joined.Dense() || len(joined.Arrays()) != 1 {
			t.Fatalf("dense ConcatRows lost its layout")
		}
	})
}

func TestConcatRowsOfMixedLayoutsPanics(t *testing.T) {
	t.Run("dense and sparse", func(t *testing.T) {
		mustPanic(t, func(t *mlxtest.T) {
			sample.ConcatRows(dense([][]float32{{0.5, 0.5}}), sparse([][]int32{{0, 1}}, [][]float32{{0.5, 0.5}}))
		})
	})
	t.Run("different K", func(t *testing.T) {
		mustPanic(t, func(t *mlxtest.T) {
			sample.ConcatRows(sparse([][]int32{{0}}, [][]float32{{1}}), sparse([][]int32{{0, 1}}, [][]float32{{0.5, 0.5}}))
		})
	})
	t.Run("nothing", func(t *testing.T) {
		mustPanic(t, func(t *mlxtest.T) { sample.ConcatRows() })
	})
}
