package mlx

// Exposed to the package's external tests.
var (
	LastBLASThreads  = lastBLASThreads
	SmallRowProducts = smallRowProducts
	SharedProducts   = sharedProducts
)

// SDPAComposed is ScaledDotProductAttention in its matmul-and-softmax form
// (what a GPU runs for short half-precision query blocks), on any device.
func SDPAComposed(q, k, v *Array, scale float32, mask AttentionMask) *Array {
	return sdpa(q, k, v, scale, mask, sdpaComposed)
}

// SDPAMLX is ScaledDotProductAttention exactly as MLX computes it (on the
// CPU: MLX's composition with its scalar-exp softmax).
func SDPAMLX(q, k, v *Array, scale float32, mask AttentionMask) *Array {
	return sdpa(q, k, v, scale, mask, sdpaMLX)
}
