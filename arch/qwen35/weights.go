package qwen35

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
)

// This file is the only place that knows how Qwen3.5 checkpoints spell and
// store their tensors (spec/qwen35.md section 10): the text-decoder prefix,
// the ignored vision and MTP tensors, the tied head, the conv1d layouts and
// the zero-centred (1 + w) norms, which are folded into plain RMSNorm
// weights here so the forward never sees them.

// Text-decoder prefixes, detected by the first existing embedding name.
var textPrefixes = []string{
	"model.language_model.", // …ForConditionalGeneration
	"model.",                // …ForCausalLM
}

// Tensors under these prefixes belong to parts we do not run: the vision
// tower and the multi-token-prediction head.
const (
	visualPrefix = "model.visual."
	mtpPrefix    = "mtp."
)

// Qwen3-Next fused projections, which Qwen3.5 releases do not use.
var fusedNames = []string{".linear_attn.in_proj_qkvz.", ".linear_attn.in_proj_ba."}

// maxUnexpected caps how many unexpected names an error lists.
const maxUnexpected = 10

// weights are the bound, pinned tensors of a model, in the compute dtype
// unless noted.
type weights struct {
	embed  *mlx.Array // [V, H]
	norm   *mlx.Array // final norm, (1 + w) folded
	head   *mlx.Array // [V, H]: lm_head, or embed when tied
	layers []layerWeights
	all    []*mlx.Array // every pinned array, for free
}

type layerWeights struct {
	inputNorm, postNorm *mlx.Array        // (1 + w) folded
	attn                *attentionWeights // nil in delta-net layers
	delta               *deltaWeights     // nil in attention layers
	mlp                 mlpWeights
}

// Projections that read the same input are stacked into one weight at load
// (nn.ConcatRows): decoding one token is bound by kernel launches, and one
// matrix product then costs the launches of one.

type attentionWeights struct {
	qkv     *mlx.Array // [Hq·2D + 2·Hkv·D, H]: q_proj (per head query | gate), k_proj, v_proj
	o       *mlx.Array // [H, Hq·D]
	qkvBias *mlx.Array // [Hq·2D + 2·Hkv·D]; nil without attention_bias
	oBias   *mlx.Array // nil without attention_bias
	qNorm   *mlx.Array // [D], (1 + w) folded
	kNorm   *mlx.Array
}

type deltaWeights struct {
	in     *mlx.Array // [convDim + valueDim + 2·Hv, H]: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
	conv   *mlx.Array // [Kc, convDim]: row j holds tap j of every channel
	dtBias *mlx.Array // [Hv] float32
	negA   *mlx.Array // [Hv] float32: −exp(A_log)
	norm   *mlx.Array // [Dv] float32, plain w (gated norm)
	out    *mlx.Array // [H, valueDim]
}

type mlpWeights struct {
	gateUp *mlx.Array // [2·I, H]: gate_proj, up_proj
	down   *mlx.Array // [H, I]
}

func (w *weights) free() { mlx.Unpin(w.all...) }

// WeightsError lists every way a checkpoint's tensors fail to match the
// configuration; LoadWeights reports them all in one error.
type WeightsError struct {
	Prefix     string   // the text-decoder prefix in use
	Missing    []string // expected tensors that are absent
	Mismatched []string // "name is [..] dtype, want [..] (why)"
	Unexpected []string // names no part of the model reads, sorted
}

func (e *WeightsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "qwen35: the checkpoint's tensors do not match config.json (text prefix %q)", e.Prefix)
	if n := len(e.Missing); n > 0 {
		fmt.Fprintf(&b, "\n  %d missing: %s", n, strings.Join(e.Missing, ", "))
	}
	if n := len(e.Mismatched); n > 0 {
		fmt.Fprintf(&b, "\n  %d mismatched:\n    %s", n, strings.Join(e.Mismatched, "\n    "))
	}
	if n := len(e.Unexpected); n > 0 {
		shown := e.Unexpected[:min(n, maxUnexpected)]
		fmt.Fprintf(&b, "\n  %d unexpected: %s", n, strings.Join(shown, ", "))
		if n > len(shown) {
			fmt.Fprintf(&b, " (and %d more)", n-len(shown))
		}
	}
	b.WriteString("\n  (missing or mis-shaped tensors usually mean config.json belongs to another checkpoint; unexpected ones, a different architecture or a converted layout this loader does not read)")
	return b.String()
}

// LoadWeights binds the checkpoint's tensors (lazy arrays, e.g. from
// mlx.LoadSafetensors), checks every name, shape and dtype of
// spec/qwen35.md 10.2 and reports all problems in one *WeightsError. On
// success it casts to the compute dtype, folds the (1 + w) norms and pins the
// result. Nothing is read here: the caller evaluates Weights (the engine does
// so in groups, with progress), or the first forward reads what it needs.
// Loading again replaces the previous weights.
func (m *Model) LoadWeights(tensors map[string]*mlx.Array) error {
	if err := mlx.Err(); err != nil {
		return fmt.Errorf("qwen35: an MLX error is pending before LoadWeights (the tensors may be incomplete): %w", err)
	}
	w, err := bindWeights(m.cfg, m.dtype, tensors)
	if err != nil {
		return err
	}
	mlx.Pin(w.all...)
	if m.w != nil {
		m.w.free()
	}
	m.w = w
	return nil
}

// Free releases the weights (unpinned; freed at the worker's next sweep).
func (m *Model) Free() {
	if m.w != nil {
		m.w.free()
		m.w = nil
	}
}

// Weights returns every array the model holds, pinned by it (for
// evaluation and memory accounting: model.WeightHolder). It is empty before
// LoadWeights.
func (m *Model) Weights() []*mlx.Array {
	if m.w == nil {
		return nil
	}
	return slices.Clone(m.w.all)
}

// binder checks tensors against the expected names and shapes, collecting
// every problem instead of stopping at the first.
type binder struct {
	tensors map[string]*mlx.Array
	used    map[string]bool
	dtype   mlx.DType
	shift   bool // add 1 to the zero-centred norms
	err     WeightsError
	out     []*mlx.Array
}

// take returns the tensor name if it exists with one of the shapes (the
// first is the canonical one, named in errors); nil otherwise.
func (b *binder) take(name, why string, shapes ...[]int) *mlx.Array {
	a, ok := b.tensors[name]
	if !ok {
		b.err.Missing = append(b.err.Missing, name)
		return nil
	}
	b.used[name] = true
	if !a.Valid() {
		b.err.Mismatched = append(b.err.Mismatched, fmt.Sprintf("%s is an empty array: the MLX op that produced it failed", name))
		return nil
	}
	if !a.DType().IsFloat() {
		b.err.Mismatched = append(b.err.Mismatched, fmt.Sprintf("%s has dtype %s, want a float type (quantized checkpoints are not supported yet)", name, a.DType()))
		return nil
	}
	for _, s := range shapes {
		if slices.Equal(a.Shape(), s) {
			return a
		}
	}
	b.err.Mismatched = append(b.err.Mismatched, fmt.Sprintf("%s is %v, want %v (%s)", name, a.Shape(), shapes[0], why))
	return nil
}

// keep records a bound array and returns it.
func (b *binder) keep(a *mlx.Array) *mlx.Array {
	b.out = append(b.out, a)
	return a
}

// weight binds a tensor in the compute dtype.
func (b *binder) weight(name, why string, shape ...int) *mlx.Array {
	a := b.part(name, why, shape...)
	if a == nil {
		return nil
	}
	return b.keep(a)
}

// part checks a tensor and casts it to the compute dtype without keeping
// it: the caller stacks parts with stack.
func (b *binder) part(name, why string, shape ...int) *mlx.Array {
	a := b.take(name, why, shape)
	if a == nil {
		return nil
	}
	return cast(a, b.dtype)
}

// stack keeps the rows of parts stacked into one weight (nil when a part is
// missing: the binder has recorded why).
func (b *binder) stack(parts ...*mlx.Array) *mlx.Array {
	if slices.Contains(parts, nil) {
		return nil
	}
	return b.keep(nn.ConcatRows(parts...))
}

// float32 binds a tensor that stays float32 whatever the compute dtype.
func (b *binder) float32(name, why string, shape ...int) *mlx.Array {
	a := b.take(name, why, shape)
	if a == nil {
		return nil
	}
	return b.keep(cast(a, mlx.Float32))
}

// norm binds a zero-centred RMSNorm weight as the plain weight 1 + w (added
// in float32, then cast), or as stored for converted checkpoints.
func (b *binder) norm(name string, size int) *mlx.Array {
	a := b.take(name, "(1+w) RMSNorm weight", []int{size})
	if a == nil {
		return nil
	}
	if b.shift {
		a = mlx.AddScalar(cast(a, mlx.Float32), 1)
	}
	return b.keep(cast(a, b.dtype))
}

// conv binds a depthwise conv1d weight stored [C, 1, Kc] (Hugging Face),
// [C, Kc, 1] (mlx-lm conversions) or [C, Kc], as taps [Kc, C] (made
// contiguous at load), the layout the forward's fused convolution reads.
func (b *binder) conv(name string, channels, kernel int) *mlx.Array {
	a := b.take(name, "depthwise conv1d: channels 2·Hk·Dk+Hv·Dv, kernel linear_conv_kernel_dim",
		[]int{channels, 1, kernel}, []int{channels, kernel, 1}, []int{channels, kernel})
	if a == nil {
		return nil
	}
	a = mlx.Transpose(mlx.Reshape(a, channels, kernel), 1, 0)
	return b.keep(mlx.Contiguous(cast(a, b.dtype)))
}

func cast(a *mlx.Array, dt mlx.DType) *mlx.Array {
	if a.DType() == dt {
		return a
	}
	return mlx.AsType(a, dt)
}

// bindWeights maps the checkpoint onto the layers of cfg.
func bindWeights(cfg *Config, dtype mlx.DType, tensors map[string]*mlx.Array) (*weights, error) {
	// Parts we do not run are dropped first, with one log line.
	text := make(map[string]*mlx.Array, len(tensors))
	var nVisual, nMTP int
	for name, a := range tensors {
		switch {
		case strings.HasPrefix(name, visualPrefix):
			nVisual++
		case strings.HasPrefix(name, mtpPrefix):
			nMTP++
		default:
			text[name] = a
		}
		for _, f := range fusedNames {
			if strings.Contains(name, f) {
				return nil, fmt.Errorf("qwen35: tensor %s is a Qwen3-Next style fused projection (in_proj_qkvz / in_proj_ba); Qwen3.5 checkpoints store in_proj_qkv, in_proj_z, in_proj_b and in_proj_a separately and the fused layout is not supported (use a Qwen3.5 checkpoint, or convert the projections)", name)
			}
		}
	}
	if nVisual > 0 || nMTP > 0 {
		slog.Info("qwen35: skipping tensors of parts that are not run", "vision", nVisual, "mtp", nMTP)
	}

	prefix := ""
	for _, p := range textPrefixes {
		if _, ok := text[p+"embed_tokens.weight"]; ok {
			prefix = p
			break
		}
	}
	if prefix == "" {
		return nil, &WeightsError{Prefix: "?", Missing: []string{textPrefixes[0] + "embed_tokens.weight (or " + textPrefixes[1] + "embed_tokens.weight)"}, Unexpected: sortedNames(text, nil)}
	}

	shift, rule := normShift(cfg, prefix, text, nMTP > 0)
	if rule == normShiftAssumed {
		slog.Warn("qwen35: conv1d weights are 2-D and there are no mtp tensors: assuming raw Hugging Face (1+w) norms", "shift", shift)
	}

	b := &binder{tensors: text, used: map[string]bool{}, dtype: dtype, shift: shift, err: WeightsError{Prefix: prefix}}
	H, V := cfg.HiddenSize, cfg.VocabSize
	w := &weights{
		embed:  b.weight(prefix+"embed_tokens.weight", "vocab_size × hidden_size", V, H),
		norm:   b.norm(prefix+"norm.weight", H),
		layers: make([]layerWeights, cfg.NumLayers),
	}
	for i := range w.layers {
		p := fmt.Sprintf("%slayers.%d.", prefix, i)
		ly := &w.layers[i]
		ly.inputNorm = b.norm(p+"input_layernorm.weight", H)
		ly.postNorm = b.norm(p+"post_attention_layernorm.weight", H)
		if cfg.FullAttentionLayer(i) {
			ly.attn = bindAttention(b, cfg, p+"self_attn.")
		} else {
			ly.delta = bindDeltaNet(b, cfg, p+"linear_attn.")
		}
		ly.mlp = mlpWeights{
			gateUp: b.stack(
				b.part(p+"mlp.gate_proj.weight", "intermediate_size × hidden_size", cfg.IntermediateSize, H),
				b.part(p+"mlp.up_proj.weight", "intermediate_size × hidden_size", cfg.IntermediateSize, H)),
			down: b.weight(p+"mlp.down_proj.weight", "hidden_size × intermediate_size", H, cfg.IntermediateSize),
		}
	}

	// The head: lm_head, or the embedding table when tied or absent.
	const headName = "lm_head.weight"
	_, hasHead := text[headName]
	switch {
	case cfg.TieWordEmbeddings && hasHead:
		b.used[headName] = true
		slog.Warn("qwen35: tie_word_embeddings is true: ignoring lm_head.weight and using the embedding table as the head")
		w.head = w.embed
	case cfg.TieWordEmbeddings:
		slog.Info("qwen35: output head is the tied embedding table")
		w.head = w.embed
	case !hasHead:
		slog.Info("qwen35: lm_head.weight is absent: using the embedding table as the head")
		w.head = w.embed
	default:
		w.head = b.weight(headName, "vocab_size × hidden_size", V, H)
	}

	b.err.Unexpected = sortedNames(text, b.used)
	if len(b.err.Missing)+len(b.err.Mismatched)+len(b.err.Unexpected) > 0 {
		return nil, &b.err
	}
	w.all = b.out
	return w, nil
}

func bindAttention(b *binder, cfg *Config, p string) *attentionWeights {
	H, hq, hkv, d := cfg.HiddenSize, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	a := &attentionWeights{
		qkv: b.stack(
			b.part(p+"q_proj.weight", "per head [query | gate]: num_attention_heads·2·head_dim × hidden_size", hq*2*d, H),
			b.part(p+"k_proj.weight", "num_key_value_heads·head_dim × hidden_size", hkv*d, H),
			b.part(p+"v_proj.weight", "num_key_value_heads·head_dim × hidden_size", hkv*d, H)),
		o:     b.weight(p+"o_proj.weight", "hidden_size × num_attention_heads·head_dim", H, hq*d),
		qNorm: b.norm(p+"q_norm.weight", d),
		kNorm: b.norm(p+"k_norm.weight", d),
	}
	if cfg.AttentionBias {
		a.qkvBias = b.stack(
			b.part(p+"q_proj.bias", "attention_bias is true", hq*2*d),
			b.part(p+"k_proj.bias", "attention_bias is true", hkv*d),
			b.part(p+"v_proj.bias", "attention_bias is true", hkv*d))
		a.oBias = b.weight(p+"o_proj.bias", "attention_bias is true", H)
	}
	return a
}

func bindDeltaNet(b *binder, cfg *Config, p string) *deltaWeights {
	H, hv := cfg.HiddenSize, cfg.LinearValueHeads
	return &deltaWeights{
		in: b.stack(
			b.part(p+"in_proj_qkv.weight", "rows q|k|v: 2·Hk·Dk+Hv·Dv × hidden_size", cfg.ConvDim(), H),
			b.part(p+"in_proj_z.weight", "Hv·Dv × hidden_size", cfg.ValueDim(), H),
			b.part(p+"in_proj_b.weight", "linear_num_value_heads × hidden_size", hv, H),
			b.part(p+"in_proj_a.weight", "linear_num_value_heads × hidden_size", hv, H)),
		conv:   b.conv(p+"conv1d.weight", cfg.ConvDim(), cfg.ConvKernel),
		dtBias: b.float32(p+"dt_bias", "linear_num_value_heads", hv),
		// The decay rate −exp(A_log) is a constant: fold it once at load.
		negA: b.negExp(b.float32(p+"A_log", "linear_num_value_heads", hv)),
		norm: b.float32(p+"norm.weight", "gated RMSNorm over linear_value_head_dim", cfg.LinearValueDim),
		out:  b.weight(p+"out_proj.weight", "hidden_size × Hv·Dv", H, cfg.ValueDim()),
	}
}

// negExp folds the delta-net decay rate −exp(A_log), a constant, once at
// load (nil when A_log is missing: the binder has recorded why).
func (b *binder) negExp(aLog *mlx.Array) *mlx.Array {
	if aLog == nil {
		return nil
	}
	return b.keep(mlx.Negative(mlx.Exp(aLog)))
}

// sortedNames lists the names of tensors not in used, sorted.
func sortedNames(tensors map[string]*mlx.Array, used map[string]bool) []string {
	var out []string
	for name := range tensors {
		if !used[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// How normShift decided.
const (
	normShiftRaw       = "a conv1d weight is 3-D with a last dimension of Kc (raw Hugging Face layout)"
	normShiftConverted = "conv1d weights are 3-D with a last dimension of 1 (mlx-lm conversion, 1 already added)"
	normShiftMTP       = "conv1d weights are 2-D and mtp tensors exist (converters drop them)"
	normShiftAssumed   = "conv1d weights are 2-D (or absent) and there are no mtp tensors"
)

// normShift decides once per checkpoint whether the zero-centred norms are
// stored as w (raw Hugging Face: add 1) or already as 1 + w (mlx-lm
// conversions), by spec/qwen35.md 10.3:
//  1. any conv1d weight 3-D with last dimension ≠ 1 → raw → shift;
//  2. else any 3-D with last dimension 1 → converted → no shift;
//  3. else (2-D) → raw if mtp tensors exist, otherwise assumed raw (and the
//     caller warns).
func normShift(cfg *Config, prefix string, tensors map[string]*mlx.Array, hasMTP bool) (shift bool, rule string) {
	converted := false
	for i := range cfg.NumLayers {
		a, ok := tensors[fmt.Sprintf("%slayers.%d.linear_attn.conv1d.weight", prefix, i)]
		if !ok || a.NDim() != 3 {
			continue
		}
		if a.Dim(-1) != 1 {
			return true, normShiftRaw
		}
		converted = true
	}
	switch {
	case converted:
		return false, normShiftConverted
	case hasMTP:
		return true, normShiftMTP
	}
	return true, normShiftAssumed
}
