package speculation

import (
	"fmt"
	"slices"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/sample"
)

// The fakes of spec/speculation.md section 11, written for our API: a tiny
// vocabulary, a scripted successor map, caches that record the token stream
// fed into them, and a target and drafts that record every call.

const fakeVocab = 8

// hotValue makes a one-hot row decisive at temperature 1 (e^-30 ≈ 0 in float32).
const hotValue = 30

// oneHot returns float32 [1, n, fakeVocab] with hotValue at (r, ids[r]).
func oneHot(ids []int32) *mlx.Array {
	v := make([]float32, len(ids)*fakeVocab)
	for r, id := range ids {
		v[r*fakeVocab+int(id)] = hotValue
	}
	return mlx.FromFloat32s(v, 1, len(ids), fakeVocab)
}

// hotIndices reads back the first non-zero index of each row of x [1, n, V]
// (-1 for an all-zero row).
func hotIndices(x *mlx.Array) []int32 {
	v, err := x.Float32s()
	if err != nil {
		panic(err)
	}
	vocab := x.Dim(-1)
	out := make([]int32, len(v)/vocab)
	for r := range out {
		out[r] = -1
		for j := range vocab {
			if v[r*vocab+j] != 0 {
				out[r] = int32(j)
				break
			}
		}
	}
	return out
}

func ints(x *mlx.Array) []int32 {
	v, err := x.Int32s()
	if err != nil {
		panic(err)
	}
	return v
}

// recordingCache keeps the stream of token ids fed into it; Offset is its
// length. Snapshot scheduling follows the production contract.
type recordingCache struct {
	tokens    []int32
	scheduled []int
	pending   bool
}

type marker struct{ offset int }

func (m *marker) Offset() int            { return m.offset }
func (m *marker) Size() int64            { return 0 }
func (m *marker) Close()                 {}
func (c *recordingCache) feed(t []int32) { c.tokens = append(c.tokens, t...) }

func (c *recordingCache) Offset() int         { return len(c.tokens) }
func (c *recordingCache) State() []*mlx.Array { return nil }
func (c *recordingCache) Free()               {}
func (c *recordingCache) PrepareSnapshots(offsets []int) {
	if c.pending {
		panic("recordingCache: PrepareSnapshots with an undrained schedule")
	}
	for i, o := range offsets {
		if o < c.Offset() || (i > 0 && o <= offsets[i-1]) {
			panic(fmt.Sprintf("recordingCache: bad schedule %v at offset %d", offsets, c.Offset()))
		}
	}
	c.scheduled = append([]int(nil), offsets...)
	c.pending = true
}

func (c *recordingCache) TakeSnapshots() []cache.Snapshot {
	out := make([]cache.Snapshot, len(c.scheduled))
	for i, o := range c.scheduled {
		if o <= c.Offset() {
			out[i] = &marker{o}
		}
	}
	c.scheduled, c.pending = nil, false
	return out
}

func (c *recordingCache) Restore(s cache.Snapshot, target int) bool {
	if target < 0 || target > c.Offset() {
		return false
	}
	if s != nil && s.Offset() != target {
		return false
	}
	c.tokens = c.tokens[:target]
	return true
}

// newCaches returns the target's (index 0) and the draft's (index 1) caches.
func newCaches() []cache.Cache {
	return []cache.Cache{&recordingCache{}, &recordingCache{}}
}

func streamOf(c cache.Cache) []int32 { return c.(*recordingCache).tokens }

type forwardCall struct{ offset, n int }

// fakeTarget: every row's output is one-hot of succ[id], as hidden and aux.
type fakeTarget struct {
	succ     map[int32]int32
	forwards []forwardCall
}

func (m *fakeTarget) LoadWeights(map[string]*mlx.Array) error { return nil }
func (m *fakeTarget) NewCaches() []cache.Cache                { return nil }
func (m *fakeTarget) Info() model.Info {
	return model.Info{HiddenSize: fakeVocab, VocabSize: fakeVocab, NumLayers: 1}
}
func (m *fakeTarget) Unembed(h *mlx.Array) *mlx.Array { return h }
func (m *fakeTarget) Forward(b *model.Batch, caches []cache.Cache) (*mlx.Array, *mlx.Array) {
	ids := ints(b.InputIDs)
	m.forwards = append(m.forwards, forwardCall{b.SeqOffsets[0], len(ids)})
	caches[0].(*recordingCache).feed(ids)
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = m.succ[id]
	}
	h := oneHot(out)
	return h, h
}

// blockCall is one recorded draft call.
type blockCall struct {
	offset int
	ctx    []int32 // hot index of each context row; nil without context
	block  []int32 // block ids; nil for a context-only call
}

func (c blockCall) String() string {
	return fmt.Sprintf("{%d ctx %v block %v}", c.offset, c.ctx, c.block)
}

func (c blockCall) equal(o blockCall) bool {
	return c.offset == o.offset && slices.Equal(c.ctx, o.ctx) && slices.Equal(c.block, o.block)
}

// fakeBlockDraft: row 0 restates the anchor, row i the successor of row i−1.
type fakeBlockDraft struct {
	succ      map[int32]int32
	blockSize int
	calls     []blockCall
	// hot, when set, is the logit of block row i+1's prediction (hotValue
	// otherwise): it sets how sure the draft is of its i-th draft.
	hot []float32
}

func (d *fakeBlockDraft) LoadWeights(map[string]*mlx.Array) error { return nil }
func (d *fakeBlockDraft) NewCaches() []cache.Cache                { return nil }
func (d *fakeBlockDraft) BlockParams() (int, int32)               { return d.blockSize, 6 }
func (d *fakeBlockDraft) Unembed(h *mlx.Array) *mlx.Array         { return h }
func (d *fakeBlockDraft) Forward(b *model.Batch, _, draftCaches []cache.Cache) (*mlx.Array, *mlx.Array) {
	call := blockCall{offset: b.SeqOffsets[0]}
	if b.Hidden != nil {
		call.ctx = hotIndices(b.Hidden)
	}
	if b.InputIDs != nil {
		call.block = ints(b.InputIDs)
	}
	d.calls = append(d.calls, call)
	rc := draftCaches[0].(*recordingCache)
	rc.feed(call.ctx)
	rc.feed(call.block)
	if call.block == nil {
		return nil, nil
	}
	preds := make([]int32, len(call.block))
	preds[0] = call.block[0]
	for i := 1; i < len(preds); i++ {
		preds[i] = d.succ[preds[i-1]]
	}
	h := oneHot(preds)
	if d.hot != nil {
		h = hotRows(preds, d.hot)
	}
	return h, h
}

// hotRows is oneHot(ids) with row r+1's hot logit hot[r] (rows past hot
// keep hotValue).
func hotRows(ids []int32, hot []float32) *mlx.Array {
	v := make([]float32, len(ids)*fakeVocab)
	for r, id := range ids {
		x := float32(hotValue)
		if r >= 1 && r-1 < len(hot) {
			x = hot[r-1]
		}
		v[r*fakeVocab+int(id)] = x
	}
	return mlx.FromFloat32s(v, 1, len(ids), fakeVocab)
}

// fakeSelector adds Select: candidates [unary, 0] with scores [0, 2] in
// every row, one Choose call for all rows; its learned score prefers token 0.
type fakeSelector struct{ *fakeBlockDraft }

func (d *fakeSelector) Select(_, logits, _ *mlx.Array, choose model.ChooseFunc) (tokens, ids, probs *mlx.Array) {
	n := logits.Dim(1)
	unary := mlx.AsType(mlx.Reshape(mlx.Argmax(logits, -1, false), n, 1), mlx.Int32)
	ids = mlx.Concatenate(1, unary, mlx.Zeros(mlx.Int32, n, 1))
	scores := mlx.BroadcastTo(mlx.FromFloat32s([]float32{0, 2}, 1, 2), n, 2)
	tokens, probs = choose(ids, scores)
	return mlx.Reshape(tokens, 1, n), mlx.Reshape(ids, 1, n, 2), mlx.Reshape(probs, 1, n, 2)
}

var (
	_ model.Model      = (*fakeTarget)(nil)
	_ model.BlockDraft = (*fakeBlockDraft)(nil)
	_ model.Selector   = (*fakeSelector)(nil)
)

// rig is one test's wiring: a core over the fake target with the draft (if
// any) and both recording caches.
type rig struct {
	target  *fakeTarget
	draft   *fakeBlockDraft
	caches  []cache.Cache
	drafter *BlockDrafter
	core    *Core
}

// newRig builds a core; sel makes the draft a selector (declared).
func newRig(succ map[int32]int32, blockSize int, sel bool, eos ...int32) *rig {
	r := &rig{target: &fakeTarget{succ: succ}, caches: newCaches()}
	cfg := Config{Target: r.target, TargetCaches: r.caches[:1], EOS: eos}
	if blockSize > 0 {
		r.draft = &fakeBlockDraft{succ: succ, blockSize: blockSize}
		var bd model.BlockDraft = r.draft
		if sel {
			bd = &fakeSelector{r.draft}
		}
		r.drafter = NewBlockDrafter(bd, r.caches[:1], r.caches[1:], sel)
		cfg.Drafter = r.drafter
	}
	r.core = NewCore(cfg)
	return r
}

// session opens a draft session directly (greedy unless opts says otherwise).
func (r *rig) session(opts sample.Options) *blockSession {
	return r.drafter.Open(sample.New(opts, nil)).(*blockSession)
}

func checkCalls(t *mlxtest.T, got []blockCall, want ...blockCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("draft calls %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].equal(want[i]) {
			t.Fatalf("draft call %d = %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
}

func ids(v ...int32) *mlx.Array { return mlx.FromInt32s(v, 1, len(v)) }
