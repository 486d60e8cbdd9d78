package nn

import (
	"math"

	"github.com/specula-dev/specula/mlx"
)

// gatedNormKernel is GatedRMSNorm as one CUDA launch, with the gate read in
// place from the columns of a wider array. Gated linear-attention layers
// (Qwen3.5's delta-net) norm each head's output and multiply it by silu of
// a gate that is a column range of the layer's stacked input projection: on
// the GPU that was MLX's rms_norm kernel plus a fused elementwise kernel
// reading the strided gate, two launches per layer that a decode step,
// bound by launch overhead, pays for nothing.
//
// One block owns one row (one head of one token), so a row's bits do not
// depend on how many rows run: a verification row equals the decode step's.
// The row's arithmetic is GatedNormHeader's specula_gated_norm_row.
//
// x is [1, L, H, D] float32, row r = (t, head) at r·D; src is [1, L, width]
// and row r's gate is src[0, r / H, COL + (r mod H)·D …]; w is [D]. Both are
// taken in the shapes the layer has them (a reshape would be one more graph
// node per layer for MLX to process at every step; issue 19). The dtype codes XT, ST, WT
// and OT only make MLX's kernel cache (keyed by name and constants) tell
// compilations for different dtypes apart.
var gatedNormKernel = &mlx.CUDAKernel{
	Name:    "specula_gated_rms_norm",
	Inputs:  []string{"x", "src", "w"},
	Outputs: []string{"y"},
	Header:  GatedNormHeader,
	Source: `
  static_assert(XT >= 0 && ST >= 0 && WT >= 0 && OT >= 0, "dtype codes");
  const int row = blockIdx.x;
  const int t = row / H;
  const int head = row - t * H;
  specula_gated_norm_row<D, BLOCK, CHUNKS, NREADS>(x + (size_t)row * D, src + (size_t)t * src_shape[2] + COL + (size_t)head * D,
                                                   w, y + (size_t)row * D, __int_as_float(EPS));
`,
}

// GatedNormHeader is CUDA for kernels that end in GatedRMSNormFrom's norm
// (its own kernel, and qwen35's one-launch delta-net step):
// specula_gated_norm_row<D, BLOCK, CHUNKS, NREADS>(x, g, w, y, eps) writes
// y = w · (x · rsqrt(Σx²/D + eps)) · g·σ(g) for one row of D values, x in
// float32, g and w of any float type, y rounded once to its type. Every
// thread of a block of at least BLOCK threads calls it; GatedNormRow gives
// the constants.
//
// The norm follows MLX's CUDA rms_norm as addNormKernel does (the same
// split of a row into chunks of NREADS elements over BLOCK threads, the
// same reductions), then the product with the gate, with σ as MLX's CUDA
// Sigmoid computes it, all in float32.
const GatedNormHeader = blockSumHeader + `
template <int D, int BLOCK, int CHUNKS, int NREADS, typename TG, typename TW, typename TO>
__device__ __forceinline__ void specula_gated_norm_row(const float* xr, const TG* gr, const TW* w, TO* yr, float eps) {
  const bool in = (int)threadIdx.x < BLOCK;
  float v[CHUNKS * NREADS];
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
#pragma unroll
    for (int j = 0; j < NREADS; ++j) {
      const int c = (BLOCK * i + (int)threadIdx.x) * NREADS + j;
      v[i * NREADS + j] = in && c < D ? xr[c] : 0.f;
      acc = __fmaf_rn(v[i * NREADS + j], v[i * NREADS + j], acc);
    }
  }
  acc = specula_block_sum<BLOCK>(acc);
  const float inv = rsqrtf(__fdiv_rn(acc, (float)D) + eps);
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
#pragma unroll
    for (int j = 0; j < NREADS; ++j) {
      const int c = (BLOCK * i + (int)threadIdx.x) * NREADS + j;
      if (in && c < D) {
        const float n = static_cast<float>(w[c]) * (v[i * NREADS + j] * inv);
        const float g = static_cast<float>(gr[c]);
        // MLX's Sigmoid: e = 1/(1+exp|g|), σ = e for g < 0, else 1 − e.
        const float e = 1.f / (1.f + expf(fabsf(g)));
        yr[c] = static_cast<TO>(n * (g * (g < 0.f ? e : 1.f - e)));
      }
    }
  }
}
`

var gatedNormSwitch = NewKernelSwitch("SPECULA_GATED_NORM", "nn: the gated RMSNorm CUDA kernel failed; using RMSNorm and the gate's own kernel")

// GatedRMSNormFused reports whether GatedRMSNormFrom launches its one
// kernel (for the operands it takes): on the GPU of a CUDA build, unless
// SPECULA_GATED_NORM=0 turns it off (to measure or compare) or a launch has
// failed. Whoever keeps traced graphs keys them on it.
func GatedRMSNormFused() bool { return gatedNormSwitch.On() }

// GatedRMSNormFrom is GatedRMSNorm(x, gate, w, eps, dtype) for x [1, L, H, D]
// whose gate is columns col … col+H·D of src [1, L, width], read in place:
// on the GPU one launch (gatedNormKernel), elsewhere (or with the kernel
// off, or for operands it does not take) the slice and GatedRMSNorm.
func GatedRMSNormFrom(x, src *mlx.Array, col int, w *mlx.Array, eps float32, dtype mlx.DType) *mlx.Array {
	if x.NDim() != 4 || src.NDim() != 3 || x.Dim(0) != 1 || src.Dim(0) != 1 || x.Dim(1) != src.Dim(1) {
		panic("nn: GatedRMSNormFrom takes x [1, L, H, D] and src [1, L, width]")
	}
	L, h, d := x.Dim(1), x.Dim(2), x.Dim(3)
	if col < 0 || col+h*d > src.Dim(2) {
		panic("nn: GatedRMSNormFrom: the gate's columns run past src")
	}
	if y := gatedNormLaunch(x, src, col, w, eps, dtype); y != nil {
		return y
	}
	gate := mlx.Reshape(mlx.SliceAxis(src, 2, col, col+h*d), 1, L, h, d)
	return GatedRMSNorm(x, gate, w, eps, dtype)
}

// GatedNormRow returns the template constants with which
// GatedNormHeader's specula_gated_norm_row computes, for rows of d float32
// values, what GatedRMSNormFrom's kernel computes (D, BLOCK, CHUNKS, NREADS
// and EPS, its bits), the threads it needs (BLOCK), and whether that kernel
// runs for this norm weight w, eps and output dtype: false where
// GatedRMSNormFrom takes the graph path (off the GPU, switched off, other
// dtypes, a non-positive eps, w not [d]).
func GatedNormRow(d int, w *mlx.Array, eps float32, dtype mlx.DType) (templates []mlx.KernelTemplate, block int, ok bool) {
	if !GatedRMSNormFused() || !(eps > 0) || w == nil || w.NDim() != 1 || w.Dim(0) != d {
		return nil, 0, false
	}
	if !KernelFloat(w.DType()) || !KernelFloat(dtype) {
		return nil, 0, false
	}
	nreads, block, chunks := normLayout(d, mlx.Float32.Size())
	return []mlx.KernelTemplate{
		{Name: "D", Value: d}, {Name: "BLOCK", Value: block}, {Name: "CHUNKS", Value: chunks},
		{Name: "NREADS", Value: nreads}, {Name: "EPS", Value: int(math.Float32bits(eps))},
	}, block, true
}

// gatedNormLaunch runs gatedNormKernel, or returns nil when it does not
// apply (see GatedNormRow; x not float32, a gate of another dtype) or the
// launch failed.
func gatedNormLaunch(x, src *mlx.Array, col int, w *mlx.Array, eps float32, dtype mlx.DType) *mlx.Array {
	L, h, d := x.Dim(1), x.Dim(2), x.Dim(3)
	row, block, ok := GatedNormRow(d, w, eps, dtype)
	if !ok || x.DType() != mlx.Float32 || !KernelFloat(src.DType()) {
		return nil
	}
	outs, err := gatedNormKernel.Run([]*mlx.Array{x, src, w}, mlx.KernelLaunch{
		OutputShapes: [][]int{{1, L, h, d}},
		OutputDTypes: []mlx.DType{dtype},
		Grid:         [3]int{L * h * block, 1, 1},
		Block:        [3]int{block, 1, 1},
		Templates: append(row, mlx.KernelTemplate{Name: "H", Value: h}, mlx.KernelTemplate{Name: "COL", Value: col},
			mlx.KernelTemplate{Name: "XT", Value: int(x.DType())}, mlx.KernelTemplate{Name: "ST", Value: int(src.DType())},
			mlx.KernelTemplate{Name: "WT", Value: int(w.DType())}, mlx.KernelTemplate{Name: "OT", Value: int(dtype)}),
	})
	if err != nil {
		gatedNormSwitch.Fail(err)
		return nil
	}
	return outs[0]
}
