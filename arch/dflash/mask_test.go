package dflash

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
)

// The visibility table of spec/dflash.md section 6, case by case.
func TestVisible(t *testing.T) {
	for _, tc := range []struct {
		p, k, window int
		causal, want bool
	}{
		// full, non-causal: every key, earlier or later.
		{10, 0, 0, false, true}, {10, 17, 0, false, true},
		// full, causal: k <= p.
		{10, 10, 0, true, true}, {10, 11, 0, true, false}, {10, 0, 0, true, true},
		// sliding causal, W 4: p−3 … p.
		{10, 7, 4, true, true}, {10, 6, 4, true, false}, {10, 10, 4, true, true}, {10, 11, 4, true, false},
		// sliding non-causal, W 4: the symmetric band p−3 … p+3.
		{10, 7, 4, false, true}, {10, 6, 4, false, false}, {10, 13, 4, false, true}, {10, 14, 4, false, false},
	} {
		if got := Visible(tc.p, tc.k, tc.window, tc.causal); got != tc.want {
			t.Errorf("Visible(p %d, k %d, W %d, causal %t) = %t, want %t", tc.p, tc.k, tc.window, tc.causal, got, tc.want)
		}
	}
}

// A full causal layer uses MLX's causal mode; over a KV history holding
// slots 0 … N−1 with the queries last, it must equal the explicit table.
func TestCausalModeEqualsTable(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const N, L, D = 11, 4, 8
		key := func(i uint64, n int) *mlx.Array {
			return mlx.RandomNormal(mlx.RandomKey(i), mlx.Float32, 0, 1, 1, 2, n, D)
		}
		q, k, v := key(1, L), key(2, N), key(3, N)
		var allow []bool
		for i := range L {
			for s := range N {
				allow = append(allow, s <= N-L+i) // k <= p, the queries at N−L …
			}
		}
		table := mlx.ScaledDotProductAttention(q, k, v, 0.3, mlx.AttentionMask{Array: mlx.FromBools(allow, L, N)})
		slots := make([]int, N)
		for i := range slots {
			slots[i] = i
		}
		mode := mlx.ScaledDotProductAttention(q, k, v, 0.3, attentionMask(0, true, slots, N-L, L))
		d, err := mlx.Max(mlx.Abs(mlx.Subtract(table, mode)), false).Item()
		t.NoErr(err)
		if d > 1e-6 {
			t.Errorf("causal mode differs from the table by %g", d)
		}
	})
}

// The attention variants of spec/dflash.md section 6, seen through the
// forward of a random 2-layer draft: which block rows change after layer 0
// when one block token or one context row changes. Context rows sit at
// slots 0 … 11, block rows at 12 … 19. Expected rows are worked out by hand
// from the section's table.
func TestAttentionVariants(t *testing.T) {
	type perturb struct {
		blockRow, ctxRow int // one of them is −1
		changed          []int
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		name  string
		edit  func(top, dc map[string]any)
		cases []perturb
	}{
		{"variant 1: all full, non-causal (no mask)", func(top, dc map[string]any) {
			top["layer_types"] = []string{"full_attention", "full_attention"}
		}, []perturb{
			{5, -1, all}, // every row sees every block row
			{-1, 0, all}, // and every context row
		}},
		{"full causal (is_causal true)", func(top, dc map[string]any) {
			top["layer_types"] = []string{"full_attention", "full_attention"}
			top["is_causal"] = true
		}, []perturb{
			{5, -1, []int{5, 6, 7}}, // only later rows see row 5
			{-1, 0, all},
		}},
		{"variant 2: sliding causal (W 8) + full", nil, []perturb{
			{5, -1, []int{5, 6, 7}},
			{-1, 11, []int{0, 1, 2, 3, 4, 5, 6}}, // slot 11 is within 7 of slots 12 … 18
			{-1, 4, []int{}},                     // slot 4 is out of every query's window
		}},
		{"variant 3: all sliding (W 3), non-causal", func(top, dc map[string]any) {
			top["layer_types"] = []string{"sliding_attention", "sliding_attention"}
			top["sliding_window"] = 3
			top["is_causal"] = false
		}, []perturb{
			{5, -1, []int{3, 4, 5, 6, 7}}, // |i − 5| < 3, later rows included
			{-1, 11, []int{0, 1}},         // slots 12, 13
			{-1, 0, []int{}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				data := edit(t, func(top, dc map[string]any) {
					if tc.edit != nil {
						tc.edit(top, dc)
					}
				})
				d := randomDraft(t, data)
				rng := rand.New(rand.NewPCG(1, 2))
				x := make([]float32, 12*128)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				ids := []int32{3, 14, 15, 92, 65, 35, 89, 79}
				base := layer0(t, d, x, ids)
				for _, pc := range tc.cases {
					x2, ids2 := slices.Clone(x), slices.Clone(ids)
					if pc.blockRow >= 0 {
						ids2[pc.blockRow] = 100
					} else {
						for j := range 128 {
							x2[pc.ctxRow*128+j] += 1
						}
					}
					got := changedRows(t, base, layer0(t, d, x2, ids2))
					if !slices.Equal(got, pc.changed) {
						t.Errorf("changing block row %d / context row %d changed rows %v, want %v", pc.blockRow, pc.ctxRow, got, pc.changed)
					}
				}
			})
		})
	}
}

// randomDraft builds a draft from config data with random weights and a
// fake target with a random embedding table.
func randomDraft(t *mlxtest.T, data []byte) *Draft {
	cfg, err := ParseConfig(data)
	t.NoErr(err)
	d, err := NewFromConfig(cfg, mlx.Float32, nil)
	t.NoErr(err)
	target := &fakeTarget{hidden: cfg.HiddenSize, vocab: cfg.VocabSize, layers: 4}
	target.embed(99)
	t.NoErr(d.AttachTarget(target))
	t.NoErr(d.LoadWeights(randomTensors(cfg, 7)))
	return d
}

// layer0 runs context x (12 rows) and the block ids through fresh caches
// and returns the block's residual stream after layer 0 [8, H] as values.
func layer0(t *mlxtest.T, d *Draft, x []float32, ids []int32) [][]float32 {
	var h0 *mlx.Array
	d.trace = func(l int, h *mlx.Array) {
		if l == 0 {
			h0 = h
		}
	}
	defer func() { d.trace = nil }()
	caches := d.NewCaches()
	d.Forward(&model.Batch{
		InputIDs:   mlx.FromInt32s(ids, 1, len(ids)),
		SeqOffsets: []int{0},
		Hidden:     mlx.FromFloat32s(x, 1, len(x)/d.cfg.FeatureSize(), d.cfg.FeatureSize()),
	}, nil, caches)
	v := t.Float32s(h0)
	H := d.cfg.HiddenSize
	rows := make([][]float32, len(v)/H)
	for i := range rows {
		rows[i] = v[i*H : (i+1)*H]
	}
	return rows
}

func changedRows(t *mlxtest.T, a, b [][]float32) []int {
	out := []int{}
	for i := range a {
		for j := range a[i] {
			if d := a[i][j] - b[i][j]; d > 1e-5 || d < -1e-5 {
				out = append(out, i)
				break
			}
		}
	}
	return out
}
