package qwen35

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// This file is the only place that knows how Qwen3.5 checkpoints spell and
// store their tensors (spec/qwen35.md section 10, spec/quantized.md): the
// text-decoder prefix of the Hugging Face and MLX layouts, the ignored
// vision and MTP tensors, the tied head, the conv1d layouts, the
// zero-centred (1 + w) norms, which are folded into plain RMSNorm weights
// here so the forward never sees them, and quantized layers, bound through
// arch/nn so the forward does not know about them either.

// Text-decoder prefixes, detected by the existing embedding name; the head
// of each layout is beside it.
var textPrefixes = []struct{ prefix, head, layout string }{
	{"model.language_model.", "lm_head.weight", LayoutHF},                 // …ForConditionalGeneration
	{"model.", "lm_head.weight", LayoutHF},                                // …ForCausalLM
	{"language_model.model.", "language_model.lm_head.weight", LayoutMLX}, // mlx_lm.convert, mlx-vlm
}

// The checkpoint layouts Layout reports.
const (
	LayoutHF  = "Hugging Face"
	LayoutMLX = "MLX (mlx-lm module paths)"
)

// Tensors under these prefixes belong to parts we do not run: the vision
// tower (Hugging Face, mlx-vlm) and the multi-token-prediction head.
var skippedPrefixes = []struct{ prefix, part string }{
	{"model.visual.", "vision"},
	{"vision_tower.", "vision"},
	{"mtp.", "mtp"},
	{"language_model.mtp.", "mtp"},
}

// Qwen3-Next fused projections, which Qwen3.5 releases do not use.
var fusedNames = []string{".linear_attn.in_proj_qkvz.", ".linear_attn.in_proj_ba."}

// maxUnexpected caps how many unexpected names an error lists.
const maxUnexpected = 10

// weights are the bound, pinned tensors of a model, in the compute dtype
// unless noted.
type weights struct {
	embed  *nn.Embedding // [V, H]
	norm   *mlx.Array    // final norm, (1 + w) folded
	head   *nn.Linear    // [V, H]: lm_head, or the embedding table when tied
	layers []layerWeights
	all    []*mlx.Array // every pinned array, for free
}

type layerWeights struct {
	inputNorm, postNorm *mlx.Array        // (1 + w) folded
	attn                *attentionWeights // nil in delta-net layers
	delta               *deltaWeights     // nil in attention layers
	mlp                 MLP
}

// Projections that read the same input are stacked into one layer at load
// (nn.ConcatLinear): decoding one token is bound by kernel launches, and one
// matrix product then costs the launches of one.

type attentionWeights struct {
	qkv   *nn.Linear // [Hq·2D + 2·Hkv·D, H]: q_proj (per head query | gate), k_proj, v_proj; biases with attention_bias
	o     *nn.Linear // [H, Hq·D]
	qNorm *mlx.Array // [D], (1 + w) folded
	kNorm *mlx.Array
}

type deltaWeights struct {
	in     *nn.Linear // [convDim + valueDim + 2·Hv, H]: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
	conv   *mlx.Array // [Kc, convDim]: row j holds tap j of every channel
	dtBias *mlx.Array // [Hv] float32
	negA   *mlx.Array // [Hv] float32: −exp(A_log)
	norm   *mlx.Array // [Dv] float32, plain w (gated norm)
	out    *nn.Linear // [H, valueDim]
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
	w, layout, err := bindWeights(m.cfg, m.shard, m.quant, m.dtype, m.mlp, tensors)
	if err != nil {
		return err
	}
	m.layout = layout
	m.resetSegments() // their traces hold the previous weights
	mlx.Pin(w.all...)
	if m.w != nil {
		m.w.free()
	}
	m.w = w
	return nil
}

// Free releases the weights (unpinned; freed at the worker's next sweep).
func (m *Model) Free() {
	m.resetSegments()
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

// Binder checks a checkpoint's tensors against the names and shapes a
// model expects, collecting every problem (missing, mis-shaped and, at the
// end, unused tensors) into one *WeightsError instead of stopping at the
// first, and records the arrays the model keeps. An MLPBinder uses it to
// bind its layers; each method returns nil for a part that is missing or
// wrong, having recorded why.
type Binder struct {
	tensors map[string]*mlx.Array
	used    map[string]bool
	dtype   mlx.DType
	quant   *loader.Quantization // nil for unquantized checkpoints
	shift   bool                 // add 1 to the zero-centred norms
	err     WeightsError
	out     []*mlx.Array
	layers  map[string]int // quantization (or "dense") → linear layers bound so
	shard   *shard         // this rank's part; nil when the model is whole
}

// DType is the compute dtype.
func (b *Binder) DType() mlx.DType { return b.dtype }

// Has reports whether the checkpoint holds a tensor of that name (without
// marking it as read).
func (b *Binder) Has(name string) bool {
	_, ok := b.tensors[name]
	return ok
}

// Mismatch records a problem with a tensor that exists: what was found and
// what was expected.
func (b *Binder) Mismatch(format string, args ...any) {
	b.err.Mismatched = append(b.err.Mismatched, fmt.Sprintf(format, args...))
}

// Tensor returns the float tensor name if it exists with one of the shapes
// (the first is the canonical one, named in errors), as stored; why says
// what the shape means.
func (b *Binder) Tensor(name, why string, shapes ...[]int) *mlx.Array {
	a, ok := b.tensors[name]
	if !ok {
		b.err.Missing = append(b.err.Missing, name)
		return nil
	}
	b.used[name] = true
	if !a.Valid() {
		b.Mismatch("%s is an empty array: the MLX op that produced it failed", name)
		return nil
	}
	if !a.DType().IsFloat() {
		b.Mismatch("%s has dtype %s, want a float type (only linear layers and the embedding may be quantized)", name, a.DType())
		return nil
	}
	for _, s := range shapes {
		if slices.Equal(a.Shape(), s) {
			return a
		}
	}
	b.Mismatch("%s is %v, want %v (%s)", name, a.Shape(), shapes[0], why)
	return nil
}

// Keep records an array the model holds (pinned with the weights) and
// returns it.
func (b *Binder) Keep(a *mlx.Array) *mlx.Array {
	b.out = append(b.out, a)
	return a
}

// Linear binds the linear layer at module path: path.weight of logical
// shape [..., out, in] (stacked experts are [E, out, in]), dense or
// quantized (see nn.LoadLinear), dense weights cast to the compute dtype.
// It does not Keep the layer.
func (b *Binder) Linear(path, why string, shape ...int) *nn.Linear {
	l, used, err := nn.LoadLinear(b.tensors, path, b.quant, b.dtype, shape...)
	for _, n := range used {
		b.used[n] = true
	}
	switch {
	case err == nil:
		b.layers[l.Quant.String()]++
		return l
	case len(used) == 0:
		b.err.Missing = append(b.err.Missing, path+nn.WeightSuffix)
	default:
		b.Mismatch("%s (%s)", err, why)
	}
	return nil
}

// KeepLinear records a bound layer's arrays and returns it.
func (b *Binder) KeepLinear(l *nn.Linear) *nn.Linear {
	if l != nil {
		b.out = append(b.out, l.Arrays()...)
	}
	return l
}

// Stack keeps parts stacked into one layer whose output is theirs
// concatenated (nn.ConcatLinear); nil when a part is nil.
func (b *Binder) Stack(parts ...*nn.Linear) *nn.Linear {
	if slices.Contains(parts, nil) {
		return nil
	}
	return b.KeepLinear(nn.ConcatLinear(parts...))
}

// bias gives l the additive bias path.bias [size] in the compute dtype.
func (b *Binder) bias(l *nn.Linear, path, why string, size int) *nn.Linear {
	a := b.Tensor(path+".bias", why, []int{size})
	if l == nil || a == nil {
		return nil
	}
	l.Bias = cast(a, b.dtype)
	return l
}

// float32 binds a tensor that stays float32 whatever the compute dtype,
// keeping the entries of spans (this rank's heads) when any are given.
func (b *Binder) float32(name, why string, shape []int, spans ...nn.Span) *mlx.Array {
	a := b.Tensor(name, why, shape)
	if a == nil {
		return nil
	}
	if len(spans) > 0 {
		a = b.Part(name, a, 0, spans...)
	}
	return b.Keep(cast(a, mlx.Float32))
}

// norm binds a zero-centred RMSNorm weight as the plain weight 1 + w (added
// in float32, then cast), or as stored for converted checkpoints.
func (b *Binder) norm(name string, size int) *mlx.Array {
	a := b.Tensor(name, "(1+w) RMSNorm weight", []int{size})
	if a == nil {
		return nil
	}
	if b.shift {
		a = mlx.AddScalar(cast(a, mlx.Float32), 1)
	}
	return b.Keep(cast(a, b.dtype))
}

// conv binds a depthwise conv1d weight stored [C, 1, Kc] (Hugging Face),
// [C, Kc, 1] (mlx-lm conversions) or [C, Kc], as taps [Kc, C] (made
// contiguous at load), the layout the forward's fused convolution reads;
// when sharded, of this rank's channels (spans).
func (b *Binder) conv(name string, channels, kernel int, spans ...nn.Span) *mlx.Array {
	a := b.Tensor(name, "depthwise conv1d: channels 2·Hk·Dk+Hv·Dv, kernel linear_conv_kernel_dim",
		[]int{channels, 1, kernel}, []int{channels, kernel, 1}, []int{channels, kernel})
	if a == nil {
		return nil
	}
	if len(spans) > 0 {
		// The channels are the stored tensor's rows in each layout.
		a = b.Part(name, a, 0, spans...)
		channels = 0
		for _, s := range spans {
			channels += s.Len()
		}
	}
	a = mlx.Reshape(a, channels, kernel)
	a = mlx.Transpose(a, 1, 0)
	return b.Keep(mlx.Contiguous(cast(a, b.dtype)))
}

func cast(a *mlx.Array, dt mlx.DType) *mlx.Array {
	if a.DType() == dt {
		return a
	}
	return mlx.AsType(a, dt)
}

// Layout describes how a loaded checkpoint stores the model: the tensor
// layout, how the (1 + w) norms were decided, and the linear layers by
// quantization ("affine 4-bit, group 64" or "dense") with their count.
type Layout struct {
	Format    string // LayoutHF or LayoutMLX
	NormShift string // why the zero-centred norms were (or were not) shifted
	Layers    map[string]int
}

// bindWeights maps the checkpoint onto the layers of cfg.
func bindWeights(cfg *Config, sh *shard, quant *loader.Quantization, dtype mlx.DType, mlp MLPBinder, tensors map[string]*mlx.Array) (*weights, *Layout, error) {
	// Parts we do not run are dropped first, with one log line.
	text := make(map[string]*mlx.Array, len(tensors))
	skipped := map[string]int{}
	for name, a := range tensors {
		part := ""
		for _, p := range skippedPrefixes {
			if strings.HasPrefix(name, p.prefix) {
				part = p.part
				break
			}
		}
		if part != "" {
			skipped[part]++
		} else {
			text[name] = a
		}
		for _, f := range fusedNames {
			if strings.Contains(name, f) {
				return nil, nil, fmt.Errorf("qwen35: tensor %s is a Qwen3-Next style fused projection (in_proj_qkvz / in_proj_ba); Qwen3.5 checkpoints store in_proj_qkv, in_proj_z, in_proj_b and in_proj_a separately and the fused layout is not supported (use a Qwen3.5 checkpoint, or convert the projections)", name)
			}
		}
	}
	if len(skipped) > 0 {
		slog.Info("qwen35: skipping tensors of parts that are not run", "vision", skipped["vision"], "mtp", skipped["mtp"])
	}

	var found []int
	for i, p := range textPrefixes {
		if _, ok := text[p.prefix+"embed_tokens.weight"]; ok {
			found = append(found, i)
		}
	}
	switch {
	case len(found) == 0:
		var names []string
		for _, p := range textPrefixes {
			names = append(names, p.prefix+"embed_tokens.weight")
		}
		return nil, nil, &WeightsError{Prefix: "?", Missing: []string{strings.Join(names, " or ")}, Unexpected: sortedNames(text, nil)}
	case len(found) > 1:
		var names []string
		for _, i := range found {
			names = append(names, textPrefixes[i].prefix+"embed_tokens.weight ("+textPrefixes[i].layout+")")
		}
		return nil, nil, fmt.Errorf("qwen35: the checkpoint mixes layouts: it holds %s; a checkpoint is either Hugging Face's or an MLX conversion, not both (remove the stray files, or download it again)", strings.Join(names, " and "))
	}
	tp := textPrefixes[found[0]]
	prefix := tp.prefix

	shift, rule, err := normShift(cfg, prefix, text, skipped["mtp"] > 0, tp.layout == LayoutMLX)
	if err != nil {
		return nil, nil, err
	}
	if rule == normShiftAssumed {
		slog.Warn("qwen35: conv1d weights are 2-D and there are no mtp tensors: assuming raw Hugging Face (1+w) norms", "shift", shift)
	}
	if rule == normShiftAssumedMLX {
		slog.Warn("qwen35: conv1d weights are 2-D in an MLX-layout checkpoint: assuming its (1+w) norms are already folded, as mlx-lm does", "shift", shift)
	}

	b := &Binder{tensors: text, used: map[string]bool{}, dtype: dtype, quant: quant, shift: shift, err: WeightsError{Prefix: prefix}, layers: map[string]int{}, shard: sh}
	H, V := cfg.HiddenSize, cfg.VocabSize
	embed := b.KeepLinear(b.Linear(prefix+"embed_tokens", "vocab_size × hidden_size", V, H))
	w := &weights{
		norm:   b.norm(prefix+"norm.weight", H),
		layers: make([]layerWeights, cfg.NumLayers),
	}
	if embed != nil {
		w.embed = &nn.Embedding{Table: embed, DType: dtype}
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
		ly.mlp = mlp(b, p+"mlp.")
	}

	// The head: lm_head, or the embedding table when tied or absent. A
	// quantized lm_head brings its scales (and biases).
	headName := tp.head
	headPath := strings.TrimSuffix(headName, nn.WeightSuffix)
	_, hasHead := text[headName]
	switch {
	case cfg.TieWordEmbeddings && hasHead:
		for _, n := range []string{headName, headPath + nn.ScalesSuffix, headPath + nn.BiasesSuffix} {
			if _, ok := text[n]; ok {
				b.used[n] = true
			}
		}
		slog.Warn("qwen35: tie_word_embeddings is true: ignoring " + headName + " and using the embedding table as the head")
		w.head = embed
	case cfg.TieWordEmbeddings:
		slog.Info("qwen35: output head is the tied embedding table")
		w.head = embed
	case !hasHead:
		slog.Info("qwen35: " + headName + " is absent: using the embedding table as the head")
		w.head = embed
	default:
		w.head = b.KeepLinear(b.Linear(headPath, "vocab_size × hidden_size", V, H))
	}

	b.err.Unexpected = sortedNames(text, b.used)
	if len(b.err.Missing)+len(b.err.Mismatched)+len(b.err.Unexpected) > 0 {
		return nil, nil, &b.err
	}
	w.all = b.out
	return w, &Layout{Format: tp.layout, NormShift: rule, Layers: b.layers}, nil
}

func bindAttention(b *Binder, cfg *Config, p string) *attentionWeights {
	H, hq, hkv, d := cfg.HiddenSize, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	q := b.Linear(p+"q_proj", "per head [query | gate]: num_attention_heads·2·head_dim × hidden_size", hq*2*d, H)
	k := b.Linear(p+"k_proj", "num_key_value_heads·head_dim × hidden_size", hkv*d, H)
	v := b.Linear(p+"v_proj", "num_key_value_heads·head_dim × hidden_size", hkv*d, H)
	o := b.Linear(p+"o_proj", "hidden_size × num_attention_heads·head_dim", H, hq*d)
	if cfg.AttentionBias {
		q = b.bias(q, p+"q_proj", "attention_bias is true", hq*2*d)
		k = b.bias(k, p+"k_proj", "attention_bias is true", hkv*d)
		v = b.bias(v, p+"v_proj", "attention_bias is true", hkv*d)
		o = b.bias(o, p+"o_proj", "attention_bias is true", H)
	}
	if s := b.shard; s != nil {
		// A query head's rows are its query and gate, 2·D.
		q = b.Rows(q, p+"q_proj", s.heads.Scale(2*d))
		k = b.Rows(k, p+"k_proj", s.kvHeads.Scale(d))
		v = b.Rows(v, p+"v_proj", s.kvHeads.Scale(d))
		o = b.Cols(o, p+"o_proj", s.heads.Scale(d))
	}
	return &attentionWeights{
		qkv:   b.Stack(q, k, v),
		o:     b.KeepLinear(o),
		qNorm: b.norm(p+"q_norm.weight", d),
		kNorm: b.norm(p+"k_norm.weight", d),
	}
}

func bindDeltaNet(b *Binder, cfg *Config, p string) *deltaWeights {
	H, hv := cfg.HiddenSize, cfg.LinearValueHeads
	qkv := b.Linear(p+"in_proj_qkv", "rows q|k|v: 2·Hk·Dk+Hv·Dv × hidden_size", cfg.ConvDim(), H)
	z := b.Linear(p+"in_proj_z", "Hv·Dv × hidden_size", cfg.ValueDim(), H)
	beta := b.Linear(p+"in_proj_b", "linear_num_value_heads × hidden_size", hv, H)
	alpha := b.Linear(p+"in_proj_a", "linear_num_value_heads × hidden_size", hv, H)
	out := b.Linear(p+"out_proj", "hidden_size × Hv·Dv", H, cfg.ValueDim())
	// channels are this rank's q | k | v convolution channels and heads its
	// value heads (none when whole: every tensor is kept as it is).
	var channels, heads []nn.Span
	if s := b.shard; s != nil {
		kd, vd := cfg.LinearKeyDim, cfg.LinearValueDim
		channels = []nn.Span{s.keyHeads.Scale(kd), s.keyHeads.Scale(kd).Shift(cfg.KeyDim()), s.valueHeads.Scale(vd).Shift(2 * cfg.KeyDim())}
		heads = []nn.Span{s.valueHeads}
		qkv = b.Rows(qkv, p+"in_proj_qkv", channels...)
		z = b.Rows(z, p+"in_proj_z", s.valueHeads.Scale(vd))
		beta = b.Rows(beta, p+"in_proj_b", heads...)
		alpha = b.Rows(alpha, p+"in_proj_a", heads...)
		out = b.Cols(out, p+"out_proj", s.valueHeads.Scale(vd))
	}
	return &deltaWeights{
		in:     b.Stack(qkv, z, beta, alpha),
		conv:   b.conv(p+"conv1d.weight", cfg.ConvDim(), cfg.ConvKernel, channels...),
		dtBias: b.float32(p+"dt_bias", "linear_num_value_heads", []int{hv}, heads...),
		// The decay rate −exp(A_log) is a constant: fold it once at load.
		negA: b.negExp(b.float32(p+"A_log", "linear_num_value_heads", []int{hv}, heads...)),
		norm: b.float32(p+"norm.weight", "gated RMSNorm over linear_value_head_dim", []int{cfg.LinearValueDim}),
		out:  b.KeepLinear(out),
	}
}

// DenseMLP binds Qwen3.5's dense SwiGLU MLP (spec/qwen35.md section 8):
// gate_proj and up_proj [I, H] stacked into one product, down_proj [H, I].
func DenseMLP(cfg *Config) MLPBinder {
	return func(b *Binder, p string) MLP {
		H, I := cfg.HiddenSize, cfg.IntermediateSize
		gate := b.Linear(p+"gate_proj", "intermediate_size × hidden_size", I, H)
		up := b.Linear(p+"up_proj", "intermediate_size × hidden_size", I, H)
		down := b.Linear(p+"down_proj", "hidden_size × intermediate_size", H, I)
		if s := b.shard; s != nil {
			gate = b.Rows(gate, p+"gate_proj", s.inter)
			up = b.Rows(up, p+"up_proj", s.inter)
			down = b.Cols(down, p+"down_proj", s.inter)
		}
		gateUp := b.Stack(gate, up)
		down = b.KeepLinear(down)
		if gateUp == nil || down == nil {
			return nil
		}
		return &denseMLP{gateUp: gateUp, down: down}
	}
}

// negExp folds the delta-net decay rate −exp(A_log), a constant, once at
// load (nil when A_log is missing: the binder has recorded why).
func (b *Binder) negExp(aLog *mlx.Array) *mlx.Array {
	if aLog == nil {
		return nil
	}
	return b.Keep(mlx.Negative(mlx.Exp(aLog)))
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
	normShiftRaw        = "a conv1d weight is 3-D with a last dimension of Kc (raw Hugging Face layout): 1 added to the (1+w) norms"
	normShiftConverted  = "conv1d weights are 3-D with a last dimension of 1 (mlx-lm conversion): the (1+w) norms are stored folded"
	normShiftMTP        = "conv1d weights are 2-D and mtp tensors exist (converters drop them): 1 added to the (1+w) norms"
	normShiftAssumed    = "conv1d weights are 2-D (or absent) and there are no mtp tensors: assumed raw, 1 added to the (1+w) norms"
	normShiftAssumedMLX = "conv1d weights are 2-D (or absent) in an MLX-layout checkpoint: assumed folded, as mlx-lm does"
)

// normShift decides once per checkpoint whether the zero-centred norms are
// stored as w (raw Hugging Face: add 1) or already as 1 + w (mlx-lm
// conversions), by spec/qwen35.md 10.3 (mlx-lm's own rule):
//  1. conv1d weights 3-D with last dimension ≠ 1 → raw → shift;
//  2. 3-D with last dimension 1 → converted → no shift;
//  3. both present → the checkpoint mixes converted and unconverted tensors:
//     an error (shifting some norms twice or never would silently ruin it);
//  4. else (2-D or absent) → raw if mtp tensors exist; otherwise assumed
//     converted in the MLX layout (mlx-lm would not shift) and raw in
//     Hugging Face's (the caller warns).
func normShift(cfg *Config, prefix string, tensors map[string]*mlx.Array, hasMTP, mlxLayout bool) (shift bool, rule string, err error) {
	var raw, converted []int
	for i := range cfg.NumLayers {
		a, ok := tensors[fmt.Sprintf("%slayers.%d.linear_attn.conv1d.weight", prefix, i)]
		if !ok || a.NDim() != 3 {
			continue
		}
		if a.Dim(-1) != 1 {
			raw = append(raw, i)
		} else {
			converted = append(converted, i)
		}
	}
	switch {
	case len(raw) > 0 && len(converted) > 0:
		return false, "", fmt.Errorf("qwen35: the checkpoint mixes converted and unconverted tensors: linear_attn.conv1d.weight of layers %v is [C, 1, Kc] (Hugging Face) but of layers %v is [C, Kc, 1] (an mlx-lm conversion), so whether the (1+w) norms are already folded cannot be decided; convert the whole checkpoint again from the original", raw, converted)
	case len(raw) > 0:
		return true, normShiftRaw, nil
	case len(converted) > 0:
		return false, normShiftConverted, nil
	case hasMTP:
		return true, normShiftMTP, nil
	case mlxLayout:
		return false, normShiftAssumedMLX, nil
	}
	return true, normShiftAssumed, nil
}
