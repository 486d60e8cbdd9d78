package dflash

import (
	"errors"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

func fixtureDraft(t *mlxtest.T) (*Draft, *dflashtest.Fixture) {
	f := dflashtest.Load(t, "dflash-tiny")
	cfg, err := ParseConfig(f.Config)
	t.NoErr(err)
	d, err := NewFromConfig(cfg, mlx.Float32, nil)
	t.NoErr(err)
	return d, f
}

func TestWeightSpecCount(t *testing.T) {
	// spec/dflash.md 4.1: 3 + 11·N tensors (69 for N = 6).
	for _, n := range []int{2, 6} {
		cfg := &Config{HiddenSize: 8, NumLayers: n, NumHeads: 2, NumKVHeads: 1, HeadDim: 4, IntermediateSize: 16, TargetLayerIDs: []int{1, 2, 3}}
		spec := WeightSpec(cfg)
		if got := len(spec.Tensors); got != 3+11*n {
			t.Errorf("N = %d: %d tensors, want %d", n, got, 3+11*n)
		}
		if fc := spec.Tensors[0]; fc.Name != "fc.weight" || fc.Shape[0] != 8 || fc.Shape[1] != 24 {
			t.Errorf("fc is %+v, want [H, nTaps·H] = [8, 24]", fc)
		}
	}
}

func TestLoadWeights(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d, f := fixtureDraft(t)
		if d.Weights() != nil {
			t.Error("a weightless draft reports weights")
		}
		t.NoErr(d.LoadWeights(f.Tensors(t)))
		// fc, hidden_norm, norm, and per layer 11 tensors held as 9 arrays
		// (k|v and gate|up are stacked at load).
		if n := len(d.Weights()); n != 3+9*2 {
			t.Errorf("%d weights held, want 21", n)
		}
		d.Free()
		if d.Weights() != nil {
			t.Error("weights held after Free")
		}
	})
}

// Tolerated variations (spec/dflash.md 4.2): a leading "model." everywhere,
// and embedding and head tensors, which are ignored.
func TestLoadWeightsQuirks(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d, f := fixtureDraft(t)
		prefixed := map[string]*mlx.Array{}
		for name, a := range f.Tensors(t) {
			prefixed["model."+name] = a
		}
		prefixed["model.embed_tokens.weight"] = mlx.Zeros(mlx.Float32, 512, 64)
		prefixed["lm_head.weight"] = mlx.Zeros(mlx.Float32, 512, 64)
		t.NoErr(d.LoadWeights(prefixed))

		// The same tensor stored under both spellings is refused.
		both := f.Tensors(t)
		both["model.fc.weight"] = both["fc.weight"]
		err := d.LoadWeights(both)
		if err == nil || !strings.Contains(err.Error(), "tensor fc.weight is stored twice") {
			t.Errorf("got %v", err)
		}
	})
}

// Every problem of a checkpoint is reported in one error naming the tensor
// and its expected and found shapes (spec/dflash.md 3.3).
func TestLoadWeightsReportsEveryProblem(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d, f := fixtureDraft(t)
		tensors := f.Tensors(t)
		delete(tensors, "layers.1.mlp.up_proj.weight")
		delete(tensors, "norm.weight")
		tensors["fc.weight"] = mlx.Zeros(mlx.Float32, 64, 192) // three taps' worth
		tensors["layers.0.self_attn.q_norm.weight"] = mlx.Zeros(mlx.Float32, 32)
		tensors["layers.2.input_layernorm.weight"] = mlx.Zeros(mlx.Float32, 64)
		err := d.LoadWeights(tensors)
		if !errors.Is(err, loader.ErrBind) {
			t.Fatalf("got %v, want a loader.BindError", err)
		}
		msg := err.Error()
		t.Log(msg)
		for _, want := range []string{
			"2 missing, 2 mis-shaped, 1 unexpected",
			"tensor layers.1.mlp.up_proj.weight expected shape [128, 64], missing",
			"tensor norm.weight expected shape [64], missing",
			"tensor fc.weight expected shape [64, 128], found [64, 192]",
			"tensor layers.0.self_attn.q_norm.weight expected shape [16], found [32]",
			"unexpected tensor layers.2.input_layernorm.weight [64]",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("error lacks %q:\n%s", want, msg)
			}
		}
		if d.Weights() != nil {
			t.Error("a failed load installed weights")
		}

		tensors = f.Tensors(t)
		tensors["norm.weight"] = mlx.Zeros(mlx.Int32, 64)
		if err := d.LoadWeights(tensors); err == nil || !strings.Contains(err.Error(), "norm.weight has dtype int32") {
			t.Errorf("an integer norm: got %v", err)
		}
	})
}
