package qwen35

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
)

// A forward runs as compiled segments of layers.
//
// On a GPU a decode step is bound by the host: building its graph one cgo
// call per node took ~4 ms of a 10.6 ms step of the 4B shapes on the H200
// (docs/PERFORMANCE.md, issue 19). Only the attention layers' KV caches
// change shape from step to step; everything else (the delta-net layers,
// the MLPs, the norms and projections around attention) is a fixed-shape
// function of the residual stream and the recurrent states. So a forward is
// cut at the attention cores (RoPE, the KV cache and attention itself, built
// in Go every step as before), and each run of layers between two cores is
// one mlx.Compiled function: traced once per row count and snapshot splits,
// then rebuilt by MLX from its recorded tape in one call, with its
// element-wise chains fused.
//
// The segments compute what the layer-by-layer forward did, op for op;
// only MLX's fusion of element-wise chains differs, and MLX keeps each op's
// dtype inside a fused kernel. On the GPU each residual add also runs with
// the norm of its sum as one kernel (nn.AddRMSNorm), built to the same
// values.

// segment is one compiled run of layers.
type segment struct {
	// finish is the attention layer whose second half (output gate, o_proj,
	// residual and MLP) opens the segment; -1 for the first segment.
	finish int
	// whole are the delta-net layers the segment runs entirely, ascending.
	whole []int
	// next is the attention layer whose first half (input norm, q/k/v
	// projections and norms) closes the segment; -1 for the last segment,
	// which closes with the final norm.
	next int
	// taps is how many of the model's layer taps the segment records (of
	// the layers it finishes, in order).
	taps int
}

// segments is a model's plan of segments and their compiled functions
// (worker-owned once made).
type segments struct {
	plan  []segment
	funcs map[string]*mlx.Compiled // by segment and snapshot splits
}

// maxCompiledRows bounds the rows a compiled segment takes: decode steps and
// verification blocks. A prefill is bound by the device, not the host, and
// each new prompt length would cost a trace, so longer forwards run the
// segments' Go code directly.
const maxCompiledRows = 32

// maxSegmentFuncs bounds the compiled functions kept per model (one per
// segment and split pattern); past it they are all dropped and retraced.
const maxSegmentFuncs = 512

// segmentsOff is read once: SPECULA_SEGMENTS=0 builds every forward op by
// op (the same values; for measuring what the segments save).
var segmentsOff = os.Getenv("SPECULA_SEGMENTS") == "0"

// earlySubmit says when a forward hands each segment to the device as soon
// as it is built (AsyncEval of its outputs) instead of the caller
// evaluating the whole forward once it is built: read once from
// SPECULA_EARLY_SUBMIT ("0" never, "1" for every forward of 2 to
// maxCompiledRows rows on any device; unset: those forwards on the GPU).
//
// Why: a verification is built after the previous round's verdict is read,
// so the GPU idles while the host builds it (4.7 ms of a 24 ms round of the
// 27B shapes on the H200, issue 19). Handed over segment by segment, the
// GPU runs the first layers while the host builds the next. A decode step
// does not need it: the decoder builds step t+1 while the GPU runs step t.
// A long prefill is bound by the GPU. Values do not change: the same
// graph, evaluated in parts.
var earlySubmit = parseEarlySubmit(os.Getenv("SPECULA_EARLY_SUBMIT"))

// earlySubmits counts the segments handed over early (worker-owned; the
// tests read it).
var earlySubmits int

// Values of earlySubmit.
const (
	earlySubmitGPU = iota
	earlySubmitOff
	earlySubmitAll
)

// parseEarlySubmit maps a SPECULA_EARLY_SUBMIT value to earlySubmit.
func parseEarlySubmit(v string) int {
	switch v {
	case "0":
		return earlySubmitOff
	case "1":
		return earlySubmitAll
	}
	return earlySubmitGPU
}

// submitsEarly reports whether a forward of rows rows hands its segments
// over one by one (earlySubmit).
func submitsEarly(rows int) bool {
	if rows < 2 || rows > maxCompiledRows || earlySubmit == earlySubmitOff {
		return false
	}
	return earlySubmit == earlySubmitAll || mlx.CurrentDevice() == mlx.GPU
}

// planSegments cuts the layers at each attention layer.
func planSegments(cfg *Config, taps []int) []segment {
	var plan []segment
	cur := segment{finish: -1}
	count := func(i int) {
		if slices.Contains(taps, i) {
			cur.taps++
		}
	}
	for i := range cfg.NumLayers {
		if !cfg.FullAttentionLayer(i) {
			cur.whole = append(cur.whole, i)
			count(i)
			continue
		}
		cur.next = i
		plan = append(plan, cur)
		cur = segment{finish: i}
		count(i)
	}
	cur.next = -1
	return append(plan, cur)
}

// resetSegments drops the compiled segments: their traces hold the weights
// and taps they were made with. It runs on the worker.
func (m *Model) resetSegments() {
	if m.segs == nil {
		return
	}
	m.segs.freeFuncs()
	m.segs = nil
}

// freeFuncs frees every compiled function (the plan stays).
func (s *segments) freeFuncs() {
	for _, f := range s.funcs {
		f.Free()
	}
	clear(s.funcs)
}

// forwardSegments runs the decoder layers over the embedded input h [1, L,
// H] (the body of Forward).
func (m *Model) forwardSegments(h *mlx.Array, offset int, caches []cache.Cache) (hidden, aux *mlx.Array) {
	if m.segsStale {
		m.resetSegments()
		m.segsStale = false
	}
	if m.segs == nil {
		m.segs = &segments{plan: planSegments(m.cfg, m.taps), funcs: map[string]*mlx.Compiled{}}
	}
	L := h.Dim(1)
	// A sharded model's forward holds collectives: every rank must submit
	// them alike, so it keeps one evaluation.
	early := submitsEarly(L) && m.shard == nil
	rows := m.deltaRows(L)
	var o, gate *mlx.Array // the attention output the next segment finishes
	// A block the GPU's attention composes of nodes (a verification, a
	// draft's block) shares one causal mask among the attention layers
	// rather than build it in each: at 27B 5 nodes a forward, not 80. Our
	// few-row attention needs none.
	var causal *mlx.Array
	if L >= 2 && L <= mlx.MaxComposedQueries && !nn.RowsAttentionTakes(L) {
		causal = nn.CausalMask(L, offset)
	}
	var taps []*mlx.Array
	for s, seg := range m.segs.plan {
		in := []*mlx.Array{h}
		if seg.finish >= 0 {
			in = append(in, o, gate)
		}
		splits := make([][]int, len(seg.whole))
		for j, i := range seg.whole {
			rc := caches[i].(*cache.Recurrent)
			splits[j] = rc.SnapshotSplits(L)
			in = append(in, rc.ConvState(), rc.DeltaState())
		}
		out := m.callSegment(s, splits, rows, in)
		if early && s < len(m.segs.plan)-1 {
			// An error surfaces at the caller's evaluation.
			_ = mlx.AsyncEval(out...)
			earlySubmits++
		}
		h, out = out[0], out[1:]
		var q, k, v *mlx.Array
		if seg.next >= 0 {
			q, k, v, gate, out = out[0], out[1], out[2], out[3], out[4:]
		} else {
			hidden, out = out[0], out[1:]
		}
		taps, out = append(taps, out[:seg.taps]...), out[seg.taps:]
		for j, i := range seg.whole {
			var w cache.RecurrentWrite
			w, out = unflattenWrite(out, len(splits[j]), rows)
			caches[i].(*cache.Recurrent).Put(w)
		}
		if seg.next >= 0 {
			o = m.attentionCore(q, k, v, offset, caches[seg.next].(*cache.KV), causal)
		}
	}
	// A tap of the last layer is what transformers records as
	// hidden_states[L]: the stream after the final norm (every other
	// hidden_states[i+1] is taken before it). Drafts are trained on those
	// records, so a draft that taps the last layer saw the normed value.
	if n := len(taps); n > 0 && m.taps[n-1] == m.cfg.NumLayers-1 {
		taps[n-1] = hidden
	}
	if len(taps) == 0 {
		return hidden, hidden
	}
	return hidden, mlx.Concatenate(-1, taps...)
}

// deltaRows reports whether the delta-net layers of an L-row forward hand
// their interior states over as the rows of every state
// (cache.RecurrentWrite.DeltaRows): where the scan kernel runs, which emits
// them so, and for writes short enough that it does (maxEmitRows).
func (m *Model) deltaRows(L int) bool {
	return L <= maxEmitRows && (useScanKernel(m.local.LinearKeyDim) || forceDeltaRows)
}

// forceDeltaRows makes deltaRows true on any device (the tests' way to run
// that form on the CPU).
var forceDeltaRows bool

// callSegment runs segment s on in (see runSegment), compiled when it can
// be.
func (m *Model) callSegment(s int, splits [][]int, rows bool, in []*mlx.Array) []*mlx.Array {
	seg := m.segs.plan[s]
	if segmentsOff || m.shard != nil || in[0].Dim(1) > maxCompiledRows {
		// A sharded model's segments hold collectives, which stay outside
		// compiled functions.
		return m.runSegment(seg, splits, rows, in)
	}
	key := m.segmentKey(s, splits, rows)
	f := m.segs.funcs[key]
	if f == nil {
		if len(m.segs.funcs) >= maxSegmentFuncs {
			m.segs.freeFuncs()
		}
		nout := 2 + seg.taps
		if seg.next >= 0 {
			nout += 3
		}
		for _, sp := range splits {
			nout += flatWriteLen(len(sp), rows)
		}
		f = mlx.Compile(fmt.Sprintf("qwen35 segment %d", s), nout, func(in []*mlx.Array) []*mlx.Array {
			return m.runSegment(seg, splits, rows, in)
		})
		m.segs.funcs[key] = f
	}
	return f.Call(in...)
}

// segmentKey names a segment, the snapshot splits of its delta-net layers
// and the choices its Go code makes when traced (the device, which scan
// runs: a kernel that failed to build is replaced by the graph scan, and
// SPECULA_GDN_KERNEL=0 turns the kernels off; likewise which of the other
// fused kernels run: the adds with their norms (nn.AddRMSNormFused), the
// delta-net's output norm (nn.GatedRMSNormFused), its preparation
// (deltaPrepSwitch) and the three as one launch (deltaStepSwitch)):
// together with the input shapes and dtypes they fix the traced graph.
func (m *Model) segmentKey(s int, splits [][]int, rows bool) string {
	b := strconv.AppendInt(nil, int64(s), 10)
	b = strconv.AppendBool(b, rows)
	b = append(b, mlx.CurrentDevice().String()...)
	b = strconv.AppendBool(b, useScanKernel(m.local.LinearKeyDim))
	b = strconv.AppendBool(b, os.Getenv("SPECULA_GDN_KERNEL") == "0")
	b = strconv.AppendBool(b, nn.AddRMSNormFused())
	b = strconv.AppendBool(b, nn.GatedRMSNormFused())
	b = strconv.AppendBool(b, deltaPrepSwitch.On())
	b = strconv.AppendBool(b, deltaStepSwitch.On())
	for _, sp := range splits {
		b = append(b, '|')
		for _, x := range sp {
			b = strconv.AppendInt(append(b, ','), int64(x), 10)
		}
	}
	return string(b)
}

// runSegment is the body of a segment. in holds the residual stream h [1,
// L, H]; when the segment finishes an attention layer, that layer's
// attention output [1, L, Hq, D] and output gate; then the convolution tail
// and delta state of each delta-net layer it runs. It returns the residual
// stream; the next attention layer's q, k, v and gate (or, for the last
// segment, the final-normed hidden states); the taps recorded; and, per
// delta-net layer, what cache.Recurrent.Put takes: the tail and the state
// at the end and, when the layer has splits, the window of pre-convolution
// rows and the interior states (the rows of every state when rows, else one
// array per split).
func (m *Model) runSegment(seg segment, splits [][]int, rows bool, in []*mlx.Array) []*mlx.Array {
	w := m.mustWeights()
	h, in := in[0], in[1:]
	var taps, states []*mlx.Array
	record := func(i int) {
		if slices.Contains(m.taps, i) {
			taps = append(taps, h)
		}
	}
	// normed is h under the norm the next layer opens with (past the last
	// layer, the final norm): each layer's last add makes it, as one kernel
	// on the GPU (nn.AddRMSNorm). Only the first segment, which
	// planSegments always opens at layer 0, norms a stream it did not add
	// to: the embeddings.
	var normed *mlx.Array
	if seg.finish >= 0 {
		ly := w.layers[seg.finish]
		h, normed = m.addMLP(ly, h, m.attentionOutput(ly.attn, in[0], in[1]), w.normAfter(seg.finish))
		in = in[2:]
		record(seg.finish)
	} else {
		normed = nn.RMSNorm(h, w.normAfter(-1), m.cfg.RMSNormEps)
	}
	for j, i := range seg.whole {
		ly := w.layers[i]
		x, st := m.deltaMix(ly.delta, normed, in[0], in[1], splits[j], rows)
		in = in[2:]
		h, normed = m.addMLP(ly, h, x, w.normAfter(i))
		record(i)
		states = flattenWrite(states, st, len(splits[j]), rows)
	}
	out := []*mlx.Array{h}
	if seg.next >= 0 {
		q, k, v, gate := m.attentionInputs(w.layers[seg.next].attn, normed)
		out = append(out, q, k, v, gate)
	} else {
		out = append(out, normed)
	}
	return append(append(out, taps...), states...)
}

// addMLP adds a layer's mixer output x to the residual stream h, then its
// MLP's output, and returns the stream and the stream under next, the norm
// that reads it next. Each add goes with the norm of its sum
// (nn.AddRMSNorm): the post-mixer norm, then next.
func (m *Model) addMLP(ly layerWeights, h, x, next *mlx.Array) (sum, normed *mlx.Array) {
	eps := m.cfg.RMSNormEps
	h, normed = nn.AddRMSNorm(h, m.reduce(x), ly.postNorm, eps)
	return nn.AddRMSNorm(h, m.reduce(ly.mlp.Forward(normed)), next, eps)
}

// normAfter is the weight of the norm the residual stream meets after layer
// i (-1: before the first layer): the next layer's input norm, or after the
// last layer the final norm.
func (w *weights) normAfter(i int) *mlx.Array {
	if i+1 < len(w.layers) {
		return w.layers[i+1].inputNorm
	}
	return w.norm
}

// A delta-net layer's write leaves a segment as arrays in this order: the
// tail and the state at the end; with n > 0 interior splits, then the
// window of pre-convolution rows and the interior states (the rows of every
// state when rows, else one array per split). flattenWrite appends them,
// flatWriteLen counts them and unflattenWrite reads them back.

func flattenWrite(out []*mlx.Array, w cache.RecurrentWrite, n int, rows bool) []*mlx.Array {
	out = append(out, w.Conv, w.Delta)
	if n == 0 {
		return out
	}
	out = append(out, w.ConvWindow)
	if rows {
		return append(out, w.DeltaRows)
	}
	return append(out, w.Deltas...)
}

func flatWriteLen(n int, rows bool) int {
	switch {
	case n == 0:
		return 2
	case rows:
		return 4
	}
	return 3 + n
}

// unflattenWrite returns the write at the front of out and the arrays after
// it.
func unflattenWrite(out []*mlx.Array, n int, rows bool) (cache.RecurrentWrite, []*mlx.Array) {
	w := cache.RecurrentWrite{Conv: out[0], Delta: out[1]}
	if n > 0 {
		w.ConvWindow = out[2]
		if rows {
			w.DeltaRows = out[3]
		} else {
			w.Deltas = out[3 : 3+n]
		}
	}
	return w, out[flatWriteLen(n, rows):]
}
