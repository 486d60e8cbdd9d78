package qwen35

import (
	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
)

// deltaStepKernel is a delta-net layer's preparation, scan and gated norm —
// deltaPrepKernel, gatedDeltaKernel and nn's gated norm kernel — as one
// CUDA launch, for the forwards of decoding: a step, a verification. Those
// are bound by the host's cost per launch on the GPU (MLX's work for a
// custom kernel is several µs of host time, plus an allocation per output),
// and the three kernels cost it three launches and nine outputs per layer
// where this one costs one launch and three: 48 launches less per step of
// Qwen3.5-4B (issue 19).
//
// One block owns one value head h for every token, which the scan needs
// anyway (its state rows evolve token after token) and which makes the
// norm, a reduction over the head's Dv outputs, a block reduction. For each
// token in turn: warps 0, 1 and 2 prepare the q and k of key head h / R and
// the v, α and β of head h (specula_delta_unit, into shared memory); then
// each of the NW warps advances its RW = Dv / NW state rows, kept in
// registers over all tokens (specula_delta_row); then the block norms and
// gates the head's outputs (nn.GatedNormHeader) and writes them. These are
// the three kernels' own device functions, which round every product and
// sum as written, so the values are the three kernels' bit for bit (left
// to the compiler, the inlined body fused other multiply-adds and up to
// half the values differed in the last bits). And a token's arithmetic is
// its own, so a verification's rows have the bits of the decode steps, as
// exact speculative decoding needs (both run here; longer prefills run the
// three kernels).
//
// Inputs are the kernels' (the stacked projection, the convolution tail and
// taps, the gates' parameters, the state s0 [1, Hv, Dv, Dk] float32, the
// norm weight nw [Dv]); outputs the normed, gated mixer output y [1, L, Hv,
// Dv] in the model's dtype, the states st (after every token with EMIT,
// [L, Hv, Dv, Dk], else the last, [1, Hv, Dv, Dk]) and padded [1, Kc−1+L,
// convDim] = [tail; the new rows] in the projection's dtype: the q and k
// channels of a key head written by the first of its value heads' blocks.
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
  constexpr int P = CONV + HV * DV + 2 * HV;
  static_assert(RW * NW == DV && NW >= 3 && 32 * NW >= BLOCK, "launch shape");
  __shared__ float qs[DK], ks[DK], vs[DV], os[DV], gates[2];
  const int L = proj_shape[1];
  const int h = blockIdx.x;
  const int hk = h / R;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  float s[RW][PK];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float* row = s0 + ((size_t)h * DV + warp + NW * r) * DK;
#pragma unroll
    for (int j = 0; j < PK; ++j) s[r][j] = row[lane + 32 * j];
  }
  for (int t = 0; t < L; ++t) {
    if (warp == 0) {
      specula_delta_unit<HK, HV, DK, DV, KC>(t, hk, proj, tail, w, negA, dtBias, qs, nullptr, nullptr, padded, h % R == 0);
    } else if (warp == 1) {
      specula_delta_unit<HK, HV, DK, DV, KC>(t, HK + hk, proj, tail, w, negA, dtBias, ks, nullptr, nullptr, padded, h % R == 0);
    } else if (warp == 2) {
      specula_delta_unit<HK, HV, DK, DV, KC>(t, 2 * HK + h, proj, tail, w, negA, dtBias, vs, gates, gates + 1, padded, true);
    }
    __syncthreads();
    const float at = gates[0], bt = gates[1];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const int i = warp + NW * r;
      const float ov = specula_delta_row<PK>(s[r], ks, qs, at, bt, vs[i]);
      if (lane == 0) os[i] = ov;
      if (EMIT) {
        float* dst = st + (((size_t)t * HV + h) * DV + i) * DK;
#pragma unroll
        for (int j = 0; j < PK; ++j) dst[lane + 32 * j] = s[r][j];
      }
    }
    __syncthreads();
    // The shared arrays are written again only after every thread has
    // passed the norm's block reduction, by then done with them.
    specula_gated_norm_row<DV, BLOCK, CHUNKS, NREADS>(os, proj + (size_t)t * P + CONV + (size_t)h * DV, nw,
                                                      y + ((size_t)t * HV + h) * DV, __int_as_float(EPS));
  }
  if (!EMIT) {
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      float* dst = st + ((size_t)h * DV + warp + NW * r) * DK;
#pragma unroll
      for (int j = 0; j < PK; ++j) dst[lane + 32 * j] = s[r][j];
    }
  }
`,
}

// deltaStepWarps is the step kernel's warps per block: 4, each keeping a
// quarter of the head's state rows in registers (32 rows of 128 at
// Qwen3.5's sizes, 128 floats a thread). A block of 128 threads may use the
// 255 registers a thread can have (NVRTC for sm_90: 180–200, no spills);
// 16 warps with 8 rows each needed 148–168, more than the 128 a thread of a
// 512-thread block may hold, and such a launch fails. useDeltaStep keeps
// the state's share at most 128 floats a thread.
const deltaStepWarps = 4

// maxStepRows bounds the forwards the step kernel runs: decode steps and
// verifications (up to 17 rows with DFlash's blocks; the rows of a
// verification must have the bits of the steps) and prefills as short. A
// block works through its tokens one after the other, about 1.5 µs each
// by estimate, while the three kernels spread a long prefill's tokens over
// the whole GPU.
const maxStepRows = 32

var deltaStepSwitch = nn.NewKernelSwitch("SPECULA_DELTA_STEP", "qwen35: the one-launch delta-net step CUDA kernel failed; using its three kernels")

// deltaStep is deltaMix's preparation, scan and gated norm as one launch
// (deltaStepKernel) for a forward of up to maxStepRows rows, from the
// stacked projection proj, the convolution tail and the delta state: the
// gated norm's output [1, L, Hv·Dv] (as the output projection takes it, so
// no reshape node per layer and step) and the cache write, as deltaMix makes
// them. ok is false where it does not run (off the GPU, switched off by
// SPECULA_DELTA_STEP=0, any of the three kernels off or not taking these
// operands, a longer forward — a prefill, whose tokens the three kernels
// spread over the whole GPU — or a failed launch); deltaMix then runs the
// three.
func (m *Model) deltaStep(g *deltaWeights, proj, convState, deltaState *mlx.Array, splits []int, rows bool) (*mlx.Array, cache.RecurrentWrite, bool) {
	cfg := m.local
	L := proj.Dim(1)
	hk, hv, dk, dv := cfg.LinearKeyHeads, cfg.LinearValueHeads, cfg.LinearKeyDim, cfg.LinearValueDim
	norm, block, ok := nn.GatedNormRow(dv, g.norm, cfg.RMSNormEps, m.dtype)
	if !ok || !deltaStepSwitch.On() || L > maxStepRows || !useScanKernel(dk) || !useDeltaPrepKernel(cfg, g, proj, convState) ||
		deltaState.DType() != mlx.Float32 || hv%hk != 0 || dv%deltaStepWarps != 0 || 32*deltaStepWarps < block ||
		dv/deltaStepWarps*dk/32 > 128 {
		return nil, cache.RecurrentWrite{}, false
	}
	// The states at interior bounds are rows of the states after every
	// token, as gatedDeltaScanKernel hands them over.
	emit := len(splits) > 0
	stRows := 1
	if emit {
		stRows = L
	}
	conv, tail := cfg.ConvDim(), cfg.ConvKernel-1
	outs, err := deltaStepKernel.Run([]*mlx.Array{proj, convState, g.conv, g.negA, g.dtBias, deltaState, g.norm}, mlx.KernelLaunch{
		OutputShapes: [][]int{{1, L, hv * dv}, {stRows, hv, dv, dk}, {1, tail + L, conv}},
		OutputDTypes: []mlx.DType{m.dtype, mlx.Float32, proj.DType()},
		Grid:         [3]int{32 * deltaStepWarps * hv, 1, 1},
		Block:        [3]int{32 * deltaStepWarps, 1, 1},
		Templates: append(norm,
			mlx.KernelTemplate{Name: "HK", Value: hk}, mlx.KernelTemplate{Name: "HV", Value: hv},
			mlx.KernelTemplate{Name: "DK", Value: dk}, mlx.KernelTemplate{Name: "DV", Value: dv},
			mlx.KernelTemplate{Name: "KC", Value: cfg.ConvKernel}, mlx.KernelTemplate{Name: "NW", Value: deltaStepWarps},
			mlx.KernelTemplate{Name: "EMIT", Value: b2i(emit), Bool: true},
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
	w := cache.RecurrentWrite{Conv: mlx.SliceAxis(padded, 1, L, L+tail)}
	switch {
	case !emit:
		w.Delta = st
	case rows:
		w.ConvWindow = padded
		w.Delta, w.DeltaRows = mlx.SliceAxis(st, 0, L-1, L), st
	default:
		w.ConvWindow = padded
		w.Delta = mlx.SliceAxis(st, 0, L-1, L)
		for _, b := range splits {
			w.Deltas = append(w.Deltas, mlx.SliceAxis(st, 0, b-1, b))
		}
	}
	return y, w, true
}
