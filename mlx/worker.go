package mlx

/*
#include "shim/shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// MLX keeps default streams, command encoders and compile caches per OS
// thread, and Go moves goroutines between threads. So every MLX call runs on
// one worker goroutine that locks its OS thread for its whole life; Do and
// Call hand work to it from any goroutine.

type job struct {
	ctx  context.Context
	fn   func() error
	err  error
	pan  *WorkerPanic
	done chan struct{}
}

var (
	startOnce sync.Once
	jobs      = make(chan *job)
)

// worker-owned state: touched only on the worker thread.
var (
	current       *scope // innermost scope
	defaultStream C.spx_stream
	device        = CPU
	gpuAvailable  bool
)

// WorkerPanic is the value re-raised in the caller of Do or Call when a job
// panicked on the MLX worker; Stack is the worker's stack at the panic.
type WorkerPanic struct {
	Value any
	Stack []byte
}

func (p *WorkerPanic) Error() string {
	return fmt.Sprintf("panic on the MLX worker: %v\n\nworker stack:\n%s", p.Value, p.Stack)
}

// Unwrap gives access to the original panic value when it was an error.
func (p *WorkerPanic) Unwrap() error {
	if err, ok := p.Value.(error); ok {
		return err
	}
	return nil
}

func start() {
	startOnce.Do(func() {
		ready := make(chan struct{})
		go worker(ready)
		<-ready
	})
}

func worker(ready chan struct{}) {
	runtime.LockOSThread() // never unlocked: the thread belongs to MLX
	C.spx_set_worker_thread(true)
	current = nil
	initDevice()
	if submitThreadOn && sub == nil {
		sub = startSubmitter()
	}
	if ready != nil {
		close(ready)
	}
	var running *job
	defer func() {
		// Only runtime.Goexit gets here (t.FailNow on the worker, say): this
		// goroutine and its thread are going away. Fail the job and start a
		// replacement so later jobs still run.
		if running != nil {
			running.err = errors.New("mlx: a job called runtime.Goexit on the MLX worker (inside mlxtest.Run, use its *T's Fatal/Skip, not the outer testing.T's)")
			close(running.done)
			go worker(nil)
		}
	}()
	for j := range jobs {
		running = j
		runJob(j)
		running = nil
		close(j.done)
	}
}

// runJob runs one job in a fresh scope, turning a panic into j.pan.
func runJob(j *job) {
	defer func() {
		if r := recover(); r != nil {
			if wp, ok := r.(*WorkerPanic); ok {
				j.pan = wp
			} else {
				j.pan = &WorkerPanic{Value: r, Stack: debug.Stack()}
			}
		}
	}()
	if j.ctx.Err() != nil {
		j.err = j.ctx.Err()
		return
	}
	j.err = withScope(j.fn)
}

// DeviceEnv is the environment variable that picks the device: "cpu", or
// "gpu" (also "cuda"), in any case. Unset or empty: the GPU when the build
// has one.
const DeviceEnv = "SPECULA_DEVICE"

// deviceFromEnv reads DeviceEnv; set is false when it is unset, empty or
// not a device name (err then says so).
func deviceFromEnv() (d Device, set bool, err error) {
	v := os.Getenv(DeviceEnv)
	switch strings.ToLower(v) {
	case "":
		return GPU, false, nil
	case "cpu":
		return CPU, true, nil
	case "gpu", "cuda":
		return GPU, true, nil
	}
	return GPU, false, fmt.Errorf("%s=%q is not a device (cpu or gpu): using the default, the GPU when this build has one", DeviceEnv, v)
}

// CheckDeviceEnv returns an error when DeviceEnv holds something other than
// a device name, which the worker ignores; programs report it to the user.
func CheckDeviceEnv() error {
	_, _, err := deviceFromEnv()
	return err
}

func initDevice() {
	var avail C.bool
	if C.spx_gpu_available(&avail) == 0 {
		gpuAvailable = bool(avail)
	}
	want, set, _ := deviceFromEnv() // a bad value is the program's to report (CheckDeviceEnv)
	if !set {
		want = GPU
	}
	if want == GPU && !gpuAvailable {
		if set {
			slog.Warn(DeviceEnv + "=" + os.Getenv(DeviceEnv) + " asks for the GPU, but this MLX build has none: running on the CPU (for NVIDIA GPUs, build with `MLX_BACKEND=cuda make deps`)")
		}
		want = CPU
	}
	if err := setDevice(want); err != nil {
		panic("mlx: cannot create the default stream: " + err.Error())
	}
}

// Do runs fn on the MLX worker and waits for it. Arrays created by fn and not
// pinned are freed when fn returns; an MLX error recorded by an op and not
// consumed by Eval is returned. ctx cancels the job only while it is queued.
// A panic in fn is re-raised in the caller as a *WorkerPanic. Do may be called
// from inside a job: fn then runs at once in a nested scope.
func Do(ctx context.Context, fn func() error) error {
	if onWorker() {
		return withScope(fn)
	}
	start()
	j := &job{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-j.done
	if j.pan != nil {
		panic(j.pan)
	}
	return j.err
}

// Call is Do for a function with a result.
func Call[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	var out T
	err := Do(ctx, func() error {
		var err error
		out, err = fn()
		return err
	})
	return out, err
}

// onWorker reports whether the caller runs on the MLX worker thread.
func onWorker() bool {
	return bool(C.spx_on_worker())
}

// mustWorker panics unless called on the worker thread.
func mustWorker() {
	if !onWorker() {
		panic(errOffWorker)
	}
}

// errOffWorker is the panic value of an MLX call made off the worker.
var errOffWorker = errors.New("mlx: called off the MLX worker thread; MLX streams belong to the OS thread that made them, so run MLX work through mlx.Do or mlx.Call")
