package qwen35

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The one-launch CUDA scan equals the graph scan (the exact baseline), for
// the outputs and for every per-token state a verification snapshots, and
// for a write longer than maxEmitRows with interior bounds (which runs one
// launch per span). It needs the GPU of a CUDA build; docs/PERFORMANCE.md
// records where it ran.
func TestGatedDeltaKernelMatchesScan(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the gated-delta CUDA kernel needs the GPU of a CUDA build")
		}
		const hk, hv, dk, dv = 2, 4, 64, 32
		for _, L := range []int{6, maxEmitRows + 36} {
			q, k, v, alpha, beta, state := scanInputs(uint64(L), L, hk, hv, dk, dv)
			every := make([]int, L)
			for i := range every {
				every[i] = i + 1
			}
			for _, bounds := range [][]int{{L}, every, {1, L / 2, L/2 + 1, L}} {
				want, wantStates := gatedDeltaScan(repeatHeads(q, hv/hk), repeatHeads(k, hv/hk), v, alpha, beta, state, bounds)
				got, gotStates := gatedDeltaScanKernel(q, k, v, alpha, beta, state, bounds)
				if got == nil {
					t.Fatalf("the kernel did not launch")
				}
				assertClose(t, "outputs", t.Float32s(got), t.Float32s(want), 1e-5)
				for i := range bounds {
					assertClose(t, fmt.Sprintf("L=%d: state after %d tokens", L, bounds[i]), t.Float32s(gotStates[i]), t.Float32s(wantStates[i]), 1e-5)
				}
			}
			if L <= maxEmitRows {
				// The rows a verification's snapshots refer to.
				_, wantStates := gatedDeltaScan(repeatHeads(q, hv/hk), repeatHeads(k, hv/hk), v, alpha, beta, state, every)
				_, end, rows := gatedDeltaScanRows(q, k, v, alpha, beta, state, true)
				assertClose(t, "end state", t.Float32s(end), t.Float32s(wantStates[L-1]), 1e-5)
				for i := range L {
					assertClose(t, fmt.Sprintf("row %d of the states", i), t.Float32s(mlx.SliceAxis(rows, 0, i, i+1)), t.Float32s(wantStates[i]), 1e-5)
				}
			}
			mlx.Sweep()
		}
	})
}

// A long write with an interior bound — a prefill chunk holding a
// prompt-cache checkpoint — allocates the states it keeps, not one per row:
// at the 4B shapes (32 value heads, Dv = Dk = 128) 512 rows of states would
// be 1 GiB; the inputs, outputs and two states are about 40 MiB.
func TestGatedDeltaKernelLongWriteKeepsOnlyItsStates(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the gated-delta CUDA kernel needs the GPU of a CUDA build")
		}
		const L, hk, hv, dk, dv = 512, 16, 32, 128, 128
		q, k, v, alpha, beta, state := scanInputs(7, L, hk, hv, dk, dv)
		if err := mlx.Eval(q, k, v, alpha, beta, state); err != nil {
			t.Fatal(err)
		}
		mlx.ResetPeakMemory()
		before := mlx.ActiveMemory()
		out, states := gatedDeltaScanKernel(q, k, v, alpha, beta, state, []int{L / 2, L})
		if out == nil {
			t.Fatalf("the kernel did not launch")
		}
		if err := mlx.Eval(append(states, out)...); err != nil {
			t.Fatal(err)
		}
		const limit = 128 << 20
		if grew := mlx.PeakMemory() - before; grew > limit {
			t.Fatalf("a %d-row write with one interior bound took %d MiB at its peak, want under %d MiB (one state is %d MiB)",
				L, grew>>20, limit>>20, hv*dv*dk*4>>20)
		}
	})
}

// Running the scan span by span between the bounds (how the kernel runs a
// long write with interior bounds) gives the one scan's outputs and states
// to the bit: each span starts from the state the one before ended in. The
// graph scan stands in for the kernel, so this runs on any device.
func TestScanBySpansEqualsOneScan(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const L, hk, hv, dk, dv = 12, 2, 4, 32, 16
		q, k, v, alpha, beta, state := scanInputs(5, L, hk, hv, dk, dv)
		graph := func(q, k, v, alpha, beta, state *mlx.Array, bounds []int) (*mlx.Array, []*mlx.Array) {
			return gatedDeltaScan(repeatHeads(q, hv/hk), repeatHeads(k, hv/hk), v, alpha, beta, state, bounds)
		}
		oneSpan := func(q, k, v, alpha, beta, state *mlx.Array) (*mlx.Array, *mlx.Array) {
			out, states := graph(q, k, v, alpha, beta, state, []int{q.Dim(1)})
			return out, states[0]
		}
		for _, bounds := range [][]int{{5, L}, {1, 2, 7, 11}, {L}} {
			want, wantStates := graph(q, k, v, alpha, beta, state, bounds)
			got, gotStates := scanBySpans(q, k, v, alpha, beta, state, bounds, oneSpan)
			t.SameBits(fmt.Sprintf("outputs, bounds %v", bounds), t.Float32s(got), t.Float32s(want))
			if len(gotStates) != len(bounds) {
				t.Fatalf("bounds %v: %d states", bounds, len(gotStates))
			}
			for i := range bounds {
				t.SameBits(fmt.Sprintf("state after %d tokens", bounds[i]), t.Float32s(gotStates[i]), t.Float32s(wantStates[i]))
			}
		}
		failing := func(q, k, v, alpha, beta, state *mlx.Array) (*mlx.Array, *mlx.Array) { return nil, nil }
		if out, states := scanBySpans(q, k, v, alpha, beta, state, []int{5, L}, failing); out != nil || states != nil {
			t.Fatalf("a failed span gave outputs")
		}
	})
}

// scanInputs are random delta-rule inputs of L rows: unit-scale q and k
// [1, L, hk, dk], v [1, L, hv, dv], decay and write strength in (0, 1), a
// small initial state, all float32.
func scanInputs(seed uint64, L, hk, hv, dk, dv int) (q, k, v, alpha, beta, state *mlx.Array) {
	key := func(i uint64) *mlx.Array { return mlx.RandomKey(seed*10 + i) }
	unit := func(a *mlx.Array) *mlx.Array { return mlx.MultiplyScalar(a, 1/math.Sqrt(float64(a.Dim(-1)))) }
	q = unit(mlx.RandomNormal(key(1), mlx.Float32, 0, 1, 1, L, hk, dk))
	k = unit(mlx.RandomNormal(key(2), mlx.Float32, 0, 1, 1, L, hk, dk))
	v = mlx.RandomNormal(key(3), mlx.Float32, 0, 1, 1, L, hv, dv)
	alpha = mlx.RandomUniform(key(4), mlx.Float32, 1, L, hv)
	beta = mlx.RandomUniform(key(5), mlx.Float32, 1, L, hv)
	state = mlx.RandomNormal(key(6), mlx.Float32, 0, 0.1, 1, hv, dv, dk)
	return q, k, v, alpha, beta, state
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
			q, k, v, alpha, beta, state := scanInputs(uint64(L), L, hk, hv, dk, dv)
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
