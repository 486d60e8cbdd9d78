package nn

import (
	"fmt"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// Tensor parallelism cuts a linear layer by output rows (each rank computes
// some of the outputs) or by input columns (each rank computes a partial
// sum over some inputs, which the ranks then add up). A cut is gathered
// into an array of its own (mlx.Take), never a view: a slice or a
// "contiguous" copy of a row range would share the whole weight's buffer
// and keep it alive, so a rank would hold every weight it read.

// Span is a half-open range [Start, Stop) of rows, columns or heads (the
// loader's, which reads such parts of stored tensors).
type Span = loader.Span

// Cutter keeps a's entries at spans along axis, concatenated in order, as
// an array of its own: Cut with ops, or a binder's cut that reads only
// those entries from the checkpoint (loader.PartOf).
type Cutter func(a *mlx.Array, axis int, spans ...Span) *mlx.Array

// Cut returns a's entries at the spans of axis, in order, concatenated, as
// a new array (nil for nil).
func Cut(a *mlx.Array, axis int, spans ...Span) *mlx.Array {
	if a == nil {
		return nil
	}
	var idx []int32
	for _, s := range spans {
		for i := s.Start; i < s.Stop; i++ {
			idx = append(idx, int32(i))
		}
	}
	return mlx.Take(a, mlx.FromInt32s(idx, len(idx)), axis)
}

// Rows returns the layer restricted to the output rows of spans, in order
// (their outputs concatenated): the weight's rows, and those of a quantized
// layer's scales and biases (groups never cross rows), and the bias's
// elements, each cut by cut (Cut when nil). It works on a single layer,
// not on one stacked by ConcatLinear from parts of different quantizations.
func (l *Linear) Rows(cut Cutter, spans ...Span) (*Linear, error) {
	if len(l.parts) > 0 {
		return nil, fmt.Errorf("nn: Rows of a layer stacked from differently quantized parts: cut the parts before stacking them")
	}
	if cut == nil {
		cut = Cut
	}
	out := *l
	out.Weight, out.Scales, out.Biases = cut(l.Weight, -2, spans...), cutSome(cut, l.Scales, -2, spans), cutSome(cut, l.Biases, -2, spans)
	out.Bias = cutSome(cut, l.Bias, -1, spans)
	return &out, nil
}

// cutSome is cut for an optional array: nil stays nil.
func cutSome(cut Cutter, a *mlx.Array, axis int, spans []Span) *mlx.Array {
	if a == nil {
		return nil
	}
	return cut(a, axis, spans...)
}

// Cols returns the layer restricted to the input columns of s: it reads
// x [..., s.Len()] and returns that part of the full product's sum. The
// bias is dropped unless keepBias is set (the ranks adding up their parts
// must add it once). For a quantized layer the span must start and end on
// group boundaries. Each array is cut by cut (Cut when nil).
func (l *Linear) Cols(cut Cutter, s Span, keepBias bool) (*Linear, error) {
	if len(l.parts) > 0 {
		return nil, fmt.Errorf("nn: Cols of a layer stacked from differently quantized parts")
	}
	if cut == nil {
		cut = Cut
	}
	out := *l
	if !keepBias {
		out.Bias = nil
	}
	if l.Quant.IsZero() {
		out.Weight = cut(l.Weight, -1, s)
		return &out, nil
	}
	g, bits := l.Quant.GroupSize, l.Quant.Bits
	if s.Start%g != 0 || s.Stop%g != 0 {
		return nil, fmt.Errorf("input columns %d … %d do not fall on the %s quantization's groups of %d", s.Start, s.Stop-1, l.Quant, g)
	}
	// A group of g values packs into g·bits/32 uint32 words.
	words := g * bits / 32
	out.Weight = cut(l.Weight, -1, Span{Start: s.Start / g * words, Stop: s.Stop / g * words})
	groups := Span{Start: s.Start / g, Stop: s.Stop / g}
	out.Scales = cutSome(cut, l.Scales, -1, []Span{groups})
	out.Biases = cutSome(cut, l.Biases, -1, []Span{groups})
	return &out, nil
}
