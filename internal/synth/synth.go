// Package synth writes random-weight checkpoint folders in the Hugging Face
// layout: a Qwen3.5 text model, a DFlash or DFlash2 draft for it, and a
// small tokenizer. The demo, benchmarks and tests use them where real
// weights are unavailable or too large. Every value is drawn from a
// generator seeded by the options' seed, the tensor's name and the value's
// position (chunkRand says how), so the same options give byte-identical
// folders however many cores draw them.
//
// The distributions follow the reference fixtures' recipe
// (testdata/fixtures/*/README.md): zero-centred norms near 0, projections
// scaled by 1/sqrt(fan_in), so activations stay in a sensible range and
// greedy argmax decisions are well separated.
package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// DType is a storage dtype for random weights.
type DType string

// Storage dtypes.
const (
	Float32  DType = "float32"
	BFloat16 DType = "bfloat16"
)

// Qwen35 describes a random Qwen3.5 text model: dense
// (Qwen3_5ForCausalLM), or mixture-of-experts (Qwen3_5MoeForCausalLM) when
// Experts > 0, every layer's MLP then the sparse block with fused experts
// (spec/qwen35.md section 9) and Intermediate unused.
type Qwen35 struct {
	Vocab, Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim             int
	LinearKeyHeads, LinearValueHeads    int
	LinearKeyDim, LinearValueDim        int
	ConvKernel                          int
	// FullAttentionInterval makes layer i full attention iff (i+1) % it == 0.
	FullAttentionInterval int
	RopeTheta             float64
	PartialRotary         float64
	TieEmbeddings         bool
	DType                 DType
	Seed                  uint64

	// Experts, TopK, ExpertSize and SharedSize are the sparse block's
	// num_experts, num_experts_per_tok, moe_intermediate_size and
	// shared_expert_intermediate_size; Experts 0 means a dense model.
	Experts, TopK, ExpertSize, SharedSize int

	// Progress, if not nil, is called while the weights are written with
	// the bytes of tensor data written so far and their total, on the
	// goroutine that called Write.
	Progress func(written, total int64)
}

// Sizes lists the released Qwen3.5 sizes Qwen35Shape knows.
const Sizes = "go-tiny, 0.8B, 4B, 27B, 35B-A3B, 122B-A10B, 397B-A17B"

// Qwen35Shape returns the layer shapes of a released Qwen3.5 size ("0.8B",
// "4B", "27B", or the MoE sizes "35B-A3B", "122B-A10B", "397B-A17B";
// spec/qwen35.md section 13), or of the project's own trained "go-tiny"
// target (models/go-tiny: 18 M parameters, vocabulary 8192), with the given
// number of layers (0 keeps the release's).
func Qwen35Shape(size string, layers int) (Qwen35, error) {
	q := Qwen35{Vocab: 248320, HeadDim: 256, LinearKeyHeads: 16, LinearKeyDim: 128, LinearValueDim: 128,
		ConvKernel: 4, FullAttentionInterval: 4, RopeTheta: 1e7, PartialRotary: 0.25, DType: BFloat16, Seed: 1}
	switch size {
	case "go-tiny":
		q.Vocab, q.HeadDim, q.LinearKeyHeads, q.LinearKeyDim, q.LinearValueDim = 8192, 64, 3, 64, 64
		q.Hidden, q.Intermediate, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads, q.TieEmbeddings = 384, 1152, 8, 6, 2, 6, true
	case "0.8B":
		q.Hidden, q.Intermediate, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads, q.TieEmbeddings = 1024, 3584, 24, 8, 2, 16, true
	case "4B":
		q.Hidden, q.Intermediate, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads, q.TieEmbeddings = 2560, 9216, 32, 16, 4, 32, true
	case "27B":
		q.Hidden, q.Intermediate, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads = 5120, 17408, 64, 24, 4, 48
	case "35B-A3B":
		q.Hidden, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads = 2048, 40, 16, 2, 32
		q.Experts, q.TopK, q.ExpertSize, q.SharedSize = 256, 8, 512, 512
	case "122B-A10B":
		q.Hidden, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads = 3072, 48, 32, 2, 64
		q.Experts, q.TopK, q.ExpertSize, q.SharedSize = 256, 8, 1024, 1024
	case "397B-A17B":
		q.Hidden, q.Layers, q.Heads, q.KVHeads, q.LinearValueHeads = 4096, 60, 32, 2, 64
		q.Experts, q.TopK, q.ExpertSize, q.SharedSize = 512, 10, 1024, 1024
	default:
		return q, fmt.Errorf("unknown Qwen3.5 size %q (known: %s)", size, Sizes)
	}
	if layers > 0 {
		q.Layers = layers
	}
	return q, nil
}

func (q Qwen35) layerTypes() []string {
	t := make([]string, q.Layers)
	for i := range t {
		if (i+1)%q.FullAttentionInterval == 0 {
			t[i] = "full_attention"
		} else {
			t[i] = "linear_attention"
		}
	}
	return t
}

// Params is the number of parameters the checkpoint holds.
func (q Qwen35) Params() int64 {
	var n int64
	for _, t := range q.tensors() {
		n += t.numel()
	}
	return n
}

// ActiveParams is the number of parameters one decoded token reads: all of
// them but the experts it is not routed to (TopK of Experts per layer) and
// the embedding table, of which it reads one row (a tied table is read
// whole as the head).
func (q Qwen35) ActiveParams() int64 {
	var n int64
	for _, t := range q.tensors() {
		switch {
		case strings.HasSuffix(t.name, "mlp.experts.gate_up_proj"), strings.HasSuffix(t.name, "mlp.experts.down_proj"):
			n += t.numel() / int64(q.Experts) * int64(q.TopK)
		case t.name == "model.embed_tokens.weight" && !q.TieEmbeddings:
			n += int64(q.Hidden)
		default:
			n += t.numel()
		}
	}
	return n
}

// spec is one tensor to draw.
type spec struct {
	name  string
	shape []int
	draw  drawFunc
	f32   bool // stored float32 whatever the checkpoint dtype (A_log, GDN norm)
}

// drawFunc draws the value at row-major position i of a tensor from r.
// Most distributions ignore i; it lets one depend on where the value sits
// (baseKernel) without state shared between the chunks drawn in parallel.
type drawFunc func(r *rand.Rand, i int64) float64

func (s spec) numel() int64 {
	n := int64(1)
	for _, d := range s.shape {
		n *= int64(d)
	}
	return n
}

func normal(mean, std float64) drawFunc {
	return func(r *rand.Rand, _ int64) float64 { return mean + std*r.NormFloat64() }
}

func proj(fanIn int, gain float64) drawFunc {
	return normal(0, gain/math.Sqrt(float64(fanIn)))
}

func (q Qwen35) tensors() []spec {
	H := q.Hidden
	keyDim := q.LinearKeyHeads * q.LinearKeyDim
	valueDim := q.LinearValueHeads * q.LinearValueDim
	convDim := 2*keyDim + valueDim
	var out []spec
	add := func(name string, draw drawFunc, shape ...int) {
		out = append(out, spec{name: name, shape: shape, draw: draw})
	}
	add("model.embed_tokens.weight", normal(0, 0.1), q.Vocab, H)
	for i, kind := range q.layerTypes() {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", normal(0, 0.1), H)
		add(p+"post_attention_layernorm.weight", normal(0, 0.1), H)
		if kind == "full_attention" {
			D := q.HeadDim
			add(p+"self_attn.q_proj.weight", proj(H, 0.6), q.Heads*2*D, H)
			add(p+"self_attn.k_proj.weight", proj(H, 0.6), q.KVHeads*D, H)
			add(p+"self_attn.v_proj.weight", proj(H, 0.6), q.KVHeads*D, H)
			add(p+"self_attn.o_proj.weight", proj(q.Heads*D, 1.2), H, q.Heads*D)
			add(p+"self_attn.q_norm.weight", normal(0, 0.1), D)
			add(p+"self_attn.k_norm.weight", normal(0, 0.1), D)
		} else {
			add(p+"linear_attn.in_proj_qkv.weight", proj(H, 0.6), convDim, H)
			add(p+"linear_attn.in_proj_z.weight", proj(H, 0.6), valueDim, H)
			add(p+"linear_attn.in_proj_b.weight", proj(H, 0.6), q.LinearValueHeads, H)
			add(p+"linear_attn.in_proj_a.weight", proj(H, 0.6), q.LinearValueHeads, H)
			add(p+"linear_attn.conv1d.weight", normal(0, 0.3), convDim, 1, q.ConvKernel)
			add(p+"linear_attn.dt_bias", normal(0, 0.5), q.LinearValueHeads)
			out = append(out, spec{name: p + "linear_attn.A_log", shape: []int{q.LinearValueHeads}, f32: true,
				draw: func(r *rand.Rand, _ int64) float64 { return math.Log(0.05 + 1.95*r.Float64()) }})
			out = append(out, spec{name: p + "linear_attn.norm.weight", shape: []int{q.LinearValueDim}, f32: true, draw: normal(1, 0.1)})
			add(p+"linear_attn.out_proj.weight", proj(valueDim, 1.2), H, valueDim)
		}
		if q.Experts > 0 {
			// The router spreads its logits (gain 2) so expert choices are
			// well separated, as the MoE fixture's recipe does.
			E, ie, is := q.Experts, q.ExpertSize, q.SharedSize
			add(p+"mlp.gate.weight", proj(H, 2), E, H)
			add(p+"mlp.experts.gate_up_proj", proj(H, 0.6), E, 2*ie, H)
			add(p+"mlp.experts.down_proj", proj(ie, 1.2), E, H, ie)
			add(p+"mlp.shared_expert.gate_proj.weight", proj(H, 0.6), is, H)
			add(p+"mlp.shared_expert.up_proj.weight", proj(H, 0.6), is, H)
			add(p+"mlp.shared_expert.down_proj.weight", proj(is, 1.2), H, is)
			add(p+"mlp.shared_expert_gate.weight", proj(H, 1), 1, H)
			continue
		}
		add(p+"mlp.gate_proj.weight", proj(H, 0.6), q.Intermediate, H)
		add(p+"mlp.up_proj.weight", proj(H, 0.6), q.Intermediate, H)
		add(p+"mlp.down_proj.weight", proj(q.Intermediate, 1.2), H, q.Intermediate)
	}
	add("model.norm.weight", normal(2, 0.1), H)
	if !q.TieEmbeddings {
		add("lm_head.weight", proj(H, 1), q.Vocab, H)
	}
	return out
}

func (q Qwen35) config() map[string]any {
	cfg := map[string]any{
		"architectures":           []string{"Qwen3_5ForCausalLM"},
		"model_type":              "qwen3_5_text",
		"vocab_size":              q.Vocab,
		"hidden_size":             q.Hidden,
		"num_hidden_layers":       q.Layers,
		"num_attention_heads":     q.Heads,
		"num_key_value_heads":     q.KVHeads,
		"head_dim":                q.HeadDim,
		"linear_num_key_heads":    q.LinearKeyHeads,
		"linear_num_value_heads":  q.LinearValueHeads,
		"linear_key_head_dim":     q.LinearKeyDim,
		"linear_value_head_dim":   q.LinearValueDim,
		"linear_conv_kernel_dim":  q.ConvKernel,
		"layer_types":             q.layerTypes(),
		"rms_norm_eps":            1e-6,
		"hidden_act":              "silu",
		"max_position_embeddings": 32768,
		"tie_word_embeddings":     q.TieEmbeddings,
		"attention_bias":          false,
		"rope_parameters": map[string]any{
			"rope_type":             "default",
			"rope_theta":            q.RopeTheta,
			"partial_rotary_factor": q.PartialRotary,
		},
		"torch_dtype": string(q.DType),
	}
	if q.Experts > 0 {
		cfg["architectures"] = []string{"Qwen3_5MoeForCausalLM"}
		cfg["model_type"] = "qwen3_5_moe_text"
		cfg["num_experts"] = q.Experts
		cfg["num_experts_per_tok"] = q.TopK
		cfg["moe_intermediate_size"] = q.ExpertSize
		cfg["shared_expert_intermediate_size"] = q.SharedSize
	} else {
		cfg["intermediate_size"] = q.Intermediate
	}
	return cfg
}

// Write writes config.json and the weights into dir (created): one
// model.safetensors, or for more than 5 GB of weights shards of at most
// 5 GB (a larger tensor alone) and their model.safetensors.index.json, as
// huggingface_hub splits released checkpoints.
func (q Qwen35) Write(dir string) error { return q.WriteContext(context.Background(), dir) }

// WriteContext is Write that gives up with ctx's error once ctx is done:
// a large shape takes a while to write, and an interrupted synth should
// stop within a moment, leaving no weights file behind.
func (q Qwen35) WriteContext(ctx context.Context, dir string) error {
	return writeCheckpoint(ctx, dir, q.config(), q.tensors(), q.DType, q.Seed, q.Progress)
}

// DFlash describes a random DFlash (Selector == false) or DFlash2 draft for
// a target of hidden size Hidden and vocabulary Vocab.
type DFlash struct {
	Hidden, Vocab, Layers, Heads, KVHeads, HeadDim, Intermediate int
	BlockSize                                                    int
	MaskToken                                                    int
	TargetLayerIDs                                               []int
	TargetLayers                                                 int
	// SlidingWindow > 0 makes every layer sliding (non-causal, as released
	// DFlash2 drafts are); 0 makes them full attention.
	SlidingWindow int
	RopeTheta     float64
	// DFlash2 adds the dynamic convolutions and the candidate selector.
	DFlash2                    bool
	ConvKernel, ConvGroup      int
	SelectorRank, SelectorTopK int
	DType                      DType
	Seed                       uint64
	// Progress is as Qwen35's.
	Progress func(written, total int64)
}

func (d DFlash) tensors() []spec {
	H := d.Hidden
	F := len(d.TargetLayerIDs) * H
	var out []spec
	add := func(name string, draw drawFunc, shape ...int) {
		out = append(out, spec{name: name, shape: shape, draw: draw})
	}
	add("fc.weight", proj(F, 1), H, F)
	add("hidden_norm.weight", normal(1, 0.1), H)
	add("norm.weight", normal(3, 0.2), H)
	D := d.HeadDim
	for l := range d.Layers {
		p := fmt.Sprintf("layers.%d.", l)
		add(p+"input_layernorm.weight", normal(1, 0.1), H)
		add(p+"post_attention_layernorm.weight", normal(1, 0.1), H)
		add(p+"self_attn.q_proj.weight", proj(H, 0.6), d.Heads*D, H)
		add(p+"self_attn.k_proj.weight", proj(H, 0.6), d.KVHeads*D, H)
		add(p+"self_attn.v_proj.weight", proj(H, 0.6), d.KVHeads*D, H)
		add(p+"self_attn.o_proj.weight", proj(d.Heads*D, 1.5), H, d.Heads*D)
		add(p+"self_attn.q_norm.weight", normal(1, 0.1), D)
		add(p+"self_attn.k_norm.weight", normal(1, 0.1), D)
		add(p+"mlp.gate_proj.weight", proj(H, 0.6), d.Intermediate, H)
		add(p+"mlp.up_proj.weight", proj(H, 0.6), d.Intermediate, H)
		add(p+"mlp.down_proj.weight", proj(d.Intermediate, 1.5), H, d.Intermediate)
		if d.DFlash2 {
			G := H / d.ConvGroup
			for _, m := range []string{"attention_conv", "mlp_conv"} {
				add(p+m+".base_kernel", baseKernel(d.ConvKernel, H), 2, d.ConvKernel, H)
				add(p+m+".kernel_projection.weight", proj(H, 0.2), 2*d.ConvKernel*G, H)
			}
		}
	}
	if d.DFlash2 {
		add("candidate_selector.predecessor_codebook", normal(0, 1), d.Vocab, d.SelectorRank)
		add("candidate_selector.successor_codebook", normal(0, 1), d.Vocab, d.SelectorRank)
		add("candidate_selector.hidden_projection.weight", proj(H, 1), d.SelectorRank, H)
	}
	return out
}

// baseKernel draws tap 0 (the current row) near 1 and the others near 0, as
// the fixtures do, for a [2, Kc, H] kernel.
func baseKernel(kc, h int) drawFunc {
	return func(r *rand.Rand, i int64) float64 {
		if tap := (i / int64(h)) % int64(kc); tap == 0 {
			return 1 + 0.2*r.NormFloat64()
		}
		return 0.3 * r.NormFloat64()
	}
}

func (d DFlash) config() map[string]any {
	dc := map[string]any{
		"block_size":       d.BlockSize,
		"mask_token_id":    d.MaskToken,
		"target_layer_ids": d.TargetLayerIDs,
	}
	arch := "DFlashDraftModel"
	if d.DFlash2 {
		arch = "DFlash2DraftModel"
		dc["conv_kernel_size"] = d.ConvKernel
		dc["conv_group_size"] = d.ConvGroup
		dc["selector_rank"] = d.SelectorRank
		dc["selector_top_k"] = d.SelectorTopK
	}
	cfg := map[string]any{
		"architectures":       []string{arch},
		"model_type":          "qwen3",
		"hidden_size":         d.Hidden,
		"num_hidden_layers":   d.Layers,
		"num_attention_heads": d.Heads,
		"num_key_value_heads": d.KVHeads,
		"head_dim":            d.HeadDim,
		"intermediate_size":   d.Intermediate,
		"rms_norm_eps":        1e-6,
		"hidden_act":          "silu",
		"vocab_size":          d.Vocab,
		"num_target_layers":   d.TargetLayers,
		"block_size":          d.BlockSize,
		"rope_theta":          d.RopeTheta,
		"dflash_config":       dc,
		"attention_bias":      false,
		"torch_dtype":         string(d.DType),
	}
	if d.SlidingWindow > 0 {
		types := make([]string, d.Layers)
		for i := range types {
			types[i] = "sliding_attention"
		}
		cfg["layer_types"] = types
		cfg["sliding_window"] = d.SlidingWindow
		cfg["use_sliding_window"] = true
		cfg["is_causal"] = false
	}
	return cfg
}

// Write writes config.json and the weights into dir (created), as
// Qwen35.Write does.
func (d DFlash) Write(dir string) error { return d.WriteContext(context.Background(), dir) }

// WriteContext is Write that gives up with ctx's error once ctx is done.
func (d DFlash) WriteContext(ctx context.Context, dir string) error {
	return writeCheckpoint(ctx, dir, d.config(), d.tensors(), d.DType, d.Seed, d.Progress)
}
