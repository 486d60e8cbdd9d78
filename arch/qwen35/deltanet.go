package qwen35

import (
	"math"
	"slices"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
)

// l2Eps is the epsilon of the q/k L2 normalisation (Hugging Face's l2norm);
// deltaPrepKernel writes it as 1e-6f.
const l2Eps = 1e-6

// deltaMix is the gated delta-net mixer (spec/qwen35.md section 7) of x
// [1, L, H], as a pure function of the layer's state so that it can run
// inside a compiled segment (segments.go): from the convolution tail conv
// [1, Kc−1, convDim] and the delta state [1, Hv, Dv, Dk] it returns the
// mixer's output and what cache.Recurrent.Put takes for splits (interior
// token counts, ascending, from cache.Recurrent.SnapshotSplits). An
// interior state is a reference into arrays the forward makes anyway — the
// tail at boundary b is rows b … b+Kc−2 of the window [tail; the L new
// rows], and with rows the delta state is row b−1 of the scan's states
// after every row (what the scan kernel emits), else an array of its own —
// so a verification adds no graph node per rollback point.
func (m *Model) deltaMix(g *deltaWeights, x, convState, deltaState *mlx.Array, splits []int, rows bool) (*mlx.Array, cache.RecurrentWrite) {
	cfg := m.local
	L := x.Dim(1)
	dk := cfg.LinearKeyDim
	tail := cfg.ConvKernel - 1

	// One product for the four input projections: [1, L, convDim + valueDim
	// + 2·Hv], the conv channels q | k | v, the gate z, and the per-head
	// write strength b and decay input a.
	conv, value := cfg.ConvDim(), cfg.ValueDim()
	proj := g.in.Forward(x)
	if o, w, ok := m.deltaStep(g, proj, convState, deltaState); ok {
		return g.out.Forward(o), w
	}
	q, k, v, alpha, beta, padded := deltaPrep(cfg, g, proj, convState)

	interior := len(splits) > 0
	w := cache.RecurrentWrite{Conv: mlx.SliceAxis(padded, 1, L, L+tail)}
	if interior {
		w.ConvWindow = padded
	}
	var out *mlx.Array
	var states []*mlx.Array
	if rows && interior {
		// The rows of every state: the kernel's, else the other scans'
		// states at every row, stacked (the kernel failed while a segment
		// that expects rows was traced).
		if useScanKernel(dk) {
			out, w.Delta, w.DeltaRows = gatedDeltaScanRows(q, k, v, alpha, beta, deltaState, true)
		}
		if out == nil {
			every := make([]int, L)
			for i := range every {
				every[i] = i + 1
			}
			out, states = scanWithoutKernel(q, k, v, alpha, beta, deltaState, every)
			w.Delta, w.DeltaRows = states[L-1], mlx.Concatenate(0, states...)
		}
	} else {
		bounds := append(slices.Clone(splits), L)
		if useScanKernel(dk) {
			out, states = gatedDeltaScanKernel(q, k, v, alpha, beta, deltaState, bounds)
		}
		if out == nil {
			out, states = scanWithoutKernel(q, k, v, alpha, beta, deltaState, bounds)
		}
		last := len(states) - 1
		w.Delta, w.Deltas = states[last], states[:last]
	}

	// The gate z is the projection's columns conv … conv+valueDim.
	o := nn.GatedRMSNormFrom(out, proj, conv, g.norm, cfg.RMSNormEps, m.dtype)
	return g.out.Forward(mlx.Reshape(o, 1, L, value)), w
}

// scanWithoutKernel runs the delta rule where the CUDA kernel does not: the
// CPU's one-node scan when it can, else the graph scan (value head h reads
// key head h div Hv/Hk). It returns the outputs and the states at bounds.
func scanWithoutKernel(q, k, v, alpha, beta, state *mlx.Array, bounds []int) (*mlx.Array, []*mlx.Array) {
	if useCPUScan(q, k, v, alpha, beta, state) {
		if out, states := mlx.GatedDeltaScan(q, k, v, alpha, beta, state, bounds); out != nil {
			return out, states
		}
	}
	r := v.Dim(2) / q.Dim(2)
	return gatedDeltaScan(repeatHeads(q, r), repeatHeads(k, r), v, alpha, beta, state, bounds)
}

// deltaPrep returns what the delta rule and the cache need from the stacked
// projection proj [1, L, convDim + valueDim + 2·Hv] and the convolution
// tail convState [1, Kc−1, convDim]: q and k [1, L, Hk, Dk] (L2-normalised,
// q scaled by 1/√Dk), v [1, L, Hv, Dv], the decay alpha and write strength
// beta [1, L, Hv], all float32, and padded [1, Kc−1+L, convDim] = [tail;
// the new pre-convolution rows] in proj's dtype. On the GPU that is one
// launch (deltaPrepKernel); elsewhere, or when the launch fails, the graph
// path.
func deltaPrep(cfg *Config, g *deltaWeights, proj, convState *mlx.Array) (q, k, v, alpha, beta, padded *mlx.Array) {
	if useDeltaPrepKernel(cfg, g, proj, convState) {
		if outs := deltaPrepLaunch(cfg, g, proj, convState); outs != nil {
			return outs[0], outs[1], outs[2], outs[3], outs[4], outs[5]
		}
	}
	return deltaPrepGraph(cfg, g, proj, convState)
}

// deltaPrepGraph is deltaPrep as MLX graph nodes: the gates, the
// concatenation of the tail with the new rows, the fused convolution with
// SiLU, and the two L2 norms (the CPU's path, and the GPU's when the kernel
// is off).
func deltaPrepGraph(cfg *Config, g *deltaWeights, proj, convState *mlx.Array) (q, k, v, alpha, beta, padded *mlx.Array) {
	L := proj.Dim(1)
	hk, hv, dk, dv := cfg.LinearKeyHeads, cfg.LinearValueHeads, cfg.LinearKeyDim, cfg.LinearValueDim
	// proj's columns: the conv channels q | k | v, the gate z (read by the
	// caller), the per-head write strength b and decay input a.
	conv, value := cfg.ConvDim(), cfg.ValueDim()
	parts := mlx.Split(proj, -1, conv, conv+value, conv+value+hv)
	gates := deltaGates.Call(parts[3], parts[2], g.negA, g.dtBias)
	alpha, beta = gates[0], gates[1]

	// Causal depthwise convolution over [tail; rows]: the tail holds the
	// previous Kc−1 pre-convolution rows, and row t of the output reads
	// padded rows t … t+Kc−1 (the last tap is the current row).
	padded = mlx.Concatenate(1, convState, parts[0])
	conved, ok := mlx.ConvSiLUCPU(padded, g.conv) // the same values as one vectorised CPU node
	if !ok {
		conved = causalConvSiLU.Call(padded, g.conv)[0]
	}
	qkv := mlx.Split(conved, -1, cfg.KeyDim(), 2*cfg.KeyDim())
	scale := 1 / math.Sqrt(float64(dk))
	q = nn.L2Norm(mlx.Reshape(qkv[0], 1, L, hk, dk), l2Eps, scale)
	k = nn.L2Norm(mlx.Reshape(qkv[1], 1, L, hk, dk), l2Eps, 1)
	v = mlx.Reshape(qkv[2], 1, L, hv, dv)
	return q, k, v, alpha, beta, padded
}

// deltaGates maps the projections a and b [1, L, Hv] to the per-head decay
// α = exp(−exp(A_log)·softplus(a + dt_bias)) and write strength β = σ(b),
// both float32, as one fused kernel; its inputs are a, b, −exp(A_log) and
// dt_bias.
var deltaGates = mlx.Compile("qwen35_delta_gates", 2, func(in []*mlx.Array) []*mlx.Array {
	a, b, negA, dtBias := toF32(in[0]), toF32(in[1]), in[2], in[3]
	alpha := mlx.Exp(mlx.Multiply(negA, mlx.Softplus(mlx.Add(a, dtBias))))
	return []*mlx.Array{alpha, mlx.Sigmoid(b)}
})

// causalConvSiLU is the delta-net's depthwise causal convolution followed by
// SiLU, in float32, as one fused kernel over views: from padded [1, L+Kc−1,
// C] and the taps w [Kc, C], row t of the output is
// silu(Σ_j padded[t+j]·w[j]). (MLX's conv1d would cost a convolution and
// layout kernels per step; this is a multiply-add chain.)
var causalConvSiLU = mlx.Compile("qwen35_causal_conv_silu", 1, func(in []*mlx.Array) []*mlx.Array {
	padded, w := in[0], in[1]
	taps := w.Dim(0)
	L := padded.Dim(1) - taps + 1
	var sum *mlx.Array
	for j := range taps {
		term := mlx.Multiply(toF32(mlx.SliceAxis(padded, 1, j, j+L)), toF32(mlx.SliceAxis(w, 0, j, j+1)))
		if sum == nil {
			sum = term
		} else {
			sum = mlx.Add(sum, term)
		}
	}
	return []*mlx.Array{mlx.Silu(sum)}
})

// gatedDeltaScan runs the gated delta rule token by token, in float32, over
// q, k [1, L, Hv, Dk], v [1, L, Hv, Dv] and the per-head decay alpha and
// write strength beta [1, L, Hv], from state [1, Hv, Dv, Dk]:
//
//	S ← α_t·S;  δ ← β_t·(v_t − S·k_t);  S ← S + δ ⊗ k_t;  o_t ← S·q_t
//
// It returns the outputs [1, L, Hv, Dv] and the state after each boundary in
// bounds (ascending token counts in 1 … L), all within one graph.
func gatedDeltaScan(q, k, v, alpha, beta, state *mlx.Array, bounds []int) (out *mlx.Array, states []*mlx.Array) {
	L, hv, dk, dv := q.Dim(1), q.Dim(2), q.Dim(3), v.Dim(3)
	// Shapes chosen so every step is a broadcast or a batched matmul over
	// [1, 1, Hv]: columns for S·x, a row for the outer product.
	qs := steps(mlx.Reshape(q, 1, L, hv, dk, 1))
	kCol := steps(mlx.Reshape(k, 1, L, hv, dk, 1))
	kRow := steps(mlx.Reshape(k, 1, L, hv, 1, dk))
	vs := steps(mlx.Reshape(v, 1, L, hv, dv, 1))
	as := steps(mlx.Reshape(alpha, 1, L, hv, 1, 1))
	bs := steps(mlx.Reshape(beta, 1, L, hv, 1, 1))

	s := mlx.Reshape(state, 1, 1, hv, dv, dk)
	outs := make([]*mlx.Array, L)
	next := 0
	for t := range L {
		s = mlx.Multiply(s, as[t])
		delta := mlx.Multiply(bs[t], mlx.Subtract(vs[t], mlx.Matmul(s, kCol[t])))
		s = mlx.Add(s, mlx.Multiply(delta, kRow[t]))
		outs[t] = mlx.Matmul(s, qs[t]) // [1, 1, Hv, Dv, 1]
		if next < len(bounds) && bounds[next] == t+1 {
			states = append(states, mlx.Reshape(s, 1, hv, dv, dk))
			next++
		}
	}
	return mlx.Reshape(mlx.Concatenate(1, outs...), 1, L, hv, dv), states
}

// steps splits a along axis 1 into its L single-token parts.
func steps(a *mlx.Array) []*mlx.Array {
	L := a.Dim(1)
	idx := make([]int, L-1)
	for i := range idx {
		idx[i] = i + 1
	}
	return mlx.Split(a, 1, idx...)
}

// repeatHeads repeats each head r times consecutively: [1, L, Hk, D] →
// [1, L, Hk·r, D].
func repeatHeads(x *mlx.Array, r int) *mlx.Array {
	if r == 1 {
		return x
	}
	s := x.Shape()
	e := mlx.BroadcastTo(mlx.ExpandDims(x, 3), s[0], s[1], s[2], r, s[3])
	return mlx.Reshape(e, s[0], s[1], s[2]*r, s[3])
}

func toF32(a *mlx.Array) *mlx.Array {
	if a.DType() == mlx.Float32 {
		return a
	}
	return mlx.AsType(a, mlx.Float32)
}
