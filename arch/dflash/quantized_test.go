package dflash

import (
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// Quantized drafts: dflash-tiny written in MLX's layout and quantized as
// `specula quantize` writes it (fc, every attention and MLP projection),
// loaded back, and run on the fixture's single block. Two references:
//   - the dense draft holding the dequantized weights: the same values, so
//     only the matmul differs (quantized_matmul against dequantize + BLAS),
//     bound at dequantTol;
//   - the original dense draft: the difference is the quantization error
//     itself, stated per width relative to the largest logit (measured on
//     this fixture, whose random draft amplifies weight noise more than a
//     trained one: 1.7% for 8-bit, 26% for 4-bit, 9% for mxfp8, all in
//     groups of 32), bounded at about 1.5 times that.
const dequantTol = 1e-4

var quantizedDraftTols = []struct {
	q      mlx.Quant
	relTol float64
}{
	{mlx.Quant{Mode: mlx.Affine, Bits: 8, GroupSize: 32}, 0.025},
	{mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 32}, 0.4},
	{mlx.Quant{Mode: mlx.MXFP8, Bits: 8, GroupSize: 32}, 0.14},
}

func TestQuantizedDraftNearDense(t *testing.T) {
	f := dflashtest.Load(t, "dflash-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		dense := loadPair(t, f)
		target := dense.target
		x := dflashtest.Features(target, f.Ref.PromptIDs)
		n := dense.draft.cfg.BlockSize - 1
		logits := func(d *Draft) *mlx.Array {
			p := &pair{f: f, target: target, draft: d}
			h := p.propose(d.NewCaches(), x, 0, p.block(f.Ref.BlockIDs[0], n))
			return d.Unembed(mlx.SliceAxis(h, 1, 1, n+1))
		}
		want := logits(dense.draft)
		scale := float64(t.Float32s(mlx.Max(mlx.Abs(want), false))[0])
		for _, c := range quantizedDraftTols {
			qd, dq := f.QuantizedDraft(t, target, c.q)
			w := qd.(*Draft).w
			for _, l := range []*layerWeights{&w.layers[0], &w.layers[1]} {
				if !w.fc.Quantized() || !l.q.Quantized() || !l.kv.Quantized() || !l.o.Quantized() || !l.gateUp.Quantized() || !l.down.Quantized() {
					t.Fatalf("%s: a linear layer of the written draft was not quantized", c.q)
				}
			}
			got := logits(qd.(*Draft))
			check(t, "draft logits, "+c.q.String()+" vs the dequantized weights", dflashtest.MaxAbs(t, got, logits(dq.(*Draft))), dequantTol)
			check(t, "draft logits, "+c.q.String()+" vs dense, relative to the largest logit", dflashtest.MaxAbs(t, got, want)/scale, c.relTol)
		}
	})
}
