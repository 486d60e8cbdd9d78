package dflash

import (
	"fmt"
	"slices"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// ExportMLX returns the draft's tensors in MLX's layout as mlx-vlm's DFlash
// drafter names them (spec/quantized.md): the checkpoint's own names without
// the `model.` prefix some ports add, the borrowed embedding and head
// dropped (the target's are used), and fc, the attention and the MLP
// projections as the quantizable layers. A quantized checkpoint is refused.
func (d *Draft) ExportMLX(tensors map[string]*mlx.Array) (*loader.MLXModel, error) {
	return ExportTensors(tensors, WeightSpec(d.cfg), LinearLayers(d.cfg))
}

// LinearLayers lists DFlash's quantizable layers by module path.
func LinearLayers(cfg *Config) []string {
	out := []string{"fc"}
	for l := range cfg.NumLayers {
		p := fmt.Sprintf("layers.%d.", l)
		for _, n := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"} {
			out = append(out, p+n)
		}
	}
	return out
}

// ExportTensors renames tensors by spec (its Rename, its Ignore prefixes
// dropped) for ExportMLX; an architecture built on DFlash passes its own
// spec and layers. Every tensor must be one the spec expects.
func ExportTensors(tensors map[string]*mlx.Array, spec loader.Spec, linear []string) (*loader.MLXModel, error) {
	out := &loader.MLXModel{Tensors: map[string]*mlx.Array{}, Linear: linear}
	for name, a := range tensors {
		if strings.HasSuffix(name, nn.ScalesSuffix) {
			return nil, fmt.Errorf("dflash: %s exists: the draft is already quantized; quantize the unquantized original", name)
		}
		if slices.ContainsFunc(spec.Ignore, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		dst := name
		if spec.Rename != nil {
			dst = spec.Rename(name)
		}
		if !slices.ContainsFunc(spec.Tensors, func(x loader.Expect) bool { return x.Name == dst }) {
			return nil, fmt.Errorf("dflash: unexpected tensor %s: not part of this architecture's checkpoint", name)
		}
		if _, dup := out.Tensors[dst]; dup {
			return nil, fmt.Errorf("dflash: tensor %s is stored twice", dst)
		}
		out.Tensors[dst] = a
	}
	return out, nil
}
