package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/specula-dev/specula/internal/synth"
	"github.com/specula-dev/specula/tokenizer"
)

func init() {
	register(&command{name: "synth", summary: "write a random-weight checkpoint pair for benchmarks and bring-up", run: runSynth})
}

func runSynth(e *env, args []string) int {
	fs := newFlags(e, "synth", "--shape SIZE --out DIR [flags]")
	shape := fs.String("shape", "0.8B", "released Qwen3.5 `size` whose layer shapes to use: "+synth.Sizes+" (the last three are mixture-of-experts)")
	layers := fs.Int("layers", 0, "number of target layers (0: the release's)")
	vocab := fs.Int("vocab", 0, "vocabulary size (0: the release's 248320)")
	dtype := fs.String("dtype", "bfloat16", "storage dtype: bfloat16 or float32")
	out := fs.String("out", "", "output `folder` (new, or empty): target/, draft/ (with --draft) and manifest.toml are written there")
	draft := fs.String("draft", "", "also write a random draft: dflash or dflash2")
	seed := fs.Uint64("seed", 1, "random seed")
	withTokenizer := fs.Bool("tokenizer", false, "also write a small byte-level BPE tokenizer (needs --vocab of at least 259)")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := noArguments(e, fs, rest); !ok {
		return code
	}
	// Every flag is checked before anything is written, and everything is
	// written into a temporary folder renamed to --out at the end: a
	// refused or failed synth leaves nothing behind.
	usage := func(format string, args ...any) int {
		fmt.Fprintf(e.stderr, "specula synth: "+format+"\n", args...)
		return exitUsage
	}
	if *out == "" {
		// A missing flag, unlike a bad value, also points to --help.
		usage("--out is required")
		fs.Usage()
		return exitUsage
	}
	if *layers < 0 {
		return usage("--layers %d: want >= 1, or 0 for the release's", *layers)
	}
	if *vocab < 0 || *vocab == 1 {
		return usage("--vocab %d: want >= 2, or 0 for the release's 248320", *vocab)
	}
	q, err := synth.Qwen35Shape(*shape, *layers)
	if err != nil {
		return usage("--shape: %v", err)
	}
	switch synth.DType(*dtype) {
	case synth.BFloat16, synth.Float32:
		q.DType = synth.DType(*dtype)
	default:
		return usage("--dtype %q: want bfloat16 or float32", *dtype)
	}
	if *vocab > 0 {
		q.Vocab = *vocab
	}
	q.Seed = *seed
	var d *synth.DFlash
	caps := `["draft", "block-draft"]`
	switch *draft {
	case "":
	case "dflash", "dflash2":
		// A draft's MLP is dense; for an MoE target it is 3·H wide, as
		// Qwen3-style drafts of that width are.
		inter := q.Intermediate
		if q.Experts > 0 {
			inter = 3 * q.Hidden
		}
		d = &synth.DFlash{Hidden: q.Hidden, Vocab: q.Vocab, Layers: 5, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: inter,
			BlockSize: 16, MaskToken: q.Vocab - 1, TargetLayers: q.Layers, RopeTheta: q.RopeTheta, DType: q.DType, Seed: *seed + 1}
		for i := range 5 {
			d.TargetLayerIDs = append(d.TargetLayerIDs, min(q.Layers-1, 1+i*max(1, (q.Layers-2)/5)))
		}
		d.TargetLayerIDs = uniqueAscending(d.TargetLayerIDs)
		if *shape == "go-tiny" {
			// models/go-tiny's drafts: one layer with the target's
			// attention shape, reading the middle layer (train/'s rule
			// for one draft layer), blocks of 8.
			d.Layers, d.Heads, d.KVHeads, d.HeadDim = 1, q.Heads, q.KVHeads, q.HeadDim
			d.BlockSize, d.TargetLayerIDs = 8, []int{q.Layers / 2}
		}
		if *draft == "dflash2" {
			d.DFlash2, d.BlockSize, d.SlidingWindow = true, 8, 2048
			d.ConvKernel, d.ConvGroup, d.SelectorRank, d.SelectorTopK = 2, 16, 256, 16
			if *shape == "go-tiny" {
				d.SelectorRank = 64
			}
			caps = `["draft", "block-draft", "selector"]`
		}
	default:
		return usage("--draft %q: want dflash or dflash2", *draft)
	}
	var tok *tokenizer.SmallBPE
	if *withTokenizer {
		if tok, err = tokenizer.BuildSmallBPE("", tokenizer.SmallBPEOptions{VocabSize: q.Vocab}); err != nil {
			return usage("--tokenizer: %v", err)
		}
	}
	if entries, err := os.ReadDir(*out); err == nil && len(entries) > 0 {
		return usage("--out %s already exists and is not empty: synth writes a new folder; choose another or remove it", *out)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(e, "synth", err)
	}

	parent := filepath.Dir(filepath.Clean(*out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fail(e, "synth", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(filepath.Clean(*out))+".synth-")
	if err != nil {
		return fail(e, "synth", err)
	}
	defer removeOnForcedExit(tmp)()
	// MkdirTemp makes the folder private (0700); renamed to --out it gets
	// the mode os.MkdirAll(out, 0o755) would give, so that the other users
	// of a shared machine can read the pair.
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return fail(e, "synth", err)
	}
	if err := writeSynth(e, tmp, *shape, q, tok, d, *draft, caps); err != nil {
		os.RemoveAll(tmp)
		return fail(e, "synth", err)
	}
	// An empty --out folder is replaced; a non-empty one was refused above.
	if err := os.Remove(*out); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.RemoveAll(tmp)
		return fail(e, "synth", err)
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.RemoveAll(tmp)
		return fail(e, "synth", err)
	}
	fmt.Fprintln(e.stdout, filepath.Join(*out, "manifest.toml"))
	return exitOK
}

// writeSynth writes the checked synth outputs into dir: target/ (with the
// tokenizer when tok is not nil), draft/ when d is not nil, manifest.toml.
func writeSynth(e *env, dir, shape string, q synth.Qwen35, tok *tokenizer.SmallBPE, d *synth.DFlash, draftName, caps string) error {
	target := filepath.Join(dir, "target")
	if tok != nil {
		if err := tok.WriteDir(target); err != nil {
			return err
		}
	}
	kind := "Qwen3.5"
	if q.Experts > 0 {
		kind = fmt.Sprintf("Qwen3.5 MoE (%d experts, top %d)", q.Experts, q.TopK)
	}
	fmt.Fprintf(e.stderr, "writing a random %s (%s shapes, %d layers, vocab %d, %s, %.2fB parameters, %.2fB active per token)\n",
		kind, shape, q.Layers, q.Vocab, q.DType, float64(q.Params())/1e9, float64(q.ActiveParams())/1e9)
	bar := newProgressBar(e.stderr).saying("writing", "wrote")
	q.Progress = func(written, total int64) { bar.update("target", written, total) }
	if err := q.WriteContext(e.ctx, target); err != nil {
		bar.abandon()
		return err
	}
	bar.done()
	// float32 weights are asked for to compute in float32 (an oracle sweep,
	// a parity check): "auto" would compute in bfloat16 on a GPU, and
	// bfloat16 rounds a verification of several rows and a one-row step
	// differently. bfloat16 weights keep "auto" (float32 on the CPU).
	computeDType := "auto"
	if q.DType == synth.Float32 {
		computeDType = "float32"
	}
	manifest := fmt.Sprintf("# Random weights written by specula synth.\nschema = 1\nname = \"synth-%s\"\n\n[target]\npath = \"target\"\ncapabilities = [\"model\", \"draft-target\"]\ndtype = %q\n", shape, computeDType)
	if d != nil {
		fmt.Fprintf(e.stderr, "writing a random %s draft (taps %v)\n", draftName, d.TargetLayerIDs)
		d.Progress = func(written, total int64) { bar.update("draft", written, total) }
		if err := d.WriteContext(e.ctx, filepath.Join(dir, "draft")); err != nil {
			bar.abandon()
			return err
		}
		bar.done()
		manifest += fmt.Sprintf("\n[draft]\npath = \"draft\"\ncapabilities = %s\n", caps)
	}
	return os.WriteFile(filepath.Join(dir, "manifest.toml"), []byte(manifest), 0o644)
}

func uniqueAscending(v []int) []int {
	var out []int
	for _, x := range v {
		if len(out) == 0 || x > out[len(out)-1] {
			out = append(out, x)
		}
	}
	return out
}
