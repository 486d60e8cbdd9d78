package speculation

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The verification outcome the host reads back: the leading accepted count,
// the drafts, and row count's residual or the bonus (hand-computed cases of
// spec 6.1 steps 8 and 10–11).
func TestOutcomePacksTheVerdict(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		drafts, res := []int32{5, 6, 7, 8}, []int32{10, 11, 12, 13}
		cases := []struct {
			name  string
			flags []bool
			want  []int32
		}{
			{"first rejected", []bool{false, true, true, true}, []int32{0, 5, 6, 7, 8, 10}},
			{"two pass, then a rejection", []bool{true, true, false, true}, []int32{2, 5, 6, 7, 8, 12}},
			{"last rejected", []bool{true, true, true, false}, []int32{3, 5, 6, 7, 8, 13}},
			{"all pass: the bonus", []bool{true, true, true, true}, []int32{4, 5, 6, 7, 8, 99}},
		}
		for _, c := range cases {
			flags := mlx.FromBools(c.flags, len(c.flags))
			got, err := outcome(flags, mlx.FromInt32s(drafts, 4), mlx.FromInt32s(res, 4), mlx.FromInt32s([]int32{99}, 1)).Int32s()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s: outcome %v, want %v", c.name, got, c.want)
			}
		}
		// One draft.
		got, err := outcome(mlx.FromBools([]bool{true}, 1), mlx.FromInt32s([]int32{3}, 1), mlx.FromInt32s([]int32{4}, 1), mlx.FromInt32s([]int32{9}, 1)).Int32s()
		if err != nil || !slices.Equal(got, []int32{1, 3, 9}) {
			t.Errorf("one accepted draft: outcome %v (%v), want [1 3 9]", got, err)
		}
	})
}
