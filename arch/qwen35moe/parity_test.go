package qwen35moe_test

import (
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
)

// Parity with transformers on the qwen35moe-tiny fixture (fused experts,
// as released), float32 on the CPU: the dense target's checks and
// tolerances (qwen35test), on the MoE target. Chunked prefill against
// token-by-token decoding and the scripted verify loop are where a
// multi-row forward must route each row as a single-row forward would.
func TestParity(t *testing.T) { qwen35test.Run(t, "qwen35moe-tiny", qwen35test.Checks...) }

// The ConditionalGeneration fixture (per-expert tensors, as transformers 5
// saves them; untied head; a vision tower to skip): prompt logits, taps and
// the greedy continuation.
func TestParityConditionalGeneration(t *testing.T) {
	qwen35test.Run(t, "qwen35moe-tiny-vl", qwen35test.Checks[0], qwen35test.Checks[1])
}

// What mlx_lm.convert wrote from qwen35moe-tiny (switch_mlp experts,
// quantized with the router and the shared-expert gate at mlx-lm's 8 bits,
// group 64), against mlx-lm's own outputs: the quantized experts run
// through gather_qmm.
func TestMLXFormatParityWithMLXLM(t *testing.T) {
	for _, v := range []struct{ name, what string }{
		{"qwen35moe-tiny-mlx-q4-g32", "affine 4-bit, group 32; router and shared-expert gate 8-bit, group 64"},
	} {
		t.Run(v.name, func(t *testing.T) { qwen35test.CheckMLXConversion(t, "Qwen3_5MoeForCausalLM", v.name, v.what) })
	}
}
