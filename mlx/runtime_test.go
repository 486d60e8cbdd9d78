package mlx_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

func TestShapeErrorIsReturnedNotFatal(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		a := mlx.Zeros(mlx.Float32, 2, 3)
		b := mlx.Zeros(mlx.Float32, 4, 5)
		bad := mlx.Matmul(a, b) // inner dimensions differ
		if bad.Valid() {
			t.Fatalf("matmul of [2,3]·[4,5] returned a valid array")
		}
		// Ops on the failed result stay empty and cost nothing.
		worse := mlx.Exp(mlx.Add(bad, a))
		if worse.Valid() {
			t.Fatalf("op on an empty array returned a valid array")
		}
		err := mlx.Eval(worse)
		var merr *mlx.Error
		if !errors.As(err, &merr) || !strings.Contains(err.Error(), "matmul") {
			t.Fatalf("Eval error = %v, want the matmul shape error", err)
		}
		// The error is consumed: the process and the worker keep going.
		if err := mlx.Eval(mlx.Add(a, a)); err != nil {
			t.Fatalf("Eval after a consumed error: %v", err)
		}
	})
}

func TestBadDtypeAndReshapeErrors(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := mlx.Reshape(mlx.Zeros(mlx.Float32, 6), 4, 2)
		if err := mlx.Eval(r); err == nil {
			t.Fatalf("reshape of 6 elements to [4,2] did not fail")
		}
		_, err := mlx.Zeros(mlx.Float32, 2).Float32s()
		t.NoErr(err)
		// A bitwise-only op on floats fails with an error, not an abort.
		x := mlx.Remainder(mlx.FromBools([]bool{true}), mlx.FromBools([]bool{false}))
		_ = mlx.Eval(x) // either outcome is fine; the process must survive
	})
}

func TestUnconsumedErrorEndsDo(t *testing.T) {
	err := mlx.Do(context.Background(), func() error {
		_ = mlx.Matmul(mlx.Zeros(mlx.Float32, 2, 3), mlx.Zeros(mlx.Float32, 2, 3))
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "mlx:") {
		t.Fatalf("Do returned %v, want the recorded MLX error", err)
	}
}

func TestNoGPUBackendMessage(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.GPUAvailable() {
			t.Logf("this MLX build has a GPU backend; the message is not reachable")
			return
		}
		err := mlx.SetDevice(mlx.GPU)
		if err == nil || !strings.Contains(err.Error(), "no GPU backend") {
			t.Fatalf("SetDevice(GPU) = %v, want a 'no GPU backend' error", err)
		}
		if mlx.CurrentDevice() != mlx.CPU {
			t.Fatalf("device changed after a failed SetDevice")
		}
	})
}

func TestCallOffWorkerPanicsWithTheRule(t *testing.T) {
	// This test's goroutine is not the worker. Make sure the worker exists.
	t.Cleanup(func() {})
	_ = mlx.Do(context.Background(), func() error { return nil })
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("an MLX call off the worker did not panic")
		}
		if !strings.Contains(fmt.Sprint(r), "MLX worker") {
			t.Fatalf("panic %q does not name the thread rule", r)
		}
	}()
	mlx.Zeros(mlx.Float32, 1)
}

func TestPanicInJobIsReraisedWithWorkerStack(t *testing.T) {
	defer func() {
		r := recover()
		wp, ok := r.(*mlx.WorkerPanic)
		if !ok {
			t.Fatalf("recovered %T %v, want *mlx.WorkerPanic", r, r)
		}
		if wp.Value != "boom" || !strings.Contains(string(wp.Stack), "runtime_test.go") {
			t.Fatalf("worker panic %v lacks the value or the worker stack", wp.Value)
		}
		// The worker survives a panicking job.
		if err := mlx.Do(context.Background(), func() error { return mlx.Eval(mlx.Zeros(mlx.Float32, 1)) }); err != nil {
			t.Fatalf("worker broken after a panic: %v", err)
		}
	}()
	_ = mlx.Do(context.Background(), func() error { panic("boom") })
}

func TestCancelledContextBeforeQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := mlx.Do(ctx, func() error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do with a cancelled context: err %v, ran %v", err, ran)
	}
}

func TestManyGoroutines(t *testing.T) {
	const workers, rounds = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				want := float32(w*1000 + r)
				got, err := mlx.Call(context.Background(), func() (float32, error) {
					a := mlx.Full(float64(want), mlx.Float32, 4, 4)
					s := mlx.Sum(mlx.Multiply(a, mlx.Ones(mlx.Float32, 4, 4)), false)
					return s.Item()
				})
				if err != nil {
					errs <- err
					return
				}
				if got != 16*want {
					errs <- fmt.Errorf("goroutine %d round %d: got %g, want %g", w, r, got, 16*want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestNestedDoRunsInline(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		outer := mlx.Ones(mlx.Float32, 2)
		mlx.Pin(outer)
		defer mlx.Free(outer)
		err := mlx.Do(context.Background(), func() error {
			return mlx.Eval(mlx.Add(outer, outer))
		})
		t.NoErr(err)
	})
}

func TestSweepKeepsOnlyPinned(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		mlx.Sweep()
		base := mlx.LiveArrays()
		keep := mlx.Full(2, mlx.Float32, 3)
		_ = mlx.Add(keep, mlx.Ones(mlx.Float32, 3))
		mlx.Pin(keep)
		if got := mlx.LiveArrays(); got != base+3 {
			t.Fatalf("live arrays %d, want %d", got, base+3)
		}
		mlx.Sweep()
		if got := mlx.LiveArrays(); got != base+1 {
			t.Fatalf("after sweep: live arrays %d, want %d (only the pinned one)", got, base+1)
		}
		v := t.Float32s(keep)
		if v[0] != 2 {
			t.Fatalf("pinned array lost its value: %v", v)
		}
		mlx.Unpin(keep)
		mlx.Sweep()
		if got := mlx.LiveArrays(); got != base {
			t.Fatalf("after unpin and sweep: live arrays %d, want %d", got, base)
		}
	})
}

func TestFreedArrayPanics(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		a := mlx.Ones(mlx.Float32, 2)
		mlx.Free(a)
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "freed") {
				t.Fatalf("use of a freed array: recovered %v", r)
			}
		}()
		mlx.Exp(a)
	})
}

func TestTenThousandGraphsKeepMemoryFlat(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		step := func(i int) {
			x := mlx.Full(float64(i%7), mlx.Float32, 64, 64)
			y := mlx.Softmax(mlx.Matmul(x, mlx.Transpose(x)), true, -1)
			if err := mlx.Eval(mlx.Sum(y, false)); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			mlx.Sweep()
		}
		for i := range 100 { // warm the buffer cache
			step(i)
		}
		mlx.ClearCache()
		liveBefore, memBefore := mlx.LiveArrays(), mlx.ActiveMemory()
		for i := range 10000 {
			step(i)
		}
		mlx.ClearCache()
		liveAfter, memAfter := mlx.LiveArrays(), mlx.ActiveMemory()
		if liveAfter != liveBefore {
			t.Fatalf("live arrays grew from %d to %d over 10,000 graphs", liveBefore, liveAfter)
		}
		if memAfter > memBefore+64<<10 {
			t.Fatalf("active memory grew from %d to %d bytes over 10,000 graphs", memBefore, memAfter)
		}
		t.Logf("active memory %d -> %d bytes, live arrays %d", memBefore, memAfter, liveAfter)
	})
}

func TestAsyncEvalThenRead(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := mlx.Arange(0, 100, 1, mlx.Float32)
		s := mlx.Sum(mlx.Square(x), false)
		t.NoErr(mlx.AsyncEval(s))
		v, err := s.Item()
		t.NoErr(err)
		if want := float32(328350); v != want {
			t.Fatalf("sum of squares %g, want %g", v, want)
		}
	})
}

func TestRandomKeysAreReproducible(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		a := t.Float32s(mlx.RandomUniform(mlx.RandomKey(42), mlx.Float32, 1000))
		b := t.Float32s(mlx.RandomUniform(mlx.RandomKey(42), mlx.Float32, 1000))
		c := t.Float32s(mlx.RandomUniform(mlx.RandomKey(43), mlx.Float32, 1000))
		var mean float64
		same := true
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("same key gave different draws at %d", i)
			}
			if a[i] < 0 || a[i] >= 1 {
				t.Fatalf("uniform draw %g outside [0,1)", a[i])
			}
			same = same && a[i] == c[i]
			mean += float64(a[i])
		}
		mean /= 1000
		if same || math.Abs(mean-0.5) > 0.05 {
			t.Fatalf("seed 43 equals seed 42 (%v) or mean %g is far from 0.5", same, mean)
		}
		keys := mlx.RandomSplit(mlx.RandomKey(1), 3)
		t.Shape(keys, 3, 2)
		n := t.Float32s(mlx.RandomNormal(mlx.RandomKey(7), mlx.Float32, 2, 0.5, 4000))
		var m, v float64
		for _, x := range n {
			m += float64(x)
		}
		m /= 4000
		for _, x := range n {
			v += (float64(x) - m) * (float64(x) - m)
		}
		v /= 4000
		if math.Abs(m-2) > 0.05 || math.Abs(v-0.25) > 0.03 {
			t.Fatalf("normal(2, 0.5): mean %g variance %g", m, v)
		}
	})
}

func TestCategoricalMatchesDistribution(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		probs := []float64{0.1, 0.2, 0.3, 0.4}
		const draws = 20000
		logits := make([]float32, 0, draws*4)
		for range draws {
			for _, p := range probs {
				logits = append(logits, float32(math.Log(p)))
			}
		}
		got := t.Int32s(mlx.RandomCategorical(mlx.RandomKey(5), mlx.FromFloat32s(logits, draws, 4), -1))
		counts := make([]float64, 4)
		for _, g := range got {
			counts[g]++
		}
		var chi2 float64
		for i, p := range probs {
			e := p * draws
			chi2 += (counts[i] - e) * (counts[i] - e) / e
		}
		// 3 degrees of freedom: p = 0.001 at 16.27.
		if chi2 > 16.27 {
			t.Fatalf("categorical counts %v: chi-square %g exceeds 16.27", counts, chi2)
		}
	})
}

func TestSafetensorsRoundTripThroughMLX(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	mlxtest.Run(t, func(t *mlxtest.T) {
		w := mlx.FromFloat32s([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		b := mlx.AsType(mlx.FromFloat32s([]float32{0.5, -1}), mlx.BFloat16)
		t.NoErr(mlx.SaveSafetensors(path, map[string]*mlx.Array{"w": w, "b": b}, map[string]string{"format": "mlx"}))
		got, err := mlx.LoadSafetensors(path)
		t.NoErr(err)
		if len(got) != 2 || got["b"].DType() != mlx.BFloat16 {
			t.Fatalf("loaded %v", got)
		}
		t.Shape(got["w"], 2, 3)
		if v := t.Float32s(got["w"]); v[5] != 6 {
			t.Fatalf("w = %v", v)
		}
		if v := t.Float32s(got["b"]); v[0] != 0.5 || v[1] != -1 {
			t.Fatalf("b = %v", v)
		}
	})
}

// A job that calls runtime.Goexit (the outer testing.T's FailNow) fails with
// a clear error instead of killing the worker for good.
func TestGoexitInJobDoesNotKillTheWorker(t *testing.T) {
	err := mlx.Do(context.Background(), func() error {
		runtime.Goexit()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Fatalf("Do returned %v, want the Goexit error", err)
	}
	got, err := mlx.Call(context.Background(), func() (float32, error) {
		return mlx.Sum(mlx.Ones(mlx.Float32, 3), false).Item()
	})
	if err != nil || got != 3 {
		t.Fatalf("replacement worker: %v, %v", got, err)
	}
}

// The views Linear keeps with a weight (its transpose, and that as a batch
// of one) are released with the weight, whether it is swept after Unpin or
// freed at once: no handle outlives it.
func TestLinearViewsGoWithTheirWeight(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		mlx.Sweep()
		base := mlx.LiveArrays()
		for _, free := range []bool{false, true} {
			w := mlx.Ones(mlx.Float32, 4, 3)
			t.NoErr(mlx.Eval(w))
			mlx.Pin(w)
			t.NoErr(mlx.Eval(mlx.Linear(mlx.Ones(mlx.Float32, 1, 2, 3), w), mlx.Linear(mlx.Ones(mlx.Float32, 2, 3), w)))
			mlx.Sweep()
			if got := mlx.LiveArrays(); got != base+3 {
				t.Fatalf("a weight and its two views: %d live arrays, want %d", got-base, 3)
			}
			if free {
				mlx.Free(w)
			} else {
				mlx.Unpin(w)
				mlx.Sweep()
			}
			if got := mlx.LiveArrays(); got != base {
				t.Fatalf("after releasing the weight (free %v): %d arrays still live", free, got-base)
			}
		}
	})
}
