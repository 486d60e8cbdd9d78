package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/synth"
	"github.com/specula-dev/specula/speculation"
	"github.com/specula-dev/specula/tokenizer"
)

func init() {
	register(&command{name: "demo", summary: "run speculative vs plain generation on an embedded random model pair", run: runDemo})
}

// The demo pair: a small Qwen3.5 target (3 gated delta-net layers and one
// gated attention layer) and a DFlash2 draft with its candidate selector,
// sized so the demo runs in seconds on a laptop CPU in float32.
const (
	demoVersion = "demo-v1" // bump when the recipe changes: a new cache folder
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
	dir := fs.String("dir", "", "where to build the demo pair (default: the user cache folder)")
	maxTokens := fs.Int("max-tokens", 64, "tokens to generate per run")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	if _, code, ok := parseFlags(e, fs, args); !ok {
		return code
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
