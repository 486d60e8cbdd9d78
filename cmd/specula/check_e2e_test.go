package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
)

// draftFolder writes a draft checkpoint folder: the config.json of fixture
// configFrom, edited by edit (nil: as is), beside a link to the weights of
// fixture weightsFrom.
func draftFolder(t *testing.T, configFrom, weightsFrom string, edit func(map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, configFrom), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		edit(cfg)
		if b, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(fixtures.Dir(t, weightsFrom), "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rewrite replaces old by new in manifest m (once) and writes the result to
// a new manifest.
func rewrite(t *testing.T, m, old, new string) string {
	t.Helper()
	b, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s lacks %q", m, old)
	}
	out := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(out, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// check refuses what run would refuse after loading the target: a plugin
// draft that does not fit the target (asked of the plugin, without loading
// the draft), a plugin draft over a target without "draft-target", a draft
// folder whose tensors are another architecture's; and says when only
// token-id prompts will work. Each refusal is one line naming the manifest,
// exit 1, and no plugin process is left.
func TestE2ECheckCatchesWhatRunWouldRefuse(t *testing.T) {
	bin, manifest, _, _ := pluginSetup(t) // the dflash example plugin over the fixture pair
	builtin := fixtureManifest(t, "dflash-tiny")
	draftDir := `"` + fixtures.Dir(t, "dflash-tiny") + `"`
	narrow := draftFolder(t, "dflash-tiny", "dflash-tiny", func(c map[string]any) { c["hidden_size"] = 32 })
	swapped := draftFolder(t, "dflash-tiny", "qwen35-tiny", nil)
	for _, c := range []struct {
		name, manifest, want string
	}{
		{"plugin draft with another hidden size", rewrite(t, manifest, draftDir, `"`+narrow+`"`),
			"does not fit target Qwen3_5ForCausalLM: plugin dflash: checking DFlashDraftModel against the target: loading DFlashDraftModel from " + narrow + ": attaching the target: hidden_size 32 differs from the target's hidden size 64"},
		{"plugin draft over a target without draft-target", rewrite(t, manifest, `capabilities = ["model", "draft-target"]`, `capabilities = ["model"]`),
			`[target] must declare capability "draft-target": a plugin draft (DFlashDraftModel of plugin dflash) is given its target through it`},
		{"plugin draft folder holding the target's tensors", rewrite(t, manifest, draftDir, `"`+swapped+`"`),
			"does not fit target Qwen3_5ForCausalLM: plugin dflash: checking DFlashDraftModel against the target: loading DFlashDraftModel from " + swapped + ": loading weights: DFlashDraftModel: checkpoint does not match"},
		{"built-in draft folder holding the target's tensors", rewrite(t, builtin, draftDir, `"`+swapped+`"`),
			"invalid weights: " + swapped + ": its tensors do not fit DFlashDraftModel as its config.json describes it (is it another architecture's checkpoint, or its config.json another's?): DFlashDraftModel: checkpoint does not match: 14 missing, 0 mis-shaped, 43 unexpected, 0 duplicate tensors (and 58 more lines: SPECULA_LOG=debug shows them)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runPluginCommand(t, nil, "check", "--plugin-dir", bin.Dir, c.manifest)
			if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "specula check: manifest "+c.manifest+":") || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one line with %q\n%s", code, stderr, c.want, stdout)
			}
			if strings.Contains(stdout, "runnable") {
				t.Fatalf("check says runnable:\n%s", stdout)
			}
			noPluginLeft(t, bin)
		})
	}
	stdout, stderr, code := runPluginCommand(t, nil, "check", "--plugin-dir", bin.Dir, manifest)
	if code != 0 || !strings.Contains(stdout, "tokenizer     none (no tokenizer.json): only token-id prompts work (specula run --ids)") {
		t.Fatalf("check of the fixture pair (no tokenizer.json): exit %d\n%s\n%s", code, stdout, stderr)
	}
	noPluginLeft(t, bin)
}

// A text prompt for a target without tokenizer.json fails before any weight
// is read (no progress line), naming the folder and the way out.
func TestE2ETextPromptWithoutTokenizerFailsBeforeLoading(t *testing.T) {
	m := fixtureManifest(t, "dflash-tiny")
	stdout, stderr, code := execSpecula(t, "run", "-m", m, "hello")
	want := "specula run: " + fixtures.Dir(t, "qwen35-tiny") + ": the target checkpoint has no tokenizer.json: pass token ids instead of text\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, stdout, stderr, want)
	}
}
