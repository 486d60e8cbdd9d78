package sample

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// Sampler holds one request's sampling state: its options, the penalty
// history (the committed context) and the position in its sequence of
// random keys. Its methods that take or return arrays build lazy graph and
// must run on the MLX worker; New, Options, Temperature and Commit are plain
// Go.
type Sampler struct {
	opts    Options
	history history
	// base and next name the key of the next random draw: key number next
	// of the sequence that base starts (see keySeed).
	base, next uint64
}

// New returns a sampler for opts whose penalty history starts with history
// (the prompt; the slice is copied). An unseeded sampler takes its key base
// from crypto/rand.
func New(opts Options, history []int32) *Sampler {
	s := &Sampler{opts: opts, history: newHistory(opts, history)}
	if opts.UseSeed {
		s.base = opts.Seed
	} else {
		var b [8]byte
		rand.Read(b[:]) // never fails (crypto/rand aborts the program instead)
		s.base = binary.LittleEndian.Uint64(b[:])
	}
	return s
}

// Options returns the request's settings.
func (s *Sampler) Options() Options { return s.opts }

// Temperature returns the request's temperature (<= 0: greedy).
func (s *Sampler) Temperature() float32 { return s.opts.Temperature }

// UsesHistory reports whether Distribution depends on the committed
// history: whether any penalty applies. Without one, a distribution can be
// built before the tokens before it are known to the host.
func (s *Sampler) UsesHistory() bool { return s.opts.penalised() }

// Commit appends emitted tokens to the penalty history.
func (s *Sampler) Commit(tokens []int32) { s.history.commit(tokens) }

// Distribution applies the request's transforms (spec 6.3: penalties,
// temperature, top-k, top-p, min-p) to logits [R,V] of any float dtype,
// without changing the sampler. chain (integer [n], possibly lazy) or nil
// extends the penalty history row by row, aligned to the chain's end: row i
// sees the committed history followed by the chain's first n−R+1+i tokens,
// which requires R <= n+1 (verification passes the n drafts with R = n+1, so
// row i sees d_0 … d_{i−1}; a pipelined decode passes its in-flight token as
// a one-token chain with R = 1). Without a chain every row sees the committed
// history.
//
// The result is greedy one-hot (IDs int32 [R,1], Probs ones [R,1]) when the
// temperature is <= 0, sparse over the top-k ids (IDs int32 [R,k], Probs
// float32 [R,k]) with 0 < TopK < V, and dense (Probs float32 [R,V])
// otherwise.
func (s *Sampler) Distribution(logits, chain *mlx.Array) Distribution {
	if logits.NDim() != 2 {
		panic(fmt.Sprintf("sample: Distribution needs logits [R,V], got %v", logits))
	}
	rows, vocab := logits.Dim(0), logits.Dim(1)
	chain, n := chainTokens(chain, rows)
	x := asType(logits, mlx.Float32)
	if s.opts.penalised() {
		if counts := s.history.tokenCounts(rows, vocab, chain, n, n-rows+1); counts != nil {
			x = penalise(x, counts, s.opts)
		}
	}
	return transform(x, s.opts)
}

// Sample draws one token per row of logits [R,V]: int32 [R]. It is
// SampleDistribution(Distribution(logits, chain)).
func (s *Sampler) Sample(logits, chain *mlx.Array) *mlx.Array {
	return s.SampleDistribution(s.Distribution(logits, chain))
}

// SampleDistribution draws one id per row of d, independently: int32 [R].
// Each call consumes one random key. Rows with a single candidate (greedy
// one-hot) are returned without a draw, though the key is still consumed so
// that the key sequence does not depend on the layout.
func (s *Sampler) SampleDistribution(d Distribution) *mlx.Array {
	key := s.advance()
	if !d.Dense() && d.IDs.Dim(1) == 1 {
		return asType(mlx.Reshape(d.IDs, d.IDs.Dim(0)), mlx.Int32)
	}
	// A zero probability becomes −∞ and is never drawn.
	j := mlx.RandomCategorical(mlx.RandomKey(key), mlx.Log(asType(d.Probs, mlx.Float32)), 1)
	if d.Dense() {
		return mlx.AsType(j, mlx.Int32)
	}
	return pick(d.IDs, j)
}

// Skip consumes n random keys without drawing: a caller that knows what
// its draws would give (greedy verification) keeps the keys of later draws
// where the full path would have them.
func (s *Sampler) Skip(n int) { s.next += uint64(n) }

// Uniform returns r independent draws from [0, 1): float32 [r]. It consumes
// one random key.
func (s *Sampler) Uniform(r int) *mlx.Array {
	return mlx.RandomUniform(mlx.RandomKey(s.advance()), mlx.Float32, r)
}

// Choose is the selector's callback (spec 8.3): given candidate ids [R,K]
// (integer) and their scores [R,K] (any float dtype) it picks one candidate
// per row using the request's temperature only — no penalties, top-k, top-p
// or min-p. tokens is int32 [R] (tokens[r] = ids[r, j_r]) and probs the
// float32 [R,K] distribution j_r was drawn from: with temperature <= 0, j_r
// is the row's argmax (lowest index on ties) and probs one-hot at j_r;
// otherwise probs = softmax(scores / T) and j_r one categorical draw. Each
// call consumes one random key, also when greedy, so that switching the
// temperature does not shift the keys of the draws that follow.
func (s *Sampler) Choose(ids, scores *mlx.Array) (tokens, probs *mlx.Array) {
	key := s.advance()
	x := asType(scores, mlx.Float32)
	if s.opts.greedy() {
		j := mlx.AsType(mlx.Argmax(x, 1, false), mlx.Int32)
		k := x.Dim(1)
		hot := mlx.Equal(mlx.Reshape(mlx.Arange(0, float64(k), 1, mlx.Int32), 1, k), mlx.ExpandDims(j, 1))
		return pick(ids, j), mlx.AsType(hot, mlx.Float32)
	}
	z := scaled(x, s.opts.Temperature)
	j := mlx.RandomCategorical(mlx.RandomKey(key), z, 1)
	return pick(ids, j), mlx.Softmax(z, true, 1)
}

// pick returns ids[r, j[r]] as int32 [R] for ids [R,K] and column indices j [R].
func pick(ids, j *mlx.Array) *mlx.Array {
	got := mlx.TakeAlongAxis(ids, mlx.ExpandDims(j, 1), 1)
	return asType(mlx.Squeeze(got, 1), mlx.Int32)
}

// advance returns the seed of the next random key and moves past it.
func (s *Sampler) advance() uint64 {
	k := keySeed(s.base, s.next)
	s.next++
	return k
}

// keySeed returns the seed of key number n of the sequence that base starts:
// the n-th output of the SplitMix64 generator seeded with base. Its output
// function is a strong 64-bit mixer, so the keys of neighbouring counters,
// and of neighbouring seeds, are unrelated, and key n is computed directly
// from (base, n) with no state to carry.
func keySeed(base, n uint64) uint64 {
	const golden = 0x9e3779b97f4a7c15 // 2^64 / φ, SplitMix64's increment
	z := base + (n+1)*golden
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
