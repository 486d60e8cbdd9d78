package qwen35

import (
	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
)

// deltaStepKernel is a delta-net layer's preparation, scan and gated norm —
// deltaPrepKernel, gatedDeltaKernel and nn's gated norm kernel — as one
// CUDA launch, for a decode step (one token). A step is bound by the host's
// cost per launch on the GPU (MLX's work for a custom kernel is several µs
// of host time, plus an allocation per output), and the three kernels cost
// it three launches and nine outputs per layer where this one costs one
// launch and three: 48 launches less per step of Qwen3.5-4B (issue 19).
//
// One block owns one value head h, which makes the norm, a reduction over
// the head's Dv outputs, a block reduction: warps 0, 1 and 2 prepare the q
// and k of key head h / R and the v, α and β of head h (specula_delta_unit,
// into shared memory); then each of the NW warps advances its RW = Dv / NW
// state rows in registers (specula_delta_row); then the block norms and
// gates the head's outputs (nn.GatedNormHeader). These are the three
// kernels' own device functions, which round every product and sum as
// written, so the values are the three kernels' bit for bit (left to the
// compiler, the inlined body fused other multiply-adds and up to half the
// values differed in the last bits). That is what lets a verification run
// the three kernels and still have, row for row, the bits of the steps, as
// exact speculative decoding needs.
//
// Only one token: with several, a block works through them one after the
// other, prepare, advance, norm, each behind a block barrier, with only Hv
// blocks on the GPU. Measured on an H100 (bf16 random weights,
// docs/PERFORMANCE.md, 2026-12-06): a depth-7 verification of Qwen3.5-4B
// shapes took 5.58–5.66 ms this way and 4.22 ms with the three kernels,
// which spread the tokens' preparation and norm over the GPU, while the
// step kept this launch's advantage (4.15 against 4.54 ms with the three).
// At 0.8B, where the host's launches rather than the GPU set a round's
// pace, the three kernels' two extra launches a layer cost more than they
// save (2.83 against 2.48 ms). A several-token form that prepares every
// token first, advances the state rows with no barrier between tokens and
// norms them together was measured too (branch wip/delta-rows, 2026-12-06):
// 0.8B's round fell to 2.49 ms, but 4B's rose to 5.46 (4.78 with 8 warps)
// and 27B's to 21.96 against 19.47, since a warp still advances its 32 rows
// token after token where the scan kernel gives each row a warp. A form
// that splits a head's rows over four blocks (the last to arrive norms,
// counted in per layer) was exact on the GPU and no faster than the three
// kernels (same branch; 4B 4.60 against 4.46 ms, 27B 20.00 against 19.28,
// 0.8B within the host's spread): each block prepares every row itself and
// one block a head norms them all.
//
// Inputs are the kernels' (the stacked projection [1, 1, P], the
// convolution tail and taps, the gates' parameters, the state s0 [1, Hv,
// Dv, Dk] float32, the norm weight nw [Dv]); outputs the normed, gated
// mixer output y [1, 1, Hv·Dv] in the model's dtype, the state after the
// token st [1, Hv, Dv, Dk] and padded [1, Kc, convDim] = [tail; the new
// row] in the projection's dtype: the q and k channels of a key head
// written by the first of its value heads' blocks.
var deltaStepKernel = &mlx.CUDAKernel{
	Name:    "specula_delta_step",
	Inputs:  []string{"proj", "tail", "w", "negA", "dtBias", "s0", "nw"},
	Outputs: []string{"y", "st", "padded"},
	Header:  nn.GatedNormHeader + deltaUnitHeader + deltaRowHeader,
	Source: `
  // PT, WT, AT, BT, NT, OT: the dtypes, only in MLX's cache key.
  static_assert(PT >= 0 && WT >= 0 && AT >= 0 && BT >= 0 && NT >= 0 && OT >= 0, "dtype codes");
  constexpr int R = HV / HK;
  constexpr int RW = DV / NW;
  constexpr int PK = DK / 32;
  constexpr int CONV = 2 * HK * DK + HV * DV;
  static_assert(RW * NW == DV && NW >= 3 && 32 * NW >= BLOCK, "launch shape");
  __shared__ float qs[DK], ks[DK], vs[DV], os[DV], gates[2];
  const int h = blockIdx.x;
  const int hk = h / R;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // The state rows are loaded first, so their reads overlap the preparation.
  float s[RW][PK];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float* row = s0 + ((size_t)h * DV + warp + NW * r) * DK;
#pragma unroll
    for (int j = 0; j < PK; ++j) s[r][j] = row[lane + 32 * j];
  }
  if (warp == 0) {
    specula_delta_unit<HK, HV, DK, DV, KC>(0, hk, proj, tail, w, negA, dtBias, qs, nullptr, nullptr, padded, h % R == 0);
  } else if (warp == 1) {
    specula_delta_unit<HK, HV, DK, DV, KC>(0, HK + hk, proj, tail, w, negA, dtBias, ks, nullptr, nullptr, padded, h % R == 0);
  } else if (warp == 2) {
    specula_delta_unit<HK, HV, DK, DV, KC>(0, 2 * HK + h, proj, tail, w, negA, dtBias, vs, gates, gates + 1, padded, true);
  }
  __syncthreads();
  const float at = gates[0], bt = gates[1];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const int i = warp + NW * r;
    const float ov = specula_delta_row<PK>(s[r], ks, qs, at, bt, vs[i]);
    if (lane == 0) os[i] = ov;
    float* dst = st + ((size_t)h * DV + i) * DK;
#pragma unroll
    for (int j = 0; j < PK; ++j) dst[lane + 32 * j] = s[r][j];
  }
  __syncthreads();
  specula_gated_norm_row<DV, BLOCK, CHUNKS, NREADS>(os, proj + CONV + (size_t)h * DV, nw, y + (size_t)h * DV, __int_as_float(EPS));
`,
}

// deltaStepWarps is the step kernel's warps per block: 4, each keeping a
// quarter of the head's state rows in registers (32 rows of 128 at
// Qwen3.5's sizes, 128 floats a thread). A block of 128 threads may use the
// 255 registers a thread can have (NVRTC for sm_90: 180–200, no spills);
// 16 warps with 8 rows each needed 148–168, more than the 128 a thread of a
// 512-thread block may hold, and such a launch fails. deltaStep keeps
// the state's share at most 128 floats a thread.
const deltaStepWarps = 4

var deltaStepSwitch = nn.NewKernelSwitch("SPECULA_DELTA_STEP", "qwen35: the one-launch delta-net step CUDA kernel failed; using its three kernels")

// deltaStep is deltaMix's preparation, scan and gated norm as one launch
// (deltaStepKernel) for a decode step, from the stacked projection proj
// [1, 1, P], the convolution tail and the delta state: the gated norm's
// output [1, 1, Hv·Dv] (as the output projection takes it, so no reshape
// node per layer and step) and the cache write, as deltaMix makes them (a
// one-row write has no interior split). ok is false where it does not run
// (off the GPU, switched off by SPECULA_DELTA_STEP=0, any of the three
// kernels off or not taking these operands, a forward of several rows, or
// a failed launch); deltaMix then runs the three.
func (m *Model) deltaStep(g *deltaWeights, proj, convState, deltaState *mlx.Array) (*mlx.Array, cache.RecurrentWrite, bool) {
	// Every verification comes here first: refuse it before any other
	// check's host work (the norm's layout, the switches' lookups).
	if proj.Dim(1) != 1 {
		return nil, cache.RecurrentWrite{}, false
	}
	cfg := m.local
	hk, hv, dk, dv := cfg.LinearKeyHeads, cfg.LinearValueHeads, cfg.LinearKeyDim, cfg.LinearValueDim
	norm, block, ok := nn.GatedNormRow(dv, g.norm, cfg.RMSNormEps, m.dtype)
	if !ok || !deltaStepSwitch.On() || !useScanKernel(dk) || !useDeltaPrepKernel(cfg, g, proj, convState) ||
		deltaState.DType() != mlx.Float32 || hv%hk != 0 || dv%deltaStepWarps != 0 || 32*deltaStepWarps < block ||
		dv/deltaStepWarps*dk/32 > 128 {
		return nil, cache.RecurrentWrite{}, false
	}
	conv, tail := cfg.ConvDim(), cfg.ConvKernel-1
	outs, err := deltaStepKernel.Run([]*mlx.Array{proj, convState, g.conv, g.negA, g.dtBias, deltaState, g.norm}, mlx.KernelLaunch{
		OutputShapes: [][]int{{1, 1, hv * dv}, {1, hv, dv, dk}, {1, tail + 1, conv}},
		OutputDTypes: []mlx.DType{m.dtype, mlx.Float32, proj.DType()},
		Grid:         [3]int{32 * deltaStepWarps * hv, 1, 1},
		Block:        [3]int{32 * deltaStepWarps, 1, 1},
		Templates: append(norm,
			mlx.KernelTemplate{Name: "HK", Value: hk}, mlx.KernelTemplate{Name: "HV", Value: hv},
			mlx.KernelTemplate{Name: "DK", Value: dk}, mlx.KernelTemplate{Name: "DV", Value: dv},
			mlx.KernelTemplate{Name: "KC", Value: cfg.ConvKernel}, mlx.KernelTemplate{Name: "NW", Value: deltaStepWarps},
			// MLX caches a compilation by name and constants: the dtypes
			// keep a bfloat16 launch from reusing a float32 one's.
			mlx.KernelTemplate{Name: "PT", Value: int(proj.DType())}, mlx.KernelTemplate{Name: "WT", Value: int(g.conv.DType())},
			mlx.KernelTemplate{Name: "AT", Value: int(g.negA.DType())}, mlx.KernelTemplate{Name: "BT", Value: int(g.dtBias.DType())},
			mlx.KernelTemplate{Name: "NT", Value: int(g.norm.DType())}, mlx.KernelTemplate{Name: "OT", Value: int(m.dtype)}),
	})
	if err != nil {
		deltaStepSwitch.Fail(err)
		return nil, cache.RecurrentWrite{}, false
	}
	y, st, padded := outs[0], outs[1], outs[2]
	return y, cache.RecurrentWrite{Conv: mlx.SliceAxis(padded, 1, 1, 1+tail), Delta: st}, true
}
