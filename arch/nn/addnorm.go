package nn

import (
	"math"
	"slices"

	"github.com/specula-dev/specula/mlx"
)

// addNormKernel is a residual add and the RMSNorm that reads its result as
// one CUDA launch. A decoder layer adds its mixer output to the residual
// stream and norms the sum (the post-mixer norm), then adds its MLP output
// and norms that (the next layer's input norm): on the GPU each add is a
// kernel of its own, two launches per layer that a decode step, bound by
// launch overhead, pays for nothing.
//
// It computes what mlx.Add then mlx.RMSNorm compute, step for step, so that
// the fused path changes no value. sum is h + x with the element type's own
// operator, as MLX's binary Add does (one rounding of the exact sum). normed
// follows MLX's CUDA rms_norm (mlx/backend/cuda/rms_norm.cu, 0.32): each
// thread accumulates the squares of the rounded sums in float32 over the
// same elements and in the same order as MLX's kernel (chunks of NREADS
// consecutive elements, BLOCK threads: the layout normLayout picks as MLX's
// dispatch does); the block reduces them as MLX's BlockBroadcastReduce does
// (in each warp a butterfly of xor shuffles from 16 down to 1, which is what
// cooperative_groups::reduce compiles to, then the same over the per-warp
// sums); and each output is w · T(float(s) · rsqrt(Σ/D + eps)), the product
// in the element type. One block owns one row, so a row's bits do not
// depend on how many rows run: a verification row equals the single-row
// step.
//
// eps reaches the body as its float32 bits (template constants are ints).
var addNormKernel = &mlx.CUDAKernel{
	Name:    "specula_add_rms_norm",
	Inputs:  []string{"h", "x", "w"},
	Outputs: []string{"sum", "normed"},
	Header:  blockSumHeader,
	Source: `
  using T = decltype(h[0] + x[0]);
  const size_t base = (size_t)blockIdx.x * D;
  const T* hr = h + base;
  const T* xr = x + base;
  T* sr = sum + base;
  T* nr = normed + base;
  T s[CHUNKS * NREADS];
  float acc = 0.f;
  // 16-byte loads and stores where every row pointer allows them; the
  // arithmetic, and so every bit, is the same either way.
  const bool vec = ((reinterpret_cast<unsigned long long>(hr) | reinterpret_cast<unsigned long long>(xr) |
                     reinterpret_cast<unsigned long long>(sr) | reinterpret_cast<unsigned long long>(nr) |
                     reinterpret_cast<unsigned long long>(w)) & 15) == 0;
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c0 = (BLOCK * i + (int)threadIdx.x) * NREADS;
    if (vec && c0 + NREADS <= D) {
      const uint4 hv = *reinterpret_cast<const uint4*>(hr + c0);
      const uint4 xv = *reinterpret_cast<const uint4*>(xr + c0);
      const T* hp = reinterpret_cast<const T*>(&hv);
      const T* xp = reinterpret_cast<const T*>(&xv);
      uint4 sv;
      T* sp = reinterpret_cast<T*>(&sv);
#pragma unroll
      for (int j = 0; j < NREADS; ++j) {
        sp[j] = hp[j] + xp[j];
        s[i * NREADS + j] = sp[j];
        const float t = static_cast<float>(sp[j]);
        acc += t * t;
      }
      *reinterpret_cast<uint4*>(sr + c0) = sv;
      continue;
    }
#pragma unroll
    for (int j = 0; j < NREADS; ++j) {
      const int c = (BLOCK * i + (int)threadIdx.x) * NREADS + j;
      if (c < D) {
        s[i * NREADS + j] = hr[c] + xr[c];
        sr[c] = s[i * NREADS + j];
        const float t = static_cast<float>(s[i * NREADS + j]);
        acc += t * t;
      }
    }
  }
  acc = specula_block_sum<BLOCK>(acc);
  const float inv = rsqrtf(__fdiv_rn(acc, (float)D) + __int_as_float(EPS));
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int c0 = (BLOCK * i + (int)threadIdx.x) * NREADS;
    if (vec && c0 + NREADS <= D) {
      const uint4 wv = *reinterpret_cast<const uint4*>(w + c0);
      const T* wp = reinterpret_cast<const T*>(&wv);
      uint4 nv;
      T* np = reinterpret_cast<T*>(&nv);
#pragma unroll
      for (int j = 0; j < NREADS; ++j) np[j] = wp[j] * static_cast<T>(static_cast<float>(s[i * NREADS + j]) * inv);
      *reinterpret_cast<uint4*>(nr + c0) = nv;
      continue;
    }
#pragma unroll
    for (int j = 0; j < NREADS; ++j) {
      const int c = (BLOCK * i + (int)threadIdx.x) * NREADS + j;
      if (c < D) {
        const float y = static_cast<float>(s[i * NREADS + j]) * inv;
        nr[c] = w[c] * static_cast<T>(y);
      }
    }
  }
`,
}

// blockSumHeader is CUDA shared by the norm kernels: specula_block_sum
// returns the sum of v over the first BLOCK threads of the block, in the
// order of MLX's rms_norm (its BlockBroadcastReduce): in each warp a
// butterfly of xor shuffles from 16 down to 1, then the same over the
// per-warp sums, which every thread receives. Every thread of the block
// calls it (it synchronises the block); in a block wider than BLOCK (a
// kernel that ends in a norm, qwen35's delta-net step) the threads past
// BLOCK pass 0 and write nothing. Its shared memory is reused by the next
// call only after a __syncthreads of the caller's.
const blockSumHeader = `
template <int BLOCK>
__device__ __forceinline__ float specula_block_sum(float v) {
  __shared__ float partial[BLOCK / 32];
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0 && (int)(threadIdx.x >> 5) < BLOCK / 32) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < BLOCK / 32 ? partial[lane] : 0.f;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
`

// normLayout is how MLX's CUDA RMSNorm (RMSNorm::eval_gpu and
// dispatch_num_chunks in mlx/backend/cuda/rms_norm.cu) splits a row of d
// elements of size bytes: vectors of nreads elements (16 bytes), block
// threads, and chunks vectors per thread, vector i*block+t to thread t.
// The fused kernel takes the same split so that it sums the squares in
// MLX's order. block is at least 64 (two warps).
func normLayout(d, size int) (nreads, block, chunks int) {
	nreads = 16 / size
	nvec := (d + nreads - 1) / nreads
	switch {
	case d > nreads*128*8:
		return nreads, 1024, (d + 1024*nreads - 1) / (1024 * nreads)
	case d <= nreads*64:
		return nreads, 64, 1
	case nvec%128 == 0 && nvec/128 <= 8:
		return nreads, 128, nvec / 128
	case nvec%64 == 0 && nvec/64 <= 8:
		return nreads, 64, nvec / 64
	default:
		return nreads, 128, (nvec + 127) / 128
	}
}

// AddRMSNorm returns sum = h + x and normed = RMSNorm(sum, w, eps): a
// residual add and the norm that reads its result. On the GPU it is one
// launch (addNormKernel) with the values of the two ops; elsewhere, with
// SPECULA_ADD_NORM=0, for shapes or dtypes the kernel does not take, or
// once a launch has failed, it is mlx.Add then RMSNorm.
func AddRMSNorm(h, x, w *mlx.Array, eps float32) (sum, normed *mlx.Array) {
	if fitsAddNorm(h, x, w, eps) {
		if sum, normed, ok := addRMSNormKernel(h, x, w, eps); ok {
			return sum, normed
		}
	}
	sum = mlx.Add(h, x)
	return sum, RMSNorm(sum, w, eps)
}

// AddRMSNormFused reports whether AddRMSNorm launches its kernel (for the
// shapes it takes): on the GPU of a CUDA build, unless SPECULA_ADD_NORM=0
// turns it off (to measure or to compare) or a launch has failed. Whoever
// keeps traced graphs keys them on it: the choice changes the graph.
func AddRMSNormFused() bool { return addNormSwitch.On() }

// fitsAddNorm reports whether the kernel can run on these operands: h and x
// of one float dtype and shape, w of that dtype and of the last dimension
// (MLX's RMSNorm would promote a w of another dtype; the kernel does not),
// and a positive eps (its bits, a template constant, then name the kernel
// with a non-negative int, as MLX's kernel names need).
func fitsAddNorm(h, x, w *mlx.Array, eps float32) bool {
	if !AddRMSNormFused() || w == nil || !(eps > 0) {
		return false
	}
	dt := h.DType()
	return KernelFloat(dt) && x.DType() == dt && w.DType() == dt && h.NDim() >= 1 && h.Size() > 0 &&
		slices.Equal(h.Shape(), x.Shape()) && w.NDim() == 1 && w.Dim(0) == h.Dim(-1)
}

var addNormSwitch = NewKernelSwitch("SPECULA_ADD_NORM", "nn: the add+RMSNorm CUDA kernel failed; using Add then RMSNorm")

// addRMSNormKernel launches addNormKernel, one block per row; ok is false
// when the launch failed.
func addRMSNormKernel(h, x, w *mlx.Array, eps float32) (sum, normed *mlx.Array, ok bool) {
	d := h.Dim(-1)
	rows := h.Size() / d
	nreads, block, chunks := normLayout(d, h.DType().Size())
	outs, err := addNormKernel.Run([]*mlx.Array{h, x, w}, mlx.KernelLaunch{
		OutputShapes: [][]int{h.Shape(), h.Shape()},
		OutputDTypes: []mlx.DType{h.DType(), h.DType()},
		Grid:         [3]int{rows * block, 1, 1},
		Block:        [3]int{block, 1, 1},
		Templates: []mlx.KernelTemplate{
			{Name: "D", Value: d}, {Name: "BLOCK", Value: block}, {Name: "CHUNKS", Value: chunks},
			{Name: "NREADS", Value: nreads}, {Name: "EPS", Value: int(math.Float32bits(eps))},
		},
	})
	if err != nil {
		addNormSwitch.Fail(err)
		return nil, nil, false
	}
	return outs[0], outs[1], true
}
