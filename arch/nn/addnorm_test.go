package nn_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// addNormInputs returns a residual stream h and an update x [1, rows, d]
// and a norm weight [d] near 1, as a decoder's norms have, in dtype.
func addNormInputs(dtype mlx.DType, rows, d int, seed uint64) (h, x, w *mlx.Array) {
	h = mlx.RandomNormal(mlx.RandomKey(seed), dtype, 0, 1, 1, rows, d)
	x = mlx.RandomNormal(mlx.RandomKey(seed+1), dtype, 0, 1, 1, rows, d)
	w = mlx.RandomNormal(mlx.RandomKey(seed+2), dtype, 1, 0.1, d)
	return h, x, w
}

const addNormEps = 1e-6

// The fused CUDA kernel's sum is mlx.Add's bit for bit, its norm is
// mlx.RMSNorm's of that sum, and a row's bits do not depend on the rows
// around it. It needs the GPU of a CUDA build.
//
// The kernel sums the squares in the order of MLX's own rms_norm kernel, so
// the norm is expected to be bit-exact too (the test logs any value that is
// not). The tolerance asserted is what a different summation order could
// cost: the float32 normaliser moves by a few float32 ulps, which can move
// the rounding of x·rsqrt to the dtype by one ulp, and the product with w,
// rounded again, by at most two ulps of the result: 2⁻⁶ relative in
// bfloat16 (8 significant bits), 1e-5 in float32.
func TestAddRMSNormKernel(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the add+RMSNorm CUDA kernel needs the GPU of a CUDA build")
		}
		if !nn.AddRMSNormFused() {
			t.Skip("the add+RMSNorm kernel is off (SPECULA_ADD_NORM=0 or the worker is not on the GPU)")
		}
		for _, dt := range []mlx.DType{mlx.BFloat16, mlx.Float32} {
			tol := 1e-5
			if dt == mlx.BFloat16 {
				tol = 1.0 / 64
			}
			for _, d := range []int{2560, 4096, 1000} {
				for _, rows := range []int{1, 3, 8, 17} {
					name := fmt.Sprintf("%s %dx%d", dt, rows, d)
					h, x, w := addNormInputs(dt, rows, d, uint64(rows*d))
					sum, normed := nn.AddRMSNorm(h, x, w, addNormEps)
					if !nn.AddRMSNormFused() {
						t.Fatalf("%s: the kernel did not launch", name)
					}
					if sum.DType() != dt || normed.DType() != dt {
						t.Fatalf("%s: dtypes %s, %s, want %s", name, sum.DType(), normed.DType(), dt)
					}
					t.Shape(sum, 1, rows, d)
					t.Shape(normed, 1, rows, d)
					wantSum := mlx.Add(h, x)
					t.SameBits(name+" sum", t.Float32s(sum), t.Float32s(wantSum))
					closeLoggingBits(t, name+" normed", t.Float32s(normed), t.Float32s(mlx.RMSNorm(wantSum, w, addNormEps)), tol, 0)
				}
			}
			// Row r of an 8-row call is the same row run alone.
			const rows, d = 8, 2560
			h, x, w := addNormInputs(dt, rows, d, 99)
			sum, normed := nn.AddRMSNorm(h, x, w, addNormEps)
			for r := range rows {
				name := fmt.Sprintf("%s row %d of %d", dt, r, rows)
				hr, xr := mlx.SliceAxis(h, 1, r, r+1), mlx.SliceAxis(x, 1, r, r+1)
				s1, n1 := nn.AddRMSNorm(hr, xr, w, addNormEps)
				t.SameBits(name+" sum", t.Float32s(s1), t.Float32s(mlx.SliceAxis(sum, 1, r, r+1)))
				t.SameBits(name+" normed", t.Float32s(n1), t.Float32s(mlx.SliceAxis(normed, 1, r, r+1)))
			}
		}
	})
}

// The fallback, what runs on the CPU and wherever the kernel does not, is
// mlx.Add then RMSNorm exactly: the forward's values off the GPU rest on it.
// With SPECULA_ADD_NORM=0 it is checked on any device, without it on the
// CPU.
func TestAddRMSNormFallback(t *testing.T) {
	runFallback(t, "SPECULA_ADD_NORM", "TestAddRMSNormKernel", func(t *mlxtest.T, dt mlx.DType) {
		for _, d := range []int{1000, 2560} {
			name := fmt.Sprintf("%s 3x%d", dt, d)
			h, x, w := addNormInputs(dt, 3, d, uint64(d))
			sum, normed := nn.AddRMSNorm(h, x, w, addNormEps)
			wantSum := mlx.Add(h, x)
			t.SameBits(name+" sum", t.Float32s(sum), t.Float32s(wantSum))
			t.SameBits(name+" normed", t.Float32s(normed), t.Float32s(nn.RMSNorm(wantSum, w, addNormEps)))
		}
	})
}

// closeLoggingBits fails unless every got[i] is within rtol·|want[i]| + atol
// of want[i], and logs how many are not bit-equal: a fused kernel built to
// MLX's order is expected to match bit for bit, and the log shows where it
// does not.
func closeLoggingBits(t *mlxtest.T, what string, got, want []float32, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	off := 0
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			off++
		}
		if e := math.Abs(float64(got[i] - want[i])); e > rtol*math.Abs(float64(want[i]))+atol {
			t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
	if off > 0 {
		t.Logf("%s: %d of %d values differ from the reference's bits (within tolerance)", what, off, len(got))
	}
}

// runFallback runs check for bfloat16 and float32 on a fused kernel's
// fallback path: with the kernel's switch env set to 0 on any device, and
// without it where the kernel does not run (the CPU; on the GPU that case
// is kernelTest's and skips here).
func runFallback(t *testing.T, env, kernelTest string, check func(t *mlxtest.T, dt mlx.DType)) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(tt *testing.T) {
			if off {
				tt.Setenv(env, "0")
			}
			mlxtest.Run(tt, func(t *mlxtest.T) {
				if !off && mlx.CurrentDevice() != mlx.CPU {
					t.Skip("on the GPU the kernel runs (" + kernelTest + ")")
				}
				for _, dt := range []mlx.DType{mlx.BFloat16, mlx.Float32} {
					check(t, dt)
				}
			})
		})
	}
}
