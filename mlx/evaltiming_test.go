package mlx_test

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// With the split on, a blocking evaluation is counted, its device work shows
// up as waiting, and the values are those of an evaluation without it.
func TestEvalTimingSplitsSubmitAndWait(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		// 16 chained products of the 256×256 identity: long enough to
		// wait for on any backend, and exact (the sum is the trace, 256).
		chain := func() *mlx.Array {
			eye := mlx.FromFloat32s(identity(256), 256, 256)
			x := eye
			for range 16 {
				x = mlx.Matmul(x, eye)
			}
			return mlx.Sum(x, false)
		}
		off, err := chain().Float32s()
		if err != nil {
			t.Fatal(err)
		}
		prev := mlx.SetEvalTiming(true)
		defer mlx.SetEvalTiming(prev)
		before := mlx.EvalTiming()
		x := chain()
		if err := mlx.Eval(x); err != nil {
			t.Fatal(err)
		}
		on, err := x.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		d := mlx.EvalTiming().Sub(before)
		if !slices.Equal(on, off) || on[0] != 256 {
			t.Fatalf("sum with the split on = %v, off = %v; want [256] both", on, off)
		}
		// One Eval and one read of the evaluated array.
		if d.Syncs != 2 {
			t.Errorf("Syncs = %d, want 2 (an Eval and a read)", d.Syncs)
		}
		if d.Wait <= 0 || d.Submit <= 0 {
			t.Errorf("split = %+v: want both the submission and the wait timed", d)
		}
		// Async submissions count as submission only.
		before = mlx.EvalTiming()
		if err := mlx.AsyncEval(chain()); err != nil {
			t.Fatal(err)
		}
		if d := mlx.EvalTiming().Sub(before); d.Syncs != 0 || d.Wait != 0 || d.Submit <= 0 {
			t.Errorf("AsyncEval split = %+v: want submission time only", d)
		}
	})
}

func identity(n int) []float32 {
	v := make([]float32, n*n)
	for i := range n {
		v[i*n+i] = 1
	}
	return v
}
