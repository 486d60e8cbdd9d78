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

// Open starts a session. The continuation goes to the device once, here:
// making an array of host data waits on MLX's CUDA backend for the queued
// work, so a proposal made of host data while a verification runs (a
// chained round's) would stall the host until the device is idle.
func (o *Oracle) Open(*sample.Sampler) DraftSession {
	seq := mlx.FromInt32s(o.seq, len(o.seq))
	mlx.Pin(seq)
	return &oracleSession{o: o, seq: seq}
}

// Limit is the deepest proposal.
func (o *Oracle) Limit() int { return o.limit }

// Selector is false: the oracle proposes one-hot rows.
func (o *Oracle) Selector() bool { return false }

type oracleSession struct {
	o        *Oracle
	seq      *mlx.Array // o.seq on the device (pinned until Close)
	frontier int        // slot after the last reported token
}

func (s *oracleSession) Committed(tokens, _ *mlx.Array, position int) {
	s.frontier = max(s.frontier, position+tokens.Dim(1))
}

// Retract forgets the reports from position on: the oracle proposes from
// its frontier alone, so rounds chain on it (Retractor).
func (s *oracleSession) Retract(position int) { s.frontier = min(s.frontier, position) }

func (s *oracleSession) Settle() {}

// Close releases the continuation's array.
func (s *oracleSession) Close() {
	if s.seq != nil {
		mlx.Unpin(s.seq)
		s.seq = nil
	}
}

// Propose returns the continuation after current, which sits at the
// frontier.
func (s *oracleSession) Propose(_ *mlx.Array, max int) *Candidates {
	start := s.frontier + 1
	n := min(max, s.o.limit, len(s.o.seq)-start)
	if n <= 0 || s.frontier == 0 || s.seq == nil {
		return nil
	}
	next := mlx.SliceAxis(s.seq, 0, start, start+n)
	return &Candidates{
		Tokens: mlx.Reshape(next, 1, n),
		Dist:   sample.Distribution{IDs: mlx.Reshape(next, n, 1), Probs: mlx.Full(1, mlx.Float32, n, 1)},
	}
}
