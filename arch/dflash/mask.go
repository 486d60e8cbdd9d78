package dflash

import (
	"github.com/specula-dev/specula/mlx"
)

// Visible reports whether a block query at slot p may attend to the key at
// slot k in a layer with the given window (0 = full attention) and
// causality (spec/dflash.md section 6):
//
//	full,    non-causal: every key
//	full,    causal:     k <= p
//	sliding, non-causal: |p − k| < W (the symmetric band of z-lab)
//	sliding, causal:     k <= p and p − k < W
func Visible(p, k, window int, causal bool) bool {
	if causal && k > p {
		return false
	}
	if window > 0 && (p-k >= window || k-p >= window) {
		return false
	}
	return true
}

// attentionMask returns the mask of a layer's block queries at slots
// first … first+L−1 over its key history.
//
// Full layers hold every slot from 0 in order, the block last, so they need
// no mask (non-causal) or MLX's causal mode, whose end-aligned diagonal is
// exactly k <= p. Sliding layers get a boolean mask [L, N] built from the
// slot of each key row that the rotating cache returned (which may include
// rows older than the window, and is not in order after the ring wrapped).
func attentionMask(window int, causal bool, keySlots []int, first, L int) mlx.AttentionMask {
	if window == 0 {
		return mlx.AttentionMask{Causal: causal}
	}
	allow := make([]bool, 0, L*len(keySlots))
	for i := range L {
		for _, k := range keySlots {
			allow = append(allow, Visible(first+i, k, window, causal))
		}
	}
	return mlx.AttentionMask{Array: mlx.FromBools(allow, L, len(keySlots))}
}
