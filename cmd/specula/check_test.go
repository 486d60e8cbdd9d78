package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
)

// gpuRun reports whether check resolves for a GPU on this machine.
func gpuRun(t *testing.T) bool {
	t.Helper()
	gpu, err := mlx.Call(context.Background(), func() (bool, error) { return mlx.CurrentDevice() == mlx.GPU, nil })
	if err != nil {
		t.Fatal(err)
	}
	return gpu
}

// examplesDir is the folder of the example manifests.
const examplesDir = "../../manifests"

func TestCheckFixtureExamples(t *testing.T) {
	ensureArchs(t)
	for _, tt := range []struct {
		file string
		want []string
	}{
		{"fixture-dflash.toml", []string{
			"target       ../testdata/fixtures/qwen35-tiny",
			"  architecture  Qwen3_5ForCausalLM (from config.json, built-in)",
			"  capabilities  model, draft-target\n",
			"  dtype         float32",
			"  config        hidden size 64, 4 layers, vocabulary 512",
			"  weights       present: model.safetensors (",
			"draft        ../testdata/fixtures/dflash-tiny",
			"  architecture  DFlashDraftModel (built-in)",
			"  block         8 positions, mask token 510",
			"speculation  block drafts, adaptive depth capped at 7",
			"sampling     temperature 0, max_tokens 32",
			"ok: " + examplesDir + "/fixture-dflash.toml is runnable (nothing was loaded)",
		}},
		{"fixture-dflash2.toml", []string{
			"  architecture  DFlash2DraftModel (built-in)",
			"  capabilities  draft, block-draft, selector\n",
			"speculation  selector session, fixed depth 7",
			"ok: ",
		}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			code, out, errs := run("check", filepath.Join(examplesDir, tt.file))
			if code != exitOK || errs != "" {
				t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	ensureArchs(t)
	code, out, _ := run("check", "--json", filepath.Join(examplesDir, "fixture-dflash2.toml"))
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !rep.OK || rep.Error != "" || rep.Name != "fixture-dflash2" || rep.Draft == nil ||
		rep.Draft.Architecture != "DFlash2DraftModel" || rep.Speculation.Mode != "selector" || rep.Speculation.FixedDepth != 7 ||
		rep.Target.VocabSize != 512 || rep.Target.Weights.Status != "present" || rep.Draft.MaskToken == nil || *rep.Draft.MaskToken != 510 {
		t.Errorf("report = %s", out)
	}
}

// copyExample copies an example manifest into an empty folder, so that its
// models/ paths certainly do not exist.
func copyExample(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesDir, file))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckRealExamplesReportMissingWeights(t *testing.T) {
	ensureArchs(t)
	for _, tt := range []struct {
		file    string
		line    string
		targets []string // hf download commands the error must give
	}{
		{"qwen3.5-4b.toml", ":15: ", []string{"hf download Qwen/Qwen3.5-4B --local-dir "}},
		{"qwen3.5-4b-dflash.toml", ":17: ", []string{"hf download Qwen/Qwen3.5-4B --local-dir ", "hf download z-lab/Qwen3.5-4B-DFlash --local-dir "}},
		{"qwen3.5-4b-4bit-dflash.toml", ":24: ", []string{"hf download mlx-community/Qwen3.5-4B-4bit --local-dir ", "hf download z-lab/Qwen3.5-4B-DFlash --local-dir "}},
		{"qwen3.5-27b-dflash2.toml", ":23: ", []string{"hf download Qwen/Qwen3.5-27B --local-dir ", "hf download incoai/Qwen3.8-27B-DFlash2 --local-dir "}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			p := copyExample(t, tt.file)
			code, out, errs := run("check", p)
			if code != exitFailure {
				t.Fatalf("exit %d; want %d", code, exitFailure)
			}
			if strings.Count(errs, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", errs)
			}
			if want := "specula check: manifest " + p + tt.line + "weights missing: [target] checkpoint folder models/"; !strings.HasPrefix(errs, want) {
				t.Errorf("stderr = %q\nwant prefix %q", errs, want)
			}
			for _, w := range tt.targets {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q: %s", w, errs)
				}
			}
			// What the manifest says is still shown.
			dtype := "float32"
			if gpuRun(t) {
				dtype = "bfloat16"
			}
			if !strings.Contains(out, "target       models/") || !strings.Contains(out, "  dtype         "+dtype) || strings.Contains(out, "ok: ") {
				t.Errorf("stdout:\n%s", out)
			}
		})
	}
}

func TestCheckWeightsMissingWithConfig(t *testing.T) {
	ensureArchs(t)
	// A checkpoint folder with the fixture's config.json but no weights:
	// everything resolves, and the plan is printed before the error.
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(examplesDir, "../testdata/fixtures/qwen35-tiny/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "Qwen3.5-tiny")
	os.Mkdir(ck, 0o755)
	os.WriteFile(filepath.Join(ck, "config.json"), cfg, 0o644)
	m := filepath.Join(dir, "m.toml")
	os.WriteFile(m, []byte("schema = 1\n[target]\npath = \"Qwen3.5-tiny\"\ncapabilities = [\"model\"]\nrepo = \"Qwen/Qwen3.5-0.8B\"\n"), 0o644)

	code, out, errs := run("check", m)
	if code != exitFailure {
		t.Fatalf("exit %d", code)
	}
	want := "specula check: manifest " + m + ":3: weights missing: Qwen3.5-tiny/model.safetensors not found (nor model.safetensors.index.json) — download it: hf download Qwen/Qwen3.5-0.8B --local-dir " + ck + "\n"
	if errs != want {
		t.Errorf("stderr = %q\nwant     %q", errs, want)
	}
	for _, w := range []string{"  architecture  Qwen3_5ForCausalLM (from config.json, built-in)", "  weights       missing: Qwen3.5-tiny/model.safetensors not found"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	code, out, _ = run("check", "--json", m)
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitFailure || rep.OK ||
		!strings.Contains(rep.Error, "weights missing") || rep.Target.Weights.Status != "missing" {
		t.Errorf("json: exit %d, %v\n%s", code, err, out)
	}
}

func TestCheckBrokenManifests(t *testing.T) {
	ensureArchs(t)
	fixture, err := filepath.Abs(filepath.Join(examplesDir, "../testdata/fixtures"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		doc  string
		want string // stderr after "specula check: manifest <path>"
	}{
		{"misspelt key", "schema = 1\n[target]\npath = \"x\"\ncapabilites = [\"model\"]\n",
			`:4: unknown key "capabilites" in [target] (did you mean "capabilities"?)`},
		{"newer schema", "schema = 3\n", `:1: schema = 3: this specula reads schema 1`},
		{"out of range", "schema = 1\n[target]\npath = \"x\"\ncapabilities = [\"model\"]\n[speculation]\nmax_depth = 100\n",
			`:6: [speculation] max_depth = 100 is out of range: want 0..64 (0 = no cap)`},
		{"selector for a draft without Select", "schema = 1\n[target]\npath = \"" + fixture + "/qwen35-tiny\"\ncapabilities = [\"model\", \"draft-target\"]\n" +
			"[draft]\npath = \"" + fixture + "/dflash-tiny\"\ncapabilities = [\"draft\", \"block-draft\", \"selector\"]\n",
			`:7: [draft] declares capability "selector" but DFlashDraftModel does not implement model.Selector (it provides: draft, block-draft)`},
		{"unknown architecture", "schema = 1\n[target]\npath = \"" + fixture + "/qwen35-tiny\"\narchitecture = \"Llama\"\ncapabilities = [\"model\"]\n",
			`:4: [target] architecture "Llama" is not registered; known: `},
		{"bfloat16 on the CPU", "schema = 1\n[target]\npath = \"x\"\ncapabilities = [\"model\"]\ndtype = \"bfloat16\"\n",
			`:5: [target] dtype = "bfloat16" on the CPU: MLX's CPU backend is only fast for float32`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "bfloat16 on the CPU" && gpuRun(t) {
				t.Log("this machine computes on a GPU, where bfloat16 is allowed; checking the GPU verdict instead")
				tt.want = ":3: weights missing: [target] checkpoint folder x not found"
			}
			p := filepath.Join(t.TempDir(), "broken.toml")
			if err := os.WriteFile(p, []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, errs := run("check", p)
			want := "specula check: manifest " + p + tt.want
			if code != exitFailure || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
				t.Errorf("exit %d, stderr:\n  %q\nwant one line starting\n  %q", code, errs, want)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "broken.toml")
		os.WriteFile(p, []byte(tests[0].doc), 0o644)
		code, out, errs := run("check", "--json", p)
		var rep checkReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitFailure || rep.OK || !strings.Contains(rep.Error, "did you mean") || errs == "" {
			t.Errorf("exit %d, err %v, stdout %s", code, err, out)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		code, out, errs := run("check", filepath.Join(t.TempDir(), "nope.toml"))
		if code != exitFailure || out != "" || !strings.Contains(errs, "no such file or directory") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
		}
	})
	for _, args := range [][]string{{"check"}, {"check", "a.toml", "b.toml"}, {"check", "--nope", "a.toml"}} {
		t.Run("usage "+strings.Join(args, " "), func(t *testing.T) {
			if code, _, _ := run(args...); code != exitUsage {
				t.Errorf("exit %d; want %d", code, exitUsage)
			}
		})
	}
}

// TestCheckTargetTensorsMismatchConfig: a target folder whose config.json
// does not describe its tensors (here the fixture's weights under a
// config.json claiming a wider MLP, as when a config.json of another size
// was downloaded into the folder) is refused by check, as run refuses it,
// instead of "ok: runnable". The tensors are bound by name and shape only.
func TestCheckTargetTensorsMismatchConfig(t *testing.T) {
	ensureArchs(t)
	ck := fixtures.WithConfig(t, "qwen35-tiny", "intermediate_size", 256) // the fixture's MLP is 128 wide
	m := filepath.Join(filepath.Dir(ck), "m.toml")
	if err := os.WriteFile(m, []byte("schema = 1\n[target]\npath = \""+filepath.Base(ck)+"\"\ncapabilities = [\"model\"]\ndtype = \"float32\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run("check", m)
	want := "specula check: manifest " + m + ":3: invalid weights: " + filepath.Base(ck) + ": its tensors do not fit Qwen3_5ForCausalLM as its config.json describes it"
	if code != exitFailure || !strings.HasPrefix(errs, want) || !strings.Contains(errs, "tensors do not match config.json") ||
		strings.Count(errs, "\n") != 1 || strings.Contains(out, "runnable") {
		t.Fatalf("exit %d, stderr %q\nwant exit 1 and one line starting %q\n%s", code, errs, want, out)
	}
}
