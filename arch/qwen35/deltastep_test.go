package qwen35

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// deltaStepCase is a delta-net layer's step: deltaPrepCase's inputs plus
// the delta state it starts from and the gated norm's weight, and a model
// that computes in the case's dtype.
type deltaStepCase struct {
	deltaPrepCase
	m     *Model
	state *mlx.Array // [1, Hv, Dv, Dk] float32
}

func newDeltaStepCase(hk, hv, dk, dv, L int, dtype mlx.DType, seed uint64) deltaStepCase {
	c := deltaStepCase{deltaPrepCase: newDeltaPrepCase(hk, hv, dk, dv, L, dtype, seed)}
	c.cfg.RMSNormEps = 1e-6
	c.g.norm = mlx.RandomNormal(mlx.RandomKey(seed*10+6), mlx.Float32, 1, 0.1, dv)
	// A state of the size a few hundred tokens leave: entries ~0.1.
	c.state = mlx.RandomNormal(mlx.RandomKey(seed*10+7), mlx.Float32, 0, 0.1, 1, hv, dv, dk)
	c.m = &Model{cfg: c.cfg, local: c.cfg, dtype: dtype}
	return c
}

// threeKernels is what deltaMix computes without the one-launch step: the
// preparation, scan and gated norm kernels. It returns the norm's output,
// the state after every token (emit) or after the last, and padded.
func (c deltaStepCase) threeKernels(t *mlxtest.T, emit bool) (y, st, padded *mlx.Array) {
	prep := deltaPrepLaunch(c.cfg, c.g, c.proj, c.tail)
	if prep == nil {
		t.Fatalf("the preparation kernel did not launch")
	}
	out, end, rows := gatedDeltaScanRows(prep[0], prep[1], prep[2], prep[3], prep[4], c.state, emit)
	if out == nil {
		t.Fatalf("the scan kernel did not launch")
	}
	y = nn.GatedRMSNormFrom(out, c.proj, c.cfg.ConvDim(), c.g.norm, c.cfg.RMSNormEps, c.dtype)
	if !nn.GatedRMSNormFused() {
		t.Fatalf("the gated norm kernel did not launch")
	}
	if emit {
		return y, rows, prep[5]
	}
	return y, end, prep[5]
}

// The one-launch step gives the bits of the three kernels it replaces —
// it runs their device functions, token by token, in one block per value
// head — in the mixer output, every state the cache is handed (the end
// state; a verification's rows; the states at interior bounds) and the
// convolution rows, for a decode step, a short and a verification-sized
// run, grouped (2 key heads for 4 value heads) and ungrouped heads with
// Dk ≠ Dv, in float32 and bfloat16. (Bit for bit since the device
// functions round every product and sum as written: with contraction left
// to the compiler, the step's inlined body fused other multiply-adds than
// the kernels', and up to half the values differed in the last bits.)
func TestDeltaStepMatchesThreeKernels(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the delta-net step CUDA kernel needs the GPU of a CUDA build")
		}
		layouts := []struct{ hk, hv, dk, dv int }{{2, 4, 128, 128}, {3, 3, 64, 128}}
		seed := uint64(200)
		for _, lay := range layouts {
			for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
				for _, L := range []int{1, 3, 8} {
					seed++
					c := newDeltaStepCase(lay.hk, lay.hv, lay.dk, lay.dv, L, dtype, seed)
					tail := c.cfg.ConvKernel - 1
					every := make([]int, L-1)
					for i := range every {
						every[i] = i + 1
					}
					// No interior bound (a step, a prefill's last chunk); a
					// verification's rows; a prompt-cache checkpoint.
					cases := []struct {
						what   string
						splits []int
						rows   bool
					}{{"end", nil, false}, {"rows", every, true}, {"bounds", every[:min(1, L-1)], false}}
					for _, sc := range cases {
						if L == 1 && sc.splits != nil {
							continue
						}
						name := fmt.Sprintf("Hk=%d Hv=%d Dk=%d Dv=%d %v L=%d %s", lay.hk, lay.hv, lay.dk, lay.dv, dtype, L, sc.what)
						emit := len(sc.splits) > 0
						y, w, ok := c.m.deltaStep(c.g, c.proj, c.tail, c.state, sc.splits, sc.rows)
						if !ok {
							t.Fatalf("%s: the step kernel did not run (SPECULA_DELTA_STEP=0, or a kernel switched off?)", name)
						}
						wantY, wantSt, wantPadded := c.threeKernels(t, emit)
						t.Shape(y, 1, L, lay.hv*lay.dv)
						if y.DType() != dtype {
							t.Fatalf("%s: output is %v, want %v", name, y.DType(), dtype)
						}
						t.SameBits(name+": output", t.Float32s(y), t.Float32s(wantY))
						t.SameBits(name+": conv tail", t.Float32s(w.Conv), t.Float32s(mlx.SliceAxis(wantPadded, 1, L, L+tail)))
						last := wantSt
						if emit {
							last = mlx.SliceAxis(wantSt, 0, L-1, L)
						}
						t.SameBits(name+": end state", t.Float32s(w.Delta), t.Float32s(last))
						switch {
						case !emit:
							if w.ConvWindow != nil || w.DeltaRows != nil || len(w.Deltas) != 0 {
								t.Fatalf("%s: interior states handed over for a write without interior bounds", name)
							}
						case sc.rows:
							t.SameBits(name+": conv window", t.Float32s(w.ConvWindow), t.Float32s(wantPadded))
							t.SameBits(name+": state rows", t.Float32s(w.DeltaRows), t.Float32s(wantSt))
						default:
							t.SameBits(name+": conv window", t.Float32s(w.ConvWindow), t.Float32s(wantPadded))
							if len(w.Deltas) != len(sc.splits) {
								t.Fatalf("%s: %d interior states, want %d", name, len(w.Deltas), len(sc.splits))
							}
							for i, b := range sc.splits {
								t.SameBits(fmt.Sprintf("%s: state after %d tokens", name, b), t.Float32s(w.Deltas[i]), t.Float32s(mlx.SliceAxis(wantSt, 0, b-1, b)))
							}
						}
					}
					mlx.Sweep()
				}
			}
		}
	})
}

// A token's values do not depend on how many tokens run with it: a
// verification of 8 tokens gives, row for row, the bits of 8 decode steps
// that carry the convolution tail and the delta state forward as the cache
// does. Exact speculative decoding relies on it.
func TestDeltaStepRowsIndependentOfL(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the delta-net step CUDA kernel needs the GPU of a CUDA build")
		}
		const L = 8
		for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
			c := newDeltaStepCase(2, 4, 128, 128, L, dtype, 300+uint64(dtype))
			tail := c.cfg.ConvKernel - 1
			every := []int{1, 2, 3, 4, 5, 6, 7}
			all, wAll, ok := c.m.deltaStep(c.g, c.proj, c.tail, c.state, every, true)
			if !ok {
				t.Fatalf("the step kernel did not run")
			}
			conv, state := c.tail, c.state
			for r := range L {
				one, w, ok := c.m.deltaStep(c.g, mlx.SliceAxis(c.proj, 1, r, r+1), conv, state, nil, false)
				if !ok {
					t.Fatalf("the step kernel did not run")
				}
				what := fmt.Sprintf("%v: token %d", dtype, r)
				t.SameBits(what+" output", t.Float32s(one), t.Float32s(mlx.SliceAxis(all, 1, r, r+1)))
				t.SameBits(what+" state", t.Float32s(w.Delta), t.Float32s(mlx.SliceAxis(wAll.DeltaRows, 0, r, r+1)))
				t.SameBits(what+" conv row", t.Float32s(mlx.SliceAxis(w.Conv, 1, tail-1, tail)),
					t.Float32s(mlx.SliceAxis(wAll.ConvWindow, 1, tail+r, tail+r+1)))
				conv, state = w.Conv, w.Delta
				t.Eval(conv, state)
			}
			mlx.Sweep()
		}
	})
}
