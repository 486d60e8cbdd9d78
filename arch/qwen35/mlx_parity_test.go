package qwen35_test

import (
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
)

// The testdata/fixtures/qwen35-tiny-mlx* checkpoints are what mlx_lm.convert
// (mlx-lm 0.32.2 on MLX 0.32.4) wrote from the qwen35-tiny fixture, with
// mlx-lm's own outputs on each as the reference (float32 compute on the
// CPU; scripts/make_mlx_fixtures.py, testdata/fixtures/README.md).

// mlxVariants lists the conversions and what each covers.
var mlxVariants = []struct {
	name, what string
}{
	{"qwen35-tiny-mlx", "unquantized MLX layout: module-path names, conv [C, Kc, 1], norms stored 1+w"},
	{"qwen35-tiny-mlx-q4", "affine 4-bit, group 64"},
	{"qwen35-tiny-mlx-q8", "affine 8-bit, group 32"},
	{"qwen35-tiny-mlx-mxfp4", "mxfp4"},
	{"qwen35-tiny-mlx-q3-g32", "affine 3-bit, group 32 (bit stream across words)"},
	{"qwen35-tiny-mlx-q6", "affine 6-bit, group 64"},
	{"qwen35-tiny-mlx-q2-g128", "affine 2-bit, group 128: only the 128-wide down_proj and o_proj are quantized"},
	{"qwen35-tiny-mlx-nvfp4", "nvfp4"},
	{"qwen35-tiny-mlx-mxfp8", "mxfp8"},
	{"qwen35-tiny-mlx-q4-bf16", "affine 4-bit with bfloat16 weights, scales and biases (as mlx-community publishes)"},
}

func TestMLXFormatParityWithMLXLM(t *testing.T) {
	for _, v := range mlxVariants {
		t.Run(v.name, func(t *testing.T) { qwen35test.CheckMLXConversion(t, "Qwen3_5ForCausalLM", v.name, v.what) })
	}
}
