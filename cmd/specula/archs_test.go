package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/registry/registrytest"
)

var builtinsOnce sync.Once

// ensureArchs registers fakes under the built-in architecture names that
// registry.Default does not have yet. Once the program links the real
// architectures, they are used instead and the tests' verdicts stay the same.
func ensureArchs(t *testing.T) {
	t.Helper()
	var err error
	builtinsOnce.Do(func() { err = registrytest.AddBuiltinFakes(registry.Default) })
	if err != nil {
		t.Fatal(err)
	}
}

// run dispatches args and returns the exit code and both outputs.
func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = dispatch(&env{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestArchs(t *testing.T) {
	ensureArchs(t)
	if err := registry.Default.AddPlugin("acme-test", []registry.PluginArch{{Name: "AcmeTestDraft", Aliases: []string{"acme"},
		Kind: registry.KindDraft, Capabilities: model.Capabilities{model.CapDraft, model.CapBlockDraft},
		New: func(registry.Config) (any, error) { return struct{}{}, nil }}}); err != nil {
		t.Fatal(err)
	}
	defer registry.Default.RemovePlugin("acme-test")

	t.Run("table", func(t *testing.T) {
		code, out, errs := run("archs")
		if code != exitOK || errs != "" {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "CAPABILITIES") || !strings.Contains(lines[0], "SOURCE") {
			t.Errorf("header = %q", lines[0])
		}
		for _, want := range [][]string{
			{"Qwen3_5ForCausalLM", "target", "model, draft-target", "built-in"},
			{"Qwen3_5MoeForCausalLM", "target", "model, draft-target", "built-in"},
			{"Qwen3_5MoeForConditionalGeneration", "target", "model, draft-target", "built-in"},
			{"DFlashDraftModel", "draft", "draft, block-draft", "built-in"},
			{"DFlash2DraftModel", "draft", "draft, block-draft, selector", "built-in"},
			{"AcmeTestDraft", "draft", "draft, block-draft", "plugin acme-test", "acme"},
		} {
			found := false
			for _, l := range lines {
				if strings.HasPrefix(l, want[0]+" ") {
					found = true
					for _, w := range want[1:] {
						if !strings.Contains(l, w) {
							t.Errorf("line %q lacks %q", l, w)
						}
					}
				}
			}
			if !found {
				t.Errorf("%s not listed:\n%s", want[0], out)
			}
		}
		// Targets come before drafts.
		if strings.Index(out, "Qwen3_5ForCausalLM") > strings.Index(out, "DFlashDraftModel") {
			t.Error("drafts listed before targets")
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, _ := run("archs", "--json")
		if code != exitOK {
			t.Fatalf("exit %d", code)
		}
		var got []archJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		byName := map[string]archJSON{}
		for _, a := range got {
			byName[a.Name] = a
			if a.Aliases == nil || a.Capabilities == nil {
				t.Errorf("%s: null list in JSON", a.Name)
			}
		}
		if a := byName["AcmeTestDraft"]; a.Source != "plugin acme-test" || a.Kind != "draft" || strings.Join(a.Aliases, ",") != "acme" {
			t.Errorf("plugin entry = %+v", a)
		}
		if a := byName["DFlash2DraftModel"]; strings.Join(a.Capabilities, ",") != "draft,block-draft,selector" || a.Source != "built-in" {
			t.Errorf("DFlash2 entry = %+v", a)
		}
	})
	t.Run("extra argument is a usage error", func(t *testing.T) {
		code, _, errs := run("archs", "extra")
		if code != exitUsage || !strings.Contains(errs, `unexpected argument "extra"`) {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
	})
}
