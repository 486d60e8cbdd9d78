package mlx

/*
#include "shim/shim.h"
*/
import "C"

// GatedDeltaScan runs the gated delta rule (spec/qwen35.md section 7) on the
// CPU as one graph node (shim/gdn.cpp): from state [1, Hv, Dv, Dk], for each
// token t of q, k [1, L, Hk, Dk], v [1, L, Hv, Dv] and the per-head decay
// alpha and write strength beta [1, L, Hv] (value head h reads key head
// h / (Hv/Hk)),
//
//	S ← α_t·S;  δ ← β_t·(v_t − S·k_t);  S ← S + δ ⊗ k_t;  o_t ← S·q_t
//
// All inputs are float32. It returns the outputs [1, L, Hv, Dv] and the
// state [1, Hv, Dv, Dk] after each of bounds (ascending token counts in
// 1 … L). The current device must be the CPU: other devices have their own
// kernels. Errors (shapes, dtypes, device) are recorded like any op's.
func GatedDeltaScan(q, k, v, alpha, beta, state *Array, bounds []int) (*Array, []*Array) {
	hs, ok := handles([]*Array{q, k, v, alpha, beta, state})
	states := make([]*Array, len(bounds))
	fail := func() (*Array, []*Array) {
		for i := range states {
			states[i] = empty()
		}
		return empty(), states
	}
	if !ok {
		return fail()
	}
	outs := make([]C.spx_array, len(bounds)+1)
	b, n := cInts(bounds)
	rc := C.spx_gated_delta_scan(&outs[0], hs[0], hs[1], hs[2], hs[3], hs[4], hs[5], b, C.size_t(n), defaultStream)
	if err := status(rc); err != nil {
		for _, o := range outs {
			if o.ctx != nil {
				C.spx_array_free(o)
			}
		}
		record(err)
		return fail()
	}
	for i := range states {
		states[i] = wrap(outs[i+1])
	}
	return wrap(outs[0]), states
}
