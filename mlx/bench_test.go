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
					t.Eval(mlx.Matmul(x, y)) // warm-up (kernel selection, JIT)
					b.ResetTimer()
					for range b.N {
						if err := mlx.Eval(mlx.Matmul(x, y)); err != nil {
							b.Fatal(err)
						}
						mlx.Sweep()
					}
					b.StopTimer()
					flops := 2 * float64(n) * float64(n) * float64(n) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			})
		}
	}
}
