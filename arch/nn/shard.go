package nn

import (
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// Tensor parallelism cuts a linear layer by output rows (each rank computes
// some of the outputs) or by input columns (each rank computes a partial
// sum over some inputs, which the ranks then add up). A cut is gathered
// into an array of its own (mlx.Take), never a view: a slice or a
// "contiguous" copy of a row range would share the whole weight's buffer
// and keep it alive, so a rank would hold every weight it read.

// Span is a half-open range [Start, Stop) of rows, columns or heads.
type Span struct{ Start, Stop int }

// Len is the number of rows or columns in the span.
func (s Span) Len() int { return s.Stop - s.Start }

// Scale returns the span with both ends multiplied by k: the rows of heads
// k rows wide, say.
func (s Span) Scale(k int) Span { return Span{s.Start * k, s.Stop * k} }

// Shift returns the span moved by off.
func (s Span) Shift(off int) Span { return Span{s.Start + off, s.Stop + off} }

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
// elements. It works on a single layer, not on one stacked by ConcatLinear
// from parts of different quantizations.
func (l *Linear) Rows(spans ...Span) (*Linear, error) {
	if len(l.parts) > 0 {
		return nil, fmt.Errorf("nn: Rows of a layer stacked from differently quantized parts: cut the parts before stacking them")
	}
	out := *l
	out.Weight, out.Scales, out.Biases = Cut(l.Weight, -2, spans...), Cut(l.Scales, -2, spans...), Cut(l.Biases, -2, spans...)
	out.Bias = Cut(l.Bias, -1, spans...)
	return &out, nil
}

// Cols returns the layer restricted to the input columns of s: it reads
// x [..., s.Len()] and returns that part of the full product's sum. The
// bias is dropped unless keepBias is set (the ranks adding up their parts
// must add it once). For a quantized layer the span must start and end on
// group boundaries.
func (l *Linear) Cols(s Span, keepBias bool) (*Linear, error) {
	if len(l.parts) > 0 {
		return nil, fmt.Errorf("nn: Cols of a layer stacked from differently quantized parts")
	}
	out := *l
	if !keepBias {
		out.Bias = nil
	}
	if l.Quant.IsZero() {
		out.Weight = Cut(l.Weight, -1, s)
		return &out, nil
	}
	g, bits := l.Quant.GroupSize, l.Quant.Bits
	if s.Start%g != 0 || s.Stop%g != 0 {
		return nil, fmt.Errorf("input columns %d … %d do not fall on the %s quantization's groups of %d", s.Start, s.Stop-1, l.Quant, g)
	}
	// A group of g values packs into g·bits/32 uint32 words.
	words := g * bits / 32
	out.Weight = Cut(l.Weight, -1, Span{s.Start / g * words, s.Stop / g * words})
	groups := Span{s.Start / g, s.Stop / g}
	out.Scales = Cut(l.Scales, -1, groups)
	out.Biases = Cut(l.Biases, -1, groups)
	return &out, nil
}
