package nn

import (
	"github.com/specula-dev/specula/mlx"
)

// rowsGEMVF32 is rowsGEMV for float32 weights and activations: a
// verification of a float32 model (the go-tiny family on a GPU, the float32
// shapes the oracle is exact on) multiplies its few rows with cuBLAS
// otherwise, which at 8 rows streams far below the memory bound and costs
// MLX's submission ~15 µs a product (docs/PERFORMANCE.md, 2026-12-06: a
// float32 4B depth-7 verification took the H100 ~12 ms against a 6.9 ms
// step). Tensor cores would round float32 to TF32, so this kernel uses
// plain fused multiply-adds.
//
// Layout: a block owns 4 weight rows; its WARPS warps split K into slices
// of 128 (32 lanes × 4 consecutive k), slice s going to warp s mod WARPS.
// A lane keeps the partial sums of every (x row, weight row) pair in
// registers, adding its slices' four products in k order; then each warp
// sums its lanes with a fixed shuffle tree and the warps' sums are added in
// warp order. Nothing in that order depends on how many x rows share the
// launch, so a row of a verification has the bits of the same row run
// alone. The weights are read once, with a streaming hint; the few x rows
// are read by every block and stay cached.
var rowsGEMVF32Kernel = &mlx.CUDAKernel{
	Name:    "specula_rows_gemv_f32",
	Inputs:  []string{"x", "w"},
	Outputs: []string{"y"},
	Header: leadingRowsHeader + `
// Four consecutive floats at p, zeros when !ok: one 16-byte load when VEC
// (p 16-byte aligned), else one by one (the same values). STREAM marks data
// read once (the weights).
template <bool STREAM, bool VEC>
__device__ __forceinline__ float4 specula_load4f(const float* p, bool ok) {
  if (!ok) return make_float4(0.f, 0.f, 0.f, 0.f);
  if (VEC) return STREAM ? __ldcs(reinterpret_cast<const float4*>(p)) : __ldg(reinterpret_cast<const float4*>(p));
  return make_float4(p[0], p[1], p[2], p[3]);
}
// y = x · wᵀ for R (<= RT) rows of x, N rows of w, K columns (a multiple of
// 4); red holds WARPS * RT * 4 floats.
template <int RT, int WARPS, bool VEC>
__device__ __forceinline__ void specula_rows_gemv_f32(const float* x, const float* w, float* y, int R, int N, int K, float* red) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int m0 = blockIdx.x * 4;
  float acc[RT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[r][j] = 0.f;
  }
  for (int k = (warp * 32 + lane) * 4; k < K; k += WARPS * 128) {
    float4 wv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + j;
      wv[j] = specula_load4f<true, VEC>(w + (size_t)(m < N ? m : 0) * K + k, m < N);
    }
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      if (r < R) {
        const float4 xv = specula_load4f<false, VEC>(x + (size_t)r * K + k, true);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float a = acc[r][j];
          a = fmaf(xv.x, wv[j].x, a);
          a = fmaf(xv.y, wv[j].y, a);
          a = fmaf(xv.z, wv[j].z, a);
          a = fmaf(xv.w, wv[j].w, a);
          acc[r][j] = a;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float s = acc[r][j];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) red[(warp * RT + r) * 4 + j] = s;
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= RT * 4) return;
  const int r = t >> 2, j = t & 3;
  float s = red[r * 4 + j];
#pragma unroll
  for (int v = 1; v < WARPS; ++v) s += red[(v * RT + r) * 4 + j];
  const int m = m0 + j;
  if (r < R && m < N) y[(size_t)r * N + m] = s;
}
`,
	Source: `
  __shared__ float red[WARPS * RT * 4];
  const int rows = specula_leading_rows(x_shape, x_ndim);
  if (((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(w)) & 15) == 0) {
    specula_rows_gemv_f32<RT, WARPS, true>(x, w, y, rows, w_shape[0], w_shape[1], red);
  } else {
    specula_rows_gemv_f32<RT, WARPS, false>(x, w, y, rows, w_shape[0], w_shape[1], red);
  }
`,
}

// gemvF32Warps is the float32 kernel's warps per block: 8, so that RT × 4
// (at most 96) threads are there to add the warps' sums.
const gemvF32Warps = 8

// rowsGEMVF32Switch turns the kernel off once a launch has failed (MLX's
// products are used from then on, logged once), off the GPU, and with
// SPECULA_ROWS_GEMV_F32=0. Linear sends it the float32 products that
// rowsGEMVFrom gives the few-row kernels (by default those of 2–17 rows:
// every verification; a step's single row stays on MLX's gemv).
//
// Why on (docs/PERFORMANCE.md, H100, 2026-12-06): a float32 verification
// otherwise multiplies its rows with cuBLAS, which streams 8 rows of the 4B
// projections at 1.0–1.8 TB/s against the kernel's 1.25–2.4 TB/s
// (BenchmarkRowsGEMV), and costs more host time to record. The float32 4B
// oracle's chained depth-7 round fell from 12.46–12.75 ms to 8.62–10.10 ms
// (1.73–1.74× a plain step → 1.28–1.29×), every round exact.
var rowsGEMVF32Switch = NewKernelSwitch("SPECULA_ROWS_GEMV_F32", "nn: the float32 few-row GEMV kernel failed; using MLX's products")

// rowsGEMVF32 returns x · Wᵀ for x [..., K] with at most maxGEMVRows rows
// and w [N, K], both float32 and K a multiple of 4, as one launch, or nil
// when it does not apply (off the GPU, other dtypes or sizes, or after a
// failed launch).
func rowsGEMVF32(x, w *mlx.Array) *mlx.Array {
	rows, n, ok := fewRowsProduct(rowsGEMVF32Switch, x, w, mlx.Float32, 4)
	if !ok {
		return nil
	}
	outs, err := rowsGEMVF32Kernel.Run([]*mlx.Array{x, w}, mlx.KernelLaunch{
		OutputShapes: [][]int{productShape(x, n)},
		OutputDTypes: []mlx.DType{mlx.Float32},
		Grid:         [3]int{(n + 3) / 4 * 32 * gemvF32Warps, 1, 1},
		Block:        [3]int{32 * gemvF32Warps, 1, 1},
		// Only the number of 8-row tiles is compiled in; the row count is
		// read from x's shape ([..., K], as it comes: no reshape nodes).
		Templates: []mlx.KernelTemplate{{Name: "RT", Value: (rows + 7) / 8 * 8}, {Name: "WARPS", Value: gemvF32Warps}},
	})
	if err != nil {
		rowsGEMVF32Switch.Fail(err)
		return nil
	}
	return outs[0]
}
