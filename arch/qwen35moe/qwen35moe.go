// Package qwen35moe is the Qwen3.5 mixture-of-experts target
// (spec/qwen35.md section 9): the hybrid decoder of package qwen35 — gated
// delta-net and gated attention layers, unchanged and not copied — with
// every layer's MLP replaced by a sparse block: a softmax router choosing
// num_experts_per_tok of num_experts SwiGLU experts per token, weighted by
// their renormalised probabilities, plus a shared expert scaled by a
// sigmoid gate. The experts run as MLX gather matmuls (gather_mm, or
// gather_qmm for quantized MLX checkpoints) over stacked expert weights.
//
// It registers Qwen3_5MoeForCausalLM and Qwen3_5MoeForConditionalGeneration
// with the dense target's capabilities (model, draft-target), so DFlash and
// DFlash2 drafts run against it unchanged.
//
// Files: config.go reads the sparse block's fields of config.json;
// weights.go binds the block from any of its checkpoint layouts; moe.go is
// the block's forward.
package qwen35moe

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

func init() {
	for _, name := range []string{"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"} {
		registry.RegisterTarget(name, nil, New)
	}
}

// Model is a Qwen3.5 MoE text decoder: a qwen35.Model (whose methods it
// has: Forward, caches, taps, embeddings, LoadWeights) built with the sparse
// block as its MLP. Build it with New, then LoadWeights.
type Model struct {
	*qwen35.Model
	cfg *Config
	// unsupported is what binding found the device's MLX backend cannot
	// run: the experts' products in the compute dtype (nil when it can).
	unsupported error
}

var (
	_ model.DraftTarget  = (*Model)(nil)
	_ model.WeightHolder = (*Model)(nil)
)

// New parses the checkpoint's config.json (including an MLX quantization
// section) and returns a weightless model computing in rc.DType.
func New(rc registry.Config) (*Model, error) {
	cfg, err := ParseConfig(rc.JSON)
	if err != nil {
		return nil, err
	}
	quant, err := loader.ParseQuantization(filepath.Join(rc.Dir, "config.json"), rc.JSON)
	if err != nil {
		return nil, err
	}
	return NewFromConfig(cfg, quant, rc.DType)
}

// NewFromConfig returns a weightless model for a parsed config, for a
// checkpoint whose config.json has the quantization section quant (nil when
// none).
func NewFromConfig(cfg *Config, quant *loader.Quantization, dtype mlx.DType) (*Model, error) {
	m := &Model{cfg: cfg}
	hybrid, err := qwen35.NewHybrid(cfg.Config, quant, dtype, m.bindMLP)
	if err != nil {
		return nil, err
	}
	m.Model = hybrid
	return m, nil
}

// LoadWeights binds the checkpoint's tensors as qwen35.Model.LoadWeights
// does, with the sparse block in every layer. A device whose MLX backend
// cannot run the experts' products in the compute dtype (MLX's CPU backend
// runs dense gather_mm in float32 only) fails it with an error saying so,
// at load rather than at the first forward.
func (m *Model) LoadWeights(tensors map[string]*mlx.Array) error {
	m.unsupported = nil
	if err := m.Model.LoadWeights(tensors); err != nil {
		return err
	}
	if m.unsupported != nil {
		m.Free()
		return m.unsupported
	}
	return nil
}

// Config returns the model's configuration.
func (m *Model) Config() *Config { return m.cfg }

// Shard cuts the model over the ranks of g (model.TensorParallel): the
// hybrid layers as qwen35.Model.Shard does, and in every sparse block each
// rank's share of each routed expert's and of the shared expert's
// intermediate dimension (bindMLP). Both widths must divide by the rank
// count; the error names the config.json field.
func (m *Model) Shard(g *mlx.Group) error {
	if g != nil {
		if err := checkShard(m.cfg, g.Size()); err != nil {
			return err
		}
	}
	return m.Model.Shard(g)
}

// PlanShard cuts the model as rank of ranks without a group, as
// qwen35.Model.PlanShard does, after the checks of Shard.
func (m *Model) PlanShard(rank, ranks int) error {
	if err := checkShard(m.cfg, ranks); err != nil {
		return err
	}
	return m.Model.PlanShard(rank, ranks)
}

// checkShard refuses a rank count that does not divide the experts' or the
// shared expert's intermediate width, naming the config.json field.
func checkShard(cfg *Config, ranks int) error {
	for _, f := range []struct {
		field string
		v     int
	}{{"moe_intermediate_size", cfg.ExpertSize}, {"shared_expert_intermediate_size", cfg.SharedSize}} {
		if ranks > 0 && f.v%ranks != 0 {
			return fmt.Errorf("qwen35moe: config.json %s = %d is not divisible by %d ranks: tensor parallelism gives every rank an equal share of each expert; launch a number of ranks that divides it", f.field, f.v, ranks)
		}
	}
	return nil
}

// errNoExport is ExportMLX's answer: writing the MoE layout (switch_mlp,
// the router at 8 bits) is not implemented.
var errNoExport = errors.New("qwen35moe: `specula quantize` does not write Qwen3.5 MoE checkpoints yet; convert with mlx_lm.convert (its output loads unchanged)")

// ExportMLX refuses: the dense Qwen3.5 export it would otherwise inherit
// does not know the sparse block's layout.
func (m *Model) ExportMLX(map[string]*mlx.Array) (*loader.MLXModel, error) { return nil, errNoExport }
