// Package qwen35 is the Qwen3.5 target architecture (spec/qwen35.md): a
// hybrid decoder in which three of every four layers are gated delta-nets
// (linear attention with a short causal convolution and a recurrent state)
// and every fourth is gated full attention. Only the text decoder is
// implemented; vision and multi-token-prediction weights are skipped.
//
// The package registers Qwen3_5ForCausalLM and
// Qwen3_5ForConditionalGeneration; a config.json with experts is refused
// under those names. The mixture-of-experts variants are arch/qwen35moe,
// which builds this package's hybrid decoder with its own MLP (NewHybrid,
// MLPBinder). A Model implements model.Model and model.DraftTarget.
//
// Files: config.go reads config.json; weights.go maps checkpoint tensors to
// the layers and absorbs every checkpoint quirk (prefixes, the (1+w) norm
// shift, conv layouts); this file holds the forward, the attention layers
// and the dense MLP; deltanet.go the gated delta-net.
package qwen35

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

func init() {
	for _, name := range []string{"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"} {
		registry.RegisterTarget(name, nil, New)
	}
}

// Model is a Qwen3.5 text decoder. Build it with New, then LoadWeights.
// Forward, Unembed and the DraftTarget methods must run on the MLX worker.
type Model struct {
	cfg    *Config
	local  *Config              // cfg with this rank's head counts and widths (cfg when whole)
	shard  *shard               // this rank's part; nil when the model is whole (shard.go)
	quant  *loader.Quantization // config.json's quantization section; nil when none
	dtype  mlx.DType            // compute dtype
	mlp    MLPBinder            // binds each layer's MLP
	rope   nn.RoPE
	w      *weights // nil until LoadWeights
	layout *Layout  // how the loaded checkpoint stores the model; nil until LoadWeights
	taps   []int    // ascending layer ids whose outputs Forward returns as aux
	// segs are the compiled segments of layers (segments.go; worker-owned);
	// segsStale says they were made for other taps and must be dropped.
	segs      *segments
	segsStale bool
}

var (
	_ model.DraftTarget  = (*Model)(nil)
	_ model.WeightHolder = (*Model)(nil)
)

// New parses the checkpoint's config.json (including an MLX quantization
// section) and returns a weightless model computing in cfg.DType (float32 on
// the CPU, bfloat16 on GPUs).
func New(rc registry.Config) (*Model, error) {
	cfg, err := ParseConfig(rc.JSON)
	if err != nil {
		return nil, err
	}
	quant, err := loader.ParseQuantization(filepath.Join(rc.Dir, "config.json"), rc.JSON)
	if err != nil {
		return nil, err
	}
	return NewHybrid(cfg, quant, rc.DType, DenseMLP(cfg))
}

// NewFromConfig returns a weightless dense model for a parsed config.
func NewFromConfig(cfg *Config, dtype mlx.DType) (*Model, error) {
	return NewHybrid(cfg, nil, dtype, DenseMLP(cfg))
}

// NewHybrid returns a weightless model of the hybrid decoder cfg describes
// whose layers' MLPs mlp binds (DenseMLP here; the sparse block of
// arch/qwen35moe), computing in dtype, for a checkpoint whose config.json
// has the quantization section quant (nil when none).
func NewHybrid(cfg *Config, quant *loader.Quantization, dtype mlx.DType, mlp MLPBinder) (*Model, error) {
	switch dtype {
	case mlx.Float32, mlx.BFloat16, mlx.Float16:
	default:
		return nil, fmt.Errorf("compute dtype %s is not supported: use float32, bfloat16 or float16", dtype)
	}
	return &Model{
		cfg:   cfg,
		local: cfg,
		quant: quant,
		dtype: dtype,
		mlp:   mlp,
		rope:  nn.RoPE{Dims: cfg.RopeDim(), Base: float32(cfg.RopeTheta)},
	}, nil
}

// MLP is the feed-forward block of a decoder layer: Forward maps the
// post-attention-normed residual stream x [1, L, H] to the block's output
// [1, L, H] as one lazy graph. Every row must depend on its own input row
// only: a verification forward of L rows has to equal L single-row ones.
type MLP interface {
	Forward(x *mlx.Array) *mlx.Array
}

// MLPBinder binds one layer's MLP from the checkpoint tensors under prefix
// (the layer's "…layers.3.mlp."), with b recording every problem and the
// arrays the model keeps. It returns nil when a part is missing or wrong.
type MLPBinder func(b *Binder, prefix string) MLP

// denseMLP is Qwen3.5's SwiGLU MLP.
type denseMLP struct {
	gateUp *nn.Linear // [2·I, H]: gate_proj, up_proj
	down   *nn.Linear // [H, I]
}

func (d *denseMLP) Forward(x *mlx.Array) *mlx.Array { return nn.SwiGLU(x, d.gateUp, d.down) }

// Config returns the model's configuration.
func (m *Model) Config() *Config { return m.cfg }

// Quantization returns config.json's quantization section, or nil when the
// checkpoint declares none.
func (m *Model) Quantization() *loader.Quantization { return m.quant }

// Layout says how the loaded checkpoint stores the model (nil before
// LoadWeights).
func (m *Model) Layout() *Layout { return m.layout }

// DType is the compute dtype.
func (m *Model) DType() mlx.DType { return m.dtype }

// Info returns the sizes a draft is checked against.
func (m *Model) Info() model.Info {
	return model.Info{HiddenSize: m.cfg.HiddenSize, VocabSize: m.cfg.VocabSize, NumLayers: m.cfg.NumLayers, ContextLength: m.cfg.MaxPositions}
}

// NumLayers is the number of decoder layers.
func (m *Model) NumLayers() int { return m.cfg.NumLayers }

// NewCaches returns one cache per layer: a growing KV cache for attention
// layers and a recurrent cache (conv tail in the compute dtype, float32 delta
// state) for delta-net layers, of this rank's heads when sharded.
func (m *Model) NewCaches() []cache.Cache {
	c := m.local
	out := make([]cache.Cache, c.NumLayers)
	for i := range out {
		if c.FullAttentionLayer(i) {
			out[i] = cache.NewKV()
			continue
		}
		out[i] = cache.NewRecurrent(cache.RecurrentShape{
			ConvRows:  c.ConvKernel - 1,
			ConvDim:   c.ConvDim(),
			ConvDType: m.dtype,
			Heads:     c.LinearValueHeads,
			ValueDim:  c.LinearValueDim,
			KeyDim:    c.LinearKeyDim,
		})
	}
	return out
}

// SetLayerTaps selects the layers whose outputs Forward returns as aux,
// concatenated in ascending order: transformers' hidden_states[i+1], the
// residual stream after layer i, before the final norm — except for the last
// layer, whose record is taken after it. ids must be strictly ascending and below NumLayers; an
// empty list clears the taps.
func (m *Model) SetLayerTaps(ids []int) error {
	for i, id := range ids {
		if id < 0 || id >= m.cfg.NumLayers {
			return fmt.Errorf("qwen35: layer tap %d is out of range: the model has %d layers (0 … %d)", id, m.cfg.NumLayers, m.cfg.NumLayers-1)
		}
		if i > 0 && id <= ids[i-1] {
			return fmt.Errorf("qwen35: layer taps %v must be strictly ascending and unique", ids)
		}
	}
	m.taps = slices.Clone(ids)
	m.segsStale = true // may run off the worker: the next Forward frees them
	return nil
}

// TokenEmbeddings looks up ids [B, L] in the embedding table: [B, L, H], no
// scaling.
func (m *Model) TokenEmbeddings(ids *mlx.Array) *mlx.Array {
	return m.mustWeights().embed.Lookup(ids)
}

// Unembed maps hidden states [B, L, H] (after the final norm) to logits
// [B, L, V].
func (m *Model) Unembed(hidden *mlx.Array) *mlx.Array {
	return m.mustWeights().head.Forward(hidden)
}

// RawLogits is the plain output head; for Qwen3.5 it equals Unembed.
func (m *Model) RawLogits(hidden *mlx.Array) *mlx.Array { return m.Unembed(hidden) }

func (m *Model) mustWeights() *weights {
	if m.w == nil {
		panic("qwen35: the model has no weights: call LoadWeights first")
	}
	return m.w
}

// Forward runs the decoder over b.InputIDs [1, L] at slots SeqOffsets[0] …
// SeqOffsets[0]+L−1, updating caches (from NewCaches), and returns the final
// hidden states [1, L, H] after the final norm and aux: the concatenated
// layer taps [1, L, nTaps·H] when taps are set, else the hidden states.
//
// It builds one lazy graph and never evaluates. Right padding is not
// supported: SeqQueryLens, when given, must equal L (it panics otherwise,
// as it does for B != 1, a wrong cache list, or SeqOffsets[0] differing
// from the caches' offset: these are programming errors).
func (m *Model) Forward(b *model.Batch, caches []cache.Cache) (hidden, aux *mlx.Array) {
	w := m.mustWeights()
	ids := b.InputIDs
	if ids == nil || ids.NDim() != 2 || ids.Dim(0) != 1 {
		panic(fmt.Sprintf("qwen35: Forward wants InputIDs [1, L], got %v", ids))
	}
	L := ids.Dim(1)
	if len(b.SeqQueryLens) > 0 && b.SeqQueryLens[0] != L {
		panic(fmt.Sprintf("qwen35: SeqQueryLens %v with %d rows: right padding is not supported; forward only the real rows", b.SeqQueryLens, L))
	}
	if len(caches) != m.cfg.NumLayers {
		panic(fmt.Sprintf("qwen35: Forward got %d caches for %d layers (use NewCaches)", len(caches), m.cfg.NumLayers))
	}
	offset := caches[0].Offset()
	if len(b.SeqOffsets) > 0 && b.SeqOffsets[0] != offset {
		panic(fmt.Sprintf("qwen35: Batch.SeqOffsets[0] = %d but the caches sit at offset %d", b.SeqOffsets[0], offset))
	}

	// Check every cache before touching any, so a misuse leaves them as
	// they were.
	for i, c := range caches {
		_, kv := c.(*cache.KV)
		_, rec := c.(*cache.Recurrent)
		if want := m.cfg.FullAttentionLayer(i); (want && !kv) || (!want && !rec) {
			panic(fmt.Sprintf("qwen35: layer %d (%s) got a %T cache (use NewCaches)", i, m.cfg.LayerTypes[i], c))
		}
		if c.Offset() != offset {
			panic(fmt.Sprintf("qwen35: layer %d's cache sits at offset %d but layer 0's at %d (a rollback missed some layers)", i, c.Offset(), offset))
		}
	}

	return m.forwardSegments(w.embed.Lookup(ids), offset, caches)
}

// The gated full-attention mixer (spec/qwen35.md section 6) of x [1, L, H]
// at slots offset … offset+L−1 runs in three parts, so that the parts
// around the cache can join the compiled segments of segments.go:
// attentionInputs (projections and norms), attentionCore (RoPE, the cache,
// attention) and attentionOutput (the output gate and o_proj).

// attentionInputs returns the normed queries q [1, L, Hq, D], keys k and
// values v [1, L, Hkv, D] of x, and the output gate [1, L, Hq, D].
func (m *Model) attentionInputs(a *attentionWeights, x *mlx.Array) (q, k, v, gate *mlx.Array) {
	cfg := m.local
	L, hq, hkv, d := x.Dim(1), cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	eps := cfg.RMSNormEps

	// One product for q_proj | k_proj | v_proj; q_proj gives per head
	// [query D | gate D] (interleaved per head).
	qkv := mlx.Split(a.qkv.Forward(x), -1, hq*2*d, hq*2*d+hkv*d)
	qg := mlx.Reshape(qkv[0], 1, L, hq, 2*d)
	parts := mlx.Split(qg, -1, d)
	q = nn.RMSNorm(parts[0], a.qNorm, eps)
	k = nn.RMSNorm(mlx.Reshape(qkv[1], 1, L, hkv, d), a.kNorm, eps)
	v = mlx.Reshape(qkv[2], 1, L, hkv, d)
	// The gate is the [1, L, Hq, D] view of q_proj itself.
	return q, k, v, parts[1]
}

// attentionCore rotates q and k to slots offset …, writes k and v to c and
// attends: it returns [1, L, Hq, D]. causal is the forward's shared mask
// (nn.CausalMask), or nil for the attention to make its own.
func (m *Model) attentionCore(q, k, v *mlx.Array, offset int, c *cache.KV, causal *mlx.Array) *mlx.Array {
	d := m.local.HeadDim
	q = m.rope.Apply(mlx.Transpose(q, 0, 2, 1, 3), offset)
	k = m.rope.Apply(mlx.Transpose(k, 0, 2, 1, 3), offset)
	v = mlx.Transpose(v, 0, 2, 1, 3)
	return nn.CachedAttentionRows(q, k, v, c, float32(1/math.Sqrt(float64(d))), causal)
}

// attentionOutput gates the attention output o [1, L, Hq, D] and projects
// it back to [1, L, H].
func (m *Model) attentionOutput(a *attentionWeights, o, gate *mlx.Array) *mlx.Array {
	cfg := m.local
	return a.o.Forward(mlx.Reshape(nn.SigmoidGate(o, gate), 1, o.Dim(1), cfg.NumHeads*cfg.HeadDim))
}
