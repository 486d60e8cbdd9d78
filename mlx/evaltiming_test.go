package mlx_test

import (
	"maps"
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

// While counting is on, each evaluation adds the nodes it hands to MLX —
// here counted by hand: (x + x) · x − x is three nodes (x itself is data)
// — once: a read of arrays already submitted adds nothing, nor does a
// second evaluation. Off, nothing is counted.
func TestNodeCountingCountsEachNodeOnce(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		defer mlx.SetNodeCounting(mlx.SetNodeCounting(true))
		x := mlx.FromFloat32s([]float32{1, 2, 3}, 3)
		t.Eval(x)
		nodes := func() int64 { return mlx.EvalTiming().Nodes }
		at, before := nodes(), mlx.EvalTiming()
		c := mlx.Subtract(mlx.Multiply(mlx.Add(x, x), x), x)
		t.Eval(c)
		if got := nodes() - at; got != 3 {
			t.Fatalf("evaluating three ops counted %d nodes", got)
		}
		// The same three by name (MLX's primitive names), and Sub leaves
		// out what the earlier reading already held (x's evaluation).
		want := map[string]int64{"Add": 1, "Multiply": 1, "Subtract": 1}
		if got := mlx.EvalTiming().Sub(before).Ops; !maps.Equal(got, want) {
			t.Fatalf("ops of the three: %v, want %v", got, want)
		}
		at = nodes()
		e := mlx.Add(mlx.Add(c, x), x)
		if err := mlx.AsyncEval(e); err != nil {
			t.Fatal(err)
		}
		if got := nodes() - at; got != 2 {
			t.Fatalf("submitting two ops counted %d nodes", got)
		}
		if got := t.Float32s(e); !slices.Equal(got, []float32{3, 10, 21}) {
			t.Fatalf("e = %v, want [3 10 21] (2x² − x + 2x)", got)
		}
		t.Eval(e)
		if got := nodes() - at; got != 2 {
			t.Fatalf("reading and evaluating submitted arrays counted %d more nodes", got-2)
		}
		mlx.SetNodeCounting(false)
		at = nodes()
		t.Eval(mlx.Add(e, x))
		if got := nodes() - at; got != 0 {
			t.Fatalf("with counting off, %d nodes were counted", got)
		}
	})
}
