// Package dflash is the DFlash block-diffusion draft (spec/dflash.md): a
// small Qwen3-style decoder stack that fills a block of mask positions in one
// forward, conditioned on hidden states tapped from the target and injected
// as extra keys and values in every layer. It owns no embedding table and no
// output head; it borrows its target's (model.DraftTarget).
//
// The package registers DFlashDraftModel with the capabilities draft and
// block-draft. Package dflash2 builds DFlash2 on the same layers through a
// Wrapper around each sublayer and WeightSpec / Bind / UseWeights.
//
// Files: config.go reads config.json (both schemas); weights.go names the
// tensors and absorbs checkpoint quirks; mask.go holds the attention
// visibility rule; this file the forward.
package dflash

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

// ArchName is the architecture name DFlash checkpoints give in
// config.json's architectures[0].
const ArchName = "DFlashDraftModel"

func init() {
	registry.RegisterDraft(ArchName, nil, New)
}

// Draft is a DFlash draft. Build it with New, attach it to its target with
// AttachTarget, then LoadWeights. Forward and Unembed must run on the MLX
// worker.
type Draft struct {
	cfg    *Config
	quant  *loader.Quantization // config.json's quantization section; nil when none
	dtype  mlx.DType
	rope   nn.RoPE
	wrap   Wrapper           // plainSublayers for DFlash itself
	target model.DraftTarget // set by AttachTarget
	w      *weights          // nil until LoadWeights
	// trace, when set (tests), sees the residual stream of the block rows
	// after each layer.
	trace func(layer int, h *mlx.Array)
}

var (
	_ model.BlockDraft         = (*Draft)(nil)
	_ model.BidirectionalBlock = (*Draft)(nil)
	_ model.TargetUser         = (*Draft)(nil)
	_ model.WeightHolder       = (*Draft)(nil)
)

// Wrapper lets an architecture built on DFlash wrap the two sublayers of
// every layer (DFlash2 puts its dynamic convolutions around them). x is the
// sublayer's normed input [1, L, H] (block rows only); the sublayer function
// maps its input to its output (attention after o_proj, or the MLP), and the
// result is what gets added to the residual stream. DFlash itself behaves as
// the identity wrapper: f(x).
type Wrapper interface {
	WrapAttention(layer int, x *mlx.Array, attention func(*mlx.Array) *mlx.Array) *mlx.Array
	WrapMLP(layer int, x *mlx.Array, mlp func(*mlx.Array) *mlx.Array) *mlx.Array
}

// plainSublayers is DFlash's own Wrapper: each sublayer as it is.
type plainSublayers struct{}

func (plainSublayers) WrapAttention(_ int, x *mlx.Array, attention func(*mlx.Array) *mlx.Array) *mlx.Array {
	return attention(x)
}

func (plainSublayers) WrapMLP(_ int, x *mlx.Array, mlp func(*mlx.Array) *mlx.Array) *mlx.Array {
	return mlp(x)
}

// New parses the checkpoint's config.json and returns a weightless draft
// computing in rc.DType (float32 on the CPU, bfloat16 on GPUs).
func New(rc registry.Config) (*Draft, error) {
	cfg, err := ParseConfig(rc.JSON)
	if err != nil {
		return nil, err
	}
	d, err := NewFromConfig(cfg, rc.DType, nil)
	if err != nil {
		return nil, err
	}
	return d, d.ReadQuantization(rc)
}

// NewFromConfig returns a weightless draft for a parsed config whose
// sublayers are wrapped by wrap (nil for plain DFlash).
func NewFromConfig(cfg *Config, dtype mlx.DType, wrap Wrapper) (*Draft, error) {
	switch dtype {
	case mlx.Float32, mlx.BFloat16, mlx.Float16:
	default:
		return nil, fmt.Errorf("compute dtype %s is not supported: use float32, bfloat16 or float16", dtype)
	}
	if wrap == nil {
		wrap = plainSublayers{}
	}
	return &Draft{
		cfg:   cfg,
		dtype: dtype,
		rope:  nn.RoPE{Dims: cfg.HeadDim, Base: float32(cfg.RopeTheta), Traditional: cfg.RopeInterleaved},
		wrap:  wrap,
	}, nil
}

// Config returns the draft's configuration.
func (d *Draft) Config() *Config { return d.cfg }

// ReadQuantization reads the quantization section of rc's config.json (an
// MLX-format quantized draft), used by LoadWeights; a checkpoint without
// one keeps every layer dense.
func (d *Draft) ReadQuantization(rc registry.Config) error {
	q, err := loader.ParseQuantization(filepath.Join(rc.Dir, "config.json"), rc.JSON)
	if err != nil {
		return err
	}
	d.quant = q
	return nil
}

// Quantization returns config.json's quantization section, or nil.
func (d *Draft) Quantization() *loader.Quantization { return d.quant }

// DType is the compute dtype.
func (d *Draft) DType() mlx.DType { return d.dtype }

// Target is the target given to AttachTarget (nil before).
func (d *Draft) Target() model.DraftTarget { return d.target }

// Info returns the draft's sizes; VocabSize is 0 when config.json does not
// give it.
func (d *Draft) Info() model.Info {
	return model.Info{HiddenSize: d.cfg.HiddenSize, VocabSize: d.cfg.VocabSize, NumLayers: d.cfg.NumLayers}
}

// BlockParams returns the trained block size and the mask token.
func (d *Draft) BlockParams() (blockSize int, maskToken int32) {
	return d.cfg.BlockSize, d.cfg.MaskTokenID
}

// BidirectionalBlock reports whether some layer's block queries are
// non-causal (spec/dflash.md section 6): such a draft was trained on whole
// blocks attending both ways and is run on the whole block whatever the
// depth (model.BidirectionalBlock). DFlash2 inherits it.
func (d *Draft) BidirectionalBlock() bool {
	for l := range d.cfg.NumLayers {
		if _, causal := d.cfg.Attention(l); !causal {
			return true
		}
	}
	return false
}

// AsDraftTarget returns m as a model.DraftTarget, or the error of
// spec/dflash.md 3.2 rule 1 naming m's type.
func AsDraftTarget(m model.Model) (model.DraftTarget, error) {
	t, ok := m.(model.DraftTarget)
	if !ok || m == nil {
		return nil, fmt.Errorf("dflash draft needs a target with the draft-target capability; %T does not provide it", m)
	}
	return t, nil
}

// AttachTarget checks the draft against its target (spec/dflash.md 3.2) —
// hidden size, vocabulary, mask token, tap ids, target depth — then sets the
// target's layer taps and keeps the target for the embeddings and the head.
// It reads only sizes, so the target may still be weightless. Every problem
// is reported at once.
func (d *Draft) AttachTarget(t model.DraftTarget) error {
	if t == nil {
		return fmt.Errorf("dflash draft needs a target with the draft-target capability; <nil> does not provide it")
	}
	c, ti, layers := d.cfg, t.Info(), t.NumLayers()
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.HiddenSize != ti.HiddenSize {
		bad("hidden_size %d differs from the target's hidden size %d (the draft embeds with the target's table)", c.HiddenSize, ti.HiddenSize)
	}
	if c.VocabSize > 0 && c.VocabSize != ti.VocabSize {
		bad("vocab_size %d differs from the target's vocabulary %d (the draft uses the target's head)", c.VocabSize, ti.VocabSize)
	}
	if c.MaskTokenID < 0 || int(c.MaskTokenID) >= ti.VocabSize {
		bad("dflash_config.mask_token_id %d is outside the target's vocabulary [0, %d)", c.MaskTokenID, ti.VocabSize)
	}
	if p := tapProblem(c.TargetLayerIDs, layers); p != "" {
		bad("dflash_config.target_layer_ids %v %s", c.TargetLayerIDs, p)
	}
	if c.NumTargetLayers > 0 && c.NumTargetLayers != layers {
		bad("num_target_layers %d differs from the target's %d layers (the draft was trained on another target)", c.NumTargetLayers, layers)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	if err := t.SetLayerTaps(c.TargetLayerIDs); err != nil {
		return fmt.Errorf("setting the target's layer taps %v: %w", c.TargetLayerIDs, err)
	}
	d.target = t
	return nil
}

// tapProblem says what is wrong with tap ids for a target of the given
// depth, or "" (spec/dflash.md 3.2 rule 5).
func tapProblem(ids []int, layers int) string {
	if len(ids) == 0 {
		return "is empty; it must list the target layers the draft was trained on"
	}
	for i, id := range ids {
		switch {
		case id < 0:
			return fmt.Sprintf("has the negative id %d", id)
		case i > 0 && id <= ids[i-1]:
			return fmt.Sprintf("must be strictly ascending (%d follows %d)", id, ids[i-1])
		}
	}
	if last := ids[len(ids)-1]; last >= layers {
		return fmt.Sprintf("has tap %d, which is not below the target's %d layers", last, layers)
	}
	return ""
}

// NewCaches returns one cache per draft layer: a KV cache for full layers, a
// rotating cache with window sliding_window for sliding layers.
func (d *Draft) NewCaches() []cache.Cache {
	out := make([]cache.Cache, d.cfg.NumLayers)
	for l := range out {
		if w, _ := d.cfg.Attention(l); w > 0 {
			out[l] = cache.NewRotating(w)
		} else {
			out[l] = cache.NewKV()
		}
	}
	return out
}

// Unembed maps draft hidden states [B, L, H] to logits [B, L, V]:
// softcap(output_multiplier · target.RawLogits(h)) with softcap(x) =
// c·tanh(x/c), both identity for Qwen drafts.
func (d *Draft) Unembed(hidden *mlx.Array) *mlx.Array {
	logits := d.mustTarget().RawLogits(hidden)
	if m := d.cfg.OutputMultiplier; m != 1 {
		logits = mlx.MultiplyScalar(logits, m)
	}
	if c := d.cfg.FinalLogitSoftcap; c > 0 {
		logits = mlx.MultiplyScalar(mlx.Tanh(mlx.MultiplyScalar(logits, 1/c)), c)
	}
	return logits
}

func (d *Draft) mustTarget() model.DraftTarget {
	if d.target == nil {
		panic("dflash: the draft has no target: call AttachTarget first")
	}
	return d.target
}

// Forward writes the context rows b.Hidden [1, C, F] (slots s0 … s0+C−1,
// s0 = SeqOffsets[0]) and the block b.InputIDs [1, Lb] (slots s0+C …) into
// the draft caches, one update per layer with the context rows first, and
// returns the block's final-normed hidden states [1, Lb, H] twice (hidden =
// aux); row i predicts the token at its own slot. A context-only call (no
// InputIDs) returns nil, nil; a block-only call (no Hidden) attends to the
// context already cached. targetCaches is unused.
//
// Misuse is a broken protocol, so it panics: caches not from NewCaches, a
// cache offset other than s0, feature rows of the wrong width, or right
// padding (SeqQueryLens differing from Lb).
func (d *Draft) Forward(b *model.Batch, _, caches []cache.Cache) (hidden, aux *mlx.Array) {
	w := d.w
	if w == nil {
		panic(errNoWeights)
	}
	if len(caches) != d.cfg.NumLayers {
		panic(fmt.Sprintf("dflash: Forward got %d caches for %d layers (use NewCaches)", len(caches), d.cfg.NumLayers))
	}
	s0 := caches[0].Offset()
	if len(b.SeqOffsets) > 0 {
		s0 = b.SeqOffsets[0]
	}
	d.checkCaches(caches, s0)

	// Context path (spec/dflash.md 5.1): projected once, shared by every
	// layer's k/v projections.
	var ctx *mlx.Array
	if x := b.Hidden; x != nil {
		if x.NDim() != 3 || x.Dim(0) != 1 || x.Dim(2) != d.cfg.FeatureSize() {
			panic(fmt.Sprintf("dflash: Batch.Hidden is %v; want [1, C, %d] (%d taps × hidden %d)", x.Shape(), d.cfg.FeatureSize(), d.cfg.NumTaps(), d.cfg.HiddenSize))
		}
		if x.Dim(1) > 0 {
			ctx = d.projectContext(x)
		}
	}
	if b.InputIDs == nil {
		if ctx != nil {
			for l := range w.layers {
				k, v := d.keysValues(&w.layers[l], ctx, s0)
				d.write(l, caches[l], k, v)
			}
		}
		return nil, nil
	}

	// Block path (spec/dflash.md 5.2).
	ids := b.InputIDs
	if ids.NDim() != 2 || ids.Dim(0) != 1 {
		panic(fmt.Sprintf("dflash: Batch.InputIDs is %v; want [1, Lb]", ids.Shape()))
	}
	if len(b.SeqQueryLens) > 0 && b.SeqQueryLens[0] != ids.Dim(1) {
		panic(fmt.Sprintf("dflash: SeqQueryLens %v with %d block rows: right padding is not supported; send only the real rows", b.SeqQueryLens, ids.Dim(1)))
	}
	h := cast(d.mustTarget().TokenEmbeddings(ids), d.dtype)
	if s := d.cfg.InputEmbeddingScale; s != 1 {
		h = mlx.MultiplyScalar(h, s)
	}
	eps := d.cfg.RMSNormEps
	for l := range w.layers {
		ly := &w.layers[l]
		attention := func(x *mlx.Array) *mlx.Array { return d.attention(l, ly, x, ctx, s0, caches[l]) }
		mlp := func(x *mlx.Array) *mlx.Array { return nn.SwiGLU(x, ly.gateUp, ly.down) }
		h = mlx.Add(h, d.wrap.WrapAttention(l, nn.RMSNorm(h, ly.inputNorm, eps), attention))
		h = mlx.Add(h, d.wrap.WrapMLP(l, nn.RMSNorm(h, ly.postNorm, eps), mlp))
		if d.trace != nil {
			d.trace(l, h)
		}
	}
	out := nn.RMSNorm(h, w.norm, eps)
	return out, out
}

// projectContext is hidden_norm(fc(x)) for context features x [1, C, F]:
// what every layer's k/v projections turn into context keys and values.
func (d *Draft) projectContext(x *mlx.Array) *mlx.Array {
	return nn.RMSNorm(d.w.fc.Forward(cast(x, d.dtype)), d.w.hiddenNorm, d.cfg.RMSNormEps)
}

// checkCaches panics, before any cache is touched, unless caches are what
// NewCaches returns and every one sits at s0. A cache past s0 holds stale
// block rows (the previous block was not rewound); one before it would leave
// a gap of unfed slots. Either way the session protocol is broken.
func (d *Draft) checkCaches(caches []cache.Cache, s0 int) {
	for l, c := range caches {
		window, _ := d.cfg.Attention(l)
		ok := false
		switch c := c.(type) {
		case *cache.KV:
			ok = window == 0
		case *cache.Rotating:
			ok = window > 0 && c.Window() == window
		}
		if !ok {
			panic(fmt.Sprintf("dflash: layer %d (%s) got a %T cache (use NewCaches)", l, d.cfg.LayerTypes[l], c))
		}
		if off := c.Offset(); off != s0 {
			panic(fmt.Sprintf("dflash: layer %d cache sits at offset %d but this forward starts at slot %d (rewind the previous block and write context without gaps)", l, off, s0))
		}
	}
}

// keysValues projects rows x [1, L, H] at slots first … first+L−1 to
// RoPE'd, k-normed keys and values [1, Hkv, L, D]. Context rows and block
// rows go through the same projections.
func (d *Draft) keysValues(ly *layerWeights, x *mlx.Array, first int) (k, v *mlx.Array) {
	c := d.cfg
	// Heads first, then the k | v split: [1, 2·Hkv, L, D] is a free view of
	// the product, and each half a view of that.
	kv := mlx.Split(nn.SplitHeads(ly.kv.Forward(x), 2*c.NumKVHeads, c.HeadDim), 1, c.NumKVHeads)
	k = nn.RMSNorm(kv[0], ly.kNorm, c.RMSNormEps)
	return d.rope.Apply(k, first), kv[1]
}

// attention is layer l's attention for the block rows x [1, Lb, H] (after
// input_layernorm, and after any wrapper's preparation), preceded by the
// projected context ctx [1, C, H] or nil, at slots s0 … (context, then
// block). It writes [context; block] keys and values in one cache update
// and returns o_proj of the attention output [1, Lb, H].
func (d *Draft) attention(l int, ly *layerWeights, x, ctx *mlx.Array, s0 int, c cache.Cache) *mlx.Array {
	cfg := d.cfg
	Lb := x.Dim(1)
	C := 0
	if ctx != nil {
		C = ctx.Dim(1)
	}
	sb := s0 + C // the first block slot

	q := nn.RMSNorm(nn.SplitHeads(ly.q.Forward(x), cfg.NumHeads, cfg.HeadDim), ly.qNorm, cfg.RMSNormEps)
	q = d.rope.Apply(q, sb)
	// Context rows then block rows occupy slots s0 … sb+Lb−1 without a
	// gap, so one projection of [context; block] gives both.
	rows := x
	if ctx != nil {
		rows = mlx.Concatenate(1, ctx, x)
	}
	k, v := d.keysValues(ly, rows, s0)
	kh, vh, slots := d.write(l, c, k, v)
	window, causal := cfg.Attention(l)
	scale := float32(1 / math.Sqrt(float64(cfg.HeadDim)))
	o := mlx.ScaledDotProductAttention(q, kh, vh, scale, attentionMask(window, causal, slots, sb, Lb))
	return ly.o.Forward(nn.MergeHeads(o))
}

// write appends keys and values [1, Hkv, L, D] to layer l's cache (at s0,
// checked by checkCaches) and returns the key and value history, and for a
// rotating cache the slot of each returned row.
func (d *Draft) write(l int, c cache.Cache, k, v *mlx.Array) (kh, vh *mlx.Array, slots []int) {
	switch c := c.(type) {
	case *cache.KV:
		kh, vh = c.Update(k, v)
		return kh, vh, nil
	case *cache.Rotating:
		return c.Update(k, v)
	}
	panic(fmt.Sprintf("dflash: layer %d: unsupported cache %T", l, c))
}

// cast returns a in dtype (a itself when it already is).
func cast(a *mlx.Array, dtype mlx.DType) *mlx.Array {
	if a.DType() == dtype {
		return a
	}
	return mlx.AsType(a, dtype)
}
