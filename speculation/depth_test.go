package speculation

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The depth controller of spec/speculation.md section 7, with values worked
// by hand.

func TestCostEWMAIsClamped(t *testing.T) {
	c := NewController(15, 0)
	c.AddCost(2, 10)
	if got := c.Cost(2); got != 10 {
		t.Fatalf("first sample initialises: %g, want 10", got)
	}
	c.AddCost(2, 100) // +90 clamped to +25 % of 10 = 2.5, times α 0.3
	if got := c.Cost(2); math.Abs(got-10.75) > 1e-12 {
		t.Fatalf("clamped update %g, want 10.75", got)
	}
	c.AddCost(2, 10.75-1) // −1 within the clamp: 10.75 − 0.3
	if got := c.Cost(2); math.Abs(got-10.45) > 1e-12 {
		t.Fatalf("update %g, want 10.45", got)
	}
}

func TestCostInterpolation(t *testing.T) {
	c := NewController(15, 0)
	c.AddCost(1, 10)
	c.AddCost(5, 30)
	for _, tc := range []struct {
		d    int
		want float64
	}{{0, 10}, {1, 10}, {2, 15}, {3, 20}, {5, 30}, {9, 30}} {
		if got := c.Cost(tc.d); math.Abs(got-tc.want) > 1e-12 {
			t.Fatalf("cost(%d) = %g, want %g", tc.d, got, tc.want)
		}
	}
}

func TestObserveCountsReachedPositionsOnly(t *testing.T) {
	c := NewController(8, 0)
	c.Observe(4, 1) // positions 1 (accepted), 2 (rejected); 3, 4 not reached
	if !slices.Equal(c.Seen()[:6], []int{0, 1, 1, 0, 0, 0}) {
		t.Fatalf("seen %v, want [0 1 1 0 0 0]", c.Seen()[:6])
	}
	if c.Rate(1) != 1 || c.Rate(2) != 0 {
		t.Fatalf("rates %g %g, want 1 0", c.Rate(1), c.Rate(2))
	}
	c.Observe(3, 3) // all accepted
	if got := c.Rate(2); math.Abs(got-0.1) > 1e-12 {
		t.Fatalf("rate(2) after an acceptance %g, want 0.1 (EWMA α 0.1)", got)
	}
	if c.Seen()[3] != 1 || c.Rate(3) != 1 {
		t.Fatalf("position 3: seen %d rate %g", c.Seen()[3], c.Rate(3))
	}
}

func TestAcceptanceFallsBackToDeepestTrusted(t *testing.T) {
	c := NewController(8, 0)
	if got := c.acceptance(3); got != 1 {
		t.Fatalf("untrusted acceptance %g, want 1 (optimistic)", got)
	}
	for range acceptanceMinSamples {
		c.Observe(1, 0) // position 1 always rejected: rate 0, trusted
	}
	for range acceptanceMinSamples - 1 {
		c.Observe(2, 2) // position 2: only 9 samples, untrusted
	}
	if got := c.acceptance(2); got != c.Rate(1) {
		t.Fatalf("acceptance(2) = %g, want the trusted rate of position 1 (%g)", got, c.Rate(1))
	}
	if c.frontier() != 1 {
		t.Fatalf("frontier %d, want 1", c.frontier())
	}
	// expectedCommitted(2) = 1 + a1 + a1·a2.
	a1 := c.acceptance(1)
	if got, want := c.expectedCommitted(2), 1+a1+a1*a1; math.Abs(got-want) > 1e-12 {
		t.Fatalf("expectedCommitted(2) = %g, want %g", got, want)
	}
}

// From scratch the controller runs depth 0 until it has a cost sample, then
// depth 1, and climbs one position at a time as positions become trusted,
// never past the drafter's limit.
func TestControllerClimbsFromScratch(t *testing.T) {
	c := NewController(3, 0)
	if c.Scheduled() != 0 {
		t.Fatalf("fresh controller schedules %d, want 0", c.Scheduled())
	}
	if got := c.Next(); got != 0 {
		t.Fatalf("without samples: %d, want 0", got)
	}
	c.AddCost(0, 10)
	if got := c.Next(); got != 1 {
		t.Fatalf("after a depth-0 sample: %d, want 1 (seeding depth 1)", got)
	}
	// Depth 1 costs 12 ms and always accepts: E(1)/cost = 2/12 > 1/10.
	c.AddCost(1, 12)
	for range acceptanceMinSamples {
		c.Observe(1, 1)
	}
	depths := map[int]bool{}
	for range 40 {
		d := c.Next()
		depths[d] = true
		if d > 3 {
			t.Fatalf("scheduled %d past the drafter limit 3", d)
		}
		if _, ok := c.cost[d]; !ok {
			c.AddCost(d, 10+2*float64(d))
		}
		c.Observe(d, d)
	}
	if c.Scheduled() != 3 || c.selected() != 3 {
		t.Fatalf("with every position accepted and cheap depth, scheduled %d selected %d, want 3", c.Scheduled(), c.selected())
	}
	if !depths[2] {
		t.Fatalf("never scheduled depth 2 while climbing: %v", depths)
	}
}

func TestMaxDepthCapsTheSearch(t *testing.T) {
	c := NewController(15, 2)
	c.AddCost(0, 10)
	c.AddCost(1, 11)
	c.AddCost(2, 12)
	for range 50 {
		c.Observe(3, 3)
	}
	for range 20 {
		if d := c.Next(); d > 2 {
			t.Fatalf("scheduled %d past max_depth 2", d)
		}
	}
}

// Probing doubles its interval while the selection is stable.
func TestProbeBackoffDoubles(t *testing.T) {
	c := NewController(8, 0)
	c.AddCost(0, 10)
	c.AddCost(1, 10)
	c.AddCost(2, 30) // depth 2 is expensive: the selection stays at 1
	for range 30 {
		c.Observe(2, 2)
	}
	var probes []int
	for round := range 80 {
		if d := c.Next(); d == 2 {
			probes = append(probes, round)
		}
	}
	if len(probes) < 3 {
		t.Fatalf("probes at rounds %v: want several", probes)
	}
	gap1, gap2 := probes[1]-probes[0], probes[2]-probes[1]
	if gap2 <= gap1 {
		t.Fatalf("probe gaps %d then %d: the interval should grow (rounds %v)", gap1, gap2, probes)
	}
	if c.probeInterval > depthProbeIntervalMax {
		t.Fatalf("probe interval %d exceeds its cap", c.probeInterval)
	}
}

func TestStatsDerivedFigures(t *testing.T) {
	var s Stats
	s.round(0, 0, timeZero)
	s.round(3, 3, timeZero)
	s.round(3, 1, timeZero)
	s.round(2, 0, timeZero)
	if s.Iterations != 4 || s.DraftRounds != 3 || s.Drafted != 8 || s.Accepted != 4 || s.WholeRounds != 1 {
		t.Fatalf("counters %+v", s)
	}
	if got := s.MeanAcceptanceLength(); math.Abs(got-(1+4.0/3)) > 1e-12 {
		t.Fatalf("mean acceptance length %g, want 1 + 4/3", got)
	}
	if !slices.Equal(s.PositionDrafted, []int{3, 3, 2}) || !slices.Equal(s.PositionAccepted, []int{2, 1, 1}) {
		t.Fatalf("per position drafted %v accepted %v", s.PositionDrafted, s.PositionAccepted)
	}
	if got := s.PerPositionAcceptance(); got[0] != 2.0/3 || got[2] != 0.5 {
		t.Fatalf("per-position acceptance %v", got)
	}
	var sum Stats
	sum.Add(&s)
	sum.Add(&s)
	if sum.WholeRounds != 2 || sum.DraftRounds != 6 {
		t.Fatalf("two requests summed: %d whole rounds of %d, want 2 of 6", sum.WholeRounds, sum.DraftRounds)
	}
}

var timeZero time.Time
