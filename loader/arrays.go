package loader

import (
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// Arrays maps every tensor of a validated checkpoint to a lazy MLX array:
// MLX's own safetensors loader reads each shard on the current stream's
// device when the arrays are evaluated (on CUDA through a staging buffer into
// device memory, never into managed memory as arrays built from Go bytes
// would be). Only tensors the index assigns to a shard are taken from it.
// Tensors keep their stored dtype. PartOf reads parts of these arrays
// instead: the checkpoint remembers them until Close. It must run on the
// MLX worker.
func (c *Checkpoint) Arrays() (map[string]*mlx.Array, error) {
	return c.arrays(nil)
}

// ArraysAs is Arrays with every floating-point tensor cast lazily to dtype
// (a bfloat16 checkpoint read as float32 for the CPU, say); integer tensors
// are left as stored.
func (c *Checkpoint) ArraysAs(dtype mlx.DType) (map[string]*mlx.Array, error) {
	return c.arrays(&dtype)
}

func (c *Checkpoint) arrays(cast *mlx.DType) (map[string]*mlx.Array, error) {
	out := map[string]*mlx.Array{}
	for _, shard := range c.shards {
		arrays, err := mlx.LoadSafetensors(shard.Path())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shard.Path(), err)
		}
		for name, a := range arrays {
			info, ok := c.Tensor(name)
			if !ok || info.Path != shard.Path() {
				continue
			}
			if cast != nil && a.DType().IsFloat() && a.DType() != *cast {
				a = mlx.AsType(a, *cast)
			}
			out[name] = a
		}
	}
	c.remember(out, cast)
	return out, nil
}
