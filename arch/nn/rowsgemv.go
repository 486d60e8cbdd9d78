package nn

import (
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/specula-dev/specula/mlx"
)

// rowsGEMV is x · Wᵀ for 1 to maxGEMVRows rows of bfloat16 on the GPU, one
// launch of our own tensor-core kernel, the weights read once. Linear uses
// it for products of rowsGEMVFrom rows or more.
//
// Why (docs/PERFORMANCE.md, issue 19): MLX computes one row with its gemv
// kernel and several with cuBLAS, which it records into its CUDA graph by
// stream capture (a child graph per product, split-K products with a second
// reduction kernel); a verification of 8 rows costs far more host time than
// a 1-row step. And the two paths sum in different orders, so a
// verification row and a step differ in the last bit, which breaks exact
// speculative decoding in bfloat16 on near-ties. Here every row count runs
// the same arithmetic: each output is accumulated by the same sequence of
// mma.sync instructions whatever the other rows hold (a row's column of the
// tensor-core product depends only on that row), so a row of a
// verification has the bits of the same row run alone.
//
// Layout: a block owns 16 weight rows; its WARPS warps split K into 32-wide
// chunks, chunk c going to warp (c / U) mod WARPS, and add their partial
// sums in warp order at the end. In a chunk, thread (g, t) = (lane / 4,
// lane % 4) loads 8 consecutive k of weight rows g and g+8 and of
// activation row g of each 8-row tile (rows ≥ R read as zeros); the two
// m16n8k16 products of the chunk take k in the permuted order the loads
// give, the same for A and B, which leaves the sum unchanged.
var rowsGEMVKernel = &mlx.CUDAKernel{
	Name:    "specula_rows_gemv_mma",
	Inputs:  []string{"x", "w"},
	Outputs: []string{"y"},
	Header: `
__device__ __forceinline__ void specula_mma_bf16(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Eight bfloat16 at p (row-contiguous), as 16-byte load when aligned, else
// element by element (same bits either way); zeros when !ok.
__device__ __forceinline__ uint4 specula_load8(const __nv_bfloat16* p, bool ok, bool vec) {
  uint4 r = make_uint4(0u, 0u, 0u, 0u);
  if (ok) {
    if (vec) {
      r = __ldg(reinterpret_cast<const uint4*>(p));
    } else {
      const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
      r.x = (unsigned)s[0] | ((unsigned)s[1] << 16);
      r.y = (unsigned)s[2] | ((unsigned)s[3] << 16);
      r.z = (unsigned)s[4] | ((unsigned)s[5] << 16);
      r.w = (unsigned)s[6] | ((unsigned)s[7] << 16);
    }
  }
  return r;
}
`,
	Source: `
  const int R = x_shape[0];
  const int N = w_shape[0];
  const int K = w_shape[1];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.x * 16;
  const int ma = m0 + g, mb = m0 + g + 8;
  const bool vec = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(w)) & 15) == 0;
  const __nv_bfloat16* wa = w + (size_t)(ma < N ? ma : 0) * K;
  const __nv_bfloat16* wb = w + (size_t)(mb < N ? mb : 0) * K;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
  }
  const int chunks = (K + 31) >> 5;
  for (int c0 = warp * U; c0 < chunks; c0 += WARPS * U) {
    uint4 A[U], B[U], X[U][NT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = ((c0 + u) << 5) + 8 * t;
      const bool kin = (c0 + u) < chunks && k < K;
      A[u] = specula_load8(wa + k, kin && ma < N, vec);
      B[u] = specula_load8(wb + k, kin && mb < N, vec);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int n = 8 * j + g;
        X[u][j] = specula_load8(x + (size_t)(n < R ? n : 0) * K + k, kin && n < R, vec);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        specula_mma_bf16(acc[j], A[u].x, B[u].x, A[u].y, B[u].y, X[u][j].x, X[u][j].y);
        specula_mma_bf16(acc[j], A[u].z, B[u].z, A[u].w, B[u].w, X[u][j].z, X[u][j].w);
      }
    }
  }
  __shared__ float red[WARPS][NT * 4][32];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][j * 4 + i][lane] = acc[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = red[0][j * 4 + i][lane];
#pragma unroll
      for (int v = 1; v < WARPS; ++v) s += red[v][j * 4 + i][lane];
      const int m = (i < 2) ? ma : mb;
      const int n = 8 * j + 2 * t + (i & 1);
      if (m < N && n < R) y[(size_t)n * N + m] = __float2bfloat16(s);
    }
  }
`,
}

// Launch shape of rowsGEMVKernel: warps per block (each block owns 16
// weight rows, so a product with few outputs needs several warps per block
// to keep enough loads in flight) and 32-wide K chunks per warp per loop
// trip: the shape the GPU test ran with; among the five compared on the
// H200 none was better on every projection (docs/PERFORMANCE.md).
const (
	gemvWarps  = 16
	gemvUnroll = 2
)

// maxGEMVRows bounds the rows rowsGEMV takes: a decode step and a
// verification block (DFlash's 16 drafts and the anchor fit).
const maxGEMVRows = 17

// rowsGEMVBroken is set when a launch fails; MLX's products are used from
// then on (logged once).
var rowsGEMVBroken atomic.Bool

// rowsGEMVFrom is the fewest rows Linear sends to rowsGEMV (0: never), from
// SPECULA_ROWS_GEMV, read once: "1" sends every bfloat16 product of 1 to
// maxGEMVRows rows, "verify" only those of 2 or more (verification blocks and
// block drafts), any other value none. Neither is the default: at one row
// the kernel streams the weights at 0.4-0.8x the rate of MLX's gemv on the
// H200 (0.8-1.2x cuBLAS's at 8 rows; docs/PERFORMANCE.md). "1" buys
// exactness: a verification row and a decode step get the same bits in
// bfloat16. "verify" keeps MLX's gemv for the step and replaces the cuBLAS
// products of a verification, whose stream capture into MLX's graph costs
// the host more than the kernels cost the GPU (issue 19); its rows then sum
// differently from a step's, as cuBLAS's do.
var rowsGEMVFrom = parseRowsGEMV(os.Getenv("SPECULA_ROWS_GEMV"))

// parseRowsGEMV maps a SPECULA_ROWS_GEMV value to rowsGEMVFrom.
func parseRowsGEMV(v string) int {
	switch v {
	case "1":
		return 1
	case "verify":
		return 2
	}
	return 0
}

// leadingRows is the number of rows of x [..., K]: the product of every
// dimension but the last.
func leadingRows(x *mlx.Array) int {
	rows := 1
	for _, d := range x.Shape()[:x.NDim()-1] {
		rows *= d
	}
	return rows
}

// rowsGEMV returns x · Wᵀ for x [..., K] with at most maxGEMVRows rows and
// w [N, K], both bfloat16 and K a multiple of 8, as one launch, or nil when
// it does not apply (off the GPU, other dtypes or sizes, or after a failed
// launch).
func rowsGEMV(x, w *mlx.Array) *mlx.Array {
	if rowsGEMVBroken.Load() || mlx.CurrentDevice() != mlx.GPU {
		return nil
	}
	if x.DType() != mlx.BFloat16 || w.DType() != mlx.BFloat16 || w.NDim() != 2 || x.NDim() < 1 {
		return nil
	}
	k, n := w.Dim(1), w.Dim(0)
	if x.Dim(-1) != k || k%8 != 0 {
		return nil
	}
	rows := leadingRows(x)
	if rows < 1 || rows > maxGEMVRows {
		return nil
	}
	outs, err := rowsGEMVKernel.Run([]*mlx.Array{mlx.Reshape(x, rows, k), w}, mlx.KernelLaunch{
		OutputShapes: [][]int{{rows, n}},
		OutputDTypes: []mlx.DType{mlx.BFloat16},
		Grid:         [3]int{(n + 15) / 16 * 32 * gemvWarps, 1, 1},
		Block:        [3]int{32 * gemvWarps, 1, 1},
		// The row count itself is read from x's shape in the kernel: only
		// the number of 8-row tiles is compiled in (3 variants).
		Templates: []mlx.KernelTemplate{
			{Name: "NT", Value: (rows + 7) / 8}, {Name: "WARPS", Value: gemvWarps}, {Name: "U", Value: gemvUnroll},
		},
	})
	if err != nil {
		if !rowsGEMVBroken.Swap(true) {
			slog.Warn("nn: the few-row GEMV kernel failed; using MLX's products", "err", err)
		}
		return nil
	}
	shape := append(x.Shape()[:x.NDim()-1:x.NDim()-1], n)
	return mlx.Reshape(outs[0], shape...)
}
