package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/specula-dev/specula/arch/all" // the target, and the built-in DFlash beside the plugin's
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/sdk/plugintest"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/speculation"
)

// The built binary, started by a real plugin host from an engine that
// resolves a manifest naming the plugin, drafts exactly as the in-process
// DFlash does: same tokens as plain decoding and as in process, and the same
// acceptance record (rounds, drafted and accepted per position), at the
// pinned depth 7 on the fixture pair. The built-in DFlashDraftModel is
// registered in this test binary too (arch/all): the manifest's plugin key
// selects the plugin's entry all the same.
func TestOutOfProcessEqualsInProcess(t *testing.T) {
	bin := plugintest.Build(t, ".")
	host := plugins.NewHost(plugins.Config{Dirs: []string{bin.Dir}, Logger: testLogger(t)})
	defer host.Close()

	ref := loadReference(t)
	plain := load(t, writeManifest(t, ""), engine.Options{Logger: testLogger(t)})
	inProcess := load(t, writeManifest(t, "\n"), engine.Options{Logger: testLogger(t)})
	outOfProcess := load(t, writeManifest(t, fmt.Sprintf("plugin = %q\nsha256 = %q\n", bin.Name, bin.SHA256)),
		engine.Options{LoadPlugin: host.LoadPlugin, Logger: testLogger(t)})

	if d := inProcess.Plan().Draft; d.Source != registry.SourceBuiltin {
		t.Fatalf("in-process draft from %q", d.Source)
	}
	if d := outOfProcess.Plan().Draft; d.Source != registry.PluginSource("dflash") || d.Architecture != "DFlashDraftModel" {
		t.Fatalf("plugin draft %s from %q", d.Architecture, d.Source)
	}
	pids := host.PIDs()
	if len(pids) != 1 || !plugintest.Alive(pids[0]) {
		t.Fatalf("plugin processes %v, want one running", pids)
	}

	const depth = 7
	for i := range 20 {
		prompt := ref.PromptIDs[i%4 : 4+i]
		budget := 8 + (i*7)%25
		want := generate(t, plain, prompt, budget, depth)
		in := generate(t, inProcess, prompt, budget, depth)
		out := generate(t, outOfProcess, prompt, budget, depth)
		if !slices.Equal(in.IDs, want.IDs) || !slices.Equal(out.IDs, want.IDs) {
			t.Fatalf("prompt %d: plain %v\nin process     %v\nout of process %v", i, want.IDs, in.IDs, out.IDs)
		}
		if a, b := acceptance(in.Stats), acceptance(out.Stats); a != b {
			t.Fatalf("prompt %d: acceptance differs\nin process     %s\nout of process %s", i, a, b)
		}
	}
	in, out := inProcess.Totals(), outOfProcess.Totals()
	if in.DraftRounds == 0 || in.MaxDraft != depth {
		t.Fatalf("no drafting at depth %d: %+v", depth, in)
	}
	if a, b := acceptance(in), acceptance(out); a != b {
		t.Fatalf("totals differ\nin process     %s\nout of process %s", a, b)
	}
	t.Logf("both: %s", acceptance(out))

	// Closing the engine ends the plugin process; later requests decode
	// plainly and say why.
	if err := outOfProcess.Close(); err != nil {
		t.Fatal(err)
	}
	plugintest.WaitGone(t, pids...)
	if err := outOfProcess.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	after := generate(t, outOfProcess, ref.PromptIDs, 16, depth)
	if want := generate(t, plain, ref.PromptIDs, 16, depth); !slices.Equal(after.IDs, want.IDs) {
		t.Fatalf("after Close: %v, plain %v", after.IDs, want.IDs)
	}
	if after.Stats.Fallback[plugins.FaultClosed] == 0 || after.Stats.DraftRounds != 0 {
		t.Fatalf("after Close: stats %+v, want plain rounds with reason %s", after.Stats, plugins.FaultClosed)
	}
	host.Close()
	if left := host.PIDs(); len(left) != 0 {
		t.Fatalf("host still tracks plugin processes %v", left)
	}
}

// acceptance formats what must agree between the two drafts: the rounds,
// drafted and accepted tokens, and per position how many rounds drafted and
// accepted it (so the distribution of accepted lengths over rounds), and
// the fallback reasons.
func acceptance(s speculation.Stats) string {
	var fb []string
	for _, k := range slices.Sorted(maps.Keys(s.Fallback)) {
		fb = append(fb, fmt.Sprintf("%s=%d", k, s.Fallback[k]))
	}
	return fmt.Sprintf("rounds %d, draft rounds %d, drafted %d, accepted %d, max %d, by position drafted %v accepted %v, fallbacks [%s]",
		s.Iterations, s.DraftRounds, s.Drafted, s.Accepted, s.MaxDraft, s.PositionDrafted, s.PositionAccepted, strings.Join(fb, " "))
}

func generate(t *testing.T, e *engine.Engine, prompt []int32, budget, depth int) *engine.Response {
	t.Helper()
	r, err := e.Generate(context.Background(), engine.Request{IDs: prompt, MaxTokens: budget, FixedDepth: depth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
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

type reference struct {
	PromptIDs []int32 `json:"prompt_ids"`
}

func loadReference(t testing.TB) reference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "qwen35-tiny"), "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// writeManifest writes a greedy manifest over the fixture target; draft ""
// has no draft, otherwise the fixture DFlash draft is added with draft's
// extra [draft] keys.
func writeManifest(t testing.TB, draft string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "schema = 1\nname = \"dflash-plugin\"\n[target]\npath = %q\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n",
		fixtures.Dir(t, "qwen35-tiny"))
	if draft != "" {
		fmt.Fprintf(&b, "[draft]\npath = %q\ncapabilities = [\"draft\", \"block-draft\"]\n%s", fixtures.Dir(t, "dflash-tiny"), strings.TrimLeft(draft, "\n"))
		// A plugin's proposals carry no confidences, so it verifies every
		// draft; the in-process draft is held to the same (on the CPU it
		// would otherwise cut its unsure drafts, docs/dflash.md).
		b.WriteString("[speculation]\nconfidence_floor = 0\n")
	}
	b.WriteString("[sampling]\ntemperature = 0.0\n")
	path := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testLogger files the host's and the plugin's records in the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
