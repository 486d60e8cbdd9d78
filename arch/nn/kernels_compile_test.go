package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// TestKernelsCompile compiles every CUDA kernel of the package with NVRTC,
// as MLX would compile it for the H100/H200, for the dtypes and template
// constants the launches use on Qwen3.5's shapes: a kernel's syntax or type
// error shows here, on a machine without a GPU, instead of on a lent device
// (where the kernel switch would quietly fall back to MLX's ops). The
// launches that give their block size are also checked against the SM's
// registers.
func TestKernelsCompile(t *testing.T) {
	bf16, f32 := mlx.BFloat16, mlx.Float32
	for _, nt := range []int{1, 2, 3} {
		for _, warps := range []int{8, 16} {
			t.Run(fmt.Sprintf("rows_gemv/NT%d/WARPS%d", nt, warps), func(t *testing.T) {
				mlxtest.CompileCUDA(t, rowsGEMVKernel, []mlx.DType{bf16, bf16}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{bf16},
					Templates:    []mlx.KernelTemplate{{Name: "NT", Value: nt}, {Name: "WARPS", Value: warps}, {Name: "U", Value: gemvUnroll}},
					Block:        [3]int{32 * warps, 1, 1},
				})
			})
		}
	}
	for _, rt := range []int{8, 16, 24} {
		t.Run(fmt.Sprintf("rows_gemv_f32/RT%d", rt), func(t *testing.T) {
			mlxtest.CompileCUDA(t, rowsGEMVF32Kernel, []mlx.DType{f32, f32}, mlx.KernelLaunch{
				OutputDTypes: []mlx.DType{f32},
				Templates:    []mlx.KernelTemplate{{Name: "RT", Value: rt}, {Name: "WARPS", Value: gemvF32Warps}},
				Block:        [3]int{32 * gemvF32Warps, 1, 1},
			})
		})
	}
	// Attention of a few rows: heads of 64, 128 and 256 (Qwen3.5's), in
	// every float dtype; the merge writes the queries' dtype.
	f16 := mlx.Float16
	for _, dt := range []mlx.DType{bf16, f16, f32} {
		for _, d := range []int{64, 128, 256} {
			t.Run(fmt.Sprintf("rows_attention/%v/D%d", dt, d), func(t *testing.T) {
				mlxtest.CompileCUDA(t, rowsAttentionPartKernel, []mlx.DType{dt, dt, dt}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{f32},
					Templates: []mlx.KernelTemplate{
						{Name: "D", Value: d}, {Name: "R", Value: 4}, {Name: "NW", Value: rowsAttentionWarps},
						{Name: "C", Value: rowsAttentionChunk}, {Name: "SCALE", Value: int(math.Float32bits(0.0625))},
					},
					Block: [3]int{32 * rowsAttentionWarps, 1, 1},
				})
				mlxtest.CompileCUDA(t, rowsAttentionMergeKernel, []mlx.DType{f32}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{dt},
					Templates:    []mlx.KernelTemplate{{Name: "D", Value: d}, {Name: "OT", Value: int(dt)}},
					Block:        [3]int{32, 1, 1},
				})
			})
		}
	}
	eps := int(math.Float32bits(1e-6))
	for _, dt := range []mlx.DType{bf16, f32} {
		// The hidden sizes of Qwen3.5 0.8B, 4B and 27B, and a small one.
		for _, d := range []int{256, 1024, 2560, 5120} {
			t.Run(fmt.Sprintf("add_rms_norm/%v/D%d", dt, d), func(t *testing.T) {
				nreads, block, chunks := normLayout(d, dt.Size())
				mlxtest.CompileCUDA(t, addNormKernel, []mlx.DType{dt, dt, dt}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{dt, dt},
					Templates: []mlx.KernelTemplate{
						{Name: "D", Value: d}, {Name: "BLOCK", Value: block}, {Name: "CHUNKS", Value: chunks},
						{Name: "NREADS", Value: nreads}, {Name: "EPS", Value: eps},
					},
				})
			})
		}
		// The delta-net's gated norm: 128 per head, 16 or 32 value heads.
		for _, h := range []int{16, 32} {
			t.Run(fmt.Sprintf("gated_rms_norm/%v/H%d", dt, h), func(t *testing.T) {
				d := 128
				nreads, block, chunks := normLayout(d, f32.Size())
				mlxtest.CompileCUDA(t, gatedNormKernel, []mlx.DType{f32, dt, dt}, mlx.KernelLaunch{
					OutputDTypes: []mlx.DType{dt},
					Templates: []mlx.KernelTemplate{
						{Name: "D", Value: d}, {Name: "H", Value: h}, {Name: "COL", Value: 3 * h * d},
						{Name: "BLOCK", Value: block}, {Name: "CHUNKS", Value: chunks}, {Name: "NREADS", Value: nreads},
						{Name: "EPS", Value: eps},
						{Name: "XT", Value: int(f32)}, {Name: "ST", Value: int(dt)}, {Name: "WT", Value: int(dt)}, {Name: "OT", Value: int(dt)},
					},
				})
			})
		}
	}
}
