package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/synth"
	gotiny "github.com/specula-dev/specula/models/go-tiny"
	"github.com/specula-dev/specula/speculation"
	"github.com/specula-dev/specula/tokenizer"
)

func init() {
	register(&command{name: "demo", summary: "plain vs DFlash vs DFlash2 generation on the trained go-tiny family (--random: an embedded random pair)", run: runDemo})
}

// The random demo pair (--random): a small Qwen3.5 target (3 gated delta-net layers and one
// gated attention layer) and a DFlash2 draft with its candidate selector,
// sized so the demo runs in seconds on a laptop CPU in float32.
const (
	demoVersion = "demo-v2" // bump when the recipe changes: a new cache folder (v2: synth's chunked drawing)
	demoVocab   = 2048
	demoPrompt  = "The quick brown fox jumps over the lazy dog. Speculative decoding"
)

var demoTarget = synth.Qwen35{
	Vocab: demoVocab, Hidden: 256, Intermediate: 512, Layers: 4, Heads: 4, KVHeads: 2, HeadDim: 64,
	LinearKeyHeads: 4, LinearValueHeads: 8, LinearKeyDim: 32, LinearValueDim: 32, ConvKernel: 4,
	FullAttentionInterval: 4, RopeTheta: 1e7, PartialRotary: 0.25, TieEmbeddings: true, DType: synth.Float32, Seed: 20261202,
}

// demoDraft's mask token is <|MASK|>, the tokenizer's last special token.
var demoDraft = synth.DFlash{
	Hidden: 256, Vocab: demoVocab, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512,
	BlockSize: 8, MaskToken: demoVocab - 1, TargetLayerIDs: []int{0, 2}, TargetLayers: 4, SlidingWindow: 256,
	RopeTheta: 1e7, DFlash2: true, ConvKernel: 2, ConvGroup: 16, SelectorRank: 16, SelectorTopK: 8,
	DType: synth.Float32, Seed: 20261203,
}

const demoManifest = `# The embedded demo pair, written by "specula demo". Random weights.
schema = 1
name = "specula-demo"

[target]
path = "target"
capabilities = ["model", "draft-target"]
dtype = "float32"

[draft]
path = "draft"
capabilities = ["draft", "block-draft", "selector"]

[sampling]
temperature = 0.0
max_tokens = 64
`

func runDemo(e *env, args []string) int {
	fs := newFlags(e, "demo", "[flags]")
	random := fs.Bool("random", false, "run the random-weight demo instead (a pair built in the cache folder, with an oracle row)")
	dir := fs.String("dir", "", "the go-tiny family `folder` (default: found as gotiny.Locate says); with --random, where to build the random pair (default: the user cache folder)")
	maxTokens := fs.Int("max-tokens", 0, "tokens to generate per run (default 128, or 64 with --random)")
	repeats := fs.Int("repeats", 3, "measured runs of each mode (go-tiny); the modes take turns and the medians are shown")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := noArguments(e, fs, rest); !ok {
		return code
	}
	if *maxTokens < 0 || *repeats < 1 {
		fmt.Fprintln(e.stderr, "specula demo: --max-tokens must be >= 0 and --repeats >= 1")
		return exitUsage
	}
	if !*random {
		if *maxTokens == 0 {
			*maxTokens = 128
		}
		return runGoTinyDemo(e, *dir, *maxTokens, *repeats, *asJSON)
	}
	if *maxTokens == 0 {
		*maxTokens = 64
	}
	if *dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fail(e, "demo", fmt.Errorf("no user cache folder (%v); pass --dir", err))
		}
		*dir = filepath.Join(cache, "specula", demoVersion)
	}
	ctx := e.ctx
	eng, built, err := loadDemo(ctx, e, *dir)
	if err != nil {
		return fail(e, "demo", err)
	}
	if !*asJSON {
		if built {
			fmt.Fprintf(e.stdout, "Built the demo pair in %s (first run).\n", *dir)
		}
		fmt.Fprintln(e.stdout, "Note: the weights are random. The text is gibberish, and a random draft rarely")
		fmt.Fprintln(e.stdout, "guesses the target's tokens, so real speedups need trained checkpoints. The oracle")
		fmt.Fprintln(e.stdout, "row shows what this engine reaches when every draft token is right.")
		fmt.Fprintln(e.stdout)
	}
	if !*asJSON {
		noteCPUKernels(e.stderr)
	}
	base := engine.Request{Prompt: demoPrompt, MaxTokens: *maxTokens}
	run := func(mut func(*engine.Request)) (*engine.Response, error) {
		req := base
		mut(&req)
		// One warm-up run so that both modes are timed warm.
		if _, err := eng.Generate(ctx, req, nil); err != nil {
			return nil, err
		}
		return eng.Generate(ctx, req, nil)
	}
	plain, err := run(func(r *engine.Request) { r.NoDraft = true })
	if err != nil {
		return fail(e, "demo", err)
	}
	spec, err := run(func(*engine.Request) {})
	if err != nil {
		return fail(e, "demo", err)
	}
	prompt := eng.Tokenizer().Tokenizer.Encode(demoPrompt, tokenizer.EncodeOptions{})
	oracle, err := run(func(r *engine.Request) {
		r.Drafter = speculation.NewOracle(slices.Concat(prompt, plain.IDs), 7)
		r.FixedDepth = 7
	})
	if err != nil {
		return fail(e, "demo", err)
	}
	identical := slices.Equal(plain.IDs, spec.IDs) && slices.Equal(plain.IDs, oracle.IDs)
	if *asJSON {
		out := map[string]any{
			"random_weights": true,
			"prompt":         demoPrompt,
			"identical":      identical,
			"plain":          runJSON(plain),
			"speculative":    runJSON(spec),
			"oracle_depth_7": runJSON(oracle),
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fail(e, "demo", err)
		}
	} else {
		fmt.Fprintf(e.stdout, "prompt:      %q\n", demoPrompt)
		fmt.Fprintf(e.stdout, "plain:       %q\n", plain.Text)
		fmt.Fprintf(e.stdout, "speculative: %q\n", spec.Text)
		if identical {
			fmt.Fprintf(e.stdout, "\nThe outputs are identical, token for token (%d tokens): verification is exact.\n\n", len(plain.IDs))
		} else {
			fmt.Fprintf(e.stdout, "\nThe outputs DIFFER: plain %v, speculative %v, oracle %v. This is a bug; please report it.\n\n", plain.IDs, spec.IDs, oracle.IDs)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "mode\ttok/s\tspeedup\tmean acceptance length\tdrafted\taccepted")
		for _, row := range []struct {
			name string
			r    *engine.Response
		}{{"plain", plain}, {"speculative (DFlash2, random)", spec}, {"oracle draft, depth 7", oracle}} {
			st := row.r.Stats
			acc := "-"
			if st.DraftRounds > 0 {
				acc = fmt.Sprintf("%.2f", st.MeanAcceptanceLength())
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.2fx\t%s\t%d\t%d\n", row.name, row.r.TokensPerSecond(), ratio(row.r.TokensPerSecond(), plain.TokensPerSecond()), acc, st.Drafted, st.Accepted)
		}
		tw.Flush()
	}
	if !identical {
		return exitFailure
	}
	return exitOK
}

// loadDemo loads the demo pair from its cache folder dir, building it on
// first use. A cache that fails to load (a file truncated or edited since it
// was built) is built again, once, with a note on stderr: the demo's files
// are made here, so there is nothing to download.
func loadDemo(ctx context.Context, e *env, dir string) (eng *engine.Engine, built bool, err error) {
	manifest, built, err := ensureDemo(dir, false)
	if err != nil {
		return nil, false, err
	}
	eng, err = engine.Load(ctx, manifest, engine.Options{})
	if err == nil || built || ctx.Err() != nil {
		return eng, built, err
	}
	fmt.Fprintf(e.stderr, "specula demo: the cached demo pair in %s does not load (%v); building it again\n", dir, firstLine(err))
	if manifest, built, err = ensureDemo(dir, true); err != nil {
		return nil, false, err
	}
	eng, err = engine.Load(ctx, manifest, engine.Options{})
	return eng, built, err
}

// firstLine returns the first line of err's message.
func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// ensureDemo builds the demo folder on first use (or, with rebuild, again)
// and returns its manifest. A folder is used only when its stamp says it is
// complete; a half-built one is rebuilt. The cache is locked while it is
// checked and built (dir + ".lock"), so two demos started together build
// it once: the second waits, then finds it complete.
func ensureDemo(dir string, rebuild bool) (manifest string, built bool, err error) {
	manifest = filepath.Join(dir, "demo.toml")
	stamp := filepath.Join(dir, "complete")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", false, err
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", false, fmt.Errorf("locking the demo cache: %w", err)
	}
	defer unlock()
	if rebuild {
		if err := os.Remove(stamp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", false, err
		}
	}
	if _, err := os.Stat(stamp); err == nil {
		return manifest, false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", false, err
	}
	tmp := dir + ".building"
	if err := os.RemoveAll(tmp); err != nil {
		return "", false, err
	}
	tok, err := tokenizer.BuildSmallBPE("", tokenizer.SmallBPEOptions{
		VocabSize:     demoVocab,
		SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"},
	})
	if err != nil {
		return "", false, err
	}
	if err := tok.WriteDir(filepath.Join(tmp, "target")); err != nil {
		return "", false, err
	}
	if err := demoTarget.Write(filepath.Join(tmp, "target")); err != nil {
		return "", false, err
	}
	if err := demoDraft.Write(filepath.Join(tmp, "draft")); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "demo.toml"), []byte(demoManifest), 0o644); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(demoVersion+"\n"), 0o644); err != nil {
		return "", false, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", false, errors.Join(err, os.RemoveAll(tmp))
	}
	return manifest, true, nil
}

// goTinyPrompt is the go-tiny demo's prompt: the start of a Go function
// that is not in the standard library go-tiny was trained on, cut where the
// idiom is clear but the rest is not given.
const goTinyPrompt = `// countLines returns the number of lines in the file at path.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
`

// goTinyManifest is the manifest the demo writes for one of the family's
// drafts (draft: its sub-folder; caps: its capabilities). float32 on every
// device, as manifests/go-tiny.toml explains: in bfloat16 on a GPU the
// demo's speculative output left plain decoding's.
const goTinyManifest = `# Written by "specula demo" for the go-tiny family.
schema = 1
name = "go-tiny-%s"

[target]
path = %s
capabilities = ["model", "draft-target"]
dtype = "float32"

[draft]
path = %s
capabilities = %s

[sampling]
temperature = 0.0
`

// runGoTinyDemo runs the go-tiny family: a Go prompt decoded plainly, with
// DFlash and with DFlash2, the modes taking turns over repeats (the bench's
// interleaving), and shows that every output is the same and what each
// draft gains.
func runGoTinyDemo(e *env, dir string, maxTokens, repeats int, asJSON bool) int {
	family, err := gotiny.Locate(dir)
	if err != nil {
		return fail(e, "demo", fmt.Errorf("%w; `specula demo --random` runs the random-weight demo without it", err))
	}
	tmp, err := os.MkdirTemp("", "specula-demo-")
	if err != nil {
		return fail(e, "demo", err)
	}
	defer os.RemoveAll(tmp)
	ctx := e.ctx
	engines := map[string]*engine.Engine{}
	defer func() {
		for _, eng := range engines {
			eng.Close()
		}
	}()
	for _, d := range []struct{ name, caps string }{
		{gotiny.DFlashDir, `["draft", "block-draft"]`},
		{gotiny.DFlash2Dir, `["draft", "block-draft", "selector"]`},
	} {
		path := filepath.Join(tmp, d.name+".toml")
		text := fmt.Sprintf(goTinyManifest, d.name, strconv.Quote(family), strconv.Quote(filepath.Join(family, d.name)), d.caps)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return fail(e, "demo", err)
		}
		eng, err := loadEngine(ctx, path, engine.Options{RequireTokenizer: true}, nil)
		if err != nil {
			return fail(e, "demo", fmt.Errorf("go-tiny family %s: %w", family, err))
		}
		engines[d.name] = eng
	}
	if !asJSON {
		noteCPUKernels(e.stderr)
	}
	dflash, dflash2 := engines[gotiny.DFlashDir], engines[gotiny.DFlash2Dir]
	prompt := dflash.Tokenizer().Tokenizer.Encode(goTinyPrompt, tokenizer.EncodeOptions{})
	zero := float32(0)
	b := &bencher{ctx: ctx, eng: dflash, base: engine.Request{MaxTokens: maxTokens, Temperature: &zero},
		prompts: []benchPrompt{{label: "go", ids: prompt}}, repeats: repeats, warmup: 1, log: e.stderr, quiet: true}
	plain := &benchMode{name: "plain", set: func(r *engine.Request, _ int) { r.NoDraft = true }}
	modes := []*benchMode{plain,
		{name: "DFlash", set: func(*engine.Request, int) {}},
		{name: "DFlash2", eng: dflash2, set: func(*engine.Request, int) {}}}
	if err := b.measure(modes...); err != nil {
		return fail(e, "demo", err)
	}
	want := plain.outputs[0]
	identical := true
	for _, m := range modes {
		for _, ids := range m.outputs {
			identical = identical && slices.Equal(ids, want)
		}
	}
	results := make([]modeResult, len(modes))
	for i, m := range modes {
		results[i] = m.result()
		if i > 0 {
			results[i].speedupOver(plain, m)
		}
	}
	text, err := dflash.Tokenizer().Tokenizer.Decode(want, true)
	if err != nil {
		return fail(e, "demo", err)
	}
	if asJSON {
		out := map[string]any{
			"family":     family,
			"prompt":     goTinyPrompt,
			"max_tokens": maxTokens,
			"repeats":    repeats,
			"identical":  identical,
			"ids":        want,
			"text":       text,
			"plain":      results[0],
			"dflash":     results[1],
			"dflash2":    results[2],
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fail(e, "demo", err)
		}
	} else {
		printGoTinyDemo(e, family, text, len(want), repeats, identical, results)
		if !identical {
			for _, m := range modes {
				fmt.Fprintf(e.stdout, "%s: %v\n", m.name, m.outputs)
			}
		}
	}
	if !identical {
		return exitFailure
	}
	return exitOK
}

// printGoTinyDemo prints the go-tiny demo for a person.
func printGoTinyDemo(e *env, family, text string, tokens, repeats int, identical bool, results []modeResult) {
	w := e.stdout
	fmt.Fprintf(w, "go-tiny (%s): a small Qwen3.5 target trained on the Go standard library,\n", family)
	fmt.Fprintf(w, "with its DFlash and DFlash2 drafts. Greedy, %d runs of each mode taking turns; medians.\n\n", repeats)
	fmt.Fprintln(w, "prompt:")
	fmt.Fprint(w, indent(goTinyPrompt))
	fmt.Fprintln(w, "continuation:")
	fmt.Fprint(w, indent(text))
	fmt.Fprintln(w)
	if identical {
		fmt.Fprintf(w, "The outputs are identical in every run of every mode, token for token (%d tokens): verification is exact.\n\n", tokens)
	} else {
		fmt.Fprintf(w, "The outputs DIFFER between runs or modes. This is a bug; please report it.\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\ttok/s\tspeedup (median [95% CI])\tmean acceptance length\tacceptance by position")
	for _, r := range results {
		speed, acc, pos := "-", "-", "-"
		if sp := r.SpeedupSpread; sp != nil {
			speed = fmt.Sprintf("%.2fx [%.2f, %.2f]", sp.Median, sp.CILow, sp.CIHigh)
		}
		if r.MeanAcceptanceLength > 0 {
			acc = fmt.Sprintf("%.2f", r.MeanAcceptanceLength)
			var parts []string
			for _, a := range r.AcceptanceByPosition {
				parts = append(parts, fmt.Sprintf("%.2f", a))
			}
			pos = strings.Join(parts, " ")
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\n", r.Mode, r.TokensPerSecond.Median, speed, acc, pos)
	}
	tw.Flush()
	if notes := slowerThanPlain(results); len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
		fmt.Fprintln(w, "At go-tiny's size a round is mostly fixed work (on a GPU, the host building and")
		fmt.Fprintln(w, "submitting the draft's and the verification's kernels), which the longer steps of a")
		fmt.Fprintln(w, "larger target would hide; the README says more (\"Be warned what it shows today\").")
	}
	fmt.Fprintln(w, "\nMean acceptance length counts the tokens each verification commits (the bonus token")
	fmt.Fprintln(w, "included). Acceptance by position is the share of each position's verified drafts that")
	fmt.Fprintln(w, "were accepted (on the CPU a round verifies only the drafts the draft is sure enough of:")
	fmt.Fprintln(w, "[speculation] confidence_floor). `specula bench` measures more prompts")
	fmt.Fprintln(w, "(scripts/bench-go-tiny.sh).")
}

// slowerThanPlain says, for each drafting mode of results (results[0] is
// plain decoding) whose speedup's 95 % interval lies below 1, what a round
// cost against a plain step and what it committed: the why of a slowdown,
// which the table alone leaves to the reader.
func slowerThanPlain(results []modeResult) []string {
	if len(results) == 0 {
		return nil
	}
	step := results[0].RoundMS.Median
	var notes []string
	for _, r := range results[1:] {
		sp := r.SpeedupSpread
		if sp == nil || sp.CIHigh >= 1 || step <= 0 || r.RoundMS.Median <= 0 {
			continue
		}
		notes = append(notes, fmt.Sprintf("%s ran slower than plain decoding here: a round (drafting and verifying) took %.1f plain steps (%.2f against %.2f ms) and committed %.2f tokens.",
			r.Mode, r.RoundMS.Median/step, r.RoundMS.Median, step, r.MeanAcceptanceLength))
	}
	return notes
}

// indent prefixes every line of s with four spaces and ends it with a
// newline; control characters other than tabs show as U+FFFD, so that a
// model's odd output cannot drive the terminal.
func indent(s string) string {
	s = strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f) {
			return '\uFFFD'
		}
		return r
	}, s)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "    " + strings.Join(lines, "\n    ") + "\n"
}
