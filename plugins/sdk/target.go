package sdk

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/plugins/internal/wire"
)

// standInTarget is the plugin's view of the host's target, for drafts that
// borrow from it (model.TargetUser): sizes from Load, the token embedding and
// head read (read-only) from the files the host names, and the layer taps
// the draft sets, which Load reports back for the host to apply. It cannot
// run a forward: the target runs in the host.
type standInTarget struct {
	info  TargetInfo
	taps  []int
	embed *nn.Embedding // pinned
	head  *nn.Linear    // pinned; nil when tied
}

var _ model.DraftTarget = (*standInTarget)(nil)

func newStandInTarget(cfg *LoadConfig) (*standInTarget, error) {
	t := &standInTarget{info: cfg.Target}
	arrays := map[string]*mlx.Array{}
	for _, loc := range cfg.Target.Tensors {
		switch strings.TrimSuffix(strings.TrimSuffix(loc.Role, ScalesSuffix), BiasesSuffix) {
		case RoleEmbedding, RoleHead:
		default:
			continue
		}
		a, err := readTensor(loc)
		if err != nil {
			return nil, err
		}
		arrays[loc.Role] = a
	}
	dtype := cfg.DType
	if !dtype.IsFloat() {
		dtype = mlx.Float32
	}
	layer := func(role string) (*nn.Linear, error) {
		w, ok := arrays[role]
		if !ok {
			return nil, nil
		}
		scales, quantized := arrays[role+ScalesSuffix]
		if !quantized {
			if !w.DType().IsFloat() {
				return nil, fmt.Errorf("target %s has dtype %s and no scales were sent: a quantized target needs a host that sends them (update specula)", role, w.DType())
			}
			return nn.Dense(cast(w, dtype), nil), nil
		}
		q, ok := nn.InferQuant(w, scales, t.info.HiddenSize)
		if !ok {
			return nil, fmt.Errorf("target %s: packed %v with scales %v fits no MLX quantization of hidden size %d", role, w.Shape(), scales.Shape(), t.info.HiddenSize)
		}
		l := &nn.Linear{Weight: w, Scales: scales, Biases: arrays[role+BiasesSuffix], Quant: q}
		return l.AsType(dtype), nil
	}
	embed, err := layer(RoleEmbedding)
	if err != nil {
		return nil, err
	}
	if t.head, err = layer(RoleHead); err != nil {
		return nil, err
	}
	if embed != nil {
		t.embed = &nn.Embedding{Table: embed, DType: dtype}
	}
	mlx.Pin(t.arrays()...)
	return t, nil
}

// arrays lists what the stand-in holds.
func (t *standInTarget) arrays() []*mlx.Array {
	var out []*mlx.Array
	if t.embed != nil {
		out = append(out, t.embed.Table.Arrays()...)
	}
	if t.head != nil {
		out = append(out, t.head.Arrays()...)
	}
	return out
}

func cast(a *mlx.Array, dtype mlx.DType) *mlx.Array {
	if a.DType() == dtype {
		return a
	}
	return mlx.AsType(a, dtype)
}

// readTensor reads one tensor from its file.
func readTensor(loc TensorLocation) (*mlx.Array, error) {
	dt, err := wire.ParseDType(loc.DType)
	if err != nil {
		return nil, fmt.Errorf("target tensor %s: %v", loc.Name, err)
	}
	f, err := os.Open(loc.File)
	if err != nil {
		return nil, fmt.Errorf("target tensor %s: %w", loc.Name, err)
	}
	defer f.Close()
	buf := make([]byte, loc.Size)
	if _, err := io.ReadFull(io.NewSectionReader(f, loc.Offset, loc.Size), buf); err != nil {
		return nil, fmt.Errorf("target tensor %s: reading %d bytes at offset %d of %s: %w", loc.Name, loc.Size, loc.Offset, loc.File, err)
	}
	n := int64(dt.Size())
	for _, d := range loc.Shape {
		n *= int64(d)
	}
	if n != loc.Size {
		return nil, fmt.Errorf("target tensor %s: %d bytes do not hold %s%v", loc.Name, loc.Size, loc.DType, loc.Shape)
	}
	return mlx.FromBytes(buf, dt, loc.Shape...), nil
}

func (t *standInTarget) free() { mlx.Unpin(t.arrays()...) }

func (t *standInTarget) LoadWeights(map[string]*mlx.Array) error {
	return fmt.Errorf("sdk: the target runs in the host; its weights cannot be loaded in a plugin")
}

func (t *standInTarget) NewCaches() []cache.Cache { return nil }

func (t *standInTarget) Forward(*model.Batch, []cache.Cache) (*mlx.Array, *mlx.Array) {
	panic("sdk: the target runs in the host; a plugin cannot run its forward")
}

func (t *standInTarget) Info() model.Info {
	return model.Info{HiddenSize: t.info.HiddenSize, VocabSize: t.info.VocabSize, NumLayers: t.info.NumLayers}
}

func (t *standInTarget) NumLayers() int { return t.info.NumLayers }

func (t *standInTarget) SetLayerTaps(ids []int) error {
	for i, id := range ids {
		if id < 0 || id >= t.info.NumLayers || (i > 0 && id <= ids[i-1]) {
			return fmt.Errorf("layer taps %v: want ascending ids below the target's %d layers", ids, t.info.NumLayers)
		}
	}
	t.taps = append([]int(nil), ids...)
	return nil
}

func (t *standInTarget) TokenEmbeddings(ids *mlx.Array) *mlx.Array {
	if t.embed == nil {
		panic("sdk: the host sent no location for the target's token embedding (Load target.tensors)")
	}
	return t.embed.Lookup(ids)
}

func (t *standInTarget) RawLogits(hidden *mlx.Array) *mlx.Array {
	switch {
	case t.head != nil:
		return t.head.Forward(hidden)
	case t.embed != nil:
		return t.embed.AsLinear(hidden)
	}
	panic("sdk: the host sent no location for the target's head or embedding (Load target.tensors)")
}

func (t *standInTarget) Unembed(hidden *mlx.Array) *mlx.Array { return t.RawLogits(hidden) }
