package qwen35moe

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/internal/jsonerr"
)

// Config is a Qwen3.5 MoE text decoder's configuration: the hybrid
// decoder's fields (qwen35.Config, whose IntermediateSize is 0) and the
// sparse block's (spec/qwen35.md section 9), read from text_config when
// present, else from the top level.
type Config struct {
	*qwen35.Config

	NumExperts int  // E, num_experts
	TopK       int  // k, num_experts_per_tok
	ExpertSize int  // Ie, moe_intermediate_size: each routed expert's SwiGLU width
	SharedSize int  // Is, shared_expert_intermediate_size
	NormTopK   bool // norm_topk_prob (default true): renormalise the k chosen probabilities to sum 1
}

// rawMoE mirrors the sparse block's keys; pointers tell a missing key from
// a zero.
type rawMoE struct {
	NumExperts         *int  `json:"num_experts"`
	NumExpertsPerTok   *int  `json:"num_experts_per_tok"`
	MoEIntermediate    *int  `json:"moe_intermediate_size"`
	SharedIntermediate *int  `json:"shared_expert_intermediate_size"`
	NormTopKProb       *bool `json:"norm_topk_prob"`
	// Qwen3-Next's dense-layer schedule; Qwen3.5 MoE makes every layer
	// sparse.
	DecoderSparseStep *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int `json:"mlp_only_layers"`
}

// ParseConfig reads config.json. Errors name the offending field (with its
// text_config. prefix when nested) and say what a valid value would be;
// problems of the hybrid decoder and of the sparse block are reported
// together.
func ParseConfig(data []byte) (*Config, error) {
	hybrid, herr := qwen35.ParseHybridConfig(data)
	raw, where, err := qwen35.TextConfig(data)
	if err != nil {
		return nil, err
	}
	var m rawMoE
	if err := json.Unmarshal(raw, &m); err != nil {
		if where != "" {
			return nil, fmt.Errorf("config.json: text_config: %w", jsonerr.Explain(nil, err))
		}
		return nil, fmt.Errorf("config.json: %w", jsonerr.Explain(data, err))
	}

	var errs []string
	if herr != nil {
		errs = append(errs, strings.TrimPrefix(herr.Error(), "config.json: "))
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%q %s", where+field, fmt.Sprintf(format, args...)))
	}
	required := func(field string, v *int) int {
		switch {
		case v == nil:
			bad(field, "is required for a Qwen3.5 MoE model")
			return 0
		case *v <= 0:
			bad(field, "is %d; it must be a positive integer", *v)
		}
		return *v
	}
	cfg := &Config{
		Config:     hybrid,
		NumExperts: required("num_experts", m.NumExperts),
		TopK:       required("num_experts_per_tok", m.NumExpertsPerTok),
		ExpertSize: required("moe_intermediate_size", m.MoEIntermediate),
		SharedSize: required("shared_expert_intermediate_size", m.SharedIntermediate),
		NormTopK:   m.NormTopKProb == nil || *m.NormTopKProb,
	}
	if cfg.NumExperts > 0 && cfg.TopK > cfg.NumExperts {
		bad("num_experts_per_tok", "is %d, more than num_experts = %d", cfg.TopK, cfg.NumExperts)
	}
	if m.DecoderSparseStep != nil && *m.DecoderSparseStep != 1 {
		bad("decoder_sparse_step", "is %d; Qwen3.5 MoE makes every layer sparse (1), and dense layers between sparse ones are not implemented", *m.DecoderSparseStep)
	}
	if len(m.MLPOnlyLayers) > 0 {
		bad("mlp_only_layers", "is %v; Qwen3.5 MoE makes every layer sparse, and dense layers between sparse ones are not implemented", m.MLPOnlyLayers)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("config.json: %s", strings.Join(errs, "; "))
	}
	return cfg, nil
}
