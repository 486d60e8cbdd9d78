package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/specula-dev/specula/internal/synth"
	gotiny "github.com/specula-dev/specula/models/go-tiny"
	"github.com/specula-dev/specula/tokenizer"
)

// Two demos started together on a fresh cache build it once and both
// succeed; a damaged cache is built again, with one line saying so.
func TestE2EDemoCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache", "demo")
	var wg sync.WaitGroup
	results := make([]struct {
		stderr string
		code   int
	}, 2)
	for i := range results {
		wg.Go(func() {
			cmd := exec.Command(specula(t), "demo", "--random", "--json", "--dir", dir, "--max-tokens", "4")
			cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
			_, results[i].stderr, results[i].code = runCommand(t, cmd)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("concurrent demo %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	// Damage the cached draft: the demo rebuilds the cache and runs.
	if err := os.WriteFile(filepath.Join(dir, "draft", "model.safetensors"), []byte("not safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := execSpecula(t, "demo", "--random", "--json", "--dir", dir, "--max-tokens", "4")
	if code != 0 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "specula demo: the cached demo pair in "+dir+" does not load (") ||
		!strings.HasSuffix(stderr, "); building it again\n") {
		t.Fatalf("demo over a damaged cache: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = execSpecula(t, "demo", "--random", "--json", "--dir", dir, "--max-tokens", "4")
	if code != 0 || stderr != "" {
		t.Fatalf("demo after the rebuild: exit %d, stderr %q", code, stderr)
	}
}

// goTinyStandIn writes a folder with go-tiny's layout — a Qwen3.5 target
// (3 delta-net layers per attention layer) with a byte-level BPE
// tokenizer.json ending in <|endoftext|> and <|mask|>, and DFlash and
// DFlash2 drafts of block size 8 in dflash/ and dflash2/ — with random
// weights at small shapes, so the demo's machinery is tested without the
// trained family.
func goTinyStandIn(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "go-tiny")
	const vocab, hidden = 1024, 128
	tok, err := tokenizer.BuildSmallBPE("", tokenizer.SmallBPEOptions{VocabSize: vocab, SpecialTokens: []string{"<|endoftext|>", "<|mask|>"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	target := synth.Qwen35{
		Vocab: vocab, Hidden: hidden, Intermediate: 256, Layers: 4, Heads: 2, KVHeads: 1, HeadDim: 64,
		LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 32, LinearValueDim: 32, ConvKernel: 4,
		FullAttentionInterval: 4, RopeTheta: 1e7, PartialRotary: 0.25, TieEmbeddings: true, DType: synth.Float32, Seed: 14,
	}
	if err := target.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		sub string
		v2  bool
	}{{gotiny.DFlashDir, false}, {gotiny.DFlash2Dir, true}} {
		draft := synth.DFlash{
			Hidden: hidden, Vocab: vocab, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 64, Intermediate: 256,
			BlockSize: 8, MaskToken: vocab - 1, TargetLayerIDs: []int{0, 2}, TargetLayers: 4, RopeTheta: 1e7,
			DType: synth.Float32, Seed: 15,
		}
		if d.v2 {
			draft.DFlash2, draft.SlidingWindow, draft.ConvKernel, draft.ConvGroup, draft.SelectorRank, draft.SelectorTopK = true, 256, 2, 16, 8, 8
		}
		if err := draft.Write(filepath.Join(dir, d.sub)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goTinyDemoJSON is what `specula demo --json` prints for the family.
type goTinyDemoJSON struct {
	Family    string  `json:"family"`
	Prompt    string  `json:"prompt"`
	MaxTokens int     `json:"max_tokens"`
	Repeats   int     `json:"repeats"`
	Identical bool    `json:"identical"`
	IDs       []int32 `json:"ids"`
	Text      string  `json:"text"`
	Plain     demoMode
	DFlash    demoMode `json:"dflash"`
	DFlash2   demoMode `json:"dflash2"`
}

type demoMode struct {
	Mode            string `json:"mode"`
	Runs            int    `json:"runs"`
	TokensPerSecond struct {
		Median float64 `json:"median"`
	} `json:"tokens_per_second"`
	Speedup *struct {
		Pairs  int     `json:"pairs"`
		Median float64 `json:"median"`
	} `json:"speedup"`
	MeanAcceptanceLength float64   `json:"mean_acceptance_length"`
	AcceptanceByPosition []float64 `json:"acceptance_by_position"`
}

// demoGoTinyJSON runs `specula demo --json` with args, SPECULA_GO_TINY unset,
// from the package folder (inside the checkout), and decodes the result.
func demoGoTinyJSON(t *testing.T, args ...string) *goTinyDemoJSON {
	t.Helper()
	cmd := exec.Command(specula(t), append([]string{"demo", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), "SPECULA_LOG=warn", gotiny.EnvDir+"=")
	stdout, stderr, code := runCommand(t, cmd)
	if code != 0 {
		t.Fatalf("demo %v: exit %d\n%s\n%s", args, code, stderr, stdout)
	}
	var out goTinyDemoJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("demo --json printed %q: %v", stdout, err)
	}
	return &out
}

// The default demo on a stand-in family: every mode's output identical,
// runs interleaved and paired, both drafts drafting.
func TestE2EDemoGoTinyStandIn(t *testing.T) {
	dir := goTinyStandIn(t)
	out := demoGoTinyJSON(t, "--dir", dir, "--max-tokens", "12", "--repeats", "2")
	if out.Family != dir || !out.Identical || out.Repeats != 2 || out.MaxTokens != 12 || len(out.IDs) == 0 || len(out.IDs) > 12 ||
		!strings.HasPrefix(out.Prompt, "// countLines") {
		t.Fatalf("demo result %+v", out)
	}
	for _, m := range []demoMode{out.Plain, out.DFlash, out.DFlash2} {
		if m.Runs != 2 || m.TokensPerSecond.Median <= 0 {
			t.Errorf("mode %+v: want 2 timed runs", m)
		}
	}
	for _, m := range []demoMode{out.DFlash, out.DFlash2} {
		if m.Speedup == nil || m.Speedup.Pairs != 2 || m.MeanAcceptanceLength < 1 || len(m.AcceptanceByPosition) == 0 {
			t.Errorf("mode %s %+v: want 2 paired runs that drafted", m.Mode, m)
		}
	}
	if out.Plain.Speedup != nil || out.DFlash.Mode != "DFlash" || out.DFlash2.Mode != "DFlash2" {
		t.Errorf("modes %q %q %q", out.Plain.Mode, out.DFlash.Mode, out.DFlash2.Mode)
	}
	// The table says so in words.
	stdout, stderr, code := execSpecula(t, "demo", "--dir", dir, "--max-tokens", "8", "--repeats", "1")
	if code != 0 || !strings.Contains(stdout, "The outputs are identical in every run of every mode") ||
		!strings.Contains(stdout, "DFlash2") || !strings.Contains(stdout, "func countLines") {
		t.Fatalf("demo: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// Without the family the demo says where it looked and how to run the
// random one, in one line.
func TestE2EDemoWithoutFamily(t *testing.T) {
	empty := t.TempDir()
	_, stderr, code := execSpecula(t, "demo", "--dir", empty)
	if code != exitFailure || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, empty+" lacks config.json, tokenizer.json") ||
		!strings.Contains(stderr, "specula demo --random") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// The default demo on the trained family in models/go-tiny, found as a user
// in the checkout finds it: identical outputs and drafts that are accepted.
func TestE2EDemoGoTiny(t *testing.T) {
	family, err := filepath.Abs(filepath.Join("..", "..", "models", "go-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(family, "dflash2", "config.json")); err != nil {
		t.Skip("models/go-tiny is absent (train/ writes it); the stand-in test covers the demo's machinery")
	}
	out := demoGoTinyJSON(t, "--max-tokens", "64", "--repeats", "1")
	if out.Family != family || !out.Identical || len(out.IDs) == 0 {
		t.Fatalf("demo result %+v", out)
	}
	// Trained drafts commit more than one token per verification on Go, where
	// a random draft commits 1.0-1.05. DFlash2 runs at a fixed depth and its
	// length on this prompt is deterministic (2.46 with the shipped drafts).
	// DFlash's adaptive depth follows measured round costs, so in the demo its
	// length moves with the machine's load (1.47-1.77 seen on the 2-core dev
	// machine, 1.00 when other tests took the cores and it stopped drafting):
	// its draft is judged pinned at depth 7 instead, where greedy decoding
	// makes the length deterministic (2.00 with the shipped draft).
	if out.DFlash2.MeanAcceptanceLength < 2.0 {
		t.Errorf("DFlash2: mean acceptance length %.2f on the demo prompt; the trained draft should reach 2.00", out.DFlash2.MeanAcceptanceLength)
	}
	pinned := pinnedAcceptance(t, filepath.Join("..", "..", "manifests", "go-tiny-dflash.toml"), goTinyPrompt, 7)
	if pinned < 1.25 {
		t.Errorf("DFlash pinned at depth 7: mean acceptance length %.2f on the demo prompt; the trained draft should reach 1.25", pinned)
	}
	t.Logf("plain %.1f tok/s; DFlash %.2f accepted (adaptive; %.2f pinned at 7), %.2fx; DFlash2 %.2f accepted, %.2fx", out.Plain.TokensPerSecond.Median,
		out.DFlash.MeanAcceptanceLength, pinned, out.DFlash.Speedup.Median, out.DFlash2.MeanAcceptanceLength, out.DFlash2.Speedup.Median)
}

// pinnedAcceptance runs `specula bench --sweep` on one prompt with the
// manifest's draft pinned at depth and returns the mean acceptance length
// there (greedy, so it does not depend on the machine's speed).
func pinnedAcceptance(t *testing.T, manifest, prompt string, depth int) float64 {
	t.Helper()
	line, err := json.Marshal(prompt)
	if err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(prompts, append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := execSpecula(t, "bench", "-m", manifest, "--prompts", prompts, "--max-tokens", "64",
		"--repeats", "1", "--sweep", "--depths", strconv.Itoa(depth), "--json", "--quiet")
	if code != 0 {
		t.Fatalf("bench --sweep: exit %d\n%s", code, stderr)
	}
	var out struct {
		Sweep []struct {
			Depth                int     `json:"depth"`
			MeanAcceptanceLength float64 `json:"mean_acceptance_length"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Sweep) != 1 || out.Sweep[0].Depth != depth {
		t.Fatalf("bench --sweep --json printed %q (%v)", stdout, err)
	}
	return out.Sweep[0].MeanAcceptanceLength
}
