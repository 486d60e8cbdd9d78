package dflash2

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/internal/jsonerr"
)

// Config is a DFlash2 draft's configuration: DFlash's (spec/dflash.md
// section 2, both schemas) plus the convolution and selector sizes of
// spec/dflash2.md section 4, read from dflash_config.
type Config struct {
	dflash.Config

	ConvKernel   int // Kc, conv_kernel_size: taps of each dynamic convolution (released 2)
	ConvGroup    int // S, conv_group_size: channels sharing one dynamic kernel (released 16)
	SelectorRank int // R, selector_rank: width of the codebooks (released 256)
	SelectorTopK int // K, selector_top_k: candidates per position (released 16)
}

// ConvGroups is G = H / S, the number of dynamic kernels per tap.
func (c *Config) ConvGroups() int { return c.HiddenSize / c.ConvGroup }

// rawConfig holds the keys DFlash2 adds (and the two sizes its rules need).
type rawConfig struct {
	HiddenSize *int       `json:"hidden_size"`
	VocabSize  *int       `json:"vocab_size"`
	DFlash     rawDFlash2 `json:"dflash_config"`
}

// rawDFlash2 is DFlash2's part of dflash_config.
type rawDFlash2 struct {
	ConvKernelSize *int `json:"conv_kernel_size"`
	ConvGroupSize  *int `json:"conv_group_size"`
	SelectorRank   *int `json:"selector_rank"`
	SelectorTopK   *int `json:"selector_top_k"`
}

// ParseConfig reads a DFlash2 draft's config.json: every rule of DFlash's
// ParseConfig, plus spec/dflash2.md section 4. All problems of both are
// reported at once in a *dflash.ConfigError.
func ParseConfig(data []byte) (*Config, error) {
	base, err := dflash.ParseConfig(data)
	var problems []string
	var ce *dflash.ConfigError
	switch {
	case errors.As(err, &ce):
		problems = append(problems, ce.Problems...)
	case err != nil:
		return nil, err
	}
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config.json: %w", jsonerr.Explain(data, err))
	}
	bad := func(field, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%q %s", field, fmt.Sprintf(format, args...)))
	}
	dc := raw.DFlash
	required := func(field string, v *int, released int) int {
		switch {
		case v == nil:
			bad("dflash_config."+field, "is required for DFlash2 (released drafts use %d)", released)
			return 0
		case *v <= 0:
			bad("dflash_config."+field, "is %d; it must be a positive integer (released drafts use %d)", *v, released)
			return 0
		}
		return *v
	}
	cfg := &Config{
		ConvKernel:   required("conv_kernel_size", dc.ConvKernelSize, 2),
		ConvGroup:    required("conv_group_size", dc.ConvGroupSize, 16),
		SelectorRank: required("selector_rank", dc.SelectorRank, 256),
	}
	if h := raw.HiddenSize; h != nil && *h > 0 && cfg.ConvGroup > 0 && *h%cfg.ConvGroup != 0 {
		bad("dflash_config.conv_group_size", "is %d, which does not divide hidden_size = %d", cfg.ConvGroup, *h)
	}
	// The codebooks are [vocab_size, selector_rank], so DFlash2 needs the
	// vocabulary in its config (DFlash may leave it out).
	vocab := 0
	switch v := raw.VocabSize; {
	case v == nil:
		bad("vocab_size", "is required for DFlash2: the selector's codebooks have one row per token")
	case *v > 0:
		vocab = *v
	}
	switch k := dc.SelectorTopK; {
	case k == nil:
		bad("dflash_config.selector_top_k", "is required for DFlash2 (released drafts use 16)")
	case *k < 1 || (vocab > 0 && *k > vocab):
		bad("dflash_config.selector_top_k", "is %d; it must be in [1, vocab_size = %d]", *k, vocab)
	default:
		cfg.SelectorTopK = *k
	}
	if len(problems) > 0 {
		return nil, &dflash.ConfigError{Problems: problems}
	}
	cfg.Config = *base
	return cfg, nil
}
