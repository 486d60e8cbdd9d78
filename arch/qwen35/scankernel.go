package qwen35

import (
	"os"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
)

// gatedDeltaKernel runs the whole gated-delta scan of one layer as one CUDA
// launch (spec/mlx.md 8.3: MLX has no kernel for it outside Metal); on the
// CPU the same job is one primitive of the shim (mlx.GatedDeltaScan). The
// graph scan issues about seven kernels per token per layer, which bounds a
// verification forward by launch overhead on the GPU.
//
// One warp owns one row i of one value head's state S [Dv, Dk]: the rows
// evolve independently given k, q, α, β and v_i, so each lane keeps Dk/32
// entries of its row in registers for all T tokens, and the two dot products
// per token are warp reductions. With EMIT the state after every token is
// written (a verification's per-token snapshots); without it only the last.
var gatedDeltaKernel = &mlx.CUDAKernel{
	Name:    "specula_gated_delta_scan",
	Inputs:  []string{"q", "k", "v", "a", "b", "s0"},
	Outputs: []string{"o", "st"},
	Header:  deltaRowHeader,
	Source: `
  const int T = q_shape[1];
  const int lane = threadIdx.x & 31;
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (row >= HV * DV) return;
  const int h = row / DV;
  const int i = row - h * DV;
  const int hk = h / R;
  constexpr int PER = DK / 32;
  float s[PER];
  const float* s0row = s0 + ((size_t)h * DV + i) * DK;
#pragma unroll
  for (int j = 0; j < PER; ++j) s[j] = s0row[lane + 32 * j];
  for (int t = 0; t < T; ++t) {
    const float ov = specula_delta_row<PER>(s, k + ((size_t)t * HK + hk) * DK, q + ((size_t)t * HK + hk) * DK,
                                            a[(size_t)t * HV + h], b[(size_t)t * HV + h], v[((size_t)t * HV + h) * DV + i]);
    if (lane == 0) o[((size_t)t * HV + h) * DV + i] = ov;
    if (EMIT) {
      float* dst = st + (((size_t)t * HV + h) * DV + i) * DK;
#pragma unroll
      for (int j = 0; j < PER; ++j) dst[lane + 32 * j] = s[j];
    }
  }
  if (!EMIT) {
    float* dst = st + ((size_t)h * DV + i) * DK;
#pragma unroll
    for (int j = 0; j < PER; ++j) dst[lane + 32 * j] = s[j];
  }
`,
}

// deltaRowHeader is the CUDA of one token of the gated delta rule for one
// row of a value head's state (gatedDeltaKernel, and the one-launch step
// deltaStepKernel): specula_delta_row(s, k, q, α, β, v_i) takes the row's
// entries this lane holds (lane + 32·j), updates them —
// S ← α·S; δ ← β·(v_i − S·k); S ← S + δ·k — and returns the row's output
// S·q to every lane; the two dot products are warp reductions.
// Every product and sum is rounded as written (__fmul_rn, __fmaf_rn): left
// to the compiler, contraction into FMAs may differ between the kernels
// that inline it, and the step's bits would then differ from the scan's.
const deltaRowHeader = `
template <int PER>
__device__ __forceinline__ float specula_delta_row(float (&s)[PER], const float* kt, const float* qt, float at, float bt, float vi) {
  const int lane = threadIdx.x & 31;
  float kk[PER];
  float kv = 0.f;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    kk[j] = kt[lane + 32 * j];
    s[j] = __fmul_rn(s[j], at);
    kv = __fmaf_rn(s[j], kk[j], kv);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) kv += __shfl_xor_sync(0xffffffffu, kv, off);
  const float d = __fmul_rn(bt, __fsub_rn(vi, kv));
  float ov = 0.f;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    s[j] = __fmaf_rn(d, kk[j], s[j]);
    ov = __fmaf_rn(s[j], qt[lane + 32 * j], ov);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ov += __shfl_xor_sync(0xffffffffu, ov, off);
  return ov;
}
`

// useScanKernel reports whether the kernel can run: on the GPU of a CUDA
// build, with Dk a multiple of the warp size. SPECULA_GDN_KERNEL=0 turns it
// off (to measure or to compare against the graph scan).
func useScanKernel(dk int) bool {
	return dk%32 == 0 && scanSwitch.On()
}

// useCPUScan reports whether the CPU's one-node scan (mlx.GatedDeltaScan)
// can run: on the CPU, with every input float32 (the delta-net computes
// them so; the graph scan serves anything else). SPECULA_GDN_KERNEL=0 turns
// it off as it does the CUDA kernel.
func useCPUScan(inputs ...*mlx.Array) bool {
	if mlx.CurrentDevice() != mlx.CPU || os.Getenv("SPECULA_GDN_KERNEL") == "0" {
		return false
	}
	for _, a := range inputs {
		if a.DType() != mlx.Float32 {
			return false
		}
	}
	return true
}

var scanSwitch = nn.NewKernelSwitch("SPECULA_GDN_KERNEL", "qwen35: the gated-delta CUDA kernel failed; using the graph scan")

// gatedDeltaScanKernel is gatedDeltaScan as one launch. q, k [1, L, Hk, Dk]
// (not repeated per value head), v [1, L, Hv, Dv], alpha and beta
// [1, L, Hv], state [1, Hv, Dv, Dk], all float32. It returns the outputs
// [1, L, Hv, Dv] and the states at bounds, or nil outputs when the launch
// failed (the caller then runs the graph scan).
func gatedDeltaScanKernel(q, k, v, alpha, beta, state *mlx.Array, bounds []int) (*mlx.Array, []*mlx.Array) {
	L := q.Dim(1)
	emit := len(bounds) > 1 || bounds[0] != L
	if emit && L > maxEmitRows {
		return gatedDeltaScanKernelSpans(q, k, v, alpha, beta, state, bounds)
	}
	out, end, rows := gatedDeltaScanRows(q, k, v, alpha, beta, state, emit)
	if out == nil {
		return nil, nil
	}
	if !emit {
		return out, []*mlx.Array{end}
	}
	states := make([]*mlx.Array, len(bounds))
	for i, b := range bounds {
		states[i] = mlx.SliceAxis(rows, 0, b-1, b)
	}
	return out, states
}

// gatedDeltaScanRows is the launch behind gatedDeltaScanKernel, over the
// same inputs. It returns the outputs [1, L, Hv, Dv], the state after the
// last row and, when emit, the state after every row [L, Hv, Dv, Dk] (which
// the end state is a row of), or nil outputs when the launch failed.
func gatedDeltaScanRows(q, k, v, alpha, beta, state *mlx.Array, emit bool) (out, end, rows *mlx.Array) {
	L, hk, dk := q.Dim(1), q.Dim(2), q.Dim(3)
	hv, dv := v.Dim(2), v.Dim(3)
	stRows := 1
	if emit {
		stRows = L
	}
	// The operands go in the shapes the layer has them, [1, L, …] (the
	// kernel indexes them flat): a reshape would be one more graph node per
	// operand for MLX to process at every step (issue 19).
	outs, err := gatedDeltaKernel.Run([]*mlx.Array{q, k, v, alpha, beta, state}, mlx.KernelLaunch{
		OutputShapes: [][]int{{1, L, hv, dv}, {stRows, hv, dv, dk}},
		OutputDTypes: []mlx.DType{mlx.Float32, mlx.Float32},
		Grid:         [3]int{32 * hv * dv, 1, 1},
		Block:        [3]int{128, 1, 1},
		Templates: []mlx.KernelTemplate{
			{Name: "HV", Value: hv}, {Name: "HK", Value: hk}, {Name: "R", Value: hv / hk},
			{Name: "DK", Value: dk}, {Name: "DV", Value: dv}, {Name: "EMIT", Value: b2i(emit), Bool: true},
		},
	})
	if err != nil {
		scanSwitch.Fail(err)
		return nil, nil, nil
	}
	if !emit {
		return outs[0], outs[1], nil
	}
	return outs[0], mlx.SliceAxis(outs[1], 0, L-1, L), outs[1]
}

// maxEmitRows bounds the rows whose states one launch writes out. Each is
// Hv·Dv·Dk float32 — 2 MB at the 4B shapes, 3 MB at 27B — so a long write
// with an interior bound (a prefill chunk holding a prompt-cache
// checkpoint) would allocate gigabytes a layer to keep one or two states.
// A verification's rows (up to 17 with DFlash's blocks) stay far below.
const maxEmitRows = 64

// gatedDeltaScanKernelSpans is gatedDeltaScanKernel for a long write with
// interior bounds: one launch per span between bounds (scanBySpans), so
// that only the states asked for are allocated.
func gatedDeltaScanKernelSpans(q, k, v, alpha, beta, state *mlx.Array, bounds []int) (*mlx.Array, []*mlx.Array) {
	return scanBySpans(q, k, v, alpha, beta, state, bounds, func(q, k, v, alpha, beta, state *mlx.Array) (*mlx.Array, *mlx.Array) {
		out, states := gatedDeltaScanKernel(q, k, v, alpha, beta, state, []int{q.Dim(1)})
		if out == nil {
			return nil, nil
		}
		return out, states[0]
	})
}

// scanBySpans runs the delta rule over the spans between bounds with scan,
// which returns a span's outputs and its end state (nil outputs: failed),
// each span starting from the state the one before ended in. It returns the
// outputs of all L rows and the states at bounds, or nils if a span failed.
// A span's inputs are slices of rows along axis 1 (views).
func scanBySpans(q, k, v, alpha, beta, state *mlx.Array, bounds []int, scan func(q, k, v, alpha, beta, state *mlx.Array) (out, end *mlx.Array)) (*mlx.Array, []*mlx.Array) {
	L := q.Dim(1)
	var outs, states []*mlx.Array
	from := 0
	run := func(to int) bool {
		if to == from {
			return true
		}
		span := func(a *mlx.Array) *mlx.Array { return mlx.SliceAxis(a, 1, from, to) }
		o, end := scan(span(q), span(k), span(v), span(alpha), span(beta), state)
		if o == nil {
			return false
		}
		outs, state, from = append(outs, o), end, to
		return true
	}
	for _, b := range bounds {
		if !run(b) {
			return nil, nil
		}
		states = append(states, state)
	}
	if !run(L) {
		return nil, nil
	}
	return mlx.Concatenate(1, outs...), states
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
