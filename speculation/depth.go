package speculation

import (
	"fmt"
	"strings"
)

// Constants of the adaptive depth controller (spec 7.1).
const (
	depthProbeInterval    = 4    // base cadence, in rounds, of probing one deeper
	depthProbeIntervalMax = 512  // cap of the doubling probe back-off
	costEWMAAlpha         = 0.3  // weight of the newest cost sample
	costClampFraction     = 0.25 // one sample moves the cost by at most ±25 % (times α)
	acceptanceEWMAAlpha   = 0.1  // weight of the newest acceptance outcome
	acceptanceMinSamples  = 10   // observations before a position's rate is trusted
)

// Controller picks the draft depth that maximises committed tokens per unit
// of round time (spec 7). One controller serves a loaded target+draft pair
// across requests; requests are serialised on the MLX worker, so it needs no
// lock.
type Controller struct {
	drafterLimit int // blockSize−1; 0 = no limit
	maxDepth     int // manifest speculation.max_depth; 0 = no cap

	cost map[int]float64 // depth -> EWMA of round wall time in ms
	rate []float64       // per position i >= 1 (index 0 unused)
	seen []int

	scheduled     int
	lastSelected  int
	probeInterval int
	probeSince    int
	probing       bool
}

// NewController returns a controller for a drafter that can draft at most
// drafterLimit tokens, capped by maxDepth (each ignored when 0).
func NewController(drafterLimit, maxDepth int) *Controller {
	n := max(drafterLimit, maxDepth, 1) + 1
	return &Controller{
		drafterLimit:  drafterLimit,
		maxDepth:      maxDepth,
		cost:          map[int]float64{},
		rate:          make([]float64, n),
		seen:          make([]int, n),
		probeInterval: depthProbeInterval,
	}
}

// Scheduled is the depth the next round (or a new request) runs at.
func (c *Controller) Scheduled() int { return c.scheduled }

// Seen returns the per-position observation counts (index 0 unused).
func (c *Controller) Seen() []int { return c.seen }

// Rate is the EWMA acceptance of position i given positions 1..i−1 accepted.
func (c *Controller) Rate(i int) float64 {
	if i <= 0 || i >= len(c.rate) {
		return 0
	}
	return c.rate[i]
}

// Cost is the interpolated round time of depth d in ms (0 when unknown).
func (c *Controller) Cost(d int) float64 {
	if len(c.cost) == 0 {
		return 0
	}
	lo, hi := -1, -1
	for depth := range c.cost {
		if depth <= d && depth > lo {
			lo = depth
		}
		if depth >= d && (hi < 0 || depth < hi) {
			hi = depth
		}
	}
	switch {
	case lo < 0:
		return c.cost[hi] // flat below the shallowest sample
	case hi < 0:
		return c.cost[lo] // flat beyond the deepest sample
	case lo == hi:
		return c.cost[lo]
	}
	f := float64(d-lo) / float64(hi-lo)
	return c.cost[lo] + f*(c.cost[hi]-c.cost[lo])
}

// AddCost records one round's wall time at depth d.
func (c *Controller) AddCost(d int, ms float64) {
	v, ok := c.cost[d]
	if !ok {
		c.cost[d] = ms
		return
	}
	delta := ms - v
	limit := costClampFraction * v
	delta = max(-limit, min(limit, delta))
	c.cost[d] = v + costEWMAAlpha*delta
}

func (c *Controller) ready() bool { return len(c.cost) >= 2 }

// Observe records a round that drafted n tokens and accepted accepted of
// them: position i saw an outcome iff all earlier ones were accepted.
func (c *Controller) Observe(drafted, accepted int) {
	for i := 1; i <= drafted && i < len(c.rate); i++ {
		if accepted < i-1 {
			break
		}
		outcome := 0.0
		if accepted >= i {
			outcome = 1
		}
		if c.seen[i] == 0 {
			c.rate[i] = outcome
		} else {
			c.rate[i] += acceptanceEWMAAlpha * (outcome - c.rate[i])
		}
		c.seen[i]++
	}
}

// acceptance is the trusted rate of position i, else that of the deepest
// trusted position below it, else 1 (optimistic).
func (c *Controller) acceptance(i int) float64 {
	for j := min(i, len(c.rate)-1); j >= 1; j-- {
		if c.seen[j] >= acceptanceMinSamples {
			return c.rate[j]
		}
	}
	return 1
}

// expectedCommitted is 1 + Σ_{k=1..n} Π_{j=1..k} acceptance(j).
func (c *Controller) expectedCommitted(n int) float64 {
	total, prod := 1.0, 1.0
	for k := 1; k <= n; k++ {
		prod *= c.acceptance(k)
		total += prod
	}
	return total
}

// frontier is the deepest i with every position 1..i trusted.
func (c *Controller) frontier() int {
	i := 0
	for i+1 < len(c.seen) && c.seen[i+1] >= acceptanceMinSamples {
		i++
	}
	return i
}

// limitDepth never exceeds what the drafter can produce: an unmeasured depth
// would always look best.
func (c *Controller) limitDepth() int {
	l := c.frontier() + 1
	if c.drafterLimit > 0 {
		l = min(l, c.drafterLimit)
	}
	if c.maxDepth > 0 {
		l = min(l, c.maxDepth)
	}
	return l
}

// selected is the depth with the best expected tokens per ms (ties to the
// shallower), or 0 until two depths have a cost sample.
func (c *Controller) selected() int {
	if !c.ready() {
		return 0
	}
	best, bestScore := 0, -1.0
	for n := 0; n <= c.limitDepth(); n++ {
		score := c.expectedCommitted(n) / c.Cost(n)
		if score > bestScore {
			best, bestScore = n, score
		}
	}
	return best
}

// Next ends a training round and returns the depth of the next one.
func (c *Controller) Next() int {
	sel := c.selected()
	if sel != c.lastSelected {
		c.probeInterval = depthProbeInterval
		c.probeSince = 0
		c.lastSelected = sel
	} else if c.probing {
		c.probeInterval = min(2*c.probeInterval, depthProbeIntervalMax)
	}
	c.probing = false
	c.scheduled = c.next(sel)
	return c.scheduled
}

func (c *Controller) next(sel int) int {
	limit := c.limitDepth()
	c.probeSince++
	if c.probeSince >= c.probeInterval {
		c.probeSince = 0
		if probe := min(sel+1, limit); probe != sel {
			c.probing = true
			return probe
		}
	}
	// Seed the cost model: the shallowest depth with no sample yet.
	for d := 0; d <= limit; d++ {
		if _, ok := c.cost[d]; !ok {
			return d
		}
	}
	return sel
}

// String dumps the controller for debug logs (spec 10.2).
func (c *Controller) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scheduled %d, probe interval %d; cost(ms):", c.scheduled, c.probeInterval)
	for d := 0; d <= c.limitDepth(); d++ {
		if v, ok := c.cost[d]; ok {
			fmt.Fprintf(&b, " %d:%.2f", d, v)
		}
	}
	b.WriteString("; trusted acceptance:")
	for i := 1; i < len(c.rate) && c.seen[i] >= acceptanceMinSamples; i++ {
		fmt.Fprintf(&b, " %d:%.3f", i, c.rate[i])
	}
	if c.ready() {
		b.WriteString("; 1000·E/cost:")
		for n := 0; n <= c.limitDepth(); n++ {
			fmt.Fprintf(&b, " %d:%.1f", n, 1000*c.expectedCommitted(n)/c.Cost(n))
		}
	}
	return b.String()
}
