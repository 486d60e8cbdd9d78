package sample

import (
	"fmt"
	"slices"

	"github.com/specula-dev/specula/mlx"
)

// history is the part of the committed context that penalties can still see.
// With a window of w > 0 tokens only the last w committed tokens matter: a
// chain row sees the committed context plus c >= 0 chain tokens, so its
// window never reaches further back than the committed window. The whole
// context (w < 0) needs only each token's count, kept incrementally so that
// a long context costs O(distinct tokens) per call, not O(length).
type history struct {
	window int               // RepeatLastN; 0 when penalties are off
	recent []int32           // window > 0: the last `window` committed tokens, oldest first
	counts map[int32]float32 // window < 0: occurrences of every committed token
}

func newHistory(o Options, tokens []int32) history {
	h := history{}
	if !o.penalised() {
		return h // nothing will ever read it
	}
	h.window = o.RepeatLastN
	if h.window < 0 {
		h.counts = make(map[int32]float32)
	}
	h.commit(tokens)
	return h
}

// commit appends tokens to the context.
func (h *history) commit(tokens []int32) {
	switch {
	case h.window > 0:
		h.recent = append(h.recent, tokens...)
		if over := len(h.recent) - h.window; over > 0 {
			h.recent = append(h.recent[:0], h.recent[over:]...)
		}
	case h.window < 0:
		for _, t := range tokens {
			h.counts[t]++
		}
	}
}

// tokenCounts returns, as a float32 [rows, vocab] array, how often each id
// occurs in each row's penalty window, or nil when no row sees any token.
// Row i's context is the committed context followed by the first first+i
// tokens of chain (an int32 [n] array, possibly lazy, possibly nil when n is
// 0), and its window is the last h.window tokens of that context — exactly
// what plain decoding at that position would see, so chain rows drop
// committed tokens that slide out of their window.
//
// The rows' windows are known from shapes alone; only the chain's token
// values are lazy. So the host builds, per row, a weight for every distinct
// committed id and a 0/1 weight for every chain position, and one
// scatter-add on the device turns ids and weights into counts.
func (h *history) tokenCounts(rows, vocab int, chain *mlx.Array, n, first int) *mlx.Array {
	var ids []int32   // distinct committed ids, one column each
	var wts []float32 // [wtsRows, len(ids)] row-major
	cols, wtsRows := 0, rows
	switch {
	case h.window < 0:
		// Every row sees all of the committed context: one shared row.
		ids = make([]int32, 0, len(h.counts))
		for t := range h.counts {
			ids = append(ids, t)
		}
		slices.Sort(ids) // deterministic graphs; the counts are exact either way
		cols, wtsRows = len(ids), 1
		wts = make([]float32, cols)
		for u, t := range ids {
			wts[u] = h.counts[t]
		}
	case h.window > 0:
		col := make(map[int32]int, len(h.recent))
		for _, t := range h.recent {
			if _, ok := col[t]; !ok {
				col[t] = len(ids)
				ids = append(ids, t)
			}
		}
		cols = len(ids)
		wts = make([]float32, rows*cols)
		for i := range rows {
			// A committed token is inside row i's window iff fewer than
			// window tokens follow it, counting the row's first+i chain
			// tokens; a long enough chain pushes every one out.
			from := min(len(h.recent), max(0, len(h.recent)+first+i-h.window))
			for _, t := range h.recent[from:] {
				wts[i*cols+col[t]]++
			}
		}
	}

	// Chain position j is in row i's context iff j < first+i, and in its
	// window iff at most window−1 context tokens follow it.
	chainWts := make([]float32, rows*n)
	for i := range rows {
		c := first + i
		from := 0
		if h.window > 0 {
			from = max(0, c-h.window)
		}
		for j := from; j < c; j++ {
			chainWts[i*n+j] = 1
		}
	}

	var idx, vals []*mlx.Array
	if cols > 0 {
		idx = append(idx, mlx.BroadcastTo(mlx.FromInt32s(ids, 1, cols), rows, cols))
		vals = append(vals, mlx.BroadcastTo(mlx.FromFloat32s(wts, wtsRows, cols), rows, cols))
	}
	if slices.Contains(chainWts, 1) {
		idx = append(idx, mlx.BroadcastTo(mlx.Reshape(chain, 1, n), rows, n))
		vals = append(vals, mlx.FromFloat32s(chainWts, rows, n))
	}
	if len(idx) == 0 {
		return nil
	}
	return mlx.ScatterAddAxis(mlx.Zeros(mlx.Float32, rows, vocab),
		mlx.Concatenate(1, idx...), mlx.Concatenate(1, vals...), 1)
}

// penalise applies spec 6.3 step 1 to float32 logits [R,V] given each row's
// window counts [R,V]. The repeat penalty comes first and the subtractive
// ones after it, so a repeat penalty scales the model's own logit rather than
// one already lowered by presence or frequency.
func penalise(logits, counts *mlx.Array, o Options) *mlx.Array {
	zero := f32(0)
	seen := mlx.Greater(counts, zero)
	x := logits
	if o.repeatOn() {
		r := f32(o.RepeatPenalty)
		scaled := mlx.Where(mlx.Less(x, zero), mlx.Multiply(x, r), mlx.Divide(x, r))
		x = mlx.Where(seen, scaled, x)
	}
	if o.PresencePenalty != 0 {
		x = mlx.Subtract(x, mlx.Multiply(mlx.AsType(seen, mlx.Float32), f32(o.PresencePenalty)))
	}
	if o.FrequencyPenalty != 0 {
		x = mlx.Subtract(x, mlx.Multiply(counts, f32(o.FrequencyPenalty)))
	}
	return x
}

// chainTokens validates a chain against the number of logit rows and returns
// it as a flat int32 array with its length (nil, 0 for no chain).
func chainTokens(chain *mlx.Array, rows int) (*mlx.Array, int) {
	if chain == nil {
		return nil, 0
	}
	n := chain.Size()
	if rows > n+1 {
		panic(fmt.Sprintf("sample: %d logit rows cannot align to the end of a %d-token chain (at most %d rows)", rows, n, n+1))
	}
	if chain.NDim() != 1 {
		chain = mlx.Reshape(chain, n)
	}
	return asType(chain, mlx.Int32), n
}
