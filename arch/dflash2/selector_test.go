package dflash2

import (
	"github.com/specula-dev/specula/arch/nn"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// A tiny selector worked out on the host: V 6, H 2, R 2, K 3, n 2.
var tiny = struct {
	hidden [2][2]float64
	logits [2][6]float64
	proj   [2][2]float64 // [R, H]
	pred   [6][2]float64 // [V, R]
	succ   [6][2]float64
	anchor int32
}{
	hidden: [2][2]float64{{0.5, -1}, {1, 0.3}},
	logits: [2][6]float64{{1.0, 0.2, 0.8, -1, 0.5, 0.1}, {0.1, 0.9, -0.5, 0.7, 0.3, 0.6}},
	proj:   [2][2]float64{{1, 0.5}, {-0.5, 1}},
	pred:   [6][2]float64{{0.9, -0.4}, {0.2, 0.7}, {-0.8, 0.5}, {0.6, 0.6}, {-0.3, -0.9}, {1.1, 0.1}},
	succ:   [6][2]float64{{0.5, 1.0}, {-1.2, 0.4}, {0.3, -0.7}, {0.8, 0.2}, {-0.6, 0.9}, {1.0, -1.0}},
	anchor: 3,
}

func (s *selector) tinyInputs() (hidden, logits, anchor *mlx.Array) {
	h := append(tiny.hidden[0][:], tiny.hidden[1][:]...)
	l := append(tiny.logits[0][:], tiny.logits[1][:]...)
	return arr(h, 1, 2, 2), arr(l, 1, 2, 6), mlx.FromInt32s([]int32{tiny.anchor}, 1)
}

func tinySelector() *selector {
	var p, q, r []float64
	for _, row := range tiny.pred {
		p = append(p, row[:]...)
	}
	for _, row := range tiny.succ {
		q = append(q, row[:]...)
	}
	for _, row := range tiny.proj {
		r = append(r, row[:]...)
	}
	return &selector{pred: &nn.Embedding{Table: nn.Dense(arr(p, 6, 2), nil), DType: mlx.Float32}, succ: &nn.Embedding{Table: nn.Dense(arr(q, 6, 2), nil), DType: mlx.Float32}, proj: nn.Dense(arr(r, 2, 2), nil), topK: 3}
}

// hostTopK returns the K ids of row by descending value, ties to the lower id.
func hostTopK(row []float64, k int) []int32 {
	ids := make([]int32, len(row))
	for i := range ids {
		ids[i] = int32(i)
	}
	sort.SliceStable(ids, func(a, b int) bool { return row[ids[a]] > row[ids[b]] })
	return ids[:k]
}

// hostScores returns position p's candidates and their scores given the
// predecessor token prev, from the definitions of spec/dflash2.md 3.2.
func hostScores(p int, prev int32) (ids []int32, scores []float64) {
	ids = hostTopK(tiny.logits[p][:], 3)
	var u [2]float64
	for r := range 2 {
		u[r] = tiny.proj[r][0]*tiny.hidden[p][0] + tiny.proj[r][1]*tiny.hidden[p][1]
	}
	scores = make([]float64, 3)
	for j, id := range ids {
		scores[j] = tiny.logits[p][id]
		for r := range 2 {
			scores[j] += tiny.pred[prev][r] * u[r] * tiny.succ[id][r]
		}
	}
	return ids, scores
}

// hostRow returns position p's candidates and softmax(scores / T) given
// the predecessor token prev.
func hostRow(p int, prev int32, temp float64) (ids []int32, probs []float64) {
	ids, scores := hostScores(p, prev)
	z, m := 0.0, slices.Max(scores)
	probs = make([]float64, len(scores))
	for j, s := range scores {
		probs[j] = math.Exp((s - m) / temp)
		z += probs[j]
	}
	for j := range probs {
		probs[j] /= z
	}
	return ids, probs
}

// Candidates are the top K by descending logit, ties to the lower id.
func TestCandidatesOrder(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		s := &selector{topK: 4}
		logits := mlx.FromFloat32s([]float32{
			0.5, 2, 0.5, 2, 0.5, -1, 3, 0.5, // ties inside the top 4 and at its boundary
			1, 1, 1, 1, 1, 1, 1, 1, // all tied
		}, 2, 8)
		ids, unary := s.candidates(logits)
		if got, want := t.Int32s(ids), []int32{6, 1, 3, 0, 0, 1, 2, 3}; !slices.Equal(got, want) {
			t.Errorf("ids %v, want %v", got, want)
		}
		if got, want := t.Float32s(unary), []float32{3, 2, 2, 0.5, 1, 1, 1, 1}; !slices.Equal(got, want) {
			t.Errorf("unary %v, want %v", got, want)
		}
	})
}

// The walk at temperature 1 samples each path of the tiny lattice with the
// probability the product of its returned probs rows gives, and those rows
// are the host's softmax of the scores given the chosen predecessor
// (spec/dflash2.md 7.4). Seeds 1 … 3000 give a fixed outcome; the chi-square
// bound is the 0.1 % tail of 8 degrees of freedom.
func TestSampledWalkDistribution(t *testing.T) {
	const draws = 3000
	const chiSquare8At001 = 26.12
	mlxtest.Run(t, func(t *mlxtest.T) {
		sel := tinySelector()
		hidden, logits, anchor := sel.tinyInputs()
		ids0, _ := hostRow(0, tiny.anchor, 1)
		counts := map[[2]int32]int{}
		for seed := 1; seed <= draws; seed++ {
			err := mlx.Scope(func() error {
				choose := sample.New(sample.Options{Temperature: 1, UseSeed: true, Seed: uint64(seed)}, nil).Choose
				tokens, ids, probs := sel.walk(hidden, logits, anchor, choose)
				if err := mlx.Eval(tokens, ids, probs); err != nil {
					return err
				}
				tok, pr := t.Int32s(tokens), t.Float32s(probs)
				counts[[2]int32{tok[0], tok[1]}]++
				// Each returned row is the conditional given the drawn prefix.
				for p, prev := range []int32{tiny.anchor, tok[0]} {
					wantIDs, want := hostRow(p, prev, 1)
					if seed == 1 && !slices.Equal(t.Int32s(ids)[p*3:p*3+3], wantIDs) {
						t.Fatalf("position %d: candidates %v, want %v", p, t.Int32s(ids)[p*3:p*3+3], wantIDs)
					}
					for j := range 3 {
						if math.Abs(float64(pr[p*3+j])-want[j]) > 1e-5 {
							t.Fatalf("seed %d position %d: probs %v, want %v", seed, p, pr[p*3:p*3+3], want)
						}
					}
					if !slices.Contains(wantIDs, tok[p]) {
						t.Fatalf("seed %d: token %d is not a candidate of position %d", seed, tok[p], p)
					}
				}
				return nil
			})
			t.NoErr(err)
		}
		chi := 0.0
		for j0, t0 := range ids0 {
			_, p0 := hostRow(0, tiny.anchor, 1)
			ids1, p1 := hostRow(1, t0, 1)
			for j1, t1 := range ids1 {
				expected := draws * p0[j0] * p1[j1]
				got := float64(counts[[2]int32{t0, t1}])
				chi += (got - expected) * (got - expected) / expected
				t.Logf("path %d→%d: %4.0f draws, expected %6.1f", t0, t1, got, expected)
			}
		}
		if chi > chiSquare8At001 {
			t.Errorf("chi-square %.2f over 9 paths exceeds %.2f", chi, chiSquare8At001)
		} else {
			t.Logf("chi-square %.2f (8 degrees of freedom)", chi)
		}
	})
}

// The greedy walk takes the argmax given the chosen predecessor, which can
// differ from the path of per-position argmaxes; its probs are one-hot.
func TestGreedyWalk(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		sel := tinySelector()
		hidden, logits, anchor := sel.tinyInputs()
		tokens, _, probs := sel.walk(hidden, logits, anchor, sample.New(sample.Options{}, nil).Choose)
		g := hostGreedyPath()
		ids0, ids1, j0, j1 := g.ids[0], g.ids[1], g.pick[0], g.pick[1]
		if got, want := t.Int32s(tokens), []int32{ids0[j0], ids1[j1]}; !slices.Equal(got, want) {
			t.Errorf("greedy path %v, want %v", got, want)
		}
		want := make([]float32, 6)
		want[j0], want[3+j1] = 1, 1
		if got := t.Float32s(probs); !slices.Equal(got, want) {
			t.Errorf("probs %v, want %v", got, want)
		}
		// The whole lattice: row i of position p is the scores given
		// predecessor i (the anchor at p = 0, candidate i of p − 1 after).
		lat := sel.lattice(hidden, logits, anchor)
		sc := t.Float32s(lat.Scores) // [2, 3, 3]
		for p := range 2 {
			for i := range 3 {
				prev := tiny.anchor
				if p == 1 {
					prev = ids0[i]
				}
				_, want := hostScores(p, prev)
				for j := range 3 {
					if got := sc[(p*3+i)*3+j]; math.Abs(float64(got)-want[j]) > 1e-5 {
						t.Errorf("lattice[%d, %d, %d] = %v, want %v", p, i, j, got, want[j])
					}
				}
			}
		}
	})
}

// greedyPath is the tiny lattice's greedy walk worked out on the host: per
// position the candidates given the chosen predecessor, their
// probabilities at temperature 1, and the index chosen.
type greedyPath struct {
	ids   [2][]int32
	probs [2][]float64
	pick  [2]int
}

func hostGreedyPath() greedyPath {
	var g greedyPath
	prev := tiny.anchor
	for p := range 2 {
		g.ids[p], g.probs[p] = hostRow(p, prev, 1)
		g.pick[p] = argmax(g.probs[p])
		prev = g.ids[p][g.pick[p]]
	}
	return g
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// Both greedy walks of SelectGreedy — the fused one (one CPU node) and the
// picks from the whole lattice (any device) — take the tiny lattice's
// greedy path with one-hot rows, and report each position's largest
// probability at temperature 1 given the chosen predecessor, as worked out
// on the host.
func TestSelectGreedyOnTheHost(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		sel := tinySelector()
		hidden, logits, anchor := sel.tinyInputs()
		walks := map[string]func() (tokens, ids, probs, conf *mlx.Array, ok bool){
			"fused": func() (tokens, ids, probs, conf *mlx.Array, ok bool) {
				if mlx.CurrentDevice() != mlx.CPU {
					t.Logf("the fused walk is a CPU kernel: not checked on this device")
					return nil, nil, nil, nil, false
				}
				tokens, ids, probs, conf, ok = sel.walkGreedy(hidden, logits, anchor)
				if !ok {
					t.Fatalf("the CPU kernel did not serve a float32 selector")
				}
				return tokens, ids, probs, conf, ok
			},
			"lattice": func() (tokens, ids, probs, conf *mlx.Array, ok bool) {
				tokens, ids, probs, conf = sel.walkGreedyLattice(hidden, logits, anchor)
				return tokens, ids, probs, conf, true
			},
		}
		g := hostGreedyPath()
		ids0, ids1, p0, p1, j0, j1 := g.ids[0], g.ids[1], g.probs[0], g.probs[1], g.pick[0], g.pick[1]
		for name, walk := range walks {
			tokens, ids, probs, conf, ok := walk()
			if !ok {
				continue
			}
			if got, want := t.Int32s(tokens), []int32{ids0[j0], ids1[j1]}; !slices.Equal(got, want) {
				t.Errorf("%s: greedy path %v, want %v", name, got, want)
			}
			if got, want := t.Int32s(ids), append(slices.Clone(ids0), ids1...); !slices.Equal(got, want) {
				t.Errorf("%s: candidates %v, want %v", name, got, want)
			}
			want := make([]float32, 6)
			want[j0], want[3+j1] = 1, 1
			if got := t.Float32s(probs); !slices.Equal(got, want) {
				t.Errorf("%s: probs %v, want %v", name, got, want)
			}
			c := t.Float32s(conf)
			for p, w := range []float64{p0[j0], p1[j1]} {
				if math.Abs(float64(c[p])-w) > 1e-6 {
					t.Errorf("%s: confidence %v, want [%.6f %.6f]", name, c, p0[j0], p1[j1])
				}
			}
		}
	})
}

// At go-tiny's selector shapes (7 positions, K 16, R 64, V 8192) with
// random weights, the fused walk and the lattice walk choose the composed
// greedy walk's tokens with the same one-hot rows, over several blocks and
// anchors.
func TestSelectGreedyEqualsWalk(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			t.Skip("the fused walk is a CPU kernel")
		}
		const n, h, r, v, k = 7, 32, 64, 8192, 16
		normal := func(seed uint64, shape ...int) *mlx.Array {
			return mlx.RandomNormal(mlx.RandomKey(seed), mlx.Float32, 0, 1, shape...)
		}
		sel := &selector{
			pred: &nn.Embedding{Table: nn.Dense(normal(1, v, r), nil), DType: mlx.Float32},
			succ: &nn.Embedding{Table: nn.Dense(normal(2, v, r), nil), DType: mlx.Float32},
			proj: nn.Dense(mlx.MultiplyScalar(normal(3, r, h), 0.3), nil),
			topK: k,
		}
		for block := range 6 {
			hidden := normal(uint64(10+block), 1, n, h)
			// Logits with a few strong candidates, so the pairwise term
			// often overrules the unary order.
			logits := mlx.MultiplyScalar(normal(uint64(20+block), 1, n, v), 2)
			anchor := mlx.FromInt32s([]int32{int32(block * 1000)}, 1)
			tokens, ids, probs, _, ok := sel.walkGreedy(hidden, logits, anchor)
			if !ok {
				t.Fatalf("the CPU kernel did not serve a float32 selector")
			}
			wt, wi, wp := sel.walk(hidden, logits, anchor, sample.New(sample.Options{}, nil).Choose)
			if got, want := t.Int32s(tokens), t.Int32s(wt); !slices.Equal(got, want) {
				t.Fatalf("block %d: fused walk %v, composed walk %v", block, got, want)
			}
			if !slices.Equal(t.Int32s(ids), t.Int32s(wi)) || !slices.Equal(t.Float32s(probs), t.Float32s(wp)) {
				t.Fatalf("block %d: candidates or one-hot rows differ", block)
			}
			lt, li, lp, _ := sel.walkGreedyLattice(hidden, logits, anchor)
			if got, want := t.Int32s(lt), t.Int32s(wt); !slices.Equal(got, want) {
				t.Fatalf("block %d: lattice walk %v, composed walk %v", block, got, want)
			}
			if !slices.Equal(t.Int32s(li), t.Int32s(wi)) || !slices.Equal(t.Float32s(lp), t.Float32s(wp)) {
				t.Fatalf("block %d: the lattice walk's candidates or one-hot rows differ", block)
			}
		}
	})
}
