package sample

import (
	"math"

	"github.com/specula-dev/specula/mlx"
)

// minMass is the smallest row sum a renormalisation divides by (spec 6.3):
// it keeps an all-zero row finite instead of NaN.
const minMass = 1e-20

// f32 returns a float32 scalar. Everything in this package computes in
// float32, and a scalar of another dtype would promote the operand.
func f32(v float32) *mlx.Array { return mlx.Scalar(float64(v), mlx.Float32) }

// asType casts a to dtype unless it already has it.
func asType(a *mlx.Array, dtype mlx.DType) *mlx.Array {
	if a.Valid() && a.DType() == dtype {
		return a
	}
	return mlx.AsType(a, dtype)
}

// transform applies spec 6.3 steps 2–4 to penalised float32 logits [R,V].
func transform(x *mlx.Array, o Options) Distribution {
	rows, vocab := x.Dim(0), x.Dim(1)
	if o.greedy() {
		return Distribution{
			IDs:   mlx.AsType(mlx.Argmax(x, 1, true), mlx.Int32),
			Probs: mlx.Ones(mlx.Float32, rows, 1),
		}
	}
	var d Distribution
	if o.topKOn(vocab) {
		// Partitioning around position V−k leaves the k largest logits in
		// the last k places, in no particular order. Selecting before the
		// temperature (T > 0 keeps the order) divides only k scores per row.
		// Which of several ids tied at the k-th logit get in is the
		// partition's choice; the ids are unique either way.
		top := mlx.SliceAxis(mlx.Argpartition(x, vocab-o.TopK, 1), 1, vocab-o.TopK, vocab)
		d.IDs = mlx.AsType(top, mlx.Int32)
		x = mlx.TakeAlongAxis(x, top, 1)
	}
	p := mlx.Softmax(scaled(x, o.Temperature), true, 1)
	if o.topPOn() {
		p = topP(p, o.TopP)
	}
	if o.minPOn() {
		p = minP(p, o.MinP)
	}
	if o.topPOn() || o.minPOn() {
		p = mlx.Divide(p, mlx.Maximum(mlx.Sum(p, true, 1), f32(minMass)))
	}
	d.Probs = p
	return d
}

// scaled returns the logits x [R,K] divided by the temperature t > 0, as
// (x − max x)/t row by row: the same softmax as x/t, but no temperature,
// however small, overflows it. A row's best logits stay exactly 0, also
// when t is a subnormal that the device flushes to zero, so a tiny
// temperature gives the one-hot (greedy) distribution instead of NaN.
func scaled(x *mlx.Array, t float32) *mlx.Array {
	d := mlx.Subtract(x, mlx.Max(x, true, 1))
	return mlx.Where(mlx.Equal(d, f32(0)), f32(0), mlx.Divide(d, f32(t)))
}

// topP zeroes the probabilities [R,K] of ids that top-p drops. An id is kept
// iff the mass of the ids with a strictly greater probability is < topP, so
// the best id always survives and ids of equal probability are kept or
// dropped together: the result does not depend on how a sort orders ties.
//
// Keeping is monotone in the probability, so it is a threshold: sorted in
// descending order d_0 >= d_1 >= …, the exclusive prefix sum c_t is the
// strictly-better mass at the first position of each run of equal values,
// and every id with probability >= τ = min{d_t : c_t < topP} is kept (c_0 = 0,
// so τ exists). This needs one sort and no inverse permutation.
func topP(p *mlx.Array, topP float32) *mlx.Array {
	desc := mlx.Negative(mlx.Sort(mlx.Negative(p), 1))
	before := mlx.Cumsum(desc, 1, false, false)
	inf := mlx.Scalar(math.Inf(1), mlx.Float32)
	tau := mlx.Min(mlx.Where(mlx.Less(before, f32(topP)), desc, inf), true, 1)
	return mlx.Where(mlx.GreaterEqual(p, tau), p, f32(0))
}

// minP zeroes the probabilities [R,K] below minP times each row's maximum.
func minP(p *mlx.Array, minP float32) *mlx.Array {
	floor := mlx.Multiply(mlx.Max(p, true, 1), f32(minP))
	return mlx.Where(mlx.Less(p, floor), f32(0), p)
}
