package mlx

/*
#include "shim/shim.h"
*/
import "C"

import (
	"os"
	"runtime"
)

// Building on one thread, submitting on another (issue 19; experimental,
// SPECULA_SUBMIT_THREAD=1, read once).
//
// On a GPU a decode step is bound by the host: the worker builds the step's
// graph (Go and MLX's graph construction) and then MLX submits it (walking
// the graph, encoding every kernel into its CUDA graph), one after the
// other on one thread — on the H200 1.4 ms and 3.6 ms of a 5 ms 4B step,
// while the GPU needs 3.6 ms. With this switch on, every evaluation is
// handed to a second locked OS thread, the submitter, which calls MLX's
// async_eval, while the worker goes on building: a pipelined decoder builds
// step t+1 while step t is submitted, so a step costs about the larger of
// the two instead of their sum.
//
// The rules that keep MLX consistent:
//   - Only the submitter encodes work. Every Eval, AsyncEval and read of
//     the worker hands its arrays over first (in order: one queue) and, when
//     it must block, waits until they are submitted; what is left for the
//     worker is waiting on arrays already scheduled, which MLX does through
//     their events. (MLX keeps command encoders per thread and stream: a
//     kernel encoded on the worker would run on another CUDA stream, with no
//     ordering against the submitter's unfinished work.)
//   - The submitter holds its own references (a bundle), so the worker's
//     sweeps may free their handles at once.
//   - The worker builds on arrays the submitter is evaluating; it reads only
//     what MLX never changes after construction (shapes, dtypes) and adds
//     references, both safe while MLX evaluates them.
// Errors raised on the submitter reach the worker at its next blocking
// evaluation.

// submitThreadOn is whether evaluations go through the submitter.
var submitThreadOn = os.Getenv("SPECULA_SUBMIT_THREAD") == "1"

// submission is one hand-off: the arrays to submit and how it went.
type submission struct {
	bundle C.spx_bundle
	lock   bool // take the kernel-build lock (jitlock.go), as decided on the worker
	err    error
	done   chan struct{}
}

// submitter is the second thread. queue is its input; pending (worker-owned)
// holds the hand-offs not yet known to be submitted, and err the first
// failure among those already pruned.
type submitter struct {
	queue   chan *submission
	pending []*submission
	err     error
}

// sub is the submitter, nil unless SPECULA_SUBMIT_THREAD=1 (worker-owned;
// started by the worker once its device is set).
var sub *submitter

// startSubmitter starts the submitter's thread.
func startSubmitter() *submitter {
	s := &submitter{queue: make(chan *submission, 64)}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's encoders belong to MLX
		C.spx_set_worker_thread(true)
		close(ready)
		for j := range s.queue {
			j.err = lockedIf(j.lock, func() error { return status(C.spx_bundle_async_eval(j.bundle)) })
			C.spx_bundle_free(j.bundle)
			close(j.done)
		}
	}()
	<-ready
	return s
}

// handOff queues the submission of hs and returns at once.
func (s *submitter) handOff(hs []C.spx_array) error {
	var b C.spx_bundle
	if err := status(C.spx_bundle_new(&b, &hs[0], C.size_t(len(hs)))); err != nil {
		return err
	}
	s.prune()
	j := &submission{bundle: b, lock: needJITLock(), done: make(chan struct{})}
	s.pending = append(s.pending, j)
	s.queue <- j
	return nil
}

// prune forgets the hand-offs already submitted, keeping the first error.
func (s *submitter) prune() {
	n := 0
	for _, j := range s.pending {
		select {
		case <-j.done:
			if j.err != nil && s.err == nil {
				s.err = j.err
			}
		default:
			s.pending[n] = j
			n++
		}
	}
	clear(s.pending[n:])
	s.pending = s.pending[:n]
}

// drain waits until everything handed off is submitted and returns the
// first error since the last drain. The submitter takes hand-offs in order,
// so once the last is done every one is.
func (s *submitter) drain() error {
	if n := len(s.pending); n > 0 {
		<-s.pending[n-1].done
	}
	s.prune()
	err := s.err
	s.err = nil
	return err
}

// submitHandles starts the evaluation of hs: on the submitter when it runs
// (handed off; with wait, returning once submitted), else here with MLX's
// async_eval.
func submitHandles(hs []C.spx_array, wait bool) error {
	if sub == nil {
		return withJITLock(func() error { return status(C.spx_async_eval(&hs[0], C.size_t(len(hs)))) })
	}
	if err := sub.handOff(hs); err != nil {
		return err
	}
	if !wait {
		return nil
	}
	return sub.drain()
}
