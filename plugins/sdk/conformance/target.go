package conformance

import (
	"fmt"
	"math/rand/v2"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// Target describes the fake target a conformance run pairs the draft with:
// a Markov model whose next-token logits depend only on the current token,
// and whose feature rows are a fixed random embedding of the token (one copy
// per layer tap the draft asks for).
type Target struct {
	// Vocab, Hidden and Layers are its sizes (defaults 16, 8, 4).
	Vocab, Hidden, Layers int
	// Seed picks its tables.
	Seed uint64
}

func (t Target) withDefaults() Target {
	if t.Vocab <= 0 {
		t.Vocab = 16
	}
	if t.Hidden <= 0 {
		t.Hidden = 8
	}
	if t.Layers <= 0 {
		t.Layers = 4
	}
	return t
}

// FakeTarget is the model.DraftTarget a conformance run uses; plugin tests
// may use it too. Its caches record the token stream.
type FakeTarget struct {
	spec   Target
	logits [][]float32 // [V][V]
	embed  [][]float32 // [V][H]
	taps   []int
}

// NewFakeTarget builds the target t describes.
func NewFakeTarget(t Target) *FakeTarget {
	t = t.withDefaults()
	r := rand.New(rand.NewPCG(t.Seed, 11))
	f := &FakeTarget{spec: t, logits: make([][]float32, t.Vocab), embed: make([][]float32, t.Vocab)}
	for i := range t.Vocab {
		f.logits[i] = make([]float32, t.Vocab)
		for j := range f.logits[i] {
			f.logits[i][j] = 3 * float32(r.NormFloat64())
		}
		f.embed[i] = make([]float32, t.Hidden)
		for j := range f.embed[i] {
			f.embed[i][j] = float32(r.NormFloat64())
		}
	}
	return f
}

var _ model.DraftTarget = (*FakeTarget)(nil)

// GreedyNext is the target's greedy successor of id.
func (f *FakeTarget) GreedyNext(id int32) int32 {
	best := 0
	for j, x := range f.logits[id] {
		if x > f.logits[id][best] {
			best = j
		}
	}
	return int32(best)
}

func (f *FakeTarget) LoadWeights(map[string]*mlx.Array) error { return nil }

// NewCaches returns one recording cache.
func (f *FakeTarget) NewCaches() []cache.Cache { return []cache.Cache{&RecordingCache{}} }

func (f *FakeTarget) Info() model.Info {
	return model.Info{HiddenSize: f.spec.Hidden, VocabSize: f.spec.Vocab, NumLayers: f.spec.Layers}
}

func (f *FakeTarget) NumLayers() int { return f.spec.Layers }

func (f *FakeTarget) SetLayerTaps(ids []int) error {
	for i, id := range ids {
		if id < 0 || id >= f.spec.Layers || (i > 0 && id <= ids[i-1]) {
			return fmt.Errorf("fake target: bad layer taps %v", ids)
		}
	}
	f.taps = append([]int(nil), ids...)
	return nil
}

// Forward returns the logits rows as hidden and the feature rows as aux.
func (f *FakeTarget) Forward(b *model.Batch, caches []cache.Cache) (*mlx.Array, *mlx.Array) {
	ids, err := b.InputIDs.Int32s()
	if err != nil {
		panic(err)
	}
	caches[0].(*RecordingCache).Tokens = append(caches[0].(*RecordingCache).Tokens, ids...)
	copies := max(1, len(f.taps))
	var lv, fv []float32
	for _, id := range ids {
		lv = append(lv, f.logits[id]...)
		for range copies {
			fv = append(fv, f.embed[id]...)
		}
	}
	n := len(ids)
	return mlx.FromFloat32s(lv, 1, n, f.spec.Vocab), mlx.FromFloat32s(fv, 1, n, copies*f.spec.Hidden)
}

func (f *FakeTarget) Unembed(h *mlx.Array) *mlx.Array { return h }

func (f *FakeTarget) TokenEmbeddings(ids *mlx.Array) *mlx.Array {
	var v []float32
	for _, row := range f.embed {
		v = append(v, row...)
	}
	return mlx.Take(mlx.FromFloat32s(v, f.spec.Vocab, f.spec.Hidden), ids, 0)
}

func (f *FakeTarget) RawLogits(h *mlx.Array) *mlx.Array { return h }

// RecordingCache is a fake cache.Cache that keeps the token stream fed into
// it (Offset is its length); snapshots follow the cache contract (a snapshot
// is a marker of its offset). Fakes feed it with Feed.
type RecordingCache struct {
	// Tokens is the stream.
	Tokens    []int32
	scheduled []int
}

type marker int

func (m marker) Offset() int { return int(m) }
func (m marker) Size() int64 { return 0 }
func (m marker) Close()      {}

func (c *RecordingCache) Offset() int         { return len(c.Tokens) }
func (c *RecordingCache) State() []*mlx.Array { return nil }
func (c *RecordingCache) Free()               {}
func (c *RecordingCache) PrepareSnapshots(offsets []int) {
	c.scheduled = append([]int(nil), offsets...)
}

func (c *RecordingCache) TakeSnapshots() []cache.Snapshot {
	out := make([]cache.Snapshot, len(c.scheduled))
	for i, o := range c.scheduled {
		if o <= c.Offset() {
			out[i] = marker(o)
		}
	}
	c.scheduled = nil
	return out
}

func (c *RecordingCache) Restore(s cache.Snapshot, target int) bool {
	if target < 0 || target > c.Offset() {
		return false
	}
	c.Tokens = c.Tokens[:target]
	return true
}

// Feed appends tokens to the stream.
func (c *RecordingCache) Feed(tokens ...int32) { c.Tokens = append(c.Tokens, tokens...) }
