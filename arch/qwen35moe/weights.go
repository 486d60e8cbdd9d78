package qwen35moe

import (
	"fmt"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/mlx"
)

// This file is the only place that knows how Qwen3.5 MoE checkpoints spell
// and store the sparse block (spec/qwen35.md section 9, spec/quantized.md);
// everything else, including the text prefix and the norms, is qwen35's.
// The routed experts come in three layouts, told apart by their names:
//
//   - fused (Hugging Face, the released checkpoints):
//     mlp.experts.gate_up_proj [E, 2·Ie, H] (per expert the gate rows,
//     then the up rows) and mlp.experts.down_proj [E, H, Ie], no ".weight";
//   - per expert (what transformers 5 saves, and some re-exports):
//     mlp.experts.{e}.{gate,up,down}_proj.weight;
//   - MLX (mlx_lm.convert): mlp.switch_mlp.{gate,up,down}_proj.weight
//     [E, Ie, H] / [E, H, Ie], dense or quantized.
//
// All three become the same two stacked layers; the router mlp.gate, the
// shared expert mlp.shared_expert.* and its gate mlp.shared_expert_gate
// have the same names everywhere.

// bindMLP is the model's qwen35.MLPBinder: it binds one layer's sparse
// block, and records in m.unsupported when the backend cannot run its
// experts' products in the compute dtype.
func (m *Model) bindMLP(b *qwen35.Binder, p string) qwen35.MLP {
	cfg := m.cfg
	H, E, is := cfg.HiddenSize, cfg.NumExperts, cfg.SharedSize
	in := b.Stack(
		b.Linear(p+"gate", "router: num_experts × hidden_size", E, H),
		b.Linear(p+"shared_expert_gate", "1 × hidden_size", 1, H),
		b.Linear(p+"shared_expert.gate_proj", "shared_expert_intermediate_size × hidden_size", is, H),
		b.Linear(p+"shared_expert.up_proj", "shared_expert_intermediate_size × hidden_size", is, H))
	sharedDown := b.KeepLinear(b.Linear(p+"shared_expert.down_proj", "hidden_size × shared_expert_intermediate_size", H, is))
	gateUp, down := bindExperts(b, cfg, p)
	if in == nil || sharedDown == nil || gateUp == nil || down == nil {
		return nil
	}
	for _, l := range []*nn.Linear{gateUp, down} {
		if err := nn.CheckGatherSupport(l.Quant, b.DType()); err != nil && m.unsupported == nil {
			m.unsupported = fmt.Errorf("qwen35moe: %s: %w; compute in float32 there (the manifest's [target] dtype = \"float32\", which \"auto\" picks on the CPU)", p+"experts", err)
		}
	}
	return &sparseMoE{cfg: cfg, in: in, sharedDown: sharedDown, gateUp: gateUp, down: down}
}

// bindExperts binds the routed experts under p (a layer's "…mlp.") in
// whichever layout the checkpoint uses, as the stacked layers gateUp
// [E, 2·Ie, H] and down [E, H, Ie].
func bindExperts(b *qwen35.Binder, cfg *Config, p string) (gateUp, down *nn.Linear) {
	H, E, ie := cfg.HiddenSize, cfg.NumExperts, cfg.ExpertSize
	const (
		gateUpWhy = "experts: num_experts × 2·moe_intermediate_size × hidden_size, gate rows first"
		projWhy   = "experts: num_experts × moe_intermediate_size × hidden_size"
		downWhy   = "experts: num_experts × hidden_size × moe_intermediate_size"
		expertWhy = "one expert: moe_intermediate_size × hidden_size"
		eDownWhy  = "one expert: hidden_size × moe_intermediate_size"
	)
	dense := func(a *mlx.Array) *nn.Linear {
		if a == nil {
			return nil
		}
		return b.KeepLinear(nn.Dense(mlx.AsType(a, b.DType()), nil))
	}
	switch {
	case b.Has(p + "switch_mlp.gate_proj.weight"):
		return b.Stack(
				b.Linear(p+"switch_mlp.gate_proj", projWhy, E, ie, H),
				b.Linear(p+"switch_mlp.up_proj", projWhy, E, ie, H)),
			b.KeepLinear(b.Linear(p+"switch_mlp.down_proj", downWhy, E, H, ie))
	case b.Has(p + "experts.0.gate_proj.weight"):
		var gates, ups, downs []*mlx.Array
		for e := range E {
			q := fmt.Sprintf("%sexperts.%d.", p, e)
			gates = append(gates, b.Tensor(q+"gate_proj.weight", expertWhy, []int{ie, H}))
			ups = append(ups, b.Tensor(q+"up_proj.weight", expertWhy, []int{ie, H}))
			downs = append(downs, b.Tensor(q+"down_proj.weight", eDownWhy, []int{H, ie}))
		}
		for _, parts := range [][]*mlx.Array{gates, ups, downs} {
			for _, a := range parts {
				if a == nil {
					return nil, nil
				}
			}
		}
		return dense(mlx.Concatenate(1, mlx.Stack(0, gates...), mlx.Stack(0, ups...))), dense(mlx.Stack(0, downs...))
	}
	return dense(b.Tensor(p+"experts.gate_up_proj", gateUpWhy, []int{E, 2 * ie, H})),
		dense(b.Tensor(p+"experts.down_proj", downWhy, []int{E, H, ie}))
}
