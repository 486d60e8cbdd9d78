package main

import (
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
	shape := fs.String("shape", "0.8B", "released Qwen3.5 `size` whose layer shapes to use: 0.8B, 4B or 27B")
	layers := fs.Int("layers", 0, "number of target layers (0: the release's)")
	vocab := fs.Int("vocab", 0, "vocabulary size (0: the release's 248320)")
	dtype := fs.String("dtype", "bfloat16", "storage dtype: bfloat16 or float32")
	out := fs.String("out", "", "output `folder`: target/, draft/ (with --draft) and manifest.toml are written there")
	draft := fs.String("draft", "", "also write a random draft: dflash or dflash2")
	seed := fs.Uint64("seed", 1, "random seed")
	withTokenizer := fs.Bool("tokenizer", false, "also write a small byte-level BPE tokenizer (needs --vocab of at least 260)")
	if _, code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	if *out == "" {
		fmt.Fprintln(e.stderr, "specula synth: --out is required")
		return exitUsage
	}
	q, err := synth.Qwen35Shape(*shape, *layers)
	if err != nil {
		fmt.Fprintf(e.stderr, "specula synth: --shape: %v\n", err)
		return exitUsage
	}
	switch synth.DType(*dtype) {
	case synth.BFloat16, synth.Float32:
		q.DType = synth.DType(*dtype)
	default:
		fmt.Fprintf(e.stderr, "specula synth: --dtype %q: want bfloat16 or float32\n", *dtype)
		return exitUsage
	}
	if *vocab > 0 {
		q.Vocab = *vocab
	}
	q.Seed = *seed
	target := filepath.Join(*out, "target")
	if *withTokenizer {
		tok, err := tokenizer.BuildSmallBPE("", tokenizer.SmallBPEOptions{VocabSize: q.Vocab})
		if err != nil {
			return fail(e, "synth", err)
		}
		if err := tok.WriteDir(target); err != nil {
			return fail(e, "synth", err)
		}
	}
	fmt.Fprintf(e.stderr, "writing a random Qwen3.5 (%s shapes, %d layers, vocab %d, %s, %.2fB parameters) to %s\n", *shape, q.Layers, q.Vocab, q.DType, float64(q.Params())/1e9, target)
	if err := q.Write(target); err != nil {
		return fail(e, "synth", err)
	}
	manifest := fmt.Sprintf("# Random weights written by specula synth.\nschema = 1\nname = \"synth-%s\"\n\n[target]\npath = \"target\"\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"auto\"\n", *shape)
	if *draft != "" {
		d := synth.DFlash{Hidden: q.Hidden, Vocab: q.Vocab, Layers: 5, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: q.Intermediate,
			BlockSize: 16, MaskToken: q.Vocab - 1, TargetLayers: q.Layers, RopeTheta: q.RopeTheta, DType: q.DType, Seed: *seed + 1}
		for i := range 5 {
			d.TargetLayerIDs = append(d.TargetLayerIDs, min(q.Layers-1, 1+i*max(1, (q.Layers-2)/5)))
		}
		d.TargetLayerIDs = uniqueAscending(d.TargetLayerIDs)
		caps := `["draft", "block-draft"]`
		switch *draft {
		case "dflash":
		case "dflash2":
			d.DFlash2, d.BlockSize, d.SlidingWindow = true, 8, 2048
			d.ConvKernel, d.ConvGroup, d.SelectorRank, d.SelectorTopK = 2, 16, 256, 16
			caps = `["draft", "block-draft", "selector"]`
		default:
			fmt.Fprintf(e.stderr, "specula synth: --draft %q: want dflash or dflash2\n", *draft)
			return exitUsage
		}
		fmt.Fprintf(e.stderr, "writing a random %s draft (taps %v) to %s\n", *draft, d.TargetLayerIDs, filepath.Join(*out, "draft"))
		if err := d.Write(filepath.Join(*out, "draft")); err != nil {
			return fail(e, "synth", err)
		}
		manifest += fmt.Sprintf("\n[draft]\npath = \"draft\"\ncapabilities = %s\n", caps)
	}
	if err := os.WriteFile(filepath.Join(*out, "manifest.toml"), []byte(manifest), 0o644); err != nil {
		return fail(e, "synth", err)
	}
	fmt.Fprintln(e.stdout, filepath.Join(*out, "manifest.toml"))
	return exitOK
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
