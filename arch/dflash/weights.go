package dflash

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// This file is the only place that knows how DFlash checkpoints spell their
// tensors (spec/dflash.md section 4): the names and exact shapes, the
// `model.` prefix some ports add, the embedding and head tensors some ports
// carry although the target's are used, and quantized layers of MLX
// conversions (mlx-vlm's module paths are the checkpoint's own names, with
// <layer>.scales and .biases beside a packed <layer>.weight). The forward
// never sees a checkpoint quirk.

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
	fc         *nn.Linear // [H, F]
	hiddenNorm *mlx.Array // [H], on the projected context
	norm       *mlx.Array // [H], the final norm
	layers     []layerWeights
	all        []*mlx.Array // every pinned array
}

// Projections that read the same rows are stacked at load (nn.ConcatLinear):
// one product instead of two in every draft forward.
type layerWeights struct {
	inputNorm, postNorm *mlx.Array // [H]
	q, o                *nn.Linear // [Hq·D, H], [H, Hq·D]
	kv                  *nn.Linear // [2·Hkv·D, H]: k_proj, v_proj
	qNorm, kNorm        *mlx.Array // [D]
	gateUp              *nn.Linear // [2·I, H]: gate_proj, up_proj
	down                *nn.Linear // [H, I]
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
// spec and returns them under the spec's names as layers: every tensor is a
// dense layer (its Weight) in dtype, except the two-dimensional ones stored
// quantized (a <layer>.scales beside <layer>.weight), which become quantized
// layers with the parameters of quant (config.json's quantization section;
// see nn.LoadLinear) and are checked against the spec by their logical
// shape. Every missing, mis-shaped, unexpected or duplicate tensor is
// reported in one *loader.BindError naming the tensor, the expected and the
// found shape; quantization and dtype problems are reported together after
// that. arch names the architecture in messages. Tensors the spec ignores
// are logged once at info level.
func Bind(arch string, tensors map[string]*mlx.Array, spec loader.Spec, quant *loader.Quantization, dtype mlx.DType) (map[string]*nn.Linear, error) {
	if err := mlx.Err(); err != nil {
		return nil, fmt.Errorf("%s: an MLX error is pending before binding the weights (the tensors may be incomplete): %w", arch, err)
	}
	rename := spec.Rename
	if rename == nil {
		rename = func(s string) string { return s }
	}
	expect := make(map[string]loader.Expect, len(spec.Tensors))
	for _, x := range spec.Tensors {
		expect[x.Name] = x
	}
	ignored := func(name string) bool {
		return slices.ContainsFunc(spec.Ignore, func(p string) bool { return strings.HasPrefix(name, p) })
	}

	// Quantized layers first: each stands in the shape check as its
	// logical [out, in] weight, and its scales and biases are consumed.
	quantized := map[string]*nn.Linear{} // by stored weight name
	consumed := map[string]bool{}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(tensors)) {
		base, ok := strings.CutSuffix(name, nn.ScalesSuffix)
		if !ok || ignored(name) {
			continue
		}
		x, ok := expect[rename(base+nn.WeightSuffix)]
		if !ok || len(x.Shape) != 2 {
			continue // left to the shape check: an unexpected tensor
		}
		l, used, err := nn.LoadLinear(tensors, base, quant, dtype, int(x.Shape[0]), int(x.Shape[1]))
		for _, n := range used {
			consumed[n] = true
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		quantized[base+nn.WeightSuffix] = l
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: quantized layers do not match: %s", arch, strings.Join(problems, "; "))
	}

	var have []loader.TensorInfo
	var ignoredNames, invalid []string
	for _, name := range slices.Sorted(maps.Keys(tensors)) {
		a := tensors[name]
		if ignored(name) {
			ignoredNames = append(ignoredNames, name)
			continue
		}
		if l, ok := quantized[name]; ok {
			x := expect[rename(name)]
			have = append(have, loader.TensorInfo{Name: name, Shape: x.Shape, Path: "the checkpoint (quantized " + l.Quant.String() + ")"})
			continue
		}
		if consumed[name] {
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
	if len(ignoredNames) > 0 {
		slog.Info(arch+": ignoring the checkpoint's embedding and head tensors; the target's are used", "tensors", ignoredNames)
	}
	if len(invalid) > 0 {
		return nil, fmt.Errorf("%s: tensors %s are empty arrays: the MLX op that produced them failed", arch, strings.Join(invalid, ", "))
	}
	infos, err := loader.Bind(arch, have, spec)
	if err != nil {
		return nil, fmt.Errorf("%w\n(expected shapes come from config.json — fc.weight is [hidden_size, len(target_layer_ids)·hidden_size]; mismatches usually mean the config belongs to another checkpoint)", err)
	}
	bound := make(map[string]*nn.Linear, len(infos))
	var notFloat []string
	for name, info := range infos {
		if l, ok := quantized[info.Name]; ok {
			bound[name] = l
			continue
		}
		a := tensors[info.Name]
		if !a.DType().IsFloat() {
			notFloat = append(notFloat, fmt.Sprintf("%s has dtype %s", info.Name, a.DType()))
			continue
		}
		if a.DType() != dtype {
			a = mlx.AsType(a, dtype)
		}
		bound[name] = nn.Dense(a, nil)
	}
	if len(notFloat) > 0 {
		sort.Strings(notFloat)
		return nil, fmt.Errorf("%s: %s; want float tensors (a quantized layer needs its .scales beside its packed weight)", arch, strings.Join(notFloat, ", "))
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
	bound, err := Bind(ArchName, tensors, WeightSpec(d.cfg), d.quant, d.dtype)
	if err != nil {
		return err
	}
	d.UseWeights(bound)
	return nil
}

// UseWeights installs DFlash's tensors from layers returned by Bind with a
// spec that includes WeightSpec(d.Config()), pinning them; names outside
// that spec are left to the caller (an architecture built on DFlash binds its
// own tensors from the same map). It panics if a DFlash tensor is absent,
// which Bind rules out, or if a norm is quantized, which Bind's shape check
// rules out (only two-dimensional tensors can be).
func (d *Draft) UseWeights(bound map[string]*nn.Linear) {
	var all []*mlx.Array
	layer := func(name string) *nn.Linear {
		l, ok := bound[name]
		if !ok {
			panic(fmt.Sprintf("dflash: UseWeights without tensor %s: bind with WeightSpec first", name))
		}
		return l
	}
	linear := func(names ...string) *nn.Linear {
		parts := make([]*nn.Linear, len(names))
		for i, n := range names {
			parts[i] = layer(n)
		}
		l := nn.ConcatLinear(parts...)
		all = append(all, l.Arrays()...)
		return l
	}
	plain := func(name string) *mlx.Array {
		l := layer(name)
		if l.Quantized() {
			panic(fmt.Sprintf("dflash: tensor %s is quantized but is read as a plain tensor", name))
		}
		all = append(all, l.Weight)
		return l.Weight
	}
	w := &weights{
		fc:         linear("fc.weight"),
		hiddenNorm: plain("hidden_norm.weight"),
		norm:       plain("norm.weight"),
		layers:     make([]layerWeights, d.cfg.NumLayers),
	}
	for l := range w.layers {
		p := fmt.Sprintf("layers.%d.", l)
		w.layers[l] = layerWeights{
			inputNorm: plain(p + "input_layernorm.weight"),
			postNorm:  plain(p + "post_attention_layernorm.weight"),
			q:         linear(p + "self_attn.q_proj.weight"),
			kv:        linear(p+"self_attn.k_proj.weight", p+"self_attn.v_proj.weight"),
			o:         linear(p + "self_attn.o_proj.weight"),
			qNorm:     plain(p + "self_attn.q_norm.weight"),
			kNorm:     plain(p + "self_attn.k_norm.weight"),
			gateUp:    linear(p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight"),
			down:      linear(p + "mlp.down_proj.weight"),
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
