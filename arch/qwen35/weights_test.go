package qwen35_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/registry"
)

// modelWith builds the fixture model with config.json changed by edit and
// loads tensors, returning the load error.
func modelWith(t *mlxtest.T, f *qwen35test.Fixture, edit func(map[string]any), tensors map[string]*mlx.Array) (*qwen35.Model, error) {
	t.Helper()
	var cfg map[string]any
	t.NoErr(json.Unmarshal(f.Config, &cfg))
	if edit != nil {
		edit(cfg)
	}
	raw, err := json.Marshal(cfg)
	t.NoErr(err)
	v, _, err := registry.Default.Build("Qwen3_5ForCausalLM", registry.Config{Dir: f.Dir, JSON: raw, DType: mlx.Float32})
	t.NoErr(err)
	m := v.(*qwen35.Model)
	return m, m.LoadWeights(tensors)
}

// promptLogits runs the fixture prompt through m with fresh caches.
func promptLogits(t *mlxtest.T, f *qwen35test.Fixture, m *qwen35.Model) *mlx.Array {
	caches := m.NewCaches()
	defer freeCaches(caches)
	l, _ := step(m, caches, f.Ref.PromptIDs)
	t.Eval(l)
	return l
}

// sameLogits fails unless m reproduces the reference prompt logits.
func sameLogits(t *mlxtest.T, f *qwen35test.Fixture, name string, m *qwen35.Model) {
	t.Helper()
	if d := maxAbs(t, promptLogits(t, f, m), f.RefTensor(t, "logits")); d > logitTol {
		t.Errorf("%s: prompt logits off by %.3g", name, d)
	}
}

func TestLoadWeightsReportsEveryProblemAtOnce(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		ts := maps.Clone(f.Tensors(t))
		delete(ts, "model.layers.0.linear_attn.A_log")
		delete(ts, "model.layers.3.self_attn.k_norm.weight")
		ts["model.layers.3.self_attn.q_proj.weight"] = mlx.Zeros(mlx.Float32, 128, 64) // per-head gate missing
		ts["model.layers.1.mlp.up_proj.weight"] = mlx.Zeros(mlx.Int32, 128, 64)
		for i := range 12 {
			ts[fmt.Sprintf("model.layers.%d.extra.weight", i)] = mlx.Zeros(mlx.Float32, 1)
		}
		_, err := modelWith(t, f, nil, ts)
		var we *qwen35.WeightsError
		if !errors.As(err, &we) {
			t.Fatalf("error %v, want a *WeightsError", err)
		}
		if fmt.Sprint(we.Missing) != "[model.layers.0.linear_attn.A_log model.layers.3.self_attn.k_norm.weight]" ||
			len(we.Mismatched) != 2 || len(we.Unexpected) != 12 {
			t.Fatalf("missing %v, mismatched %v, unexpected %v", we.Missing, we.Mismatched, we.Unexpected)
		}
		msg := err.Error()
		for _, want := range []string{
			"model.layers.3.self_attn.q_proj.weight is [128 64], want [256 64]",
			"model.layers.1.mlp.up_proj.weight has dtype int32",
			"12 unexpected: model.layers.0.extra.weight",
			"(and 2 more)",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("error does not mention %q:\n%s", want, msg)
			}
		}
	})
}

func TestLoadWeightsConditionalGenerationLayout(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		ts := map[string]*mlx.Array{
			"model.visual.blocks.0.attn.qkv.weight": mlx.Zeros(mlx.Float32, 3, 3),
			"mtp.fc.weight":                         mlx.Zeros(mlx.Float32, 3, 3),
		}
		for name, a := range f.Tensors(t) {
			ts["model.language_model."+strings.TrimPrefix(name, "model.")] = a
		}
		m, err := modelWith(t, f, nil, ts)
		t.NoErr(err)
		sameLogits(t, f, "model.language_model. prefix with vision and mtp tensors", m)
	})
}

// Converted checkpoints (mlx-lm) store conv1d as [C, Kc, 1] and the norms
// already shifted; 2-D conv weights are raw when mtp tensors exist.
func TestLoadWeightsNormShiftDetection(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		shiftable := []string{"input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight", "model.norm.weight"}
		converted, flat := map[string]*mlx.Array{}, map[string]*mlx.Array{"mtp.norm.weight": mlx.Zeros(mlx.Float32, 64)}
		for name, a := range f.Tensors(t) {
			converted[name], flat[name] = a, a
			if strings.HasSuffix(name, "conv1d.weight") {
				converted[name] = mlx.Transpose(a, 0, 2, 1)
				flat[name] = mlx.Reshape(a, a.Dim(0), a.Dim(2))
			}
			for _, s := range shiftable {
				if strings.HasSuffix(name, s) {
					converted[name] = mlx.AddScalar(a, 1)
				}
			}
		}
		m, err := modelWith(t, f, nil, converted)
		t.NoErr(err)
		sameLogits(t, f, "converted: conv [C, Kc, 1], norms already 1+w", m)
		m, err = modelWith(t, f, nil, flat)
		t.NoErr(err)
		sameLogits(t, f, "conv [C, Kc] with mtp tensors", m)
	})
}

func TestLoadWeightsHeads(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		head := mlx.RandomNormal(mlx.RandomKey(7), mlx.Float32, 0, 0.1, 512, 64)
		withHead := maps.Clone(f.Tensors(t))
		withHead["lm_head.weight"] = head

		// Tied: a present lm_head.weight is ignored.
		m, err := modelWith(t, f, nil, withHead)
		t.NoErr(err)
		sameLogits(t, f, "tied with an lm_head.weight present", m)

		// Untied: the head is lm_head.weight.
		untie := func(c map[string]any) { c["tie_word_embeddings"] = false }
		m, err = modelWith(t, f, untie, withHead)
		t.NoErr(err)
		caches := m.NewCaches()
		defer freeCaches(caches)
		hidden, _ := m.Forward(batch(f.Ref.PromptIDs, 0), caches)
		want := mlx.Matmul(hidden, mlx.Transpose(head, 1, 0))
		if d := maxAbs(t, m.Unembed(hidden), want); d > 1e-5 {
			t.Errorf("untied head: logits off by %g", d)
		}
		// Untied without lm_head.weight falls back to the embedding table.
		m, err = modelWith(t, f, untie, f.Tensors(t))
		t.NoErr(err)
		sameLogits(t, f, "untied without lm_head.weight", m)
		// A wrongly shaped lm_head is reported.
		withHead["lm_head.weight"] = mlx.Zeros(mlx.Float32, 511, 64)
		if _, err = modelWith(t, f, untie, withHead); err == nil || !strings.Contains(err.Error(), "lm_head.weight is [511 64], want [512 64]") {
			t.Errorf("bad lm_head: %v", err)
		}
	})
}

func TestLoadWeightsAttentionBias(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		bias := func(c map[string]any) { c["attention_bias"] = true }
		_, err := modelWith(t, f, bias, f.Tensors(t))
		var we *qwen35.WeightsError
		if !errors.As(err, &we) || len(we.Missing) != 4 || !strings.HasSuffix(we.Missing[0], "self_attn.q_proj.bias") {
			t.Fatalf("attention_bias without biases: %v", err)
		}
		ts := maps.Clone(f.Tensors(t))
		p := "model.layers.3.self_attn."
		for name, n := range map[string]int{"q_proj": 256, "k_proj": 64, "v_proj": 64, "o_proj": 64} {
			ts[p+name+".bias"] = mlx.Zeros(mlx.Float32, n)
		}
		m, err := modelWith(t, f, bias, ts)
		t.NoErr(err)
		sameLogits(t, f, "zero attention biases", m)
		// A non-zero o_proj bias moves the logits.
		ts[p+"o_proj.bias"] = mlx.Full(0.5, mlx.Float32, 64)
		m, err = modelWith(t, f, bias, ts)
		t.NoErr(err)
		if d := maxAbs(t, promptLogits(t, f, m), f.RefTensor(t, "logits")); d < 1e-2 {
			t.Errorf("an o_proj bias of 0.5 changed the logits by only %g", d)
		}
	})
}

func TestLoadWeightsRejectsFusedProjections(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		ts := maps.Clone(f.Tensors(t))
		ts["model.layers.0.linear_attn.in_proj_qkvz.weight"] = mlx.Zeros(mlx.Float32, 192, 64)
		_, err := modelWith(t, f, nil, ts)
		if err == nil || !strings.Contains(err.Error(), "Qwen3-Next style fused projection") {
			t.Errorf("fused projection: %v", err)
		}
		_, err = modelWith(t, f, nil, map[string]*mlx.Array{"transformer.wte.weight": mlx.Zeros(mlx.Float32, 2, 2)})
		if err == nil || !strings.Contains(err.Error(), "embed_tokens.weight") || !strings.Contains(err.Error(), "transformer.wte.weight") {
			t.Errorf("foreign checkpoint: %v", err)
		}
	})
}

// A checkpoint that is half converted cannot be loaded safely: whether to add
// 1 to the norms (and how to read conv1d) would differ between its parts. Both
// ways of being half converted are refused, naming the tensors and the fix.
func TestLoadWeightsRefusesMixedLayouts(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		// Layer 1's conv1d as mlx-lm stores it ([C, Kc, 1]), layers 0 and 2
		// still as Hugging Face does ([C, 1, Kc]).
		halfConv := maps.Clone(f.Tensors(t))
		w := halfConv["model.layers.1.linear_attn.conv1d.weight"]
		halfConv["model.layers.1.linear_attn.conv1d.weight"] = mlx.Transpose(w, 0, 2, 1)

		// An MLX-named embedding beside the Hugging Face one (a second
		// download into the same folder).
		bothNames := maps.Clone(f.Tensors(t))
		bothNames["language_model.model.embed_tokens.weight"] = bothNames["model.embed_tokens.weight"]

		for _, tt := range []struct {
			name    string
			tensors map[string]*mlx.Array
			want    []string
		}{
			{"conv1d half converted", halfConv, []string{
				"mixes converted and unconverted tensors", "linear_attn.conv1d.weight of layers [0 2] is [C, 1, Kc]",
				"layers [1] is [C, Kc, 1]", "convert the whole checkpoint again from the original"}},
			{"HF and MLX names", bothNames, []string{
				"mixes layouts", "model.embed_tokens.weight (Hugging Face)",
				"language_model.model.embed_tokens.weight (MLX (mlx-lm module paths))", "remove the stray files, or download it again"}},
		} {
			_, err := modelWith(t, f, nil, tt.tensors)
			if err == nil {
				t.Errorf("%s: loaded; want an error", tt.name)
				continue
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", tt.name, err, w)
				}
			}
		}
	})
}
