package manifests_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/registry/registrytest"
)

// examples lists the example manifests of this folder.
func examples(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob("*.toml")
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func TestExamplesDecode(t *testing.T) {
	paths := examples(t)
	for _, want := range []string{"fixture-dflash.toml", "fixture-dflash2.toml", "go-tiny.toml", "go-tiny-dflash.toml", "go-tiny-dflash2.toml", "qwen3.5-4b.toml", "qwen3.5-4b-dflash.toml", "qwen3.5-4b-4bit-dflash.toml", "qwen3.5-27b-dflash2.toml"} {
		if !slices.Contains(paths, want) {
			t.Errorf("example %s is missing", want)
		}
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			m, err := manifests.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			if m.Name != strings.TrimSuffix(p, ".toml") {
				t.Errorf("name %q differs from the file name", m.Name)
			}
			// Checkpoints that ship in the repository (the fixtures, the
			// go-tiny family) need no download; every other one must say where
			// it comes from.
			shipped := isDir(filepath.Join(filepath.Dir(p), m.Target.Path))
			if strings.HasPrefix(p, "fixture-") || strings.HasPrefix(p, "go-tiny") {
				if !shipped {
					t.Errorf("target %s is not in the repository", m.Target.Path)
				}
			} else if m.Target.Repo == "" {
				t.Error("a real-checkpoint example should say where to download the target (repo)")
			}
		})
	}
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// TestFixtureExamplesResolve resolves the manifests whose checkpoints ship in
// the repository (the test fixtures, the trained go-tiny family) against
// registry.Default, as programs do. Names the program's architectures do not
// register (yet) are filled with fakes sized from the fixtures' configs that
// check fit as DFlash does, so the test runs today and, once the built-in
// architectures are linked into this test binary, exercises them instead with
// the same verdict.
func TestFixtureExamplesResolve(t *testing.T) {
	if err := registrytest.AddBuiltinFakes(registry.Default); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		file     string
		draft    string
		mode     manifests.Mode
		selector bool
		mask     int32 // the tokenizer's mask id
		layers   int   // the target's, from config.json
	}{
		{"fixture-dflash.toml", "DFlashDraftModel", manifests.ModeBlock, false, 510, 4},
		{"fixture-dflash2.toml", "DFlash2DraftModel", manifests.ModeSelector, true, 510, 4},
		{"go-tiny-dflash.toml", "DFlashDraftModel", manifests.ModeBlock, false, 8191, 8},
		{"go-tiny-dflash2.toml", "DFlash2DraftModel", manifests.ModeSelector, true, 8191, 8},
	} {
		t.Run(tt.file, func(t *testing.T) {
			m, err := manifests.Load(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			p, err := manifests.Resolve(ctx, m, registry.Default, manifests.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Ready(); err != nil {
				t.Fatal(err)
			}
			if p.Target.Architecture != "Qwen3_5ForCausalLM" || p.Draft.Architecture != tt.draft || p.Speculation.Mode != tt.mode ||
				p.Draft.BlockSize != 8 || p.Draft.MaskToken != tt.mask || p.Target.Info.NumLayers != tt.layers {
				t.Errorf("plan: target %s %+v, draft %s (block %d, mask %d), mode %s", p.Target.Architecture, p.Target.Info,
					p.Draft.Architecture, p.Draft.BlockSize, p.Draft.MaskToken, p.Speculation.Mode)
			}
			if _, ok := p.Draft.Selector(); ok != tt.selector {
				t.Errorf("Selector() ok = %v", ok)
			}
			if len(p.Warnings) > 0 {
				t.Errorf("warnings on an example: %q", p.Warnings)
			}
		})
	}
}

// TestRealExamplesReportMissingWeights resolves the real-checkpoint examples
// from a copy in an empty folder, so their models/ folders are certainly
// absent: the error is "weights missing" with the download commands.
func TestRealExamplesReportMissingWeights(t *testing.T) {
	for _, tt := range []struct {
		file string
		want []string
	}{
		{"qwen3.5-4b.toml", []string{":15: weights missing: [target] checkpoint folder models/Qwen3.5-4B not found", "hf download Qwen/Qwen3.5-4B --local-dir "}},
		{"qwen3.5-4b-dflash.toml", []string{":17: weights missing: [target] checkpoint folder models/Qwen3.5-4B not found",
			"hf download Qwen/Qwen3.5-4B --local-dir ", "; [draft] checkpoint folder models/Qwen3.5-4B-DFlash not found",
			"hf download z-lab/Qwen3.5-4B-DFlash --local-dir "}},
		{"qwen3.5-4b-4bit-dflash.toml", []string{":24: weights missing: [target] checkpoint folder models/Qwen3.5-4B-4bit not found",
			"hf download mlx-community/Qwen3.5-4B-4bit --local-dir ", "; [draft] checkpoint folder models/Qwen3.5-4B-DFlash not found",
			"hf download z-lab/Qwen3.5-4B-DFlash --local-dir "}},
		{"qwen3.5-27b-dflash2.toml", []string{":23: weights missing: [target] checkpoint folder models/Qwen3.5-27B not found",
			"hf download Qwen/Qwen3.5-27B --local-dir ", "hf download incoai/Qwen3.8-27B-DFlash2 --local-dir "}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := manifests.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			_, err = manifests.Resolve(ctx, m, registry.New(), manifests.Options{})
			if !errors.Is(err, manifests.ErrWeightsMissing) {
				t.Fatalf("Resolve = %v; want weights missing", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n  %s\nwant it to contain:\n  %s", err, w)
				}
			}
		})
	}
}
