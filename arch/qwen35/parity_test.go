package qwen35_test

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// Parity with transformers on the qwen35-tiny fixture, float32 on the CPU.
// Tolerances follow the fixture's README: logits within 1e-3 absolute
// (transformers' own paths differ by up to 7e-5), hidden states within 1e-4
// relative to their magnitude, token ids exactly equal (every recorded
// argmax has a top-1/top-2 gap of at least 0.006).
const (
	logitTol  = 1e-3
	hiddenTol = 1e-4
)

func TestParityPromptForward(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.model(t, nil)
		all := make([]int, m.NumLayers())
		for i := range all {
			all[i] = i
		}
		t.NoErr(m.SetLayerTaps(all))
		caches := m.NewCaches()
		defer freeCaches(caches)
		logits, aux := step(m, caches, f.ref.PromptIDs)
		T, H := len(f.ref.PromptIDs), m.Info().HiddenSize
		t.Shape(logits, 1, T, m.Info().VocabSize)
		t.Shape(aux, 1, T, len(all)*H)

		if d := maxAbs(t, logits, f.refTensor(t, "logits")); d > logitTol {
			t.Errorf("prompt logits: max abs error %.3g > %g", d, logitTol)
		} else {
			t.Logf("prompt logits: max abs error %.3g", d)
		}
		perLayer := f.refTensor(t, "hidden_per_layer") // [layers, T, H]
		for i := range all {
			got := mlx.SliceAxis(aux, 2, i*H, (i+1)*H)
			want := mlx.SliceAxis(perLayer, 0, i, i+1)
			if r := relErr(t, got, want); r > hiddenTol {
				t.Errorf("hidden after layer %d: relative error %.3g > %g", i, r, hiddenTol)
			} else {
				t.Logf("hidden after layer %d: relative error %.3g", i, r)
			}
		}
		// Forward's hidden is the final-normed state: Unembed(hidden) gave
		// the logits above; check it against final_hidden directly too.
		t.NoErr(m.SetLayerTaps(nil))
		caches2 := m.NewCaches()
		defer freeCaches(caches2)
		hidden, aux2 := m.Forward(batch(f.ref.PromptIDs, 0), caches2)
		if aux2 != hidden {
			t.Error("without taps, aux must be the hidden states")
		}
		if r := relErr(t, hidden, f.refTensor(t, "final_hidden")); r > hiddenTol {
			t.Errorf("final hidden: relative error %.3g > %g", r, hiddenTol)
		} else {
			t.Logf("final hidden: relative error %.3g", r)
		}
		// Raw embedding lookups are exact.
		emb := m.TokenEmbeddings(mlx.FromInt32s(f.ref.PromptIDs, 1, T))
		if d := maxAbs(t, emb, f.refTensor(t, "embeddings")); d != 0 {
			t.Errorf("token embeddings differ by %g", d)
		}
		if d := maxAbs(t, m.RawLogits(hidden), m.Unembed(hidden)); d != 0 {
			t.Errorf("RawLogits differs from Unembed by %g", d)
		}
	})
}

func TestParityGreedyContinuation(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.model(t, nil)
		caches := m.NewCaches()
		defer freeCaches(caches)
		stepLogits := f.refTensor(t, "greedy_step_logits") // [32, V]
		logits, _ := step(m, caches, f.ref.PromptIDs)
		mlx.Pin(stepLogits, logits) // survive the per-step sweeps
		defer mlx.Unpin(stepLogits)
		var worst float64
		for k, want := range f.ref.GreedyIDs {
			last := rows(logits, logits.Dim(1)-1, logits.Dim(1))
			if d := maxAbs(t, last, mlx.SliceAxis(stepLogits, 0, k, k+1)); d > logitTol {
				t.Fatalf("step %d: logits max abs error %.3g > %g", k, d, logitTol)
			} else {
				worst = max(worst, d)
			}
			if got := argmaxLast(t, logits); got != want {
				t.Fatalf("greedy token %d: got %d, want %d (continuation so far matches)", k, got, want)
			}
			next, _ := step(m, caches, []int32{want})
			t.Eval(next)
			mlx.Pin(next)
			mlx.Unpin(logits)
			logits = next
			mlx.Sweep()
		}
		mlx.Unpin(logits)
		t.Logf("32 greedy tokens equal; step logits max abs error %.3g", worst)
	})
}

func TestParityMultiTokenChunk(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.model(t, nil)
		caches := m.NewCaches()
		defer freeCaches(caches)
		p := f.ref.PromptIDs
		prefill, _ := step(m, caches, p[:16])
		full := f.refTensor(t, "logits")
		if d := maxAbs(t, prefill, rows(mlx.ExpandDims(full, 0), 0, 16)); d > logitTol {
			t.Errorf("cached prefill of 16: max abs error %.3g > %g", d, logitTol)
		}
		chunk, _ := step(m, caches, p[16:21])
		want := f.refTensor(t, "multi_token_chunk_logits")
		if d := maxAbs(t, chunk, want); d > logitTol {
			t.Errorf("5-token chunk after 16: max abs error %.3g > %g", d, logitTol)
		} else {
			t.Logf("5-token chunk after 16: max abs error %.3g", d)
		}
	})
}

// TestParityScriptedSpecLoop replays reference.json's scripted verify loop:
// each round verifies [t0, d1 … d7] with snapshots scheduled at every draft
// position, accepts the longest prefix matching the target's argmax, and
// rolls every cache back with cache.Commit (delta-net layers by the
// per-token states captured inside the verify forward).
func TestParityScriptedSpecLoop(t *testing.T) {
	f := loadTiny(t)
	loop := f.ref.ScriptedSpecLoop
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.model(t, nil)
		caches := m.NewCaches()
		defer freeCaches(caches)
		verify := f.refTensor(t, "scripted_verify_logits")
		mlx.Pin(verify) // survives the per-round sweeps
		defer mlx.Unpin(verify)
		step(m, caches, f.ref.PromptIDs)
		var emitted []int32
		var lengths []int
		var worst float64
		for r, round := range loop.Rounds {
			if caches[0].Offset() != round.Start {
				t.Fatalf("round %d: caches at %d, want %d", r, caches[0].Offset(), round.Start)
			}
			n := len(round.BlockIDs) - 1
			cache.Schedule(caches, round.Start+1, n)
			logits, _ := step(m, caches, round.BlockIDs)
			want := mlx.SliceAxis(verify, 0, loop.RowOffsets[r], loop.RowOffsets[r+1])
			if d := maxAbs(t, logits, want); d > logitTol {
				t.Fatalf("round %d: verify logits max abs error %.3g > %g", r, d, logitTol)
			} else {
				worst = max(worst, d)
			}
			am := argmaxRows(t, logits)
			a := 0
			for a < n && round.BlockIDs[a+1] == am[a] {
				a++
			}
			cache.Commit(caches, a, n, round.Start+1)
			for _, c := range caches {
				if c.Offset() != round.Start+1+a {
					t.Fatalf("round %d: a cache sits at %d after commit, want %d", r, c.Offset(), round.Start+1+a)
				}
			}
			emitted = append(emitted, round.BlockIDs[1:a+1]...)
			emitted = append(emitted, am[a])
			lengths = append(lengths, a+1)
			mlx.Sweep()
		}
		if fmt.Sprint(lengths) != fmt.Sprint(loop.AcceptanceLengths) {
			t.Errorf("acceptance lengths %v, want %v", lengths, loop.AcceptanceLengths)
		}
		// The loop starts from the prompt's own prediction (t0 of round 0 is
		// greedy_ids[0]), so emitted tokens continue after it.
		got := append([]int32{loop.Rounds[0].BlockIDs[0]}, emitted...)
		if fmt.Sprint(got[:len(loop.EmittedIDs)]) != fmt.Sprint(loop.EmittedIDs) {
			t.Errorf("emitted %v, want %v", got, loop.EmittedIDs)
		}
		t.Logf("acceptance lengths %v; verify logits max abs error %.3g", lengths, worst)
	})
}

// TestParityRollbackCheck is reference.json's rollback_check: prefill 16,
// verify 6 more, keep only the first, then feed prompt[17] and compare with
// the full forward (transformers' own crop gets this wrong by 7.7).
func TestParityRollbackCheck(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.model(t, nil)
		caches := m.NewCaches()
		defer freeCaches(caches)
		p := f.ref.PromptIDs
		step(m, caches, p[:16])
		cache.Schedule(caches, 17, 5)
		step(m, caches, p[16:22])
		cache.Commit(caches, 0, 5, 17)
		logits, _ := step(m, caches, p[17:18])
		want := mlx.SliceAxis(f.refTensor(t, "logits"), 0, 17, 18)
		if d := maxAbs(t, logits, want); d > logitTol {
			t.Errorf("logits after rollback: max abs error %.3g > %g", d, logitTol)
		} else {
			t.Logf("logits after rollback: max abs error %.3g", d)
		}
	})
}
