package qwen35moe

import (
	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
)

// sortThreshold is the number of (row, expert) pairs from which the
// routed experts run on rows sorted by expert: gather_mm and gather_qmm
// then multiply each expert's rows as one group (a segmented product)
// instead of one small product per pair. A decode step (one row, k pairs)
// stays unsorted; a verification block or a prefill chunk sorts. 64 is
// mlx-lm's threshold (SwitchGLU), so both engines take the same kernels on
// the same shapes.
const sortThreshold = 64

// sparseMoE is the Qwen3.5 MoE block (spec/qwen35.md section 9): a router
// picks k of E experts per row, their SwiGLU outputs are summed with the
// router's weights, and a shared expert scaled by its own sigmoid gate is
// added.
type sparseMoE struct {
	cfg *Config
	// in stacks every projection that reads the block's input, in this
	// order: the router [E, H], the shared-expert gate [1, H], the shared
	// expert's gate_proj and up_proj [Is, H] — one product when they share
	// a quantization; two in MLX conversions, whose router and gate are
	// 8-bit beside the 4-bit shared expert.
	in         *nn.Linear
	sharedDown *nn.Linear // [H, Is]
	gateUp     *nn.Linear // [E, 2·Ie, H]: per expert the gate rows, then the up rows
	down       *nn.Linear // [E, H, Ie]
}

// Forward runs the block on x [1, L, H]. Every row is routed on its own
// (the router reads only its row), so L rows in one forward equal L
// single-row forwards.
func (m *sparseMoE) Forward(x *mlx.Array) *mlx.Array {
	c := m.cfg
	E, k, is := c.NumExperts, c.TopK, c.SharedSize
	proj := mlx.Split(m.in.Forward(x), -1, E, E+1, E+1+is)
	experts, weights := m.route(proj[0], k)

	routed := m.experts(x, experts) // [1, L, k, H]
	routed = mlx.Sum(mlx.Multiply(routed, mlx.ExpandDims(mlx.AsType(weights, routed.DType()), -1)), false, -2)
	shared := m.sharedDown.Forward(nn.SiLUMul(proj[2], proj[3]))
	return mlx.Add(routed, nn.SigmoidGate(shared, proj[1]))
}

// route picks each row's k experts from the router logits [1, L, E]: the
// indices [1, L, k] (uint32, in no particular order) and their weights
// [1, L, k] in float32. The weights are the softmax over all E logits at
// the chosen experts, renormalised to sum 1 when NormTopK is set — which
// equals a softmax over the k chosen logits alone, computed so. Selection
// and weights are float32 whatever the compute dtype, as transformers
// computes them.
func (m *sparseMoE) route(logits *mlx.Array, k int) (experts, weights *mlx.Array) {
	logits = mlx.AsType(logits, mlx.Float32)
	// The k largest logits (the k most probable experts) sit in the first
	// k places of an argpartition of their negation.
	experts = mlx.SliceAxis(mlx.Argpartition(mlx.Negative(logits), k-1, -1), -1, 0, k)
	if m.cfg.NormTopK {
		return experts, mlx.Softmax(mlx.TakeAlongAxis(logits, experts, -1), true, -1)
	}
	return experts, mlx.TakeAlongAxis(mlx.Softmax(logits, true, -1), experts, -1)
}

// experts runs each row of x [1, L, H] through its k experts (indices
// [1, L, k]) and returns their outputs [1, L, k, H], unweighted.
func (m *sparseMoE) experts(x, indices *mlx.Array) *mlx.Array {
	L, H, k := x.Dim(1), x.Dim(2), indices.Dim(2)
	if L*k < sortThreshold {
		// Each (row, expert) pair is a batch entry: x [1, L, 1, 1, H]
		// broadcasts over the k indices of its row.
		xe := mlx.Reshape(x, 1, L, 1, 1, H)
		out := m.swiGLU(xe, indices, false) // [1, L, k, 1, H]
		return mlx.Reshape(out, 1, L, k, H)
	}
	// Sorted: the L·k pairs ordered by expert, each pair's row of x
	// gathered to its place, the outputs put back in pair order.
	flat := mlx.Reshape(indices, L*k)
	order := mlx.Argsort(flat, 0)
	rows := mlx.FloorDivide(order, mlx.Scalar(float64(k), order.DType()))
	xs := mlx.Take(mlx.Reshape(x, L, 1, H), rows, 0) // [L·k, 1, H]
	out := m.swiGLU(xs, mlx.Take(flat, order, 0), true)
	out = mlx.Take(out, mlx.Argsort(order, 0), 0) // back to pair order
	return mlx.Reshape(out, 1, L, k, H)
}

// swiGLU is the experts' SwiGLU down(silu(gate x) ⊙ up x) of rows x
// [..., 1, H] through the experts indices [...].
func (m *sparseMoE) swiGLU(x, indices *mlx.Array, sorted bool) *mlx.Array {
	gu := m.gateUp.Gather(x, indices, sorted)
	parts := mlx.Split(gu, -1, m.cfg.ExpertSize)
	return m.down.Gather(nn.SiLUMul(parts[0], parts[1]), indices, sorted)
}
