package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// proxyDraft stands for the plugin host's proxy: a speculation.DrafterFactory
// that is also an engine.LoadPreparer, recording the calls it gets.
type proxyDraft struct {
	calls      []string
	targetDir  string
	declared   model.Capabilities
	prepareErr error
	drafter    *closingDrafter
}

func (p *proxyDraft) PrepareLoad(targetDir string, declared model.Capabilities) error {
	p.calls = append(p.calls, "PrepareLoad")
	p.targetDir, p.declared = targetDir, declared
	return p.prepareErr
}

func (p *proxyDraft) NewDrafter(model.DraftTarget, []cache.Cache) (speculation.Drafter, error) {
	p.calls = append(p.calls, "NewDrafter")
	p.drafter = &closingDrafter{}
	return p.drafter, nil
}

// closingDrafter declines every proposal and counts Close calls.
type closingDrafter struct{ closes int }

func (d *closingDrafter) Open(*sample.Sampler) speculation.DraftSession { return declining{} }
func (d *closingDrafter) Limit() int                                    { return 4 }
func (d *closingDrafter) Selector() bool                                { return false }
func (d *closingDrafter) Close() error {
	d.closes++
	return errors.New("plugin process exited with status 1")
}

type declining struct{}

func (declining) Committed(_, _ *mlx.Array, _ int)                {}
func (declining) Settle()                                         {}
func (declining) Propose(*mlx.Array, int) *speculation.Candidates { return nil }
func (declining) Close()                                          {}

// loadWithProxy loads a manifest whose draft is served by plugin "fake"
// (registered into the default registry by its LoadPlugin, as the plugin
// host does), the proxy being p.
func loadWithProxy(t *testing.T, p *proxyDraft) (*engine.Engine, error) {
	t.Helper()
	t.Cleanup(func() { registry.Default.RemovePlugin("fake") })
	load := func(_ context.Context, name, _ string, reg *registry.Registry) error {
		if _, err := reg.LookupPlugin(name, "FakeDraft"); err == nil {
			return nil
		}
		return reg.AddPlugin(name, []registry.PluginArch{{Name: "FakeDraft", Kind: registry.KindDraft,
			Capabilities: model.Capabilities{model.CapDraft, model.CapBlockDraft},
			New:          func(registry.Config) (any, error) { return p, nil }}})
	}
	m := writeManifest(t, "", "[draft]\npath = "+quote(fixtures.Dir(t, "dflash-tiny"))+
		"\narchitecture = \"FakeDraft\"\ncapabilities = [\"draft\", \"block-draft\"]\nplugin = \"fake\"\nsha256 = \""+strings.Repeat("ab", 32)+"\"\n")
	return engine.Load(context.Background(), m, engine.Options{LoadPlugin: load})
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// A plugin draft is prepared with the target folder and the declared
// capabilities before its drafter is built, and Engine.Close closes that
// drafter exactly once.
func TestPluginDraftPrepareAndClose(t *testing.T) {
	p := &proxyDraft{}
	e, err := loadWithProxy(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.calls, []string{"PrepareLoad", "NewDrafter"}) {
		t.Fatalf("calls %v; want PrepareLoad, then NewDrafter", p.calls)
	}
	if p.targetDir != e.Plan().Target.Dir || p.declared.String() != "draft, block-draft" {
		t.Fatalf("PrepareLoad(%q, [%s]); want the target folder %q and the declared capabilities", p.targetDir, p.declared, e.Plan().Target.Dir)
	}
	if !e.HasDraft() {
		t.Fatal("the plugin drafter was not installed")
	}
	ref := loadReference(t, "qwen35-tiny")
	resp, err := e.Generate(context.Background(), engine.Request{IDs: ref.PromptIDs, MaxTokens: 8}, nil)
	if err != nil || !slices.Equal(resp.IDs, ref.GreedyIDs[:8]) {
		t.Fatalf("Generate = %v, %v", resp, err)
	}
	first := e.Close()
	if first == nil || !strings.Contains(first.Error(), "exited with status 1") {
		t.Fatalf("Close = %v; want the drafter's error", first)
	}
	if again := e.Close(); again != first || p.drafter.closes != 1 {
		t.Fatalf("second Close = %v after %d drafter closes; want the first result, one close", again, p.drafter.closes)
	}
}

// A failing PrepareLoad fails Load, naming the draft and its plugin; no
// drafter is built.
func TestPluginDraftPrepareFails(t *testing.T) {
	p := &proxyDraft{prepareErr: errors.New("plugin fake: target checkpoint folder is not a folder")}
	_, err := loadWithProxy(t, p)
	if err == nil || !strings.Contains(err.Error(), "preparing draft FakeDraft (plugin fake): plugin fake: target checkpoint folder is not a folder") {
		t.Fatalf("Load = %v", err)
	}
	if slices.Contains(p.calls, "NewDrafter") {
		t.Fatal("NewDrafter ran after PrepareLoad failed")
	}
}

// Close on an engine without a plugin draft does nothing.
func TestCloseWithoutPluginDraft(t *testing.T) {
	e := load(t, writeManifest(t, "dflash-tiny", ""))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
