package dflash

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/specula-dev/specula/internal/jsonerr"
)

// LayerType is the attention of one draft layer, spelled as in config.json's
// layer_types.
type LayerType string

// The two attention kinds of DFlash drafts (spec/dflash.md section 6).
const (
	FullAttention    LayerType = "full_attention"    // every cached key, KV cache
	SlidingAttention LayerType = "sliding_attention" // a band of W keys, rotating cache
)

// Config is a DFlash draft's configuration (spec/dflash.md section 2), read
// from config.json in either schema (legacy top-level keys, nested
// dflash_config / rope_parameters keys, or a mixture). ParseConfig sets every
// field and validates the draft on its own (section 3.1); checks against the
// target (section 3.2) happen in AttachTarget.
type Config struct {
	Architecture string // architectures[0]

	HiddenSize       int     // H, equal to the target's
	NumLayers        int     // N, num_hidden_layers
	NumHeads         int     // Hq
	NumKVHeads       int     // Hkv
	HeadDim          int     // D
	IntermediateSize int     // I, the SwiGLU width
	RMSNormEps       float32 // every norm (plain w·x̂, not 1 + w)
	// VocabSize is vocab_size, or 0 when the config does not give it (the
	// target's vocabulary is used).
	VocabSize int

	BlockSize       int   // trained block: anchor + BlockSize−1 masks
	MaskTokenID     int32 // dflash_config.mask_token_id
	TargetLayerIDs  []int // dflash_config.target_layer_ids: the target's taps
	NumTargetLayers int   // the target's depth, or 0 when unchecked

	RopeTheta       float64 // θ
	RopeInterleaved bool    // pair adjacent dims instead of j with j + D/2

	// LayerTypes has one entry per layer.
	LayerTypes []LayerType
	// SlidingWindow is W of the sliding layers (0 when there are none).
	SlidingWindow int
	// Causal, when non-nil, is the is_causal / dflash_config.causal
	// override that applies to every layer; nil means a layer is causal iff
	// it is sliding.
	Causal *bool

	InputEmbeddingScale float64 // multiplies the block embeddings (1 = none)
	OutputMultiplier    float64 // multiplies the raw logits (1 = none)
	FinalLogitSoftcap   float64 // c of c·tanh(x/c); 0 = none

	MaxPositions      int  // max_position_embeddings (informational)
	TieWordEmbeddings bool // tie_word_embeddings (informational: the target's head is used)
}

// NumTaps is the number of tapped target layers.
func (c *Config) NumTaps() int { return len(c.TargetLayerIDs) }

// FeatureSize is F = nTaps·H, the width of the context features.
func (c *Config) FeatureSize() int { return c.NumTaps() * c.HiddenSize }

// Attention returns the window of layer l (0 for full attention) and whether
// its block queries are causal (spec/dflash.md section 6): the is_causal
// override when set, else causal iff the layer is sliding.
func (c *Config) Attention(l int) (window int, causal bool) {
	sliding := c.LayerTypes[l] == SlidingAttention
	if sliding {
		window = c.SlidingWindow
	}
	if c.Causal != nil {
		return window, *c.Causal
	}
	return window, sliding
}

// ConfigError lists every problem ParseConfig found, each naming its field
// and what a valid value would be.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "config.json: " + strings.Join(e.Problems, "; ")
}

// rawConfig mirrors the keys of config.json that matter; pointers tell a
// missing key (or JSON null) from a zero.
type rawConfig struct {
	Architectures         []string   `json:"architectures"`
	HiddenSize            *int       `json:"hidden_size"`
	NumHiddenLayers       *int       `json:"num_hidden_layers"`
	NumAttentionHeads     *int       `json:"num_attention_heads"`
	NumKeyValueHeads      *int       `json:"num_key_value_heads"`
	HeadDim               *int       `json:"head_dim"`
	IntermediateSize      *int       `json:"intermediate_size"`
	RMSNormEps            *float64   `json:"rms_norm_eps"`
	HiddenAct             *string    `json:"hidden_act"`
	AttentionBias         *bool      `json:"attention_bias"`
	VocabSize             *int       `json:"vocab_size"`
	MaxPositionEmbeddings *int       `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool      `json:"tie_word_embeddings"`
	BlockSize             *int       `json:"block_size"`
	RopeTheta             *float64   `json:"rope_theta"`
	RopeParameters        *rawRope   `json:"rope_parameters"`
	RopeScaling           *rawRope   `json:"rope_scaling"`
	RopeInterleaved       *bool      `json:"rope_interleaved"`
	NumTargetLayers       *int       `json:"num_target_layers"`
	LayerTypes            []string   `json:"layer_types"`
	SlidingWindow         *int       `json:"sliding_window"`
	UseSlidingWindow      *bool      `json:"use_sliding_window"`
	IsCausal              *bool      `json:"is_causal"`
	DFlash                *rawDFlash `json:"dflash_config"`
	rawScales
}

// rawDFlash is dflash_config.
type rawDFlash struct {
	BlockSize       *int  `json:"block_size"`
	MaskTokenID     *int  `json:"mask_token_id"`
	TargetLayerIDs  []int `json:"target_layer_ids"`
	NumTargetLayers *int  `json:"num_target_layers"`
	Causal          *bool `json:"causal"`
	rawScales
}

// rawScales are the logit and embedding scales of non-Qwen targets, read
// from the top level or dflash_config.
type rawScales struct {
	InputEmbeddingScale   *float64 `json:"input_embedding_scale"`
	OutputMultiplier      *float64 `json:"output_multiplier"`
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
}

// rawRope is rope_parameters (or the older rope_scaling).
type rawRope struct {
	RopeType  *string  `json:"rope_type"`
	Type      *string  `json:"type"` // rope_scaling's older spelling
	RopeTheta *float64 `json:"rope_theta"`
}

// Defaults of spec/dflash.md section 2 (those of Qwen3, the backbone).
const (
	defaultRMSNormEps   = 1e-6
	defaultMaxPositions = 32768
)

// ParseConfig reads a DFlash draft's config.json and validates it on its own
// (spec/dflash.md 3.1). Every problem is reported at once in a *ConfigError.
func ParseConfig(data []byte) (*Config, error) {
	var top rawConfig
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", jsonerr.Explain(data, err))
	}
	dc := top.DFlash
	if dc == nil {
		dc = &rawDFlash{}
	}

	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%q %s", field, fmt.Sprintf(format, args...)))
	}
	positive := func(field string, v *int, required bool, def int) int {
		switch {
		case v == nil && required:
			bad(field, "is required")
			return 0
		case v == nil:
			return def
		case *v <= 0:
			bad(field, "is %d; it must be a positive integer", *v)
		}
		return *v
	}

	cfg := &Config{MaxPositions: defaultMaxPositions}
	if len(top.Architectures) > 0 {
		cfg.Architecture = top.Architectures[0]
	}
	cfg.HiddenSize = positive("hidden_size", top.HiddenSize, true, 0)
	cfg.NumLayers = positive("num_hidden_layers", top.NumHiddenLayers, true, 0)
	cfg.NumHeads = positive("num_attention_heads", top.NumAttentionHeads, true, 0)
	cfg.NumKVHeads = positive("num_key_value_heads", top.NumKeyValueHeads, false, cfg.NumHeads)
	cfg.IntermediateSize = positive("intermediate_size", top.IntermediateSize, true, 0)
	cfg.VocabSize = positive("vocab_size", top.VocabSize, false, 0)
	cfg.MaxPositions = positive("max_position_embeddings", top.MaxPositionEmbeddings, false, defaultMaxPositions)

	// Rule 3.1.2: heads and activation.
	if cfg.NumHeads > 0 && cfg.NumKVHeads > 0 && cfg.NumHeads%cfg.NumKVHeads != 0 {
		bad("num_key_value_heads", "is %d, which does not divide num_attention_heads = %d", cfg.NumKVHeads, cfg.NumHeads)
	}
	switch {
	case top.HeadDim != nil:
		cfg.HeadDim = *top.HeadDim
		if cfg.HeadDim <= 0 {
			bad("head_dim", "is %d; it must be positive (128 in every released draft)", cfg.HeadDim)
		}
	case cfg.NumHeads > 0 && cfg.HiddenSize%cfg.NumHeads == 0:
		cfg.HeadDim = cfg.HiddenSize / cfg.NumHeads
	case cfg.NumHeads > 0:
		bad("head_dim", "is missing and hidden_size = %d is not a multiple of num_attention_heads = %d; set head_dim", cfg.HiddenSize, cfg.NumHeads)
	}
	if cfg.HeadDim > 0 && cfg.HeadDim%2 != 0 {
		bad("head_dim", "is %d; RoPE rotates the whole head, so it must be even", cfg.HeadDim)
	}
	if top.HiddenAct != nil && *top.HiddenAct != "silu" {
		bad("hidden_act", "is %q; DFlash drafts use \"silu\" and nothing else is implemented", *top.HiddenAct)
	}
	if top.AttentionBias != nil && *top.AttentionBias {
		bad("attention_bias", "is true; no released DFlash draft has attention biases and they are not implemented")
	}
	cfg.RMSNormEps = defaultRMSNormEps
	if top.RMSNormEps != nil {
		if e := *top.RMSNormEps; e <= 0 || e >= 1 {
			bad("rms_norm_eps", "is %g; it must be in (0, 1) (default 1e-6)", e)
		} else {
			cfg.RMSNormEps = float32(e)
		}
	}
	if top.TieWordEmbeddings != nil {
		cfg.TieWordEmbeddings = *top.TieWordEmbeddings
	}

	// Block size: dflash_config wins over the top level (rule 3.1.1).
	switch {
	case dc.BlockSize != nil:
		cfg.BlockSize = *dc.BlockSize
	case top.BlockSize != nil:
		cfg.BlockSize = *top.BlockSize
	default:
		bad("dflash_config.block_size", "is required (or the legacy top-level block_size)")
	}
	if (dc.BlockSize != nil || top.BlockSize != nil) && cfg.BlockSize < 2 {
		bad("dflash_config.block_size", "is %d; a block holds the anchor and at least one mask, so it must be at least 2", cfg.BlockSize)
	}

	// Mask token and taps; the taps are checked against the target in
	// AttachTarget (spec 3.2).
	if dc.MaskTokenID == nil {
		bad("dflash_config.mask_token_id", "is required")
	} else if *dc.MaskTokenID < 0 || *dc.MaskTokenID > math.MaxInt32 {
		bad("dflash_config.mask_token_id", "is %d; it must be a token id (>= 0)", *dc.MaskTokenID)
	} else {
		cfg.MaskTokenID = int32(*dc.MaskTokenID)
	}
	if dc.TargetLayerIDs == nil {
		bad("dflash_config.target_layer_ids", "is required: the draft was trained on these target layers and they are never guessed")
	} else {
		cfg.TargetLayerIDs = append([]int(nil), dc.TargetLayerIDs...)
	}

	// Target depth: top level or dflash_config; checked when > 0.
	switch {
	case top.NumTargetLayers != nil && dc.NumTargetLayers != nil && *top.NumTargetLayers != *dc.NumTargetLayers:
		bad("num_target_layers", "is %d but dflash_config.num_target_layers is %d; remove one", *top.NumTargetLayers, *dc.NumTargetLayers)
	case dc.NumTargetLayers != nil:
		cfg.NumTargetLayers = max(*dc.NumTargetLayers, 0)
	case top.NumTargetLayers != nil:
		cfg.NumTargetLayers = max(*top.NumTargetLayers, 0)
	}

	// RoPE θ: either schema; both present must agree.
	rope := top.RopeParameters
	if rope == nil {
		rope = &rawRope{}
	}
	theta := rope.RopeTheta
	switch {
	case rope.RopeTheta != nil && top.RopeTheta != nil && *rope.RopeTheta != *top.RopeTheta:
		bad("rope_theta", "is %g but rope_parameters.rope_theta is %g; remove one", *top.RopeTheta, *rope.RopeTheta)
		theta = nil
	case theta == nil && top.RopeTheta != nil:
		theta = top.RopeTheta
	case theta == nil:
		bad("rope_parameters.rope_theta", "is required (or the legacy top-level rope_theta): 1e6 for Qwen3 drafts, 1e7 for Qwen3.5/3.6 drafts")
	}
	if theta != nil {
		cfg.RopeTheta = *theta
		if !(cfg.RopeTheta > 0 && !math.IsInf(cfg.RopeTheta, 0)) {
			bad("rope_theta", "is %g; it must be positive", cfg.RopeTheta)
		}
	}
	if t := ropeType(rope); t != "" && t != "default" {
		bad("rope_parameters.rope_type", "is %q; only \"default\" RoPE is implemented", t)
	}
	if top.RopeScaling != nil {
		if t := ropeType(top.RopeScaling); t != "default" {
			bad("rope_scaling", "has rope_type %q; only \"default\" RoPE is implemented (remove rope_scaling or set it to null)", t)
		}
	}
	if top.RopeInterleaved != nil {
		cfg.RopeInterleaved = *top.RopeInterleaved
	}

	// Attention variant (rule 3.1.3).
	if top.SlidingWindow != nil {
		cfg.SlidingWindow = *top.SlidingWindow
	}
	sliding := false
	switch {
	case top.LayerTypes != nil:
		if cfg.NumLayers > 0 && len(top.LayerTypes) != cfg.NumLayers {
			bad("layer_types", "has %d entries but num_hidden_layers is %d", len(top.LayerTypes), cfg.NumLayers)
		}
		for i, lt := range top.LayerTypes {
			switch LayerType(lt) {
			case FullAttention, SlidingAttention:
				cfg.LayerTypes = append(cfg.LayerTypes, LayerType(lt))
				sliding = sliding || LayerType(lt) == SlidingAttention
			default:
				bad("layer_types", "[%d] is %q; want %q or %q", i, lt, FullAttention, SlidingAttention)
			}
		}
	case top.UseSlidingWindow != nil && *top.UseSlidingWindow:
		bad("use_sliding_window", "is true without layer_types, which is ambiguous (Qwen3 derives the sliding layers from max_window_layers, which DFlash drafts do not follow); list layer_types explicitly")
	default:
		for range cfg.NumLayers {
			cfg.LayerTypes = append(cfg.LayerTypes, FullAttention)
		}
	}
	if sliding && cfg.SlidingWindow <= 0 {
		bad("sliding_window", "is %d; sliding_attention layers need a positive window", cfg.SlidingWindow)
	}
	if !sliding {
		cfg.SlidingWindow = 0
	}

	// Causality override (rule 3.1.4).
	switch {
	case top.IsCausal != nil && dc.Causal != nil && *top.IsCausal != *dc.Causal:
		bad("is_causal", "is %t but dflash_config.causal is %t; they must agree", *top.IsCausal, *dc.Causal)
	case top.IsCausal != nil:
		cfg.Causal = top.IsCausal
	case dc.Causal != nil:
		cfg.Causal = dc.Causal
	}

	// Scales of non-Qwen targets: top level or dflash_config.
	scale := func(field string, topV, nested *float64, def float64, allowZero bool) float64 {
		v := def
		switch {
		case topV != nil && nested != nil && *topV != *nested:
			bad(field, "is %g but dflash_config.%s is %g; remove one", *topV, field, *nested)
			return def
		case topV != nil:
			v = *topV
		case nested != nil:
			v = *nested
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (v == 0 && !allowZero) {
			bad(field, "is %g; it must be positive", v)
			return def
		}
		return v
	}
	cfg.InputEmbeddingScale = scale("input_embedding_scale", top.InputEmbeddingScale, dc.InputEmbeddingScale, 1, false)
	cfg.OutputMultiplier = scale("output_multiplier", top.OutputMultiplier, dc.OutputMultiplier, 1, false)
	cfg.FinalLogitSoftcap = scale("final_logit_softcapping", top.FinalLogitSoftcapping, dc.FinalLogitSoftcapping, 0, true)

	if len(errs) > 0 {
		return nil, &ConfigError{Problems: errs}
	}
	return cfg, nil
}

// ropeType is the rope type a rope_parameters or rope_scaling object names
// ("" when it names none).
func ropeType(r *rawRope) string {
	switch {
	case r.RopeType != nil:
		return *r.RopeType
	case r.Type != nil:
		return *r.Type
	}
	return ""
}
