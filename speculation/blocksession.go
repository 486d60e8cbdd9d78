package speculation

import (
	"fmt"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
)

// BlockDrafter serves sessions for a block draft (DFlash, DFlash2): one draft
// forward writes pending context rows and a block [anchor, mask × n], and
// returns the block's predictions.
type BlockDrafter struct {
	draft        model.BlockDraft
	selector     model.Selector // non-nil when the manifest declared "selector"
	targetCaches []cache.Cache
	draftCaches  []cache.Cache
	blockSize    int
	maskToken    int32
	// wholeBlock: the draft was trained on whole blocks attending both
	// ways (model.BidirectionalBlock), so every proposal runs the anchor
	// and blockSize−1 mask rows, whatever the depth.
	wholeBlock bool
}

// NewBlockDrafter wraps a block draft and its caches. useSelector selects the
// candidate-selector proposal; it is honoured only when the draft implements
// model.Selector (the manifest's declaration was proven by the registry).
func NewBlockDrafter(draft model.BlockDraft, targetCaches, draftCaches []cache.Cache, useSelector bool) *BlockDrafter {
	bs, mask := draft.BlockParams()
	d := &BlockDrafter{draft: draft, targetCaches: targetCaches, draftCaches: draftCaches, blockSize: bs, maskToken: mask}
	if sel, ok := draft.(model.Selector); ok && useSelector {
		d.selector = sel
	}
	if bb, ok := draft.(model.BidirectionalBlock); ok {
		d.wholeBlock = bb.BidirectionalBlock()
	}
	return d
}

// Limit is blockSize−1: the block holds the anchor and the drafts.
func (d *BlockDrafter) Limit() int { return d.blockSize - 1 }

// Selector reports whether proposals go through the candidate selector.
func (d *BlockDrafter) Selector() bool { return d.selector != nil }

// Open starts a session at the draft caches' current offset (a restored
// prefix, if any).
func (d *BlockDrafter) Open(s *sample.Sampler) DraftSession {
	return &blockSession{d: d, sampler: s, ctxOffset: d.draftCaches[0].Offset()}
}

// blockSession is the draft side of one request (spec 4.2).
//
// Invariant: frontier = ctxOffset + pendingCount is the slot after the last
// reported token. At rest (after Settle or Close) the draft caches hold only
// context rows and sit at ctxOffset.
type blockSession struct {
	d       *BlockDrafter
	sampler *sample.Sampler

	ctxOffset        int          // slot after the last feature row written
	pending          []*mlx.Array // held feature rows, each [1, r, F] (pinned)
	pendingCount     int
	blockOutstanding bool // a proposal's block sits in the caches with a scheduled rewind
	closed           bool
	// confidence: proposals carry Candidates.Confidence (a confidence floor
	// reads them); otherwise that work is skipped.
	confidence bool
}

// proposeConfidence makes the session's proposals carry confidences.
func (s *blockSession) proposeConfidence() { s.confidence = true }

func (s *blockSession) frontier() int { return s.ctxOffset + s.pendingCount }

// Committed buffers the feature rows past the frontier (spec 4.4).
func (s *blockSession) Committed(tokens, features *mlx.Array, position int) {
	n := tokens.Dim(1)
	skip := s.frontier() - position
	if skip < 0 {
		panic(fmt.Sprintf("speculation: committed run at slot %d leaves slots %d..%d unfed (frontier %d)", position, s.frontier(), position-1, s.frontier()))
	}
	if skip >= n {
		return
	}
	rows := features
	if skip > 0 {
		rows = mlx.SliceAxis(features, 1, skip, n)
	}
	mlx.Pin(rows)
	s.pending = append(s.pending, rows)
	s.pendingCount += n - skip
	if s.pendingCount >= pendingFlushTokens {
		s.flush()
	}
}

// takePending concatenates and releases the held rows (spec 4.5).
func (s *blockSession) takePending() *mlx.Array {
	if len(s.pending) == 0 {
		return nil
	}
	x := mlx.Concatenate(1, s.pending...)
	mlx.Unpin(s.pending...)
	s.pending = s.pending[:0]
	s.ctxOffset += s.pendingCount
	s.pendingCount = 0
	return x
}

// commitBlock rewinds an outstanding block (spec 4.6). Every write path calls
// it first, or new context rows would land after stale block rows.
func (s *blockSession) commitBlock() {
	if s.blockOutstanding {
		cache.Commit(s.d.draftCaches, 0, 1, s.ctxOffset)
		s.blockOutstanding = false
	}
}

// flush rewinds the block and writes pending rows in a context-only forward
// (spec 4.7).
func (s *blockSession) flush() {
	s.commitBlock()
	offset := s.ctxOffset
	x := s.takePending()
	if x == nil {
		return
	}
	s.d.draft.Forward(&model.Batch{SeqOffsets: []int{offset}, Hidden: x}, s.d.targetCaches, s.d.draftCaches)
	// Evaluate the writes now, or a request that never drafts would keep
	// every feature row alive until it ends.
	var state []*mlx.Array
	for _, c := range s.d.draftCaches {
		state = append(state, c.State()...)
	}
	_ = mlx.AsyncEval(state...)
}

// Settle writes every buffered report.
func (s *blockSession) Settle() { s.flush() }

// Close settles and releases the session.
func (s *blockSession) Close() {
	if s.closed {
		return
	}
	s.flush()
	s.closed = true
}

// Propose drafts up to max tokens after current (spec 4.8, 8.2).
//
// A draft trained on whole bidirectional blocks runs the whole block
// [anchor, mask × (blockSize−1)] even when n is smaller: with fewer mask
// rows every row would attend to a context it never saw in training (on a
// trained DFlash draft, position-2 acceptance went from 0 to 0.64 with
// this). Only the first n predictions are proposed.
func (s *blockSession) Propose(current *mlx.Array, max int) *Candidates {
	n := min(max, s.d.blockSize-1)
	if n <= 0 || s.frontier() == 0 || s.closed {
		return nil
	}
	s.commitBlock()
	masks := n
	if s.d.wholeBlock {
		masks = s.d.blockSize - 1
	}
	mask := mlx.Full(float64(s.d.maskToken), mlx.Int32, 1, masks)
	block := mlx.Concatenate(1, mlx.Reshape(mlx.AsType(current, mlx.Int32), 1, 1), mask)
	offset := s.ctxOffset
	x := s.takePending()
	cache.Schedule(s.d.draftCaches, s.ctxOffset, 1)
	s.blockOutstanding = true
	hidden, _ := s.d.draft.Forward(&model.Batch{
		InputIDs:     block,
		SeqOffsets:   []int{offset},
		SeqQueryLens: []int{masks + 1},
		Hidden:       x,
	}, s.d.targetCaches, s.d.draftCaches)
	// Row i predicts the token at its own slot; row 0 (the anchor) is unused.
	rows := mlx.SliceAxis(hidden, 1, 1, n+1)
	logits := s.d.draft.Unembed(rows)
	if gs, ok := s.d.selector.(model.GreedySelector); ok && s.sampler.Temperature() <= 0 {
		if tokens, ids, probs, conf, ok := gs.SelectGreedy(rows, logits, current); ok {
			k := ids.Dim(2)
			dist := sample.Distribution{IDs: mlx.Reshape(ids, n, k), Probs: mlx.Reshape(probs, n, k)}
			cand := &Candidates{Tokens: mlx.Reshape(tokens, 1, n), Dist: dist}
			if s.confidence {
				cand.Confidence = conf
			}
			return cand
		}
	}
	if s.d.selector != nil {
		// The selector's confidence, taken where it chooses: its scores
		// given the previous choice are calibrated (measured on go-tiny,
		// docs/PERFORMANCE.md), the candidates' own logits are not.
		var conf []*mlx.Array
		rowsSeen := 0
		choose := s.sampler.Choose
		if s.confidence {
			choose = func(ids, scores *mlx.Array) (*mlx.Array, *mlx.Array) {
				conf = append(conf, rowConfidence(scores))
				rowsSeen += ids.Dim(0)
				return s.sampler.Choose(ids, scores)
			}
		}
		tokens, ids, probs := s.d.selector.Select(rows, logits, current, choose)
		k := ids.Dim(2)
		dist := sample.Distribution{IDs: mlx.Reshape(ids, n, k), Probs: mlx.Reshape(probs, n, k)}
		cand := &Candidates{Tokens: mlx.Reshape(tokens, 1, n), Dist: dist}
		if s.confidence && rowsSeen == n {
			cand.Confidence = mlx.Concatenate(0, conf...)
		}
		return cand
	}
	flat := mlx.Reshape(logits, n, logits.Dim(-1))
	dist := s.sampler.Distribution(flat, nil)
	tokens := s.sampler.SampleDistribution(dist)
	cand := &Candidates{Tokens: mlx.Reshape(tokens, 1, n), Dist: dist}
	if s.confidence {
		cand.Confidence = rowConfidence(flat)
	}
	return cand
}

// rowConfidence is the largest probability of each row of logits [n, K]
// at temperature 1, as float32 [n]: how sure the draft is of a position,
// whichever token it then proposes there. It must not be the probability
// of the proposed token: a cut that looked at the drawn token would verify
// a draft only for some of its values, so under sampling the verified
// drafts would no longer be distributed as their proposal says (a
// chi-square test caught exactly that). At temperature 0 the two agree.
func rowConfidence(logits *mlx.Array) *mlx.Array {
	x := logits
	if x.DType() != mlx.Float32 {
		x = mlx.AsType(x, mlx.Float32)
	}
	return mlx.Exp(mlx.Subtract(mlx.Max(x, false, 1), mlx.LogSumExp(x, false, 1)))
}
