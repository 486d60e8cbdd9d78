package mlx_test

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// BenchmarkMatmul measures square matmul throughput on the current device
// (GPU when the build has one). It reports GFLOP/s; the timed loop evaluates
// one product per iteration on inputs evaluated beforehand.
func BenchmarkMatmul(b *testing.B) {
	for _, dt := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
		for _, n := range []int{256, 1024, 4096} {
			b.Run(fmt.Sprintf("%s/%d", dt, n), func(b *testing.B) {
				mlxtest.Run(b, func(t *mlxtest.T) {
					if !mlx.GPUAvailable() && (n > 1024 || (dt == mlx.BFloat16 && n > 256)) {
						// MLX's x86 CPU backend runs bf16 matmul as a scalar loop
						// (~90x slower than float32): minutes per iteration.
						t.Skip("too slow on the CPU backend")
					}
					x := mlx.RandomNormal(mlx.RandomKey(1), dt, 0, 1, n, n)
					y := mlx.RandomNormal(mlx.RandomKey(2), dt, 0, 1, n, n)
					mlx.Pin(x, y)
					defer mlx.Free(x, y)
					t.Eval(x, y)
					// The untimed first product is the warm-up (kernel
					// selection, JIT).
					t.BenchEvals(func() []*mlx.Array { return []*mlx.Array{mlx.Matmul(x, y)} })
					flops := 2 * float64(n) * float64(n) * float64(n) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			})
		}
	}
}

// BenchmarkGatedDeltaScan measures the CPU scan of one go-tiny delta-net
// layer (3 key and 6 value heads of 64) over a verification's 8 tokens with
// a state kept after each of them, and over a decode step's one token.
func BenchmarkGatedDeltaScan(b *testing.B) {
	for _, L := range []int{1, 8} {
		b.Run(fmt.Sprintf("L%d", L), func(b *testing.B) {
			mlxtest.Run(b, func(t *mlxtest.T) {
				if mlx.CurrentDevice() != mlx.CPU {
					t.Skip("the scan primitive runs on the CPU")
				}
				q, k, v, alpha, beta, state := gdnInputs(newRand(b), L, 3, 6, 64, 64)
				in := []*mlx.Array{q.mlx(), k.mlx(), v.mlx(), alpha.mlx(), beta.mlx(), state.mlx()}
				mlx.Pin(in...)
				defer mlx.Free(in...)
				t.Eval(in...)
				bounds := make([]int, L)
				for i := range bounds {
					bounds[i] = i + 1
				}
				t.BenchEvals(func() []*mlx.Array {
					out, states := mlx.GatedDeltaScan(in[0], in[1], in[2], in[3], in[4], in[5], bounds)
					return append(states, out)
				})
			})
		})
	}
}

// BenchmarkSDPACPU measures one go-tiny attention layer (6 query and 2 key
// heads of 64) over 256 cached keys on the CPU in float32: a decode step's
// one query and a verification's 4, causal, in the shim's form (SoftmaxCPU)
// and MLX's (its scalar-exp Softmax).
func BenchmarkSDPACPU(b *testing.B) {
	for _, lq := range []int{1, 4} {
		for _, form := range []string{"shim", "mlx"} {
			b.Run(fmt.Sprintf("Lq%d/%s", lq, form), func(b *testing.B) {
				mlxtest.Run(b, func(t *mlxtest.T) {
					if mlx.CurrentDevice() != mlx.CPU {
						t.Skip("SoftmaxCPU runs on the CPU")
					}
					r := newRand(b)
					in := []*mlx.Array{randTensor(r, 1, 6, lq, 64).mlx(), randTensor(r, 1, 2, 256, 64).mlx(), randTensor(r, 1, 2, 256, 64).mlx()}
					mlx.Pin(in...)
					defer mlx.Free(in...)
					t.Eval(in...)
					attend := mlx.ScaledDotProductAttention
					if form == "mlx" {
						attend = mlx.SDPAMLX
					}
					mask := mlx.AttentionMask{Causal: lq > 1}
					t.BenchEvals(func() []*mlx.Array {
						return []*mlx.Array{attend(in[0], in[1], in[2], 0.125, mask)}
					})
				})
			})
		}
	}
}
