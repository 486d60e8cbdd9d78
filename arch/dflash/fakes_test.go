package dflash

import (
	"math"
	"slices"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// fakeTarget is a model.DraftTarget of given sizes. Its embedding table is
// random when made with embed; it records the taps it was given.
type fakeTarget struct {
	hidden, vocab, layers int
	taps                  []int
	table                 *mlx.Array // [V, H], nil until embed
}

func (f *fakeTarget) LoadWeights(map[string]*mlx.Array) error { return nil }
func (f *fakeTarget) NewCaches() []cache.Cache                { return nil }
func (f *fakeTarget) Forward(*model.Batch, []cache.Cache) (*mlx.Array, *mlx.Array) {
	panic("fakeTarget.Forward is not used")
}
func (f *fakeTarget) Unembed(h *mlx.Array) *mlx.Array { return f.RawLogits(h) }
func (f *fakeTarget) Info() model.Info {
	return model.Info{HiddenSize: f.hidden, VocabSize: f.vocab, NumLayers: f.layers}
}
func (f *fakeTarget) TokenEmbeddings(ids *mlx.Array) *mlx.Array { return mlx.Take(f.table, ids, 0) }
func (f *fakeTarget) RawLogits(h *mlx.Array) *mlx.Array         { return mlx.Linear(h, f.table) }
func (f *fakeTarget) SetLayerTaps(ids []int) error              { f.taps = slices.Clone(ids); return nil }
func (f *fakeTarget) NumLayers() int                            { return f.layers }

// embed gives the target a random embedding table (on the MLX worker).
func (f *fakeTarget) embed(seed uint64) {
	f.table = mlx.RandomNormal(mlx.RandomKey(seed), mlx.Float32, 0, 1, f.vocab, f.hidden)
}

// randomTensors returns random float32 tensors for every name of spec:
// norms near 1, projections scaled by 1/sqrt(fan-in), as the fixture draws
// them.
func randomTensors(cfg *Config, seed uint64) map[string]*mlx.Array {
	out := map[string]*mlx.Array{}
	for i, x := range WeightSpec(cfg).Tensors {
		shape := make([]int, len(x.Shape))
		for j, d := range x.Shape {
			shape[j] = int(d)
		}
		key := mlx.RandomKey(seed + uint64(i))
		if len(shape) == 1 {
			out[x.Name] = mlx.RandomNormal(key, mlx.Float32, 1, 0.1, shape...)
			continue
		}
		scale := float32(1 / math.Sqrt(float64(shape[1])))
		out[x.Name] = mlx.RandomNormal(key, mlx.Float32, 0, scale, shape...)
	}
	return out
}
