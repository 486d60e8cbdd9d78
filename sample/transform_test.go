package sample_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// minMargin is how far from every decision boundary the random test inputs
// must lie: far above float32 rounding (~1e-6 here), so that MLX and the
// float64 reference always make the same cuts.
const minMargin = 1e-4

func TestDistributionMatchesReference(t *testing.T) {
	const vocab = 24
	hist := []int32{3, 3, 7, 1, 9, 3}
	chain := []int32{4, 7, 2, 9, 9}
	penalties := sample.Options{Temperature: 1, RepeatPenalty: 1.3, PresencePenalty: 0.4, FrequencyPenalty: 0.25, RepeatLastN: 64}
	with := func(o sample.Options, f func(*sample.Options)) sample.Options { f(&o); return o }

	cases := []struct {
		name    string
		opts    sample.Options
		history []int32
		chain   []int32 // nil: no chain
		rows    int
		bf16    bool // logits given as bfloat16
	}{
		{name: "temperature 1", opts: sample.Options{Temperature: 1}, rows: 3},
		{name: "temperature 0.5 sharpens", opts: sample.Options{Temperature: 0.5}, rows: 3},
		{name: "temperature 2.5 flattens", opts: sample.Options{Temperature: 2.5}, rows: 3},
		{name: "greedy is one-hot on the argmax", opts: sample.Options{}, rows: 4},
		{name: "bfloat16 logits compute in float32", opts: sample.Options{Temperature: 0.8, TopP: 0.9}, rows: 2, bf16: true},
		{name: "top-k 5 is sparse", opts: sample.Options{Temperature: 1, TopK: 5}, rows: 3},
		{name: "top-k 1", opts: sample.Options{Temperature: 0.7, TopK: 1}, rows: 2},
		{name: "top-k equal to V is off", opts: sample.Options{Temperature: 1, TopK: vocab}, rows: 2},
		{name: "top-p 0.6 over the vocabulary", opts: sample.Options{Temperature: 1, TopP: 0.6}, rows: 4},
		{name: "top-p 0.05 keeps only the best", opts: sample.Options{Temperature: 1, TopP: 0.05}, rows: 2},
		{name: "top-p 1 is off", opts: sample.Options{Temperature: 1, TopP: 1}, rows: 2},
		{name: "top-p after top-k", opts: sample.Options{Temperature: 1.2, TopK: 10, TopP: 0.8}, rows: 4},
		{name: "min-p 0.1 over the vocabulary", opts: sample.Options{Temperature: 1, MinP: 0.1}, rows: 4},
		{name: "min-p after top-k", opts: sample.Options{Temperature: 1, TopK: 8, MinP: 0.2}, rows: 3},
		{name: "top-p then min-p", opts: sample.Options{Temperature: 1.5, TopP: 0.9, MinP: 0.15}, rows: 4},
		{name: "repeat penalty", opts: sample.Options{Temperature: 1, RepeatPenalty: 1.5, RepeatLastN: 64}, history: hist, rows: 2},
		{name: "repeat penalty below 1 boosts", opts: sample.Options{Temperature: 1, RepeatPenalty: 0.7, RepeatLastN: 64}, history: hist, rows: 2},
		{name: "presence penalty", opts: sample.Options{Temperature: 1, PresencePenalty: 0.8, RepeatLastN: 64}, history: hist, rows: 2},
		{name: "frequency penalty", opts: sample.Options{Temperature: 1, FrequencyPenalty: 0.6, RepeatLastN: 64}, history: hist, rows: 2},
		{name: "all penalties", opts: penalties, history: hist, rows: 2},
		{name: "penalties off when RepeatLastN is 0", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 0 }), history: hist, rows: 2},
		{name: "window of 3 forgets older history", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 3 }), history: hist, rows: 2},
		{name: "whole context", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = -1 }), history: hist, rows: 2},
		{name: "greedy after penalties", opts: with(penalties, func(o *sample.Options) { o.Temperature = 0; o.RepeatPenalty = 4 }), history: hist, rows: 3},
		{name: "chain rows extend the history", opts: penalties, history: hist, chain: chain, rows: len(chain) + 1},
		{name: "chain rows slide their window", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 4 }), history: hist, chain: chain, rows: len(chain) + 1},
		{name: "chain window shorter than the chain", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 2 }), history: hist, chain: chain, rows: len(chain) + 1},
		{name: "chain over the whole context", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = -1 }), history: hist, chain: chain, rows: len(chain) + 1},
		{name: "chain without history", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 3 }), chain: chain, rows: len(chain) + 1},
		{name: "pipelined one-token chain", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 3 }), history: hist, chain: []int32{5}, rows: 1},
		{name: "fewer rows align to the chain end", opts: with(penalties, func(o *sample.Options) { o.RepeatLastN = 4 }), history: hist, chain: chain, rows: 2},
		{name: "empty chain", opts: penalties, history: hist, chain: []int32{}, rows: 1},
		{name: "chain without penalties is ignored", opts: sample.Options{Temperature: 1, TopK: 6}, history: hist, chain: chain, rows: len(chain) + 1},
		{
			name:    "everything at once",
			opts:    sample.Options{Temperature: 0.8, TopK: 12, TopP: 0.85, MinP: 0.05, RepeatPenalty: 1.2, PresencePenalty: 0.3, FrequencyPenalty: 0.2, RepeatLastN: 5},
			history: hist, chain: chain, rows: len(chain) + 1,
		},
		{
			name:    "everything at once, dense",
			opts:    sample.Options{Temperature: 1.3, TopP: 0.7, MinP: 0.08, RepeatPenalty: 1.4, FrequencyPenalty: 0.5, RepeatLastN: 4},
			history: hist, chain: chain, rows: len(chain) + 1,
		},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each row's context: the history, then the chain's first
			// n−R+1+i tokens.
			contexts := make([][]int32, c.rows)
			for i := range contexts {
				contexts[i] = slices.Clone(c.history)
				if c.chain != nil {
					contexts[i] = append(contexts[i], c.chain[:len(c.chain)-c.rows+1+i]...)
				}
			}
			// Draw logits until every decision is clear of float32 rounding.
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			var logits, want [][]float64
			for clear := false; !clear; {
				logits = randLogits(rng, c.rows, vocab, 2)
				if c.bf16 {
					toBFloat16(logits)
				}
				want, clear = make([][]float64, c.rows), true
				for i := range logits {
					var margin float64
					want[i], margin = refRow(logits[i], contexts[i], c.opts)
					clear = clear && margin >= minMargin
				}
			}

			mlxtest.Run(t, func(t *mlxtest.T) {
				x := array(logits)
				if c.bf16 {
					x = mlx.AsType(x, mlx.BFloat16)
				}
				var ch *mlx.Array
				if c.chain != nil {
					// A lazy chain, as verification passes it.
					ch = mlx.Add(mlx.FromInt32s(c.chain), mlx.Scalar(0, mlx.Int32))
				}
				s := sample.New(c.opts, c.history)
				d := s.Distribution(x, ch)

				switch {
				case c.opts.Temperature <= 0:
					t.Shape(d.IDs, c.rows, 1)
				case c.opts.TopK > 0 && c.opts.TopK < vocab:
					t.Shape(d.IDs, c.rows, c.opts.TopK)
				default:
					if !d.Dense() {
						t.Fatalf("want dense rows, got IDs %v", d.IDs)
					}
				}
				closeRows(t, "distribution", hostRows(t, d, vocab), want, 2e-6, 2e-5)
			})
		})
	}
}

func TestGreedyTakesTheFirstArgmax(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		logits := mlx.FromFloat32s([]float32{
			0, 5, 5, 1,
			2, 2, 2, 2,
			-1, -3, -1, -2,
			-4, -3, -2, 7,
		}, 4, 4)
		want := []int32{1, 0, 0, 3}
		for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
			s := sample.New(sample.Options{}, nil)
			d := s.Distribution(mlx.AsType(logits, dtype), nil)
			t.Shape(d.IDs, 4, 1)
			if got := t.Int32s(d.IDs); !slices.Equal(got, want) {
				t.Fatalf("%v: argmax ids %v, want %v", dtype, got, want)
			}
			if got := t.Float32s(d.Probs); !slices.Equal(got, []float32{1, 1, 1, 1}) {
				t.Fatalf("%v: probs %v, want ones", dtype, got)
			}
			tokens := s.Sample(mlx.AsType(logits, dtype), nil)
			if tokens.DType() != mlx.Int32 {
				t.Fatalf("Sample dtype %v, want int32", tokens.DType())
			}
			if got := t.Int32s(tokens); !slices.Equal(got, want) {
				t.Fatalf("%v: sampled %v, want %v", dtype, got, want)
			}
		}
	})
}

func TestGreedySampleEqualsArgmaxOnLargeVocabulary(t *testing.T) {
	const rows, vocab = 6, 1000
	logits := randLogits(rand.New(rand.NewPCG(3, 3)), rows, vocab, 3)
	want := make([]int32, rows)
	for r, row := range logits {
		want[r] = int32(slices.Index(row, slices.Max(row)))
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		got := t.Int32s(sample.New(sample.Options{Seed: 1, UseSeed: true}, nil).Sample(array(logits), nil))
		if !slices.Equal(got, want) {
			t.Fatalf("greedy tokens %v, want %v", got, want)
		}
	})
}

func TestDistributionLeavesTheHistoryAlone(t *testing.T) {
	const vocab = 12
	opts := sample.Options{Temperature: 1, RepeatPenalty: 2, FrequencyPenalty: 0.5, RepeatLastN: 3}
	logits := randLogits(rand.New(rand.NewPCG(5, 5)), 1, vocab, 1)
	ref := func(context ...int32) [][]float64 {
		p, _ := refRow(logits[0], context, opts)
		return [][]float64{p}
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		s := sample.New(opts, []int32{1, 2})
		x := array(logits)
		chained := s.Distribution(mlx.FromFloat32s(slices.Repeat(f32s(logits[0]), 3), 3, vocab), mlx.FromInt32s([]int32{5, 5}))
		t.Eval(chained.Arrays()...)
		closeRows(t, "after a chained call", hostRows(t, s.Distribution(x, nil), vocab), ref(1, 2), 2e-6, 2e-5)

		s.Commit([]int32{4, 4})
		closeRows(t, "after Commit", hostRows(t, s.Distribution(x, nil), vocab), ref(1, 2, 4, 4), 2e-6, 2e-5)

		// A long commit leaves only the window.
		s.Commit([]int32{9, 9, 9, 9, 9, 8, 7, 6})
		closeRows(t, "after a long Commit", hostRows(t, s.Distribution(x, nil), vocab), ref(8, 7, 6), 2e-6, 2e-5)
	})
}

func TestWholeContextCommit(t *testing.T) {
	const vocab = 10
	opts := sample.Options{Temperature: 1, PresencePenalty: 0.5, FrequencyPenalty: 0.3, RepeatLastN: -1}
	logits := randLogits(rand.New(rand.NewPCG(6, 6)), 2, vocab, 1)
	context := []int32{0, 1, 1, 2, 2, 2, 3, 4, 4, 4, 4, 9, 9}
	chain := []int32{9}
	want := make([][]float64, 2)
	want[0], _ = refRow(logits[0], context, opts)
	want[1], _ = refRow(logits[1], append(slices.Clone(context), chain...), opts)
	mlxtest.Run(t, func(t *mlxtest.T) {
		s := sample.New(opts, context[:4])
		for _, tok := range context[4:] {
			s.Commit([]int32{tok})
		}
		closeRows(t, "whole context", hostRows(t, s.Distribution(array(logits), mlx.FromInt32s(chain)), vocab), want, 2e-6, 2e-5)
	})
}

func TestTooManyRowsForTheChainPanics(t *testing.T) {
	mustPanic(t, func(t *mlxtest.T) {
		s := sample.New(sample.Options{Temperature: 1}, nil)
		s.Distribution(mlx.Zeros(mlx.Float32, 3, 5), mlx.FromInt32s([]int32{1}))
	})
}

func f32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
