package engine

import (
	"slices"

	"github.com/specula-dev/specula/cache"
)

// maxCheckpoints bounds the checkpoints a prompt cache keeps besides its
// byte budget: a chat needs about three (the shared system prompt, the start
// of the last message, the end of the last prompt), and every kept one
// lengthens the scan of each request a little.
const maxCheckpoints = 8

// promptCache keeps one engine's target and draft caches between requests,
// so that a request whose prompt starts with what they hold (a chat's next
// turn, a regenerated answer, another chat with the same system prompt)
// writes only the rest of its prompt.
//
// A KV cache can be cut back to any shorter prefix in place, but a recurrent
// (gated delta-net) state cannot: it can only be replaced by a state captured
// at exactly that offset. So besides the live caches the prompt cache keeps
// checkpoints: snapshots of every cache taken at chosen offsets while a
// prompt was written (the end of the prompt, and the message boundaries the
// request names). A request resumes from the live caches when they hold a
// prefix of its prompt, else from the longest checkpoint that does.
//
// Invariant (one chain, no branches): the live caches hold tokens
// (len(tokens) is their offset), and every checkpoint is a state of those
// same caches at an offset <= len(tokens) whose tokens are
// tokens[:offset]. A request that diverges from tokens at l drops the
// checkpoints past l before it writes, so no write ever lands below a kept
// checkpoint (KV snapshots then stay free references to live rows).
//
// All methods run on the MLX worker.
type promptCache struct {
	// budget bounds the bytes the checkpoints hold (a recurrent snapshot
	// holds its whole state; KV snapshots hold nothing while they are
	// references to live rows).
	budget int64

	target, draft []cache.Cache // live caches; nil when none are kept
	tokens        []int32       // what the live caches hold
	marks         []*checkpoint // ascending offsets
	clock         uint64        // last-use stamps for eviction
}

// checkpoint is every cache's state at one offset.
type checkpoint struct {
	offset int
	snaps  []cache.Snapshot // target caches then draft caches; nil entries where a cache captured nothing
	used   uint64
}

func (m *checkpoint) close() {
	for _, s := range m.snaps {
		if s != nil {
			s.Close()
		}
	}
	m.snaps = nil
}

func (m *checkpoint) size() int64 {
	var n int64
	for _, s := range m.snaps {
		if s != nil {
			n += s.Size()
		}
	}
	return n
}

// all returns the target caches then the draft caches.
func (p *promptCache) all() []cache.Cache { return slices.Concat(p.target, p.draft) }

// acquire returns caches for prompt, holding prompt[:resumed] with resumed
// <= len(prompt)−1 (the last prompt token is the decode seed, written by
// the first decoding round). newCaches makes fresh target and draft caches
// when nothing can be reused.
func (p *promptCache) acquire(prompt []int32, newCaches func() (target, draft []cache.Cache)) (target, draft []cache.Cache, resumed int) {
	if p.target == nil {
		p.target, p.draft = newCaches()
		p.tokens = p.tokens[:0]
		return p.target, p.draft, 0
	}
	body := prompt[:len(prompt)-1]
	l := commonPrefix(p.tokens, body)
	p.dropMarks(func(m *checkpoint) bool { return m.offset > l })
	if len(p.tokens) <= l {
		return p.target, p.draft, len(p.tokens) // the live caches hold a prefix
	}
	if len(p.marks) == 0 {
		p.reset()
		return p.acquire(prompt, newCaches)
	}
	m := p.marks[len(p.marks)-1] // the longest checkpoint left is a prefix of body
	for i, c := range p.all() {
		if c == nil || c.Restore(nil, m.offset) {
			continue
		}
		if s := m.snaps[i]; s == nil || !c.Restore(s, m.offset) {
			// Only a broken cache implementation gets here; start cold
			// rather than write over a half-restored state.
			p.reset()
			return p.acquire(prompt, newCaches)
		}
	}
	p.tokens = p.tokens[:m.offset]
	p.clock++
	m.used = p.clock
	return p.target, p.draft, m.offset
}

// schedule asks every cache to capture its state at the offsets in want that
// no checkpoint holds yet, and returns the offsets scheduled (ascending).
// offsets below the caches' offset are skipped. Every schedule must be ended
// by take before the caches are written speculatively.
func (p *promptCache) schedule(want []int) []int {
	cur := len(p.tokens)
	var offsets []int
	for _, o := range want {
		if o <= 0 || o < cur || slices.ContainsFunc(p.marks, func(m *checkpoint) bool { return m.offset == o }) {
			continue
		}
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)
	offsets = slices.Compact(offsets)
	if len(offsets) == 0 {
		return nil
	}
	for _, c := range p.all() {
		if c != nil {
			c.PrepareSnapshots(offsets)
		}
	}
	return offsets
}

// take ends a schedule after the prompt was written: the offsets the caches
// reached (reached, their offset now) become checkpoints; the snapshots of
// the others are closed.
func (p *promptCache) take(offsets []int, reached int) {
	if len(offsets) == 0 {
		return
	}
	caches := p.all()
	marks := make([]*checkpoint, len(offsets))
	for i, o := range offsets {
		marks[i] = &checkpoint{offset: o, snaps: make([]cache.Snapshot, len(caches))}
	}
	for ci, c := range caches {
		if c == nil {
			continue
		}
		for i, s := range c.TakeSnapshots() {
			marks[i].snaps[ci] = s
		}
	}
	for _, m := range marks {
		if m.offset > reached {
			m.close()
			continue
		}
		p.clock++
		m.used = p.clock
		p.marks = append(p.marks, m)
	}
	slices.SortFunc(p.marks, func(a, b *checkpoint) int { return a.offset - b.offset })
}

// release ends a request. seq is every token the request's caches may hold
// in order (the prompt, then every decoded token); ok is false when the
// request failed in a way that may have left the caches inconsistent, which
// drops everything. Otherwise the caches are kept, holding seq[:offset].
func (p *promptCache) release(seq []int32, ok bool) {
	if !ok {
		p.reset()
		return
	}
	offset := -1
	for _, c := range p.all() {
		if c == nil {
			continue
		}
		if offset < 0 {
			offset = c.Offset()
		}
		if c.Offset() != offset {
			p.reset() // the draft is not level with the target
			return
		}
	}
	if offset < 0 || offset > len(seq) {
		p.reset()
		return
	}
	p.tokens = append(p.tokens[:0], seq[:offset]...)
	p.dropMarks(func(m *checkpoint) bool { return m.offset > offset })
	p.evict()
}

// evict drops the least recently used checkpoints until at most
// maxCheckpoints remain and they fit the byte budget.
func (p *promptCache) evict() {
	for len(p.marks) > 0 {
		var total int64
		oldest := 0
		for i, m := range p.marks {
			total += m.size()
			if m.used < p.marks[oldest].used {
				oldest = i
			}
		}
		if len(p.marks) <= maxCheckpoints && total <= p.budget {
			return
		}
		p.marks[oldest].close()
		p.marks = slices.Delete(p.marks, oldest, oldest+1)
	}
}

// dropMarks closes and removes the checkpoints drop selects.
func (p *promptCache) dropMarks(drop func(*checkpoint) bool) {
	p.marks = slices.DeleteFunc(p.marks, func(m *checkpoint) bool {
		if drop(m) {
			m.close()
			return true
		}
		return false
	})
}

// reset frees the caches and every checkpoint.
func (p *promptCache) reset() {
	p.dropMarks(func(*checkpoint) bool { return true })
	for _, c := range p.all() {
		if c != nil {
			c.Free()
		}
	}
	p.target, p.draft, p.tokens = nil, nil, p.tokens[:0]
}

// stats reports what the cache holds: tokens in the live caches, checkpoints
// and their bytes.
func (p *promptCache) stats() (tokens, checkpoints int, bytes int64) {
	for _, m := range p.marks {
		bytes += m.size()
	}
	return len(p.tokens), len(p.marks), bytes
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
