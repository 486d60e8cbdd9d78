package mlx_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
)

// The first CPU evaluation after a new trace waits for another process's
// kernel build: here the test itself holds the build lock.
func TestFirstEvalAfterTraceWaitsForTheKernelBuildLock(t *testing.T) {
	if !fusionExpected() {
		t.Skip("compilation is off here (SPECULA_COMPILE=0, or a CPU without g++)")
	}
	if !onCPU() {
		t.Skip("the kernel-build lock is for MLX's CPU kernels")
	}
	body := func(in []*mlx.Array) []*mlx.Array {
		return []*mlx.Array{mlx.Exp(mlx.Multiply(in[0], mlx.Sigmoid(in[0])))}
	}
	run := func(f *mlx.Compiled) error {
		return mlx.Do(context.Background(), func() error {
			return mlx.Eval(f.Call(mlx.Ones(mlx.Float32, 4))...)
		})
	}
	// Build (or load) the kernel once, so the guarded evaluation below is fast.
	if err := run(mlx.Compile("lock_probe", 1, body)); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(os.TempDir(), "mlx", mlx.Version(), "cpu")
	f, err := os.OpenFile(filepath.Join(dir, ".specula-build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(mlx.Compile("lock_probe", 1, body)) }() // a new trace
	select {
	case err := <-done:
		t.Fatalf("the first evaluation after a trace ran while the build lock was held (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the evaluation did not finish after the lock was released")
	}
}
