package speculation

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
)

// Config describes a loaded target and its optional draft.
type Config struct {
	// Target is the model that decides every emitted token.
	Target model.Model
	// TargetCaches are the target's per-layer caches (one request at a time).
	TargetCaches []cache.Cache
	// Drafter serves draft sessions; nil means plain decoding only.
	Drafter Drafter
	// MaxDepth caps the adaptive controller (manifest speculation.max_depth;
	// 0 = no cap). For a selector draft a value below its fixed depth
	// becomes the fixed depth.
	MaxDepth int
	// SelectorDepth is the fixed depth of selector sessions (0 means 7).
	SelectorDepth int
	// FixedDepth, when > 0, pins every drafting session to this depth
	// without training the controller (benchmarks sweep depths with it).
	FixedDepth int
	// ConfidenceFloor, when > 0, lets a round verify only the leading
	// drafts whose product of confidences (Candidates.Confidence) is at
	// least this (manifest speculation.confidence_floor); proposals that
	// carry no confidences (plugins, the oracle) are verified whole.
	ConfidenceFloor float64
	// EOS lists the end-of-sequence token ids.
	EOS []int32
	// Controller is the depth controller to train; nil makes a fresh one.
	// A loaded pair shares one across requests (each request may build its
	// own Core over fresh caches).
	Controller *Controller
	// Logger receives the per-request summary (nil: slog.Default()).
	Logger *slog.Logger
	// NoPipeline turns off the overlap of host and device work: plain
	// decoding evaluates and reads each token before building the next
	// step, and a drafting round proposes only once the previous round's
	// tokens were emitted. Output is the same either way (ids, stops,
	// seeded draws); benchmarks and tests compare the two.
	NoPipeline bool
	// NoChain turns chained rounds off (Decoder.chain: the next round
	// verified before this round's verdict is read) and leaves the rest of
	// the pipeline on, for measuring them. Output is the same either way.
	NoChain bool
}

// Core drives speculation for one loaded target+draft pair. Its depth
// controller persists across requests.
type Core struct {
	cfg    Config
	depth  *Controller
	eos    map[int32]bool
	totals Stats
	log    *slog.Logger
}

// NewCore returns a core for cfg.
func NewCore(cfg Config) *Core {
	limit := 0
	if cfg.Drafter != nil {
		limit = cfg.Drafter.Limit()
	}
	depth := cfg.Controller
	if depth == nil {
		depth = NewController(limit, cfg.MaxDepth)
	}
	c := &Core{cfg: cfg, depth: depth, eos: map[int32]bool{}, log: cfg.Logger}
	for _, id := range cfg.EOS {
		c.eos[id] = true
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// Controller returns the core's depth controller.
func (c *Core) Controller() *Controller { return c.depth }

// Totals returns the counters summed over every closed request.
func (c *Core) Totals() Stats { return c.totals }

// IsEOS reports whether id ends a sequence.
func (c *Core) IsEOS(id int32) bool { return c.eos[id] }

// Request carries one request's sampler and switches.
type Request struct {
	// Sampler is the request's sampler; its history holds the prompt.
	Sampler *sample.Sampler
	// NoDraft turns drafting off for this request.
	NoDraft bool
	// Logprobs asks for log-probabilities, which draft tokens do not carry,
	// so it turns drafting off too.
	Logprobs bool
}

// Session is one request's speculation state (spec 5.1).
type Session struct {
	core    *Core
	sampler *sample.Sampler
	draft   DraftSession // nil without a drafter

	limit      int  // deepest draft asked of Propose this round
	fixedDepth bool // a selector session: limit never changes
	trains     bool // rounds update the depth controller
	offReason  string

	stats   Stats
	decoder *Decoder
	closed  bool
	// logitsChecked is set once the first target logits were probed for
	// NaN and infinities (logitsProbe).
	logitsChecked bool

	// Round timing (spec 5.5, 10.1).
	roundBegin   time.Time
	roundTimed   bool
	untimedNext  bool
	depthPrev    int // depth of the previous round
	depthPrev2   int // depth of the round before it
	roundsSeen   int
	roundDraftMS float64
	roundVerify  float64
	lastRoundEnd time.Time
	// phases times the drafting rounds' host work by phase while MLX's
	// evaluation timing is on (Stats.HostPhases).
	phases phaseClock
}

// Open starts a session for req.
func (c *Core) Open(req Request) *Session {
	s := &Session{core: c, sampler: req.Sampler}
	if mlx.EvalTimingOn() {
		s.phases.on = true
		s.stats.HostPhases = &s.phases.sums
	}
	if c.cfg.Drafter != nil {
		// Opened even when drafting is off, so the draft caches stay level.
		s.draft = c.cfg.Drafter.Open(req.Sampler)
		if cp, ok := s.draft.(confidenceProposer); ok && c.cfg.ConfidenceFloor > 0 {
			cp.proposeConfidence()
		}
	}
	switch {
	case c.cfg.Drafter == nil:
		s.offReason = FallbackNoDraft
	case req.Logprobs:
		s.offReason = FallbackLogprobs
	case req.NoDraft:
		s.offReason = FallbackNoDraft
	case c.cfg.FixedDepth > 0:
		s.fixedDepth = true
		s.limit = c.cfg.FixedDepth
	case c.cfg.Drafter.Selector():
		s.fixedDepth = true
		s.limit = c.selectorDepth()
	default:
		s.limit = c.depth.Scheduled()
		s.trains = true
	}
	switch {
	case s.offReason != "":
		s.stats.DepthPolicy = "off (" + s.offReason + ")"
	case c.cfg.FixedDepth > 0:
		s.stats.DepthPolicy = fmt.Sprintf("pinned %d", s.limit)
	case s.fixedDepth:
		s.stats.DepthPolicy = fmt.Sprintf("fixed %d", s.limit)
	default:
		s.stats.DepthPolicy = "adaptive"
	}
	return s
}

func (c *Core) selectorDepth() int {
	d := c.cfg.SelectorDepth
	if d <= 0 {
		d = dflash2Depth
	}
	if c.cfg.MaxDepth > 0 && c.cfg.MaxDepth < d {
		d = c.cfg.MaxDepth
	}
	return d
}

// pinLimit fixes the session's depth and stops training (a test hook, the
// seed's pinDraftLimit).
func (s *Session) pinLimit(n int) {
	s.limit = n
	s.trains = false
	s.stats.DepthPolicy = fmt.Sprintf("pinned %d", n)
}

// Stats returns the session's counters so far.
func (s *Session) Stats() *Stats { return &s.stats }

// beginRound notes the round's start and feeds the cost model (spec 5.5):
// the previous round's wall time is a sample for its depth when it was
// timed and ran at the same depth as the round before it.
func (s *Session) beginRound() {
	now := time.Now()
	if s.roundsSeen > 0 {
		wall := msSince(s.roundBegin, now)
		if s.trains && s.roundTimed && s.roundsSeen >= 2 && s.depthPrev == s.depthPrev2 {
			s.core.depth.AddCost(s.depthPrev, wall)
		}
		if s.depthPrev > 0 {
			s.stats.OverheadMS += max(0, wall-s.roundDraftMS-s.roundVerify)
		}
	}
	if s.phases.open {
		s.phases.lap(&s.phases.sums.EmitMS)
		s.phases.open = false
	}
	s.phases.restart()
	s.roundBegin = now
	s.roundTimed = !s.untimedNext
	s.untimedNext = false
	s.roundDraftMS, s.roundVerify = 0, 0
}

// endRound records a round that drafted n tokens and accepted accepted of
// them; observed is the number of positions whose outcome is known.
func (s *Session) endRound(n, accepted, observed int) {
	s.stats.round(n, accepted, time.Now())
	s.depthPrev2, s.depthPrev = s.depthPrev, n
	s.roundsSeen++
	if s.trains {
		s.core.depth.Observe(observed, accepted)
		s.limit = s.core.depth.Next()
	}
}

// fallbackReason names why a round decodes plainly.
func (s *Session) fallbackReason(remaining int, faulted string) string {
	switch {
	case s.offReason != "":
		return s.offReason
	case faulted != "":
		return faulted
	case s.limit == 0:
		return FallbackDepthZero
	case remaining <= 1:
		return FallbackBudget
	default:
		return FallbackUnprimed
	}
}

// Close ends the session (spec 5.6): it closes a parked decoder (or settles
// the draft session), closes the draft session, logs the counters and adds
// them to the core's totals. A second Close is a no-op.
func (s *Session) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.decoder != nil {
		s.decoder.Close()
	}
	if s.draft != nil {
		s.draft.Settle()
		s.draft.Close()
	}
	s.stats.finish()
	s.core.totals.Add(&s.stats)
	st := &s.stats
	s.core.log.Info("speculation session closed",
		"depth_policy", st.DepthPolicy,
		"iterations", st.Iterations, "draft_rounds", st.DraftRounds,
		"drafted", st.Drafted, "accepted", st.Accepted,
		"acceptance_rate", st.AcceptanceRate(),
		"mean_acceptance_length", st.MeanAcceptanceLength(),
		"draft_ms", st.DraftMS, "verify_ms", st.VerifyMS, "overhead_ms", st.OverheadMS,
		"fallbacks", st.Fallback)
	if s.trains {
		s.core.log.Debug("depth controller", "state", s.core.depth.String())
	}
}

func msSince(t0, t1 time.Time) float64 { return float64(t1.Sub(t0)) / float64(time.Millisecond) }
