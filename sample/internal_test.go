package sample

import (
	"math"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The cuts of top-p and min-p on probabilities that float32 holds exactly
// (dyadic), so that boundaries are hit exactly rather than approximately.
func TestTruncationBoundaries(t *testing.T) {
	above := func(x float32) float32 { return math.Nextafter32(x, 2) }
	half := []float32{0.5, 0.25, 0.125, 0.125}
	shuffled := []float32{0.125, 0.5, 0.125, 0.25}
	cases := []struct {
		name  string
		probs []float32
		cut   func(*mlx.Array) *mlx.Array
		want  []float32
	}{
		// Strictly-better masses of half: 0, 0.5, 0.75, 0.75.
		{"top-p equal to a strictly-better mass drops that id", half, topPAt(0.75), []float32{0.5, 0.25, 0, 0}},
		{"top-p just above it keeps the id", half, topPAt(above(0.75)), half},
		{"top-p 0.5 keeps only the best", half, topPAt(0.5), []float32{0.5, 0, 0, 0}},
		{"top-p just above 0.5 keeps two", half, topPAt(above(0.5)), []float32{0.5, 0.25, 0, 0}},
		{"top-p tiny keeps the best", half, topPAt(1e-9), []float32{0.5, 0, 0, 0}},
		{"top-p ignores the input order", shuffled, topPAt(0.75), []float32{0, 0.5, 0, 0.25}},
		{"tied best ids are all kept", []float32{0.25, 0.25, 0.25, 0.25}, topPAt(1e-9), []float32{0.25, 0.25, 0.25, 0.25}},
		// Strictly-better masses: 0, 0.5, 0.5, 0.5, 0.5 — a sort-order rule
		// would keep one 0.125 (or two); ties go together.
		{"ties at the cut are kept together", []float32{0.5, 0.125, 0.125, 0.125, 0.125}, topPAt(0.6), []float32{0.5, 0.125, 0.125, 0.125, 0.125}},
		{"ties at the cut are dropped together", []float32{0.5, 0.125, 0.125, 0.125, 0.125}, topPAt(0.5), []float32{0.5, 0, 0, 0, 0}},
		{"min-p keeps a probability equal to the floor", half, minPAt(0.25), half},
		{"min-p drops one just below it", half, minPAt(above(0.25)), []float32{0.5, 0.25, 0, 0}},
		{"min-p 1 keeps only the best", half, minPAt(1), []float32{0.5, 0, 0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				p := mlx.FromFloat32s(c.probs, 1, len(c.probs))
				if got := t.Float32s(c.cut(p)); !slices.Equal(got, c.want) {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			})
		})
	}
}

func topPAt(v float32) func(*mlx.Array) *mlx.Array {
	return func(p *mlx.Array) *mlx.Array { return topP(p, v) }
}

func minPAt(v float32) func(*mlx.Array) *mlx.Array {
	return func(p *mlx.Array) *mlx.Array { return minP(p, v) }
}

// TestKeySeedIsSplitMix64 pins the key sequence to SplitMix64's published
// outputs for seed 0, so that seeded requests stay reproducible across
// versions.
func TestKeySeedIsSplitMix64(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	for n, w := range want {
		if got := keySeed(0, uint64(n)); got != w {
			t.Errorf("keySeed(0, %d) = %#x, want %#x", n, got, w)
		}
	}
}
