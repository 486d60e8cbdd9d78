package qwen35_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
)

func TestParseConfigFixture(t *testing.T) {
	f := loadTiny(t)
	c, err := qwen35.ParseConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s %s H%d L%d I%d heads %d/%d D%d V%d eps %g rope %d θ %g Hk%d Hv%d Dk%d Dv%d Kc%d conv %d tied %v types %v",
		c.Architecture, c.ModelType, c.HiddenSize, c.NumLayers, c.IntermediateSize, c.NumHeads, c.NumKVHeads, c.HeadDim, c.VocabSize,
		c.RMSNormEps, c.RopeDim(), c.RopeTheta, c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim, c.ConvKernel,
		c.ConvDim(), c.TieWordEmbeddings, c.LayerTypes)
	want := "Qwen3_5ForCausalLM qwen3_5_text H64 L4 I128 heads 4/2 D32 V512 eps 1e-06 rope 8 θ 1e+07 Hk2 Hv4 Dk16 Dv16 Kc4 conv 128 tied true " +
		"types [linear_attention linear_attention linear_attention full_attention]"
	if got != want {
		t.Errorf("parsed\n %s\nwant\n %s", got, want)
	}
	if c.MaxPositions != 4096 {
		t.Errorf("max positions %d", c.MaxPositions)
	}
}

// minimal is the smallest valid config: the required fields and θ.
func minimal() map[string]any {
	return map[string]any{
		"hidden_size": 512, "num_hidden_layers": 8, "intermediate_size": 1024,
		"num_attention_heads": 8, "vocab_size": 1000,
		"rope_parameters": map[string]any{"rope_theta": 1e7},
	}
}

func parse(t *testing.T, m map[string]any) (*qwen35.Config, error) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return qwen35.ParseConfig(b)
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parse(t, minimal())
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("kv %d D %d eps %g maxpos %d Hk %d Hv %d Dk %d Dv %d Kc %d partial %g rope %d tied %v bias %v",
		c.NumKVHeads, c.HeadDim, c.RMSNormEps, c.MaxPositions, c.LinearKeyHeads, c.LinearValueHeads,
		c.LinearKeyDim, c.LinearValueDim, c.ConvKernel, c.PartialRotaryFactor, c.RopeDim(), c.TieWordEmbeddings, c.AttentionBias)
	want := "kv 8 D 64 eps 1e-06 maxpos 32768 Hk 16 Hv 32 Dk 128 Dv 128 Kc 4 partial 0.25 rope 16 tied false bias false"
	if got != want {
		t.Errorf("defaults\n %s\nwant\n %s", got, want)
	}
	// Without layer_types every 4th layer (i+1 divisible by 4) is attention.
	var full []int
	for i := range c.NumLayers {
		if c.FullAttentionLayer(i) {
			full = append(full, i)
		}
	}
	if fmt.Sprint(full) != "[3 7]" {
		t.Errorf("attention layers %v, want [3 7]", full)
	}
	m := minimal()
	m["full_attention_interval"] = 2
	c, err = parse(t, m)
	if err != nil || !c.FullAttentionLayer(1) || c.FullAttentionLayer(2) {
		t.Errorf("full_attention_interval 2: %v, %v", err, c)
	}
}

func TestParseConfigTextConfigAndLegacyKeys(t *testing.T) {
	text := minimal()
	delete(text, "rope_parameters")
	text["rope_theta"] = 5e6            // legacy θ
	text["partial_rotary_factor"] = 0.5 // legacy factor
	top := map[string]any{
		"architectures":       []string{"Qwen3_5ForConditionalGeneration"},
		"model_type":          "qwen3_5",
		"tie_word_embeddings": true, // read from the top when text_config lacks it
		"hidden_size":         99,   // ignored: text_config wins
		"text_config":         text,
		"vision_config":       map[string]any{"depth": 27},
		"image_token_id":      248056,
	}
	c, err := parse(t, top)
	if err != nil {
		t.Fatal(err)
	}
	if c.HiddenSize != 512 || c.RopeTheta != 5e6 || c.RopeDim() != 32 || !c.TieWordEmbeddings || c.Architecture != "Qwen3_5ForConditionalGeneration" {
		t.Errorf("got H %d θ %g rope %d tied %v arch %s", c.HiddenSize, c.RopeTheta, c.RopeDim(), c.TieWordEmbeddings, c.Architecture)
	}
	text["tie_word_embeddings"] = false
	if c, err = parse(t, top); err != nil || c.TieWordEmbeddings {
		t.Errorf("text_config's tie_word_embeddings must win: %v %v", err, c)
	}
}

// TestParseConfigRopeScaling: transformers still reads the pre-v5 name
// rope_scaling, and when it is a non-empty object it replaces
// rope_parameters (configuration RotaryEmbeddingConfigMixin
// .convert_rope_params_to_dict, checked with transformers 5.17 on a saved
// Qwen3_5Config: rope_scaling {"rope_type": "yarn", ...} beside
// rope_parameters {"rope_type": "default", ...} loads as yarn). Its RoPE must
// be honoured, or refused when it is not the default kind; ignoring it ran
// plain RoPE where transformers runs YaRN.
func TestParseConfigRopeScaling(t *testing.T) {
	// rope_scaling alone, θ and the factor inside it, as Qwen3-VL era
	// writers save it.
	m := minimal()
	delete(m, "rope_parameters")
	m["rope_scaling"] = map[string]any{"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5,
		"mrope_section": []int{8, 4, 4}, "mrope_interleaved": true}
	c, err := parse(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 5e6 || c.RopeDim() != 32 {
		t.Errorf("rope_scaling: θ %g, rotated dims %d; want 5e+06 and 32 (64 · 0.5)", c.RopeTheta, c.RopeDim())
	}

	// rope_scaling with the legacy top-level θ beside it (Qwen3-VL's layout).
	m = minimal()
	delete(m, "rope_parameters")
	m["rope_theta"] = 5e6
	m["rope_scaling"] = map[string]any{"type": "default", "mrope_section": []int{8, 4, 4}}
	if c, err = parse(t, m); err != nil || c.RopeTheta != 5e6 {
		t.Errorf("rope_scaling with top-level rope_theta: %v, θ %v", err, c)
	}

	// An empty or null rope_scaling leaves rope_parameters in charge.
	for _, empty := range []any{map[string]any{}, nil} {
		m = minimal()
		m["rope_scaling"] = empty
		if c, err = parse(t, m); err != nil || c.RopeTheta != 1e7 {
			t.Errorf("rope_scaling %v: %v, %v", empty, err, c)
		}
	}

	// A scaled RoPE under either name is refused, naming the key it is in.
	for _, key := range []string{"rope_type", "type"} {
		m = minimal()
		m["rope_scaling"] = map[string]any{key: "yarn", "factor": 4.0, "original_max_position_embeddings": 262144}
		if _, err = parse(t, m); err == nil || !strings.Contains(err.Error(), `"rope_scaling.`+key+`" is "yarn"`) {
			t.Errorf("rope_scaling %s yarn beside default rope_parameters: error %v, want rope_scaling.%s named", key, err, key)
		}
	}

	// Nested under text_config too, with θ missing everywhere: the message
	// names the object in use.
	text := minimal()
	delete(text, "rope_parameters")
	text["rope_scaling"] = map[string]any{"rope_type": "default"}
	if _, err = parse(t, map[string]any{"text_config": text}); err == nil ||
		!strings.Contains(err.Error(), `"text_config.rope_scaling.rope_theta" is missing`) {
		t.Errorf("error %v, want text_config.rope_scaling.rope_theta named", err)
	}
}

func TestParseConfigRejects(t *testing.T) {
	cases := []struct {
		name   string
		change func(m map[string]any)
		want   string
	}{
		{"missing hidden size", func(m map[string]any) { delete(m, "hidden_size") }, `"hidden_size" is required`},
		{"zero layers", func(m map[string]any) { m["num_hidden_layers"] = 0 }, `"num_hidden_layers" is 0`},
		{"missing intermediate size", func(m map[string]any) { delete(m, "intermediate_size") }, `"intermediate_size" is required`},
		{"kv heads", func(m map[string]any) { m["num_key_value_heads"] = 3 }, `"num_key_value_heads" is 3, which does not divide`},
		{"value heads", func(m map[string]any) { m["linear_num_key_heads"] = 3 }, `"linear_num_value_heads" is 32, which is not a multiple`},
		{"layer_types length", func(m map[string]any) { m["layer_types"] = []string{"full_attention"} }, `"layer_types" has 1 entries`},
		{"layer_types value", func(m map[string]any) {
			m["layer_types"] = []string{"linear_attention", "sliding_attention", "a", "b", "c", "d", "e", "f"}
		}, `"layer_types" [1] is "sliding_attention"`},
		{"activation", func(m map[string]any) { m["hidden_act"] = "gelu" }, `"hidden_act" is "gelu"`},
		{"rope type", func(m map[string]any) { m["rope_parameters"] = map[string]any{"rope_type": "yarn", "rope_theta": 1e7} }, `"rope_parameters.rope_type" is "yarn"`},
		{"no theta", func(m map[string]any) { delete(m, "rope_parameters") }, `"rope_parameters.rope_theta" is missing`},
		{"odd rotary dims", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_theta": 1e7, "partial_rotary_factor": 0.3}
		}, `giving 19 rotated dims`},
		{"eps", func(m map[string]any) { m["rms_norm_eps"] = -1 }, `"rms_norm_eps" is -1`},
		{"conv kernel", func(m map[string]any) { m["linear_conv_kernel_dim"] = 1 }, `"linear_conv_kernel_dim" is 1`},
		{"moe model type", func(m map[string]any) { m["model_type"] = "qwen3_5_moe" }, "its architecture is Qwen3_5MoeForCausalLM or Qwen3_5MoeForConditionalGeneration"},
		{"moe experts", func(m map[string]any) { m["num_experts"] = 256 }, "this is a Qwen3.5 MoE checkpoint"},
		{"wrong json type", func(m map[string]any) { m["hidden_size"] = "big" }, "hidden_size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := minimal()
			c.change(m)
			_, err := parse(t, m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// Several problems are reported together.
	m := minimal()
	delete(m, "hidden_size")
	m["hidden_act"] = "relu"
	if _, err := parse(t, m); err == nil || !strings.Contains(err.Error(), "hidden_size") || !strings.Contains(err.Error(), "hidden_act") {
		t.Errorf("error %v, want both problems", err)
	}
	// Nested fields are named with their text_config prefix.
	if _, err := parse(t, map[string]any{"text_config": map[string]any{"hidden_size": 8}}); err == nil ||
		!strings.Contains(err.Error(), `"text_config.num_hidden_layers" is required`) {
		t.Errorf("error %v, want the nested field named", err)
	}
}
