// Package mlxtest runs test code on the MLX worker thread.
//
// MLX work must run on the worker (package mlx, "Threads"), but testing.T's
// FailNow calls runtime.Goexit, which must not run on the worker. Run hands
// the test function a *T whose Fatal and FailNow unwind with a panic that Run
// turns back into FailNow on the test's own goroutine.
package mlxtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
)

// T is the testing.TB given to functions running on the MLX worker. Its
// Fatal, Fatalf, FailNow, Skip, Skipf and SkipNow are safe there.
type T struct {
	testing.TB
}

// failNow unwinds a test function on the worker.
type failNow struct{ skip bool }

// FailNow marks the test failed and stops the function.
func (t *T) FailNow() {
	t.TB.Fail()
	panic(failNow{})
}

// Fatal logs args and stops the function.
func (t *T) Fatal(args ...any) {
	t.TB.Helper()
	t.TB.Error(args...)
	panic(failNow{})
}

// Fatalf logs a formatted message and stops the function.
func (t *T) Fatalf(format string, args ...any) {
	t.TB.Helper()
	t.TB.Errorf(format, args...)
	panic(failNow{})
}

// SkipNow stops the function and marks the test skipped.
func (t *T) SkipNow() { panic(failNow{skip: true}) }

// Skip logs args and skips.
func (t *T) Skip(args ...any) {
	t.TB.Log(args...)
	t.SkipNow()
}

// Skipf logs a formatted message and skips.
func (t *T) Skipf(format string, args ...any) {
	t.TB.Logf(format, args...)
	t.SkipNow()
}

// NoErr fails the test at once if err is not nil.
func (t *T) NoErr(err error) {
	t.TB.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// Run runs fn on the MLX worker inside its own scope. An MLX error left
// unconsumed when fn returns fails the test.
func Run(t testing.TB, fn func(t *T)) {
	t.Helper()
	tt := &T{TB: t}
	var stop *failNow
	err := func() (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			var wp *mlx.WorkerPanic
			if e, ok := r.(error); ok && errors.As(e, &wp) {
				if f, ok := wp.Value.(failNow); ok {
					stop = &f
					return
				}
			}
			panic(r)
		}()
		return mlx.Do(context.Background(), func() error {
			fn(tt)
			return nil
		})
	}()
	if stop != nil {
		if stop.skip {
			t.SkipNow()
		}
		t.FailNow()
	}
	if err != nil {
		t.Fatalf("mlx error left unconsumed by the test: %v", err)
	}
}

// RunOnCPU is Run with the CPU as the device of new ops, the worker's device
// restored afterwards: for tests of CPU paths (the BLAS, the shim's CPU
// kernels) and of logic whose tiny operands a GPU build's kernels do not
// take, which would otherwise run on the GPU of a CUDA build.
func RunOnCPU(t testing.TB, fn func(t *T)) {
	t.Helper()
	Run(t, func(t *T) {
		prev := mlx.CurrentDevice()
		t.NoErr(mlx.SetDevice(mlx.CPU))
		defer func() { t.NoErr(mlx.SetDevice(prev)) }()
		fn(t)
	})
}

// Float32s evaluates a and returns its values, failing the test on error.
func (t *T) Float32s(a *mlx.Array) []float32 {
	t.TB.Helper()
	v, err := a.Float32s()
	if err != nil {
		t.Fatalf("reading %v: %v", a, err)
	}
	return v
}

// Int32s evaluates a and returns its values as int32, failing on error.
func (t *T) Int32s(a *mlx.Array) []int32 {
	t.TB.Helper()
	v, err := a.Int32s()
	if err != nil {
		t.Fatalf("reading %v: %v", a, err)
	}
	return v
}

// Eval evaluates the arrays, failing the test on error.
func (t *T) Eval(arrays ...*mlx.Array) {
	t.TB.Helper()
	if err := mlx.Eval(arrays...); err != nil {
		t.Fatalf("eval: %v", err)
	}
}

// BenchEvals is a benchmark's timed loop on the worker: each iteration
// builds a graph with build, evaluates what it returns and sweeps the scope
// (so inputs that must survive are pinned). One untimed iteration goes
// first, for MLX's compilations and traces. t must be a benchmark's.
func (t *T) BenchEvals(build func() []*mlx.Array) {
	b, ok := t.TB.(*testing.B)
	if !ok {
		panic("mlxtest: BenchEvals outside a benchmark")
	}
	run := func() {
		t.Eval(build()...)
		mlx.Sweep()
	}
	run()
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
}

// Shape fails the test unless a has the given shape.
func (t *T) Shape(a *mlx.Array, want ...int) {
	t.TB.Helper()
	got := a.Shape()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("shape %v, want %v", got, want)
	}
}

// NearPerGroup fails the test unless got and want agree within rel times
// the largest |want| of each run of group consecutive values (a head, a
// row): a bound relative to the run's scale, since one per element would
// fail where the values cancel to near zero. what names the values.
func (t *T) NearPerGroup(what string, got, want []float32, group int, rel float64) {
	t.TB.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for lo := 0; lo < len(want); lo += group {
		scale := 0.0
		for _, w := range want[lo:min(lo+group, len(want))] {
			scale = math.Max(scale, math.Abs(float64(w)))
		}
		for i := lo; i < min(lo+group, len(want)); i++ {
			if d := math.Abs(float64(got[i] - want[i])); !(d <= rel*scale) {
				t.Fatalf("%s[%d] = %g, want %g (largest of its run %g)", what, i, got[i], want[i], scale)
			}
		}
	}
}

// SameBits fails the test unless got and want hold the same float32 bits
// (bfloat16 and float16 values widen to float32 exactly, so this compares
// them bit for bit too); what names the values in the message.
func (t *T) SameBits(what string, got, want []float32) {
	t.TB.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %g, want %g (bit for bit)", what, i, got[i], want[i])
		}
	}
}
