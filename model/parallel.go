package model

import "github.com/specula-dev/specula/mlx"

// TensorParallel is implemented by targets that can be cut over the ranks
// of a distributed group (tensor parallelism, spec/distributed.md). Shard,
// called before LoadWeights, makes LoadWeights keep only this rank's part of
// the weights and Forward add up the ranks' partial results, so that every
// rank's outputs (hidden states, taps, logits) are the whole model's and
// each rank can run the same generation. Every rank must then run the same
// forwards in the same order. An error says why the model cannot be cut
// into g.Size() parts (naming the configuration field at fault).
type TensorParallel interface {
	Shard(g *mlx.Group) error
}
