package nn

import (
	"slices"

	"github.com/specula-dev/specula/mlx"
)

// Linear is a linear layer y = x·Wᵀ (+ b) whose weight is dense or
// quantized (spec/quantized.md): model code calls Forward and never asks
// which. A stacked layer (mixture-of-experts weights [E, out, in]) uses the
// same type through Gather.
type Linear struct {
	// Weight is the dense weight [..., out, in] in the compute dtype, or
	// the packed uint32 weight [..., out, in·bits/32] when Quant is set.
	Weight *mlx.Array
	// Scales and Biases are the quantization's per-group parameters
	// [..., out, in/group]; nil when dense. Biases is nil for the modes
	// without biases (mxfp4, nvfp4, mxfp8).
	Scales, Biases *mlx.Array
	// Bias is the layer's own additive bias [out], or nil.
	Bias *mlx.Array
	// Quant is how Weight is quantized; the zero value means dense.
	Quant mlx.Quant

	// parts holds the runs of layers stacked by ConcatLinear that cannot
	// share one weight (their quantizations differ); Forward and Gather
	// concatenate their outputs.
	parts []*Linear
}

// Dense returns a dense Linear over w [out, in] and an optional bias b.
func Dense(w, b *mlx.Array) *Linear { return &Linear{Weight: w, Bias: b} }

// Quantized reports whether the layer (any part of it) is quantized.
func (l *Linear) Quantized() bool {
	if len(l.parts) > 0 {
		return slices.ContainsFunc(l.parts, (*Linear).Quantized)
	}
	return !l.Quant.IsZero()
}

// Forward returns x · Wᵀ (+ b) for x [..., in]: [..., out].
func (l *Linear) Forward(x *mlx.Array) *mlx.Array {
	if len(l.parts) > 0 {
		outs := make([]*mlx.Array, len(l.parts))
		for i, p := range l.parts {
			outs[i] = p.Forward(x)
		}
		return mlx.Concatenate(-1, outs...)
	}
	var y *mlx.Array
	if l.Quant.IsZero() {
		if from := rowsGEMVFrom.of(x.DType()); from > 0 && x.NDim() >= 1 && leadingRows(x) >= from {
			y = rowsGEMV(x, l.Weight)
		}
		if y == nil {
			y = mlx.Linear(x, l.Weight)
		}
	} else {
		y = mlx.QuantizedMatmul(x, l.Weight, l.Scales, l.Biases, l.Quant, true)
	}
	if l.Bias != nil {
		y = mlx.Add(y, l.Bias)
	}
	return y
}

// Gather multiplies x by the stacked weights the layer holds
// ([E, out, in], dense or quantized): x [..., 1, in] rows with indices
// [...] (each in 0 … E−1) give [..., 1, out], row i through weight
// indices[i]. sorted says the indices are sorted, which lets MLX batch the
// products of one expert. It is the expert matmul of mixture-of-experts
// layers; the layer's own Bias is not applied.
func (l *Linear) Gather(x, indices *mlx.Array, sorted bool) *mlx.Array {
	if len(l.parts) > 0 {
		outs := make([]*mlx.Array, len(l.parts))
		for i, p := range l.parts {
			outs[i] = p.Gather(x, indices, sorted)
		}
		return mlx.Concatenate(-1, outs...)
	}
	if l.Quant.IsZero() {
		return mlx.GatherMM(x, mlx.SwapAxes(l.Weight, -1, -2), nil, indices, sorted)
	}
	return mlx.GatherQMM(x, l.Weight, l.Scales, l.Biases, nil, indices, l.Quant, true, sorted)
}

// Arrays returns every array the layer holds (to pin or evaluate them).
func (l *Linear) Arrays() []*mlx.Array {
	if len(l.parts) > 0 {
		var out []*mlx.Array
		for _, p := range l.parts {
			out = append(out, p.Arrays()...)
		}
		return out
	}
	var out []*mlx.Array
	for _, a := range []*mlx.Array{l.Weight, l.Scales, l.Biases, l.Bias} {
		if a != nil {
			out = append(out, a)
		}
	}
	return out
}

// AsType returns the layer with its float arrays (a dense weight, affine
// scales and biases, the additive bias) in dtype; packed weights and the
// uint8 scales of the other modes stay as they are.
func (l *Linear) AsType(dtype mlx.DType) *Linear {
	if len(l.parts) > 0 {
		parts := make([]*Linear, len(l.parts))
		for i, p := range l.parts {
			parts[i] = p.AsType(dtype)
		}
		return &Linear{parts: parts}
	}
	out := *l
	if l.Quant.IsZero() {
		out.Weight = cast(l.Weight, dtype)
	} else if l.Quant.HasBiases() {
		out.Scales, out.Biases = cast(l.Scales, dtype), cast(l.Biases, dtype)
	}
	if l.Bias != nil {
		out.Bias = cast(l.Bias, dtype)
	}
	return &out
}

// ConcatLinear stacks layers that read the same input into one whose output
// is theirs concatenated in order (gate rows first, then up, ...): one
// matrix product instead of several, which matters when decoding one token
// is bound by kernel launches. Dense layers, and quantized layers with the
// same parameters, share one stacked weight (rows of packed weights, scales
// and biases stack like dense rows, since groups never cross rows). When
// the quantizations differ (a mixed-precision checkpoint: an MoE router at
// 8 bits beside 4-bit projections), each run of neighbours that share one
// is stacked, and the runs stay separate products behind the same Forward
// and Gather. Stacked expert layers [E, out, in] stack their rows per
// expert. Biases must be all present or all absent.
func ConcatLinear(ls ...*Linear) *Linear {
	var runs []*Linear
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && stackable(ls[i], ls[j]) {
			j++
		}
		runs = append(runs, stack(ls[i:j]))
		i = j
	}
	if len(runs) == 1 {
		return runs[0]
	}
	return &Linear{parts: runs}
}

// stackable reports whether a and b can share one stacked weight.
func stackable(a, b *Linear) bool {
	return len(a.parts) == 0 && len(b.parts) == 0 && a.Quant == b.Quant && (a.Bias == nil) == (b.Bias == nil)
}

// stack stacks layers that share a quantization into one layer.
func stack(ls []*Linear) *Linear {
	if len(ls) == 1 {
		return ls[0]
	}
	// Output rows are the second-to-last axis of weights, scales and
	// biases (whatever stacks before them), the last of the bias.
	rows := func(axis int, get func(*Linear) *mlx.Array) *mlx.Array {
		if get(ls[0]) == nil {
			return nil
		}
		as := make([]*mlx.Array, len(ls))
		for i, l := range ls {
			as[i] = get(l)
		}
		return mlx.Concatenate(axis, as...)
	}
	return &Linear{
		Weight: rows(-2, func(l *Linear) *mlx.Array { return l.Weight }),
		Scales: rows(-2, func(l *Linear) *mlx.Array { return l.Scales }),
		Biases: rows(-2, func(l *Linear) *mlx.Array { return l.Biases }),
		Bias:   rows(-1, func(l *Linear) *mlx.Array { return l.Bias }),
		Quant:  ls[0].Quant,
	}
}

// Embedding is a token embedding table [V, H], dense or quantized. Lookup
// reads rows; AsLinear uses the table as an output head (tied embeddings).
type Embedding struct {
	// Table holds the table as a linear layer [V, H].
	Table *Linear
	// DType is the dtype Lookup returns (the compute dtype).
	DType mlx.DType
}

// Lookup returns the rows of ids [...]: [..., H]. A quantized table is
// gathered first (weight, scales and biases rows), then only those rows are
// dequantized.
func (e *Embedding) Lookup(ids *mlx.Array) *mlx.Array {
	t := e.Table
	if t.Quant.IsZero() {
		return cast(mlx.Take(t.Weight, ids, 0), e.DType)
	}
	take := func(a *mlx.Array) *mlx.Array {
		if a == nil {
			return nil
		}
		return mlx.Take(a, ids, 0)
	}
	return mlx.Dequantize(take(t.Weight), take(t.Scales), take(t.Biases), t.Quant, e.DType)
}

// AsLinear returns x · tableᵀ for x [..., H]: [..., V], the logits of a
// model whose head is tied to its embedding table.
func (e *Embedding) AsLinear(x *mlx.Array) *mlx.Array { return e.Table.Forward(x) }
