package loader_test

import (
	"strings"
	"testing"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

func TestParseQuantization(t *testing.T) {
	a4 := mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 64}
	for _, c := range []struct {
		name    string
		config  string
		want    *loader.Quantization
		wantErr string
	}{
		{name: "absent", config: `{"hidden_size": 8}`},
		{name: "null", config: `{"quantization": null}`},
		{
			name:   "mlx-lm 4-bit",
			config: `{"quantization": {"group_size": 64, "bits": 4, "mode": "affine"}, "quantization_config": {"group_size": 64, "bits": 4, "mode": "affine"}}`,
			want:   &loader.Quantization{Default: a4, Modules: map[string]mlx.Quant{}},
		},
		{
			name:   "older mlx-lm: no mode means affine",
			config: `{"quantization": {"group_size": 32, "bits": 8}}`,
			want:   &loader.Quantization{Default: mlx.Quant{Mode: mlx.Affine, Bits: 8, GroupSize: 32}, Modules: map[string]mlx.Quant{}},
		},
		{
			name:   "only the quantization_config copy",
			config: `{"quantization_config": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}`,
			want:   &loader.Quantization{Default: mlx.Quant{Mode: mlx.MXFP4, Bits: 4, GroupSize: 32}, Modules: map[string]mlx.Quant{}},
		},
		{
			name:   "mode defaults for bits and group size",
			config: `{"quantization": {"mode": "nvfp4"}}`,
			want:   &loader.Quantization{Default: mlx.Quant{Mode: mlx.NVFP4, Bits: 4, GroupSize: 16}, Modules: map[string]mlx.Quant{}},
		},
		{
			name: "per-module overrides",
			config: `{"quantization": {"group_size": 64, "bits": 4, "mode": "affine",
				"language_model.model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
				"language_model.model.layers.1.self_attn.v_proj": {"bits": 6},
				"vision_tower.blocks.0.attn": false,
				"language_model.lm_head": true,
				"note": "ignored"}}`,
			want: &loader.Quantization{Default: a4, Modules: map[string]mlx.Quant{
				"language_model.model.layers.0.mlp.gate":         {Mode: mlx.Affine, Bits: 8, GroupSize: 64},
				"language_model.model.layers.1.self_attn.v_proj": {Mode: mlx.Affine, Bits: 6, GroupSize: 64},
				"vision_tower.blocks.0.attn":                     {},
				"language_model.lm_head":                         a4,
			}},
		},
		{name: "unsupported bits", config: `{"quantization": {"group_size": 64, "bits": 7}}`, wantErr: "7 bits"},
		{name: "bad group for mode", config: `{"quantization": {"group_size": 64, "bits": 4, "mode": "mxfp4"}}`, wantErr: "mxfp4 needs 4 bits and group size 32"},
		{name: "unknown mode", config: `{"quantization": {"mode": "int4"}}`, wantErr: `unknown quantization mode "int4"`},
		{name: "bits not a number", config: `{"quantization": {"bits": "four"}}`, wantErr: "bits: want an integer"},
		{name: "bad override", config: `{"quantization": {"bits": 4, "group_size": 64, "a.b": {"group_size": 48}}}`, wantErr: `quantization["a.b"]`},
		{name: "not an object", config: `{"quantization": 4}`, wantErr: "quantization must be an object"},
		{name: "Hugging Face fp8", config: `{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}`, wantErr: `quant_method is "fp8"`},
		{name: "Hugging Face awq in text_config", config: `{"text_config": {"quantization_config": {"quant_method": "awq"}}}`, wantErr: `text_config.quantization_config.quant_method is "awq"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := loader.ParseQuantization("config.json", []byte(c.config))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.HasPrefix(err.Error(), "config.json: ") {
					t.Fatalf("error %v, want one naming config.json and containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (c.want == nil) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			if got == nil {
				return
			}
			if got.Default != c.want.Default || len(got.Modules) != len(c.want.Modules) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			for k, v := range c.want.Modules {
				if got.Modules[k] != v {
					t.Errorf("override %s = %+v, want %+v", k, got.Modules[k], v)
				}
				if got.For(k) != v {
					t.Errorf("For(%s) = %+v, want %+v", k, got.For(k), v)
				}
			}
			if got.For("not.overridden") != c.want.Default {
				t.Errorf("For of a module without override = %+v, want the default", got.For("x"))
			}
		})
	}
}

// FuzzParseQuantization: any config bytes give a section or an error naming
// the file, never a panic, and every parsed parameter set is valid.
func FuzzParseQuantization(f *testing.F) {
	f.Add([]byte(`{"quantization": {"group_size": 64, "bits": 4, "mode": "affine", "m.x": {"bits": 8}}}`))
	f.Add([]byte(`{"quantization_config": {"quant_method": "gptq"}}`))
	f.Add([]byte(`{"text_config": {"quantization_config": {"mode": "mxfp8"}}}`))
	f.Add([]byte(`{"quantization": {"a": false, "b": true, "c": {"mode": "nvfp4"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := loader.ParseQuantization("c.json", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "c.json: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if q == nil {
			return
		}
		if err := q.Default.Validate(); err != nil {
			t.Fatalf("default %+v is invalid: %v", q.Default, err)
		}
		for k, m := range q.Modules {
			if !m.IsZero() {
				if err := m.Validate(); err != nil {
					t.Fatalf("override %s %+v is invalid: %v", k, m, err)
				}
			}
		}
	})
}
