package nn_test

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

const gatedNormEps = 1e-6

// gatedNormInputs returns a float32 x [1, L, H, D] (a delta-net's output),
// its gate z [1, L, H, D] in dtype, the same gate embedded as columns
// col … col+H·D of src [1, L, col+H·D+pad] (junk around it, as the stacked
// input projection holds it), and a norm weight [D] near 1.
func gatedNormInputs(dtype mlx.DType, L, h, d, col, pad int, seed uint64) (x, z, src, w *mlx.Array) {
	x = mlx.RandomNormal(mlx.RandomKey(seed), mlx.Float32, 0, 1, 1, L, h, d)
	z = mlx.RandomNormal(mlx.RandomKey(seed+1), dtype, 0, 2, 1, L, h, d)
	before := mlx.RandomNormal(mlx.RandomKey(seed+2), dtype, 0, 1, 1, L, col)
	after := mlx.RandomNormal(mlx.RandomKey(seed+3), dtype, 0, 1, 1, L, pad)
	src = mlx.Concatenate(2, before, mlx.Reshape(z, 1, L, h*d), after)
	w = mlx.RandomNormal(mlx.RandomKey(seed+4), dtype, 1, 0.1, d)
	return x, z, src, w
}

// Off the GPU (or with SPECULA_GATED_NORM=0) GatedRMSNormFrom is exactly
// GatedRMSNorm of the gate it names: the gate built on its own and the one
// read from the middle of a wider array give the same bits.
func TestGatedRMSNormFromFallback(t *testing.T) {
	runFallback(t, "SPECULA_GATED_NORM", "TestGatedRMSNormKernel", func(t *mlxtest.T, dt mlx.DType) {
		x, z, src, w := gatedNormInputs(dt, 3, 4, 128, 96, 40, 7)
		got := nn.GatedRMSNormFrom(x, src, 96, w, gatedNormEps, dt)
		t.Shape(got, 1, 3, 4, 128)
		t.SameBits(dt.String(), t.Float32s(got), t.Float32s(nn.GatedRMSNorm(x, z, w, gatedNormEps, dt)))
	})
}

// On the GPU of a CUDA build the one-kernel gated norm matches the two-kernel
// path (MLX's rms_norm, then its fused silu gate) within one rounding of the
// output dtype — it sums in MLX's order, so most values are bit-equal (the
// test logs how many are not) — and row r of an L-row call has exactly the
// bits of that row run alone.
func TestGatedRMSNormKernel(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the gated RMSNorm CUDA kernel needs the GPU of a CUDA build")
		}
		if !nn.GatedRMSNormFused() {
			t.Skip("the gated RMSNorm kernel is off (SPECULA_GATED_NORM=0 or the worker is not on the GPU)")
		}
		// Qwen3.5-4B (32 value heads of 128), 0.8B (16 of 128), a head of
		// 256 and one of 96 (a partial last chunk).
		shapes := [][2]int{{32, 128}, {16, 128}, {4, 256}, {3, 96}}
		for _, dt := range []mlx.DType{mlx.BFloat16, mlx.Float32} {
			tol := 1e-5
			if dt == mlx.BFloat16 {
				tol = 1.0 / 64
			}
			for _, hd := range shapes {
				h, d := hd[0], hd[1]
				for _, L := range []int{1, 5, 17} {
					name := fmt.Sprintf("%s L%d H%d D%d", dt, L, h, d)
					col := 3 * h * d
					x, z, src, w := gatedNormInputs(dt, L, h, d, col, 2*h+8, uint64(L*h*d))
					got := nn.GatedRMSNormFrom(x, src, col, w, gatedNormEps, dt)
					if !nn.GatedRMSNormFused() {
						t.Fatalf("%s: the kernel did not launch", name)
					}
					if got.DType() != dt {
						t.Fatalf("%s: dtype %s, want %s", name, got.DType(), dt)
					}
					t.Shape(got, 1, L, h, d)
					closeLoggingBits(t, name, t.Float32s(got), t.Float32s(nn.GatedRMSNorm(x, z, w, gatedNormEps, dt)), tol, 1e-6)
					if L == 1 {
						continue
					}
					for r := range L {
						xr, sr := mlx.SliceAxis(x, 1, r, r+1), mlx.SliceAxis(src, 1, r, r+1)
						one := nn.GatedRMSNormFrom(xr, sr, col, w, gatedNormEps, dt)
						t.SameBits(fmt.Sprintf("%s row %d", name, r), t.Float32s(one), t.Float32s(mlx.SliceAxis(got, 1, r, r+1)))
					}
				}
			}
		}
	})
}
