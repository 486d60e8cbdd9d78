package dflash2

import (
	"testing"

	"github.com/specula-dev/specula/arch/dflash/dflashtest"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// A DFlash2 draft quantized as `specula quantize` writes it (DFlash's
// projections plus every kernel projection and the selector's hidden
// projection; the rank-8 codebooks of this fixture are narrower than a
// group and stay dense, as mlx-lm leaves such layers) runs the block and
// the selector's lattice like the dense draft holding the dequantized
// weights: the same values, only the matmuls differ (bound 1e-4). Against
// the original weights the difference is the quantization error, which
// arch/dflash's TestQuantizedDraftNearDense states per width.
func TestQuantizedDraftMatchesDequantized(t *testing.T) {
	const dequantTol = 1e-4
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := loadPair(t)
		x := dflashtest.Features(p.target, p.f.Ref.PromptIDs)
		n := p.draft.cfg.BlockSize - 1
		anchor := mlx.FromInt32s([]int32{p.f.Ref.BlockIDs[0]}, 1)
		for _, q := range []mlx.Quant{{Mode: mlx.Affine, Bits: 8, GroupSize: 32}, {Mode: mlx.Affine, Bits: 4, GroupSize: 32}} {
			qd, dq := p.f.QuantizedDraft(t, p.target, q)
			qp, dp := &pair{f: p.f, target: p.target, draft: qd.(*Draft)}, &pair{f: p.f, target: p.target, draft: dq.(*Draft)}
			if !qp.draft.convs.layers[0].attention.proj.Quantized() || !qp.draft.sel.proj.Quantized() {
				t.Fatalf("%s: the kernel or hidden projection was not quantized", q)
			}
			qRows, qLogits := qp.propose(qp.draft.NewCaches(), x, 0, p.f.Ref.BlockIDs[0], n)
			dRows, dLogits := dp.propose(dp.draft.NewCaches(), x, 0, p.f.Ref.BlockIDs[0], n)
			for _, c := range []struct {
				what      string
				got, want *mlx.Array
			}{
				{"draft logits", qLogits, dLogits},
				{"lattice scores", qp.draft.Lattice(qRows, qLogits, anchor).Scores, dp.draft.Lattice(dRows, dLogits, anchor).Scores},
			} {
				d := dflashtest.MaxAbs(t, c.got, c.want)
				if d > dequantTol {
					t.Errorf("%s, %s: max abs error %.3g against the dequantized draft > %g", c.what, q, d, dequantTol)
				}
			}
		}
	})
}
