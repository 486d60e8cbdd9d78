package speculation

import (
	"time"

	"github.com/specula-dev/specula/mlx"
)

// RoundPhases is where a request's drafting rounds spent host time outside
// MLX's evaluation (the build share of `specula bench --split`), by phase,
// summed over those rounds. It is recorded only while mlx.SetEvalTiming is
// on: each phase ends with a reading of the clock and of MLX's evaluation
// times, whose submission and waiting within the phase are left out.
type RoundPhases struct {
	// Rounds counts the drafting rounds timed.
	Rounds int `json:"rounds"`
	// ProposeMS is building the draft's proposal (early or in the round)
	// and truncating it.
	ProposeMS float64 `json:"propose_ms"`
	// ScheduleMS is the target caches' rollback points and the
	// verification's input ids.
	ScheduleMS float64 `json:"schedule_ms"`
	// ForwardMS is building the target's verification forward.
	ForwardMS float64 `json:"forward_ms"`
	// VerdictMS is the logits, the distributions and the verdict.
	VerdictMS float64 `json:"verdict_ms"`
	// ReadMS is the host's share of waiting for and reading the outcome.
	ReadMS float64 `json:"read_ms"`
	// CommitMS is cutting the target caches back to the kept rows and the
	// sampler's history.
	CommitMS float64 `json:"commit_ms"`
	// DraftCommitMS is reporting the kept rows to the draft (its cache
	// writes and context).
	DraftCommitMS float64 `json:"draft_commit_ms"`
	// EmitMS is the rest: from the end of a drafting round's work to the
	// next round's start (emitting the tokens: detokenizing, stop checks,
	// streaming).
	EmitMS float64 `json:"emit_ms"`
}

// Add adds other's sums to p.
func (p *RoundPhases) Add(other *RoundPhases) {
	p.Rounds += other.Rounds
	p.ProposeMS += other.ProposeMS
	p.ScheduleMS += other.ScheduleMS
	p.ForwardMS += other.ForwardMS
	p.VerdictMS += other.VerdictMS
	p.ReadMS += other.ReadMS
	p.CommitMS += other.CommitMS
	p.DraftCommitMS += other.DraftCommitMS
	p.EmitMS += other.EmitMS
}

// Scaled returns p with every time multiplied by f (1/Rounds gives the
// mean round).
func (p RoundPhases) Scaled(f float64) RoundPhases {
	return RoundPhases{Rounds: p.Rounds, ProposeMS: p.ProposeMS * f, ScheduleMS: p.ScheduleMS * f,
		ForwardMS: p.ForwardMS * f, VerdictMS: p.VerdictMS * f, ReadMS: p.ReadMS * f,
		CommitMS: p.CommitMS * f, DraftCommitMS: p.DraftCommitMS * f, EmitMS: p.EmitMS * f}
}

// phaseClock times the phases of a session's drafting rounds into sums
// while on.
type phaseClock struct {
	on   bool
	sums RoundPhases
	at   time.Time
	eval mlx.EvalTimes
	open bool // a drafting round's phases are being timed
}

// restart starts timing from now.
func (c *phaseClock) restart() {
	if c.on {
		c.at, c.eval = time.Now(), mlx.EvalTiming()
	}
}

// lap adds the host time since the last lap, less MLX's evaluation within
// it, to field (one of sums' times), and restarts.
func (c *phaseClock) lap(field *float64) {
	if !c.on {
		return
	}
	now, ev := time.Now(), mlx.EvalTiming()
	inMLX := ev.Sub(c.eval)
	spent := now.Sub(c.at) - inMLX.Submit - inMLX.Wait
	*field += float64(spent) / float64(time.Millisecond)
	c.at, c.eval = now, ev
}

// endRound counts a drafting round whose phases were timed; the time to the
// next round's start is its emission.
func (c *phaseClock) endRound() {
	if c.on {
		c.sums.Rounds++
		c.open = true
	}
}
