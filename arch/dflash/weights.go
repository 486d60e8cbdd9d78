package dflash

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// This file is the only place that knows how DFlash checkpoints spell their
// tensors (spec/dflash.md section 4): the names and exact shapes, the
// `model.` prefix some ports add, and the embedding and head tensors some
// ports carry although the target's are used. The forward never sees a
// checkpoint quirk.

// storedPrefix is the prefix some ports put on every name; it is stripped.
const storedPrefix = "model."

// borrowedPrefixes name tensors a checkpoint may carry but a DFlash draft
// never reads: it borrows the target's embedding table and output head.
var borrowedPrefixes = []string{
	"embed_tokens.", "lm_head.",
	storedPrefix + "embed_tokens.", storedPrefix + "lm_head.",
}

// weights are the bound, pinned tensors of a draft in the compute dtype.
type weights struct {
	fc         *mlx.Array // [H, F]
	hiddenNorm *mlx.Array // [H], on the projected context
	norm       *mlx.Array // [H], the final norm
	layers     []layerWeights
	all        []*mlx.Array // every pinned array
}

// Projections that read the same rows are stacked at load (nn.ConcatRows):
// one product instead of two in every draft forward.
type layerWeights struct {
	inputNorm, postNorm *mlx.Array // [H]
	q, o                *mlx.Array // [Hq·D, H], [H, Hq·D]
	kv                  *mlx.Array // [2·Hkv·D, H]: k_proj, v_proj
	qNorm, kNorm        *mlx.Array // [D]
	gateUp              *mlx.Array // [2·I, H]: gate_proj, up_proj
	down                *mlx.Array // [H, I]
}

// WeightSpec returns what a DFlash checkpoint must hold for cfg (spec/dflash.md
// 4.1): every tensor with its exact shape, names without the `model.` prefix
// (Rename strips it), and the borrowed embedding and head ignored (4.2). An
// architecture built on DFlash appends its own tensors to Tensors and may
// wrap Rename.
func WeightSpec(cfg *Config) loader.Spec {
	H, D, I := cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize
	qd, kvd := cfg.NumHeads*D, cfg.NumKVHeads*D
	x := func(name string, shape ...int) loader.Expect {
		s := make([]uint64, len(shape))
		for i, d := range shape {
			s[i] = uint64(d)
		}
		return loader.Expect{Name: name, Shape: s}
	}
	ts := []loader.Expect{
		x("fc.weight", H, cfg.FeatureSize()),
		x("hidden_norm.weight", H),
		x("norm.weight", H),
	}
	for l := range cfg.NumLayers {
		p := fmt.Sprintf("layers.%d.", l)
		ts = append(ts,
			x(p+"input_layernorm.weight", H),
			x(p+"post_attention_layernorm.weight", H),
			x(p+"self_attn.q_proj.weight", qd, H),
			x(p+"self_attn.k_proj.weight", kvd, H),
			x(p+"self_attn.v_proj.weight", kvd, H),
			x(p+"self_attn.o_proj.weight", H, qd),
			x(p+"self_attn.q_norm.weight", D),
			x(p+"self_attn.k_norm.weight", D),
			x(p+"mlp.gate_proj.weight", I, H),
			x(p+"mlp.up_proj.weight", I, H),
			x(p+"mlp.down_proj.weight", H, I),
		)
	}
	return loader.Spec{
		Tensors: ts,
		Ignore:  slices.Clone(borrowedPrefixes),
		Rename:  func(stored string) string { return strings.TrimPrefix(stored, storedPrefix) },
	}
}

// Bind checks tensors (lazy arrays, e.g. from mlx.LoadSafetensors) against
// spec and returns them under the spec's names, cast to dtype and not yet
// pinned. Every missing, mis-shaped, unexpected or duplicate tensor is
// reported in one *loader.BindError naming the tensor, the expected and the
// found shape; non-float tensors are reported together after that. arch
// names the architecture in messages. Tensors the spec ignores are logged
// once at info level.
func Bind(arch string, tensors map[string]*mlx.Array, spec loader.Spec, dtype mlx.DType) (map[string]*mlx.Array, error) {
	if err := mlx.Err(); err != nil {
		return nil, fmt.Errorf("%s: an MLX error is pending before binding the weights (the tensors may be incomplete): %w", arch, err)
	}
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	var have []loader.TensorInfo
	var ignored, invalid []string
	for _, name := range names {
		a := tensors[name]
		if slices.ContainsFunc(spec.Ignore, func(p string) bool { return strings.HasPrefix(name, p) }) {
			ignored = append(ignored, name)
			continue
		}
		if !a.Valid() {
			invalid = append(invalid, name)
			continue
		}
		shape := make([]uint64, a.NDim())
		for i, d := range a.Shape() {
			shape[i] = uint64(d)
		}
		have = append(have, loader.TensorInfo{Name: name, Shape: shape, Path: "the checkpoint"})
	}
	if len(ignored) > 0 {
		slog.Info(arch+": ignoring the checkpoint's embedding and head tensors; the target's are used", "tensors", ignored)
	}
	if len(invalid) > 0 {
		return nil, fmt.Errorf("%s: tensors %s are empty arrays: the MLX op that produced them failed", arch, strings.Join(invalid, ", "))
	}
	infos, err := loader.Bind(arch, have, spec)
	if err != nil {
		return nil, fmt.Errorf("%w\n(expected shapes come from config.json — fc.weight is [hidden_size, len(target_layer_ids)·hidden_size]; mismatches usually mean the config belongs to another checkpoint)", err)
	}
	bound := make(map[string]*mlx.Array, len(infos))
	var notFloat []string
	for name, info := range infos {
		a := tensors[info.Name]
		if !a.DType().IsFloat() {
			notFloat = append(notFloat, fmt.Sprintf("%s has dtype %s", info.Name, a.DType()))
			continue
		}
		if a.DType() != dtype {
			a = mlx.AsType(a, dtype)
		}
		bound[name] = a
	}
	if len(notFloat) > 0 {
		sort.Strings(notFloat)
		return nil, fmt.Errorf("%s: %s; want float tensors (quantized drafts are not supported yet)", arch, strings.Join(notFloat, ", "))
	}
	return bound, nil
}

// LoadWeights binds the checkpoint's tensors (spec/dflash.md 3.3 and 4):
// every tensor must be present with its exact shape, and all problems are
// reported in one error. On success the arrays are cast to the compute
// dtype and pinned, but not read: the engine evaluates Weights with
// progress (or the first forward does). Loading again replaces the previous
// weights.
func (d *Draft) LoadWeights(tensors map[string]*mlx.Array) error {
	bound, err := Bind(ArchName, tensors, WeightSpec(d.cfg), d.dtype)
	if err != nil {
		return err
	}
	d.UseWeights(bound)
	return nil
}

// UseWeights installs DFlash's tensors from arrays returned by Bind with a
// spec that includes WeightSpec(d.Config()), pinning them; names outside
// that spec are left to the caller (an architecture built on DFlash binds its
// own tensors from the same map). It panics if a DFlash tensor is absent,
// which Bind rules out.
func (d *Draft) UseWeights(bound map[string]*mlx.Array) {
	var all []*mlx.Array
	part := func(name string) *mlx.Array {
		a, ok := bound[name]
		if !ok {
			panic(fmt.Sprintf("dflash: UseWeights without tensor %s: bind with WeightSpec first", name))
		}
		return a
	}
	get := func(name string) *mlx.Array {
		a := part(name)
		all = append(all, a)
		return a
	}
	stack := func(names ...string) *mlx.Array {
		parts := make([]*mlx.Array, len(names))
		for i, n := range names {
			parts[i] = part(n)
		}
		a := nn.ConcatRows(parts...)
		all = append(all, a)
		return a
	}
	w := &weights{
		fc:         get("fc.weight"),
		hiddenNorm: get("hidden_norm.weight"),
		norm:       get("norm.weight"),
		layers:     make([]layerWeights, d.cfg.NumLayers),
	}
	for l := range w.layers {
		p := fmt.Sprintf("layers.%d.", l)
		w.layers[l] = layerWeights{
			inputNorm: get(p + "input_layernorm.weight"),
			postNorm:  get(p + "post_attention_layernorm.weight"),
			q:         get(p + "self_attn.q_proj.weight"),
			kv:        stack(p+"self_attn.k_proj.weight", p+"self_attn.v_proj.weight"),
			o:         get(p + "self_attn.o_proj.weight"),
			qNorm:     get(p + "self_attn.q_norm.weight"),
			kNorm:     get(p + "self_attn.k_norm.weight"),
			gateUp:    stack(p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight"),
			down:      get(p + "mlp.down_proj.weight"),
		}
	}
	w.all = all
	mlx.Pin(w.all...)
	d.Free()
	d.w = w
}

// Weights returns every array the draft holds (for evaluation with progress
// or memory accounting); empty before LoadWeights.
func (d *Draft) Weights() []*mlx.Array {
	if d.w == nil {
		return nil
	}
	return slices.Clone(d.w.all)
}

// Free releases the weights (unpinned; freed at the worker's next sweep).
func (d *Draft) Free() {
	if d.w != nil {
		mlx.Unpin(d.w.all...)
		d.w = nil
	}
}

// errNoWeights is the panic value of a forward before LoadWeights.
var errNoWeights = errors.New("dflash: the draft has no weights: call LoadWeights first")
