package mlx_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// BenchmarkWeightPath compares the two ways weights can reach MLX: its own
// safetensors loader (lazy, read on the current stream's device) and an
// array built from Go bytes (MLX copies host data; on CUDA it lands in
// managed memory). It reports the load time and the time of a matmul that
// reads the weight, which is what managed memory slows down.
func BenchmarkWeightPath(b *testing.B) {
	const n = 8192 // a [8192, 8192] bfloat16 weight: 128 MiB
	path := filepath.Join(b.TempDir(), "w.safetensors")
	mlxtest.Run(b, func(t *mlxtest.T) {
		w := mlx.RandomNormal(mlx.RandomKey(1), mlx.BFloat16, 0, 0.01, n, n)
		t.NoErr(mlx.SaveSafetensors(path, map[string]*mlx.Array{"w": w}, nil))
	})
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	data := raw[len(raw)-2*n*n:] // the tensor is the whole data section
	for _, p := range []struct {
		name string
		load func() (*mlx.Array, error)
	}{
		{"mlx-loader", func() (*mlx.Array, error) {
			m, err := mlx.LoadSafetensors(path)
			if err != nil {
				return nil, err
			}
			return m["w"], nil
		}},
		{"host-bytes", func() (*mlx.Array, error) { return mlx.FromBytes(data, mlx.BFloat16, n, n), nil }},
	} {
		b.Run(p.name, func(b *testing.B) {
			mlxtest.Run(b, func(t *mlxtest.T) {
				start := time.Now()
				w, err := p.load()
				t.NoErr(err)
				mlx.Pin(w)
				defer mlx.Free(w)
				t.Eval(w)
				load := time.Since(start)
				x := mlx.RandomNormal(mlx.RandomKey(2), mlx.BFloat16, 0, 1, 8, n)
				mlx.Pin(x)
				defer mlx.Free(x)
				t.Eval(mlx.Matmul(x, w)) // warm-up
				b.ResetTimer()
				for range b.N {
					t.Eval(mlx.Matmul(x, w))
					mlx.Sweep()
				}
				b.StopTimer()
				b.ReportMetric(float64(2*n*n)/load.Seconds()/1e9, "load-GB/s")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "matmul-µs")
			})
		})
	}
}
