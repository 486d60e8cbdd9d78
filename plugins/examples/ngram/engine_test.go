package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/specula-dev/specula/arch/all" // the fixture target
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/sdk/plugintest"
	"github.com/specula-dev/specula/registry"
)

// The built binary, started by a real plugin host from an engine whose
// manifest names it, drafts by prompt lookup on the fixture target: greedy
// output equals plain decoding token for token, whatever it proposes.
func TestThroughTheEngineEqualsPlain(t *testing.T) {
	bin := plugintest.Build(t, ".")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	host := plugins.NewHost(plugins.Config{Dirs: []string{bin.Dir}, Logger: log})
	defer host.Close()

	plain := load(t, writeManifest(t, ""), engine.Options{Logger: log})
	spec := load(t, writeManifest(t, fmt.Sprintf("plugin = %q\nsha256 = %q\n", bin.Name, bin.SHA256)), engine.Options{LoadPlugin: host.LoadPlugin, Logger: log})
	if d := spec.Plan().Draft; d.Source != registry.PluginSource("ngram") || d.Architecture != "NgramDraft" {
		t.Fatalf("draft %s from %q", d.Architecture, d.Source)
	}
	pids := host.PIDs()
	if len(pids) != 1 {
		t.Fatalf("plugin processes %v, want one", pids)
	}

	prompt := fixturePrompt(t)
	first, err := plain.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: 24}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Prompts that repeat themselves (and the target's own continuation)
	// give the lookup something to find.
	prompts := [][]int32{
		prompt,
		slices.Concat(prompt, first.IDs, prompt),
		slices.Concat(prompt, prompt, prompt),
		slices.Concat(first.IDs, first.IDs[:8]),
	}
	pinnedAccepted := 0
	for i, p := range prompts {
		for _, depth := range []int{0, 3} { // adaptive, and pinned
			req := engine.Request{IDs: p, MaxTokens: 40, FixedDepth: depth}
			want, err := plain.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := spec.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.IDs, want.IDs) {
				t.Fatalf("prompt %d, depth %d: through the plugin %v\nplain %v", i, depth, got.IDs, want.IDs)
			}
			if depth > 0 {
				pinnedAccepted += got.Stats.Accepted
			}
			for reason := range got.Stats.Fallback {
				if strings.HasPrefix(reason, "plugin-") {
					t.Fatalf("prompt %d: plugin fault %s: %v", i, reason, got.Stats.Fallback)
				}
			}
		}
	}
	st := spec.Totals()
	if st.DraftRounds == 0 || pinnedAccepted == 0 {
		// Greedy decoding and lookups are deterministic: at the pinned
		// depth the repeated prompts always get some token accepted.
		t.Fatalf("prompt lookup never drafted an accepted token at depth 3: %+v", st)
	}
	t.Logf("%d rounds, %d drafting, %d drafted, %d accepted", st.Iterations, st.DraftRounds, st.Drafted, st.Accepted)

	if err := spec.Close(); err != nil {
		t.Fatal(err)
	}
	host.Close()
	plugintest.WaitGone(t, pids...)
}

func load(t *testing.T, manifest string, opts engine.Options) *engine.Engine {
	t.Helper()
	e, err := engine.Load(context.Background(), manifest, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func fixturePrompt(t *testing.T) []int32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "qwen35-tiny"), "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		PromptIDs []int32 `json:"prompt_ids"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref.PromptIDs
}

// writeManifest writes a greedy manifest over the fixture target; with
// plugin keys, an ngram [draft] is added over a fresh draft folder.
func writeManifest(t *testing.T, plugin string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "schema = 1\nname = \"ngram\"\n[target]\npath = %q\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n",
		fixtures.Dir(t, "qwen35-tiny"))
	if plugin != "" {
		fmt.Fprintf(&b, "[draft]\npath = %q\narchitecture = \"NgramDraft\"\ncapabilities = [\"draft\", \"block-draft\"]\nweights = false\n%s", draftFolder(t), plugin)
	}
	b.WriteString("[sampling]\ntemperature = 0.0\n")
	path := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// draftFolder makes the ngram draft's checkpoint folder: config.json only
// (the manifest says weights = false).
func draftFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["NgramDraft"], "max_ngram": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
