package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/specula-dev/specula/arch/all"
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/speculation"
)

// reference is the part of a fixture's reference.json the tests use.
type reference struct {
	PromptIDs []int32 `json:"prompt_ids"`
	GreedyIDs []int32 `json:"greedy_ids"`
}

func loadReference(t *testing.T, name string) reference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, name), "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// writeManifest writes a manifest for the qwen35-tiny target and, when
// draft is not "", the fixture draft of that name.
func writeManifest(t *testing.T, draft string, extra string) string {
	t.Helper()
	return writeManifestFor(t, "qwen35-tiny", draft, extra)
}

// writeManifestFor writes a manifest for the fixture target and, when draft
// is not "", the fixture draft of that name (a DFlash2 draft, dflash2-*,
// declares the selector).
func writeManifestFor(t *testing.T, target, draft, extra string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "schema = 1\nname = \"test\"\n[target]\npath = %q\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n", fixtures.Dir(t, target))
	switch {
	case strings.HasPrefix(draft, "dflash2"):
		fmt.Fprintf(&b, "[draft]\npath = %q\ncapabilities = [\"draft\", \"block-draft\", \"selector\"]\n", fixtures.Dir(t, draft))
	case draft != "":
		fmt.Fprintf(&b, "[draft]\npath = %q\ncapabilities = [\"draft\", \"block-draft\"]\n", fixtures.Dir(t, draft))
	}
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, manifest string) *engine.Engine {
	t.Helper()
	e, err := engine.Load(context.Background(), manifest, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The fixture target's greedy continuation through the whole engine (load,
// prefill, pipelined plain decode) equals transformers' greedy_ids.
func TestPlainGreedyMatchesFixture(t *testing.T) { plainGreedyMatchesFixture(t, "qwen35-tiny") }

func plainGreedyMatchesFixture(t *testing.T, target string) {
	ref := loadReference(t, target)
	e := load(t, writeManifestFor(t, target, "", ""))
	var streamed []int32
	resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: len(ref.GreedyIDs)}, func(tok engine.Token) error {
		streamed = append(streamed, tok.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.IDs, ref.GreedyIDs) || !slices.Equal(streamed, resp.IDs) {
		t.Fatalf("ids %v (streamed %v), want %v", resp.IDs, streamed, ref.GreedyIDs)
	}
	if resp.DoneReason != "length" || resp.PromptTokens != len(ref.PromptIDs) {
		t.Fatalf("done %q, prompt tokens %d", resp.DoneReason, resp.PromptTokens)
	}
}

// Speculative greedy output equals the plain greedy output for both drafts
// and many prompts (the fixture drafts are random, so most drafts are
// rejected: rollback runs every round).
func TestSpeculativeGreedyEqualsPlain(t *testing.T) {
	speculativeGreedyEqualsPlain(t, "qwen35-tiny", "dflash-tiny", "dflash2-tiny")
}

// speculativeGreedyEqualsPlain checks speculative greedy output against
// plain greedy output of the target fixture with each draft fixture, over
// 20 prompts and budgets, and returns the drafts' totals.
func speculativeGreedyEqualsPlain(t *testing.T, target string, drafts ...string) map[string]speculation.Stats {
	ref := loadReference(t, target)
	plain := load(t, writeManifestFor(t, target, "", ""))
	totals := map[string]speculation.Stats{}
	for _, draft := range drafts {
		t.Run(draft, func(t *testing.T) {
			spec := load(t, writeManifestFor(t, target, draft, "[speculation]\nmax_depth = 7\n"))
			for i := range 20 {
				prompt := ref.PromptIDs[i%4 : 4+i]
				budget := 4 + (i*7)%29
				want, err := plain.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: budget}, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := spec.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: budget}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.IDs, want.IDs) {
					t.Fatalf("prompt %d: speculative %v, plain %v", i, got.IDs, want.IDs)
				}
			}
			st := spec.Totals()
			if st.DraftRounds == 0 {
				t.Fatalf("no drafting round ran over 20 prompts: %+v", st)
			}
			totals[draft] = st
		})
	}
	return totals
}

// An id in the stop list ends generation without being emitted.
func TestStopIDs(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	e := load(t, writeManifest(t, "dflash-tiny", ""))
	stop := ref.GreedyIDs[5]
	resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 32, StopIDs: []int32{stop}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.IDs, ref.GreedyIDs[:5]) || resp.DoneReason != "stop" {
		t.Fatalf("ids %v reason %q, want %v and stop", resp.IDs, resp.DoneReason, ref.GreedyIDs[:5])
	}
}

// Seeded sampling is reproducible and, with a draft, still a valid run.
func TestSeededSamplingIsReproducible(t *testing.T) {
	seededSamplingIsReproducible(t, "qwen35-tiny", "dflash-tiny")
}

func seededSamplingIsReproducible(t *testing.T, target, draft string) {
	ref := loadReference(t, target)
	e := load(t, writeManifestFor(t, target, draft, "[sampling]\ntemperature = 0.9\ntop_p = 0.95\n"))
	seed := uint64(7)
	run := func() []int32 {
		resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 16, Seed: &seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.IDs
	}
	a, b := run(), run()
	if !slices.Equal(a, b) || len(a) != 16 {
		t.Fatalf("same seed gave %v and %v", a, b)
	}
}

// Cancelling mid-request returns the partial output (a prefix of the full
// one) and leaves the engine ready for the next request.
func TestCancellationMidRequest(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	e := load(t, writeManifest(t, "dflash-tiny", ""))
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	resp, err := e.Generate(ctx, engine.Request{IDs: ref.PromptIDs, MaxTokens: 32}, func(engine.Token) error {
		if n++; n == 6 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if len(resp.IDs) < 6 || !slices.Equal(resp.IDs, ref.GreedyIDs[:len(resp.IDs)]) {
		t.Fatalf("partial output %v is not a prefix of %v", resp.IDs, ref.GreedyIDs)
	}
	again, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 8}, nil)
	if err != nil || !slices.Equal(again.IDs, ref.GreedyIDs[:8]) {
		t.Fatalf("after a cancelled request: %v, %v", again.IDs, err)
	}
}

func TestRequestErrors(t *testing.T) {
	e := load(t, writeManifest(t, "", ""))
	if _, err := e.Generate(context.Background(), engine.Request{IDs: []int32{1, 512}}, nil); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("token 512 of a 512-token vocabulary: %v", err)
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: "hello"}, nil); !errors.Is(err, engine.ErrNoTokenizer) {
		t.Fatalf("text prompt without a tokenizer: %v", err)
	}
	_, err := e.Generate(context.Background(), engine.Request{IDs: []int32{1, 2}, StopStrings: []string{"x"}}, nil)
	if pe := (*engine.PromptError)(nil); !errors.As(err, &pe) || !strings.Contains(err.Error(), `stop strings ["x"] need the target's tokenizer.json`) {
		t.Fatalf("a stop string without a tokenizer (it could never match): %v", err)
	}
}

// weights = false on a draft that has weights: the engine reads nothing and
// the architecture reports every tensor it misses, instead of running with
// uninitialised weights.
func TestWeightlessBuiltInDraftReportsItsMissingTensors(t *testing.T) {
	_, err := engine.Load(context.Background(), writeManifest(t, "dflash-tiny", "weights = false\n"), engine.Options{})
	if err == nil || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "loading draft") {
		t.Fatalf("Load = %v; want the draft's missing-tensor error", err)
	}
	t.Log(err)
}

// Sampling settings that leave one candidate (top-k 1, min-p 1, a tiny
// top-p, a temperature so small that x/T overflows float32) are valid, and
// then speculative and plain decoding both give the target's greedy tokens
// (transformers' greedy_ids): the target distribution is one-hot, so every
// draft but the greedy token is rejected and the residual is the greedy
// token. top-p 1 is top-p off: the same seed gives the same tokens.
func TestDegenerateSamplingEqualsGreedy(t *testing.T) {
	degenerateSamplingEqualsGreedy(t, "qwen35-tiny", "dflash-tiny", "dflash2-tiny")
}

func degenerateSamplingEqualsGreedy(t *testing.T, target string, drafts ...string) {
	ref := loadReference(t, target)
	f := func(x float32) *float32 { return &x }
	k1 := 1
	seed := uint64(3)
	cases := []struct {
		name string
		req  engine.Request
	}{
		{"top-k 1", engine.Request{Temperature: f(0.8), TopK: &k1}},
		{"min-p 1", engine.Request{Temperature: f(1.5), MinP: f(1)}},
		{"top-p 1e-6", engine.Request{Temperature: f(0.7), TopP: f(1e-6)}},
		{"temperature 1e-30", engine.Request{Temperature: f(1e-30)}},
		{"temperature 1e-45", engine.Request{Temperature: f(1e-45)}},
		{"temperature 1e-45 with top-k 3", engine.Request{Temperature: f(1e-45), TopK: &[]int{3}[0]}},
	}
	engines := map[string]*engine.Engine{"plain": load(t, writeManifestFor(t, target, "", ""))}
	for _, draft := range drafts {
		engines[draft] = load(t, writeManifestFor(t, target, draft, "[speculation]\nmax_depth = 7\n"))
	}
	for _, c := range cases {
		for name, e := range engines {
			for _, seeded := range []bool{false, true} {
				req := c.req
				req.IDs, req.MaxTokens = ref.PromptIDs, len(ref.GreedyIDs)
				if seeded {
					req.Seed = &seed
				}
				resp, err := e.Generate(context.Background(), req, nil)
				if err != nil {
					t.Fatalf("%s, %s: %v", c.name, name, err)
				}
				if !slices.Equal(resp.IDs, ref.GreedyIDs) {
					t.Errorf("%s, %s (seeded %v): %v, want the greedy %v", c.name, name, seeded, resp.IDs, ref.GreedyIDs)
				}
			}
		}
	}
	for name, e := range engines {
		var got [2][]int32
		for i, topP := range []*float32{nil, f(1)} {
			resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 12, Temperature: f(1), TopP: topP, Seed: &seed}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = resp.IDs
		}
		if !slices.Equal(got[0], got[1]) {
			t.Errorf("%s: top-p 1 gave %v, no top-p %v", name, got[1], got[0])
		}
	}
}

// A target whose weights are NaN stops the request at the first step with
// ErrNonFiniteLogits, before any token is emitted, in plain and speculative
// decoding (it used to emit token 0 forever, every draft "accepted").
func TestNonFiniteLogitsStopTheRequest(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	dir := fixtures.NaNCopy(t, "qwen35-tiny")
	for _, draft := range []string{"", "dflash-tiny", "dflash2-tiny"} {
		t.Run("draft "+draft, func(t *testing.T) {
			m := writeManifest(t, draft, "")
			text, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			text = []byte(strings.Replace(string(text), fmt.Sprintf("%q", fixtures.Dir(t, "qwen35-tiny")), fmt.Sprintf("%q", dir), 1))
			if err := os.WriteFile(m, text, 0o644); err != nil {
				t.Fatal(err)
			}
			e := load(t, m)
			for _, noDraft := range []bool{false, true} {
				resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 8, NoDraft: noDraft}, func(engine.Token) error {
					// Not t.Fatal: this runs on the MLX worker.
					return errors.New("a token was emitted")
				})
				if !errors.Is(err, speculation.ErrNonFiniteLogits) || len(resp.IDs) != 0 {
					t.Fatalf("no-draft %v: ids %v, err %v; want ErrNonFiniteLogits and nothing emitted", noDraft, resp.IDs, err)
				}
			}
		})
	}
}

// truncatedCopy copies the fixture checkpoint name into a fresh folder with
// its model.safetensors cut in half (an interrupted download).
func truncatedCopy(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, name), f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "model.safetensors" {
			b = b[:len(b)/2]
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNoDraft: a draft that cannot load fails Load with a *DraftError, and
// Options.NoDraft loads the target alone without touching the draft; a
// broken target is not blamed on the draft.
func TestNoDraft(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	target := fmt.Sprintf("schema = 1\n[target]\npath = %q\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n", fixtures.Dir(t, "qwen35-tiny"))
	write := func(body string) string {
		path := filepath.Join(t.TempDir(), "m.toml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct{ name, manifest string }{
		{"truncated draft", write(target + fmt.Sprintf("[draft]\npath = %q\ncapabilities = [\"draft\", \"block-draft\"]\n", truncatedCopy(t, "dflash-tiny")))},
		{"missing draft folder", write(target + fmt.Sprintf("[draft]\npath = %q\ncapabilities = [\"draft\", \"block-draft\"]\n", filepath.Join(t.TempDir(), "absent")))},
		{"draft weights missing at load", writeManifest(t, "dflash-tiny", "weights = false\n")},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := engine.Load(context.Background(), c.manifest, engine.Options{})
			var de *engine.DraftError
			if !errors.As(err, &de) {
				t.Fatalf("Load = %v (%T); want a *engine.DraftError", err, err)
			}
			e, err := engine.Load(context.Background(), c.manifest, engine.Options{NoDraft: true})
			if err != nil {
				t.Fatalf("Load with NoDraft: %v", err)
			}
			if e.HasDraft() {
				t.Fatal("NoDraft loaded a draft")
			}
			resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: len(ref.GreedyIDs)}, nil)
			if err != nil || !slices.Equal(resp.IDs, ref.GreedyIDs) {
				t.Fatalf("greedy %v (%v); want the reference %v", resp.IDs, err, ref.GreedyIDs)
			}
		})
	}
	t.Run("truncated target", func(t *testing.T) {
		m := write(fmt.Sprintf("schema = 1\n[target]\npath = %q\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n[draft]\npath = %q\ncapabilities = [\"draft\", \"block-draft\"]\n",
			truncatedCopy(t, "qwen35-tiny"), fixtures.Dir(t, "dflash-tiny")))
		_, err := engine.Load(context.Background(), m, engine.Options{})
		var de *engine.DraftError
		if err == nil || errors.As(err, &de) {
			t.Fatalf("Load = %v; want an error not blamed on the draft", err)
		}
	})
}

// confidence_floor reaches the speculation core: on the fixture pair a high
// floor verifies fewer drafts than none, the output stays plain decoding's,
// and an unset floor drafts exactly as the device's default does (0.1 on
// the CPU, 0 on a GPU).
func TestConfidenceFloorFromManifest(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	plain := load(t, writeManifest(t, "", ""))
	drafted := map[string]int{}
	for _, floor := range []string{"0", "0.99", "", fmt.Sprint(manifests.DefaultConfidenceFloor)} {
		extra := ""
		if floor != "" {
			extra = "[speculation]\nconfidence_floor = " + floor + "\n"
		}
		spec := load(t, writeManifest(t, "dflash2-tiny", extra))
		for i := range 6 {
			prompt := ref.PromptIDs[i%4 : 4+i]
			want, err := plain.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 24}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := spec.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 24}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.IDs, want.IDs) {
				t.Fatalf("floor %q, prompt %d: speculative %v, plain %v", floor, i, got.IDs, want.IDs)
			}
		}
		drafted[floor] = spec.Totals().Drafted
	}
	if drafted["0.99"] >= drafted["0"] {
		t.Fatalf("%d drafts verified with a floor of 0.99, %d with none: the floor was not applied", drafted["0.99"], drafted["0"])
	}
	gpu, err := mlx.Call(context.Background(), func() (bool, error) { return mlx.CurrentDevice() == mlx.GPU, nil })
	if err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprint(manifests.DefaultConfidenceFloor)
	if gpu {
		def = "0" // a GPU verifies every draft unless told otherwise
	}
	if drafted[""] != drafted[def] {
		t.Fatalf("unset floor verified %d drafts, the device's default (%s) %d", drafted[""], def, drafted[def])
	}
	t.Logf("drafts verified: %v", drafted)
}

// A target folder without tokenizer.json still ends a token-id prompt at the
// model's EOS ids (generation_config.json's, else config.json's), as
// transformers' generate does; before, without a tokenizer no EOS was known
// and generation ran to the budget.
func TestEOSWithoutTokenizer(t *testing.T) {
	ref := loadReference(t, "qwen35-tiny")
	eos := ref.GreedyIDs[5]
	for name, tc := range map[string]struct {
		files     map[string]string
		configEOS int32 // config.json's eos_token_id
	}{
		// config.json's id is not generated: the generation config decides.
		"generation_config.json": {map[string]string{"generation_config.json": fmt.Sprintf(`{"eos_token_id": [%d, 1]}`, eos)}, 1},
		"config.json":            {map[string]string{}, eos},
	} {
		files := tc.files
		t.Run(name, func(t *testing.T) {
			dir := fixtures.WithConfig(t, "qwen35-tiny", "eos_token_id", tc.configEOS)
			for f, content := range files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			manifest := filepath.Join(dir, "m.toml")
			toml := fmt.Sprintf("schema = 1\n[target]\npath = %q\ncapabilities = [\"model\"]\ndtype = \"float32\"\n", dir)
			if err := os.WriteFile(manifest, []byte(toml), 0o644); err != nil {
				t.Fatal(err)
			}
			e := load(t, manifest)
			resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 32}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(resp.IDs, ref.GreedyIDs[:5]) || resp.DoneReason != "stop" {
				t.Fatalf("ids %v reason %q, want %v and stop", resp.IDs, resp.DoneReason, ref.GreedyIDs[:5])
			}
		})
	}
}
