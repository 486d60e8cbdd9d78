package sample_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/sample"
)

// This file holds the tests' independent float64 reference of spec 6.3 and
// 6.4 and the helpers that move distributions between MLX and the host.

// refRow applies the transforms of spec 6.3 to one row of logits in float64.
// context is everything the row's penalties may see (committed history
// followed by the row's chain prefix); the window is applied here. It returns
// the probability of every id and the distance of the closest decision
// (argmax, top-k cut, top-p cut, min-p cut) from its boundary, so that a test
// can reject inputs whose outcome float32 rounding might flip.
func refRow(logits []float64, context []int32, o sample.Options) (probs []float64, margin float64) {
	vocab := len(logits)
	x := slices.Clone(logits)
	margin = math.Inf(1)

	penalised := o.RepeatLastN != 0 &&
		((o.RepeatPenalty != 0 && o.RepeatPenalty != 1) || o.PresencePenalty != 0 || o.FrequencyPenalty != 0)
	if penalised {
		window := context
		if o.RepeatLastN > 0 && len(window) > o.RepeatLastN {
			window = window[len(window)-o.RepeatLastN:]
		}
		counts := map[int32]int{}
		for _, t := range window {
			counts[t]++
		}
		for t, c := range counts {
			v := x[t]
			if o.RepeatPenalty != 0 && o.RepeatPenalty != 1 {
				if v < 0 {
					v *= float64(o.RepeatPenalty)
				} else {
					v /= float64(o.RepeatPenalty)
				}
			}
			v -= float64(o.PresencePenalty)
			v -= float64(o.FrequencyPenalty) * float64(c)
			x[t] = v
		}
	}

	// Ids from best to worst, ties to the lowest id.
	order := make([]int, vocab)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case x[a] > x[b]:
			return -1
		case x[a] < x[b]:
			return 1
		}
		return 0
	})

	probs = make([]float64, vocab)
	if o.Temperature <= 0 {
		probs[order[0]] = 1
		return probs, x[order[0]] - x[order[1]]
	}
	kept := order
	if o.TopK > 0 && o.TopK < vocab {
		kept = order[:o.TopK]
		margin = min(margin, x[order[o.TopK-1]]-x[order[o.TopK]])
	}
	t := float64(o.Temperature)
	hi := x[kept[0]] / t
	sum := 0.0
	for _, id := range kept {
		probs[id] = math.Exp(x[id]/t - hi)
		sum += probs[id]
	}
	for _, id := range kept {
		probs[id] /= sum
	}
	if o.TopP > 0 && o.TopP < 1 {
		drop := []int{}
		for _, id := range kept {
			better := 0.0
			for _, other := range kept {
				if probs[other] > probs[id] {
					better += probs[other]
				}
			}
			margin = min(margin, math.Abs(better-float64(o.TopP)))
			if better >= float64(o.TopP) {
				drop = append(drop, id)
			}
		}
		for _, id := range drop {
			probs[id] = 0
		}
	}
	if o.MinP > 0 {
		best := slices.Max(probs)
		floor := float64(o.MinP) * best
		for id, p := range probs {
			if p == 0 {
				continue
			}
			margin = min(margin, math.Abs(p-floor))
			if p < floor {
				probs[id] = 0
			}
		}
	}
	sum = 0
	for _, p := range probs {
		sum += p
	}
	for id := range probs {
		probs[id] /= max(sum, 1e-20)
	}
	return probs, margin
}

// refResidual is spec 6.4 on dense float64 rows: norm(max(p − q, 0)), or p
// when that has no mass. A sparse p's residual lives on p's ids, which is the
// same thing, since p is 0 elsewhere.
func refResidual(p, q []float64) []float64 {
	r := make([]float64, len(p))
	mass := 0.0
	for i := range p {
		r[i] = max(p[i]-q[i], 0)
		mass += r[i]
	}
	if mass <= 1e-20 {
		return slices.Clone(p)
	}
	for i := range r {
		r[i] /= mass
	}
	return r
}

// hostRows evaluates d and returns its rows as dense float64 vectors over
// vocab ids. It fails the test if a sparse row repeats an id or holds one
// outside the vocabulary, or if d's arrays have unexpected shapes or dtypes.
func hostRows(t *mlxtest.T, d sample.Distribution, vocab int) [][]float64 {
	t.Helper()
	if d.Probs.DType() != mlx.Float32 {
		t.Fatalf("Probs dtype %v, want float32", d.Probs.DType())
	}
	rows, width := d.Probs.Dim(0), d.Probs.Dim(1)
	probs := t.Float32s(d.Probs)
	out := make([][]float64, rows)
	if d.Dense() {
		if width != vocab {
			t.Fatalf("dense rows over %d ids, want %d", width, vocab)
		}
		for r := range out {
			out[r] = f64s(probs[r*width : (r+1)*width])
		}
		return out
	}
	if d.IDs.DType() != mlx.Int32 {
		t.Fatalf("IDs dtype %v, want int32", d.IDs.DType())
	}
	t.Shape(d.IDs, rows, width)
	ids := t.Int32s(d.IDs)
	for r := range out {
		out[r] = make([]float64, vocab)
		seen := map[int32]bool{}
		for j := range width {
			id := ids[r*width+j]
			if id < 0 || int(id) >= vocab || seen[id] {
				t.Fatalf("row %d: id %d out of range or repeated (ids %v)", r, id, ids[r*width:(r+1)*width])
			}
			seen[id] = true
			out[r][id] = float64(probs[r*width+j])
		}
	}
	return out
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// closeRows fails unless got and want agree to abs + rel·|want| everywhere
// and every value of got is finite.
func closeRows(t testing.TB, what string, got, want [][]float64, abs, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for r := range want {
		for i := range want[r] {
			g, w := got[r][i], want[r][i]
			if math.IsNaN(g) || math.IsInf(g, 0) || math.Abs(g-w) > abs+rel*math.Abs(w) {
				t.Fatalf("%s: row %d id %d = %.9g, want %.9g\n got  %.6g\n want %.6g", what, r, i, g, w, got[r], want[r])
			}
		}
	}
}

// randLogits returns rows×vocab logits ~ N(0, scale²) rounded to float32 (so
// that MLX and the reference see the same values).
func randLogits(rng *rand.Rand, rows, vocab int, scale float64) [][]float64 {
	out := make([][]float64, rows)
	for r := range out {
		out[r] = make([]float64, vocab)
		for i := range out[r] {
			out[r][i] = float64(float32(rng.NormFloat64() * scale))
		}
	}
	return out
}

// toBFloat16 rounds each value down in magnitude to a bfloat16 (the top 16
// bits of its float32), so that a cast to bfloat16 is exact.
func toBFloat16(rows [][]float64) {
	for _, row := range rows {
		for i, v := range row {
			bits := math.Float32bits(float32(v)) &^ 0xffff
			row[i] = float64(math.Float32frombits(bits))
		}
	}
}

// array returns rows as a float32 [R,V] array.
func array(rows [][]float64) *mlx.Array {
	flat := make([]float32, 0, len(rows)*len(rows[0]))
	for _, row := range rows {
		for _, v := range row {
			flat = append(flat, float32(v))
		}
	}
	return mlx.FromFloat32s(flat, len(rows), len(rows[0]))
}

// dense builds a dense Distribution from host rows.
func dense(rows [][]float32) sample.Distribution {
	flat := slices.Concat(rows...)
	return sample.Distribution{Probs: mlx.FromFloat32s(flat, len(rows), len(rows[0]))}
}

// sparse builds a sparse Distribution from host rows of ids and probabilities.
func sparse(ids [][]int32, probs [][]float32) sample.Distribution {
	return sample.Distribution{
		IDs:   mlx.FromInt32s(slices.Concat(ids...), len(ids), len(ids[0])),
		Probs: mlx.FromFloat32s(slices.Concat(probs...), len(probs), len(probs[0])),
	}
}

// toDense spreads sparse host rows over vocab ids (float64).
func toDense(ids [][]int32, probs [][]float32, vocab int) [][]float64 {
	out := make([][]float64, len(ids))
	for r := range ids {
		out[r] = make([]float64, vocab)
		for j, id := range ids[r] {
			out[r][id] += float64(probs[r][j])
		}
	}
	return out
}

// chiSquareOK fails t unless the observed counts of n draws fit probs at the
// 0.1% level (Pearson's test). Ids with probability 0 must never be drawn.
func chiSquareOK(t testing.TB, counts []int, probs []float64, n int) {
	t.Helper()
	stat, df := 0.0, -1
	for i, p := range probs {
		if p == 0 {
			if counts[i] != 0 {
				t.Fatalf("id %d has probability 0 but was drawn %d times", i, counts[i])
			}
			continue
		}
		e := p * float64(n)
		stat += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
		df++
	}
	// Wilson–Hilferty approximation of the chi-square quantile; z = 3.09 is
	// the standard normal's 99.9% point.
	k := float64(df)
	crit := k * math.Pow(1-2/(9*k)+3.09*math.Sqrt(2/(9*k)), 3)
	if stat > crit {
		t.Fatalf("chi-square %.2f over %d degrees of freedom exceeds %.2f (p < 0.001)\ncounts %v\nprobs  %v", stat, df, crit, counts, probs)
	}
}

// histogram counts the occurrences of each id below vocab.
func histogram(t testing.TB, ids []int32, vocab int) []int {
	t.Helper()
	counts := make([]int, vocab)
	for _, id := range ids {
		if id < 0 || int(id) >= vocab {
			t.Fatalf("drew id %d outside [0, %d)", id, vocab)
		}
		counts[id]++
	}
	return counts
}

// mustPanic fails t unless fn, run on the MLX worker, panics.
func mustPanic(t *testing.T, fn func(t *mlxtest.T)) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	mlxtest.Run(t, fn)
}
