package dflash2

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

// edit returns the dflash2-tiny config with fn applied (dflash_config as dc).
func edit(t testing.TB, fn func(top, dc map[string]any)) []byte {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(dflashtest.Load(t, "dflash2-tiny").Config, &top); err != nil {
		t.Fatal(err)
	}
	if fn != nil {
		fn(top, top["dflash_config"].(map[string]any))
	}
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseFixtureConfig(t *testing.T) {
	cfg, err := ParseConfig(edit(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConvKernel != 2 || cfg.ConvGroup != 16 || cfg.ConvGroups() != 4 || cfg.SelectorRank != 8 || cfg.SelectorTopK != 4 ||
		cfg.HiddenSize != 64 || cfg.BlockSize != 8 || cfg.MaskTokenID != 510 {
		t.Errorf("parsed %+v", cfg)
	}
	// Variant 3 of spec/dflash.md section 6: every layer sliding (16) and
	// non-causal.
	for l := range cfg.NumLayers {
		if w, causal := cfg.Attention(l); w != 16 || causal {
			t.Errorf("layer %d: window %d causal %t, want 16 and non-causal", l, w, causal)
		}
	}
	cfg, err = ParseConfig(edit(t, func(top, dc map[string]any) {
		dc["output_multiplier"] = 0.19611613513818404
		dc["final_logit_softcapping"] = 20
		dc["input_embedding_scale"] = 8
	}))
	if err != nil || cfg.OutputMultiplier != 0.19611613513818404 || cfg.FinalLogitSoftcap != 20 || cfg.InputEmbeddingScale != 8 {
		t.Errorf("scales: %v %+v", err, cfg)
	}
}

// Every rule of spec/dflash2.md section 4, each broken alone.
func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(top, dc map[string]any)
		field string
	}{
		{"conv_kernel_size missing", func(top, dc map[string]any) { delete(dc, "conv_kernel_size") }, "conv_kernel_size"},
		{"conv_kernel_size zero", func(top, dc map[string]any) { dc["conv_kernel_size"] = 0 }, "conv_kernel_size"},
		{"conv_group_size missing", func(top, dc map[string]any) { delete(dc, "conv_group_size") }, "conv_group_size"},
		{"conv_group_size negative", func(top, dc map[string]any) { dc["conv_group_size"] = -16 }, "conv_group_size"},
		{"conv_group_size does not divide hidden_size", func(top, dc map[string]any) { dc["conv_group_size"] = 24 }, "does not divide hidden_size = 64"},
		{"selector_rank missing", func(top, dc map[string]any) { delete(dc, "selector_rank") }, "selector_rank"},
		{"selector_rank zero", func(top, dc map[string]any) { dc["selector_rank"] = 0 }, "selector_rank"},
		{"selector_top_k missing", func(top, dc map[string]any) { delete(dc, "selector_top_k") }, "selector_top_k"},
		{"selector_top_k zero", func(top, dc map[string]any) { dc["selector_top_k"] = 0 }, "selector_top_k"},
		{"selector_top_k above the vocabulary", func(top, dc map[string]any) { dc["selector_top_k"] = 513 }, "[1, vocab_size = 512]"},
		{"vocab_size missing (the codebooks need it)", func(top, dc map[string]any) { delete(top, "vocab_size") }, "vocab_size"},
		{"a DFlash rule (block size) still applies", func(top, dc map[string]any) { dc["block_size"] = 1 }, "block_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(edit(t, tc.edit))
			var ce *dflash.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *dflash.ConfigError", err)
			}
			if len(ce.Problems) != 1 || !strings.Contains(ce.Problems[0], tc.field) {
				t.Errorf("problems %q, want exactly one naming %q", ce.Problems, tc.field)
			}
		})
	}
	// DFlash's and DFlash2's problems come together.
	_, err := ParseConfig(edit(t, func(top, dc map[string]any) {
		top["hidden_act"] = "gelu"
		delete(dc, "selector_rank")
	}))
	var ce *dflash.ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Errorf("got %v, want two problems", err)
	}
}

// The shapes of the two released DFlash2 checkpoints (spec/dflash2.md
// section 5) follow from their configs. Fields the spec does not record
// (Muse Glimmer's heads, MLP width and mask token) are placeholders that no
// checked shape depends on.
func TestReleasedShapes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		shapes map[string][]uint64
	}{
		{"incoai/Qwen3.8-27B-DFlash2", `{"architectures":["DFlash2DraftModel"],"hidden_size":5120,"num_hidden_layers":5,
			"num_attention_heads":40,"num_key_value_heads":8,"head_dim":128,"intermediate_size":17408,"vocab_size":248320,
			"rms_norm_eps":1e-6,"hidden_act":"silu","rope_theta":10000000,"num_target_layers":64,"is_causal":false,
			"layer_types":["sliding_attention","sliding_attention","sliding_attention","sliding_attention","sliding_attention"],
			"sliding_window":2048,"block_size":8,"dflash_config":{"block_size":8,"mask_token_id":248070,
			"target_layer_ids":[5,19,33,47,61],"conv_kernel_size":2,"conv_group_size":16,"selector_rank":256,"selector_top_k":16}}`,
			map[string][]uint64{
				"fc.weight":                                   {5120, 25600},
				"layers.0.attention_conv.base_kernel":         {2, 2, 5120},
				"layers.4.mlp_conv.kernel_projection.weight":  {1280, 5120},
				"candidate_selector.predecessor_codebook":     {248320, 256},
				"candidate_selector.hidden_projection.weight": {256, 5120},
			}},
		{"incoai/Muse-Glimmer-30B-DFlash2", `{"architectures":["DFlash2DraftModel"],"hidden_size":6656,"num_hidden_layers":5,
			"num_attention_heads":52,"num_key_value_heads":4,"head_dim":128,"intermediate_size":17920,"vocab_size":202048,
			"rms_norm_eps":1e-5,"hidden_act":"silu","rope_parameters":{"rope_type":"default","rope_theta":500000},
			"num_target_layers":52,"output_multiplier":0.19611613513818404,"final_logit_softcapping":20,
			"dflash_config":{"block_size":16,"mask_token_id":200000,"target_layer_ids":[1,13,25,37,49],
			"conv_kernel_size":2,"conv_group_size":16,"selector_rank":256,"selector_top_k":16}}`,
			map[string][]uint64{
				"fc.weight":                                        {6656, 33280},
				"layers.0.attention_conv.base_kernel":              {2, 2, 6656},
				"layers.2.attention_conv.kernel_projection.weight": {1664, 6656},
				"candidate_selector.successor_codebook":            {202048, 256},
				"candidate_selector.hidden_projection.weight":      {256, 6656},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			spec := WeightSpec(cfg)
			if n := len(spec.Tensors); n != 3+15*5+3 {
				t.Errorf("%d tensors, want 3 + 15·N + 3 = 81", n)
			}
			for name, want := range tc.shapes {
				i := slices.IndexFunc(spec.Tensors, func(x loader.Expect) bool { return x.Name == name })
				if i < 0 {
					t.Errorf("no tensor %s", name)
				} else if got := spec.Tensors[i].Shape; !slices.Equal(got, want) {
					t.Errorf("%s is %v, want %v", name, got, want)
				}
			}
		})
	}
}

// Registration: DFlash2DraftModel has the three draft capabilities, DFlash
// the two without the selector.
func TestRegistration(t *testing.T) {
	for name, want := range map[string]model.Capabilities{
		ArchName:        {model.CapDraft, model.CapBlockDraft, model.CapSelector},
		dflash.ArchName: {model.CapDraft, model.CapBlockDraft},
	} {
		e, err := registry.Default.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind != registry.KindDraft || fmt.Sprint(e.Capabilities) != fmt.Sprint(want) {
			t.Errorf("%s: %s with [%s], want a draft with [%s]", name, e.Kind, e.Capabilities, want)
		}
	}
}
