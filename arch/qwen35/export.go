package qwen35

import (
	"fmt"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// mlxPrefix is the text decoder's prefix in MLX's layout.
const mlxPrefix = "language_model.model."

// shiftedNorms are the zero-centred norms mlx-lm stores as 1 + w (the gated
// delta-net norm is not among them).
var shiftedNorms = []string{".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight"}

// ExportMLX turns a Hugging Face checkpoint's tensors into MLX's layout as
// mlx-lm's Qwen3.5 sanitize does (spec/quantized.md): vision and MTP
// tensors dropped, names moved under language_model.model. (the head to
// language_model.lm_head, dropped when tied), conv1d weights [C, 1, Kc] →
// [C, Kc, 1], and the zero-centred norms stored as 1 + w (added in their
// stored dtype, as mlx-lm adds). Every projection, the embedding and an
// untied head are the quantizable layers; A_log keeps its dtype when the
// model is cast. A checkpoint that is already in MLX's layout or quantized
// is refused: it would be converted twice.
func (m *Model) ExportMLX(tensors map[string]*mlx.Array) (*loader.MLXModel, error) {
	for name := range tensors {
		if strings.HasSuffix(name, nn.ScalesSuffix) {
			return nil, fmt.Errorf("qwen35: %s exists: the checkpoint is already quantized; quantize the unquantized original", name)
		}
	}
	text := map[string]*mlx.Array{}
	for name, a := range tensors {
		skip := false
		for _, p := range skippedPrefixes {
			skip = skip || strings.HasPrefix(name, p.prefix)
		}
		if !skip {
			text[name] = a
		}
	}
	prefix, layout := "", ""
	for _, p := range textPrefixes {
		if _, ok := text[p.prefix+"embed_tokens.weight"]; ok {
			prefix, layout = p.prefix, p.layout
			break
		}
	}
	switch {
	case prefix == "":
		return nil, fmt.Errorf("qwen35: no embed_tokens.weight under %s or %s: not a Qwen3.5 checkpoint", textPrefixes[0].prefix, textPrefixes[1].prefix)
	case layout == LayoutMLX:
		return nil, fmt.Errorf("qwen35: the checkpoint is already in MLX's layout (%sembed_tokens.weight): convert the Hugging Face original", prefix)
	}
	shift, _, err := normShift(m.cfg, prefix, text, len(text) < len(tensors), false)
	if err != nil {
		return nil, err
	}

	out := &loader.MLXModel{Tensors: map[string]*mlx.Array{}}
	for name, a := range text {
		var dst string
		switch {
		case name == "lm_head.weight":
			if m.cfg.TieWordEmbeddings {
				continue
			}
			dst = "language_model.lm_head.weight"
		case strings.HasPrefix(name, prefix):
			dst = mlxPrefix + strings.TrimPrefix(name, prefix)
		default:
			return nil, fmt.Errorf("qwen35: tensor %s is outside the text decoder (%s…) and not a known part to skip", name, prefix)
		}
		switch {
		case strings.HasSuffix(name, "linear_attn.conv1d.weight") && a.NDim() == 3 && a.Dim(-1) != 1:
			a = mlx.SwapAxes(a, 1, 2)
		case shift && a.NDim() == 1 && (name == prefix+"norm.weight" || hasAnySuffix(name, shiftedNorms)):
			a = mlx.Add(a, mlx.Scalar(1, a.DType()))
		}
		if strings.HasSuffix(dst, "linear_attn.A_log") {
			out.KeepDType = append(out.KeepDType, dst)
		}
		out.Tensors[dst] = a
	}

	out.Linear = append(out.Linear, mlxPrefix+"embed_tokens")
	if _, ok := out.Tensors["language_model.lm_head.weight"]; ok {
		out.Linear = append(out.Linear, "language_model.lm_head")
	}
	for i := range m.cfg.NumLayers {
		p := fmt.Sprintf("%slayers.%d.", mlxPrefix, i)
		names := []string{"linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a", "linear_attn.out_proj"}
		if m.cfg.FullAttentionLayer(i) {
			names = []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}
		}
		for _, n := range append(names, "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj") {
			out.Linear = append(out.Linear, p+n)
		}
	}
	return out, nil
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}
