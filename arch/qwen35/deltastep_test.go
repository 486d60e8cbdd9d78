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
// it runs their device functions in one block per value head — in the
// mixer output, the state and the convolution tail, for grouped (2 key
// heads for 4 value heads) and ungrouped heads with Dk ≠ Dv, in float32 and
// bfloat16. (Bit for bit since the device functions round every product
// and sum as written: with contraction left to the compiler, the step's
// inlined body fused other multiply-adds than the kernels', and up to half
// the values differed in the last bits.) It takes only one-row forwards.
func TestDeltaStepMatchesThreeKernels(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the delta-net step CUDA kernel needs the GPU of a CUDA build")
		}
		layouts := []struct{ hk, hv, dk, dv int }{{2, 4, 128, 128}, {3, 3, 64, 128}}
		seed := uint64(200)
		for _, lay := range layouts {
			for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
				for range 2 {
					seed++
					name := fmt.Sprintf("Hk=%d Hv=%d Dk=%d Dv=%d %v seed %d", lay.hk, lay.hv, lay.dk, lay.dv, dtype, seed)
					c := newDeltaStepCase(lay.hk, lay.hv, lay.dk, lay.dv, 1, dtype, seed)
					tail := c.cfg.ConvKernel - 1
					y, w, ok := c.m.deltaStep(c.g, c.proj, c.tail, c.state)
					if !ok {
						t.Fatalf("%s: the step kernel did not run (SPECULA_DELTA_STEP=0, or a kernel switched off?)", name)
					}
					wantY, wantSt, wantPadded := c.threeKernels(t, false)
					t.Shape(y, 1, 1, lay.hv*lay.dv)
					if y.DType() != dtype {
						t.Fatalf("%s: output is %v, want %v", name, y.DType(), dtype)
					}
					t.SameBits(name+": output", t.Float32s(y), t.Float32s(wantY))
					t.SameBits(name+": conv tail", t.Float32s(w.Conv), t.Float32s(mlx.SliceAxis(wantPadded, 1, 1, 1+tail)))
					t.SameBits(name+": state", t.Float32s(w.Delta), t.Float32s(wantSt))
					if w.ConvWindow != nil || w.DeltaRows != nil || len(w.Deltas) != 0 {
						t.Fatalf("%s: interior states handed over for a one-row write", name)
					}
					mlx.Sweep()
				}
			}
		}
		c := newDeltaStepCase(2, 4, 128, 128, 3, mlx.BFloat16, 1)
		if _, _, ok := c.m.deltaStep(c.g, c.proj, c.tail, c.state); ok {
			t.Fatalf("the step kernel ran a 3-row forward, which the three kernels run faster")
		}
	})
}

// A verification's rows, which the three kernels compute, have the bits of
// decode steps, which the one-launch step computes, each step carrying the
// convolution tail and the delta state forward as the cache does: the
// output, the state after the row and the row's convolution input. Exact
// speculative decoding relies on it.
func TestVerificationRowsMatchDecodeSteps(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the delta-net step CUDA kernel needs the GPU of a CUDA build")
		}
		const L = 8
		for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
			c := newDeltaStepCase(2, 4, 128, 128, L, dtype, 300+uint64(dtype))
			tail := c.cfg.ConvKernel - 1
			all, rows, window := c.threeKernels(t, true)
			conv, state := c.tail, c.state
			for r := range L {
				one, w, ok := c.m.deltaStep(c.g, mlx.SliceAxis(c.proj, 1, r, r+1), conv, state)
				if !ok {
					t.Fatalf("the step kernel did not run")
				}
				what := fmt.Sprintf("%v: token %d", dtype, r)
				t.SameBits(what+" output", t.Float32s(one), t.Float32s(mlx.SliceAxis(all, 1, r, r+1)))
				t.SameBits(what+" state", t.Float32s(w.Delta), t.Float32s(mlx.SliceAxis(rows, 0, r, r+1)))
				t.SameBits(what+" conv row", t.Float32s(mlx.SliceAxis(w.Conv, 1, tail-1, tail)),
					t.Float32s(mlx.SliceAxis(window, 1, tail+r, tail+r+1)))
				conv, state = w.Conv, w.Delta
				t.Eval(conv, state)
			}
			mlx.Sweep()
		}
	})
}

// BenchmarkDeltaLayer times a delta-net layer's mixer core on the GPU — the
// one-launch step for one row, the three kernels (preparation, scan with
// every row's state, gated norm) for one row and for a verification's 8 and
// 16 — at the value-head counts of Qwen3.5-0.8B, 4B and 27B (16 key heads
// of 128, Dv 128). Each evaluation holds 24 layers, each starting from the
// state the one before left, so that they run one after the other as a
// model's do, and the metric is µs per layer with MLX's host work included
// (what a round pays; the GPU alone is less). It is how a change to the
// step's layout or to the several-row path is judged before a whole-model
// bench. (With independent layers, as first written, a form with long
// blocks won every cell, likely because the GPU overlapped them with the
// next layers, and still lost in the model: docs/PERFORMANCE.md,
// seventeenth session. Chained, the split-head form tied or lost at 8 and
// 16 rows, as it did in the model: eighteenth session.)
func BenchmarkDeltaLayer(b *testing.B) {
	const layers = 24
	for _, hv := range []int{16, 32, 48} {
		for _, rows := range []int{1, 8, 16} {
			for _, impl := range []string{"step", "three"} {
				if impl == "step" && rows > 1 {
					continue
				}
				b.Run(fmt.Sprintf("Hv%d/rows%d/%s", hv, rows, impl), func(b *testing.B) {
					mlxtest.Run(b, func(t *mlxtest.T) {
						if !mlx.GPUAvailable() {
							t.Skip("the delta-net kernels need the GPU of a CUDA build")
						}
						cases := make([]deltaStepCase, layers)
						var inputs []*mlx.Array
						for i := range cases {
							c := newDeltaStepCase(16, hv, 128, 128, rows, mlx.BFloat16, uint64(1000+i))
							cases[i] = c
							inputs = append(inputs, c.proj, c.tail, c.state, c.g.conv, c.g.negA, c.g.dtBias, c.g.norm)
						}
						// Kept across the sweep after each evaluation.
						mlx.Pin(inputs...)
						defer mlx.Free(inputs...)
						t.Eval(inputs...)
						t.BenchEvals(func() []*mlx.Array {
							// Each layer starts from the state the one before
							// it left, so the GPU runs them one after the
							// other, as a model's layers (whose inputs are
							// the layer before's output) run: MLX orders its
							// graph's nodes only by data, and independent
							// layers would overlap.
							var outs []*mlx.Array
							state := cases[0].state
							for _, c := range cases {
								c.state = state
								if impl == "step" {
									y, w, ok := c.m.deltaStep(c.g, c.proj, c.tail, c.state)
									if !ok {
										t.Fatal("the step kernel did not run")
									}
									outs = append(outs, y, w.Delta, w.Conv)
									state = w.Delta
									continue
								}
								y, st, padded := c.threeKernels(t, rows > 1)
								outs = append(outs, y, st, padded)
								state = st
								if rows > 1 {
									state = mlx.SliceAxis(st, 0, rows-1, rows)
								}
							}
							return outs
						})
						b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*layers), "µs/layer")
					})
				})
			}
		}
	}
}
