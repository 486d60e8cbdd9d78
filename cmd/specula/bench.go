package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/specula-dev/specula/engine"
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
	promptsFile := fs.String("prompts", "", "`file` of prompts, one per line (text, or token ids as a JSON array); default: a built-in set")
	repeats := fs.Int("repeats", 3, "measured runs of each prompt and mode")
	warmup := fs.Int("warmup", 1, "unmeasured runs before measuring")
	oracle := fs.Bool("oracle", false, "also run an oracle draft (the target's own greedy tokens) at each depth: the best speedup the engine can reach")
	depths := fs.String("depths", "1-15", "oracle depths, e.g. 1-15 or 1,2,4,8")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the measured runs to `file` (host-side time)")
	if _, code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
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
	if *oracle && g.temperature.set && g.temperature.v != 0 {
		fmt.Fprintln(e.stderr, "specula bench: --oracle replays the greedy continuation; it needs --temperature 0")
		return exitUsage
	}
	ctx := e.ctx
	var bar *progressBar
	if !*quiet {
		bar = newProgressBar(e.stderr)
	}
	eng, err := loadEngine(ctx, g.manifest, g.noDraft, bar, 0)
	if err != nil {
		return fail(e, "bench", err)
	}
	prompts, err := benchPromptSet(*promptsFile, eng)
	if err != nil {
		return fail(e, "bench", err)
	}
	b := &bencher{ctx: ctx, eng: eng, base: base, prompts: prompts, repeats: *repeats, warmup: *warmup, log: e.stderr, quiet: *quiet || bar == nil || !bar.tty}
	if *oracle {
		zero := float32(0)
		b.base.Temperature = &zero
	}
	res := benchResult{Manifest: g.manifest, Prompts: len(prompts), Repeats: *repeats, MaxTokens: g.maxTokens.v, Date: time.Now().UTC().Format(time.RFC3339)}
	res.Plain, err = b.mode("plain", func(r *engine.Request, _ int) { r.NoDraft = true })
	if err != nil {
		return fail(e, "bench", err)
	}
	if eng.HasDraft() && !g.noDraft {
		spec, err := b.mode("speculative", func(*engine.Request, int) {})
		if err != nil {
			return fail(e, "bench", err)
		}
		spec.Speedup = ratio(spec.TokensPerSecond.Median, res.Plain.TokensPerSecond.Median)
		res.Speculative = &spec
	}
	if *oracle {
		for _, d := range depthList {
			m, err := b.mode(fmt.Sprintf("oracle depth %d", d), func(r *engine.Request, prompt int) {
				r.Drafter = speculation.NewOracle(slices.Concat(prompts[prompt].ids, b.continuation[prompt]), d)
				r.FixedDepth = d
			})
			if err != nil {
				return fail(e, "bench", err)
			}
			m.Depth = d
			m.Speedup = ratio(m.TokensPerSecond.Median, res.Plain.TokensPerSecond.Median)
			// All d drafts are accepted: each round commits d+1 tokens.
			m.IdealSpeedup = ratio(float64(d+1)*res.Plain.RoundMS.Median, m.RoundMS.Median)
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
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var ids []int32
		if strings.HasPrefix(text, "[") {
			if err := json.Unmarshal([]byte(text), &ids); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", file, line, err)
			}
		} else if ids, err = encode(text); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, line, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("%s:%d: empty prompt", file, line)
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
	IdealSpeedup         float64   `json:"ideal_speedup,omitempty"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length,omitempty"`
	AcceptanceByPosition []float64 `json:"acceptance_by_position,omitempty"`
	DraftMSPerRound      float64   `json:"draft_ms_per_round,omitempty"`
	VerifyMSPerRound     float64   `json:"verify_ms_per_round,omitempty"`
	OverheadMSPerRound   float64   `json:"overhead_ms_per_round,omitempty"`
}

// mode measures one configuration: warm-up runs, then repeats of every
// prompt. set adjusts the request for prompt i.
func (b *bencher) mode(name string, set func(r *engine.Request, prompt int)) (modeResult, error) {
	res := modeResult{Mode: name}
	var tps, ttft, round []float64
	var stats speculation.Stats
	run := func(i int) (*engine.Response, error) {
		req := b.base
		req.IDs = b.prompts[i].ids
		set(&req, i)
		return b.eng.Generate(b.ctx, req, nil)
	}
	for w := range b.warmup {
		if _, err := run(w % len(b.prompts)); err != nil {
			return res, err
		}
	}
	record := name == "plain" && b.continuation == nil
	if record {
		b.continuation = make([][]int32, len(b.prompts))
	}
	total := b.repeats * len(b.prompts)
	for r := range b.repeats {
		for i := range b.prompts {
			if !b.quiet {
				fmt.Fprintf(b.log, "\rbench %s: run %d/%d ", name, r*len(b.prompts)+i+1, total)
			}
			resp, err := run(i)
			if err != nil {
				return res, err
			}
			if record && r == 0 {
				b.continuation[i] = resp.IDs
			}
			tps = append(tps, resp.TokensPerSecond())
			ttft = append(ttft, ms(resp.FirstTokenTime))
			if rounds := resp.Stats.Iterations; rounds > 1 {
				round = append(round, ms(resp.DecodeTime)/float64(rounds-1))
			}
			stats.Add(&resp.Stats)
		}
	}
	if !b.quiet {
		fmt.Fprintln(b.log)
	}
	res.Runs = total
	res.TokensPerSecond, res.FirstTokenMS, res.RoundMS = spreadOf(tps), spreadOf(ttft), spreadOf(round)
	if stats.DraftRounds > 0 {
		res.MeanAcceptanceLength = stats.MeanAcceptanceLength()
		res.AcceptanceByPosition = stats.PerPositionAcceptance()
		n := float64(stats.DraftRounds)
		res.DraftMSPerRound, res.VerifyMSPerRound, res.OverheadMSPerRound = stats.DraftMS/n, stats.VerifyMS/n, stats.OverheadMS/n
	}
	return res, nil
}

// benchResult is the whole report.
type benchResult struct {
	Manifest    string       `json:"manifest"`
	Date        string       `json:"date"`
	Prompts     int          `json:"prompts"`
	Repeats     int          `json:"repeats"`
	MaxTokens   int          `json:"max_tokens"`
	Plain       modeResult   `json:"plain"`
	Speculative *modeResult  `json:"speculative,omitempty"`
	Oracle      []modeResult `json:"oracle,omitempty"`
}

func printBench(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "%s: %d prompts × %d repeats, up to %d tokens each\n\n", r.Manifest, r.Prompts, r.Repeats, r.MaxTokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\ttok/s (median [min, max])\tfirst token ms\tround ms\tspeedup\tideal\tmean accept len\tdraft/verify/overhead ms per round")
	rows := []modeResult{r.Plain}
	if r.Speculative != nil {
		rows = append(rows, *r.Speculative)
	}
	rows = append(rows, r.Oracle...)
	for _, m := range rows {
		speed, ideal, acc, split := "-", "-", "-", "-"
		if m.Speedup > 0 {
			speed = fmt.Sprintf("%.2fx", m.Speedup)
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
	if r.Speculative != nil && len(r.Speculative.AcceptanceByPosition) > 0 {
		fmt.Fprintf(w, "\nspeculative acceptance by position:")
		for i, a := range r.Speculative.AcceptanceByPosition {
			fmt.Fprintf(w, " %d:%.2f", i+1, a)
		}
		fmt.Fprintln(w)
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// parseDepths reads "1-15" or "1,2,4,8".
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
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no depths")
	}
	return out, nil
}
