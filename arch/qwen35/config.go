package qwen35

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/specula-dev/specula/internal/jsonerr"
)

// LayerType is the mixer of one decoder layer, spelled as in config.json's
// layer_types.
type LayerType string

// The two mixers of Qwen3.5.
const (
	LinearAttention LayerType = "linear_attention" // gated delta-net
	FullAttention   LayerType = "full_attention"   // gated full attention
)

// Config is the text decoder's configuration, read from config.json
// (spec/qwen35.md section 2): from text_config when present, else from the
// top level. Every field is set: defaults are applied and the values are
// validated by ParseConfig.
type Config struct {
	Architecture string // architectures[0] (top level)
	ModelType    string // model_type (top level, else text_config's)

	HiddenSize       int     // H
	NumLayers        int     // num_hidden_layers
	IntermediateSize int     // I, the dense MLP width (0 when the architecture brings its own MLP)
	NumHeads         int     // Hq
	NumKVHeads       int     // Hkv
	HeadDim          int     // D
	RMSNormEps       float32 // every norm, the gated one included
	VocabSize        int     // V
	MaxPositions     int     // max_position_embeddings, the context limit
	AttentionBias    bool    // q/k/v/o projections carry biases

	LayerTypes []LayerType // one per layer

	LinearKeyHeads   int // Hk
	LinearValueHeads int // Hv
	LinearKeyDim     int // Dk
	LinearValueDim   int // Dv
	ConvKernel       int // Kc

	RopeTheta           float64 // θ
	PartialRotaryFactor float64 // share of D that RoPE rotates

	TieWordEmbeddings bool // the output head is the embedding table
}

// RopeDim is the number of rotated features per attention head:
// int(D · partial_rotary_factor).
func (c *Config) RopeDim() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// KeyDim is Hk·Dk, the width of the delta-net q and k.
func (c *Config) KeyDim() int { return c.LinearKeyHeads * c.LinearKeyDim }

// ValueDim is Hv·Dv, the width of the delta-net v and output.
func (c *Config) ValueDim() int { return c.LinearValueHeads * c.LinearValueDim }

// ConvDim is 2·KeyDim + ValueDim, the channels of the delta-net convolution.
func (c *Config) ConvDim() int { return 2*c.KeyDim() + c.ValueDim() }

// FullAttentionLayer reports whether layer i is a gated full-attention layer
// (else it is a gated delta-net layer).
func (c *Config) FullAttentionLayer(i int) bool { return c.LayerTypes[i] == FullAttention }

// rawConfig mirrors the keys of config.json that matter; pointers tell a
// missing key from a zero.
type rawConfig struct {
	Architectures []string `json:"architectures"`
	ModelType     *string  `json:"model_type"`

	HiddenSize            *int            `json:"hidden_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	VocabSize             *int            `json:"vocab_size"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	HiddenAct             *string         `json:"hidden_act"`
	LayerTypes            []string        `json:"layer_types"`
	FullAttentionInterval *int            `json:"full_attention_interval"`
	LinearNumKeyHeads     *int            `json:"linear_num_key_heads"`
	LinearNumValueHeads   *int            `json:"linear_num_value_heads"`
	LinearKeyHeadDim      *int            `json:"linear_key_head_dim"`
	LinearValueHeadDim    *int            `json:"linear_value_head_dim"`
	LinearConvKernelDim   *int            `json:"linear_conv_kernel_dim"`
	RopeParameters        *rawRope        `json:"rope_parameters"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeTheta             *float64        `json:"rope_theta"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	NumExperts            *int            `json:"num_experts"`
	VisionConfig          json.RawMessage `json:"vision_config"`
}

type rawRope struct {
	RopeType            *string  `json:"rope_type"`
	Type                *string  `json:"type"` // rope_type as mlx-lm saves it in converted configs
	RopeTheta           *float64 `json:"rope_theta"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
}

// Defaults of spec/qwen35.md section 2.
const (
	defaultRMSNormEps            = 1e-6
	defaultMaxPositions          = 32768
	defaultFullAttentionInterval = 4
	defaultLinearKeyHeads        = 16
	defaultLinearValueHeads      = 32
	defaultLinearHeadDim         = 128
	defaultConvKernel            = 4
	defaultPartialRotaryFactor   = 0.25
)

// ErrMoE is the error ParseConfig wraps for a mixture-of-experts config: a
// Qwen3.5 MoE checkpoint runs under its own architecture names
// (arch/qwen35moe), not the dense ones.
var ErrMoE = errors.New("this is a Qwen3.5 MoE checkpoint: its architecture is Qwen3_5MoeForCausalLM or Qwen3_5MoeForConditionalGeneration, not a dense Qwen3.5 name (fix architectures[0] in config.json, or the manifest's [target] architecture)")

// ParseConfig reads a dense Qwen3.5 config.json. Errors name the offending
// field and say what a valid value would be.
func ParseConfig(data []byte) (*Config, error) { return parseConfig(data, true) }

// ParseHybridConfig reads the hybrid decoder's part of config.json for an
// architecture that brings its own MLP (arch/qwen35moe): everything
// ParseConfig reads but intermediate_size, which is neither required nor
// read (IntermediateSize is 0), and a config with experts is not refused.
// The caller reads its own fields from the object TextConfig returns.
func ParseHybridConfig(data []byte) (*Config, error) { return parseConfig(data, false) }

// TextConfig returns the object of config.json that holds the text
// decoder's fields — text_config when present, else the top level — and the
// prefix that names those fields in errors ("text_config." or "").
func TextConfig(data []byte) (text json.RawMessage, where string, err error) {
	var top struct {
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, "", fmt.Errorf("config.json: %w", jsonerr.Explain(data, err))
	}
	if len(top.TextConfig) > 0 && string(top.TextConfig) != "null" {
		return top.TextConfig, "text_config.", nil
	}
	return data, "", nil
}

// parseConfig reads config.json; dense says the layers' MLP is this
// package's SwiGLU (intermediate_size required, experts refused).
func parseConfig(data []byte, dense bool) (*Config, error) {
	var top rawConfig
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", jsonerr.Explain(data, err))
	}
	raw, where, err := TextConfig(data)
	if err != nil {
		return nil, err
	}
	text := top
	if where != "" {
		text = rawConfig{}
		if err := json.Unmarshal(raw, &text); err != nil {
			// No data: positions would count from text_config's start.
			return nil, fmt.Errorf("config.json: text_config: %w", jsonerr.Explain(nil, err))
		}
	}
	cfg := &Config{}
	if len(top.Architectures) > 0 {
		cfg.Architecture = top.Architectures[0]
	}
	switch {
	case top.ModelType != nil:
		cfg.ModelType = *top.ModelType
	case text.ModelType != nil:
		cfg.ModelType = *text.ModelType
	}
	if dense && (strings.Contains(cfg.ModelType, "moe") || (text.NumExperts != nil && *text.NumExperts > 0)) {
		return nil, fmt.Errorf("config.json: model_type %q / num_experts: %w", cfg.ModelType, ErrMoE)
	}

	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%q %s", where+field, fmt.Sprintf(format, args...)))
	}
	required := func(field string, v *int) int {
		if v == nil {
			bad(field, "is required")
			return 0
		}
		if *v <= 0 {
			bad(field, "is %d; it must be a positive integer", *v)
		}
		return *v
	}
	optional := func(field string, v *int, def int) int {
		if v == nil {
			return def
		}
		if *v <= 0 {
			bad(field, "is %d; it must be a positive integer (default %d)", *v, def)
		}
		return *v
	}

	cfg.HiddenSize = required("hidden_size", text.HiddenSize)
	cfg.NumLayers = required("num_hidden_layers", text.NumHiddenLayers)
	if dense {
		cfg.IntermediateSize = required("intermediate_size", text.IntermediateSize)
	}
	cfg.NumHeads = required("num_attention_heads", text.NumAttentionHeads)
	cfg.NumKVHeads = optional("num_key_value_heads", text.NumKeyValueHeads, cfg.NumHeads)
	cfg.VocabSize = required("vocab_size", text.VocabSize)
	cfg.MaxPositions = optional("max_position_embeddings", text.MaxPositionEmbeddings, defaultMaxPositions)
	cfg.LinearKeyHeads = optional("linear_num_key_heads", text.LinearNumKeyHeads, defaultLinearKeyHeads)
	cfg.LinearValueHeads = optional("linear_num_value_heads", text.LinearNumValueHeads, defaultLinearValueHeads)
	cfg.LinearKeyDim = optional("linear_key_head_dim", text.LinearKeyHeadDim, defaultLinearHeadDim)
	cfg.LinearValueDim = optional("linear_value_head_dim", text.LinearValueHeadDim, defaultLinearHeadDim)
	cfg.ConvKernel = optional("linear_conv_kernel_dim", text.LinearConvKernelDim, defaultConvKernel)
	if cfg.ConvKernel == 1 {
		bad("linear_conv_kernel_dim", "is 1; the causal convolution needs a kernel of at least 2")
	}

	if cfg.NumHeads > 0 && cfg.NumKVHeads > 0 && cfg.NumHeads%cfg.NumKVHeads != 0 {
		bad("num_key_value_heads", "is %d, which does not divide num_attention_heads = %d", cfg.NumKVHeads, cfg.NumHeads)
	}
	if cfg.LinearKeyHeads > 0 && cfg.LinearValueHeads > 0 && cfg.LinearValueHeads%cfg.LinearKeyHeads != 0 {
		bad("linear_num_value_heads", "is %d, which is not a multiple of linear_num_key_heads = %d", cfg.LinearValueHeads, cfg.LinearKeyHeads)
	}

	switch {
	case text.HeadDim != nil:
		cfg.HeadDim = optional("head_dim", text.HeadDim, 0)
	case cfg.NumHeads > 0 && cfg.HiddenSize%cfg.NumHeads == 0:
		cfg.HeadDim = cfg.HiddenSize / cfg.NumHeads
	case cfg.NumHeads > 0:
		bad("head_dim", "is missing and hidden_size = %d is not a multiple of num_attention_heads = %d; set head_dim", cfg.HiddenSize, cfg.NumHeads)
	}

	cfg.RMSNormEps = defaultRMSNormEps
	if text.RMSNormEps != nil {
		if e := *text.RMSNormEps; e <= 0 || e >= 1 {
			bad("rms_norm_eps", "is %g; it must be in (0, 1) (default 1e-6)", e)
		} else {
			cfg.RMSNormEps = float32(e)
		}
	}
	if text.AttentionBias != nil {
		cfg.AttentionBias = *text.AttentionBias
	}
	if text.HiddenAct != nil && *text.HiddenAct != "silu" {
		bad("hidden_act", "is %q; Qwen3.5 uses \"silu\" and nothing else is implemented", *text.HiddenAct)
	}

	// Tied head: text_config's value, else the top level's, else false.
	switch {
	case text.TieWordEmbeddings != nil:
		cfg.TieWordEmbeddings = *text.TieWordEmbeddings
	case top.TieWordEmbeddings != nil:
		cfg.TieWordEmbeddings = *top.TieWordEmbeddings
	}

	// Layer schedule: explicit layer_types, else every interval-th layer
	// (i+1 divisible by the interval) is full attention.
	if text.LayerTypes != nil {
		if cfg.NumLayers > 0 && len(text.LayerTypes) != cfg.NumLayers {
			bad("layer_types", "has %d entries but num_hidden_layers is %d", len(text.LayerTypes), cfg.NumLayers)
		}
		for i, lt := range text.LayerTypes {
			switch LayerType(lt) {
			case LinearAttention, FullAttention:
				cfg.LayerTypes = append(cfg.LayerTypes, LayerType(lt))
			default:
				bad("layer_types", "[%d] is %q; want %q or %q", i, lt, LinearAttention, FullAttention)
			}
		}
	} else if cfg.NumLayers > 0 {
		interval := optional("full_attention_interval", text.FullAttentionInterval, defaultFullAttentionInterval)
		for i := range cfg.NumLayers {
			lt := LinearAttention
			if interval > 0 && (i+1)%interval == 0 {
				lt = FullAttention
			}
			cfg.LayerTypes = append(cfg.LayerTypes, lt)
		}
	}

	// RoPE: rope_parameters, or rope_scaling, its pre-v5 name, which
	// transformers still reads and which replaces rope_parameters when it is
	// a non-empty object; then the legacy top-level keys.
	rope, ropeKey, err := ropeObject(text.RopeParameters, text.RopeScaling)
	if err != nil {
		bad("rope_scaling", "%v", err)
	}
	if rope == nil {
		rope = &rawRope{}
	}
	if rope.RopeType != nil && *rope.RopeType != "default" {
		bad(ropeKey+".rope_type", "is %q; only \"default\" is implemented", *rope.RopeType)
	}
	if rope.Type != nil && *rope.Type != "default" {
		bad(ropeKey+".type", "is %q; only \"default\" is implemented", *rope.Type)
	}
	switch {
	case rope.RopeTheta != nil:
		cfg.RopeTheta = *rope.RopeTheta
	case text.RopeTheta != nil:
		cfg.RopeTheta = *text.RopeTheta
	default:
		bad(ropeKey+".rope_theta", "is missing (and there is no legacy rope_theta); released Qwen3.5 checkpoints set 10000000, and a missing value means a broken config")
	}
	if text.RopeTheta != nil || rope.RopeTheta != nil {
		if cfg.RopeTheta <= 0 || math.IsInf(cfg.RopeTheta, 0) || math.IsNaN(cfg.RopeTheta) {
			bad(ropeKey+".rope_theta", "is %g; it must be positive", cfg.RopeTheta)
		}
	}
	switch {
	case rope.PartialRotaryFactor != nil:
		cfg.PartialRotaryFactor = *rope.PartialRotaryFactor
	case text.PartialRotaryFactor != nil:
		cfg.PartialRotaryFactor = *text.PartialRotaryFactor
	default:
		cfg.PartialRotaryFactor = defaultPartialRotaryFactor
	}
	if cfg.HeadDim > 0 {
		if d := cfg.RopeDim(); d <= 0 || d > cfg.HeadDim || d%2 != 0 {
			bad(ropeKey+".partial_rotary_factor", "is %g, giving %d rotated dims of head_dim %d; it must give an even number in (0, head_dim]",
				cfg.PartialRotaryFactor, d, cfg.HeadDim)
		}
	}

	if len(errs) > 0 {
		return nil, fmt.Errorf("config.json: %s", strings.Join(errs, "; "))
	}
	return cfg, nil
}

// ropeObject picks the RoPE object as transformers does: rope_scaling when it
// is a non-empty object (it replaces rope_parameters), else rope_parameters.
// It returns the object (nil when neither is set) and its key, for errors.
func ropeObject(params *rawRope, scaling json.RawMessage) (*rawRope, string, error) {
	if len(scaling) > 0 && string(scaling) != "null" {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(scaling, &keys); err != nil {
			return params, "rope_parameters", fmt.Errorf("must be an object or null: %w", err)
		}
		if len(keys) > 0 {
			var r rawRope
			if err := json.Unmarshal(scaling, &r); err != nil {
				return params, "rope_parameters", fmt.Errorf("has a field of the wrong type: %w", err)
			}
			return &r, "rope_scaling", nil
		}
	}
	return params, "rope_parameters", nil
}
