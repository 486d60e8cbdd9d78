package qwen35moe

import (
	"fmt"
	"slices"

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
//
// Sharded over ranks (Model.Shard), a rank keeps its share of every
// expert's intermediate rows and of the shared expert's (gate and up by
// rows, down by input); the router and the shared-expert gate are
// replicated. The block's output is then this rank's partial sum, which
// the decoder adds up over the ranks like a dense MLP's.
func (m *Model) bindMLP(b *qwen35.Binder, p string) qwen35.MLP {
	cfg := m.cfg
	H, E, is := cfg.HiddenSize, cfg.NumExperts, cfg.SharedSize
	shared := b.Share(is)
	in := b.Stack(
		b.Linear(p+"gate", "router: num_experts × hidden_size", E, H),
		b.Linear(p+"shared_expert_gate", "1 × hidden_size", 1, H),
		b.Rows(b.Linear(p+"shared_expert.gate_proj", "shared_expert_intermediate_size × hidden_size", is, H), p+"shared_expert.gate_proj", shared),
		b.Rows(b.Linear(p+"shared_expert.up_proj", "shared_expert_intermediate_size × hidden_size", is, H), p+"shared_expert.up_proj", shared))
	sharedDown := b.KeepLinear(b.Cols(b.Linear(p+"shared_expert.down_proj", "hidden_size × shared_expert_intermediate_size", H, is), p+"shared_expert.down_proj", shared))
	gateUp, down := bindExperts(b, cfg, p)
	if in == nil || sharedDown == nil || gateUp == nil || down == nil {
		return nil
	}
	for _, l := range []*nn.Linear{gateUp, down} {
		if err := nn.CheckGatherSupport(l.Quant, b.DType()); err != nil && m.unsupported == nil {
			m.unsupported = fmt.Errorf("qwen35moe: %s: %w; compute in float32 there (the manifest's [target] dtype = \"float32\", which \"auto\" picks on the CPU)", p+"experts", err)
		}
	}
	// The forward splits by this rank's widths.
	local := *cfg
	local.ExpertSize, local.SharedSize = b.Share(cfg.ExpertSize).Len(), shared.Len()
	return &sparseMoE{cfg: &local, in: in, sharedDown: sharedDown, gateUp: gateUp, down: down}
}

// bindExperts binds the routed experts under p (a layer's "…mlp.") in
// whichever layout the checkpoint uses, as the stacked layers gateUp
// [E, 2·Ie, H] and down [E, H, Ie], of this rank's share of Ie when
// sharded.
func bindExperts(b *qwen35.Binder, cfg *Config, p string) (gateUp, down *nn.Linear) {
	H, E, ie := cfg.HiddenSize, cfg.NumExperts, cfg.ExpertSize
	rows := b.Share(ie)
	const (
		gateUpWhy = "experts: num_experts × 2·moe_intermediate_size × hidden_size, gate rows first"
		projWhy   = "experts: num_experts × moe_intermediate_size × hidden_size"
		downWhy   = "experts: num_experts × hidden_size × moe_intermediate_size"
		expertWhy = "one expert: moe_intermediate_size × hidden_size"
		eDownWhy  = "one expert: hidden_size × moe_intermediate_size"
	)
	// dense keeps the rows of this rank's spans of the stacked expert weight
	// name (gate | up rows [E, 2·Ie, H] along axis 1, down [E, H, Ie]
	// along axis 2), read as parts when sharded.
	dense := func(name string, shape []int, why string, axis int, spans ...nn.Span) *nn.Linear {
		a := b.Tensor(name, why, shape)
		if a == nil {
			return nil
		}
		return b.KeepLinear(nn.Dense(mlx.AsType(b.Part(name, a, axis, spans...), b.DType()), nil))
	}
	// stacked keeps a layer's per-expert weights stacked, each already cut
	// to this rank's rows when sharded: no expert's whole weight is read.
	stacked := func(a *mlx.Array) *nn.Linear {
		return b.KeepLinear(nn.Dense(mlx.AsType(a, b.DType()), nil))
	}
	switch {
	case b.Has(p + "switch_mlp.gate_proj.weight"):
		return b.Stack(
				b.Rows(b.Linear(p+"switch_mlp.gate_proj", projWhy, E, ie, H), p+"switch_mlp.gate_proj", rows),
				b.Rows(b.Linear(p+"switch_mlp.up_proj", projWhy, E, ie, H), p+"switch_mlp.up_proj", rows)),
			b.KeepLinear(b.Cols(b.Linear(p+"switch_mlp.down_proj", downWhy, E, H, ie), p+"switch_mlp.down_proj", rows))
	case b.Has(p + "experts.0.gate_proj.weight"):
		var gates, ups, downs []*mlx.Array
		for e := range E {
			q := fmt.Sprintf("%sexperts.%d.", p, e)
			// This rank's rows of one expert's weight: [rows, H] or [H, rows].
			expert := func(name, why string, shape []int, axis int) *mlx.Array {
				return b.Part(q+name, b.Tensor(q+name, why, shape), axis, rows)
			}
			gates = append(gates, expert("gate_proj.weight", expertWhy, []int{ie, H}, 0))
			ups = append(ups, expert("up_proj.weight", expertWhy, []int{ie, H}, 0))
			downs = append(downs, expert("down_proj.weight", eDownWhy, []int{H, ie}, 1))
		}
		for _, parts := range [][]*mlx.Array{gates, ups, downs} {
			if slices.Contains(parts, nil) {
				return nil, nil
			}
		}
		return stacked(mlx.Concatenate(1, mlx.Stack(0, gates...), mlx.Stack(0, ups...))), stacked(mlx.Stack(0, downs...))
	}
	return dense(p+"experts.gate_up_proj", []int{E, 2 * ie, H}, gateUpWhy, 1, rows, rows.Shift(ie)),
		dense(p+"experts.down_proj", []int{E, H, ie}, downWhy, 2, rows)
}
