package manifests_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/registry/registrytest"
)

// fakes returns a registry holding fakes under the built-in names (a
// DraftTarget Qwen3.5, a BlockDraft DFlash, a Selector DFlash2) plus a
// model-only target "PlainTarget" and a draft-only "PlainDraft".
func fakes(t *testing.T) *registry.Registry {
	t.Helper()
	r := registry.New()
	if err := registrytest.AddBuiltinFakes(r); err != nil {
		t.Fatal(err)
	}
	if err := registry.AddTarget(r, "PlainTarget", nil, registrytest.NewTarget); err != nil {
		t.Fatal(err)
	}
	if err := registry.AddDraft(r, "PlainDraft", nil, registrytest.NewDraft); err != nil {
		t.Fatal(err)
	}
	return r
}

// ckpt makes a checkpoint folder with config.json and the given files; a
// file whose content is "@fixture:<name>/<file>" becomes a symlink to that
// fixture file.
func ckpt(t *testing.T, config string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if ref, ok := strings.CutPrefix(content, "@fixture:"); ok {
			fixture, file, _ := strings.Cut(ref, "/")
			if err := os.Symlink(filepath.Join(fixtures.Dir(t, fixture), file), p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// targetConfig and draftConfig are fixture-shaped configs (H 64, V 512, 4
// target layers; block 8, mask 510, taps [0, 2]) with overrides.
func targetConfig(extra string) string {
	return `{"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 4` + extra + `}`
}

func draftConfig(arch, extra string) string {
	return `{"architectures": ["` + arch + `"], "hidden_size": 64, "vocab_size": 512, "num_hidden_layers": 2,
		"dflash_config": {"block_size": 8, "mask_token_id": 510, "target_layer_ids": [0, 2]}` + extra + `}`
}

// writeManifest writes body to m.toml in a fresh folder and loads it.
func writeManifest(t *testing.T, body string) *manifests.Manifest {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := manifests.Load(p)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m
}

// pair is a manifest over a target and a draft folder, lines numbered:
//
//	1 schema = 1
//	2 [target]
//	3 path = ...
//	4 capabilities = <targetCaps>
//	5 <targetExtra or blank>
//	6 [draft]
//	7 path = ...
//	8 capabilities = <draftCaps>
//	9 <draftExtra or blank>
//	10+ <rest>
func pair(target, targetCaps, targetExtra, draft, draftCaps, draftExtra string, rest ...string) string {
	return lines(append([]string{
		`schema = 1`,
		`[target]`,
		fmt.Sprintf(`path = %q`, target),
		`capabilities = ` + targetCaps,
		targetExtra,
		`[draft]`,
		fmt.Sprintf(`path = %q`, draft),
		`capabilities = ` + draftCaps,
		draftExtra,
	}, rest...)...)
}

const (
	dtCaps    = `["model", "draft-target"]`
	blockCaps = `["draft", "block-draft"]`
	selCaps   = `["draft", "block-draft", "selector"]`
)

var ctx = context.Background()

func TestResolveFixturePairs(t *testing.T) {
	qwen, dflash, dflash2 := fixtures.Dir(t, "qwen35-tiny"), fixtures.Dir(t, "dflash-tiny"), fixtures.Dir(t, "dflash2-tiny")
	tests := []struct {
		name       string
		draft      string
		caps       string
		spec       []string
		mode       manifests.Mode
		fixedDepth int
		selector   bool
	}{
		{"dflash as a block draft", dflash, blockCaps, nil, manifests.ModeBlock, 0, false},
		{"dflash2 declaring selector runs the selector session", dflash2, selCaps, nil, manifests.ModeSelector, 7, true},
		{"dflash2 not declaring selector is driven as a block draft", dflash2, blockCaps, nil, manifests.ModeBlock, 0, false},
		{"max_depth caps the selector's fixed depth", dflash2, selCaps, []string{`[speculation]`, `max_depth = 5`}, manifests.ModeSelector, 5, true},
		{"selector_depth sets it", dflash2, selCaps, []string{`[speculation]`, `selector_depth = 3`, `max_depth = 9`}, manifests.ModeSelector, 3, true},
		{"enabled = false decodes plainly", dflash2, selCaps, []string{`[speculation]`, `enabled = false`}, manifests.ModeOff, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fakes(t)
			m := writeManifest(t, pair(qwen, dtCaps, `dtype = "float32"`, tt.draft, tt.caps, ``, tt.spec...))
			p, err := manifests.Resolve(ctx, m, r, manifests.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Ready(); err != nil {
				t.Fatalf("Ready: %v", err)
			}
			tp, dp := p.Target, p.Draft
			if tp.Architecture != "Qwen3_5ForCausalLM" || !tp.FromConfig || tp.Source != "built-in" || tp.ModelType != "qwen3_5_text" ||
				tp.DType != mlx.Float32 || tp.Info != (model.Info{HiddenSize: 64, VocabSize: 512, NumLayers: 4}) ||
				tp.Capabilities.String() != "model, draft-target" || tp.Dir != qwen {
				t.Errorf("target plan = %+v", tp.Component)
			}
			if tp.Weights.Status != manifests.WeightsPresent || !slices.Equal(tp.Weights.Files, []string{"model.safetensors"}) ||
				tp.Weights.Tensors == 0 || tp.Weights.Bytes == 0 {
				t.Errorf("target weights = %+v", tp.Weights)
			}
			if dp.BlockSize != 8 || dp.MaskToken != 510 || dp.Capabilities.String() != strings.NewReplacer(`"`, ``, `[`, ``, `]`, ``).Replace(tt.caps) ||
				dp.Weights.Status != manifests.WeightsPresent || dp.Plugin != "" || dp.DType != mlx.Float32 {
				t.Errorf("draft plan = %+v", dp)
			}
			if p.Speculation.Mode != tt.mode || p.Speculation.FixedDepth != tt.fixedDepth {
				t.Errorf("speculation = %+v; want mode %s depth %d", p.Speculation, tt.mode, tt.fixedDepth)
			}
			// Undeclared capabilities are not exposed, whatever the type
			// implements.
			if _, ok := dp.Selector(); ok != tt.selector {
				t.Errorf("Selector() ok = %v; want %v", ok, tt.selector)
			}
			if _, ok := dp.BlockDraft(); !ok {
				t.Error("BlockDraft() not available though declared")
			}
			dt, ok := tp.DraftTarget()
			if !ok {
				t.Fatal("DraftTarget() not available though declared")
			}
			// AttachTarget ran: the fake target holds the draft's taps.
			if got := dt.(*registrytest.DraftTarget).Taps; !slices.Equal(got, []int{0, 2}) {
				t.Errorf("target taps = %v; want [0 2]", got)
			}
			if tp.Model() == nil {
				t.Error("Model() is nil")
			}
		})
	}
}

func TestResolveUndeclaredCapabilitiesAreNotExposed(t *testing.T) {
	r := fakes(t)
	m := writeManifest(t, lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", fixtures.Dir(t, "qwen35-tiny")),
		`capabilities = ["model"]`, `dtype = "float32"`))
	p, err := manifests.Resolve(ctx, m, r, manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Target.DraftTarget(); ok {
		t.Error("DraftTarget() is available though the manifest does not declare draft-target")
	}
	if p.Target.Provided.String() != "model, draft-target" || p.Target.Capabilities.String() != "model" {
		t.Errorf("Provided [%s], Capabilities [%s]", p.Target.Provided, p.Target.Capabilities)
	}
	if p.Draft != nil || p.Speculation.Mode != manifests.ModeOff {
		t.Errorf("draft %v, mode %s", p.Draft, p.Speculation.Mode)
	}
}

func TestResolveErrors(t *testing.T) {
	qwen := fixtures.Dir(t, "qwen35-tiny")
	dflash := fixtures.Dir(t, "dflash-tiny")
	withWeights := func(config string) func(t *testing.T) string {
		return func(t *testing.T) string {
			return ckpt(t, config, map[string]string{"model.safetensors": "@fixture:dflash-tiny/model.safetensors"})
		}
	}
	fixed := func(dir string) func(*testing.T) string { return func(*testing.T) string { return dir } }
	tests := []struct {
		name        string
		target      func(t *testing.T) string
		targetCaps  string
		targetExtra string
		draft       func(t *testing.T) string
		draftCaps   string
		draftExtra  string
		rest        []string
		opts        manifests.Options
		emptyReg    bool
		kind        error
		want        string // after "m.toml"
		wantAs      any    // an error type errors.As must find, or nil
	}{
		// 1. dtype.
		{name: "bfloat16 on the CPU", targetExtra: `dtype = "bfloat16"`, kind: manifests.ErrDType,
			want: `:5: [target] dtype = "bfloat16" on the CPU: MLX's CPU backend is only fast for float32; use dtype = "float32" (or "auto"), or set allow_slow_dtype = true to run it anyway`},
		{name: "float16 on the CPU", targetExtra: `dtype = "float16"`, kind: manifests.ErrDType, want: `:5: [target] dtype = "float16" on the CPU`},

		// 2. Checkpoint folders and config.json.
		{name: "both folders missing", target: fixed("/nonexistent/T"), draft: fixed("/nonexistent/D"), kind: manifests.ErrWeightsMissing,
			want: `:3: weights missing: [target] checkpoint folder /nonexistent/T not found — download the checkpoint into /nonexistent/T; [draft] checkpoint folder /nonexistent/D not found — download the checkpoint into /nonexistent/D`},
		{name: "missing folder with a repo", target: fixed("/nonexistent/T"), targetExtra: `repo = "Qwen/Qwen3.5-4B"`, kind: manifests.ErrWeightsMissing,
			want: `:3: weights missing: [target] checkpoint folder /nonexistent/T not found — download it: hf download Qwen/Qwen3.5-4B --local-dir /nonexistent/T`},
		// The line is that of the first missing folder's path: the draft's
		// (line 7) when only it is missing, not the target's.
		{name: "config.json missing", draft: func(t *testing.T) string { return ckpt(t, "", nil) }, kind: manifests.ErrWeightsMissing,
			want: `:7: weights missing: [draft] `},
		{name: "draft folder missing", draft: fixed("/nonexistent/D"), kind: manifests.ErrWeightsMissing,
			want: `:7: weights missing: [draft] checkpoint folder /nonexistent/D not found — download the checkpoint into /nonexistent/D`},
		{name: "path is a file", target: func(t *testing.T) string { return filepath.Join(qwen, "config.json") }, kind: manifests.ErrValue,
			want: `:3: [target] path ` + filepath.Join(qwen, "config.json") + ` is a file, not a checkpoint folder; name the folder that holds config.json and the *.safetensors files`},
		{name: "config.json not JSON", draft: func(t *testing.T) string { return ckpt(t, `<html>`, nil) }, kind: manifests.ErrConfig,
			want: `:7: [draft] `},
		{name: "config.json with a bad architectures list", draft: func(t *testing.T) string { return ckpt(t, `{"architectures": "DFlashDraftModel"}`, nil) },
			kind: manifests.ErrConfig, want: `config.json: architectures must be a list of class names and model_type a string`},
		{name: "config.json without architectures", draft: func(t *testing.T) string { return ckpt(t, `{"hidden_size": 64}`, nil) },
			kind: manifests.ErrConfig, want: `:7: [draft] `},

		// 3. Architectures.
		{name: "unknown architecture from the manifest", draftExtra: `architecture = "DFlashDraftModle"`, kind: manifests.ErrArchitecture, wantAs: new(*registry.UnknownError),
			want: `:9: [draft] architecture "DFlashDraftModle" is not registered; known: DFlash2DraftModel, DFlashDraftModel, PlainDraft, PlainTarget, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration (did you mean "DFlashDraftModel"?)`},
		{name: "unknown architecture from config.json", draft: func(t *testing.T) string { return ckpt(t, draftConfig("EagleDraftModel", ""), nil) },
			kind: manifests.ErrArchitecture, wantAs: new(*registry.UnknownError),
			want: `:7: [draft] architecture "EagleDraftModel" (config.json architectures[0]) is not registered; known: `},
		{name: "empty registry", emptyReg: true, kind: manifests.ErrArchitecture,
			want: `:3: [target] architecture "Qwen3_5ForCausalLM" (config.json architectures[0]) is not registered; no architectures are registered in this program (a program that loads manifests registers specula's own by importing github.com/specula-dev/specula/arch/all)`},
		{name: "target architecture in [draft]", draftExtra: `architecture = "Qwen3_5ForCausalLM"`, kind: manifests.ErrArchitecture,
			want: `:9: [draft] architecture "Qwen3_5ForCausalLM" is a target architecture; [draft] needs a draft (known drafts: DFlash2DraftModel, DFlashDraftModel, PlainDraft)`},
		{name: "draft architecture in [target]", targetExtra: `architecture = "DFlashDraftModel"`, kind: manifests.ErrArchitecture,
			want: `:5: [target] architecture "DFlashDraftModel" is a draft architecture; [target] needs a target (known targets: PlainTarget, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration)`},

		// 4. Constructors.
		{name: "constructor refuses the config", draft: func(t *testing.T) string {
			return ckpt(t, draftConfig("DFlashDraftModel", `, "fake_fail": "rope_type yarn is not implemented"`), nil)
		},
			kind: manifests.ErrInit, wantAs: new(*registry.InitError),
			want: `:7: [draft] architecture DFlashDraftModel failed to initialise from `},
		{name: "constructor failure names the architecture line", draftExtra: `architecture = "DFlashDraftModel"`,
			draft: func(t *testing.T) string { return ckpt(t, draftConfig("DFlashDraftModel", `, "fake_fail": "no"`), nil) },
			kind:  manifests.ErrInit, want: `:9: [draft] architecture DFlashDraftModel failed to initialise from `},

		// 5. Capabilities.
		{name: "selector declared for a draft without Select", draftCaps: selCaps, kind: manifests.ErrCapability,
			want: `:8: [draft] declares capability "selector" but DFlashDraftModel does not implement model.Selector (it provides: draft, block-draft)`},
		{name: "block-draft declared for a plain draft", draftExtra: `architecture = "PlainDraft"`, kind: manifests.ErrCapability,
			want: `:8: [draft] declares capability "block-draft" but PlainDraft does not implement model.BlockDraft (it provides: draft)`},
		{name: "draft-target declared for a model-only target", targetExtra: `architecture = "PlainTarget"`, kind: manifests.ErrCapability,
			want: `:4: [target] declares capability "draft-target" but PlainTarget does not implement model.DraftTarget (it provides: model)`},

		// 7. Fit.
		{name: "target user needs draft-target declared", targetCaps: `["model"]`, kind: manifests.ErrFit,
			want: `:4: [target] must declare capability "draft-target": draft DFlashDraftModel uses its target's embeddings, head and layer taps (model.TargetUser), and Qwen3_5ForCausalLM provides it: add "draft-target" to [target] capabilities`},
		{name: "target user with a model-only target", targetCaps: `["model"]`, targetExtra: `architecture = "PlainTarget"`, kind: manifests.ErrFit,
			want: `and PlainTarget does not implement model.DraftTarget: pair the draft with a target that does`},
		{name: "vocabulary mismatch", draft: withWeights(draftConfig("DFlashDraftModel", `, "vocab_size": 256`)), kind: manifests.ErrFit,
			want: `:7: draft DFlashDraftModel does not fit target Qwen3_5ForCausalLM: vocabulary 256 differs from the target's 512`},
		{name: "hidden size mismatch", draft: withWeights(draftConfig("DFlashDraftModel", `, "hidden_size": 128`)), kind: manifests.ErrFit,
			want: `:7: draft DFlashDraftModel does not fit target Qwen3_5ForCausalLM: hidden size 128 differs from the target's 64`},
		{name: "mask token outside the vocabulary", draft: withWeights(strings.Replace(draftConfig("DFlashDraftModel", ""), "510", "512", 1)), kind: manifests.ErrFit,
			want: `:7: draft DFlashDraftModel does not fit target Qwen3_5ForCausalLM: mask token 512 is outside the target's vocabulary [0, 512)`},
		{name: "tap beyond the target's layers", draft: withWeights(strings.Replace(draftConfig("DFlashDraftModel", ""), "[0, 2]", "[0, 4]", 1)), kind: manifests.ErrFit,
			want: `:7: draft DFlashDraftModel does not fit target Qwen3_5ForCausalLM: target_layer_ids [0 4]: tap 4 is not below the target's 4 layers`},

		// 8. Stop tokens.
		{name: "stop token outside the vocabulary", rest: []string{`[sampling]`, `stop = ["</s>", 511, 512]`}, kind: manifests.ErrValue,
			want: `:11: [sampling] stop token id 512 is outside the target's vocabulary [0, 512)`},

		// Plugins.
		{name: "plugin without a host", draftExtra: `plugin = "acme"` + "\n" + `sha256 = "` + strings.Repeat("a", 64) + `"`, kind: manifests.ErrPlugin,
			want: `:9: [draft] plugin "acme": this program cannot run plugins; use a built-in architecture (see specula archs)`},
		{name: "plugin that fails to load", draftExtra: `plugin = "acme"` + "\n" + `sha256 = "` + strings.Repeat("a", 64) + `"`, kind: manifests.ErrPlugin,
			opts: manifests.Options{LoadPlugin: func(context.Context, string, string, *registry.Registry) error {
				return errors.New("no binary specula-plugin-acme_* with that checksum (candidates: v1.2.0 sha256 1f2e...)")
			}},
			want: `:9: [draft] plugin "acme": no binary specula-plugin-acme_* with that checksum (candidates: v1.2.0 sha256 1f2e...)`},
		{name: "built-in architecture named as a plugin", draftExtra: `plugin = "acme"` + "\n" + `sha256 = "` + strings.Repeat("a", 64) + `"`,
			opts: manifests.Options{LoadPlugin: func(context.Context, string, string, *registry.Registry) error { return nil }},
			kind: manifests.ErrPlugin, want: `:9: [draft] plugin "acme" does not serve architecture "DFlashDraftModel" (config.json architectures[0]) — it serves no architectures; a built-in architecture has that name: remove plugin and sha256 to use it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, draft := qwen, dflash
			if tt.target != nil {
				target = tt.target(t)
			}
			if tt.draft != nil {
				draft = tt.draft(t)
			}
			or := func(s, def string) string {
				if s == "" {
					return def
				}
				return s
			}
			m := writeManifest(t, pair(target, or(tt.targetCaps, dtCaps), tt.targetExtra, draft, or(tt.draftCaps, blockCaps), tt.draftExtra, tt.rest...))
			r := fakes(t)
			if tt.emptyReg {
				r = registry.New()
			}
			p, err := manifests.Resolve(ctx, m, r, tt.opts)
			if err == nil {
				t.Fatalf("Resolve succeeded: %+v", p)
			}
			if p != nil {
				t.Error("Resolve returned a plan with an error")
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("kind: %v is not %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), "m.toml"+tt.want) && !(tt.want[0] != ':' && strings.Contains(err.Error(), tt.want)) {
				t.Errorf("error:\n  %s\nwant it to contain:\n  m.toml%s", err, tt.want)
			}
			if tt.wantAs != nil && !errors.As(err, tt.wantAs) {
				t.Errorf("errors.As(%T) failed for %v", tt.wantAs, err)
			}
			// Unknown and failed-to-initialise stay distinct.
			var ue *registry.UnknownError
			var ie *registry.InitError
			if errors.As(err, &ue) && errors.As(err, &ie) {
				t.Error("error is both unknown and failed to initialise")
			}
		})
	}
}

func TestResolveDType(t *testing.T) {
	qwen := fixtures.Dir(t, "qwen35-tiny")
	tests := []struct {
		extra string
		gpu   bool
		want  mlx.DType
	}{
		{``, false, mlx.Float32},
		{``, true, mlx.BFloat16},
		{`dtype = "auto"`, true, mlx.BFloat16},
		{`dtype = "float32"`, true, mlx.Float32},
		{`dtype = "float16"`, true, mlx.Float16},
		{"dtype = \"bfloat16\"\nallow_slow_dtype = true", false, mlx.BFloat16},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q gpu=%v", tt.extra, tt.gpu), func(t *testing.T) {
			m := writeManifest(t, lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", qwen), `capabilities = ["model"]`, tt.extra))
			p, err := manifests.Resolve(ctx, m, fakes(t), manifests.Options{GPU: tt.gpu})
			if err != nil {
				t.Fatal(err)
			}
			if p.Target.DType != tt.want || p.GPU != tt.gpu {
				t.Errorf("DType = %s; want %s", p.Target.DType, tt.want)
			}
		})
	}
}

func TestResolveWeights(t *testing.T) {
	tc := targetConfig("")
	lfs := "version https://git-lfs.github.com/spec/v1\noid sha256:" + strings.Repeat("1", 64) + "\nsize 872816\n"
	tests := []struct {
		name  string
		files map[string]string
		kind  error
		want  []string
	}{
		{"no weight files", nil, manifests.ErrWeightsMissing,
			[]string{`m.toml:3: weights missing: `, `/model.safetensors not found (nor model.safetensors.index.json) — download the checkpoint into `}},
		{"Git LFS pointer", map[string]string{"model.safetensors": lfs}, manifests.ErrWeightsMissing,
			[]string{`m.toml:3: weights missing: `, `/model.safetensors: Git LFS pointer (`, "run `git lfs pull` or download with the Hugging Face CLI"}},
		{"missing shard", map[string]string{"model.safetensors.index.json": `{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`,
			"model-00001-of-00002.safetensors": "@fixture:qwen35-tiny/model.safetensors"}, manifests.ErrWeightsMissing,
			[]string{`m.toml:3: weights missing: `, `: checkpoint incomplete: missing shards model-00002-of-00002.safetensors (referenced by model.safetensors.index.json); download them again`}},
		{"corrupt file", map[string]string{"model.safetensors": "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}        "}, manifests.ErrWeightsInvalid,
			[]string{`m.toml:3: invalid weights: `, `model.safetensors`}},
		{"shard path leaving the folder", map[string]string{"model.safetensors.index.json": `{"weight_map": {"a": "../outside.safetensors"}}`},
			manifests.ErrWeightsInvalid, []string{`m.toml:3: invalid weights: `, `"../outside.safetensors" (for tensor "a") leaves the checkpoint folder`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := ckpt(t, tc, tt.files)
			m := writeManifest(t, lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", dir), `capabilities = ["model"]`))
			p, err := manifests.Resolve(ctx, m, fakes(t), manifests.Options{})
			if err != nil {
				t.Fatalf("Resolve failed on a weights problem: %v", err)
			}
			err = p.Ready()
			if !errors.Is(err, tt.kind) {
				t.Fatalf("Ready = %v; want kind %v", err, tt.kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Ready:\n  %s\nwant it to contain:\n  %s", err, w)
				}
			}
			if st := p.Target.Weights.Status; st == manifests.WeightsPresent || p.Target.Weights.Problem == "" || p.Target.Weights.Err == nil {
				t.Errorf("weights = %+v", p.Target.Weights)
			}
			// The config-level part of the plan is still there.
			if p.Target.Architecture != "Qwen3_5ForCausalLM" || p.Target.Info.VocabSize != 512 {
				t.Errorf("plan = %+v", p.Target.Component)
			}
		})
	}
	t.Run("draft weights missing with a repo", func(t *testing.T) {
		draft := ckpt(t, draftConfig("DFlashDraftModel", ""), nil)
		m := writeManifest(t, pair(fixtures.Dir(t, "qwen35-tiny"), dtCaps, ``, draft, blockCaps, `repo = "z-lab/Qwen3.5-4B-DFlash"`))
		p, err := manifests.Resolve(ctx, m, fakes(t), manifests.Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("m.toml:7: weights missing: %s not found (nor model.safetensors.index.json) — download it: hf download z-lab/Qwen3.5-4B-DFlash --local-dir %s",
			filepath.Join(draft, "model.safetensors"), draft)
		if err := p.Ready(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Ready = %v\nwant %s", err, want)
		}
		if p.Target.Weights.Status != manifests.WeightsPresent {
			t.Errorf("target weights = %+v", p.Target.Weights)
		}
	})
}

func TestResolveWeightlessDraft(t *testing.T) {
	qwen := fixtures.Dir(t, "qwen35-tiny")
	t.Run("config.json only", func(t *testing.T) {
		draft := ckpt(t, draftConfig("DFlashDraftModel", ""), nil)
		m := writeManifest(t, pair(qwen, dtCaps, ``, draft, blockCaps, `weights = false`))
		p, err := manifests.Resolve(ctx, m, fakes(t), manifests.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Ready(); err != nil {
			t.Fatalf("Ready = %v; a weightless draft needs no weight files", err)
		}
		if st := p.Draft.Weights.Status; st != manifests.WeightsNone {
			t.Errorf("draft weights status %q, want %q", st, manifests.WeightsNone)
		}
		if len(p.Warnings) != 0 {
			t.Errorf("warnings %q, want none", p.Warnings)
		}
	})
	t.Run("weight files present anyway", func(t *testing.T) {
		draft := ckpt(t, draftConfig("DFlashDraftModel", ""), map[string]string{"model.safetensors": "not even a safetensors file"})
		m := writeManifest(t, pair(qwen, dtCaps, ``, draft, blockCaps, `weights = false`))
		p, err := manifests.Resolve(ctx, m, fakes(t), manifests.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Ready(); err != nil {
			t.Fatalf("Ready = %v; the files of a weightless draft are not inspected", err)
		}
		want := "[draft] weights = false, but " + draft + " holds weight files: specula neither checks nor loads them"
		if !slices.Contains(p.Warnings, want) {
			t.Errorf("warnings %q, want %q", p.Warnings, want)
		}
	})
}

func TestResolveWarnings(t *testing.T) {
	qwen, dflash := fixtures.Dir(t, "qwen35-tiny"), fixtures.Dir(t, "dflash-tiny")
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"architecture overriding config.json", lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", qwen), `capabilities = ["model"]`,
			`architecture = "Qwen3_5ForConditionalGeneration"`),
			`[target] architecture "Qwen3_5ForConditionalGeneration" overrides ` + filepath.Join(qwen, "config.json") + `'s "Qwen3_5ForCausalLM"`},
		{"speculation without a draft", lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", qwen), `capabilities = ["model"]`, `[speculation]`, `max_depth = 3`),
			`[speculation] has no effect without a [draft]`},
		{"selector_depth for a block draft", pair(qwen, dtCaps, ``, dflash, blockCaps, ``, `[speculation]`, `selector_depth = 4`),
			`[speculation] selector_depth applies only to a draft declaring "selector"; it has no effect here`},
		{"draft the core cannot drive", pair(qwen, dtCaps, ``, dflash, `["draft"]`, ``),
			`[draft] declares neither "block-draft" nor "selector": the speculation core drives block drafts only, so generation decodes plainly`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := manifests.Resolve(ctx, writeManifest(t, tt.doc), fakes(t), manifests.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(p.Warnings, tt.want) {
				t.Errorf("warnings = %q\nwant %q", p.Warnings, tt.want)
			}
		})
	}
}

func TestResolvePlugins(t *testing.T) {
	qwen, dflash := fixtures.Dir(t, "qwen35-tiny"), fixtures.Dir(t, "dflash-tiny")
	sha := strings.Repeat("c", 64)
	// proxy stands for the plugin host's session proxy: it implements none
	// of the model interfaces.
	type proxy struct{ dir string }
	describe := func(caps ...model.Capability) []registry.PluginArch {
		return []registry.PluginArch{{Name: "DFlash3DraftModel", Kind: registry.KindDraft, Capabilities: caps,
			New: func(c registry.Config) (any, error) { return &proxy{c.Dir}, nil }}}
	}
	load := func(archs []registry.PluginArch, got *[]string) func(context.Context, string, string, *registry.Registry) error {
		return func(_ context.Context, name, sum string, r *registry.Registry) error {
			*got = append(*got, name, sum)
			if _, err := r.Lookup(archs[0].Name); err == nil {
				return nil
			}
			return r.AddPlugin(name, archs)
		}
	}
	doc := pair(qwen, dtCaps, ``, dflash, blockCaps, "architecture = \"DFlash3DraftModel\"\nplugin = \"acme-dflash3\"\nsha256 = \""+sha+"\"")

	t.Run("a plugin draft resolves with its checksum", func(t *testing.T) {
		var calls []string
		p, err := manifests.Resolve(ctx, writeManifest(t, doc), fakes(t),
			manifests.Options{LoadPlugin: load(describe(model.CapDraft, model.CapBlockDraft), &calls)})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(calls, []string{"acme-dflash3", sha}) {
			t.Errorf("LoadPlugin calls = %q", calls)
		}
		d := p.Draft
		if d.Plugin != "acme-dflash3" || d.SHA256 != sha || d.Source != "plugin acme-dflash3" || d.Capabilities.String() != "draft, block-draft" {
			t.Errorf("draft plan = %+v", d)
		}
		if px, ok := d.Instance().(*proxy); !ok || px.dir != dflash {
			t.Errorf("Instance() = %#v", d.Instance())
		}
		if _, ok := d.BlockDraft(); ok {
			t.Error("a proxy that is not a model.BlockDraft was returned as one")
		}
		if p.Speculation.Mode != manifests.ModeBlock {
			t.Errorf("mode = %s", p.Speculation.Mode)
		}
	})
	t.Run("a plugin draft paired with a target not declaring draft-target", func(t *testing.T) {
		// The host's proxy implements model.TargetUser for every plugin
		// draft, token-level ones included: the message must not claim the
		// draft reads the target's embeddings and taps.
		archs := []registry.PluginArch{{Name: "DFlash3DraftModel", Kind: registry.KindDraft, Capabilities: model.Capabilities{model.CapDraft, model.CapBlockDraft},
			New: func(c registry.Config) (any, error) { return &userProxy{}, nil }}}
		var calls []string
		m := writeManifest(t, pair(qwen, `["model"]`, ``, dflash, blockCaps, "architecture = \"DFlash3DraftModel\"\nplugin = \"acme-dflash3\"\nsha256 = \""+sha+"\""))
		_, err := manifests.Resolve(ctx, m, fakes(t), manifests.Options{LoadPlugin: load(archs, &calls)})
		want := `[target] must declare capability "draft-target": a plugin draft (DFlash3DraftModel of plugin acme-dflash3) is given its target through it, whatever the draft reads (sizes only, or feature rows too), and Qwen3_5ForCausalLM provides it: add "draft-target" to [target] capabilities`
		if !errors.Is(err, manifests.ErrFit) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve = %v\nwant %s", err, want)
		}
	})
	t.Run("a capability the plugin does not declare", func(t *testing.T) {
		var calls []string
		_, err := manifests.Resolve(ctx, writeManifest(t, doc), fakes(t), manifests.Options{LoadPlugin: load(describe(model.CapDraft), &calls)})
		want := `m.toml:8: [draft] declares capability "block-draft" but plugin acme-dflash3's DFlash3DraftModel does not declare it (its Describe lists: draft)`
		if !errors.Is(err, manifests.ErrCapability) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve = %v\nwant %s", err, want)
		}
	})
	t.Run("a plugin architecture named without its checksum", func(t *testing.T) {
		r := fakes(t)
		if err := r.AddPlugin("acme-dflash3", describe(model.CapDraft, model.CapBlockDraft)); err != nil {
			t.Fatal(err)
		}
		m := writeManifest(t, pair(qwen, dtCaps, ``, dflash, blockCaps, `architecture = "DFlash3DraftModel"`))
		_, err := manifests.Resolve(ctx, m, r, manifests.Options{})
		want := `m.toml:9: [draft] architecture "DFlash3DraftModel" is served by plugin "acme-dflash3"; name it with plugin = "acme-dflash3" and the binary's checksum sha256 = "..."`
		if !errors.Is(err, manifests.ErrPlugin) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve = %v\nwant %s", err, want)
		}
	})
	t.Run("a plugin that does not serve the architecture", func(t *testing.T) {
		var calls []string
		other := describe(model.CapDraft)
		other[0].Name = "Something"
		_, err := manifests.Resolve(ctx, writeManifest(t, doc), fakes(t), manifests.Options{LoadPlugin: load(other, &calls)})
		want := `m.toml:9: [draft] plugin "acme-dflash3" does not serve architecture "DFlash3DraftModel" — it serves Something`
		if !errors.Is(err, manifests.ErrArchitecture) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve = %v\nwant %s", err, want)
		}
	})
	// A plugin may serve an architecture under a built-in's name (the dflash
	// example plugin serves DFlashDraftModel out of process): a manifest that
	// names the plugin gets the plugin's entry, one that does not gets the
	// built-in, in the same program.
	t.Run("a plugin serving a built-in's name", func(t *testing.T) {
		r := fakes(t)
		var calls []string
		same := describe(model.CapDraft, model.CapBlockDraft)
		same[0].Name = "DFlashDraftModel"
		loadSame := func(_ context.Context, name, sum string, reg *registry.Registry) error {
			calls = append(calls, name)
			if _, err := reg.LookupPlugin(name, same[0].Name); err == nil {
				return nil
			}
			return reg.AddPlugin(name, same)
		}
		opts := manifests.Options{LoadPlugin: loadSame}
		for _, tt := range []struct {
			name, draftExtra, wantSource string
			proxy                        bool
		}{
			{"architecture from config.json, plugin named", "plugin = \"dflash\"\nsha256 = \"" + sha + "\"", "plugin dflash", true},
			{"no plugin named: the built-in", "", registry.SourceBuiltin, false},
			{"architecture named, plugin named", "architecture = \"DFlashDraftModel\"\nplugin = \"dflash\"\nsha256 = \"" + sha + "\"", "plugin dflash", true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				p, err := manifests.Resolve(ctx, writeManifest(t, pair(qwen, dtCaps, ``, dflash, blockCaps, tt.draftExtra)), r, opts)
				if err != nil {
					t.Fatal(err)
				}
				d := p.Draft
				if d.Architecture != "DFlashDraftModel" || d.Source != tt.wantSource {
					t.Errorf("draft %s from %q; want DFlashDraftModel from %q", d.Architecture, d.Source, tt.wantSource)
				}
				if _, isProxy := d.Instance().(*proxy); isProxy != tt.proxy {
					t.Errorf("Instance() = %T", d.Instance())
				}
			})
		}
		if !slices.Equal(calls, []string{"dflash", "dflash"}) {
			t.Errorf("LoadPlugin calls = %q", calls)
		}
	})
	t.Run("an architecture another plugin serves", func(t *testing.T) {
		r := fakes(t)
		if err := r.AddPlugin("acme-dflash3", describe(model.CapDraft, model.CapBlockDraft)); err != nil {
			t.Fatal(err)
		}
		noop := func(context.Context, string, string, *registry.Registry) error { return nil }
		m := writeManifest(t, pair(qwen, dtCaps, ``, dflash, blockCaps, "architecture = \"DFlash3DraftModel\"\nplugin = \"other\"\nsha256 = \""+sha+"\""))
		_, err := manifests.Resolve(ctx, m, r, manifests.Options{LoadPlugin: noop})
		want := `m.toml:10: [draft] plugin "other" does not serve architecture "DFlash3DraftModel" — it serves no architectures; plugin acme-dflash3 serves that name: set plugin = "acme-dflash3" and its sha256 to use it`
		if !errors.Is(err, manifests.ErrPlugin) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve = %v\nwant %s", err, want)
		}
	})
	t.Run("a target served by a plugin", func(t *testing.T) {
		r := fakes(t)
		r.AddPlugin("acme", []registry.PluginArch{{Name: "PluginTarget", Kind: registry.KindTarget, Capabilities: model.Capabilities{model.CapModel},
			New: func(registry.Config) (any, error) { return &proxy{}, nil }}})
		m := writeManifest(t, lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", qwen), `capabilities = ["model"]`, `architecture = "PluginTarget"`))
		_, err := manifests.Resolve(ctx, m, r, manifests.Options{})
		want := `m.toml:5: [target] architecture "PluginTarget" is served by plugin "acme"; plugins serve drafts only`
		if !errors.Is(err, manifests.ErrPlugin) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve = %v\nwant %s", err, want)
		}
	})
}

func TestResolveDefaultRegistry(t *testing.T) {
	const name = "ManifestsTestOnlyTarget"
	registry.RegisterTarget(name, nil, registrytest.NewTarget)
	m := writeManifest(t, lines(`schema = 1`, `[target]`, fmt.Sprintf("path = %q", fixtures.Dir(t, "qwen35-tiny")),
		`architecture = "`+name+`"`, `capabilities = ["model"]`))
	p, err := manifests.Resolve(ctx, m, nil, manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Target.Architecture != name || p.Target.Type != "*registrytest.Target" {
		t.Errorf("plan = %+v", p.Target.Component)
	}
}

// TestResolveTargetOnly: with TargetOnly the [draft] is not touched — a
// missing folder, an unknown architecture or a plugin that cannot start do
// not matter, and no plugin is launched — and the plan has no draft.
func TestResolveTargetOnly(t *testing.T) {
	qwen := fixtures.Dir(t, "qwen35-tiny")
	broken := []struct{ name, draft string }{
		{"missing folder", pair(qwen, dtCaps, ``, filepath.Join(t.TempDir(), "absent"), blockCaps, ``)},
		{"unknown architecture", pair(qwen, dtCaps, ``, ckpt(t, draftConfig("NoSuchDraft", ""), nil), blockCaps, ``)},
		{"plugin", pair(qwen, dtCaps, ``, fixtures.Dir(t, "dflash-tiny"), blockCaps,
			"plugin = \"acme\"\nsha256 = \""+strings.Repeat("c", 64)+"\"", "[speculation]", "max_depth = 4")},
	}
	for _, c := range broken {
		t.Run(c.name, func(t *testing.T) {
			m := writeManifest(t, c.draft)
			calls := 0
			opts := manifests.Options{LoadPlugin: func(context.Context, string, string, *registry.Registry) error {
				calls++
				return errors.New("the plugin fails to start")
			}}
			if _, err := manifests.Resolve(ctx, m, fakes(t), opts); err == nil {
				t.Fatal("the broken draft resolved without TargetOnly")
			}
			calls = 0
			opts.TargetOnly = true
			p, err := manifests.Resolve(ctx, m, fakes(t), opts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Draft != nil || calls != 0 || p.Speculation.Mode != manifests.ModeOff || len(p.Warnings) != 0 {
				t.Fatalf("draft %+v, %d LoadPlugin calls, mode %v, warnings %q", p.Draft, calls, p.Speculation.Mode, p.Warnings)
			}
			if err := p.Ready(); err != nil || p.Target.Architecture != "Qwen3_5ForCausalLM" {
				t.Fatalf("target %q, ready: %v", p.Target.Architecture, err)
			}
		})
	}
}

// userProxy stands for the plugin host's proxy, which is a model.TargetUser
// for every plugin draft.
type userProxy struct{}

func (*userProxy) AttachTarget(model.DraftTarget) error { return nil }
