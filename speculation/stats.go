package speculation

import (
	"time"
)

// Fallback reasons: why a round decoded plainly (spec 10.1).
const (
	FallbackUnprimed      = "unprimed"
	FallbackDepthZero     = "depth-zero"
	FallbackBudget        = "budget"
	FallbackLogprobs      = "logprobs"
	FallbackNoDraft       = "no-draft"
	FallbackPluginCrash   = "plugin-crash"
	FallbackPluginTimeout = "plugin-timeout"
	FallbackPluginInvalid = "plugin-invalid"
)

// Stats are one request's speculation counters (spec 10.1). JSON names
// follow the spec.
type Stats struct {
	Iterations int `json:"iterations"`
	// PrefillForwards counts the target forwards that wrote the prompt:
	// chunks of at most PrefillChunk tokens, also ended at the prompt
	// cache's checkpoints (Session.Prefill).
	PrefillForwards int `json:"prefill_forwards"`
	DraftRounds     int `json:"draft_rounds"`
	Drafted         int `json:"drafted"`
	Accepted        int `json:"accepted"`
	MaxDraft        int `json:"max_draft"`
	// PositionDrafted[i] and PositionAccepted[i] count the rounds that
	// drafted (accepted) at least i+1 tokens.
	PositionDrafted  []int `json:"position_drafted"`
	PositionAccepted []int `json:"position_accepted"`
	// WholeRounds counts the drafting rounds whose every draft was
	// accepted: how often a guess that a round passes whole (a chained
	// round's, Decoder.chain) would have held for this draft.
	WholeRounds int `json:"whole_rounds"`

	// ChainedRounds counts the drafting rounds built and submitted before
	// the previous round's verdict was read, on the guess that it passes
	// every draft (Decoder), and ChainedDropped those of them dropped
	// because it did not.
	ChainedRounds  int `json:"chained_rounds"`
	ChainedDropped int `json:"chained_dropped"`

	DraftMS    float64 `json:"draft_ms"`
	VerifyMS   float64 `json:"verify_ms"`
	OverheadMS float64 `json:"overhead_ms"`

	// Fallback maps a reason to its number of plain rounds.
	Fallback map[string]int `json:"fallbacks"`
	// DepthPolicy says how depth was chosen: "fixed 7", "adaptive",
	// "pinned n", or why drafting was off.
	DepthPolicy string `json:"depth_policy"`
	// DepthOverTime holds the mean and max depth in up to 8 equal time
	// buckets of the request.
	DepthOverTime []DepthBucket `json:"depth_over_time,omitempty"`
	// HostPhases splits the drafting rounds' host time by phase; only
	// while MLX's evaluation timing is on (specula bench --split).
	HostPhases *RoundPhases `json:"host_phases,omitempty"`

	depths []timedDepth
}

// DepthBucket is one time bucket of depth_over_time.
type DepthBucket struct {
	Mean float64 `json:"mean"`
	Max  int     `json:"max"`
}

type timedDepth struct {
	at    time.Time
	depth int
}

// AcceptanceRate is accepted / drafted.
func (s *Stats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// MeanAcceptanceLength is 1 + accepted / draft_rounds: tokens per
// verification, the bonus included (the vLLM convention); 0 without drafting
// rounds.
func (s *Stats) MeanAcceptanceLength() float64 {
	if s.DraftRounds == 0 {
		return 0
	}
	return 1 + float64(s.Accepted)/float64(s.DraftRounds)
}

// PerPositionAcceptance is position_accepted[i] / position_drafted[i]: the
// acceptance of position i+1 given that it was drafted.
func (s *Stats) PerPositionAcceptance() []float64 {
	out := make([]float64, len(s.PositionDrafted))
	for i, d := range s.PositionDrafted {
		if d > 0 {
			out[i] = float64(s.PositionAccepted[i]) / float64(d)
		}
	}
	return out
}

// PerPositionUnconditional is position_accepted[i] / draft_rounds.
func (s *Stats) PerPositionUnconditional() []float64 {
	out := make([]float64, len(s.PositionAccepted))
	for i, a := range s.PositionAccepted {
		if s.DraftRounds > 0 {
			out[i] = float64(a) / float64(s.DraftRounds)
		}
	}
	return out
}

// round records one round of depth n with accepted accepted drafts.
func (s *Stats) round(n, accepted int, now time.Time) {
	s.Iterations++
	s.depths = append(s.depths, timedDepth{now, n})
	if n == 0 {
		return
	}
	s.DraftRounds++
	s.Drafted += n
	s.Accepted += accepted
	s.MaxDraft = max(s.MaxDraft, n)
	if accepted == n {
		s.WholeRounds++
	}
	for len(s.PositionDrafted) < n {
		s.PositionDrafted = append(s.PositionDrafted, 0)
		s.PositionAccepted = append(s.PositionAccepted, 0)
	}
	for i := range n {
		s.PositionDrafted[i]++
		if i < accepted {
			s.PositionAccepted[i]++
		}
	}
}

func (s *Stats) fallback(reason string) {
	if s.Fallback == nil {
		s.Fallback = map[string]int{}
	}
	s.Fallback[reason]++
}

// finish computes the time buckets.
func (s *Stats) finish() {
	if len(s.depths) == 0 {
		return
	}
	start, end := s.depths[0].at, s.depths[len(s.depths)-1].at
	span := end.Sub(start)
	nb := min(8, len(s.depths))
	buckets := make([]DepthBucket, nb)
	counts := make([]int, nb)
	for _, d := range s.depths {
		b := 0
		if span > 0 {
			b = min(nb-1, int(float64(d.at.Sub(start))/float64(span)*float64(nb)))
		}
		buckets[b].Mean += float64(d.depth)
		buckets[b].Max = max(buckets[b].Max, d.depth)
		counts[b]++
	}
	s.DepthOverTime = s.DepthOverTime[:0]
	for i, b := range buckets {
		if counts[i] == 0 {
			continue
		}
		b.Mean /= float64(counts[i])
		s.DepthOverTime = append(s.DepthOverTime, b)
	}
}

// Add sums other into s (per loaded pair totals).
func (s *Stats) Add(other *Stats) {
	s.Iterations += other.Iterations
	s.PrefillForwards += other.PrefillForwards
	s.DraftRounds += other.DraftRounds
	s.Drafted += other.Drafted
	s.Accepted += other.Accepted
	s.MaxDraft = max(s.MaxDraft, other.MaxDraft)
	for len(s.PositionDrafted) < len(other.PositionDrafted) {
		s.PositionDrafted = append(s.PositionDrafted, 0)
		s.PositionAccepted = append(s.PositionAccepted, 0)
	}
	for i := range other.PositionDrafted {
		s.PositionDrafted[i] += other.PositionDrafted[i]
		s.PositionAccepted[i] += other.PositionAccepted[i]
	}
	s.WholeRounds += other.WholeRounds
	s.ChainedRounds += other.ChainedRounds
	s.ChainedDropped += other.ChainedDropped
	s.DraftMS += other.DraftMS
	s.VerifyMS += other.VerifyMS
	s.OverheadMS += other.OverheadMS
	if other.HostPhases != nil {
		if s.HostPhases == nil {
			s.HostPhases = &RoundPhases{}
		}
		s.HostPhases.Add(other.HostPhases)
	}
	for k, v := range other.Fallback {
		if s.Fallback == nil {
			s.Fallback = map[string]int{}
		}
		s.Fallback[k] += v
	}
}
