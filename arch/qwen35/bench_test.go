package qwen35_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/mlx"
)

// benchConfig has Qwen3.5-0.8B's layer shapes (H 1024, I 3584, 8/2 heads of
// 256, delta-net 16/16 heads of 128, Kc 4) with 4 layers (3 delta-net, 1
// attention) and the vocabulary shrunk from 248320 to 32768 so the random
// checkpoint stays small. Tied head, as in the 0.8B.
func benchConfig() *qwen35.Config {
	return &qwen35.Config{
		Architecture: "Qwen3_5ForCausalLM", ModelType: "qwen3_5_text",
		HiddenSize: 1024, NumLayers: 4, IntermediateSize: 3584,
		NumHeads: 8, NumKVHeads: 2, HeadDim: 256, RMSNormEps: 1e-6,
		VocabSize: 32768, MaxPositions: 262144,
		LayerTypes:     []qwen35.LayerType{qwen35.LinearAttention, qwen35.LinearAttention, qwen35.LinearAttention, qwen35.FullAttention},
		LinearKeyHeads: 16, LinearValueHeads: 16, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
		RopeTheta: 1e7, PartialRotaryFactor: 0.25, TieWordEmbeddings: true,
	}
}

// goTinyConfig has models/go-tiny's shapes (H 384, I 1152, 8 layers of which
// every fourth is attention, 6/2 heads of 64, delta-net 3/6 heads of 64, V
// 8192, tied head): the target of the CPU speculative benchmarks, where a
// round's fixed costs weigh most.
func goTinyConfig() *qwen35.Config {
	c := benchConfig()
	c.HiddenSize, c.NumLayers, c.IntermediateSize, c.VocabSize = 384, 8, 1152, 8192
	c.NumHeads, c.NumKVHeads, c.HeadDim = 6, 2, 64
	c.LinearKeyHeads, c.LinearValueHeads, c.LinearKeyDim, c.LinearValueDim = 3, 6, 64, 64
	c.LayerTypes = everyFourthAttention(c.NumLayers)
	return c
}

// everyFourthAttention is Qwen3.5's layer pattern for n layers: three
// delta-net layers, then full attention.
func everyFourthAttention(n int) []qwen35.LayerType {
	var types []qwen35.LayerType
	for i := range n {
		t := qwen35.LinearAttention
		if i%4 == 3 {
			t = qwen35.FullAttention
		}
		types = append(types, t)
	}
	return types
}

// randomCheckpoint returns random weights for cfg in the raw Hugging Face
// layout (model.* names, zero-centred norms, conv1d [C, 1, Kc]), made in
// memory from seed.
func randomCheckpoint(cfg *qwen35.Config, seed uint64) map[string]*mlx.Array {
	n := uint64(0)
	normal := func(std float64, shape ...int) *mlx.Array {
		n++
		return mlx.RandomNormal(mlx.RandomKey(seed<<20+n), mlx.Float32, 0, float32(std), shape...)
	}
	lin := func(out, in int) *mlx.Array { return normal(1/math.Sqrt(float64(in)), out, in) }
	H := cfg.HiddenSize
	ts := map[string]*mlx.Array{
		"model.embed_tokens.weight": normal(0.05, cfg.VocabSize, H),
		"model.norm.weight":         normal(0.1, H),
	}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts[p+"input_layernorm.weight"] = normal(0.1, H)
		ts[p+"post_attention_layernorm.weight"] = normal(0.1, H)
		ts[p+"mlp.gate_proj.weight"] = lin(cfg.IntermediateSize, H)
		ts[p+"mlp.up_proj.weight"] = lin(cfg.IntermediateSize, H)
		ts[p+"mlp.down_proj.weight"] = lin(H, cfg.IntermediateSize)
		if cfg.FullAttentionLayer(i) {
			a := p + "self_attn."
			ts[a+"q_proj.weight"] = lin(cfg.NumHeads*2*cfg.HeadDim, H)
			ts[a+"k_proj.weight"] = lin(cfg.NumKVHeads*cfg.HeadDim, H)
			ts[a+"v_proj.weight"] = lin(cfg.NumKVHeads*cfg.HeadDim, H)
			ts[a+"o_proj.weight"] = lin(H, cfg.NumHeads*cfg.HeadDim)
			ts[a+"q_norm.weight"] = normal(0.1, cfg.HeadDim)
			ts[a+"k_norm.weight"] = normal(0.1, cfg.HeadDim)
			continue
		}
		g := p + "linear_attn."
		hv := cfg.LinearValueHeads
		ts[g+"in_proj_qkv.weight"] = lin(cfg.ConvDim(), H)
		ts[g+"in_proj_z.weight"] = lin(cfg.ValueDim(), H)
		ts[g+"in_proj_b.weight"] = lin(hv, H)
		ts[g+"in_proj_a.weight"] = lin(hv, H)
		ts[g+"conv1d.weight"] = normal(0.3, cfg.ConvDim(), 1, cfg.ConvKernel)
		ts[g+"dt_bias"] = normal(0.5, hv)
		ts[g+"A_log"] = mlx.Log(mlx.AddScalar(mlx.Abs(normal(1, hv)), 0.05))
		ts[g+"norm.weight"] = mlx.AddScalar(normal(0.1, cfg.LinearValueDim), 1)
		ts[g+"out_proj.weight"] = lin(H, cfg.ValueDim())
	}
	return ts
}

// benchModel builds the random benchmark model on the worker, computing in
// float32 on the CPU (MLX's x86 backend is only fast for float32 matmul)
// and bfloat16 on a GPU.
func benchModel(b *testing.B, cfg *qwen35.Config) *qwen35.Model {
	var m *qwen35.Model
	err := mlx.Do(context.Background(), func() error {
		dtype := mlx.Float32
		if mlx.CurrentDevice() == mlx.GPU {
			dtype = mlx.BFloat16
		}
		var err error
		if m, err = qwen35.NewFromConfig(cfg, dtype); err != nil {
			return err
		}
		b.Logf("benchmark model: %d layers, H %d, V %d, %s on the %s", m.NumLayers(), m.Info().HiddenSize, m.Info().VocabSize, dtype, mlx.CurrentDevice())
		if err := m.LoadWeights(randomCheckpoint(m.Config(), 1)); err != nil {
			return err
		}
		return mlx.Eval(m.Weights()...) // draw the random weights before timing
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkPrefill128 measures a 128-token prefill from empty caches.
func BenchmarkPrefill128(b *testing.B) {
	m := benchModel(b, benchConfig())
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchPrefill(b, m, 128)
}

// BenchmarkDecode measures single-token greedy decoding after a 128-token
// prefill.
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b, benchConfig())
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchDecode(b, m, 128)
}

// BenchmarkVerify8 measures the target's side of a speculative round at
// depth 7 after a 128-token prefill.
func BenchmarkVerify8(b *testing.B) {
	m := benchModel(b, benchConfig())
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchVerify(b, m, 128, 8)
}

// BenchmarkGoTinyDecode is BenchmarkDecode on go-tiny's shapes.
func BenchmarkGoTinyDecode(b *testing.B) {
	m := benchModel(b, goTinyConfig())
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchDecode(b, m, 128)
}

// BenchmarkGoTinyVerify8 is BenchmarkVerify8 on go-tiny's shapes.
func BenchmarkGoTinyVerify8(b *testing.B) {
	m := benchModel(b, goTinyConfig())
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchVerify(b, m, 128, 8)
}

// BenchmarkForwardBuild measures the host's part of a forward: the time to
// build (not evaluate) the graph of a decode step and of verifications of 8
// and 16 rows with a rollback point at every row, the rounds of depth 7 and
// 15, in build-us (µs per forward). The model has Qwen3.5-4B's 32 layers in its
// pattern (three delta-net layers, then attention) at go-tiny's widths, so
// evaluating is cheap and the loop is the host's. On a GPU the graph's nodes
// cost about as much again to submit.
func BenchmarkForwardBuild(b *testing.B) {
	c := goTinyConfig()
	c.NumLayers, c.HiddenSize, c.IntermediateSize = 32, 128, 256
	c.LayerTypes = everyFourthAttention(c.NumLayers)
	m := benchModel(b, c)
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	for _, n := range []int{1, 8, 16} {
		name := "step"
		if n > 1 {
			name = fmt.Sprintf("verify%d", n)
		}
		b.Run(name, func(b *testing.B) { qwen35test.BenchBuild(b, m, 64, n) })
	}
}
