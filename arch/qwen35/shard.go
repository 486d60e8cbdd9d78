package qwen35

import (
	"fmt"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// Tensor parallelism (spec/distributed.md): each of N ranks holds whole
// heads of every mixer and a slice of every MLP's intermediate dimension,
// and computes a partial sum of each block's output, which one all_sum
// after the mixer's output projection and one after the MLP's add up. The
// embedding, the head and the norms are replicated, so every rank ends a
// forward with the whole model's hidden states and logits.
//
//   - attention: query heads divided by N; KV heads divided too, or, when
//     the ranks outnumber them, each rank holds the one KV head its query
//     heads read (KV heads repeated across ranks); o_proj cut by input;
//   - delta-net: value heads divided by N, key heads likewise or repeated
//     the same way; the q | k | v convolution channels, z, b, a, dt_bias
//     and A_log follow their heads; out_proj cut by input;
//   - MLP: gate and up cut by rows, down by input.
//
// Shard decides the cut before LoadWeights, which binds and checks the
// whole checkpoint's shapes and keeps only this rank's slices. A tensor the
// rank cuts is never read whole: when it is a checkpoint's lazy array
// (loader.Checkpoint.Arrays), the binder reads only the rank's rows or
// columns from the file (loader.PartOf); arrays made otherwise (tests) are
// cut with ops.

var _ model.TensorParallel = (*Model)(nil)

// shard is this rank's part of the model.
type shard struct {
	rank, ranks int
	group       *mlx.Group
	heads       nn.Span // attention query heads
	kvHeads     nn.Span // attention KV heads
	keyHeads    nn.Span // delta-net key heads
	valueHeads  nn.Span // delta-net value heads
	inter       nn.Span // dense MLP intermediate rows (empty for other MLPs)
}

// Shard makes the model this rank's part of a tensor-parallel model over g
// (model.TensorParallel): LoadWeights then keeps only this rank's heads and
// MLP rows, and Forward adds the ranks' partial sums with all_sum, so its
// outputs are the whole model's on every rank. It must be called before
// LoadWeights. A group of one leaves the model whole. The error names the
// config.json field that the rank count does not divide.
func (m *Model) Shard(g *mlx.Group) error {
	if g == nil {
		return m.PlanShard(0, 1)
	}
	if err := m.PlanShard(g.Rank(), g.Size()); err != nil {
		return err
	}
	if m.shard != nil {
		m.shard.group = g
	}
	return nil
}

// PlanShard cuts the model as rank of ranks, as Shard does, but without a
// group: LoadWeights keeps that rank's part of the weights, and Forward
// returns the rank's partial sums, added up by no one. It is for checking
// a cut and a rank's weights without starting the ranks (tests, tools);
// generation wants Shard. ranks = 1 leaves the model whole.
func (m *Model) PlanShard(rank, ranks int) error {
	if m.w != nil {
		return fmt.Errorf("qwen35: Shard after LoadWeights: shard the model before loading its weights")
	}
	if ranks == 1 {
		m.shard, m.local = nil, m.cfg
		return nil
	}
	if rank < 0 || rank >= ranks {
		return fmt.Errorf("qwen35: rank %d of %d ranks: want 0 … %d", rank, ranks, ranks-1)
	}
	s, local, err := planShard(m.cfg, rank, ranks)
	if err != nil {
		return err
	}
	m.shard, m.local = s, local
	return nil
}

// planShard cuts cfg for rank of ranks: the spans the rank holds and the
// configuration of its part (head counts and widths of one rank).
func planShard(cfg *Config, rank, ranks int) (*shard, *Config, error) {
	// divides checks that ranks splits a head count evenly.
	divides := func(field string, v int) error {
		if v%ranks != 0 {
			return fmt.Errorf("qwen35: config.json %s = %d is not divisible by %d ranks: tensor parallelism gives every rank an equal share; launch a number of ranks that divides it", field, v, ranks)
		}
		return nil
	}
	// shared checks a head count that ranks may divide or outnumber
	// (then each rank holds the one head its other heads read).
	shared := func(field string, v int) error {
		if v%ranks != 0 && ranks%v != 0 {
			return fmt.Errorf("qwen35: config.json %s = %d: %d ranks neither divide it nor are a multiple of it (needed to share its heads among the ranks or repeat them); launch a number of ranks that does", field, v, ranks)
		}
		return nil
	}
	for _, err := range []error{
		divides("num_attention_heads", cfg.NumHeads),
		shared("num_key_value_heads", cfg.NumKVHeads),
		divides("linear_num_value_heads", cfg.LinearValueHeads),
		shared("linear_num_key_heads", cfg.LinearKeyHeads),
	} {
		if err != nil {
			return nil, nil, err
		}
	}
	if cfg.IntermediateSize > 0 {
		if err := divides("intermediate_size", cfg.IntermediateSize); err != nil {
			return nil, nil, err
		}
	}
	// even is rank's share of n things; spread is the one of n things
	// that rank's share of the others reads when the ranks outnumber them.
	even := func(n int) nn.Span { return evenShare(rank, ranks, n) }
	spread := func(n int) nn.Span {
		if n%ranks == 0 {
			return even(n)
		}
		i := even(n).Start
		return nn.Span{Start: i, Stop: i + 1}
	}
	s := &shard{
		rank: rank, ranks: ranks,
		heads:      even(cfg.NumHeads),
		kvHeads:    spread(cfg.NumKVHeads),
		valueHeads: even(cfg.LinearValueHeads),
		keyHeads:   spread(cfg.LinearKeyHeads),
		inter:      even(cfg.IntermediateSize),
	}
	local := *cfg
	local.NumHeads, local.NumKVHeads = s.heads.Len(), s.kvHeads.Len()
	local.LinearValueHeads, local.LinearKeyHeads = s.valueHeads.Len(), s.keyHeads.Len()
	local.IntermediateSize = s.inter.Len()
	return s, &local, nil
}

// reduce adds up the ranks' partial sums x of a block's output (identity
// when the model is whole, or cut by PlanShard alone).
func (m *Model) reduce(x *mlx.Array) *mlx.Array {
	if m.shard == nil || m.shard.group == nil {
		return x
	}
	return mlx.AllSum(x, m.shard.group)
}

// Ranks returns this rank and the number of ranks the model is sharded
// over (0 and 1 when it is whole).
func (m *Model) Ranks() (rank, ranks int) {
	if m.shard == nil {
		return 0, 1
	}
	return m.shard.rank, m.shard.ranks
}

// Ranks returns this rank and the number of ranks the model being bound is
// sharded over (0 and 1 when it is whole), for an MLPBinder that cuts its
// layers.
func (b *Binder) Ranks() (rank, ranks int) {
	if b.shard == nil {
		return 0, 1
	}
	return b.shard.rank, b.shard.ranks
}

// Share returns this rank's even share of n rows (all of them when the
// model is whole); the caller has checked that the ranks divide n.
func (b *Binder) Share(n int) nn.Span {
	rank, ranks := b.Ranks()
	return evenShare(rank, ranks, n)
}

// evenShare is rank's share of n things split evenly over ranks: the cut
// planShard makes of heads and rows, and Binder.Share of an MLP's widths.
func evenShare(rank, ranks, n int) nn.Span {
	return nn.Span{Start: rank * n / ranks, Stop: (rank + 1) * n / ranks}
}

// Rows keeps the output rows of spans of l, bound at module path (the
// whole layer when the model is not sharded), recording a failure.
func (b *Binder) Rows(l *nn.Linear, path string, spans ...nn.Span) *nn.Linear {
	if l == nil || b.shard == nil {
		return l
	}
	out, err := l.Rows(b.layerCut(l, path), spans...)
	if err != nil {
		b.Mismatch("%s: %v", path, err)
	}
	return out
}

// Cols keeps the input columns s of l, bound at module path (the whole
// layer when the model is not sharded); rank 0 keeps the bias, which the
// all_sum then adds once.
func (b *Binder) Cols(l *nn.Linear, path string, s nn.Span) *nn.Linear {
	if l == nil || b.shard == nil {
		return l
	}
	out, err := l.Cols(b.layerCut(l, path), s, b.shard.rank == 0)
	if err != nil {
		b.Mismatch("%s: %v: %d ranks cannot cut it (use fewer ranks, or an unquantized checkpoint)", path, err, b.shard.ranks)
		return nil
	}
	return out
}

// layerCut cuts the arrays of l, a layer bound at module path (Linear,
// bias): each is its stored tensor (path.weight, .scales, .biases, .bias)
// as read, or cast, so its part is read from the stored tensor (Part).
func (b *Binder) layerCut(l *nn.Linear, path string) nn.Cutter {
	names := map[*mlx.Array]string{}
	for _, a := range []struct {
		a    *mlx.Array
		name string
	}{{l.Weight, nn.WeightSuffix}, {l.Scales, nn.ScalesSuffix}, {l.Biases, nn.BiasesSuffix}, {l.Bias, ".bias"}} {
		if a.a != nil {
			names[a.a] = path + a.name
		}
	}
	return func(a *mlx.Array, axis int, spans ...nn.Span) *mlx.Array {
		return b.Part(names[a], a, axis, spans...)
	}
}

// Part keeps the entries at spans along axis of a, which is the stored
// tensor name as read or cast (a itself when the model is not sharded).
// When that tensor is a checkpoint's lazy array, only those entries are
// read from the file, then cast like a; otherwise a is cut with ops.
func (b *Binder) Part(name string, a *mlx.Array, axis int, spans ...nn.Span) *mlx.Array {
	if a == nil || b.shard == nil {
		return a
	}
	p, ok, err := loader.PartOf(b.tensors[name], axis, spans...)
	switch {
	case !ok:
		return nn.Cut(a, axis, spans...)
	case err != nil:
		b.Mismatch("%s: reading this rank's part: %v", name, err)
		return nn.Cut(a, axis, spans...)
	}
	return cast(p, a.DType())
}
