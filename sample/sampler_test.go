package sample_test

import (
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// draws is the number of rows a statistical test samples at once: each row is
// an independent draw, so one call gives the whole sample.
const draws = 20000

func seeded(o sample.Options, seed uint64) *sample.Sampler {
	o.Seed, o.UseSeed = seed, true
	return sample.New(o, nil)
}

// softmax64 returns softmax(scores / temp) in float64.
func softmax64(scores []float64, temp float64) []float64 {
	hi := slices.Max(scores)
	out := make([]float64, len(scores))
	sum := 0.0
	for i, s := range scores {
		out[i] = math.Exp((s - hi) / temp)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func TestChooseGreedy(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		s := sample.New(sample.Options{}, nil)
		ids := mlx.FromInt32s([]int32{5, 6, 7, 8, 9, 10, 11, 12, 13}, 3, 3)
		scores := mlx.FromFloat32s([]float32{1, 3, 3, 0, 0, 0, -2, -1, -5}, 3, 3)
		tokens, probs := s.Choose(ids, scores)
		if tokens.DType() != mlx.Int32 || probs.DType() != mlx.Float32 {
			t.Fatalf("dtypes %v %v, want int32 float32", tokens.DType(), probs.DType())
		}
		if got := t.Int32s(tokens); !slices.Equal(got, []int32{6, 8, 12}) {
			t.Fatalf("tokens %v, want [6 8 12] (lowest index on ties)", got)
		}
		if got := t.Float32s(probs); !slices.Equal(got, []float32{0, 1, 0, 1, 0, 0, 0, 1, 0}) {
			t.Fatalf("probs %v, want one-hot at the argmax", got)
		}
	})
}

// TestChooseSelectorScenario is spec 12 S8's proposal: candidates
// [unary, 0] scored [0, 2] on every row.
func TestChooseSelectorScenario(t *testing.T) {
	ids := []int32{2, 0, 3, 0, 4, 0}
	scores := []float32{0, 2, 0, 2, 0, 2}
	t.Run("T=0", func(t *testing.T) {
		mlxtest.Run(t, func(t *mlxtest.T) {
			tokens, probs := seeded(sample.Options{}, 42).Choose(mlx.FromInt32s(ids, 3, 2), mlx.FromFloat32s(scores, 3, 2))
			if got := t.Int32s(tokens); !slices.Equal(got, []int32{0, 0, 0}) {
				t.Fatalf("tokens %v, want [0 0 0]", got)
			}
			if got := t.Float32s(probs); !slices.Equal(got, []float32{0, 1, 0, 1, 0, 1}) {
				t.Fatalf("probs %v, want [0 1] per row", got)
			}
		})
	})
	t.Run("T=1", func(t *testing.T) {
		mlxtest.Run(t, func(t *mlxtest.T) {
			tokens, probs := seeded(sample.Options{Temperature: 1}, 42).Choose(mlx.FromInt32s(ids, 3, 2), mlx.FromFloat32s(scores, 3, 2))
			low := 1 / (1 + math.Exp(2))
			got := t.Float32s(probs)
			for i, p := range got {
				want := low
				if i%2 == 1 {
					want = 1 - low
				}
				if math.Abs(float64(p)-want) > 1e-6 {
					t.Fatalf("probs %v, want [%.8f %.8f] per row", got, low, 1-low)
				}
			}
			for r, tok := range t.Int32s(tokens) {
				if tok != ids[2*r] && tok != ids[2*r+1] {
					t.Fatalf("row %d: token %d is not a candidate", r, tok)
				}
			}
		})
	})
}

func TestChooseFrequenciesMatchSoftmax(t *testing.T) {
	scores := []float64{0.5, 2, -1, 1, 1.5}
	ids := []int32{40, 41, 42, 43, 44}
	for _, temp := range []float32{1, 0.6} {
		want := softmax64(scores, float64(temp))
		mlxtest.Run(t, func(t *mlxtest.T) {
			k := len(scores)
			s := seeded(sample.Options{Temperature: temp, TopK: 1, MinP: 0.9}, 9) // Choose ignores all but T
			tokens, probs := s.Choose(
				mlx.BroadcastTo(mlx.FromInt32s(ids, 1, k), draws, k),
				mlx.AsType(mlx.BroadcastTo(mlx.FromFloat32s(f32s(scores), 1, k), draws, k), mlx.BFloat16))
			first := f64s(t.Float32s(mlx.SliceAxis(probs, 0, 0, 1)))
			closeRows(t, "Choose probs", [][]float64{first}, [][]float64{want}, 1e-6, 1e-5)
			got := t.Int32s(tokens)
			for i := range got {
				got[i] -= 40
			}
			chiSquareOK(t, histogram(t, got, k), want, draws)
		})
	}
}

func TestSampleDistributionFrequencies(t *testing.T) {
	t.Run("dense", func(t *testing.T) {
		probs := []float32{0.3, 0.2, 0.15, 0.1, 0.1, 0, 0.08, 0.05, 0.02, 0}
		mlxtest.Run(t, func(t *mlxtest.T) {
			v := len(probs)
			d := sample.Distribution{Probs: mlx.BroadcastTo(mlx.FromFloat32s(probs, 1, v), draws, v)}
			tokens := seeded(sample.Options{Temperature: 1}, 1).SampleDistribution(d)
			if tokens.DType() != mlx.Int32 {
				t.Fatalf("dtype %v, want int32", tokens.DType())
			}
			t.Shape(tokens, draws)
			chiSquareOK(t, histogram(t, t.Int32s(tokens), v), f64s(probs), draws)
		})
	})
	t.Run("sparse", func(t *testing.T) {
		ids := []int32{9, 2, 5, 0, 7, 3}
		probs := []float32{0.35, 0.25, 0.2, 0, 0.15, 0.05}
		want := make([]float64, 10)
		for j, id := range ids {
			want[id] = float64(probs[j])
		}
		mlxtest.Run(t, func(t *mlxtest.T) {
			k := len(ids)
			d := sample.Distribution{
				IDs:   mlx.BroadcastTo(mlx.FromInt32s(ids, 1, k), draws, k),
				Probs: mlx.BroadcastTo(mlx.FromFloat32s(probs, 1, k), draws, k),
			}
			tokens := seeded(sample.Options{Temperature: 1}, 2).SampleDistribution(d)
			chiSquareOK(t, histogram(t, t.Int32s(tokens), 10), want, draws)
		})
	})
	t.Run("from logits with top-k and top-p", func(t *testing.T) {
		// Sample's draws follow the transformed distribution; the expected
		// frequencies come from the float64 reference.
		logits := []float64{1, 0.2, -0.5, 2.1, 0.7, -1.4, 1.6, 0}
		opts := sample.Options{Temperature: 0.9, TopK: 6, TopP: 0.9}
		want, _ := refRow(logits, nil, opts)
		mlxtest.Run(t, func(t *mlxtest.T) {
			v := len(logits)
			x := mlx.BroadcastTo(mlx.FromFloat32s(f32s(logits), 1, v), draws, v)
			tokens := seeded(opts, 3).Sample(x, nil)
			chiSquareOK(t, histogram(t, t.Int32s(tokens), v), want, draws)
		})
	})
}

func TestUniform(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		u := seeded(sample.Options{}, 5).Uniform(draws)
		t.Shape(u, draws)
		const bins = 10
		counts := make([]int, bins)
		for _, x := range t.Float32s(u) {
			if !(x >= 0 && x < 1) {
				t.Fatalf("uniform draw %v outside [0, 1)", x)
			}
			counts[int(x*bins)]++
		}
		chiSquareOK(t, counts, slices.Repeat([]float64{1.0 / bins}, bins), draws)
	})
}

func TestSeededDrawsReproduce(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const n = 32
		uniforms := func(s *sample.Sampler, calls int) [][]float32 {
			out := make([][]float32, calls)
			for i := range out {
				out[i] = t.Float32s(s.Uniform(n))
			}
			return out
		}
		a := uniforms(seeded(sample.Options{}, 42), 3)
		b := uniforms(seeded(sample.Options{}, 42), 3)
		for i := range a {
			if !slices.Equal(a[i], b[i]) {
				t.Fatalf("call %d: same seed, different draws", i)
			}
		}
		if slices.Equal(a[0], a[1]) || slices.Equal(a[1], a[2]) {
			t.Fatal("successive calls repeated their draws")
		}
		if other := uniforms(seeded(sample.Options{}, 43), 1); slices.Equal(other[0], a[0]) {
			t.Fatal("seeds 42 and 43 drew the same values")
		}
		if x, y := uniforms(sample.New(sample.Options{}, nil), 1), uniforms(sample.New(sample.Options{}, nil), 1); slices.Equal(x[0], y[0]) {
			t.Fatal("two unseeded samplers drew the same values")
		}

		// Sampled tokens reproduce too.
		d := sample.Distribution{Probs: mlx.BroadcastTo(mlx.FromFloat32s([]float32{0.25, 0.25, 0.25, 0.25}, 1, 4), n, 4)}
		x, y := seeded(sample.Options{}, 7), seeded(sample.Options{}, 7)
		for range 2 {
			if p, q := t.Int32s(x.SampleDistribution(d)), t.Int32s(y.SampleDistribution(d)); !slices.Equal(p, q) {
				t.Fatalf("same seed sampled %v and %v", p, q)
			}
		}
	})
}

// TestEveryCallConsumesOneKey: a greedy SampleDistribution or Choose makes no
// draw but still takes its key, so the draws after it do not depend on the
// layout or the temperature.
func TestEveryCallConsumesOneKey(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		ref := seeded(sample.Options{}, 77)
		ref.Uniform(8)
		want := t.Float32s(ref.Uniform(8))

		greedy := seeded(sample.Options{}, 77)
		greedy.SampleDistribution(sparse([][]int32{{3}}, [][]float32{{1}}))
		if got := t.Float32s(greedy.Uniform(8)); !slices.Equal(got, want) {
			t.Fatal("a one-hot SampleDistribution did not consume exactly one key")
		}

		choose := seeded(sample.Options{}, 77)
		choose.Choose(mlx.FromInt32s([]int32{1, 2}, 1, 2), mlx.FromFloat32s([]float32{0, 1}, 1, 2))
		if got := t.Float32s(choose.Uniform(8)); !slices.Equal(got, want) {
			t.Fatal("a greedy Choose did not consume exactly one key")
		}
	})
}

func TestOptionsAccessors(t *testing.T) {
	o := sample.Options{Temperature: 0.7, TopK: 20, Seed: 3, UseSeed: true}
	s := sample.New(o, []int32{1, 2, 3})
	if s.Options() != o || s.Temperature() != 0.7 {
		t.Fatalf("Options %+v Temperature %v, want %+v and 0.7", s.Options(), s.Temperature(), o)
	}
}

// UsesHistory is true exactly when the committed history changes a
// distribution: the same logits after two different histories give the
// same probabilities for every setting without a penalty.
func TestUsesHistoryMatchesDistribution(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		logits := mlx.FromFloat32s([]float32{2, 1, 0.5, -1, 0.25}, 1, 5)
		cases := []struct {
			name string
			o    sample.Options
			want bool
		}{
			{"default", sample.Options{}, false},
			{"sampled, top-k", sample.Options{Temperature: 0.8, TopK: 3}, false},
			{"repeat penalty", sample.Options{Temperature: 1, RepeatPenalty: 1.3, RepeatLastN: 64}, true},
			{"presence penalty, whole context", sample.Options{Temperature: 1, PresencePenalty: 0.5, RepeatLastN: -1}, true},
			{"frequency penalty, greedy", sample.Options{FrequencyPenalty: 3, RepeatLastN: 8}, true},
			{"penalty with a zero window", sample.Options{Temperature: 1, RepeatPenalty: 1.3}, false},
			{"repeat penalty 1", sample.Options{Temperature: 1, RepeatPenalty: 1, RepeatLastN: 64}, false},
		}
		for _, c := range cases {
			a, b := sample.New(c.o, []int32{0, 0, 0}), sample.New(c.o, []int32{3, 4})
			if a.UsesHistory() != c.want {
				t.Fatalf("%s: UsesHistory = %v, want %v", c.name, a.UsesHistory(), c.want)
			}
			da, db := a.Distribution(logits, nil), b.Distribution(logits, nil)
			pa, pb := t.Float32s(da.Probs), t.Float32s(db.Probs)
			differ := !slices.Equal(pa, pb)
			if !da.Dense() {
				differ = differ || !slices.Equal(t.Int32s(da.IDs), t.Int32s(db.IDs))
			}
			if differ != c.want {
				t.Fatalf("%s: distributions after two histories differ = %v, want %v (probabilities %v and %v)", c.name, differ, c.want, pa, pb)
			}
		}
	})
}
