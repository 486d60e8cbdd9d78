package qwen35

import (
	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
)

// deltaPrepKernel prepares one delta-net layer's step from the stacked
// input projection as one CUDA launch: the causal convolution with SiLU, the
// q/k L2 norms and the gates α and β, plus the padded rows [tail; new rows]
// the convolution read (the cache keeps slices of them). The graph path
// (deltaPrepGraph) costs about eight small kernels per layer per step for
// the same values — the concatenation, the fused convolution, copies of the
// strided q/k/v views, two norms, the gates — and a verification forward is
// bound by launches on the GPU.
//
// One warp owns one (token t, unit) (deltaUnitHeader). A token's values depend only on its own padded rows, not on how
// many tokens run (a verification's rows equal a decode's, bit for bit). The
// float maths follows MLX's kernels: the products and sums of the
// convolution in float32 in ascending tap order, Sigmoid as
// 1/(1+e^|x|) mirrored, rms_norm's rsqrt(Σx²/D + eps/D)·w, softplus as
// logaddexp(x, 0).
var deltaPrepKernel = &mlx.CUDAKernel{
	Name:    "specula_delta_prep",
	Inputs:  []string{"proj", "tail", "w", "negA", "dtBias"},
	Outputs: []string{"q", "k", "v", "alpha", "beta", "padded"},
	Header:  deltaUnitHeader,
	Source: `
  // PT, WT, AT, BT: the inputs' dtypes, only in MLX's cache key.
  static_assert(PT >= 0 && WT >= 0 && AT >= 0 && BT >= 0, "dtype codes");
  constexpr int U = 2 * HK + HV;
  const int L = proj_shape[1];
  const int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (gw >= L * U) return;
  const int t = gw / U;
  const int u = gw - t * U;
  float* dst;
  float* al = nullptr;
  float* be = nullptr;
  if (u < HK) {
    dst = q + ((size_t)t * HK + u) * DK;
  } else if (u < 2 * HK) {
    dst = k + ((size_t)t * HK + u - HK) * DK;
  } else {
    const size_t th = (size_t)t * HV + u - 2 * HK;
    dst = v + th * DV;
    al = alpha + th;
    be = beta + th;
  }
  specula_delta_unit<HK, HV, DK, DV, KC>(t, u, proj, tail, w, negA, dtBias, dst, al, be, padded, true);
`,
}

// deltaUnitHeader is the CUDA of one warp's share of the delta-net's
// preparation (deltaPrepKernel, and the one-launch step deltaStepKernel):
// specula_delta_unit(t, u, …) prepares unit u of token t — units are the Hk
// q heads, the Hk k heads and the Hv v heads, each a run of D channels of
// the convolution, so each lane holds D/32 outputs in registers and a q/k
// norm is one warp reduction. It writes the unit's D values to dst (q and k
// L2-normed, q scaled by 1/√Dk), for a v unit the head's α and β to alpha
// and beta, and, when copy, the unit's channels of the token's padded row
// (with the tail's rows at t = 0).
const deltaUnitHeader = `
template <int HK, int HV, int DK, int DV, int KC, typename TP, typename TW, typename TA, typename TB>
__device__ __forceinline__ void specula_delta_unit(int t, int u, const TP* proj, const TP* tail, const TW* w, const TA* negA,
                                                   const TB* dtBias, float* dst, float* alpha, float* beta, TP* padded, bool copy) {
  constexpr int KD = HK * DK;
  constexpr int CONV = 2 * KD + HV * DV;
  constexpr int P = CONV + HV * DV + 2 * HV;
  constexpr int PER = (DK > DV ? DK : DV) / 32;
  const int lane = threadIdx.x & 31;
  const int base = u < 2 * HK ? u * DK : 2 * KD + (u - 2 * HK) * DV;
  const int n = u < 2 * HK ? DK / 32 : DV / 32;
  float y[PER];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    if (j >= n) break;
    const int c = base + lane + 32 * j;
    float acc = 0.f;
#pragma unroll
    for (int r = 0; r < KC; ++r) {
      const int row = t + r;
      const float x = row < KC - 1 ? static_cast<float>(tail[(size_t)row * CONV + c])
                                   : static_cast<float>(proj[(size_t)(row - (KC - 1)) * P + c]);
      // Rounded as written (no contraction left to the compiler, which
      // may fuse either of the first two products into the add): the
      // fused step and the three kernels then agree bit for bit.
      const float wc = static_cast<float>(w[(size_t)r * CONV + c]);
      acc = r == 0 ? __fmul_rn(x, wc) : __fmaf_rn(x, wc, acc);
    }
    const float e = 1.f / (1.f + expf(fabsf(acc)));
    y[j] = acc * (acc < 0.f ? e : 1.f - e);
    ss = __fmaf_rn(y[j], y[j], ss);
    if (copy) {
      padded[(size_t)(KC - 1 + t) * CONV + c] = proj[(size_t)t * P + c];
      if (t == 0) {
#pragma unroll
        for (int r = 0; r < KC - 1; ++r) padded[(size_t)r * CONV + c] = tail[(size_t)r * CONV + c];
      }
    }
  }
  if (u < 2 * HK) {
    // nn.L2Norm: rms_norm(y, w = scale/sqrt(DK), eps = l2Eps/DK), the
    // weight and epsilon rounded to float32 as there.
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const bool isq = u < HK;
    const float scale = isq ? (float)(1.0 / sqrt((double)DK) / sqrt((double)DK)) : (float)(1.0 / sqrt((double)DK));
    const float norm = rsqrtf(ss / (float)DK + 1e-6f / (float)DK);
#pragma unroll
    for (int j = 0; j < DK / 32; ++j) dst[lane + 32 * j] = scale * (y[j] * norm);
    return;
  }
  const int h = u - 2 * HK;
#pragma unroll
  for (int j = 0; j < DV / 32; ++j) dst[lane + 32 * j] = y[j];
  if (lane == 0) {
    const size_t g = (size_t)t * P + CONV + HV * DV;
    const float bt = static_cast<float>(proj[g + h]);
    const float at = static_cast<float>(proj[g + HV + h]) + static_cast<float>(dtBias[h]);
    // softplus(at) = logaddexp(at, 0), as MLX's LogAddExp.
    // (max + log1p(exp(min − max)), or max itself at ±∞).
    const float hi = fmaxf(at, 0.f), lo = fminf(at, 0.f);
    const float sp = isnan(at) ? at : isinf(at) ? hi : hi + log1pf(expf(lo - hi));
    *alpha = expf(static_cast<float>(negA[h]) * sp);
    const float e = 1.f / (1.f + expf(fabsf(bt)));
    *beta = bt < 0.f ? e : 1.f - e;
  }
}
`

// useDeltaPrepKernel reports whether deltaPrepKernel can prepare this
// layer's step: on the GPU, with Dk and Dv multiples of the warp size, a
// convolution of at least two taps, every input a float type the kernel
// reads (bfloat16, float16, float32), and the tail in the projection's dtype
// (the kernel copies both into padded). SPECULA_DELTA_PREP=0 turns it off
// (to measure or to compare against the graph path). Everything it reads is
// a shape, a dtype, the device or the environment, so the choice is fixed
// within a compiled segment's trace.
func useDeltaPrepKernel(cfg *Config, g *deltaWeights, proj, convState *mlx.Array) bool {
	if !deltaPrepSwitch.On() || cfg.LinearKeyDim%32 != 0 || cfg.LinearValueDim%32 != 0 || cfg.ConvKernel < 2 {
		return false
	}
	for _, a := range []*mlx.Array{proj, g.conv, g.negA, g.dtBias} {
		if !nn.KernelFloat(a.DType()) {
			return false
		}
	}
	return convState.DType() == proj.DType()
}

var deltaPrepSwitch = nn.NewKernelSwitch("SPECULA_DELTA_PREP", "qwen35: the delta-net preparation CUDA kernel failed; using the graph path")

// deltaPrepLaunch runs deltaPrepKernel and returns deltaPrep's six arrays in
// its order, or nil when the launch failed (the caller then runs the graph
// path).
func deltaPrepLaunch(cfg *Config, g *deltaWeights, proj, convState *mlx.Array) []*mlx.Array {
	L := proj.Dim(1)
	hk, hv, dk, dv := cfg.LinearKeyHeads, cfg.LinearValueHeads, cfg.LinearKeyDim, cfg.LinearValueDim
	conv, tail := cfg.ConvDim(), cfg.ConvKernel-1
	// proj [1, L, width] and the tail [1, Kc−1, conv] go in, and the outputs
	// come out, in the shapes the layer has them (the kernel indexes them
	// flat): a reshape would be one more graph node per operand for MLX to
	// process at every step (issue 19).
	outs, err := deltaPrepKernel.Run([]*mlx.Array{proj, convState, g.conv, g.negA, g.dtBias}, mlx.KernelLaunch{
		OutputShapes: [][]int{{1, L, hk, dk}, {1, L, hk, dk}, {1, L, hv, dv}, {1, L, hv}, {1, L, hv}, {1, tail + L, conv}},
		OutputDTypes: []mlx.DType{mlx.Float32, mlx.Float32, mlx.Float32, mlx.Float32, mlx.Float32, proj.DType()},
		Grid:         [3]int{32 * (2*hk + hv) * L, 1, 1},
		Block:        [3]int{128, 1, 1},
		Templates: []mlx.KernelTemplate{
			{Name: "HK", Value: hk}, {Name: "HV", Value: hv}, {Name: "DK", Value: dk}, {Name: "DV", Value: dv},
			{Name: "KC", Value: cfg.ConvKernel},
			// MLX caches a compiled kernel by name and these constants, not
			// by the inputs' types: the dtypes are part of the key so that a
			// bfloat16 launch never reuses a float32 compilation.
			{Name: "PT", Value: int(proj.DType())}, {Name: "WT", Value: int(g.conv.DType())},
			{Name: "AT", Value: int(g.negA.DType())}, {Name: "BT", Value: int(g.dtBias.DType())},
		},
	})
	if err != nil {
		deltaPrepSwitch.Fail(err)
		return nil
	}
	return outs
}
