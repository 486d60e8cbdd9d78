package mlx

import "os"

// MLX's CUDA matmuls round float32 operands to TF32 (a 10-bit mantissa)
// unless MLX_ENABLE_TF32=0, which MLX reads once, at the first matmul. A
// user who asks specula for float32 asks for float32 arithmetic: with TF32 a
// verification of k rows and a decode step of one row round differently, and
// a speculative run can then leave the plain run's tokens where two logits
// nearly tie (the random-weight demo on an H200 did). So, as PyTorch does by
// default, specula turns TF32 off unless the environment says otherwise
// (MLX_ENABLE_TF32=1 for TF32's speed). It changes nothing on the CPU and
// nothing in bfloat16.
func init() {
	if _, set := os.LookupEnv("MLX_ENABLE_TF32"); !set {
		os.Setenv("MLX_ENABLE_TF32", "0")
	}
}
