package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/server"
	"github.com/specula-dev/specula/speculation"
	"github.com/specula-dev/specula/tokenizer"
)

func init() {
	register(&command{name: "run", summary: "generate from a manifest's target (and draft)", run: runRun})
}

// genFlags are the generation flags shared by run and bench.
type genFlags struct {
	manifest    string
	maxTokens   optInt
	temperature optFloat
	topK        optInt
	topP        optFloat
	minP        optFloat
	seed        optUint
	noDraft     bool
	stops       stringList
}

func (g *genFlags) register(fs *flag.FlagSet) {
	g.temperature, g.topP, g.minP = newOptFloat(), newOptFloat(), newOptFloat()
	g.maxTokens, g.topK, g.seed = newOptInt(), newOptInt(), newOptUint()
	fs.StringVar(&g.manifest, "m", "", "manifest `file` (required)")
	fs.StringVar(&g.manifest, "manifest", "", "manifest `file` (same as -m)")
	fs.Var(&g.maxTokens, "max-tokens", "generate at most `n` tokens; -1: until a stop or the end of the context (default: the manifest's max_tokens, else 256)")
	fs.Var(&g.temperature, "temperature", "sampling temperature, >= 0; 0 is greedy (default: the manifest's, else 0)")
	fs.Var(&g.topK, "top-k", "keep the k most likely tokens, >= 0 (0: off)")
	fs.Var(&g.topP, "top-p", "nucleus sampling threshold, 0 < top-p <= 1 (1: off)")
	fs.Var(&g.minP, "min-p", "drop tokens below min-p × the top probability, 0 <= min-p <= 1 (0: off)")
	fs.Var(&g.seed, "seed", "random seed for reproducible sampling")
	fs.BoolVar(&g.noDraft, "no-draft", false, "decode plainly: the draft is not loaded (nor its plugin started)")
	fs.Var(&g.stops, "stop", "stop at this `text` (repeatable)")
	addPluginDirFlag(fs)
}

// request returns the engine request the flags describe, checked by
// engine.Request.Validate: a setting out of range is reported on stderr as a
// usage error naming its flag (ok false).
func (g *genFlags) request(e *env, cmd string) (r engine.Request, ok bool) {
	r = engine.Request{NoDraft: g.noDraft, StopStrings: g.stops}
	if g.maxTokens.set {
		r.MaxTokens = g.maxTokens.v
		if r.MaxTokens == 0 {
			// 0 means "the default" in a Request; on the command line it
			// can only be a mistake.
			fmt.Fprintf(e.stderr, "specula %s: --max-tokens 0 generates nothing: want >= 1, or -1 to generate until a stop or the end of the context\n", cmd)
			return r, false
		}
	}
	if g.temperature.set {
		v := float32(g.temperature.v)
		r.Temperature = &v
	}
	if g.topK.set {
		r.TopK = &g.topK.v
	}
	if g.topP.set {
		v := float32(g.topP.v)
		r.TopP = &v
	}
	if g.minP.set {
		v := float32(g.minP.v)
		r.MinP = &v
	}
	if g.seed.set {
		r.Seed = &g.seed.v
	}
	if err := r.Validate(); err != nil {
		var fe *engine.FieldError
		if !errors.As(err, &fe) {
			fmt.Fprintf(e.stderr, "specula %s: %v\n", cmd, err)
			return r, false
		}
		// Settings are named as manifests name them; a flag's name is the
		// same with dashes.
		name := strings.ReplaceAll(fe.Field, "_", "-")
		fmt.Fprintf(e.stderr, "specula %s: --%s %s %s\n", cmd, name, fe.Value, fe.Reason(name))
		return r, false
	}
	return r, true
}

func runRun(e *env, args []string) int {
	fs := newFlags(e, "run", "-m MANIFEST [flags] [PROMPT | -]")
	var g genFlags
	g.register(fs)
	ids := fs.String("ids", "", "prompt as comma-separated token `ids` instead of text")
	asJSON := fs.Bool("json", false, "print one JSON object (ids, text, done_reason, stats) instead of streaming")
	chat := fs.Bool("chat", false, "wrap the prompt in the checkpoint's chat template (as a user turn); with no prompt on a terminal, run opens an interactive chat")
	system := fs.String("system", "", "system `message` for --chat")
	noThink := fs.Bool("no-think", false, "with --chat, pass enable_thinking=false to the template (Qwen3.5)")
	quiet := fs.Bool("quiet", false, "no progress or stats on stderr")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if g.manifest == "" {
		fmt.Fprintln(e.stderr, "specula run: -m MANIFEST is required")
		fs.Usage()
		return exitUsage
	}
	if len(pos) > 1 {
		fmt.Fprintf(e.stderr, "specula run: one prompt argument expected, got %d (quote the prompt)\n", len(pos))
		return exitUsage
	}
	req, valid := g.request(e, "run")
	if !valid {
		return exitUsage
	}
	if !*chat && (*system != "" || *noThink) && (len(pos) > 0 || *ids != "") {
		fmt.Fprintln(e.stderr, "specula run: --system and --no-think shape the chat template: add --chat")
		return exitUsage
	}
	prompt := ""
	if len(pos) == 1 {
		prompt = pos[0]
		if prompt == "-" {
			b, err := io.ReadAll(os.Stdin)
			if err != nil {
				return fail(e, "run", err)
			}
			prompt = string(b)
		}
	}
	if *ids != "" {
		if prompt != "" {
			fmt.Fprintln(e.stderr, "specula run: give either --ids or a text prompt, not both")
			return exitUsage
		}
		if *chat {
			fmt.Fprintln(e.stderr, "specula run: --chat wraps a text prompt in the chat template; it cannot apply to --ids")
			return exitUsage
		}
		parsed, err := parseIDs(*ids)
		if err == nil && len(parsed) == 0 {
			err = errors.New("no ids given")
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "specula run: --ids: %v\n", err)
			return exitUsage
		}
		req.IDs = parsed
	} else if prompt == "" && (len(pos) > 0 || *asJSON || !isTerminal(os.Stdin)) {
		fmt.Fprintln(e.stderr, "specula run: a prompt (or --ids) is required; on a terminal, no prompt opens a chat")
		return exitUsage
	}
	interactive := prompt == "" && req.IDs == nil

	ctx := e.ctx
	var bar *progressBar
	if !*quiet {
		bar = newProgressBar(e.stderr)
	}
	opts := engine.Options{NoDraft: g.noDraft}
	if interactive {
		opts.PromptCacheBytes = server.DefaultPromptCacheBytes // each turn resumes where the last ended
	}
	// A text prompt (or a chat) needs the target's tokenizer: without one,
	// fail before any weight is read.
	opts.RequireTokenizer = req.IDs == nil
	eng, err := loadEngine(ctx, g.manifest, opts, bar)
	if err != nil {
		return fail(e, "run", err)
	}
	var chatArgs map[string]any
	if *noThink {
		chatArgs = map[string]any{"enable_thinking": false}
	}
	if interactive {
		if eng.Tokenizer() == nil {
			return fail(e, "run", engine.ErrNoTokenizer)
		}
		c := &chatSession{eng: eng, base: req, system: *system, args: chatArgs, stdout: e.stdout, stderr: e.stderr, stats: !*quiet}
		releaseSignals() // Ctrl-C stops an answer (interruptContext), not the chat
		if err := c.loop(os.Stdin, interruptContext); err != nil {
			return fail(e, "run", err)
		}
		return exitOK
	}
	if *chat && req.IDs == nil {
		if eng.Tokenizer() == nil {
			return fail(e, "run", engine.ErrNoTokenizer)
		}
		if *system != "" {
			req.Messages = append(req.Messages, tokenizer.Message{Role: "system", Content: *system})
		}
		req.Messages = append(req.Messages, tokenizer.Message{Role: "user", Content: prompt})
		req.ChatArgs = chatArgs
	}
	req.Prompt = prompt

	streamIDs := req.IDs != nil || eng.Tokenizer() == nil
	var onToken func(engine.Token) error
	if !*asJSON {
		first := true
		onToken = func(t engine.Token) error {
			if streamIDs {
				if !first {
					fmt.Fprint(e.stdout, " ")
				}
				fmt.Fprint(e.stdout, t.ID)
			} else {
				fmt.Fprint(e.stdout, t.Text)
			}
			first = false
			flush(e.stdout)
			return nil
		}
	}
	resp, err := eng.Generate(ctx, req, onToken)
	interrupted := errors.Is(err, context.Canceled) && ctx.Err() != nil
	if err != nil && !interrupted {
		return fail(e, "run", err)
	}
	if interrupted {
		// What was generated is printed as usual; runMain exits with the
		// signal's code.
		if resp == nil {
			resp = &engine.Response{}
		}
		resp.DoneReason = doneInterrupted
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(runJSON(resp)); err != nil {
			return fail(e, "run", err)
		}
		return exitOK
	}
	fmt.Fprintln(e.stdout)
	if !*quiet {
		fmt.Fprintln(e.stderr, statsLine(resp))
	}
	return exitOK
}

// doneInterrupted is the done_reason of a run interrupted by a signal.
const doneInterrupted = "interrupted"

// loadEngine loads a manifest with opts (its target alone with NoDraft: the
// draft is not even resolved; a prompt cache with PromptCacheBytes),
// showing progress on bar (if not nil). A failure of the draft alone says
// that --no-draft runs the target without it.
func loadEngine(ctx context.Context, manifest string, opts engine.Options, bar *progressBar) (*engine.Engine, error) {
	if bar != nil {
		opts.Progress = bar.update
	}
	opts.LoadPlugin = loadPlugin
	eng, err := engine.Load(ctx, manifest, opts)
	if bar != nil {
		bar.done()
		if err == nil {
			noteCPUKernels(bar.w)
		}
	}
	var de *engine.DraftError
	if errors.As(err, &de) {
		err = fmt.Errorf("%w (--no-draft runs the target alone)", err)
	}
	return eng, err
}

// noteCPUKernels explains a CPU run's first-time pause (MLX building its
// fused kernels with g++) or, without g++, why compiled functions run
// unfused. It prints nothing on a GPU or once the kernels are built.
func noteCPUKernels(w io.Writer) {
	k, ok := mlx.CPUKernelState()
	switch {
	case !ok:
	case !k.Compiler:
		fmt.Fprintln(w, "note: g++ is not installed, so MLX runs the fused CPU functions op by op (same results, slower); install g++ to fuse them")
	case !k.Cached:
		fmt.Fprintf(w, "note: first run here: MLX builds its fused CPU kernels with g++ (a few seconds, once; kept in %s)\n", k.Dir)
	}
}

// loadPlugin launches the plugin drafts manifests name (engine.Options and
// manifests.Options LoadPlugin): the process's plugin host's LoadPlugin.
var loadPlugin = func(ctx context.Context, name, sha256 string, reg *registry.Registry) error {
	h, err := pluginHost()
	if err != nil {
		return err
	}
	return h.LoadPlugin(ctx, name, sha256, reg)
}

// hostState is the plugin host of this process: started by the first
// manifest that names a plugin (with the --plugin-dir folders parsed by
// then: a process runs one command), ended by closePlugins.
var hostState struct {
	mu     sync.Mutex
	dirs   []string // --plugin-dir folders, in order
	host   *plugins.Host
	closed bool // the program is exiting: no new plugins
}

// addPluginDirFlag registers --plugin-dir on fs, for commands that resolve
// manifests (run, bench, check).
func addPluginDirFlag(fs *flag.FlagSet) {
	pluginDirFlag(fs, func(dir string) {
		hostState.mu.Lock()
		defer hostState.mu.Unlock()
		hostState.dirs = append(hostState.dirs, dir)
	})
}

// pluginDirFlag registers the repeatable --plugin-dir on fs, handing each
// folder to add.
func pluginDirFlag(fs *flag.FlagSet, add func(dir string)) {
	fs.Func("plugin-dir", "search this `folder` for plugin binaries first (repeatable; then $"+plugins.EnvPath+", else ~/.config/specula/plugins)",
		func(dir string) error {
			if dir == "" {
				return errors.New("empty folder")
			}
			// A folder that is not there would be skipped without a word,
			// and the plugin then reported missing from the other folders.
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return errors.New("no such folder")
			}
			add(dir)
			return nil
		})
}

// pluginHost returns the process's plugin host, starting it with the
// --plugin-dir folders first on its search path.
func pluginHost() (*plugins.Host, error) {
	hostState.mu.Lock()
	defer hostState.mu.Unlock()
	if hostState.closed {
		return nil, errors.New("specula is exiting: no plugin can start")
	}
	if hostState.host == nil {
		hostState.host = plugins.NewHost(plugins.Config{Dirs: hostState.dirs, HostVersion: version})
	}
	return hostState.host, nil
}

// closePlugins ends every plugin process the program started: the host's
// (each gets a short grace to shut down, then is killed), then any other
// go-plugin client (plugins.CleanupClients). main calls it on every exit
// path; it is idempotent and returns within seconds.
func closePlugins() {
	hostState.mu.Lock()
	h := hostState.host
	hostState.host, hostState.closed = nil, true
	hostState.mu.Unlock()
	if h != nil {
		h.Close()
	}
	plugins.CleanupClients()
}

// runOutput is the --json result of specula run.
type runOutput struct {
	IDs        []int32   `json:"ids"`
	Text       string    `json:"text"`
	DoneReason string    `json:"done_reason"`
	Stats      statsJSON `json:"stats"`
	Timings    timings   `json:"timings"`
}

type statsJSON struct {
	Rounds               int            `json:"rounds"`
	DraftRounds          int            `json:"draft_rounds"`
	Drafted              int            `json:"drafted"`
	Accepted             int            `json:"accepted"`
	AcceptanceRate       float64        `json:"acceptance_rate"`
	MeanAcceptanceLength float64        `json:"mean_acceptance_length"`
	AcceptanceByPosition []float64      `json:"acceptance_by_position"`
	Fallbacks            map[string]int `json:"fallbacks"`
	DepthPolicy          string         `json:"depth_policy"`
	DraftMS              float64        `json:"draft_ms"`
	VerifyMS             float64        `json:"verify_ms"`
	OverheadMS           float64        `json:"overhead_ms"`
}

type timings struct {
	PromptTokens    int     `json:"prompt_tokens"`
	PrefillMS       float64 `json:"prefill_ms"`
	FirstTokenMS    float64 `json:"first_token_ms"`
	DecodeMS        float64 `json:"decode_ms"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	TotalMS         float64 `json:"total_ms"`
}

func runJSON(r *engine.Response) runOutput {
	st := r.Stats
	out := runOutput{
		IDs:        r.IDs,
		Text:       r.Text,
		DoneReason: r.DoneReason,
		Stats: statsJSON{
			Rounds:               st.Iterations,
			DraftRounds:          st.DraftRounds,
			Drafted:              st.Drafted,
			Accepted:             st.Accepted,
			AcceptanceRate:       st.AcceptanceRate(),
			MeanAcceptanceLength: st.MeanAcceptanceLength(),
			AcceptanceByPosition: st.PerPositionAcceptance(),
			Fallbacks:            st.Fallback,
			DepthPolicy:          st.DepthPolicy,
			DraftMS:              st.DraftMS,
			VerifyMS:             st.VerifyMS,
			OverheadMS:           st.OverheadMS,
		},
		Timings: timings{
			PromptTokens:    r.PromptTokens,
			PrefillMS:       ms(r.PrefillTime),
			FirstTokenMS:    ms(r.FirstTokenTime),
			DecodeMS:        ms(r.DecodeTime),
			TokensPerSecond: r.TokensPerSecond(),
			TotalMS:         ms(r.Total),
		},
	}
	if out.IDs == nil {
		out.IDs = []int32{}
	}
	if out.Stats.AcceptanceByPosition == nil {
		out.Stats.AcceptanceByPosition = []float64{}
	}
	if out.Stats.Fallbacks == nil {
		out.Stats.Fallbacks = map[string]int{}
	}
	return out
}

// statsLine is the one-line summary printed after streaming.
func statsLine(r *engine.Response) string {
	st := r.Stats
	var b strings.Builder
	fmt.Fprintf(&b, "%d tokens, %.1f tok/s, first token %.0f ms", len(r.IDs), r.TokensPerSecond(), ms(r.FirstTokenTime))
	if st.DraftRounds > 0 {
		fmt.Fprintf(&b, ", mean acceptance length %.2f", st.MeanAcceptanceLength())
		b.WriteString(", acceptance by position [")
		for i, a := range st.PerPositionAcceptance() {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%.2f", a)
		}
		b.WriteString("]")
	} else {
		fmt.Fprintf(&b, ", no drafting: %s", st.DepthPolicy)
	}
	// A draft plugin's fault ends drafting for the request; the line says
	// so, or a crashed plugin would read as a draft that merely declined.
	for _, reason := range []string{speculation.FallbackPluginCrash, speculation.FallbackPluginTimeout, speculation.FallbackPluginInvalid} {
		if st.Fallback[reason] > 0 {
			fmt.Fprintf(&b, ", draft plugin fault: %s (the rest decoded plainly)", reason)
		}
	}
	fmt.Fprintf(&b, " (%s)", r.DoneReason)
	return b.String()
}
