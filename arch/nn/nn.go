// Package nn holds the layer maths that architectures share: dense or
// quantized linear layers and embeddings (and their binding from checkpoint
// tensors), RMS norms, rotary position embeddings, the SwiGLU MLP and
// attention over a KV or rotating cache.
//
// Functions build lazy MLX graph nodes and never evaluate. Weights are
// stored [out, in]. Attention tensors use MLX's layout [B, H, L, D]; the
// residual stream is [B, L, H·D]. Functions take plain weights: checkpoint
// conventions such as Qwen3.5's zero-centred (1 + w) norms are folded into
// the weight by the architecture's loader, so one RMSNorm serves every
// architecture.
package nn

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
)

// RMSNorm returns x · rsqrt(mean(x²) + eps) · w over the last axis (MLX's
// fused kernel, which accumulates in float32). w may be nil (no weight).
func RMSNorm(x, w *mlx.Array, eps float32) *mlx.Array { return mlx.RMSNorm(x, w, eps) }

// GatedRMSNorm returns RMSNorm(x, w) · silu(gate) over the last axis with
// every step in float32, cast to dtype at the end. It is the output norm of
// gated linear-attention layers. Everything after the norm's own kernel runs
// as one fused kernel (see compiledGatedNorm).
func GatedRMSNorm(x, gate, w *mlx.Array, eps float32, dtype mlx.DType) *mlx.Array {
	if mlx.CurrentDevice() == mlx.CPU && dtype == mlx.Float32 && x.DType() == mlx.Float32 && gate.DType() == mlx.Float32 &&
		w.DType() == mlx.Float32 && slices.Equal(x.Shape(), gate.Shape()) {
		// The same values in two nodes: the norm, then the shim's
		// vectorised silu(gate) ⊙ y where it serves (the CPU).
		if y, ok := mlx.SigmoidMulCPU(gate, mlx.RMSNorm(x, w, eps), true); ok {
			return y
		}
	}
	return compiledGatedNorm(eps, dtype).Call(x, gate, w)[0]
}

// gatedNormKey names one compiled gated norm: the epsilon and the output
// dtype are fixed at its first trace.
type gatedNormKey struct {
	eps   float32
	dtype mlx.DType
}

var (
	gatedNormMu sync.Mutex
	gatedNorms  = map[gatedNormKey]*mlx.Compiled{}
)

func compiledGatedNorm(eps float32, dtype mlx.DType) *mlx.Compiled {
	gatedNormMu.Lock()
	defer gatedNormMu.Unlock()
	key := gatedNormKey{eps, dtype}
	if f, ok := gatedNorms[key]; ok {
		return f
	}
	f := mlx.Compile("gated_rms_norm", 1, func(in []*mlx.Array) []*mlx.Array {
		x, gate, w := in[0], in[1], in[2]
		y := mlx.RMSNorm(f32(x), f32(w), eps)
		return []*mlx.Array{cast(mlx.Multiply(y, mlx.Silu(f32(gate))), dtype)}
	})
	gatedNorms[key] = f
	return f
}

// L2Norm returns x · rsqrt(Σ x² + eps) over the last axis, in x's dtype
// (the form of Hugging Face's l2norm, used on linear-attention q and k),
// times scale. It runs as MLX's fused RMSNorm with a constant weight: with D
// features, rms_norm(x, eps/D) = x · rsqrt(Σ x²/D + eps/D) = √D · l2(x), so
// l2(x)·scale = rms_norm(x, eps/D) · scale/√D, and the factor scale/√D is the
// norm's weight — one kernel, the same value.
func L2Norm(x *mlx.Array, eps float32, scale float64) *mlx.Array {
	d := x.Dim(-1)
	w := mlx.Constant(scale/math.Sqrt(float64(d)), x.DType(), d)
	return mlx.RMSNorm(x, w, eps/float32(d))
}

// SiLUMul returns silu(a) ⊙ b as one fused kernel: the activation of gated
// MLPs. On the CPU in float32 that is the shim's vectorised kernel (MLX's
// compiled one is scalar there), with the same values.
func SiLUMul(a, b *mlx.Array) *mlx.Array {
	if y, ok := mlx.SigmoidMulCPU(a, b, true); ok {
		return y
	}
	return siluMul.Call(a, b)[0]
}

var siluMul = mlx.Compile("silu_mul", 1, func(in []*mlx.Array) []*mlx.Array {
	return []*mlx.Array{mlx.Multiply(mlx.Silu(in[0]), in[1])}
})

// SigmoidGate returns x ⊙ σ(gate) as one fused kernel: the output gate of
// gated attention (on the CPU in float32, the shim's vectorised kernel, as
// for SiLUMul).
func SigmoidGate(x, gate *mlx.Array) *mlx.Array {
	if y, ok := mlx.SigmoidMulCPU(x, gate, false); ok {
		return y
	}
	return sigmoidGate.Call(x, gate)[0]
}

var sigmoidGate = mlx.Compile("sigmoid_gate", 1, func(in []*mlx.Array) []*mlx.Array {
	return []*mlx.Array{mlx.Multiply(in[0], mlx.Sigmoid(in[1]))}
})

// SwiGLU returns down(silu(gate(x)) ⊙ up(x)), the MLP of Llama-style
// decoders. gateUp holds the gate and up projections stacked (ConcatLinear,
// gate first): one product instead of two, which matters when decoding one
// token is bound by kernel launches.
func SwiGLU(x *mlx.Array, gateUp, down *Linear) *mlx.Array {
	gu := gateUp.Forward(x)
	parts := mlx.Split(gu, -1, gu.Dim(-1)/2)
	return down.Forward(SiLUMul(parts[0], parts[1]))
}

// f32 casts a to float32 (a itself when it already is).
func f32(a *mlx.Array) *mlx.Array { return cast(a, mlx.Float32) }

// cast casts a to dtype (a itself when it already is).
func cast(a *mlx.Array, dtype mlx.DType) *mlx.Array {
	if a.DType() == dtype {
		return a
	}
	return mlx.AsType(a, dtype)
}

// RoPE is a rotary position embedding over the first Dims features of each
// head (the rest pass through), with inverse frequencies
// Base^(−2j/Dims), j = 0 … Dims/2−1.
type RoPE struct {
	// Dims is the number of rotated features (even, at most the head size).
	Dims int
	// Base is θ.
	Base float32
	// Traditional pairs adjacent features (2j, 2j+1); otherwise feature j
	// pairs with j + Dims/2 (rotate-half, "neox").
	Traditional bool
}

// Apply rotates x [B, H, L, D] for positions offset … offset+L−1.
func (r RoPE) Apply(x *mlx.Array, offset int) *mlx.Array {
	return mlx.RoPE(x, r.Dims, r.Traditional, r.Base, 1, offset)
}

// SplitHeads reshapes x [B, L, heads·dim] to [B, heads, L, dim].
func SplitHeads(x *mlx.Array, heads, dim int) *mlx.Array {
	return mlx.Transpose(mlx.Reshape(x, x.Dim(0), x.Dim(1), heads, dim), 0, 2, 1, 3)
}

// MergeHeads reshapes x [B, H, L, D] to [B, L, H·D].
func MergeHeads(x *mlx.Array) *mlx.Array {
	return mlx.Reshape(mlx.Transpose(x, 0, 2, 1, 3), x.Dim(0), x.Dim(2), x.Dim(1)*x.Dim(3))
}

// CachedAttention writes k and v [B, Hkv, L, D] to c and attends q
// [B, Hq, L, D] over the whole history with scale, causally when L > 1 (row
// i sees slots up to Offset+i). Hq may be a multiple of Hkv (grouped-query
// attention). It returns [B, Hq, L, D]. causal is CausalMask(L, c.Offset())
// made once for a forward's attention layers, or nil for the attention to
// make its own.
func CachedAttention(q, k, v *mlx.Array, c *cache.KV, scale float32, causal *mlx.Array) *mlx.Array {
	kh, vh := c.Update(k, v)
	return attend(q, kh, vh, scale, causal)
}

// CachedAttentionRows is CachedAttention with the output in the layout an
// output projection reads, [B, L, Hq, D]: on the GPU, for the few rows of a
// step or a verification, RowsAttention's two launches (unless
// SPECULA_ROWS_ATTENTION=0), else CachedAttention's result transposed.
// causal must be nil or CausalMask(L, the cache's offset before the write).
func CachedAttentionRows(q, k, v *mlx.Array, c *cache.KV, scale float32, causal *mlx.Array) *mlx.Array {
	kh, vh := c.Update(k, v)
	if o := RowsAttention(q, kh, vh, scale); o != nil {
		checkCausal(q, kh, causal)
		return o
	}
	return mlx.Transpose(attend(q, kh, vh, scale, causal), 0, 2, 1, 3)
}

// attend is CachedAttention's attention of q over the history kh, vh.
func attend(q, kh, vh *mlx.Array, scale float32, causal *mlx.Array) *mlx.Array {
	if causal == nil {
		return mlx.ScaledDotProductAttention(q, kh, vh, scale, mlx.AttentionMask{Causal: q.Dim(2) > 1})
	}
	checkCausal(q, kh, causal)
	return mlx.ScaledDotProductAttention(q, kh, vh, scale, mlx.AttentionMask{Array: causal})
}

// checkCausal panics unless causal is nil or spans q's rows and kh's slots.
func checkCausal(q, kh, causal *mlx.Array) {
	if causal != nil && (causal.Dim(0) != q.Dim(2) || causal.Dim(1) != kh.Dim(2)) {
		panic(fmt.Sprintf("nn: CachedAttention got a causal mask %v for %d queries over %d slots (make it with CausalMask(L, the cache's offset before the write))",
			causal.Shape(), q.Dim(2), kh.Dim(2)))
	}
}

// CausalMask is the boolean mask [L, offset+L] of an L-row block written at
// slot offset: row i keeps slots up to offset+i, the mask that a causal
// ScaledDotProductAttention makes for itself. A forward that attends in many
// layers makes it once and hands it to each (CachedAttention): on the GPU a
// verification's block attention is composed of graph nodes, and the mask
// alone is five of them a layer.
func CausalMask(L, offset int) *mlx.Array {
	return mlx.Tri(L, offset+L, offset, mlx.Bool)
}

// WindowMask returns the boolean mask [L, N] of L queries at slots
// queryStart … queryStart+L−1 over keys at keySlots (as returned by
// cache.Rotating.Update): query P may see key slot s iff s >= P−window+1 and,
// when causal, s <= P.
func WindowMask(keySlots []int, queryStart, L, window int, causal bool) *mlx.Array {
	if window <= 0 {
		panic(fmt.Sprintf("nn: WindowMask with window %d", window))
	}
	allow := make([]bool, 0, L*len(keySlots))
	for i := range L {
		p := queryStart + i
		for _, s := range keySlots {
			allow = append(allow, s >= p-window+1 && (!causal || s <= p))
		}
	}
	return mlx.FromBools(allow, L, len(keySlots))
}
