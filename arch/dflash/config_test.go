package dflash

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
)

// edit returns the dflash-tiny config with fn applied to its JSON object
// (dflash_config as the map "dc").
func edit(t testing.TB, fn func(top, dc map[string]any)) []byte {
	t.Helper()
	f := dflashtest.Load(t, "dflash-tiny")
	var top map[string]any
	if err := json.Unmarshal(f.Config, &top); err != nil {
		t.Fatal(err)
	}
	dc := top["dflash_config"].(map[string]any)
	if fn != nil {
		fn(top, dc)
	}
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseFixtureConfig(t *testing.T) {
	cfg, err := ParseConfig(dflashtest.Load(t, "dflash-tiny").Config)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HiddenSize != 64 || cfg.NumLayers != 2 || cfg.NumHeads != 4 || cfg.NumKVHeads != 2 || cfg.HeadDim != 16 ||
		cfg.IntermediateSize != 128 || cfg.VocabSize != 512 || cfg.BlockSize != 8 || cfg.MaskTokenID != 510 ||
		!slices.Equal(cfg.TargetLayerIDs, []int{0, 2}) || cfg.NumTargetLayers != 4 || cfg.RopeTheta != 1e7 ||
		cfg.RopeInterleaved || cfg.SlidingWindow != 8 || cfg.Causal != nil || cfg.RMSNormEps != 1e-6 ||
		cfg.InputEmbeddingScale != 1 || cfg.OutputMultiplier != 1 || cfg.FinalLogitSoftcap != 0 || cfg.FeatureSize() != 128 {
		t.Errorf("parsed %+v", cfg)
	}
	// The fixture's per-layer semantics (README): layer 0 sliding causal
	// with window 8, layer 1 full non-causal.
	for l, want := range []struct {
		window int
		causal bool
	}{{8, true}, {0, false}} {
		if w, c := cfg.Attention(l); w != want.window || c != want.causal {
			t.Errorf("layer %d: window %d causal %t, want %d %t", l, w, c, want.window, want.causal)
		}
	}
}

// Both schemas and mixtures of them parse to the same values.
func TestConfigSchemas(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(top, dc map[string]any)
		check func(*Config) bool
	}{
		{"legacy: top-level block_size and rope_theta only", func(top, dc map[string]any) {
			delete(dc, "block_size")
		}, func(c *Config) bool { return c.BlockSize == 8 && c.RopeTheta == 1e7 }},
		{"nested: dflash_config.block_size and rope_parameters", func(top, dc map[string]any) {
			delete(top, "block_size")
			delete(top, "rope_theta")
			top["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1e6}
			delete(top, "num_target_layers")
			dc["num_target_layers"] = 4
		}, func(c *Config) bool { return c.BlockSize == 8 && c.RopeTheta == 1e6 && c.NumTargetLayers == 4 }},
		{"nested block size wins over the top-level one", func(top, dc map[string]any) {
			top["block_size"] = 16
			dc["block_size"] = 4
		}, func(c *Config) bool { return c.BlockSize == 4 }},
		{"rope theta in both schemas, equal", func(top, dc map[string]any) {
			top["rope_parameters"] = map[string]any{"rope_theta": 1e7}
		}, func(c *Config) bool { return c.RopeTheta == 1e7 }},
		{"no layer_types and no sliding: all full non-causal", func(top, dc map[string]any) {
			delete(top, "layer_types")
			top["use_sliding_window"] = false
			top["sliding_window"] = nil
		}, func(c *Config) bool {
			w0, c0 := c.Attention(0)
			w1, c1 := c.Attention(1)
			return w0 == 0 && w1 == 0 && !c0 && !c1 && c.SlidingWindow == 0
		}},
		{"layer_types decide whatever use_sliding_window says", func(top, dc map[string]any) {
			top["use_sliding_window"] = false
		}, func(c *Config) bool { w, causal := c.Attention(0); return w == 8 && causal }},
		{"is_causal false applies to every layer", func(top, dc map[string]any) {
			top["is_causal"] = false
		}, func(c *Config) bool { _, c0 := c.Attention(0); _, c1 := c.Attention(1); return !c0 && !c1 }},
		{"dflash_config.causal true applies to every layer", func(top, dc map[string]any) {
			dc["causal"] = true
		}, func(c *Config) bool { _, c0 := c.Attention(0); _, c1 := c.Attention(1); return c0 && c1 }},
		{"scales from dflash_config", func(top, dc map[string]any) {
			dc["output_multiplier"] = 0.5
			dc["final_logit_softcapping"] = 20
			dc["input_embedding_scale"] = 2
		}, func(c *Config) bool {
			return c.OutputMultiplier == 0.5 && c.FinalLogitSoftcap == 20 && c.InputEmbeddingScale == 2
		}},
		{"scales from the top level", func(top, dc map[string]any) {
			top["output_multiplier"] = 0.25
			top["final_logit_softcapping"] = nil
		}, func(c *Config) bool { return c.OutputMultiplier == 0.25 && c.FinalLogitSoftcap == 0 }},
		{"rope_interleaved", func(top, dc map[string]any) { top["rope_interleaved"] = true },
			func(c *Config) bool { return c.RopeInterleaved }},
		{"head_dim defaults to hidden / heads", func(top, dc map[string]any) { delete(top, "head_dim") },
			func(c *Config) bool { return c.HeadDim == 16 }},
		{"rope_scaling null is no scaling", func(top, dc map[string]any) { top["rope_scaling"] = nil },
			func(c *Config) bool { return true }},
		{"vocab_size may be absent", func(top, dc map[string]any) { delete(top, "vocab_size") },
			func(c *Config) bool { return c.VocabSize == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(edit(t, tc.edit))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Errorf("parsed %+v", cfg)
			}
		})
	}
}

// Every rule of spec/dflash.md 2 and 3.1, each broken alone: the error
// names the field.
func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(top, dc map[string]any)
		field string // the error must mention it
	}{
		{"3.1.1 block size below 2", func(top, dc map[string]any) { dc["block_size"] = 1 }, "block_size"},
		{"block size missing from both schemas", func(top, dc map[string]any) { delete(top, "block_size"); delete(dc, "block_size") }, "block_size"},
		{"3.1.2 heads not divisible", func(top, dc map[string]any) { top["num_key_value_heads"] = 3 }, "num_key_value_heads"},
		{"3.1.2 head_dim zero", func(top, dc map[string]any) { top["head_dim"] = 0 }, "head_dim"},
		{"3.1.2 activation other than silu", func(top, dc map[string]any) { top["hidden_act"] = "gelu" }, "hidden_act"},
		{"3.1.3 layer_types too short", func(top, dc map[string]any) { top["layer_types"] = []string{"full_attention"} }, "layer_types"},
		{"3.1.3 unknown layer type", func(top, dc map[string]any) {
			top["layer_types"] = []string{"sliding_attention", "linear_attention"}
		}, "layer_types"},
		{"3.1.3 sliding layer without a window", func(top, dc map[string]any) { top["sliding_window"] = nil }, "sliding_window"},
		{"3.1.3 sliding layer with window 0", func(top, dc map[string]any) { top["sliding_window"] = 0 }, "sliding_window"},
		{"3.1.3 use_sliding_window without layer_types", func(top, dc map[string]any) { delete(top, "layer_types") }, "use_sliding_window"},
		{"3.1.4 is_causal and dflash_config.causal disagree", func(top, dc map[string]any) {
			top["is_causal"] = true
			dc["causal"] = false
		}, "is_causal"},
		{"rope theta in both schemas, different", func(top, dc map[string]any) {
			top["rope_parameters"] = map[string]any{"rope_theta": 1e6}
		}, "rope_theta"},
		{"rope theta missing", func(top, dc map[string]any) { delete(top, "rope_theta") }, "rope_theta"},
		{"rope type other than default", func(top, dc map[string]any) {
			top["rope_parameters"] = map[string]any{"rope_type": "yarn", "rope_theta": 1e7}
		}, "rope_type"},
		{"rope_scaling other than default", func(top, dc map[string]any) {
			top["rope_scaling"] = map[string]any{"type": "linear", "factor": 2}
		}, "rope_scaling"},
		{"mask token missing", func(top, dc map[string]any) { delete(dc, "mask_token_id") }, "mask_token_id"},
		{"mask token negative", func(top, dc map[string]any) { dc["mask_token_id"] = -1 }, "mask_token_id"},
		{"taps missing", func(top, dc map[string]any) { delete(dc, "target_layer_ids") }, "target_layer_ids"},
		{"attention bias", func(top, dc map[string]any) { top["attention_bias"] = true }, "attention_bias"},
		{"hidden size missing", func(top, dc map[string]any) { delete(top, "hidden_size") }, "hidden_size"},
		{"num_target_layers in both places, different", func(top, dc map[string]any) { dc["num_target_layers"] = 5 }, "num_target_layers"},
		{"output multiplier in both places, different", func(top, dc map[string]any) {
			top["output_multiplier"] = 1
			dc["output_multiplier"] = 2
		}, "output_multiplier"},
		{"negative soft-cap", func(top, dc map[string]any) { top["final_logit_softcapping"] = -3 }, "final_logit_softcapping"},
		{"zero embedding scale", func(top, dc map[string]any) { dc["input_embedding_scale"] = 0 }, "input_embedding_scale"},
		{"rms_norm_eps out of range", func(top, dc map[string]any) { top["rms_norm_eps"] = 0 }, "rms_norm_eps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(edit(t, tc.edit))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if len(ce.Problems) != 1 || !strings.Contains(ce.Problems[0], tc.field) {
				t.Errorf("problems %q, want exactly one naming %q", ce.Problems, tc.field)
			}
		})
	}
}

// Several problems are reported at once.
func TestConfigReportsEveryProblem(t *testing.T) {
	_, err := ParseConfig(edit(t, func(top, dc map[string]any) {
		dc["block_size"] = 1
		top["hidden_act"] = "relu"
		delete(dc, "mask_token_id")
	}))
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("got %v, want three problems", err)
	}
	if _, err := ParseConfig([]byte("{")); err == nil {
		t.Error("malformed JSON accepted")
	}
}
