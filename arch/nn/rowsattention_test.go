package nn_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// attentionInputs returns q [1, hq, L, D] and the history k, v [1, hkv, T,
// D] as views of longer buffers (as a cache hands them over), in dt.
func attentionInputs(dt mlx.DType, hq, hkv, L, T, d int, seed uint64) (q, k, v *mlx.Array) {
	key := func(i uint64) *mlx.Array { return mlx.RandomKey(seed*10 + i) }
	q = mlx.AsType(mlx.RandomNormal(key(1), mlx.Float32, 0, 1, 1, hq, L, d), dt)
	kb := mlx.AsType(mlx.RandomNormal(key(2), mlx.Float32, 0, 1, 1, hkv, T+7, d), dt)
	vb := mlx.AsType(mlx.RandomNormal(key(3), mlx.Float32, 0, 1, 1, hkv, T+7, d), dt)
	return q, mlx.SliceAxis(kb, 2, 0, T), mlx.SliceAxis(vb, 2, 0, T)
}

// The few-row attention equals MLX's attention computed in float32 with
// the causal mask of the last L rows (the reference), for one row and
// several, grouped and ungrouped heads, heads of 64 and 256, histories of
// one chunk and of several (the chunk is 256 keys), in float32 (within
// float32 rounding: 2e-5 of each row's largest output) and bfloat16 (the
// inputs rounded, the sums in float32: within one bfloat16 rounding).
func TestRowsAttentionMatchesTheReference(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the few-row attention CUDA kernels need the GPU of a CUDA build")
		}
		seed := uint64(0)
		for _, dt := range []mlx.DType{mlx.Float32, mlx.BFloat16} {
			tol := 2e-5
			if dt == mlx.BFloat16 {
				tol = 1.0 / 128
			}
			for _, d := range []int{64, 256} {
				for _, heads := range [][2]int{{8, 2}, {4, 4}} {
					for _, L := range []int{1, 3, 8} {
						for _, T := range []int{L, 100, 700} {
							seed++
							name := fmt.Sprintf("%v D%d Hq%d Hkv%d L%d T%d", dt, d, heads[0], heads[1], L, T)
							q, k, v := attentionInputs(dt, heads[0], heads[1], L, T, d, seed)
							scale := float32(1 / math.Sqrt(float64(d)))
							got := nn.RowsAttention(q, k, v, scale)
							if got == nil {
								t.Fatalf("%s: the kernels did not run", name)
							}
							t.Shape(got, 1, L, heads[0], d)
							if got.DType() != dt {
								t.Fatalf("%s: output %v, want %v", name, got.DType(), dt)
							}
							f32 := func(a *mlx.Array) *mlx.Array { return mlx.AsType(a, mlx.Float32) }
							want := mlx.ScaledDotProductAttention(f32(q), f32(k), f32(v), scale, mlx.AttentionMask{Array: nn.CausalMask(L, T-L)})
							want = mlx.Transpose(want, 0, 2, 1, 3)
							t.NearPerGroup(name, t.Float32s(got), t.Float32s(want), d, tol)
							mlx.Sweep()
						}
					}
				}
			}
		}
	})
}

// A row's output does not depend on how many rows run: a verification of 8
// rows over a history of two chunks gives, row for row, the bits of the
// decode steps at the same positions (each over the history up to its own
// slot). Exact speculative decoding in bfloat16 relies on it.
func TestRowsAttentionRowsIndependentOfL(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the few-row attention CUDA kernels need the GPU of a CUDA build")
		}
		const hq, hkv, L, T, d = 16, 4, 8, 300, 256
		for _, dt := range []mlx.DType{mlx.BFloat16, mlx.Float32} {
			q, k, v := attentionInputs(dt, hq, hkv, L, T, d, 900+uint64(dt))
			all := nn.RowsAttention(q, k, v, 0.0625)
			if all == nil {
				t.Fatalf("the kernels did not run")
			}
			for i := range L {
				end := T - L + i + 1
				one := nn.RowsAttention(mlx.SliceAxis(q, 2, i, i+1), mlx.SliceAxis(k, 2, 0, end), mlx.SliceAxis(v, 2, 0, end), 0.0625)
				if one == nil {
					t.Fatalf("the kernels did not run")
				}
				t.SameBits(fmt.Sprintf("%v row %d", dt, i), t.Float32s(one), t.Float32s(mlx.SliceAxis(all, 1, i, i+1)))
			}
			mlx.Sweep()
		}
	})
}

// Off the GPU, or with SPECULA_ROWS_ATTENTION=0, RowsAttention declines
// (and CachedAttentionRows runs MLX's attention).
func TestRowsAttentionDeclinesWhenOff(t *testing.T) {
	t.Setenv("SPECULA_ROWS_ATTENTION", "0")
	mlxtest.Run(t, func(t *mlxtest.T) {
		q, k, v := attentionInputs(mlx.Float32, 4, 2, 3, 10, 64, 7)
		if o := nn.RowsAttention(q, k, v, 0.125); o != nil {
			t.Fatalf("RowsAttention ran with SPECULA_ROWS_ATTENTION=0")
		}
	})
}
