package qwen35_test

import (
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
)

// Parity with transformers on the qwen35-tiny fixture, float32 on the CPU:
// prompt logits and taps, the greedy continuation, a chunk after a cached
// prefill, the scripted verify-and-rollback loop, rollback_check, chunked
// prefill against token-by-token decoding, and per-token snapshots against
// separate forwards (qwen35test states each check and its tolerance).
func TestParity(t *testing.T) { qwen35test.Run(t, "qwen35-tiny", qwen35test.Checks...) }
