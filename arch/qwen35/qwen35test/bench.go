package qwen35test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// The benchmark loops the Qwen3.5-family targets share; each architecture
// builds its own random model and calls them.

// processCPU is the CPU time the process has used (every thread, user and
// system). On a shared machine it measures a loop's own work better than
// the wall clock, which also counts the time other processes held the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchIDs returns n token ids below v.
func BenchIDs(n, v int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % v)
	}
	return ids
}

// BenchPrefill measures an n-token prefill of m from empty caches: one
// forward, the last row's logits and the new cache state evaluated. It
// reports tok/s.
func BenchPrefill(b *testing.B, m model.Model, n int) {
	ids := BenchIDs(n, m.Info().VocabSize)
	b.ResetTimer()
	var elapsed time.Duration
	err := mlx.Do(context.Background(), func() error {
		for range b.N {
			caches := m.NewCaches()
			start := time.Now()
			h, _ := m.Forward(Batch(ids, 0), caches)
			logits := m.Unembed(mlx.SliceAxis(h, 1, n-1, n))
			if err := mlx.Eval(append(CacheState(caches), logits)...); err != nil {
				return err
			}
			elapsed += time.Since(start)
			FreeCaches(caches)
			mlx.Sweep()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "tok/s")
}

// BenchDecode measures single-token greedy decoding of m after a
// prompt-token prefill: one forward, the argmax and the cache state
// evaluated per token. It reports tok/s, the CPU time per token (all
// threads) and the graph nodes of one step.
func BenchDecode(b *testing.B, m model.Model, prompt int) {
	ids := BenchIDs(prompt, m.Info().VocabSize)
	var elapsed, cpu time.Duration
	err := mlx.Do(context.Background(), func() error {
		caches := m.NewCaches()
		defer FreeCaches(caches)
		h, _ := m.Forward(Batch(ids, 0), caches)
		tok := mlx.Argmax(m.Unembed(mlx.SliceAxis(h, 1, prompt-1, prompt)), -1, false)
		if err := mlx.Eval(append(CacheState(caches), tok)...); err != nil {
			return err
		}
		next, err := tok.Int32s()
		if err != nil {
			return err
		}
		mlx.Sweep()
		// What one step asks MLX to run: pending graph nodes by primitive.
		h, _ = m.Forward(Batch(next, caches[0].Offset()), caches)
		ops, err := mlx.GraphOps(append(CacheState(caches), mlx.Argmax(m.Unembed(h), -1, false))...)
		if err != nil {
			return err
		}
		total := 0
		for _, n := range ops {
			total += n
		}
		b.Logf("graph nodes of one decode step: %d %v", total, ops)
		b.ReportMetric(float64(total), "nodes/token")
		// Level the caches again: the probe step is not timed.
		tok = mlx.Argmax(m.Unembed(h), -1, false)
		if err := mlx.Eval(append(CacheState(caches), tok)...); err != nil {
			return err
		}
		if next, err = tok.Int32s(); err != nil {
			return err
		}
		mlx.Sweep()
		b.ResetTimer()
		start, cpu0 := time.Now(), processCPU()
		for range b.N {
			h, _ := m.Forward(Batch(next, caches[0].Offset()), caches)
			tok := mlx.Argmax(m.Unembed(h), -1, false)
			if err := mlx.Eval(append(CacheState(caches), tok)...); err != nil {
				return err
			}
			if next, err = tok.Int32s(); err != nil {
				return err
			}
			mlx.Sweep()
		}
		elapsed, cpu = time.Since(start), processCPU()-cpu0
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tok/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/token")
}

// BenchBuild measures the host's graph building of one forward of n rows
// of m after a prompt-token prefill: for n > 1 with rollback points after
// every row but the last (a verification at depth n−1), which it then keeps.
// Only building is timed (cache.Schedule, Forward and the argmax of the
// rows); each forward is then evaluated untimed. It reports build-us, µs
// per forward.
func BenchBuild(b *testing.B, m model.Model, prompt, n int) {
	ids := BenchIDs(prompt+n*(b.N+1), m.Info().VocabSize)
	var build time.Duration
	err := mlx.Do(context.Background(), func() error {
		caches, err := prefilled(m, ids[:prompt])
		defer FreeCaches(caches)
		if err != nil {
			return err
		}
		for i := range b.N + 1 {
			if i == 1 { // the first forward traces the compiled segments
				b.ResetTimer()
				build = 0
			}
			at := caches[0].Offset()
			start := time.Now()
			if n > 1 {
				cache.Schedule(caches, at+1, n-1)
			}
			h, _ := m.Forward(Batch(ids[prompt+i*n:prompt+(i+1)*n], at), caches)
			tok := mlx.Argmax(m.Unembed(h), -1, false)
			build += time.Since(start)
			if err := mlx.Eval(append(CacheState(caches), tok)...); err != nil {
				return err
			}
			if n > 1 {
				cache.Commit(caches, n-1, n-1, at+1)
			}
			mlx.Sweep()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(build.Microseconds())/float64(b.N), "build-us")
}

// prefilled returns fresh caches of m holding the prompt ids, evaluated
// (free them with FreeCaches, also after an error).
func prefilled(m model.Model, ids []int32) ([]cache.Cache, error) {
	caches := m.NewCaches()
	h, _ := m.Forward(Batch(ids, 0), caches)
	if err := mlx.Eval(append(CacheState(caches), h)...); err != nil {
		return caches, err
	}
	mlx.Sweep()
	return caches, nil
}

// CacheState lists the arrays of every cache, in layer order.
func CacheState(caches []cache.Cache) []*mlx.Array {
	var out []*mlx.Array
	for _, c := range caches {
		out = append(out, c.State()...)
	}
	return out
}

// BenchVerify measures the target's side of a speculative round at depth
// n−1 after a prompt-token prefill: rollback points scheduled for the n−1
// drafts, one forward over n tokens, the argmax of every row and the cache
// state evaluated, then all drafts kept (as when all are accepted). Compare
// its time with BenchDecode's: the ideal speedup at depth n−1 is
// n × decode time / verify time. It reports ms/round, the CPU time per
// round (all threads) and the graph nodes
// of one round.
func BenchVerify(b *testing.B, m model.Model, prompt, n int) {
	ids := BenchIDs(prompt+n*(b.N+1), m.Info().VocabSize)
	var elapsed, cpu time.Duration
	err := mlx.Do(context.Background(), func() error {
		caches, err := prefilled(m, ids[:prompt])
		defer FreeCaches(caches)
		if err != nil {
			return err
		}
		round := func(i int, probe bool) error {
			at := caches[0].Offset()
			cache.Schedule(caches, at+1, n-1)
			h, _ := m.Forward(Batch(ids[prompt+i*n:prompt+(i+1)*n], at), caches)
			tok := mlx.Argmax(m.Unembed(h), -1, false)
			if probe {
				ops, err := mlx.GraphOps(append(CacheState(caches), tok)...)
				if err != nil {
					return err
				}
				total := 0
				for _, k := range ops {
					total += k
				}
				// Pending nodes only: on the GPU the verification hands its
				// segments over as they are built (SPECULA_EARLY_SUBMIT), so
				// this counts the last one; SPECULA_EARLY_SUBMIT=0 counts all.
				b.Logf("graph nodes of one %d-token verification: %d %v", n, total, ops)
				b.ReportMetric(float64(total), "nodes/round")
			}
			if err := mlx.Eval(append(CacheState(caches), tok)...); err != nil {
				return err
			}
			if _, err := tok.Int32s(); err != nil {
				return err
			}
			cache.Commit(caches, n-1, n-1, at+1)
			mlx.Sweep()
			return nil
		}
		if err := round(0, true); err != nil { // warm-up and graph probe
			return err
		}
		b.ResetTimer()
		start, cpu0 := time.Now(), processCPU()
		for i := range b.N {
			if err := round(i+1, false); err != nil {
				return err
			}
		}
		elapsed, cpu = time.Since(start), processCPU()-cpu0
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/round")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/round")
}
