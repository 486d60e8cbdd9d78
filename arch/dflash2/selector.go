package dflash2

import (
	"fmt"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// selector is the low-rank candidate selector (spec/dflash2.md section 3):
// each position's draft token is chosen among the top-K candidates of its
// logits, scored by the logit plus a pairwise term with the token chosen just
// before it. All its maths runs in float32.
type selector struct {
	pred *nn.Embedding // predecessor_codebook [V, R], looked up as float32
	succ *nn.Embedding // successor_codebook [V, R], looked up as float32
	proj *nn.Linear    // hidden_projection [R, H], float32
	topK int           // K
}

// Lattice is a block's candidate lattice (spec/dflash2.md 3.2), for n
// predicted rows: everything the walk scores, materialised for tools and
// tests. Select builds only the rows it walks.
type Lattice struct {
	// IDs are the top-K ids of each row's logits [n, K] (int32), by
	// descending logit, ties to the lower id.
	IDs *mlx.Array
	// Unary holds their logits [n, K] (float32).
	Unary *mlx.Array
	// Projection is u = hidden_projection(h) [n, R] (float32).
	Projection *mlx.Array
	// Predecessors [n, K] (int32) are the anchor in row 0 and IDs[p−1] in
	// row p: the token each predecessor index stands for.
	Predecessors *mlx.Array
	// Scores [n, K, K] (float32): Scores[p, i, j] is candidate j's score at
	// position p given that candidate i was chosen at p − 1 (at p = 0 every
	// row is the anchor's).
	Scores *mlx.Array
}

// candidates returns the top-K ids of logits [n, V] sorted by descending
// logit with ties to the lower id (int32 [n, K]), and their logits (float32
// [n, K]).
//
// The order is fixed so that outputs are deterministic: argpartition picks
// the K largest (MLX breaks ties by index), the K ids are put in ascending
// order, and a sort by descending logit that keeps equal logits in place
// (MLX's argsort breaks ties by index) gives the lower id first.
func (s *selector) candidates(logits *mlx.Array) (ids, unary *mlx.Array) {
	k := s.topK
	if ids, unary, ok := mlx.TopKCPU(f32(logits), k); ok {
		return ids, unary // the same, as one node on the CPU
	}
	neg := mlx.Negative(f32(logits))
	top := mlx.Sort(mlx.SliceAxis(mlx.Argpartition(neg, k-1, -1), 1, 0, k), 1)
	order := mlx.Argsort(mlx.TakeAlongAxis(neg, top, 1), 1)
	ids = mlx.AsType(mlx.TakeAlongAxis(top, order, 1), mlx.Int32)
	return ids, mlx.TakeAlongAxis(f32(logits), ids, 1)
}

// pairScores returns unary[p, j] + Σ_r a[p, i, r] · u[p, r] · b[p, j, r]
// [n, I, K] for predecessor rows a [n, I, R], u [n, R], successor rows
// b [n, K, R] and unary [n, K]: the lattice rows of I predecessors.
func pairScores(a, u, b, unary *mlx.Array) *mlx.Array {
	au := mlx.Multiply(a, mlx.ExpandDims(u, 1))
	return mlx.Add(mlx.ExpandDims(unary, 1), mlx.Matmul(au, mlx.SwapAxes(b, 1, 2)))
}

// rows reshapes the block rows hidden [1, n, H] and logits [1, n, V] to
// [n, H] and [n, V], and returns the candidates, unary scores, u and the
// successor codebook rows of the candidates [n, K, R].
func (s *selector) rows(hidden, logits *mlx.Array) (ids, unary, u, succ *mlx.Array) {
	if hidden.NDim() != 3 || logits.NDim() != 3 || hidden.Dim(0) != 1 || logits.Dim(0) != 1 || hidden.Dim(1) != logits.Dim(1) {
		panic(fmt.Sprintf("dflash2: Select wants hidden [1, n, H] and logits [1, n, V], got %v and %v", hidden.Shape(), logits.Shape()))
	}
	n := hidden.Dim(1)
	ids, unary = s.candidates(mlx.Reshape(logits, n, logits.Dim(2)))
	u = s.proj.Forward(f32(mlx.Reshape(hidden, n, hidden.Dim(2))))
	succ = s.succ.Lookup(ids)
	return ids, unary, u, succ
}

// lattice builds the whole lattice for block rows after anchor [1].
func (s *selector) lattice(hidden, logits, anchor *mlx.Array) Lattice {
	ids, unary, u, succ := s.rows(hidden, logits)
	n, k := ids.Dim(0), ids.Dim(1)
	first := mlx.BroadcastTo(mlx.Reshape(mlx.AsType(anchor, mlx.Int32), 1, 1), 1, k)
	preds := first
	if n > 1 {
		preds = mlx.Concatenate(0, first, mlx.SliceAxis(ids, 0, 0, n-1))
	}
	a := s.pred.Lookup(preds)
	return Lattice{IDs: ids, Unary: unary, Projection: u, Predecessors: preds, Scores: pairScores(a, u, succ, unary)}
}

// walk chooses the block's tokens left to right (spec/dflash2.md 3.3):
// position p scores its K candidates given the token chosen at p − 1 (the
// anchor at p = 0) and calls choose on that one row. The predecessor's
// codebook row is looked up by the chosen token itself, which is
// ids[p−1, prev] by construction. Everything stays a lazy graph: the chosen
// token feeds the next position's gather without a host read.
func (s *selector) walk(hidden, logits, anchor *mlx.Array, choose model.ChooseFunc) (tokens, ids, probs *mlx.Array) {
	ids, unary, u, succ := s.rows(hidden, logits)
	n, k := ids.Dim(0), ids.Dim(1)
	prev := mlx.Reshape(mlx.AsType(anchor, mlx.Int32), 1)
	toks := make([]*mlx.Array, n)
	rows := make([]*mlx.Array, n)
	for p := range n {
		at := func(x *mlx.Array) *mlx.Array { return mlx.SliceAxis(x, 0, p, p+1) }
		a := mlx.ExpandDims(s.pred.Lookup(prev), 0) // [1, 1, R]
		row := mlx.Reshape(pairScores(a, at(u), at(succ), at(unary)), 1, k)
		tok, pr := choose(at(ids), row)
		toks[p] = mlx.Reshape(mlx.AsType(tok, mlx.Int32), 1)
		rows[p] = mlx.Reshape(pr, 1, k)
		prev = toks[p]
	}
	tokens = mlx.Reshape(mlx.Concatenate(0, toks...), 1, n)
	probs = mlx.Reshape(mlx.Concatenate(0, rows...), 1, n, k)
	return tokens, mlx.Reshape(ids, 1, n, k), probs
}

// walkGreedy is walk with a greedy choose as one CPU node
// (mlx.SelectorWalkCPU), plus each position's confidence; ok is false when
// the kernel cannot serve it (not the CPU, a quantized or non-float32
// predecessor table).
func (s *selector) walkGreedy(hidden, logits, anchor *mlx.Array) (tokens, ids, probs, conf *mlx.Array, ok bool) {
	t := s.pred.Table
	if !t.Quant.IsZero() || t.Weight.DType() != mlx.Float32 || mlx.CurrentDevice() != mlx.CPU {
		return nil, nil, nil, nil, false
	}
	ids, unary, u, succ := s.rows(hidden, logits)
	n, k := ids.Dim(0), ids.Dim(1)
	tok, pr, conf, ok := mlx.SelectorWalkCPU(ids, unary, u, succ, t.Weight, mlx.AsType(anchor, mlx.Int32))
	if !ok {
		return nil, nil, nil, nil, false
	}
	return mlx.Reshape(tok, 1, n), mlx.Reshape(ids, 1, n, k), mlx.Reshape(pr, 1, n, k), conf, true
}

// walkGreedyLattice is the greedy walk as picks from the whole lattice, on
// any device: one batched product scores each position's candidates given
// every candidate that can precede them ([n, K, K]), and the walk then only
// takes, per position, the row of the candidate chosen before it and its
// argmax. At go-tiny's shapes (7 positions, K 16) that is 86 graph nodes
// against the composed walk's 193 (counted with mlx.GraphOps on the CPU);
// on the GPU each node costs the host a few µs. It returns what walkGreedy
// returns; the scores are the composed walk's up to the order of the
// pairwise term's sum.
func (s *selector) walkGreedyLattice(hidden, logits, anchor *mlx.Array) (tokens, ids, probs, conf *mlx.Array) {
	l := s.lattice(hidden, logits, anchor)
	n, k := l.IDs.Dim(0), l.IDs.Dim(1)
	// Row p·K + i of flat holds position p's scores given predecessor i.
	flat := mlx.Reshape(l.Scores, n*k, k)
	rows := make([]*mlx.Array, n) // [1, K] each: the scores the walk chose from
	cols := make([]*mlx.Array, n) // [1] each: the index chosen
	for p := range n {
		if p == 0 {
			// Every predecessor row of position 0 is the anchor's.
			rows[p] = mlx.SliceAxis(flat, 0, 0, 1)
		} else {
			rows[p] = mlx.Take(flat, mlx.AddScalar(cols[p-1], float64(p*k)), 0)
		}
		cols[p] = mlx.Argmax(rows[p], 1, false)
	}
	scores := mlx.Concatenate(0, rows...)                                      // [n, K]
	j := mlx.ExpandDims(mlx.AsType(mlx.Concatenate(0, cols...), mlx.Int32), 1) // [n, 1]
	tokens = mlx.Reshape(mlx.TakeAlongAxis(l.IDs, j, 1), 1, n)
	hot := mlx.Equal(mlx.Reshape(mlx.Arange(0, float64(k), 1, mlx.Int32), 1, k), j)
	probs = mlx.Reshape(mlx.AsType(hot, mlx.Float32), 1, n, k)
	conf = mlx.Exp(mlx.Subtract(mlx.Max(scores, false, 1), mlx.LogSumExp(scores, false, 1)))
	return tokens, mlx.Reshape(l.IDs, 1, n, k), probs, conf
}

// SelectGreedy is Select at temperature 0 in few graph nodes (see
// model.GreedySelector): one node on the CPU (walkGreedy), elsewhere picks
// from the whole lattice (walkGreedyLattice). The same walk, scores equal up
// to the order of the pairwise term's sum, and each position's largest
// probability at temperature 1.
func (d *Draft) SelectGreedy(hidden, logits, anchor *mlx.Array) (tokens, ids, probs, confidence *mlx.Array, ok bool) {
	sel := d.mustSelector()
	if tokens, ids, probs, confidence, ok := sel.walkGreedy(hidden, logits, anchor); ok {
		return tokens, ids, probs, confidence, true
	}
	tokens, ids, probs, confidence = sel.walkGreedyLattice(hidden, logits, anchor)
	return tokens, ids, probs, confidence, true
}

// Select walks the candidate lattice of block rows hidden [1, n, H] with
// their logits [1, n, V] (from Unembed), starting after anchor [1], and calls
// choose once per position with that position's K candidate ids and the K
// scores given the candidate chosen before it. It returns the chosen tokens
// [1, n] (int32), the candidate ids [1, n, K] (int32, by descending logit)
// and the proposal distribution of each position over its candidates
// [1, n, K] — the conditional the token was drawn from, so verification
// stays exact. It builds one lazy graph and reads nothing back.
func (d *Draft) Select(hidden, logits, anchor *mlx.Array, choose model.ChooseFunc) (tokens, ids, probs *mlx.Array) {
	return d.mustSelector().walk(hidden, logits, anchor, choose)
}

// Lattice returns the whole candidate lattice of block rows hidden [1, n, H]
// with their logits [1, n, V] after anchor [1] (for tools and tests; Select
// scores only the rows it walks).
func (d *Draft) Lattice(hidden, logits, anchor *mlx.Array) Lattice {
	return d.mustSelector().lattice(hidden, logits, anchor)
}

func (d *Draft) mustSelector() *selector {
	if d.sel == nil {
		panic("dflash2: the draft has no weights: call LoadWeights first")
	}
	return d.sel
}

func f32(a *mlx.Array) *mlx.Array {
	if a.DType() == mlx.Float32 {
		return a
	}
	return mlx.AsType(a, mlx.Float32)
}
