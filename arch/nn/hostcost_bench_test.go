package nn

import (
	"fmt"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// BenchmarkNodeHostCost measures what one graph node costs the host, by the
// kind of node, on tensors so small (width 256) that the device's time is
// negligible: a chain of 128 nodes of one kind is built, submitted with
// AsyncEval and waited for, and the three times are reported per node
// (build-µs/node: constructing the nodes in Go and MLX; submit-µs/node:
// MLX's evaluation, i.e. eval_gpu and the CUDA graph's encoding; wait-µs/node:
// what is left on the device). The "compiled/" variants call the same chain
// as one mlx.Compiled function, as the model's segments do. Issue 19: a
// verification round costs the host 2-3x a decode step, and the kinds here
// are what a round has more of (cuBLAS products of 8 rows, our custom
// kernels) against what a step runs (MLX's gemv, its own primitives).
func BenchmarkNodeHostCost(b *testing.B) {
	const width, chain = 256, 128
	type kind struct {
		name string
		rows int
		node func(y, w, c, g *mlx.Array) *mlx.Array
	}
	kinds := []kind{
		{"add", 1, func(y, _, c, _ *mlx.Array) *mlx.Array { return mlx.Add(y, c) }},
		{"rmsnorm", 1, func(y, _, _, g *mlx.Array) *mlx.Array { return mlx.RMSNorm(y, g, 1e-6) }},
		{"addnorm-kernel", 1, func(y, _, c, g *mlx.Array) *mlx.Array {
			_, normed, ok := addRMSNormKernel(y, c, g, 1e-6)
			if !ok {
				panic("the add+norm kernel did not run")
			}
			return normed
		}},
		{"gemv-1row", 1, func(y, w, _, _ *mlx.Array) *mlx.Array { return mlx.Linear(y, w) }},
		{"rowsgemv-1row", 1, mustRowsGEMV},
		{"cublas-8rows", 8, func(y, w, _, _ *mlx.Array) *mlx.Array { return mlx.Linear(y, w) }},
		{"rowsgemv-8rows", 8, mustRowsGEMV},
	}
	for _, k := range kinds {
		for _, compiled := range []bool{false, true} {
			name := k.name
			if compiled {
				name = "compiled/" + name
			}
			b.Run(name, func(b *testing.B) {
				mlxtest.Run(b, func(t *mlxtest.T) {
					if !mlx.GPUAvailable() {
						t.Skip("measures MLX's CUDA backend")
					}
					dt := mlx.BFloat16
					x := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(1), mlx.Float32, 0, 1, 1, k.rows, width), dt)
					w := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(2), mlx.Float32, 0, 0.06, width, width), dt)
					c := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(3), mlx.Float32, 0, 0.01, 1, k.rows, width), dt)
					g := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(4), mlx.Float32, 1, 0.01, width), dt)
					mlx.Pin(x, w, c, g)
					defer mlx.Free(x, w, c, g)
					t.Eval(x, w, c, g)
					body := func(in []*mlx.Array) []*mlx.Array {
						y := in[0]
						for range chain {
							y = k.node(y, in[1], in[2], in[3])
						}
						return []*mlx.Array{y}
					}
					fn := mlx.Compile("hostcost-"+k.name, 1, body)
					defer fn.Free()
					var build, submit, wait time.Duration
					run := func() {
						t0 := time.Now()
						var out *mlx.Array
						if compiled {
							out = fn.Call(x, w, c, g)[0]
						} else {
							out = body([]*mlx.Array{x, w, c, g})[0]
						}
						t1 := time.Now()
						t.NoErr(mlx.AsyncEval(out))
						t2 := time.Now()
						t.NoErr(mlx.Eval(out))
						t3 := time.Now()
						mlx.Sweep()
						build += t1.Sub(t0)
						submit += t2.Sub(t1)
						wait += t3.Sub(t2)
					}
					for range 3 { // traces, JIT, cuBLAS heuristics, graph instantiation
						run()
					}
					build, submit, wait = 0, 0, 0
					b.ResetTimer()
					for range b.N {
						run()
					}
					b.StopTimer()
					per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*chain) }
					b.ReportMetric(per(build), "build-µs/node")
					b.ReportMetric(per(submit), "submit-µs/node")
					b.ReportMetric(per(wait), "wait-µs/node")
				})
			})
		}
	}
}

// mustRowsGEMV is y · wᵀ through the few-row kernel, which must run.
func mustRowsGEMV(y, w, _, _ *mlx.Array) *mlx.Array {
	out := rowsGEMV(y, w)
	if out == nil {
		panic(fmt.Sprintf("the few-row kernel did not take %v × %v", y.Shape(), w.Shape()))
	}
	return out
}
