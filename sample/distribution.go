package sample

import (
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// Distribution holds R independent probability rows over a vocabulary of V
// ids, as lazy arrays. Dense rows have IDs nil and Probs float32 [R,V]. Sparse
// rows have IDs int32 [R,K] and Probs float32 [R,K]: Probs[r,j] is the
// probability of id IDs[r,j], every id missing from a row has probability 0,
// and a row's ids are unique (operations that scatter add, so a duplicate
// could never lose mass, but lookups assume uniqueness).
type Distribution struct {
	IDs, Probs *mlx.Array
}

// Dense reports whether the rows are dense (IDs is nil).
func (d Distribution) Dense() bool { return d.IDs == nil }

// Rows returns R. It reads the shape only.
func (d Distribution) Rows() int { return d.Probs.Dim(0) }

// Slice returns rows [start, end) in the same layout.
func (d Distribution) Slice(start, end int) Distribution {
	out := Distribution{Probs: mlx.SliceAxis(d.Probs, 0, start, end)}
	if d.IDs != nil {
		out.IDs = mlx.SliceAxis(d.IDs, 0, start, end)
	}
	return out
}

// ConcatRows stacks the rows of ds in order. They must share a layout: all
// dense over the same V, or all sparse with the same K. It panics otherwise,
// and when ds is empty.
func ConcatRows(ds ...Distribution) Distribution {
	if len(ds) == 0 {
		panic("sample: ConcatRows of no distributions")
	}
	width := ds[0].Probs.Dim(1)
	probs := make([]*mlx.Array, len(ds))
	var ids []*mlx.Array
	for i, d := range ds {
		if d.Dense() != ds[0].Dense() || d.Probs.Dim(1) != width {
			panic(fmt.Sprintf("sample: ConcatRows of mixed layouts: distribution 0 is %s, distribution %d is %s",
				ds[0].layout(), i, d.layout()))
		}
		probs[i] = d.Probs
		if !d.Dense() {
			ids = append(ids, d.IDs)
		}
	}
	out := Distribution{Probs: mlx.Concatenate(0, probs...)}
	if ids != nil {
		out.IDs = mlx.Concatenate(0, ids...)
	}
	return out
}

// layout describes d's layout for panic messages.
func (d Distribution) layout() string {
	if d.Dense() {
		return fmt.Sprintf("dense over %d ids", d.Probs.Dim(1))
	}
	return fmt.Sprintf("sparse with K = %d", d.Probs.Dim(1))
}

// Arrays returns d's arrays (Probs, and IDs when sparse), for Eval,
// AsyncEval or Pin.
func (d Distribution) Arrays() []*mlx.Array {
	if d.Dense() {
		return []*mlx.Array{d.Probs}
	}
	return []*mlx.Array{d.IDs, d.Probs}
}

// Prob returns, as float32 [R], the probability that row i of d gives
// tokens[i] (tokens: integer [R]). A token absent from a sparse row has
// probability 0.
func Prob(d Distribution, tokens *mlx.Array) *mlx.Array {
	t := mlx.ExpandDims(asType(tokens, mlx.Int32), 1)
	return mlx.Squeeze(probsOf(d, t), 1)
}

// probsOf returns, as float32 [R,K], the probability that row r of d gives
// ids[r,j] (ids: int32 [R,K]). For a sparse d it sums the matching entries.
func probsOf(d Distribution, ids *mlx.Array) *mlx.Array {
	probs := asType(d.Probs, mlx.Float32)
	if d.Dense() {
		return mlx.TakeAlongAxis(probs, ids, 1)
	}
	match := mlx.Equal(mlx.ExpandDims(ids, 2), mlx.ExpandDims(asType(d.IDs, mlx.Int32), 1)) // [R,K,Kd]
	return mlx.Sum(mlx.Where(match, mlx.ExpandDims(probs, 1), f32(0)), false, 2)
}

// Residual returns norm(max(p − q, 0)) row by row (spec 6.4), the
// distribution a rejected draft position is resampled from. p and q have the
// same number of rows in any pair of layouts; the result has p's layout (a
// sparse p keeps its ids: the residual never leaves the target's support).
// A row whose residual mass is <= 1e-20 — p and q agree up to rounding — is
// p's row itself; every row is finite.
func Residual(p, q Distribution) Distribution {
	pp := asType(p.Probs, mlx.Float32)
	zero := f32(0)
	var r *mlx.Array
	switch {
	case !p.Dense():
		r = mlx.Subtract(pp, probsOf(q, asType(p.IDs, mlx.Int32)))
	case q.Dense():
		r = mlx.Subtract(pp, asType(q.Probs, mlx.Float32))
	default:
		// q's mass at ids outside p's support drives those entries negative,
		// and the clamp below removes it.
		r = mlx.ScatterAddAxis(pp, asType(q.IDs, mlx.Int32), mlx.Negative(asType(q.Probs, mlx.Float32)), 1)
	}
	r = mlx.Maximum(r, zero)
	mass := mlx.Sum(r, true, 1)
	norm := mlx.Divide(r, mlx.Maximum(mass, f32(minMass)))
	return Distribution{IDs: p.IDs, Probs: mlx.Where(mlx.LessEqual(mass, f32(minMass)), pp, norm)}
}
