package mlx

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// MLX builds the fused CPU kernels of compiled functions with the system C++
// compiler into a folder shared by every process of the user
// ($TMPDIR/mlx/<version>/cpu), and nothing stops two processes from building
// the same kernel at once: one can read the other's half-written source or
// load its half-linked library, and its evaluation fails. That happens on a
// fresh machine when test binaries, or a host and its plugin, start
// together. So an evaluation on the CPU that may build kernels (the first
// after a new trace) holds an exclusive lock on a file in that folder; the
// second process then finds the finished library and loads it.

// pendingTraces counts traces since the last guarded evaluation
// (worker-owned).
var pendingTraces int

// jitLockWait bounds the wait for another process's kernel build; past it
// the evaluation goes ahead unlocked rather than hang.
const jitLockWait = 2 * time.Minute

// withJITLock runs eval under the kernel-build lock when it may build CPU
// kernels.
func withJITLock(eval func() error) error {
	return lockedIf(needJITLock(), eval)
}

// needJITLock reports whether the next evaluation may build CPU kernels (the
// first after a new trace), and counts the traces as handled (worker-owned
// state: the submitter of submit.go is told the answer).
func needJITLock() bool {
	if device != CPU || pendingTraces == 0 || compileDisabled {
		return false
	}
	pendingTraces = 0
	return true
}

// lockedIf runs eval, under the kernel-build lock when lock is set.
func lockedIf(lock bool, eval func() error) error {
	if !lock {
		return eval()
	}
	unlock := lockJITFolder()
	defer unlock()
	return eval()
}

// lockJITFolder takes the lock, or gives up quietly: the lock only narrows
// a race, so failing to take it must not fail the evaluation.
func lockJITFolder() (unlock func()) {
	dir := cpuKernelDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() {}
	}
	f, err := os.OpenFile(filepath.Join(dir, ".specula-build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	deadline := time.Now().Add(jitLockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			return func() {}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CPUKernels describes MLX's fused CPU kernels on this machine, for a
// program's first-run notice: the folder MLX builds them in, whether it
// already holds some (built by an earlier run), and whether the g++ MLX
// builds them with is on PATH (without it compiled functions run op by op).
type CPUKernels struct {
	Dir      string
	Cached   bool
	Compiler bool
}

// CPUKernelState reports on the CPU kernel folder; ok is false when no
// kernels will be built here (another device, or compilation is off).
func CPUKernelState() (k CPUKernels, ok bool) {
	if compileDisabled {
		return k, false
	}
	dev, err := Call(context.Background(), func() (Device, error) { return CurrentDevice(), nil })
	if err != nil || dev != CPU {
		return k, false
	}
	k.Dir = cpuKernelDir()
	libs, _ := filepath.Glob(filepath.Join(k.Dir, "*.so"))
	k.Cached = len(libs) > 0
	_, err = exec.LookPath("g++")
	k.Compiler = err == nil
	return k, true
}

// cpuKernelDir is where MLX builds and keeps its CPU kernels (it follows
// $TMPDIR at each build, as os.TempDir does).
func cpuKernelDir() string { return filepath.Join(os.TempDir(), "mlx", Version(), "cpu") }
