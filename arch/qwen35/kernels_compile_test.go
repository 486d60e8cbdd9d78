package qwen35

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// TestKernelsCompile compiles the delta-net's CUDA kernels with NVRTC, as
// MLX would compile them for the H100/H200, for the head counts and sizes
// of Qwen3.5's releases and the dtypes their launches take: a syntax or
// type error shows here, on a machine without a GPU, instead of on a lent
// device (where the kernel switch would quietly fall back to the graph).
func TestKernelsCompile(t *testing.T) {
	f32, bf16 := mlx.Float32, mlx.BFloat16
	// Key heads, value heads, key and value head size: 0.8B/4B and 27B.
	for _, h := range [][4]int{{16, 16, 128, 128}, {16, 32, 128, 128}, {16, 48, 128, 128}} {
		hk, hv, dk, dv := h[0], h[1], h[2], h[3]
		for _, emit := range []bool{false, true} {
			t.Run(fmt.Sprintf("gated_delta_scan/HV%d/emit=%v", hv, emit), func(t *testing.T) {
				mlxtest.CompileCUDA(t, gatedDeltaKernel, []mlx.DType{f32, f32, f32, f32, f32, f32}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{f32, f32},
					Templates: []mlx.KernelTemplate{
						{Name: "HV", Value: hv}, {Name: "HK", Value: hk}, {Name: "R", Value: hv / hk},
						{Name: "DK", Value: dk}, {Name: "DV", Value: dv}, {Name: "EMIT", Value: b2i(emit), Bool: true},
					},
					Block: [3]int{128, 1, 1},
				})
			})
		}
		// proj and the convolution tail in the compute dtype; the folded
		// decay rate in float32 or the compute dtype.
		for _, dts := range [][3]mlx.DType{{bf16, bf16, f32}, {bf16, bf16, bf16}, {f32, f32, f32}} {
			pt, wt, at := dts[0], dts[1], dts[2]
			t.Run(fmt.Sprintf("delta_prep/HV%d/%v-%v-%v", hv, pt, wt, at), func(t *testing.T) {
				mlxtest.CompileCUDA(t, deltaPrepKernel, []mlx.DType{pt, pt, wt, at, wt}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{f32, f32, f32, f32, f32, pt},
					Templates: []mlx.KernelTemplate{
						{Name: "HK", Value: hk}, {Name: "HV", Value: hv}, {Name: "DK", Value: dk}, {Name: "DV", Value: dv},
						{Name: "KC", Value: 4},
						{Name: "PT", Value: int(pt)}, {Name: "WT", Value: int(wt)}, {Name: "AT", Value: int(at)}, {Name: "BT", Value: int(wt)},
					},
					Block: [3]int{128, 1, 1},
				})
			})
			// The three as one launch: the projection's dtype is the
			// model's, the norm weight float32 (as the checkpoints load it).
			t.Run(fmt.Sprintf("delta_step/HV%d/%v-%v-%v", hv, pt, wt, at), func(t *testing.T) {
				// The gated norm's layout for a row of Dv float32 values
				// (nn's normLayout): 4 per read, 64 threads, one chunk.
				mlxtest.CompileCUDA(t, deltaStepKernel, []mlx.DType{pt, pt, wt, at, wt, f32, f32}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{pt, f32, pt},
					Templates: []mlx.KernelTemplate{
						{Name: "D", Value: dv}, {Name: "BLOCK", Value: 64}, {Name: "CHUNKS", Value: 1}, {Name: "NREADS", Value: 4},
						{Name: "EPS", Value: int(math.Float32bits(1e-6))},
						{Name: "HK", Value: hk}, {Name: "HV", Value: hv}, {Name: "DK", Value: dk}, {Name: "DV", Value: dv},
						{Name: "KC", Value: 4}, {Name: "NW", Value: deltaStepWarps},
						{Name: "PT", Value: int(pt)}, {Name: "WT", Value: int(wt)}, {Name: "AT", Value: int(at)}, {Name: "BT", Value: int(wt)},
						{Name: "NT", Value: int(f32)}, {Name: "OT", Value: int(pt)},
					},
					Block: [3]int{32 * deltaStepWarps, 1, 1},
				})
			})
		}
	}
}
