package mlx

/*
#include <stdlib.h>
#include "shim/shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// MLX's distributed layer (mlx::core::distributed): a Group is the set of
// processes one backend connected, and AllSum and AllGather are collectives
// over it. Collectives are lazy graph nodes like every other op, evaluated
// with the rest of the graph; MLX runs them on a communication stream of the
// backend's choosing (a CPU stream for ring, a GPU stream for NCCL). Every
// process of the group must build and evaluate the same collectives in the
// same order, or the group waits forever.

// Group is a process group of MLX's distributed layer. Its methods and the
// collectives run on the MLX worker.
type Group struct {
	c          C.spx_group
	rank, size int
	backend    string
}

// DistributedAvailable reports whether MLX can start backend ("ring",
// "nccl", "mpi", "jaccl" or "any") in this process: the library was built
// with it and the environment it reads is set (for ring, MLX_RANK and
// MLX_HOSTFILE).
func DistributedAvailable(backend string) (bool, error) {
	mustWorker()
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	var ok C.bool
	if err := status(C.spx_dist_is_available(&ok, cs)); err != nil {
		return false, err
	}
	return bool(ok), nil
}

// InitDistributed starts backend and returns the group of every process it
// connects. It fails, naming the backend, when the backend cannot start (a
// missing or wrong environment, a peer that never connects); it never falls
// back to a group of one. With the ring backend it blocks until every rank
// has connected.
func InitDistributed(backend string) (*Group, error) {
	mustWorker()
	ok, err := DistributedAvailable(backend)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("mlx: the %q distributed backend is not available in this process: this MLX build lacks it, or its environment is missing (ring reads MLX_RANK and MLX_HOSTFILE; start the ranks with `specula launch`)", backend)
	}
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	g := &Group{backend: backend}
	if err := status(C.spx_dist_init(&g.c, cs)); err != nil {
		return nil, fmt.Errorf("mlx: starting the %q distributed backend: %w", backend, err)
	}
	var r, n C.int
	if err := status(C.spx_group_rank(&r, g.c)); err != nil {
		return nil, err
	}
	if err := status(C.spx_group_size(&n, g.c)); err != nil {
		return nil, err
	}
	g.rank, g.size = int(r), int(n)
	return g, nil
}

// Rank is this process's index in the group, 0 … Size−1.
func (g *Group) Rank() int { return g.rank }

// Size is the number of processes in the group.
func (g *Group) Size() int { return g.size }

// Backend is the name the group was started with.
func (g *Group) Backend() string { return g.backend }

// AllSum returns the element-wise sum of x over the group's processes, of
// x's shape and dtype; every process gets the same values. With a group of
// one it returns x.
func AllSum(x *Array, g *Group) *Array {
	must(x)
	return build(func(out *C.spx_array) C.int { return C.spx_all_sum(out, x.c, g.c) }, x)
}

// AllGather returns the processes' x concatenated along axis 0 in rank
// order: [Size·d0, d1, …] for x [d0, d1, …] (a scalar gives [Size]).
func AllGather(x *Array, g *Group) *Array {
	must(x)
	return build(func(out *C.spx_array) C.int { return C.spx_all_gather(out, x.c, g.c) }, x)
}
