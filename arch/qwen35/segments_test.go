package qwen35_test

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// TestSegmentsEqualLayerByLayer: the forward as compiled segments of layers
// (segments.go) gives the values of the forward built op by op through what
// a speculative decoder asks of the target — a prefill, a verification
// block with a rollback point at every position and a commit that keeps
// part of it, then single-token steps — with layer taps (the last layer's
// among them), for the logits, the taps and every cache state. On the CPU
// the values are equal to the bit. On the GPU MLX fuses a compiled
// segment's elementwise ops into kernels that NVRTC builds with multiply-add
// contraction, so a fused a·b+c rounds once where the op-by-op graph rounds
// twice: there the values agree within the path tolerances (the H200
// measured 9.2e-6 on the logits, float32). It also checks that the segments
// were compiled, so it cannot pass by running the same code twice.
func TestSegmentsEqualLayerByLayer(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.CompileEnabled() {
			t.Skip("SPECULA_COMPILE=0: nothing is compiled")
		}
		m := tiny(t, f, nil)
		last := m.NumLayers() - 1
		t.NoErr(m.SetLayerTaps([]int{1, last}))
		run := func(off bool) (logits, aux *mlx.Array, caches []cache.Cache) {
			was := qwen35.SetSegmentsOff(off)
			defer qwen35.SetSegmentsOff(was)
			return decodeLikeSpeculation(t, m, f.Ref.PromptIDs)
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
		qwen35test.CompareStates(t, "segments vs layer by layer", gotCaches, wantCaches)
		if mlx.CurrentDevice() == mlx.GPU {
			qwen35test.Within(t, "logits, max abs difference", maxAbs(t, gotLogits, wantLogits), pathLogitTol)
			qwen35test.Within(t, "taps, relative difference", qwen35test.RelErr(t, gotAux, wantAux), qwen35test.PathStateTol)
			return
		}
		sameBits(t, gotLogits, wantLogits, gotAux, wantAux, gotCaches, wantCaches)
	})
}

// decodeLikeSpeculation runs m through what a speculative decoder asks of
// the target — a prefill, a verification block of 6 with a rollback point
// at every position and a commit that keeps 3 of it, then 5 single-token
// steps — and returns the logits and taps of every forward, concatenated,
// and the caches.
func decodeLikeSpeculation(t *mlxtest.T, m *qwen35.Model, p []int32) (logits, aux *mlx.Array, caches []cache.Cache) {
	const prefix, k, keep, steps = 9, 6, 3, 5
	caches = m.NewCaches()
	var ls, as []*mlx.Array
	forward := func(ids []int32) *mlx.Array {
		l, a := step(m, caches, ids)
		ls, as = append(ls, l), append(as, a)
		t.Eval(append([]*mlx.Array{l, a}, qwen35test.CacheState(caches)...)...)
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

// sameBits fails the test unless two runs' logits, taps and every cache
// state are equal to the bit.
func sameBits(t *mlxtest.T, gotLogits, wantLogits, gotAux, wantAux *mlx.Array, gotCaches, wantCaches []cache.Cache) {
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
}

// A verification handed to the device segment by segment (earlySubmit)
// computes what one evaluation of the whole forward does, to the bit, on
// any device (the same graph and kernels, evaluated in parts), through the
// same prefill, verification, commit and steps as above; the prefill of 9
// and the verification did go out in parts (one submission per segment but
// the last: the tiny model has two segments), the steps did not.
func TestEarlySubmitKeepsTheValues(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		before := qwen35.EarlySubmits()
		switchKeepsTheBits(t, tiny(t, f, nil), f.Ref.PromptIDs, qwen35.SetEarlySubmit)
		if n := qwen35.EarlySubmits() - before; n != 2 {
			t.Fatalf("%d early submissions, want 2 (the first segment of the prefill and of the verification)", n)
		}
	})
}

// switchKeepsTheBits decodes prompt as speculation does (decodeLikeSpeculation,
// with taps on two layers) with a switch off and then on, and holds the two
// runs' logits, taps and caches to the same bits. set turns the switch and
// returns what restores it.
func switchKeepsTheBits(t *mlxtest.T, m *qwen35.Model, prompt []int32, set func(bool) func()) {
	t.NoErr(m.SetLayerTaps([]int{1, m.NumLayers() - 1}))
	run := func(on bool) (logits, aux *mlx.Array, caches []cache.Cache) {
		defer set(on)()
		return decodeLikeSpeculation(t, m, prompt)
	}
	wantLogits, wantAux, wantCaches := run(false)
	gotLogits, gotAux, gotCaches := run(true)
	defer func() {
		freeCaches(wantCaches)
		freeCaches(gotCaches)
	}()
	sameBits(t, gotLogits, wantLogits, gotAux, wantAux, gotCaches, wantCaches)
}

// A verification whose delta-net layers hand their interior states over as
// the rows of every state (what the GPU's scan kernel emits, forced here on
// any device) restores, after a partial commit, what one array per rollback
// point does, to the bit: the same prefill, verification, commit and steps
// as above.
func TestDeltaRowsKeepTheValues(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		switchKeepsTheBits(t, tiny(t, f, nil), f.Ref.PromptIDs, qwen35.SetForceDeltaRows)
	})
}

// The compiled segments hold the weights and taps they were traced with, so
// loading other weights or choosing other taps must retrace them: after a
// step has compiled them, the same model given scaled weights, then other
// taps, computes what a fresh model given those does.
func TestSegmentsFollowNewWeightsAndTaps(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := f.Ref.PromptIDs[:5]
		run := func(m *qwen35.Model) (logits, aux *mlx.Array) {
			caches := m.NewCaches()
			defer freeCaches(caches)
			step(m, caches, p[:4])
			logits, aux = step(m, caches, p[4:5])
			t.Eval(logits, aux)
			mlx.Pin(logits, aux)
			return logits, aux
		}
		scaled := func() map[string]*mlx.Array {
			ts := f.Tensors(t)
			for name, a := range ts {
				if a.NDim() == 2 && a.DType() == mlx.Float32 {
					ts[name] = mlx.MultiplyScalar(a, 0.5)
				}
			}
			return ts
		}
		m := tiny(t, f, nil)
		before, _ := run(m)
		t.NoErr(m.LoadWeights(scaled()))
		got, _ := run(m)
		want, _ := run(tiny(t, f, scaled()))
		if d := maxAbs(t, got, before); d == 0 {
			t.Fatalf("new weights left the logits as they were")
		}
		if d := maxAbs(t, got, want); d != 0 {
			t.Fatalf("after LoadWeights the logits differ from a fresh model's by %g", d)
		}
		t.NoErr(m.SetLayerTaps([]int{0, 2}))
		_, gotAux := run(m)
		fresh := tiny(t, f, scaled())
		t.NoErr(fresh.SetLayerTaps([]int{0, 2}))
		_, wantAux := run(fresh)
		if !slices.Equal(gotAux.Shape(), wantAux.Shape()) {
			t.Fatalf("taps [0 2]: aux %v, a fresh model's %v", gotAux.Shape(), wantAux.Shape())
		}
		if d := maxAbs(t, gotAux, wantAux); d != 0 {
			t.Fatalf("after SetLayerTaps the taps differ from a fresh model's by %g", d)
		}
	})
}
