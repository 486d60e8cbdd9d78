// Package speculation drives speculative decoding with exact, lossless
// verification (spec/speculation.md): draft sessions that keep a draft's
// caches level with its target, a round driver that drafts, verifies and
// accepts (or parks and decodes plainly), an adaptive depth controller, and
// per-request statistics.
//
// The core talks to models only through the interfaces of package model; it
// never imports an architecture. All of it runs on the MLX worker.
package speculation

import (
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
)

// Constants of the draft session protocol (spec 4.1).
const (
	// pendingFlushTokens buffered feature rows force an immediate context
	// write, bounding the memory held by reports between proposals.
	pendingFlushTokens = 256
	// dflash2Depth is the fixed depth of a selector session: the seed found
	// the controller's shallower picks lose more accepted tokens than they
	// save in verification time.
	dflash2Depth = 7
)

// Candidates is a proposal: n draft tokens and the distribution each was
// drawn from. Both are lazy until the round evaluates them.
type Candidates struct {
	// Tokens holds the drafts [1, n] (int32).
	Tokens *mlx.Array
	// Dist holds the n proposal rows (dense [n, V] or sparse [n, K]).
	Dist sample.Distribution
	// Confidence, when not nil, says how sure the draft was at each
	// position [n] (float32): the largest probability of the position's
	// distribution at temperature 1, given the drafts before it — never a
	// function of the draft drawn there, so that cutting on it keeps
	// sampled verification exact. A round may verify only the leading
	// drafts whose product of confidences reaches the confidence floor.
	Confidence *mlx.Array
}

// confidenceProposer is a draft session that can fill
// Candidates.Confidence. That costs a reduction over every proposed row, so
// the core asks for it only when a confidence floor will read it.
type confidenceProposer interface{ proposeConfidence() }

// Arrays returns the arrays of the proposal, for evaluation.
func (c *Candidates) Arrays() []*mlx.Array {
	out := append([]*mlx.Array{c.Tokens}, c.Dist.Arrays()...)
	if c.Confidence != nil {
		out = append(out, c.Confidence)
	}
	return out
}

// Prefix returns the first k drafts of c (0 < k <= N).
func (c *Candidates) Prefix(k int) *Candidates {
	if k == c.N() {
		return c
	}
	out := &Candidates{Tokens: mlx.SliceAxis(c.Tokens, 1, 0, k), Dist: c.Dist.Slice(0, k)}
	if c.Confidence != nil {
		out.Confidence = mlx.SliceAxis(c.Confidence, 0, 0, k)
	}
	return out
}

// N is the number of drafts.
func (c *Candidates) N() int { return c.Tokens.Dim(1) }

// DraftSession keeps one request's draft state level with the target
// (spec 4). Plugin-served drafts implement the same protocol across a process
// boundary.
type DraftSession interface {
	// Committed reports a run just written to the target caches: tokens
	// [1, n] at slots position … position+n−1 with the target's aux rows
	// features [1, n, F] (nil for a draft that needs none). Runs arrive in
	// slot order and may overlap reported slots but never leave a gap.
	Committed(tokens, features *mlx.Array, position int)
	// Settle writes every buffered report to the draft caches.
	Settle()
	// Propose drafts at most max tokens after current [1] (the last emitted
	// token, not yet forwarded through the target), or returns nil to
	// decline (nothing reported yet, no budget, or a fault).
	Propose(current *mlx.Array, max int) *Candidates
	// Close settles and releases the session; a second Close is a no-op.
	Close()
}

// Drafter opens draft sessions for one loaded draft.
type Drafter interface {
	// Open starts a session for a request sampled by s.
	Open(s *sample.Sampler) DraftSession
	// Limit is the deepest draft a session can produce (blockSize−1 for a
	// block draft); it bounds the depth controller.
	Limit() int
	// Selector reports whether sessions propose through a candidate
	// selector (and so run at a fixed depth).
	Selector() bool
}

// Faulted is implemented by draft sessions that can fail for the rest of a
// request (plugin faults, spec 9). Reason names the fallback for the stats
// ("plugin-crash", "plugin-timeout", "plugin-invalid") once the session has
// stopped proposing, and is "" before.
type Faulted interface {
	FaultReason() string
}

// Retractor is implemented by draft sessions that can take reports back,
// which lets the decoder chain rounds: the next round is proposed and
// verified before the current round's verdict is read, on the guess that
// every draft passes, so the current round's whole run is reported before
// its verdict. When the verdict keeps less, Retract(position) forgets every
// report of the slots at and after position, and any proposal made since;
// the kept run is then reported again.
type Retractor interface {
	Retract(position int)
}

// DrafterFactory is implemented by draft instances that build their own
// Drafter once the target is loaded, instead of being wrapped in a
// BlockDrafter by the engine: plugin proxies, which must send the target's
// description to the plugin, read back the layer taps to set on the target,
// and serve sessions across the process boundary.
type DrafterFactory interface {
	NewDrafter(target model.DraftTarget, targetCaches []cache.Cache) (Drafter, error)
}
