package qwen35moe_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/arch/qwen35moe"
	"github.com/specula-dev/specula/internal/synth"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/registry"
)

// benchShape is Qwen3.5-35B-A3B's layer shapes (H 2048, 16/2 heads of 256,
// delta-net 16/32 heads of 128, top 8 experts of width 512, a shared
// expert of 512) with 4 layers (3 delta-net, 1 attention), 32 of the 256
// experts and the vocabulary cut to 32768, so the float32 checkpoint
// (1.9 GB) fits a CPU machine: a token reads the same expert shapes as in
// the release, from a smaller pool.
func benchShape(dtype synth.DType) synth.Qwen35 {
	q, err := synth.Qwen35Shape("35B-A3B", 4)
	if err != nil {
		panic(err)
	}
	q.Experts, q.Vocab, q.DType = 32, 32768, dtype
	return q
}

// benchModel writes the random checkpoint with synth (once per benchmark
// run, in a temporary folder) and loads it as the engine does, computing
// in float32 on the CPU (MLX's x86 backend is only fast for float32 matmul)
// and bfloat16 on a GPU.
func benchModel(b *testing.B) *qwen35moe.Model {
	dtype, store := mlx.Float32, synth.Float32
	var m *qwen35moe.Model
	err := mlx.Do(context.Background(), func() error {
		if mlx.CurrentDevice() == mlx.GPU {
			dtype, store = mlx.BFloat16, synth.BFloat16
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	q := benchShape(store)
	dir := filepath.Join(b.TempDir(), "target")
	if err := q.Write(dir); err != nil {
		b.Fatal(err)
	}
	err = mlx.Do(context.Background(), func() error {
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			return err
		}
		v, _, err := registry.Default.Build("Qwen3_5MoeForCausalLM", registry.Config{Dir: dir, JSON: raw, DType: dtype})
		if err != nil {
			return err
		}
		m = v.(*qwen35moe.Model)
		ck, err := loader.OpenCheckpoint(dir)
		if err != nil {
			return err
		}
		defer ck.Close()
		tensors, err := ck.Arrays()
		if err != nil {
			return err
		}
		if err := m.LoadWeights(tensors); err != nil {
			return err
		}
		b.Logf("benchmark model: %d layers, H %d, %d experts (top %d, width %d), V %d, %.2fB parameters (%.2fB active), %s on the %s",
			m.NumLayers(), m.Info().HiddenSize, q.Experts, q.TopK, q.ExpertSize, q.Vocab, float64(q.Params())/1e9, float64(q.ActiveParams())/1e9, dtype, mlx.CurrentDevice())
		return mlx.Eval(m.Weights()...) // read the weights before timing
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkMoEDecode measures single-token greedy decoding after a
// 128-token prefill: each step routes one token to 8 experts per layer
// (unsorted gather matmuls).
func BenchmarkMoEDecode(b *testing.B) {
	m := benchModel(b)
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchDecode(b, m, 128)
}

// BenchmarkMoEVerify8 measures an 8-token verification round (an anchor
// and 7 drafts) after a 128-token prefill: 64 row–expert pairs per layer,
// sorted by expert.
func BenchmarkMoEVerify8(b *testing.B) {
	m := benchModel(b)
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchVerify(b, m, 128, 8)
}
