package mlx

/*
#include "shim/shim.h"
*/
import "C"

// Lifetimes. Every array created on the worker is registered in the current
// scope. Do and Call open a scope around their job; Scope opens a nested one.
// When a scope ends, or on Sweep, every array of the scope that is not pinned
// is freed. Pin marks arrays that must outlive the step that made them
// (weights, cache state, sampled tokens); Unpin hands them back to the
// current scope, which frees them at its next sweep. Free releases arrays at
// once. Nothing relies on finalizers (they would run on the wrong thread).
//
// Freeing a handle whose graph node is still needed by a later op is safe:
// MLX reference-counts graph nodes, and the handle is only one reference.

type scope struct {
	arrays []*Array
	err    error // first MLX error recorded by an op in this scope
	parent *scope
}

// liveArrays counts allocated handles (worker-owned).
var liveArrays int

func withScope(fn func() error) (err error) {
	s := &scope{parent: current}
	current = s
	defer func() {
		s.sweep()
		current = s.parent
		if err == nil && s.err != nil {
			err = s.err
		}
	}()
	return fn()
}

// register adds a freshly created array to the current scope.
func register(a *Array) {
	a.scope = current
	current.arrays = append(current.arrays, a)
	liveArrays++
}

// sweep frees the unpinned arrays of s and forgets the pinned ones (they are
// owned by their pins until unpinned). The handles go to C in one call: a
// decode step makes thousands.
func (s *scope) sweep() {
	batch := freeBatch[:0]
	for _, a := range s.arrays {
		if a.scope != s {
			continue // freed, or pinned and released to another scope since
		}
		a.scope = nil
		if a.pins > 0 {
			continue
		}
		batch = a.collect(batch)
	}
	if len(batch) > 0 {
		C.spx_array_free_many(&batch[0], C.size_t(len(batch)))
	}
	freeBatch = batch[:0]
	clear(s.arrays)
	s.arrays = s.arrays[:0]
}

// freeBatch is the reused buffer of handles a sweep frees (worker-owned).
var freeBatch []C.spx_array

// collect marks a (and its owned views) freed and appends the C handles to
// batch.
func (a *Array) collect(batch []C.spx_array) []C.spx_array {
	if a.tb != nil {
		batch = a.tb.collect(batch)
		a.tb = nil
	}
	if a.t != nil {
		batch = a.t.collect(batch)
		a.t = nil
	}
	if a.c.ctx != nil {
		batch = append(batch, a.c)
		a.c.ctx = nil
	}
	a.freed = true
	liveArrays--
	return batch
}

// Scope runs fn in a nested scope: arrays fn creates and does not pin are
// freed when it returns. An MLX error recorded inside and not consumed by
// Eval is returned. It must be called on the worker.
func Scope(fn func() error) error {
	mustWorker()
	return withScope(fn)
}

// Sweep frees every unpinned array of the current scope. Long loops inside one
// job (a decode loop) call it once per step after pinning what survives.
func Sweep() {
	mustWorker()
	current.sweep()
}

// Pin keeps arrays alive across sweeps and scope ends until Unpin or Free.
// Pins nest: an array pinned twice needs two Unpins.
func Pin(arrays ...*Array) {
	mustWorker()
	for _, a := range arrays {
		if a == nil {
			continue
		}
		a.checkLive()
		a.pins++
	}
}

// Unpin releases one pin of each array; an array with no pins left belongs to
// the current scope again and is freed at its next sweep.
func Unpin(arrays ...*Array) {
	mustWorker()
	for _, a := range arrays {
		if a == nil || a.freed || a.shared {
			continue
		}
		if a.pins == 0 {
			panic("mlx: Unpin of an array that is not pinned")
		}
		a.pins--
		if a.pins == 0 && a.scope == nil {
			a.scope = current
			current.arrays = append(current.arrays, a)
		}
	}
}

// Free releases arrays now, pinned or not. Using a freed array panics.
func Free(arrays ...*Array) {
	mustWorker()
	for _, a := range arrays {
		if a == nil || a.freed || a.shared {
			continue
		}
		a.pins = 0
		a.scope = nil
		a.release()
	}
}

// release frees the C handle of a live array and marks it freed.
func (a *Array) release() {
	if a.tb != nil {
		a.tb.release()
		a.tb = nil
	}
	if a.t != nil {
		a.t.release()
		a.t = nil
	}
	if a.c.ctx != nil {
		C.spx_array_free(a.c)
		a.c.ctx = nil
	}
	a.freed = true
	liveArrays--
}

// LiveArrays is the number of array handles currently allocated (pinned or
// not). Tests use it to prove that sweeps release everything unpinned.
func LiveArrays() int {
	mustWorker()
	return liveArrays
}

// record stores err as the current scope's sticky error unless one is set.
func record(err error) {
	if current.err == nil {
		current.err = err
	}
}

// Err returns the current scope's sticky error without clearing it.
func Err() error {
	mustWorker()
	return current.err
}

// takeErr returns and clears the current scope's sticky error.
func takeErr() error {
	err := current.err
	current.err = nil
	return err
}
