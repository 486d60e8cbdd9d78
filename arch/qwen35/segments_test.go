package qwen35_test

import (
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// TestSegmentsEqualLayerByLayer: the forward as compiled segments of layers
// (segments.go) gives the values of the forward built op by op, to the bit,
// through what a speculative decoder asks of the target — a prefill, a
// verification block with a rollback point at every position and a commit
// that keeps part of it, then single-token steps — with layer taps (the
// last layer's among them), for the logits, the taps and every cache state.
// It also checks that the segments were compiled, so it cannot pass by
// running the same code twice.
func TestSegmentsEqualLayerByLayer(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.CompileEnabled() {
			t.Skip("SPECULA_COMPILE=0: nothing is compiled")
		}
		m := tiny(t, f, nil)
		last := m.NumLayers() - 1
		t.NoErr(m.SetLayerTaps([]int{1, last}))
		p := f.Ref.PromptIDs
		const prefix, k, keep, steps = 9, 6, 3, 5
		run := func(off bool) (logits, aux *mlx.Array, caches []cache.Cache) {
			was := qwen35.SetSegmentsOff(off)
			defer qwen35.SetSegmentsOff(was)
			caches = m.NewCaches()
			var ls, as []*mlx.Array
			forward := func(ids []int32) *mlx.Array {
				l, a := step(m, caches, ids)
				ls, as = append(ls, l), append(as, a)
				t.Eval(append([]*mlx.Array{l, a}, cacheStates(caches)...)...)
				return l
			}
			forward(p[:prefix])
			cache.Schedule(caches, prefix, k)
			forward(p[prefix : prefix+k])
			cache.Commit(caches, keep, k, prefix)
			tok := p[prefix+keep]
			for range steps {
				tok = argmaxLast(t, forward([]int32{tok}))
			}
			return mlx.Concatenate(1, ls...), mlx.Concatenate(1, as...), caches
		}
		wantLogits, wantAux, wantCaches := run(true)
		if n := qwen35.CompiledSegments(m); n != 0 {
			t.Fatalf("%d compiled segments with the segments off", n)
		}
		gotLogits, gotAux, gotCaches := run(false)
		// Two segments (3 delta-net layers and the first half of the
		// attention layer; its second half and the final norm), the first
		// compiled once without splits (prefill and steps) and once with the
		// verification's.
		if n := qwen35.CompiledSegments(m); n != 3 {
			t.Fatalf("%d compiled segment functions after a prefill, a verification and steps, want 3", n)
		}
		defer func() {
			freeCaches(wantCaches)
			freeCaches(gotCaches)
		}()
		if d := maxAbs(t, gotLogits, wantLogits); d != 0 {
			t.Fatalf("logits differ by up to %g", d)
		}
		if d := maxAbs(t, gotAux, wantAux); d != 0 {
			t.Fatalf("taps differ by up to %g", d)
		}
		for i := range gotCaches {
			g, w := gotCaches[i].State(), wantCaches[i].State()
			for j := range g {
				if d := maxAbs(t, g[j], w[j]); d != 0 {
					t.Fatalf("layer %d, cache state %d differs by up to %g", i, j, d)
				}
			}
		}
		qwen35test.CompareStates(t, "segments vs layer by layer", gotCaches, wantCaches)
	})
}

// cacheStates lists every cache's arrays.
func cacheStates(caches []cache.Cache) []*mlx.Array {
	var out []*mlx.Array
	for _, c := range caches {
		out = append(out, c.State()...)
	}
	return out
}
