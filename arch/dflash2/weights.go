package dflash2

import (
	"fmt"
	"strings"

	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// This file names the tensors DFlash2 adds to DFlash's (spec/dflash2.md 2.1
// and 3.1) and absorbs its one naming quirk: published checkpoints store the
// selector's codebooks without a ".weight" suffix (as nn.Parameter), while
// re-exports through an nn.Embedding add it. Both spellings are accepted.

const selectorPrefix = "candidate_selector."

// codebooks are stored under these names (without ".weight").
var codebooks = []string{selectorPrefix + "predecessor_codebook", selectorPrefix + "successor_codebook"}

// WeightSpec returns what a DFlash2 checkpoint must hold for cfg: DFlash's
// tensors, per layer the base kernel [2, Kc, H] and kernel projection
// [2·Kc·G, H] of attention_conv and mlp_conv, and the selector's codebooks
// [V, R] and hidden projection [R, H]: 3 + 15·N + 3 tensors.
func WeightSpec(cfg *Config) loader.Spec {
	spec := dflash.WeightSpec(&cfg.Config)
	H, Kc, R, V := cfg.HiddenSize, cfg.ConvKernel, cfg.SelectorRank, cfg.VocabSize
	x := func(name string, shape ...int) loader.Expect {
		s := make([]uint64, len(shape))
		for i, d := range shape {
			s[i] = uint64(d)
		}
		return loader.Expect{Name: name, Shape: s}
	}
	for l := range cfg.NumLayers {
		for _, c := range []string{"attention_conv", "mlp_conv"} {
			p := fmt.Sprintf("layers.%d.%s.", l, c)
			spec.Tensors = append(spec.Tensors,
				x(p+"base_kernel", 2, Kc, H),
				x(p+"kernel_projection.weight", 2*Kc*cfg.ConvGroups(), H))
		}
	}
	spec.Tensors = append(spec.Tensors,
		x(codebooks[0], V, R),
		x(codebooks[1], V, R),
		x(selectorPrefix+"hidden_projection.weight", R, H))
	rename := spec.Rename
	spec.Rename = func(stored string) string {
		name := rename(stored)
		if base, ok := strings.CutSuffix(name, ".weight"); ok && (base == codebooks[0] || base == codebooks[1]) {
			return base
		}
		return name
	}
	return spec
}

// layerBaseKernel names layer l's base kernel of the convolution c.
func layerBaseKernel(l int, c string) string { return fmt.Sprintf("layers.%d.%s.base_kernel", l, c) }

// LoadWeights binds the checkpoint's tensors: every DFlash and DFlash2 tensor
// must be present with its exact shape, and all problems are reported in one
// error. On success the arrays are cast to the compute dtype and pinned, not
// read (see dflash.Draft.LoadWeights). Loading again replaces the previous
// weights.
func (d *Draft) LoadWeights(tensors map[string]*mlx.Array) error {
	bound, err := dflash.Bind(ArchName, tensors, WeightSpec(d.cfg), d.Quantization(), d.DType())
	if err != nil {
		return err
	}
	if l := bound[layerBaseKernel(0, "attention_conv")]; l != nil && l.Quantized() {
		return fmt.Errorf("%s: %s is quantized; base kernels are plain tensors", ArchName, layerBaseKernel(0, "attention_conv"))
	}
	d.Free()
	d.Draft.UseWeights(bound)
	keepLinear := func(l *nn.Linear) *nn.Linear {
		d.own = append(d.own, l.Arrays()...)
		return l
	}
	keep := func(name string) *mlx.Array {
		a := bound[name].Weight
		d.own = append(d.own, a)
		return a
	}
	layers := make([]layerConvs, d.cfg.NumLayers)
	for l := range layers {
		for _, c := range []struct {
			name string
			conv *conv
		}{{"attention_conv", &layers[l].attention}, {"mlp_conv", &layers[l].mlp}} {
			p := fmt.Sprintf("layers.%d.%s.", l, c.name)
			*c.conv = conv{base: keep(p + "base_kernel"), proj: keepLinear(bound[p+"kernel_projection.weight"]), group: d.cfg.ConvGroup}
		}
	}
	// The selector's maths runs in float32: its codebook rows come out as
	// float32 and its small projection is held in float32.
	d.sel = &selector{
		pred: &nn.Embedding{Table: keepLinear(bound[codebooks[0]]), DType: mlx.Float32},
		succ: &nn.Embedding{Table: keepLinear(bound[codebooks[1]]), DType: mlx.Float32},
		proj: keepLinear(bound[selectorPrefix+"hidden_projection.weight"].AsType(mlx.Float32)),
		topK: d.cfg.SelectorTopK,
	}
	mlx.Pin(d.own...)
	d.convs.layers = layers
	return nil
}
