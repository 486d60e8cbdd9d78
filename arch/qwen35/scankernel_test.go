package qwen35

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The one-launch CUDA scan equals the graph scan (the exact baseline), for
// the outputs and for every per-token state a verification snapshots. It
// needs the GPU of a CUDA build; docs/PERFORMANCE.md records where it ran.
func TestGatedDeltaKernelMatchesScan(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the gated-delta CUDA kernel needs the GPU of a CUDA build")
		}
		const L, hk, hv, dk, dv = 6, 2, 4, 64, 32
		key := func(i uint64) *mlx.Array { return mlx.RandomKey(i) }
		unit := func(a *mlx.Array) *mlx.Array { return mlx.MultiplyScalar(a, 1/math.Sqrt(float64(a.Dim(-1)))) }
		q := unit(mlx.RandomNormal(key(1), mlx.Float32, 0, 1, 1, L, hk, dk))
		k := unit(mlx.RandomNormal(key(2), mlx.Float32, 0, 1, 1, L, hk, dk))
		v := mlx.RandomNormal(key(3), mlx.Float32, 0, 1, 1, L, hv, dv)
		alpha := mlx.RandomUniform(key(4), mlx.Float32, 1, L, hv)
		beta := mlx.RandomUniform(key(5), mlx.Float32, 1, L, hv)
		state := mlx.RandomNormal(key(6), mlx.Float32, 0, 0.1, 1, hv, dv, dk)
		for _, bounds := range [][]int{{L}, {1, 2, 3, 4, 5, L}} {
			want, wantStates := gatedDeltaScan(repeatHeads(q, hv/hk), repeatHeads(k, hv/hk), v, alpha, beta, state, bounds)
			got, gotStates := gatedDeltaScanKernel(q, k, v, alpha, beta, state, bounds)
			if got == nil {
				t.Fatalf("the kernel did not launch")
			}
			assertClose(t, "outputs", t.Float32s(got), t.Float32s(want), 1e-5)
			for i := range bounds {
				assertClose(t, "state", t.Float32s(gotStates[i]), t.Float32s(wantStates[i]), 1e-5)
			}
		}
	})
}

func assertClose(t *mlxtest.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

// The CPU's one-node scan (mlx.GatedDeltaScan) equals the graph scan, the
// exact baseline, for the outputs and every per-token state a verification
// snapshots (the rollback points), at go-tiny's head layout (3 key heads
// shared by 6 value heads, Dk = Dv = 64) and with a verification-sized and a
// prefill-sized run. Tolerance 1e-5 relative, as for the CUDA kernel: both
// sum in float32, in different orders.
func TestGatedDeltaCPUScanMatchesScan(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			t.Skip("the one-node scan serves the CPU stream")
		}
		for _, L := range []int{8, 40} {
			const hk, hv, dk, dv = 3, 6, 64, 64
			key := func(i uint64) *mlx.Array { return mlx.RandomKey(uint64(L)*10 + i) }
			unit := func(a *mlx.Array) *mlx.Array { return mlx.MultiplyScalar(a, 1/math.Sqrt(float64(a.Dim(-1)))) }
			q := unit(mlx.RandomNormal(key(1), mlx.Float32, 0, 1, 1, L, hk, dk))
			k := unit(mlx.RandomNormal(key(2), mlx.Float32, 0, 1, 1, L, hk, dk))
			v := mlx.RandomNormal(key(3), mlx.Float32, 0, 1, 1, L, hv, dv)
			alpha := mlx.RandomUniform(key(4), mlx.Float32, 1, L, hv)
			beta := mlx.RandomUniform(key(5), mlx.Float32, 1, L, hv)
			state := mlx.RandomNormal(key(6), mlx.Float32, 0, 0.1, 1, hv, dv, dk)
			every := make([]int, L)
			for i := range every {
				every[i] = i + 1
			}
			for _, bounds := range [][]int{{L}, every} {
				want, wantStates := gatedDeltaScan(repeatHeads(q, hv/hk), repeatHeads(k, hv/hk), v, alpha, beta, state, bounds)
				got, gotStates := mlx.GatedDeltaScan(q, k, v, alpha, beta, state, bounds)
				assertClose(t, "outputs", t.Float32s(got), t.Float32s(want), 1e-5)
				for i := range bounds {
					assertClose(t, fmt.Sprintf("state after %d tokens", bounds[i]), t.Float32s(gotStates[i]), t.Float32s(wantStates[i]), 1e-5)
				}
			}
			mlx.Sweep()
		}
	})
}
