package dflash2

import (
	"errors"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

func weightless(t *mlxtest.T) (*Draft, *dflashtest.Fixture) {
	f := dflashtest.Load(t, "dflash2-tiny")
	cfg, err := ParseConfig(f.Config)
	t.NoErr(err)
	d, err := NewFromConfig(cfg, mlx.Float32)
	t.NoErr(err)
	return d, f
}

func TestLoadWeights(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d, f := weightless(t)
		if d.Weights() != nil {
			t.Error("a weightless draft reports weights")
		}
		// The fixture stores the codebooks without ".weight", as released
		// checkpoints do.
		tensors := f.Tensors(t)
		if _, ok := tensors["candidate_selector.predecessor_codebook"]; !ok {
			t.Fatal("the fixture's codebooks are not stored without .weight")
		}
		t.NoErr(d.LoadWeights(tensors))
		// DFlash's 3 + 11 per layer (held as 9: k|v and gate|up are
		// stacked), 4 per layer for the dynamic convolutions, and 3 for
		// the selector.
		if n := len(d.Weights()); n != 3+13*2+3 {
			t.Errorf("%d weights held, want 3 + 13·N + 3 = 32", n)
		}

		// With ".weight" (and a "model." prefix) too.
		renamed := map[string]*mlx.Array{}
		for name, a := range f.Tensors(t) {
			if strings.HasSuffix(name, "_codebook") {
				name += ".weight"
			}
			renamed["model."+name] = a
		}
		t.NoErr(d.LoadWeights(renamed))

		// Both spellings at once are ambiguous.
		both := f.Tensors(t)
		both["candidate_selector.successor_codebook.weight"] = both["candidate_selector.successor_codebook"]
		if err := d.LoadWeights(both); err == nil || !strings.Contains(err.Error(), "tensor candidate_selector.successor_codebook is stored twice") {
			t.Errorf("got %v", err)
		}
		d.Free()
		if d.Weights() != nil {
			t.Error("weights held after Free")
		}
	})
}

// Problems with DFlash's tensors and DFlash2's come in one error.
func TestLoadWeightsReportsEveryProblem(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d, f := weightless(t)
		tensors := f.Tensors(t)
		delete(tensors, "candidate_selector.hidden_projection.weight")
		delete(tensors, "layers.0.self_attn.k_norm.weight")
		tensors["layers.1.mlp_conv.base_kernel"] = mlx.Zeros(mlx.Float32, 2, 3, 64)
		tensors["layers.0.attention_conv.kernel_projection.weight"] = mlx.Zeros(mlx.Float32, 32, 64)
		err := d.LoadWeights(tensors)
		if !errors.Is(err, loader.ErrBind) {
			t.Fatalf("got %v, want a loader.BindError", err)
		}
		for _, want := range []string{
			"2 missing, 2 mis-shaped, 0 unexpected",
			"tensor candidate_selector.hidden_projection.weight expected shape [8, 64], missing",
			"tensor layers.0.self_attn.k_norm.weight expected shape [16], missing",
			"tensor layers.1.mlp_conv.base_kernel expected shape [2, 2, 64], found [2, 3, 64]",
			"tensor layers.0.attention_conv.kernel_projection.weight expected shape [16, 64], found [32, 64]",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})
}

// Select before LoadWeights says what is missing.
func TestSelectNeedsWeights(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d, _ := weightless(t)
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "call LoadWeights first") {
				t.Errorf("panic %v", r)
			}
		}()
		d.Select(nil, nil, nil, nil)
	})
}
