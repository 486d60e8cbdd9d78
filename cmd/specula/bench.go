package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/speculation"
	"github.com/specula-dev/specula/tokenizer"
)

func init() {
	register(&command{name: "bench", summary: "measure plain and speculative generation speed", run: runBench})
}

// benchPrompts are the default text prompts: a spread of what users send.
var benchPrompts = []string{
	"Explain in a few sentences why the sky is blue.",
	"Write a Python function that returns the n-th Fibonacci number iteratively.",
	"List five countries in Europe and their capitals.",
	"用两句话介绍一下长城。",
	"Summarise the plot of Romeo and Juliet.",
}

func runBench(e *env, args []string) int {
	fs := newFlags(e, "bench", "-m MANIFEST [flags]")
	var g genFlags
	g.register(fs)
	promptsFile := fs.String("prompts", "", "`file` of prompts, one per line: text, a JSON string (for prompts with newlines), or token ids as a JSON array; default: a built-in set")
	repeats := fs.Int("repeats", 3, "measured runs of each prompt and mode")
	warmup := fs.Int("warmup", 1, "unmeasured runs before measuring")
	oracle := fs.Bool("oracle", false, "also run an oracle draft (the target's own greedy tokens) at each depth: the best speedup the engine can reach")
	sweep := fs.Bool("sweep", false, "also run the draft pinned at each depth of --depths and report acceptance and speedup per depth")
	depths := fs.String("depths", "1-15", "depths of --oracle and --sweep, e.g. 1-7 or 1,2,4; --sweep without it runs 1 to the draft's limit")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the measured runs to `file` (host-side time)")
	split := fs.Bool("split", false, "also split each step and round into host graph building, MLX submission and waiting for the device, and a drafting round's host time by phase (costs one more MLX call per blocking evaluation)")
	nodes := fs.Bool("nodes", false, "also count the graph nodes each step and round hands to MLX (every evaluation first walks its graph, which costs host time: time in a run without it)")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := noArguments(e, fs, rest); !ok {
		return code
	}
	depthsSet := false
	fs.Visit(func(f *flag.Flag) { depthsSet = depthsSet || f.Name == "depths" })
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(e, "bench", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(e, "bench", err)
		}
		defer pprof.StopCPUProfile()
	}
	if g.manifest == "" {
		fmt.Fprintln(e.stderr, "specula bench: -m MANIFEST is required")
		fs.Usage()
		return exitUsage
	}
	if !g.maxTokens.set {
		g.maxTokens.v, g.maxTokens.set = 64, true
	}
	base, valid := g.request(e, "bench")
	if !valid {
		return exitUsage
	}
	if *repeats < 1 || *warmup < 0 {
		fmt.Fprintln(e.stderr, "specula bench: --repeats must be >= 1 and --warmup >= 0")
		return exitUsage
	}
	depthList, err := parseDepths(*depths)
	if err != nil {
		fmt.Fprintf(e.stderr, "specula bench: --depths: %v\n", err)
		return exitUsage
	}
	if depthsSet && !*sweep && !*oracle {
		fmt.Fprintln(e.stderr, "specula bench: --depths sets the depths of --sweep and --oracle: add one of them")
		return exitUsage
	}
	if *oracle && g.temperature.set && g.temperature.v != 0 {
		fmt.Fprintln(e.stderr, "specula bench: --oracle replays the greedy continuation; it needs --temperature 0")
		return exitUsage
	}
	if *split {
		defer mlx.SetEvalTiming(mlx.SetEvalTiming(true))
	}
	if *nodes {
		defer mlx.SetNodeCounting(mlx.SetNodeCounting(true))
	}
	ctx := e.ctx
	var bar *progressBar
	if !*quiet {
		bar = newProgressBar(e.stderr)
	}
	eng, err := loadEngine(ctx, g.manifest, engine.Options{NoDraft: g.noDraft}, bar)
	if err != nil {
		return fail(e, "bench", err)
	}
	prompts, err := benchPromptSet(*promptsFile, eng)
	if err != nil {
		return fail(e, "bench", err)
	}
	var sweepDepths []int
	if *sweep {
		limit := eng.DraftLimit()
		if !eng.HasDraft() || g.noDraft || limit < 1 {
			fmt.Fprintf(e.stderr, "specula bench: --sweep runs the draft at each depth, but %s has no draft (or --no-draft is set)\n", g.manifest)
			return exitUsage
		}
		sweepDepths = depthList
		if !depthsSet {
			sweepDepths = nil
			for d := 1; d <= limit; d++ {
				sweepDepths = append(sweepDepths, d)
			}
		} else if d := slices.Max(depthList); d > limit {
			fmt.Fprintf(e.stderr, "specula bench: --depths: depth %d is beyond what the draft proposes in a round (%d); use --depths 1-%d\n", d, limit, limit)
			return exitUsage
		}
	}
	b := &bencher{ctx: ctx, eng: eng, base: base, prompts: prompts, repeats: *repeats, warmup: *warmup, log: e.stderr, quiet: *quiet || bar == nil || !bar.tty}
	if *oracle {
		// A sampling temperature given as a flag was refused above; one
		// from the manifest is overridden for every mode, which changes
		// the plain and speculative rows too: worth a line.
		if !eng.Greedy(b.base) {
			fmt.Fprintln(e.stderr, "specula bench: warning: --oracle replays greedy continuations, so every mode runs greedily: the manifest's temperature is not used")
		}
		zero := float32(0)
		b.base.Temperature = &zero
	}
	// Greedy speculative output must be plain output: the bench checks it.
	greedy := eng.Greedy(b.base)
	res := benchResult{Manifest: g.manifest, Prompts: len(prompts), Repeats: *repeats, MaxTokens: g.maxTokens.v, Date: time.Now().UTC().Format(time.RFC3339)}
	plain := benchMode{name: "plain", set: func(r *engine.Request, _ int) { r.NoDraft = true }}
	if eng.HasDraft() && !g.noDraft {
		// Plain and speculative runs alternate, so that a machine getting
		// busier or quieter during the benchmark weighs on both alike.
		// The sweep's fixed depths join the same turns, so each depth is
		// paired with plain runs of the same prompt and repeat.
		spec := benchMode{name: "speculative", set: func(*engine.Request, int) {}}
		modes := []*benchMode{&plain, &spec}
		for _, d := range sweepDepths {
			modes = append(modes, &benchMode{name: fmt.Sprintf("depth %d", d), depth: d, set: func(r *engine.Request, _ int) { r.FixedDepth = d }})
		}
		if err := b.measure(modes...); err != nil {
			return fail(e, "bench", err)
		}
		res.Plain, res.Speculative = plain.result(), new(modeResult)
		*res.Speculative = spec.result()
		res.Speculative.speedupOver(&plain, &spec)
		res.Speculative.idealOver(res.Plain)
		if greedy {
			res.Speculative.compareOutputs(&plain, &spec, len(prompts))
		}
		for _, m := range modes[2:] {
			r := m.result()
			r.speedupOver(&plain, m)
			r.idealOver(res.Plain)
			if greedy {
				r.compareOutputs(&plain, m, len(prompts))
			}
			res.Sweep = append(res.Sweep, r)
		}
	} else {
		if err := b.measure(&plain); err != nil {
			return fail(e, "bench", err)
		}
		res.Plain = plain.result()
	}
	if *oracle {
		for _, d := range depthList {
			o := benchMode{name: fmt.Sprintf("oracle depth %d", d), set: func(r *engine.Request, prompt int) {
				r.Drafter = speculation.NewOracle(slices.Concat(prompts[prompt].ids, b.continuation[prompt]), d)
				r.FixedDepth = d
				// The oracle needs no draft model: --no-draft, which the base
				// request carries, only kept the manifest's draft unloaded.
				r.NoDraft = false
			}}
			if err := b.measure(&o); err != nil {
				return fail(e, "bench", err)
			}
			m := o.result()
			m.Depth = d
			m.speedupOver(&plain, &o)
			m.compareOutputs(&plain, &o, len(prompts))
			m.idealOver(res.Plain)
			res.Oracle = append(res.Oracle, m)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fail(e, "bench", err)
		}
		return exitOK
	}
	printBench(e.stdout, &res)
	return exitOK
}

type benchPrompt struct {
	label string
	ids   []int32
}

// benchPromptSet reads the prompts: a file, or the built-in texts (or, for a
// target without a tokenizer, fixed pseudo-random ids).
func benchPromptSet(file string, eng *engine.Engine) ([]benchPrompt, error) {
	tok := eng.Tokenizer()
	encode := func(text string) ([]int32, error) {
		if tok == nil {
			return nil, fmt.Errorf("prompt %q is text but the target has no tokenizer; give ids as a JSON array", text)
		}
		return tok.Tokenizer.Encode(text, tokenizer.EncodeOptions{}), nil
	}
	var out []benchPrompt
	if file == "" {
		if tok == nil {
			vocab := eng.Target().Info().VocabSize
			r := rand.New(rand.NewPCG(1, 2))
			for i := range 5 {
				ids := make([]int32, 16+8*i)
				for j := range ids {
					ids[j] = int32(r.IntN(vocab))
				}
				out = append(out, benchPrompt{label: fmt.Sprintf("random ids #%d", i+1), ids: ids})
			}
			return out, nil
		}
		for _, p := range benchPrompts {
			ids, err := encode(p)
			if err != nil {
				return nil, err
			}
			out = append(out, benchPrompt{label: p, ids: ids})
		}
		return out, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vocab := eng.Target().Info().VocabSize
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			// A byte-order mark (Windows editors write one) is not part
			// of the first prompt: left in, it turned a line of ids into
			// text.
			text = strings.TrimSpace(strings.TrimPrefix(text, "\ufeff"))
		}
		if text == "" {
			continue
		}
		text, ids, err := parsePromptLine(text)
		if err == nil && ids == nil {
			ids, err = encode(text)
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, line, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("%s:%d: empty prompt", file, line)
		}
		// Checked here, where the line is known: the engine would refuse
		// the id later without saying which line of the file holds it.
		for _, id := range ids {
			if id < 0 || int(id) >= vocab {
				return nil, fmt.Errorf("%s:%d: token %d is outside the target's vocabulary [0, %d)", file, line, id, vocab)
			}
		}
		out = append(out, benchPrompt{label: text, ids: ids})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no prompts", file)
	}
	return out, nil
}

// parsePromptLine reads one trimmed, non-empty line of a prompt file: token
// ids as a JSON array (returned as ids), a JSON string (returned decoded, so
// that a prompt with newlines or tabs fits on one line), or plain text
// (returned as it is).
func parsePromptLine(line string) (text string, ids []int32, err error) {
	switch {
	case strings.HasPrefix(line, "["):
		if err := json.Unmarshal([]byte(line), &ids); err != nil {
			return "", nil, fmt.Errorf("a line starting with [ is token ids as a JSON array: %v", err)
		}
		if ids == nil {
			ids = []int32{}
		}
		return line, ids, nil
	case strings.HasPrefix(line, `"`):
		if err := json.Unmarshal([]byte(line), &text); err != nil {
			return "", nil, fmt.Errorf("a line starting with \" is a JSON string (escape newlines as \\n): %v", err)
		}
		if text == "" {
			return "", []int32{}, nil
		}
		return text, nil, nil
	}
	return line, nil, nil
}

// bencher runs the modes over the prompt set.
type bencher struct {
	ctx     context.Context
	eng     *engine.Engine
	base    engine.Request
	prompts []benchPrompt
	repeats int
	warmup  int
	log     io.Writer
	quiet   bool
	// continuation[i] is prompt i's plain greedy output (for the oracle).
	continuation [][]int32
}

// spread is the median, minimum and maximum of a sample.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// modeResult is one mode's measurements.
type modeResult struct {
	Mode                 string    `json:"mode"`
	Depth                int       `json:"depth,omitempty"`
	Runs                 int       `json:"runs"`
	TokensPerSecond      spread    `json:"tokens_per_second"`
	FirstTokenMS         spread    `json:"first_token_ms"`
	RoundMS              spread    `json:"round_ms"`
	Speedup              float64   `json:"speedup_over_plain,omitempty"`
	SpeedupSpread        *speedup  `json:"speedup,omitempty"`
	IdealSpeedup         float64   `json:"ideal_speedup,omitempty"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length,omitempty"`
	AcceptanceByPosition []float64 `json:"acceptance_by_position,omitempty"`
	DraftMSPerRound      float64   `json:"draft_ms_per_round,omitempty"`
	VerifyMSPerRound     float64   `json:"verify_ms_per_round,omitempty"`
	OverheadMSPerRound   float64   `json:"overhead_ms_per_round,omitempty"`
	// ChainedRounds and ChainedDropped count the drafting rounds verified
	// before the previous round's verdict was read, and those of them
	// dropped because that round rejected a draft (speculation.Stats).
	ChainedRounds  int `json:"chained_rounds,omitempty"`
	ChainedDropped int `json:"chained_dropped,omitempty"`
	// DraftRounds counts the mode's drafting rounds, and WholeRoundShare
	// the fraction of them whose every draft was accepted: how often a
	// chained round's guess would hold for this draft at this depth.
	DraftRounds     int      `json:"draft_rounds,omitempty"`
	WholeRoundShare *float64 `json:"whole_round_share,omitempty"`
	// LoopSplit separates the runs whose continuation ends in a loop
	// (endsInLoop); only for modes that drafted.
	LoopSplit *loopSplit `json:"loop_split,omitempty"`
	// HostDevice splits the mode's rounds between host and device (with
	// --split).
	HostDevice *hostDeviceSplit `json:"host_device,omitempty"`
	// NodesPerRound is the mean number of graph nodes a step or round after
	// the first token handed to MLX (--nodes; mlx.EvalTimes.Nodes).
	NodesPerRound float64 `json:"nodes_per_round,omitempty"`
	// NodeOpsPerRound splits NodesPerRound by MLX primitive name
	// (mlx.EvalTimes.Ops): where a round's nodes beyond a step's come from.
	NodeOpsPerRound map[string]float64 `json:"node_ops_per_round,omitempty"`
	// MatchesPlain compares each greedy run's output with the plain run of
	// the same prompt and repeat (drafting modes of a greedy bench only).
	MatchesPlain *outputCheck `json:"matches_plain,omitempty"`
}

// outputCheck is how many of a drafting mode's greedy runs gave plain
// decoding's output, and where the first that did not left it.
type outputCheck struct {
	Runs      int `json:"runs"`
	Differing int `json:"differing"`
	// FirstPrompt and FirstToken locate the first differing run: its
	// prompt (1-based, in the prompt set's order) and the index of the
	// first generated token that differs.
	FirstPrompt int `json:"first_prompt,omitempty"`
	FirstToken  int `json:"first_token,omitempty"`
}

// compareOutputs sets r.MatchesPlain from m's and plain's paired runs (run
// k of each is the same prompt and repeat; prompts prompts per repeat).
func (r *modeResult) compareOutputs(plain, m *benchMode, prompts int) {
	c := &outputCheck{}
	for k := range min(len(plain.outputs), len(m.outputs)) {
		c.Runs++
		want, got := plain.outputs[k], m.outputs[k]
		if slices.Equal(want, got) {
			continue
		}
		if c.Differing == 0 {
			at := 0
			for at < min(len(want), len(got)) && want[at] == got[at] {
				at++
			}
			c.FirstPrompt, c.FirstToken = k%prompts+1, at
		}
		c.Differing++
	}
	r.MatchesPlain = c
}

// hostDeviceSplit is the mean round (a plain step, or a drafting round) of a
// mode after its first token, split by where the worker spent it. Mostly
// waiting means the device is the bound; mostly building and submitting
// means the host is, and the device idles between kernels.
type hostDeviceSplit struct {
	Rounds  int     `json:"rounds"`
	RoundMS float64 `json:"round_ms"`
	// BuildMS is host time outside MLX's evaluation: building graphs in
	// Go, the speculation core's decisions, detokenizing and stop checks.
	BuildMS float64 `json:"build_ms"`
	// SubmitMS is host time inside MLX's async_eval, encoding the kernels.
	SubmitMS float64 `json:"submit_ms"`
	// WaitMS is time blocked on the device's results.
	WaitMS float64 `json:"wait_ms"`
	// WaitShare is WaitMS / RoundMS.
	WaitShare float64 `json:"wait_share"`
	// Phases is the mean drafting round's host time outside MLX's
	// evaluation by phase (a drafting mode's build time, itemised).
	Phases *speculation.RoundPhases `json:"drafting_round_phases,omitempty"`
}

// loopSplit is a mode's acceptance over the runs whose continuation ends in
// a loop and over the others. A small target's greedy output often loops,
// and there a draft that copies wins: the split keeps those runs from
// hiding how the draft does on the rest.
type loopSplit struct {
	Looping    loopGroup `json:"looping"`
	NonLooping loopGroup `json:"non_looping"`
}

// loopGroup is one side of a loopSplit.
type loopGroup struct {
	Runs                 int       `json:"runs"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length,omitempty"`
	AcceptanceByPosition []float64 `json:"acceptance_by_position,omitempty"`
	// Speedup is the median ratio over this group's paired runs.
	Speedup float64 `json:"speedup_over_plain,omitempty"`
}

// loopWindow and loopMaxPeriod define "ends in a loop": the last loopWindow
// tokens repeat with a period of at most loopMaxPeriod, so the loop has come
// round at least twice within the window.
const (
	loopWindow    = 64
	loopMaxPeriod = 32
)

// endsInLoop reports whether the last loopWindow tokens of ids are periodic
// with some period p ≤ loopMaxPeriod: ids[i] == ids[i−p] throughout the
// window. A continuation shorter than the window never counts as a loop.
func endsInLoop(ids []int32) bool {
	if len(ids) < loopWindow {
		return false
	}
	w := ids[len(ids)-loopWindow:]
	for p := 1; p <= loopMaxPeriod; p++ {
		periodic := true
		for i := p; i < len(w) && periodic; i++ {
			periodic = w[i] == w[i-p]
		}
		if periodic {
			return true
		}
	}
	return false
}

// speedup is the spread of a mode's speedup over plain decoding, from the
// ratios of paired runs (the same prompt and repeat in both modes).
type speedup struct {
	// Pairs is the number of paired runs.
	Pairs int `json:"pairs"`
	// Median, Min and Max are over the pairs' ratios.
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// CILow and CIHigh bound the median ratio with 95% confidence
	// (bootstrap over the pairs).
	CILow  float64 `json:"ci95_low"`
	CIHigh float64 `json:"ci95_high"`
	// WithinNoise is true when that interval contains 1: the measurements
	// do not show a difference from plain decoding.
	WithinNoise bool `json:"within_noise"`
}

// benchMode collects one configuration's runs; set adjusts the request for
// prompt i.
type benchMode struct {
	name             string
	depth            int            // the pinned depth of a sweep mode
	eng              *engine.Engine // the engine it runs on; nil: the bencher's
	set              func(r *engine.Request, prompt int)
	tps, ttft, round []float64 // per measured run, in run order
	loops            []bool    // per measured run: its continuation ends in a loop
	outputs          [][]int32 // per measured run: the generated ids
	stats            speculation.Stats
	loopStats        [2]speculation.Stats // [0] non-looping runs, [1] looping runs
	// Sums over the runs for the host/device split (--split): rounds after
	// the first token, their wall time and its evaluation times.
	splitRounds int
	splitWall   time.Duration
	splitEval   mlx.EvalTimes
}

func (m *benchMode) add(resp *engine.Response) {
	m.tps = append(m.tps, resp.TokensPerSecond())
	m.ttft = append(m.ttft, ms(resp.FirstTokenTime))
	if rounds := resp.Stats.Iterations; rounds > 1 {
		m.round = append(m.round, ms(resp.DecodeTime)/float64(rounds-1))
		m.splitRounds += rounds - 1
		m.splitWall += resp.DecodeTime
		m.splitEval = m.splitEval.Add(resp.DecodeEval)
	}
	m.stats.Add(&resp.Stats)
	m.outputs = append(m.outputs, resp.IDs)
	loop := endsInLoop(resp.IDs)
	m.loops = append(m.loops, loop)
	if loop {
		m.loopStats[1].Add(&resp.Stats)
	} else {
		m.loopStats[0].Add(&resp.Stats)
	}
}

func (m *benchMode) result() modeResult {
	res := modeResult{Mode: m.name, Depth: m.depth, Runs: len(m.tps)}
	res.TokensPerSecond, res.FirstTokenMS, res.RoundMS = spreadOf(m.tps), spreadOf(m.ttft), spreadOf(m.round)
	if m.splitRounds > 0 && m.splitEval.Nodes > 0 {
		res.NodesPerRound = float64(m.splitEval.Nodes) / float64(m.splitRounds)
		res.NodeOpsPerRound = make(map[string]float64, len(m.splitEval.Ops))
		for name, n := range m.splitEval.Ops {
			res.NodeOpsPerRound[name] = float64(n) / float64(m.splitRounds)
		}
	}
	if m.splitRounds > 0 && m.splitEval.Syncs > 0 {
		n := float64(m.splitRounds)
		hd := &hostDeviceSplit{Rounds: m.splitRounds, RoundMS: ms(m.splitWall) / n, SubmitMS: ms(m.splitEval.Submit) / n, WaitMS: ms(m.splitEval.Wait) / n}
		hd.BuildMS = max(0, hd.RoundMS-hd.SubmitMS-hd.WaitMS)
		hd.WaitShare = ratio(hd.WaitMS, hd.RoundMS)
		if p := m.stats.HostPhases; p != nil && p.Rounds > 0 {
			mean := p.Scaled(1 / float64(p.Rounds))
			hd.Phases = &mean
		}
		res.HostDevice = hd
	}
	if st := &m.stats; st.DraftRounds > 0 {
		res.MeanAcceptanceLength = st.MeanAcceptanceLength()
		res.AcceptanceByPosition = st.PerPositionAcceptance()
		n := float64(st.DraftRounds)
		res.DraftMSPerRound, res.VerifyMSPerRound, res.OverheadMSPerRound = st.DraftMS/n, st.VerifyMS/n, st.OverheadMS/n
		res.ChainedRounds, res.ChainedDropped = st.ChainedRounds, st.ChainedDropped
		whole := float64(st.WholeRounds) / n
		res.DraftRounds, res.WholeRoundShare = st.DraftRounds, &whole
		res.LoopSplit = &loopSplit{}
		for i, g := range []*loopGroup{&res.LoopSplit.NonLooping, &res.LoopSplit.Looping} {
			for _, l := range m.loops {
				if l == (i == 1) {
					g.Runs++
				}
			}
			if gs := &m.loopStats[i]; gs.DraftRounds > 0 {
				g.MeanAcceptanceLength = gs.MeanAcceptanceLength()
				g.AcceptanceByPosition = gs.PerPositionAcceptance()
			}
		}
	}
	return res
}

// speedupOver sets r's speedup over plain from the paired runs of m and
// plain (run k of each is the same prompt and repeat).
func (r *modeResult) speedupOver(plain, m *benchMode) {
	n := min(len(plain.tps), len(m.tps))
	ratios := make([]float64, 0, n)
	for k := range n {
		if plain.tps[k] > 0 {
			ratios = append(ratios, m.tps[k]/plain.tps[k])
		}
	}
	if len(ratios) == 0 {
		return
	}
	s := spreadOf(ratios)
	lo, hi := medianCI(ratios)
	r.Speedup = s.Median
	r.SpeedupSpread = &speedup{Pairs: len(ratios), Median: s.Median, Min: s.Min, Max: s.Max, CILow: lo, CIHigh: hi, WithinNoise: lo <= 1 && 1 <= hi}
	if r.LoopSplit == nil {
		return
	}
	// Each group's pairs: m's runs classified by their own continuation.
	for i, g := range []*loopGroup{&r.LoopSplit.NonLooping, &r.LoopSplit.Looping} {
		var group []float64
		for k := range min(n, len(m.loops)) {
			if m.loops[k] == (i == 1) && plain.tps[k] > 0 {
				group = append(group, m.tps[k]/plain.tps[k])
			}
		}
		g.Speedup = spreadOf(group).Median
	}
}

// idealOver sets r's ideal speedup: the rate r would reach if every
// iteration were one of its drafting rounds, each emitting the mean
// acceptance length of tokens in a drafting round's mean time (drafting,
// verifying and the host's overhead up to the next round), against plain's
// median step — acceptance length × plain step / round. A speedup well
// below it is time spent elsewhere: the first token, or plain steps an
// adaptive controller chose where drafting would have paid (r's RoundMS
// counts those too, which is why it is not the round used here). Where
// every draft passes (an exact oracle) the acceptance length is depth + 1.
func (r *modeResult) idealOver(plain modeResult) {
	round := r.DraftMSPerRound + r.VerifyMSPerRound + r.OverheadMSPerRound
	r.IdealSpeedup = ratio(r.MeanAcceptanceLength*plain.RoundMS.Median, round)
}

// bootstrapResamples is the number of resamples medianCI draws: enough for
// stable 2.5% and 97.5% percentiles, cheap next to a single generation.
const bootstrapResamples = 2000

// medianCI returns a 95% percentile-bootstrap confidence interval of the
// median of v, from a fixed seed so that the same measurements give the
// same interval.
func medianCI(v []float64) (lo, hi float64) {
	r := rand.New(rand.NewPCG(1, 2))
	meds := make([]float64, bootstrapResamples)
	sample := make([]float64, len(v))
	for i := range meds {
		for j := range sample {
			sample[j] = v[r.IntN(len(v))]
		}
		meds[i] = spreadOf(sample).Median
	}
	slices.Sort(meds)
	return meds[bootstrapResamples*25/1000], meds[bootstrapResamples*975/1000-1]
}

// measure runs the warm-up runs of every mode, then b.repeats rounds over
// the prompts in which the modes take turns on each prompt, the order
// alternating from one run to the next (ABBA...), so that drift in the
// machine's speed weighs on every mode alike and run k of each mode is the
// same prompt and repeat. The first plain mode records each prompt's
// continuation for the oracle.
func (b *bencher) measure(modes ...*benchMode) error {
	run := func(m *benchMode, i int) (*engine.Response, error) {
		req := b.base
		req.IDs = b.prompts[i].ids
		m.set(&req, i)
		eng := b.eng
		if m.eng != nil {
			eng = m.eng
		}
		return eng.Generate(b.ctx, req, nil)
	}
	for w := range b.warmup {
		for _, m := range modes {
			if _, err := run(m, w%len(b.prompts)); err != nil {
				return err
			}
		}
	}
	record := modes[0].name == "plain" && b.continuation == nil
	if record {
		b.continuation = make([][]int32, len(b.prompts))
	}
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.name
	}
	label := strings.Join(names, " + ")
	total := b.repeats * len(b.prompts)
	order := slices.Clone(modes)
	for r := range b.repeats {
		for i := range b.prompts {
			k := r*len(b.prompts) + i
			if !b.quiet {
				fmt.Fprintf(b.log, "\rbench %s: run %d/%d ", label, k+1, total)
			}
			for _, m := range order {
				resp, err := run(m, i)
				if err != nil {
					return err
				}
				if record && m == modes[0] && r == 0 {
					b.continuation[i] = resp.IDs
				}
				m.add(resp)
			}
			slices.Reverse(order)
		}
	}
	if !b.quiet {
		fmt.Fprintln(b.log)
	}
	return nil
}

// benchResult is the whole report.
type benchResult struct {
	Manifest    string      `json:"manifest"`
	Date        string      `json:"date"`
	Prompts     int         `json:"prompts"`
	Repeats     int         `json:"repeats"`
	MaxTokens   int         `json:"max_tokens"`
	Plain       modeResult  `json:"plain"`
	Speculative *modeResult `json:"speculative,omitempty"`
	// Sweep holds the draft pinned at each depth of --sweep.
	Sweep  []modeResult `json:"sweep,omitempty"`
	Oracle []modeResult `json:"oracle,omitempty"`
}

func printBench(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "%s: %d prompts × %d repeats, up to %d tokens each\n\n", r.Manifest, r.Prompts, r.Repeats, r.MaxTokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\ttok/s (median [min, max])\tfirst token ms\tround ms\tspeedup (median [95% CI])\tideal\tmean accept len\tdraft/verify/overhead ms per round")
	rows := []modeResult{r.Plain}
	if r.Speculative != nil {
		rows = append(rows, *r.Speculative)
	}
	rows = append(rows, r.Sweep...)
	rows = append(rows, r.Oracle...)
	for _, m := range rows {
		speed, ideal, acc, split := "-", "-", "-", "-"
		if sp := m.SpeedupSpread; sp != nil {
			speed = fmt.Sprintf("%.2fx [%.2f, %.2f]", sp.Median, sp.CILow, sp.CIHigh)
		}
		if m.IdealSpeedup > 0 {
			ideal = fmt.Sprintf("%.2fx", m.IdealSpeedup)
		}
		if m.MeanAcceptanceLength > 0 {
			acc = fmt.Sprintf("%.2f", m.MeanAcceptanceLength)
			split = fmt.Sprintf("%.2f / %.2f / %.2f", m.DraftMSPerRound, m.VerifyMSPerRound, m.OverheadMSPerRound)
		}
		fmt.Fprintf(tw, "%s\t%.1f [%.1f, %.1f]\t%.1f\t%.2f\t%s\t%s\t%s\t%s\n", m.Mode, m.TokensPerSecond.Median, m.TokensPerSecond.Min, m.TokensPerSecond.Max,
			m.FirstTokenMS.Median, m.RoundMS.Median, speed, ideal, acc, split)
	}
	tw.Flush()
	if r.Speculative != nil {
		if sp := r.Speculative.SpeedupSpread; sp != nil {
			fmt.Fprintf(w, "\n%s\n", speedupVerdict(sp))
		}
	}
	if r.Speculative != nil && len(r.Speculative.AcceptanceByPosition) > 0 {
		fmt.Fprintf(w, "\nspeculative acceptance by position (accepted of the drafts verified there):")
		for i, a := range r.Speculative.AcceptanceByPosition {
			fmt.Fprintf(w, " %d:%.2f", i+1, a)
		}
		fmt.Fprintln(w)
		if sh := r.Speculative.WholeRoundShare; sh != nil {
			fmt.Fprintf(w, "speculative rounds that passed every draft: %.1f %% of %d\n", 100**sh, r.Speculative.DraftRounds)
		}
	}
	printLoopSplit(w, r)
	printChained(w, rows)
	printNodes(w, rows)
	printHostDevice(w, rows)
	printOutputChecks(w, rows)
}

// printChained says, for the modes that chained rounds, how many of their
// drafting rounds were verified before the previous verdict was read.
func printChained(w io.Writer, rows []modeResult) {
	var parts []string
	for _, m := range rows {
		if m.ChainedRounds > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%d dropped)", m.Mode, m.ChainedRounds, m.ChainedDropped))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "\nchained rounds (verified before the previous round's verdict was read): %s\n", strings.Join(parts, ", "))
	}
}

// printOutputChecks says which drafting modes' greedy outputs left plain
// decoding's, or that none did.
func printOutputChecks(w io.Writer, rows []modeResult) {
	checked, differing := 0, 0
	for _, m := range rows {
		c := m.MatchesPlain
		if c == nil {
			continue
		}
		checked += c.Runs
		if c.Differing > 0 {
			differing++
			fmt.Fprintf(w, "\n%s: the output DIFFERS from plain decoding on %d of %d runs (first: prompt %d, generated token %d).", m.Mode, c.Differing, c.Runs, c.FirstPrompt, c.FirstToken+1)
		}
	}
	switch {
	case differing > 0:
		fmt.Fprintln(w, "\nGreedy speculative output must equal plain output. In float32 that is a bug: please report it. In bfloat16\n"+
			"on a GPU, a verification row has the bits of a one-row decoding step only where our few-row kernels run\n"+
			"both (the dense Qwen3.5 targets, by default); elsewhere (a MoE's experts, SPECULA_ROWS_GEMV=verify or 0,\n"+
			"SPECULA_ROWS_ATTENTION=0) the two round differently, which can reorder two nearly tied tokens\n"+
			"(docs/PERFORMANCE.md, \"Exactness in bfloat16\"); run in float32 for exact output.")
	case checked > 0:
		fmt.Fprintf(w, "\ngreedy outputs: every drafting run equals plain decoding (%d runs)\n", checked)
	}
}

// printNodes prints each mode's graph nodes per step or round (--nodes),
// then the primitives that make most of them, a column per mode, so a
// round's extra nodes over a plain step can be named.
func printNodes(w io.Writer, rows []modeResult) {
	var parts []string
	var counted []modeResult
	for _, m := range rows {
		if m.NodesPerRound > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", m.Mode, m.NodesPerRound))
			counted = append(counted, m)
		}
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "\ngraph nodes handed to MLX per step or round after the first token (mean): %s\n", strings.Join(parts, ", "))
	// The primitives by their largest count in any mode.
	most := map[string]float64{}
	for _, m := range counted {
		for name, n := range m.NodeOpsPerRound {
			most[name] = max(most[name], n)
		}
	}
	names := slices.SortedFunc(maps.Keys(most), func(a, b string) int {
		if c := cmp.Compare(most[b], most[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	const shown = 15
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "primitive")
	for _, m := range counted {
		fmt.Fprintf(tw, "\t%s", m.Mode)
	}
	fmt.Fprintln(tw)
	for i, name := range names {
		if i == shown {
			fmt.Fprintf(tw, "(%d more: --json lists all)\n", len(names)-shown)
			break
		}
		label := name
		if len(label) > 40 {
			label = label[:39] + "…" // a compiled chain's name lists its every op
		}
		fmt.Fprint(tw, label)
		for _, m := range counted {
			fmt.Fprintf(tw, "\t%.1f", m.NodeOpsPerRound[name])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// printHostDevice prints the --split table: each mode's mean round between
// host and device.
func printHostDevice(w io.Writer, rows []modeResult) {
	header := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range rows {
		hd := m.HostDevice
		if hd == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nhost/device split of a round after the first token (mean ms; build: host graph building and token handling, submit: MLX encoding the kernels, wait: blocked on the device):")
			fmt.Fprintln(tw, "mode\trounds\tround ms\tbuild ms\tsubmit ms\twait ms\twait share")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f%%\n", m.Mode, hd.Rounds, hd.RoundMS, hd.BuildMS, hd.SubmitMS, hd.WaitMS, 100*hd.WaitShare)
	}
	tw.Flush()
	header = false
	for _, m := range rows {
		if m.HostDevice == nil || m.HostDevice.Phases == nil {
			continue
		}
		p := m.HostDevice.Phases
		if !header {
			fmt.Fprintln(w, "\nhost time of a drafting round by phase (mean ms, MLX's evaluation left out; emit: from the round's end to the next round, emitting its tokens):")
			fmt.Fprintln(tw, "mode\trounds\tpropose\tschedule\tforward\tverdict\tread\tcommit\tdraft commit\temit")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", m.Mode, p.Rounds,
			p.ProposeMS, p.ScheduleMS, p.ForwardMS, p.VerdictMS, p.ReadMS, p.CommitMS, p.DraftCommitMS, p.EmitMS)
	}
	tw.Flush()
}

// printLoopSplit prints each drafting mode's acceptance over the runs whose
// continuation ends in a loop and over the rest.
func printLoopSplit(w io.Writer, r *benchResult) {
	var rows []modeResult
	if r.Speculative != nil {
		rows = append(rows, *r.Speculative)
	}
	rows = append(rows, r.Sweep...)
	header := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range rows {
		ls := m.LoopSplit
		if ls == nil {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nloop split (a continuation ends in a loop when its last %d tokens repeat with a period of at most %d):\n", loopWindow, loopMaxPeriod)
			fmt.Fprintln(tw, "mode\tlooping runs\taccept len\tspeedup\tnon-looping runs\taccept len\tspeedup")
			header = true
		}
		cell := func(g loopGroup) string {
			if g.Runs == 0 {
				return "0\t-\t-"
			}
			return fmt.Sprintf("%d\t%.2f\t%.2fx", g.Runs, g.MeanAcceptanceLength, g.Speedup)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Mode, cell(ls.Looping), cell(ls.NonLooping))
	}
	tw.Flush()
}

// speedupVerdict says in words what the paired runs show.
func speedupVerdict(sp *speedup) string {
	head := fmt.Sprintf("speculative vs plain over %d paired runs: speedup %.2fx (per pair %.2f to %.2f; 95%% CI of the median %.2f to %.2f)",
		sp.Pairs, sp.Median, sp.Min, sp.Max, sp.CILow, sp.CIHigh)
	switch {
	case sp.WithinNoise:
		return head + ": within the noise, no difference shown (more --repeats narrow the interval)"
	case sp.CILow > 1:
		return head + ": faster"
	default:
		return head + ": slower"
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// parseDepths reads "1-15" or "1,2,4,8", each depth once (a repeated one
// would run, and be reported, twice).
func parseDepths(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("%q is not a depth", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("%q is not a depth range", part)
			}
		}
		if a < 1 || b < a || b > 64 {
			return nil, fmt.Errorf("depths must lie in 1..64, ascending: %q", part)
		}
		for d := a; d <= b; d++ {
			if slices.Contains(out, d) {
				return nil, fmt.Errorf("depth %d is listed twice", d)
			}
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no depths")
	}
	return out, nil
}
