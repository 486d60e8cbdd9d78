package qwen35_test

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// A rank of a sharded model reads only its parts of the tensors it cuts,
// and they equal the cut of the whole tensors: 2 ranks, 4 ranks (which
// outnumber the KV and key heads, so a rank holds one repeated head), and
// a 3-bit MLX conversion whose packed weights, scales and biases are cut
// alike (rows, and columns on whole groups of 32).
func TestShardedLoadReadsOnlyTheRanksParts(t *testing.T) {
	for _, c := range []struct {
		fixture     string
		rank, ranks int
	}{
		{"qwen35-tiny", 0, 2},
		{"qwen35-tiny", 1, 2},
		{"qwen35-tiny", 2, 4},
		{"qwen35-tiny-mlx-q3-g32", 1, 2},
	} {
		t.Run(fmt.Sprintf("%s/%d-of-%d", c.fixture, c.rank, c.ranks), func(t *testing.T) {
			dir := fixtures.Dir(t, c.fixture)
			mlxtest.Run(t, func(t *mlxtest.T) { qwen35test.CheckRankReadsItsPartsOnly(t, dir, c.rank, c.ranks) })
		})
	}
}
