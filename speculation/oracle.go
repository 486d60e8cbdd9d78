package speculation

import (
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/sample"
)

// Oracle is a drafter that proposes the target's own greedy continuation,
// known in advance: `specula bench --oracle` uses it to measure the best
// speedup the engine can reach at each depth, since every draft is accepted
// and drafting costs nothing.
type Oracle struct {
	seq   []int32 // the prompt followed by the target's greedy continuation
	limit int
}

// NewOracle returns an oracle over seq (the prompt and the target's greedy
// continuation) drafting at most limit tokens per round.
func NewOracle(seq []int32, limit int) *Oracle { return &Oracle{seq: seq, limit: limit} }

// Open starts a session.
func (o *Oracle) Open(*sample.Sampler) DraftSession { return &oracleSession{o: o} }

// Limit is the deepest proposal.
func (o *Oracle) Limit() int { return o.limit }

// Selector is false: the oracle proposes one-hot rows.
func (o *Oracle) Selector() bool { return false }

type oracleSession struct {
	o        *Oracle
	frontier int // slot after the last reported token
}

func (s *oracleSession) Committed(tokens, _ *mlx.Array, position int) {
	s.frontier = max(s.frontier, position+tokens.Dim(1))
}

// Retract forgets the reports from position on: the oracle proposes from
// its frontier alone, so rounds chain on it (Retractor).
func (s *oracleSession) Retract(position int) { s.frontier = min(s.frontier, position) }

func (s *oracleSession) Settle() {}
func (s *oracleSession) Close()  {}

// Propose returns the continuation after current, which sits at the
// frontier.
func (s *oracleSession) Propose(_ *mlx.Array, max int) *Candidates {
	start := s.frontier + 1
	n := min(max, s.o.limit, len(s.o.seq)-start)
	if n <= 0 || s.frontier == 0 {
		return nil
	}
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	next := s.o.seq[start : start+n]
	return &Candidates{
		Tokens: mlx.FromInt32s(next, 1, n),
		Dist:   sample.Distribution{IDs: mlx.FromInt32s(next, n, 1), Probs: mlx.FromFloat32s(ones, n, 1)},
	}
}
