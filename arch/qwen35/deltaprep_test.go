package qwen35

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// deltaPrepCase is one delta-net layer to prepare: its head layout, the
// dtype of the projection, tail and taps, and its random inputs.
type deltaPrepCase struct {
	cfg   *Config
	dtype mlx.DType
	g     *deltaWeights
	proj  *mlx.Array // [1, L, convDim + valueDim + 2·Hv]
	tail  *mlx.Array // [1, Kc−1, convDim]
}

// newDeltaPrepCase draws the inputs of an L-token step: unit-normal
// projections and tail, taps of the checkpoints' scale, decay rates
// −exp(A_log) in (−e, −1] and biases around zero, so that the gates and the
// SiLU see both signs and the softplus both branches.
func newDeltaPrepCase(hk, hv, dk, dv, L int, dtype mlx.DType, seed uint64) deltaPrepCase {
	cfg := &Config{LinearKeyHeads: hk, LinearValueHeads: hv, LinearKeyDim: dk, LinearValueDim: dv, ConvKernel: 4}
	key := func(i uint64) *mlx.Array { return mlx.RandomKey(seed*10 + i) }
	conv, width := cfg.ConvDim(), cfg.ConvDim()+cfg.ValueDim()+2*hv
	return deltaPrepCase{
		cfg:   cfg,
		dtype: dtype,
		g: &deltaWeights{
			conv:   mlx.RandomNormal(key(1), dtype, 0, 0.3, cfg.ConvKernel, conv),
			negA:   mlx.Negative(mlx.Exp(mlx.RandomUniform(key(2), mlx.Float32, hv))),
			dtBias: mlx.RandomNormal(key(3), mlx.Float32, 0, 1, hv),
		},
		proj: mlx.RandomNormal(key(4), dtype, 0, 1, 1, L, width),
		tail: mlx.RandomNormal(key(5), dtype, 0, 1, 1, cfg.ConvKernel-1, conv),
	}
}

// deltaPrepNames names deltaPrep's six results in order.
var deltaPrepNames = []string{"q", "k", "v", "alpha", "beta", "padded"}

// The one-launch preparation equals the graph path, the exact baseline, in
// every output, at a grouped head layout (2 key heads shared by 4 value
// heads, Dk = Dv = 128, Qwen3.5's sizes) and an ungrouped one with Dk ≠ Dv,
// for a decode step, a short and a verification-sized run, in float32 and
// bfloat16.
//
// Tolerances: padded is a copy, so bit-exact. The rest is float32 maths in
// the same order as MLX's kernels, except the sum of squares of the L2 norm
// (a warp tree here, MLX's block reduction there) and where the compiler
// fuses a multiply-add in one and not the other; the worst case of a
// 128-term float32 sum in another order is 127·2⁻²⁴ ≈ 7.6e-6 relative, half
// of it after the rsqrt. So q, k and v agree within 1e-5 of their head's
// largest value (a relative bound per element would fail where the
// convolution cancels to near zero), and alpha and beta within 1e-5
// relative per element (exp's argument is at most ~15 in magnitude, which
// turns its ulps into ~1e-6).
func TestDeltaPrepKernelMatchesGraph(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the delta-net preparation CUDA kernel needs the GPU of a CUDA build")
		}
		layouts := []struct{ hk, hv, dk, dv int }{{2, 4, 128, 128}, {3, 3, 64, 128}}
		seed := uint64(0)
		for _, lay := range layouts {
			for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
				for _, L := range []int{1, 3, 8} {
					seed++
					name := fmt.Sprintf("Hk=%d Hv=%d Dk=%d Dv=%d %v L=%d", lay.hk, lay.hv, lay.dk, lay.dv, dtype, L)
					c := newDeltaPrepCase(lay.hk, lay.hv, lay.dk, lay.dv, L, dtype, seed)
					if !useDeltaPrepKernel(c.cfg, c.g, c.proj, c.tail) {
						t.Fatalf("%s: useDeltaPrepKernel is false on the GPU (SPECULA_DELTA_PREP=0 set?)", name)
					}
					got := deltaPrepLaunch(c.cfg, c.g, c.proj, c.tail)
					if got == nil {
						t.Fatalf("%s: the kernel did not launch", name)
					}
					q, k, v, alpha, beta, padded := deltaPrepGraph(c.cfg, c.g, c.proj, c.tail)
					want := []*mlx.Array{q, k, v, alpha, beta, padded}
					groups := []int{lay.dk, lay.dk, lay.dv, 1, 1}
					for i, w := range want {
						what := name + ": " + deltaPrepNames[i]
						t.Shape(got[i], w.Shape()...)
						if got[i].DType() != w.DType() {
							t.Fatalf("%s is %v, want %v", what, got[i].DType(), w.DType())
						}
						if i == 5 {
							t.SameBits(what, t.Float32s(got[i]), t.Float32s(w))
							continue
						}
						t.NearPerGroup(what, t.Float32s(got[i]), t.Float32s(w), groups[i], 1e-5)
					}
					mlx.Sweep()
				}
			}
		}
	})
}

// A token's prepared values do not depend on how many tokens run with it:
// eight tokens in one launch give, row for row, the bits of eight one-token
// launches that carry the tail forward as the cache does (padded rows
// 1 … Kc−1). Exact speculative decoding relies on it: a verification's rows
// must be what decoding those tokens would have computed.
func TestDeltaPrepKernelRowsIndependentOfL(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the delta-net preparation CUDA kernel needs the GPU of a CUDA build")
		}
		const L = 8
		for _, dtype := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
			c := newDeltaPrepCase(2, 4, 128, 128, L, dtype, 100+uint64(dtype))
			tail := c.cfg.ConvKernel - 1
			all := deltaPrepLaunch(c.cfg, c.g, c.proj, c.tail)
			if all == nil {
				t.Fatalf("the kernel did not launch")
			}
			state := c.tail
			for r := range L {
				one := deltaPrepLaunch(c.cfg, c.g, mlx.SliceAxis(c.proj, 1, r, r+1), state)
				if one == nil {
					t.Fatalf("the kernel did not launch")
				}
				for i := range 5 {
					what := fmt.Sprintf("%v: %s of token %d", dtype, deltaPrepNames[i], r)
					t.SameBits(what, t.Float32s(one[i]), t.Float32s(mlx.SliceAxis(all[i], 1, r, r+1)))
				}
				what := fmt.Sprintf("%v: padded row of token %d", dtype, r)
				t.SameBits(what, t.Float32s(mlx.SliceAxis(one[5], 1, tail, tail+1)),
					t.Float32s(mlx.SliceAxis(all[5], 1, tail+r, tail+r+1)))
				state = mlx.SliceAxis(one[5], 1, 1, 1+tail)
				t.Eval(state)
			}
			mlx.Sweep()
		}
	})
}
