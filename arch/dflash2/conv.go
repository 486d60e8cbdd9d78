package dflash2

import (
	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
)

// conv is one grouped dynamic causal convolution (spec/dflash2.md section
// 2): the kernel of each tap is a per-channel base plus a per-row dynamic
// part shared by the S channels of a group. A layer has two: around its
// attention and around its MLP.
type conv struct {
	base  *mlx.Array // [2, Kc, H]: index 0 the prepare kernel, 1 the finish kernel
	proj  *nn.Linear // kernel_projection [2·Kc·G, H]
	group int        // S, channels per group
}

// prepare convolves a sublayer's input x [1, L, H] with the prepare kernel
// and returns it with the finish kernel's dynamic part w2 [1, L, Kc, G].
// Both dynamic kernels come from x: the projection's output features are
// laid out [half, tap, group] (row-major [L, 2, Kc, G]).
func (c *conv) prepare(x *mlx.Array) (prepared, w2 *mlx.Array) {
	L, kernel := x.Dim(1), c.base.Dim(1)
	y := c.proj.Forward(x)
	groups := y.Dim(-1) / (2 * kernel)
	dyn := mlx.Reshape(y, 1, L, 2, kernel, groups)
	w1 := mlx.Squeeze(mlx.SliceAxis(dyn, 2, 0, 1), 2)
	w2 = mlx.Squeeze(mlx.SliceAxis(dyn, 2, 1, 2), 2)
	return dynamicConv(x, w1, c.baseKernel(0), c.group), w2
}

// finish convolves a sublayer's output y [1, L, H] with the finish kernel,
// whose dynamic part w2 prepare computed from the sublayer's input.
func (c *conv) finish(y, w2 *mlx.Array) *mlx.Array {
	return dynamicConv(y, w2, c.baseKernel(1), c.group)
}

// baseKernel returns base_kernel[i] [Kc, H] (0 prepare, 1 finish).
func (c *conv) baseKernel(i int) *mlx.Array {
	return mlx.Squeeze(mlx.SliceAxis(c.base, 0, i, i+1), 0)
}

// dynamicConv returns, for x [1, L, H], a dynamic kernel w [1, L, Kc, G] and
// a base kernel b [Kc, H],
//
//	out[t, c] = Σ_{j<Kc} (b[j, c] + w[t, j, c div S]) · x[t − j, c]
//
// with x[t − j] = 0 when t − j < 0. Tap j = 0 is the current row. The rows
// are those of one block forward only: nothing carries over between
// forwards, so the convolution needs no cache.
func dynamicConv(x, w, b *mlx.Array, groupSize int) *mlx.Array {
	if x.Dim(2) == w.Dim(3)*groupSize {
		if y, ok := mlx.DynamicConvCPU(x, w, b); ok {
			return y // the same values as one node on the CPU
		}
	}
	L, H := x.Dim(1), x.Dim(2)
	kernel, groups := w.Dim(2), w.Dim(3)
	var out *mlx.Array
	for j := range min(kernel, L) { // taps reaching before row 0 see only zeros
		shifted := x
		if j > 0 {
			shifted = mlx.Concatenate(1, mlx.Zeros(x.DType(), 1, j, H), mlx.SliceAxis(x, 1, 0, L-j))
		}
		// The group's dynamic tap, repeated over its S channels: channel c
		// = g·S + s reads group g.
		dj := mlx.Reshape(mlx.SliceAxis(w, 2, j, j+1), 1, L, groups, 1)
		dj = mlx.Reshape(mlx.BroadcastTo(dj, 1, L, groups, groupSize), 1, L, H)
		coef := mlx.Add(dj, mlx.Reshape(mlx.SliceAxis(b, 0, j, j+1), H))
		term := mlx.Multiply(coef, shifted)
		if out == nil {
			out = term
		} else {
			out = mlx.Add(out, term)
		}
	}
	return out
}

// convStack holds every layer's two convolutions and wraps DFlash's
// sublayers with them (it is the dflash.Wrapper of a DFlash2 draft):
//
//	a', w = attention_conv.prepare(a);  h += attention_conv.finish(attention(a'), w)
//	m', w = mlp_conv.prepare(m);        h += mlp_conv.finish(mlp(m'), w)
//
// Context keys and values never pass through a convolution: DFlash projects
// them from the context directly inside attention.
type convStack struct {
	layers []layerConvs // nil until LoadWeights
}

type layerConvs struct{ attention, mlp conv }

// WrapAttention implements dflash.Wrapper.
func (s *convStack) WrapAttention(layer int, x *mlx.Array, attention func(*mlx.Array) *mlx.Array) *mlx.Array {
	c := &s.layers[layer].attention
	prepared, w2 := c.prepare(x)
	return c.finish(attention(prepared), w2)
}

// WrapMLP implements dflash.Wrapper.
func (s *convStack) WrapMLP(layer int, x *mlx.Array, mlp func(*mlx.Array) *mlx.Array) *mlx.Array {
	c := &s.layers[layer].mlp
	prepared, w2 := c.prepare(x)
	return c.finish(mlp(prepared), w2)
}
