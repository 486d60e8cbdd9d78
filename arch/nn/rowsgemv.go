package nn

import (
	"os"

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
// give, the same for A and B, which leaves the sum unchanged. A warp issues
// the loads of its next trip before the products of this one (a register
// double buffer), so it always has loads in flight, and the weights are
// read with a streaming hint (not kept in L1, 256-byte L2 fetches) while
// the activations, read by every block, stay cached. Measured in GPU time
// alone (CUDA events, docs/PERFORMANCE.md), these two made the kernel
// 4-49 % faster at 8 rows (most on the projections with few outputs), and
// at 8 rows within 7 % of cuBLAS's time or faster on every Qwen3.5 4B and
// 27B projection on the H100 and the H200 (at 16 rows 0.82-1.18×).
var rowsGEMVKernel = &mlx.CUDAKernel{
	Name:    "specula_rows_gemv_mma",
	Inputs:  []string{"x", "w"},
	Outputs: []string{"y"},
	Header: leadingRowsHeader + `
__device__ __forceinline__ void specula_mma_bf16(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Eight bfloat16 at p (row-contiguous), zeros when !ok: one 16-byte load
// when VEC (p 16-byte aligned), else element by element (same bits).
// STREAM marks data read once (the weights): not allocated in L1, fetched
// 256 bytes at a time into L2.
template <bool STREAM, bool VEC>
__device__ __forceinline__ uint4 specula_load8(const __nv_bfloat16* p, bool ok) {
  uint4 r = make_uint4(0u, 0u, 0u, 0u);
  if (!ok) return r;
  if (VEC && STREAM) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else if (VEC) {
    r = __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
    r.x = (unsigned)s[0] | ((unsigned)s[1] << 16);
    r.y = (unsigned)s[2] | ((unsigned)s[3] << 16);
    r.z = (unsigned)s[4] | ((unsigned)s[5] << 16);
    r.w = (unsigned)s[6] | ((unsigned)s[7] << 16);
  }
  return r;
}
// The product y = x · wᵀ (R rows of x, N of w, K columns), with red
// (WARPS * NT * 4 * 32 floats of shared memory) for the warps' partial
// sums. VEC is a template parameter, the kernel choosing between two
// instances at run time, so that the 16-byte path does not pay the
// registers of the element-by-element one.
template <int NT, int WARPS, int U, bool VEC>
__device__ __forceinline__ void specula_rows_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int R, int N, int K, float* red) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.x * 16;
  const int ma = m0 + g, mb = m0 + g + 8;
  const __nv_bfloat16* wa = w + (size_t)(ma < N ? ma : 0) * K;
  const __nv_bfloat16* wb = w + (size_t)(mb < N ? mb : 0) * K;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
  }
  const int chunks = (K + 31) >> 5;
  // One trip's loads: U chunks from c0 on (past K: zeros; K is a
  // multiple of 8, not necessarily of 32).
  auto load = [&](int c0, uint4* a, uint4* b, uint4 (*xs)[NT]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = ((c0 + u) << 5) + 8 * t;
      const bool kin = (c0 + u) < chunks && k < K;
      a[u] = specula_load8<true, VEC>(wa + k, kin && ma < N);
      b[u] = specula_load8<true, VEC>(wb + k, kin && mb < N);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int n = 8 * j + g;
        xs[u][j] = specula_load8<false, VEC>(x + (size_t)(n < R ? n : 0) * K + k, kin && n < R);
      }
    }
  };
  uint4 A[U], B[U], X[U][NT];
  load(warp * U, A, B, X);
  for (int c0 = warp * U; c0 < chunks; c0 += WARPS * U) {
    // The next trip's loads go out before this trip's products, except on
    // the element-by-element path (a rare fallback), whose registers would
    // otherwise set the whole kernel's.
    uint4 A2[U], B2[U], X2[U][NT];
    if (VEC) load(c0 + WARPS * U, A2, B2, X2);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        specula_mma_bf16(acc[j], A[u].x, B[u].x, A[u].y, B[u].y, X[u][j].x, X[u][j].y);
        specula_mma_bf16(acc[j], A[u].z, B[u].z, A[u].w, B[u].w, X[u][j].z, X[u][j].w);
      }
    }
    if (!VEC) load(c0 + WARPS * U, A2, B2, X2);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      A[u] = A2[u];
      B[u] = B2[u];
#pragma unroll
      for (int j = 0; j < NT; ++j) X[u][j] = X2[u][j];
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) red[(warp * NT * 4 + j * 4 + i) * 32 + lane] = acc[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = red[(j * 4 + i) * 32 + lane];
#pragma unroll
      for (int v = 1; v < WARPS; ++v) s += red[(v * NT * 4 + j * 4 + i) * 32 + lane];
      const int m = (i < 2) ? ma : mb;
      const int n = 8 * j + 2 * t + (i & 1);
      if (m < N && n < R) y[(size_t)n * N + m] = __float2bfloat16(s);
    }
  }
}
`,
	Source: `
  __shared__ float red[WARPS * NT * 4 * 32];
  const int rows = specula_leading_rows(x_shape, x_ndim);
  if (((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(w)) & 15) == 0) {
    specula_rows_gemv<NT, WARPS, U, true>(x, w, y, rows, w_shape[0], w_shape[1], red);
  } else {
    specula_rows_gemv<NT, WARPS, U, false>(x, w, y, rows, w_shape[0], w_shape[1], red);
  }
`,
}

// gemvUnroll is the number of 32-wide K chunks a warp loads per trip.
const gemvUnroll = 2

// gemvWarps is the number of warps per block for a weight of n rows: 16
// when the product has fewer 16-row blocks than two per SM of an H100 or
// H200 (132 SMs), so that a small projection still has enough warps
// streaming; 8 otherwise: blocks of 256 threads, four to an SM at one
// 8-row tile, so that a launch of a few hundred blocks (27B's projections
// to 5120 outputs) runs in one wave. It depends on the weight's
// shape alone, never on the row count: a row's sums then run in the same
// order whatever rows share its launch. Measured in GPU time on the H100
// and the H200 against 4, 8 and 16 warps of 2 to 8 chunks
// (docs/PERFORMANCE.md): within 6 % of the best launch on every projection
// of Qwen3.5 4B and 27B.
func gemvWarps(n int) int {
	if (n+15)/16 < 264 {
		return 16
	}
	return 8
}

// maxGEMVRows bounds the rows rowsGEMV takes: a decode step and a
// verification block (DFlash's 16 drafts and the anchor fit).
const maxGEMVRows = 17

// rowsGEMVSwitch turns the kernel off once a launch has failed (MLX's
// products are used from then on, logged once), and off the GPU.
// SPECULA_ROWS_GEMV=0 turns it off too, as it does in rowsGEMVFrom.
var rowsGEMVSwitch = NewKernelSwitch("SPECULA_ROWS_GEMV", "nn: the few-row GEMV kernel failed; using MLX's products")

// rowsGEMVFrom is the fewest rows of a product Linear sends to the few-row
// kernels (which take up to maxGEMVRows; 0: none), for bfloat16 and for
// float32 products, from SPECULA_ROWS_GEMV, read once. By default (unset)
// every bfloat16 product of 1–17 rows — decode steps too — and float32
// products of 2–17 rows (verifications); "verify" 2 rows or more for both;
// "1" every row count for both; "0" (or any other value) none, leaving
// MLX's own products (its gemv for one row, cuBLAS for several).
//
// Why the kernel for verifications (docs/PERFORMANCE.md, 2026-12-05, issue
// 19): on the GPU it streams a product of 8 or 16 rows about as fast as
// cuBLAS does (H200, GPU time of the Qwen3.5 4B and 27B projections:
// 0.86–1.11× cuBLAS's at 8 rows, 0.82–1.18× at 16), but MLX records each
// cuBLAS product into its CUDA graph by stream capture, which costs the
// host about twice what launching the kernel does (~10 against ~5 µs a
// product, measured at 4B); a 27B verification holds ~260 of them.
//
// Why for a bfloat16 decode step too (2026-12-06, fifteenth session): a
// verification row then has the bits of the step at its position. With
// the few-row attention (RowsAttention) and the one-launch delta-net step,
// which keep their rows' bits too, a bfloat16 4B oracle's output equals
// plain decoding's (6 of 6 runs on an H100, every draft accepted; with
// MLX's gemv for the step, 6 of 6 differed on near-ties), and the step was
// not slower (4.18 against 4.34 ms). At one row the kernel streams like
// MLX's gemv (H200: 27B MLP in 3944 against 3964 GB/s). A float32 step
// keeps MLX's gemv, which is faster at one float32 row (H100, float32 4B
// shapes: a step of 7.03 ms against 8.47 with the float32 kernel,
// 2026-12-06), and float32 near-ties are rare enough that its oracle runs
// are exact all the same (6 of 6 there).
var rowsGEMVFrom = parseRowsGEMV(os.Getenv("SPECULA_ROWS_GEMV"))

// gemvRows is rowsGEMVFrom's value: the fewest rows per dtype.
type gemvRows struct{ half, f32 int }

// of returns the fewest rows for products of dtype dt.
func (g gemvRows) of(dt mlx.DType) int {
	if dt == mlx.Float32 {
		return g.f32
	}
	return g.half
}

// parseRowsGEMV maps a SPECULA_ROWS_GEMV value to rowsGEMVFrom.
func parseRowsGEMV(v string) gemvRows {
	switch v {
	case "":
		return gemvRows{half: 1, f32: 2}
	case "verify":
		return gemvRows{half: 2, f32: 2}
	case "1":
		return gemvRows{half: 1, f32: 1}
	}
	return gemvRows{}
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
// launch). Float32 products go to rowsGEMVF32.
func rowsGEMV(x, w *mlx.Array) *mlx.Array {
	if x.DType() == mlx.Float32 {
		return rowsGEMVF32(x, w)
	}
	rows, n, ok := fewRowsProduct(rowsGEMVSwitch, x, w, mlx.BFloat16, 8)
	if !ok {
		return nil
	}
	warps := gemvWarps(n)
	outs, err := rowsGEMVKernel.Run([]*mlx.Array{x, w}, mlx.KernelLaunch{
		OutputShapes: [][]int{productShape(x, n)},
		OutputDTypes: []mlx.DType{mlx.BFloat16},
		Grid:         [3]int{(n + 15) / 16 * 32 * warps, 1, 1},
		Block:        [3]int{32 * warps, 1, 1},
		// The row count itself is read from x's shape in the kernel: only
		// the number of 8-row tiles is compiled in (3 variants per warp
		// count). x goes in as it is, [..., K], and y comes out [..., N]:
		// reshapes around the launch would be two more graph nodes per
		// product, 256 per 4B verification (issue 19).
		Templates: []mlx.KernelTemplate{
			{Name: "NT", Value: (rows + 7) / 8}, {Name: "WARPS", Value: warps}, {Name: "U", Value: gemvUnroll},
		},
	})
	if err != nil {
		rowsGEMVSwitch.Fail(err)
		return nil
	}
	return outs[0]
}

// fewRowsProduct checks that a few-row kernel behind sw can multiply
// x [..., K] by w [N, K]: the switch on, both of dtype dt, K a multiple of
// kStep (the kernel's vector width) and 1 to maxGEMVRows rows. It returns
// the rows and N.
func fewRowsProduct(sw *KernelSwitch, x, w *mlx.Array, dt mlx.DType, kStep int) (rows, n int, ok bool) {
	if !sw.On() || x.DType() != dt || w.DType() != dt || w.NDim() != 2 || x.NDim() < 1 {
		return 0, 0, false
	}
	k, n := w.Dim(1), w.Dim(0)
	if x.Dim(-1) != k || k%kStep != 0 {
		return 0, 0, false
	}
	rows = leadingRows(x)
	return rows, n, rows >= 1 && rows <= maxGEMVRows
}

// productShape is the shape of x · Wᵀ for x [..., K] and N outputs:
// [..., N].
func productShape(x *mlx.Array, n int) []int {
	return append(x.Shape()[:x.NDim()-1:x.NDim()-1], n)
}

// leadingRowsHeader is CUDA shared by the few-row kernels, which take x
// [..., K] as it comes (a reshape would be one more graph node per product):
// specula_leading_rows(x_shape, x_ndim) is its number of rows, every
// leading dimension together.
const leadingRowsHeader = `
template <typename S>
__device__ __forceinline__ int specula_leading_rows(const S& shape, int ndim) {
  int rows = 1;
  for (int i = 0; i + 1 < ndim; ++i) rows *= shape[i];
  return rows;
}
`
