package nn

import (
	"math"

	"github.com/specula-dev/specula/mlx"
)

// Causal attention of a few query rows over a KV cache, as two launches of
// our own (issue 19). MLX's CUDA backend has no fused attention at head size
// 256 (Qwen3.5's), so each attention layer of a step or a verification runs
// MLX's composed fallback: the scale, a product with the keys, the mask, the
// softmax and a product with the values, plus the reshapes of grouped
// heads; a verification's products go to cuBLAS, whose capture into MLX's
// CUDA graph costs ~15 µs of host time each. And the fallback sums in an
// order that depends on the number of rows, so a verification row and the
// decode step at the same position can differ in their last bits.
//
// Here the keys are cut into chunks of rowsAttentionChunk at fixed
// positions. rowsAttentionPartKernel has one block per (head, row, chunk):
// its warps take the chunk's keys round-robin, each keeping a running
// maximum, sum and weighted sum of values (an online softmax in float32),
// and the block merges its warps in warp order. rowsAttentionMergeKernel
// merges a row's chunks in chunk order and writes the output. Row i of L
// sees the keys up to T−L+i (causal: the rows are the last L written); its
// arithmetic depends only on those keys, and the chunks past them hold no
// keys and are skipped, so a verification row has the bits of the decode
// step at its position.
//
// The inputs are taken as they come (Strided): the history k and v [1, Hkv,
// T, D] are views of the cache's buffers, which a row-contiguous launch
// would copy first; q is [1, Hq, L, D]. Scores and weights are float32
// (the fallback rounds them to the inputs' dtype), so the outputs are within
// a rounding of the fallback's, not equal to them.
//
// On by default since its GPU tests passed and it was measured (H100,
// 2026-12-06: a bf16 4B depth-7 verification round 8.06 → 7.56 ms, 150
// graph nodes fewer); SPECULA_ROWS_ATTENTION=0 gives MLX's attention back.
var rowsAttentionPartKernel = &mlx.CUDAKernel{
	Name:    "specula_rows_attention_part",
	Inputs:  []string{"q", "k", "v"},
	Outputs: []string{"part"},
	Strided: true,
	Source: `
  // part [Hq, L, NC, D + 2]: per block its weighted sum of values, then
  // its maximum score and sum of weights (0: no keys).
  constexpr int DPL = D / 32;
  const int L = q_shape[2];
  const int T = k_shape[2];
  const int NC = (T + C - 1) / C;
  const int b = blockIdx.x;
  const int c = b % NC;
  const int r = (b / NC) % L;
  const int h = b / (NC * L);
  const int hk = h / R;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int vis = T - L + r + 1;
  const int lo = c * C;
  const int hi = min(lo + C, vis);
  const float scale = __int_as_float(SCALE);
  const auto* qr = q + h * q_strides[1] + r * q_strides[2];
  float qf[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) qf[j] = static_cast<float>(qr[(lane * DPL + j) * q_strides[3]]) * scale;
  float m = specula_neg_inf(), l = 0.f, acc[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) acc[j] = 0.f;
  for (int t = lo + warp; t < hi; t += NW) {
    const auto* kt = k + hk * k_strides[1] + t * k_strides[2];
    const auto* vt = v + hk * v_strides[1] + t * v_strides[2];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < DPL; ++j) s = __fmaf_rn(qf[j], static_cast<float>(kt[(lane * DPL + j) * k_strides[3]]), s);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    const float mn = fmaxf(m, s);
    const float a = expf(m - mn);
    const float p = expf(s - mn);
    l = __fmaf_rn(l, a, p);
#pragma unroll
    for (int j = 0; j < DPL; ++j) acc[j] = __fmaf_rn(p, static_cast<float>(vt[(lane * DPL + j) * v_strides[3]]), __fmul_rn(acc[j], a));
    m = mn;
  }
  __shared__ float wm[NW], wl[NW], wacc[NW][D];
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < DPL; ++j) wacc[warp][lane * DPL + j] = acc[j];
  __syncthreads();
  if (warp != 0) return;
  float M = specula_neg_inf(), S = 0.f, A[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) A[j] = 0.f;
  for (int w = 0; w < NW; ++w) {
    if (wl[w] == 0.f) continue;
    specula_merge_softmax<DPL>(M, S, A, wm[w], wl[w], &wacc[w][lane * DPL]);
  }
  float* out = part + (size_t)b * (D + 2);
#pragma unroll
  for (int j = 0; j < DPL; ++j) out[lane * DPL + j] = A[j];
  if (lane == 0) {
    out[D] = M;
    out[D + 1] = S;
  }
`,
	Header: mergeSoftmaxHeader,
}

// rowsAttentionMergeKernel merges each row's chunks (see
// rowsAttentionPartKernel) in chunk order, skipping those without keys, and
// writes o [1, L, Hq, D]: one warp per (head, row).
var rowsAttentionMergeKernel = &mlx.CUDAKernel{
	Name:    "specula_rows_attention_merge",
	Inputs:  []string{"part"},
	Outputs: []string{"o"},
	Header:  mergeSoftmaxHeader,
	Source: `
  static_assert(OT >= 0, "the output dtype's code, only in MLX's cache key");
  constexpr int DPL = D / 32;
  const int HQ = part_shape[0];
  const int L = part_shape[1];
  const int NC = part_shape[2];
  const int b = blockIdx.x;
  const int h = b / L;
  const int r = b - h * L;
  const int lane = threadIdx.x & 31;
  float M = specula_neg_inf(), S = 0.f, A[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) A[j] = 0.f;
  for (int c = 0; c < NC; ++c) {
    const float* pc = part + ((size_t)b * NC + c) * (D + 2);
    if (pc[D + 1] == 0.f) continue;
    specula_merge_softmax<DPL>(M, S, A, pc[D], pc[D + 1], pc + lane * DPL);
  }
  using TO = typename specula_out<decltype(o[0])>::type;
  TO* orow = o + ((size_t)r * HQ + h) * D + lane * DPL;
#pragma unroll
  for (int j = 0; j < DPL; ++j) orow[j] = static_cast<TO>(__fdiv_rn(A[j], S));
`,
}

// mergeSoftmaxHeader is the CUDA both attention kernels merge partial
// softmaxes with (and −∞, which NVRTC has no macro for):
// specula_merge_softmax folds a part (its maximum score m,
// sum of weights s and this lane's DPL weighted sums a) into the running
// (M, S, A), rescaling whichever has the smaller maximum; a part with keys
// only (s > 0).
const mergeSoftmaxHeader = `
__device__ __forceinline__ float specula_neg_inf() { return __int_as_float(0xff800000); }
template <typename T> struct specula_out { using type = T; };
template <typename T> struct specula_out<T&> { using type = T; };
template <int DPL>
__device__ __forceinline__ void specula_merge_softmax(float& M, float& S, float* A, float m, float s, const float* a) {
  const float mn = fmaxf(M, m);
  const float x = expf(M - mn);
  const float y = expf(m - mn);
  S = __fmaf_rn(s, y, __fmul_rn(S, x));
#pragma unroll
  for (int j = 0; j < DPL; ++j) A[j] = __fmaf_rn(a[j], y, __fmul_rn(A[j], x));
  M = mn;
}
`

// rowsAttentionChunk is the number of keys per chunk: fixed, so that a
// row's chunks — and its bits — do not depend on how many keys the other
// rows of its launch see.
const rowsAttentionChunk = 256

// rowsAttentionWarps is the warps per block of the partial kernel.
const rowsAttentionWarps = 4

// maxAttentionRows bounds the query rows RowsAttention takes: decode steps
// and verifications, whose attention is launch-bound; prefills keep MLX's.
const maxAttentionRows = 32

// rowsAttentionSwitch turns the kernels off with SPECULA_ROWS_ATTENTION=0
// and after a failed launch.
var rowsAttentionSwitch = NewKernelSwitch("SPECULA_ROWS_ATTENTION", "nn: the few-row attention CUDA kernels failed; using MLX's attention")

// RowsAttentionTakes reports whether RowsAttention would take a block of L
// query rows as far as the switch and the row count decide (on the GPU,
// not switched off, 1 to 32 rows). It needs no causal mask, so a forward
// need not build the one it shares among its layers; where the operands
// refuse after all, CachedAttentionRows's attention makes its own mask, as
// it does when none is shared.
func RowsAttentionTakes(L int) bool {
	return L >= 1 && L <= maxAttentionRows && rowsAttentionSwitch.On()
}

// RowsAttention is causal attention of q [1, Hq, L, D], the last L rows
// written, over the cache history k and v [1, Hkv, T, D] (T ≥ L, views
// welcome) with the given scale, as two launches: row i sees keys 0 … T−L+i.
// It returns o [1, L, Hq, D] in q's dtype (the layout the output projection
// reads), or nil where it does not apply: off the GPU, with
// SPECULA_ROWS_ATTENTION=0, after a failed launch; and it takes
// 1 to 32 rows, Hq a multiple of Hkv, D a multiple of 32 up to 256, and one
// float dtype for all three.
func RowsAttention(q, k, v *mlx.Array, scale float32) *mlx.Array {
	if q.NDim() != 4 || k.NDim() != 4 || v.NDim() != 4 {
		return nil
	}
	hq, L, d := q.Dim(1), q.Dim(2), q.Dim(3)
	hkv, T := k.Dim(1), k.Dim(2)
	dt := q.DType()
	if !RowsAttentionTakes(L) || q.Dim(0) != 1 || k.Dim(0) != 1 || v.Dim(0) != 1 || T < L ||
		d%32 != 0 || d > 256 || k.Dim(3) != d || v.Dim(3) != d || v.Dim(1) != hkv || v.Dim(2) != T ||
		hkv < 1 || hq%hkv != 0 || !KernelFloat(dt) || k.DType() != dt || v.DType() != dt || !(scale > 0) {
		return nil
	}
	nc := (T + rowsAttentionChunk - 1) / rowsAttentionChunk
	parts, err := rowsAttentionPartKernel.Run([]*mlx.Array{q, k, v}, mlx.KernelLaunch{
		OutputShapes: [][]int{{hq, L, nc, d + 2}},
		OutputDTypes: []mlx.DType{mlx.Float32},
		Grid:         [3]int{hq * L * nc * 32 * rowsAttentionWarps, 1, 1},
		Block:        [3]int{32 * rowsAttentionWarps, 1, 1},
		Templates: []mlx.KernelTemplate{
			{Name: "D", Value: d}, {Name: "R", Value: hq / hkv}, {Name: "NW", Value: rowsAttentionWarps},
			{Name: "C", Value: rowsAttentionChunk}, {Name: "SCALE", Value: int(math.Float32bits(scale))},
		},
	})
	if err != nil {
		rowsAttentionSwitch.Fail(err)
		return nil
	}
	outs, err := rowsAttentionMergeKernel.Run(parts, mlx.KernelLaunch{
		OutputShapes: [][]int{{1, L, hq, d}},
		OutputDTypes: []mlx.DType{dt},
		Grid:         [3]int{hq * L * 32, 1, 1},
		Block:        [3]int{32, 1, 1},
		Templates:    []mlx.KernelTemplate{{Name: "D", Value: d}, {Name: "OT", Value: int(dt)}},
	})
	if err != nil {
		rowsAttentionSwitch.Fail(err)
		return nil
	}
	return outs[0]
}
