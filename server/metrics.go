package server

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/specula-dev/specula/engine"
)

// Metric names follow vLLM's (vllm:spec_decode_num_drafts, ...) under the
// prefix "specula:", so dashboards built for vLLM's speculative decoding
// read ours by changing the prefix. Counters carry the _total suffix the
// Prometheus client libraries add.
const metricPrefix = "specula:"

// latencyBuckets are the upper bounds (seconds) of the latency histograms:
// vLLM's request-latency buckets, which span a fast local answer to a long
// generation.
var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640}

// gauge is an integer gauge.
type gauge struct{ v atomic.Int64 }

func (g *gauge) add(d int64) { g.v.Add(d) }
func (g *gauge) get() int64  { return g.v.Load() }

// histogram is a cumulative histogram with fixed buckets.
type histogram struct {
	counts []uint64 // per bucket, then +Inf
	sum    float64
	n      uint64
}

func (h *histogram) observe(x float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(latencyBuckets)+1)
	}
	i := sort.SearchFloat64s(latencyBuckets, x)
	h.counts[i]++
	h.sum += x
	h.n++
}

// modelCounters are one model's counters.
type modelCounters struct {
	drafts, draftTokens, accepted uint64
	acceptedPerPos                []uint64
	promptTokens, cachedTokens    uint64
	generationTokens              uint64
	requests                      map[string]uint64 // by outcome
	latency, ttft                 histogram
}

// metrics holds what GET /metrics reports.
type metrics struct {
	queueDepth gauge // jobs waiting in every model's queue
	running    gauge // generations running
	loaded     gauge // models loaded
	// mlxActive is MLX's active memory after the last job or unload.
	mlxActive atomic.Int64

	mu     sync.Mutex
	models map[string]*modelCounters
}

func newMetrics() *metrics { return &metrics{models: map[string]*modelCounters{}} }

func (m *metrics) model(name string) *modelCounters {
	c := m.models[name]
	if c == nil {
		c = &modelCounters{requests: map[string]uint64{}}
		m.models[name] = c
	}
	return c
}

// request records a finished request: its outcome ("ok", "cancelled",
// "error", "timeout"), and, when it generated, its tokens, timings and
// speculation counters. Counting follows vLLM: per verification round,
// drafts += 1, draft tokens += n, accepted += a, and accepted_per_pos[i] += 1
// for every i < a.
func (m *metrics) request(model, outcome string, r *engine.Response, latency float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.model(model)
	c.requests[outcome]++
	if r == nil {
		return
	}
	c.latency.observe(latency)
	if r.FirstTokenTime > 0 {
		c.ttft.observe(r.FirstTokenTime.Seconds())
	}
	c.promptTokens += uint64(r.PromptTokens)
	c.cachedTokens += uint64(r.CachedTokens)
	c.generationTokens += uint64(len(r.IDs))
	st := r.Stats
	c.drafts += uint64(st.DraftRounds)
	c.draftTokens += uint64(st.Drafted)
	c.accepted += uint64(st.Accepted)
	for len(c.acceptedPerPos) < len(st.PositionAccepted) {
		c.acceptedPerPos = append(c.acceptedPerPos, 0)
	}
	for i, a := range st.PositionAccepted {
		c.acceptedPerPos[i] += uint64(a)
	}
}

// write renders the Prometheus text format (version 0.0.4). models lists
// every served model, so their series exist before the first request.
func (m *metrics) write(w io.Writer, models []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range models {
		m.model(name)
	}
	names := make([]string, 0, len(m.models))
	for n := range m.models {
		names = append(names, n)
	}
	sort.Strings(names)
	lbl := func(name string, extra ...string) string {
		parts := []string{`model_name="` + escapeLabel(name) + `"`}
		for i := 0; i+1 < len(extra); i += 2 {
			parts = append(parts, extra[i]+`="`+escapeLabel(extra[i+1])+`"`)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	counter := func(name, help string, value func(*modelCounters) uint64) {
		full := metricPrefix + name + "_total"
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", full, help, full)
		for _, n := range names {
			fmt.Fprintf(w, "%s%s %d\n", full, lbl(n), value(m.models[n]))
		}
	}
	counter("spec_decode_num_drafts", "Verification rounds that checked draft tokens.", func(c *modelCounters) uint64 { return c.drafts })
	counter("spec_decode_num_draft_tokens", "Draft tokens verified.", func(c *modelCounters) uint64 { return c.draftTokens })
	counter("spec_decode_num_accepted_tokens", "Draft tokens accepted.", func(c *modelCounters) uint64 { return c.accepted })
	full := metricPrefix + "spec_decode_num_accepted_tokens_per_pos_total"
	fmt.Fprintf(w, "# HELP %s Draft tokens accepted at each draft position (0 is the first).\n# TYPE %s counter\n", full, full)
	for _, n := range names {
		for i, a := range m.models[n].acceptedPerPos {
			fmt.Fprintf(w, "%s%s %d\n", full, lbl(n, "position", strconv.Itoa(i)), a)
		}
	}
	counter("prompt_tokens", "Prompt tokens of finished requests.", func(c *modelCounters) uint64 { return c.promptTokens })
	counter("prompt_cached_tokens", "Prompt tokens served from the prompt cache.", func(c *modelCounters) uint64 { return c.cachedTokens })
	counter("generation_tokens", "Generated tokens.", func(c *modelCounters) uint64 { return c.generationTokens })

	full = metricPrefix + "requests_total"
	fmt.Fprintf(w, "# HELP %s Finished requests by outcome (ok, cancelled, timeout, error).\n# TYPE %s counter\n", full, full)
	for _, n := range names {
		outcomes := make([]string, 0, len(m.models[n].requests))
		for o := range m.models[n].requests {
			outcomes = append(outcomes, o)
		}
		sort.Strings(outcomes)
		for _, o := range outcomes {
			fmt.Fprintf(w, "%s%s %d\n", full, lbl(n, "outcome", o), m.models[n].requests[o])
		}
	}

	hist := func(name, help string, pick func(*modelCounters) *histogram) {
		full := metricPrefix + name
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", full, help, full)
		for _, n := range names {
			h := pick(m.models[n])
			var cum uint64
			for i, b := range latencyBuckets {
				if h.counts != nil {
					cum += h.counts[i]
				}
				fmt.Fprintf(w, "%s_bucket%s %d\n", full, lbl(n, "le", strconv.FormatFloat(b, 'g', -1, 64)), cum)
			}
			fmt.Fprintf(w, "%s_bucket%s %d\n", full, lbl(n, "le", "+Inf"), h.n)
			fmt.Fprintf(w, "%s_sum%s %s\n", full, lbl(n), formatFloat(h.sum))
			fmt.Fprintf(w, "%s_count%s %d\n", full, lbl(n), h.n)
		}
	}
	hist("e2e_request_latency_seconds", "Time from a request's arrival in the queue to its last token.", func(c *modelCounters) *histogram { return &c.latency })
	hist("time_to_first_token_seconds", "Time from the start of a generation to its first token.", func(c *modelCounters) *histogram { return &c.ttft })

	gaugeLine := func(name, help string, v int64) {
		full := metricPrefix + name
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", full, help, full, full, v)
	}
	gaugeLine("num_requests_waiting", "Requests waiting in the models' queues.", m.queueDepth.get())
	gaugeLine("num_requests_running", "Generations running.", m.running.get())
	gaugeLine("models_loaded", "Models loaded.", m.loaded.get())
	gaugeLine("mlx_active_memory_bytes", "Memory held by live MLX arrays after the last request or unload.", m.mlxActive.Load())
	fmt.Fprintf(w, "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines %d\n", runtime.NumGoroutine())
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func formatFloat(x float64) string {
	if math.IsInf(x, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}
