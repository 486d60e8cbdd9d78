package mlx

/*
#include "shim/shim.h"
*/
import "C"

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// EvalTimes splits the worker's time inside MLX's evaluation into the host's
// part and the part spent waiting for the device, so that a measurement can
// say whether a step is host-bound (little waiting: the device idles while the
// host builds graphs and encodes launches) or device-bound (the host waits on
// results). Everything outside these two is the host building graphs in Go.
type EvalTimes struct {
	// Submit is the time inside MLX's async_eval: the host walking the graph
	// and encoding its kernels (on the CPU backend, queuing them for MLX's
	// own thread). It also holds any wait for room in a full launch queue.
	Submit time.Duration
	// Wait is the time blocked in Eval or in reading an array's elements
	// after everything was submitted: the device computing what the host
	// asked for (on the CPU backend, MLX's thread running it).
	Wait time.Duration
	// Syncs counts the blocking evaluations and reads.
	Syncs int64
	// Nodes counts the graph nodes handed to MLX's evaluation (each
	// primitive's outputs once; views included, though they launch
	// nothing) while SetNodeCounting is on; a reading taken with counting
	// off holds 0 (and Ops nil). On a GPU each node costs the host its
	// submission, so this is what a change that builds fewer nodes moves,
	// and it is the same on the CPU.
	Nodes int64
	// Ops splits Nodes by MLX primitive name ("Add", "CustomKernel", a
	// compiled chain's "Compiled…", views such as "Reshape"), so two
	// workloads' node counts can be compared kind by kind (a reading costs
	// a copy of the map while counting is on); readings share no map with
	// one another.
	Ops map[string]int64
}

// Sub returns t − u, the times spent between two readings.
func (t EvalTimes) Sub(u EvalTimes) EvalTimes {
	return EvalTimes{Submit: t.Submit - u.Submit, Wait: t.Wait - u.Wait, Syncs: t.Syncs - u.Syncs, Nodes: t.Nodes - u.Nodes, Ops: combineOps(t.Ops, u.Ops, -1)}
}

// Add returns t + u, the times of two stretches of work together.
func (t EvalTimes) Add(u EvalTimes) EvalTimes {
	return EvalTimes{Submit: t.Submit + u.Submit, Wait: t.Wait + u.Wait, Syncs: t.Syncs + u.Syncs, Nodes: t.Nodes + u.Nodes, Ops: combineOps(t.Ops, u.Ops, 1)}
}

// combineOps returns a new map of a + sign·b, leaving out the names whose
// count is 0; nil when both are nil.
func combineOps(a, b map[string]int64, sign int64) map[string]int64 {
	if a == nil && b == nil {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]int64{}
	}
	for name, n := range b {
		out[name] += sign * n
		if out[name] == 0 {
			delete(out, name)
		}
	}
	return out
}

// evalTiming is off unless SetEvalTiming turned it on: the split costs one
// more cgo call per blocking evaluation (an async_eval before the wait).
var (
	evalTiming                     atomic.Bool
	submitNanos, waitNanos, syncsN atomic.Int64
	nodeCounting                   atomic.Bool
	// opsMu guards opsN, the running count of evaluated nodes by
	// primitive name (EvalTimes.Ops; their sum is EvalTimes.Nodes).
	opsMu sync.Mutex
	opsN  = map[string]int64{}
)

// SetNodeCounting turns the count of evaluated graph nodes (EvalTimes.Nodes)
// on or off and returns the previous setting. While on, every evaluation
// and read first walks the graph it hands over, which costs the host time:
// time a run without it.
func SetNodeCounting(on bool) bool { return nodeCounting.Swap(on) }

// countPending adds the pending nodes behind hs to Nodes while counting is
// on. The submitter thread (submit.go) is drained first: it may be
// evaluating, and so detaching, a graph that hs reach.
func countPending(hs []C.spx_array) {
	if !nodeCounting.Load() || len(hs) == 0 {
		return
	}
	if sub != nil {
		_ = sub.drain()
	}
	ops, err := pendingOps(hs)
	if err != nil {
		return
	}
	opsMu.Lock()
	defer opsMu.Unlock()
	for name, n := range ops {
		opsN[name] += n
	}
}

// SetEvalTiming turns the host/device split of evaluation time on or off and
// returns the previous setting. While on, every blocking evaluation (Eval,
// and the reads of Bytes, Int32s, Float32s, ...) first submits its graph
// with async_eval (timed as EvalTimes.Submit) and then waits for it (timed as
// EvalTimes.Wait); the results are the same either way.
func SetEvalTiming(on bool) bool { return evalTiming.Swap(on) }

// EvalTimingOn reports whether SetEvalTiming turned the split on.
func EvalTimingOn() bool { return evalTiming.Load() }

// EvalTiming returns the times (and node counts) accumulated since the
// process started while timing (counting) was on. Take two readings and Sub
// them to time a stretch of work.
func EvalTiming() EvalTimes {
	t := EvalTimes{Submit: time.Duration(submitNanos.Load()), Wait: time.Duration(waitNanos.Load()), Syncs: syncsN.Load()}
	if nodeCounting.Load() {
		opsMu.Lock()
		t.Ops = maps.Clone(opsN)
		opsMu.Unlock()
		for _, n := range t.Ops {
			t.Nodes += n
		}
	}
	return t
}

// timedSubmit runs an async submission, adding its time to Submit when
// timing is on.
func timedSubmit(submit func() error) error {
	if !evalTiming.Load() {
		return submit()
	}
	t0 := time.Now()
	err := submit()
	submitNanos.Add(int64(time.Since(t0)))
	return err
}

// timedSync runs a blocking evaluation. With timing on, submit (the same
// graph's async_eval) runs first and is timed as Submit, then wait as Wait;
// with timing off only wait runs, as before, unless the submitter runs
// (submit.go), which must submit everything.
func timedSync(submit, wait func() error) error {
	if !evalTiming.Load() {
		if sub != nil {
			// The submitter encodes everything (submit.go): hand over first.
			if err := submit(); err != nil {
				return err
			}
		}
		return wait()
	}
	t0 := time.Now()
	if err := submit(); err != nil {
		submitNanos.Add(int64(time.Since(t0)))
		return err
	}
	t1 := time.Now()
	err := wait()
	submitNanos.Add(int64(t1.Sub(t0)))
	waitNanos.Add(int64(time.Since(t1)))
	syncsN.Add(1)
	return err
}
