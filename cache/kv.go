package cache

import (
	"fmt"
	"slices"

	"github.com/specula-dev/specula/mlx"
)

// kvStep is the growth step of a KV cache in slots: growing copies the
// buffer, so it happens once per 256 tokens rather than on every write.
const kvStep = 256

// KV is the growing key/value cache of a full-attention layer
// (spec/speculation.md 3.2).
//
// Keys and values live in buffers [B, Hkv, capacity, D] whose capacity grows
// in steps of 256 slots; rows at or past Offset are stale and are overwritten
// by the next write, so a live rewind is free. Snapshots are lazy: a snapshot
// at offset o names the live rows [0, o) and holds no storage until a write
// is about to overwrite one of them (or the cache is freed), at which point
// the cache copies those rows out into the snapshot.
type KV struct {
	k, v   *mlx.Array // pinned buffers; nil before the first write
	offset int
	sched  schedule
	// lazy are the snapshots that still name live rows. Invariant: for
	// each s in lazy, rows [0, s.offset) of k and v hold the values they had
	// when s was captured.
	lazy []*kvSnapshot
}

// NewKV returns an empty KV cache; its shapes and dtype come from the first
// Update.
func NewKV() *KV { return &KV{} }

// Offset is the number of slots written.
func (c *KV) Offset() int { return c.offset }

// Capacity is the number of slots the buffers hold before they must grow.
func (c *KV) Capacity() int {
	if c.k == nil {
		return 0
	}
	return c.k.Dim(2)
}

// State returns the key and value buffers (none before the first write).
func (c *KV) State() []*mlx.Array {
	if c.k == nil {
		return nil
	}
	return []*mlx.Array{c.k, c.v}
}

// Update writes k and v [B, Hkv, L, D] at slots Offset … Offset+L−1 and
// returns the key and value history [B, Hkv, Offset+L, D] (slots 0 …
// Offset+L−1, oldest first). Snapshots scheduled at offsets this write
// reaches are captured.
func (c *KV) Update(k, v *mlx.Array) (kHist, vHist *mlx.Array) {
	if k.NDim() != 4 || !slices.Equal(k.Shape(), v.Shape()) {
		panic(fmt.Sprintf("cache: KV.Update wants keys and values [B, Hkv, L, D] of one shape, got %v and %v", k.Shape(), v.Shape()))
	}
	start, n := c.offset, k.Dim(2)
	end := start + n
	c.captureDue(start, start) // the state before this write (a zero-width lazy capture)
	c.copyOutAbove(start)      // rows [start, end) are about to change
	c.reserve(k, v, end)
	lo := []int{0, 0, start, 0}
	hi := []int{k.Dim(0), k.Dim(1), end, k.Dim(3)}
	c.k = replace(c.k, mlx.SliceUpdate(c.k, k, lo, hi))
	c.v = replace(c.v, mlx.SliceUpdate(c.v, v, lo, hi))
	c.offset = end
	c.captureDue(start+1, end)
	return c.history(end)
}

// history returns views of rows [0, end).
func (c *KV) history(end int) (k, v *mlx.Array) {
	return mlx.SliceAxis(c.k, 2, 0, end), mlx.SliceAxis(c.v, 2, 0, end)
}

// reserve makes the buffers hold at least end slots, allocating them on the
// first write and growing them in kvStep steps.
func (c *KV) reserve(k, v *mlx.Array, end int) {
	b, h, d := k.Dim(0), k.Dim(1), k.Dim(3)
	if c.k == nil {
		size := roundUp(end, kvStep)
		c.k = replace(nil, mlx.Zeros(k.DType(), b, h, size, d))
		c.v = replace(nil, mlx.Zeros(v.DType(), b, h, size, v.Dim(3)))
		return
	}
	if s := c.k.Shape(); s[0] != b || s[1] != h || s[3] != d || c.k.DType() != k.DType() {
		panic(fmt.Sprintf("cache: KV.Update got %v %s, but the cache holds %v %s", k.Shape(), k.DType(), s, c.k.DType()))
	}
	if capacity := c.k.Dim(2); end > capacity {
		grow := roundUp(end, kvStep) - capacity
		c.k = replace(c.k, mlx.Concatenate(2, c.k, mlx.Zeros(c.k.DType(), b, h, grow, d)))
		c.v = replace(c.v, mlx.Concatenate(2, c.v, mlx.Zeros(c.v.DType(), b, h, grow, c.v.Dim(3))))
	}
}

// PrepareSnapshots schedules captures at offsets (ascending, unique, each >=
// Offset). An offset equal to Offset is captured at once.
func (c *KV) PrepareSnapshots(offsets []int) {
	c.sched.prepare("KV", offsets, c.offset)
	c.captureDue(c.offset, c.offset)
}

// captureDue captures every scheduled offset in [lo, hi] not captured yet.
// All of them are at or below the current offset, so each is a lazy
// reference to live rows.
func (c *KV) captureDue(lo, hi int) {
	for _, i := range c.sched.due(lo, hi) {
		s := &kvSnapshot{cache: c, copies: copies{offset: c.sched.offsets[i]}}
		c.lazy = append(c.lazy, s)
		c.sched.snaps[i] = s
	}
}

// TakeSnapshots returns one snapshot per scheduled offset (nil where the
// cache never reached it) and clears the schedule.
func (c *KV) TakeSnapshots() []Snapshot { return c.sched.take() }

// Restore moves the cache to offset target. With s == nil it is a live
// rewind, possible for any 0 <= target <= Offset. With a snapshot of this
// cache it restores the rows the snapshot captured and sets the offset to
// target, which must not exceed the snapshot's offset.
func (c *KV) Restore(s Snapshot, target int) bool {
	if s == nil {
		if target < 0 || target > c.offset {
			return false
		}
		c.offset = target
		return true
	}
	ks, ok := s.(*kvSnapshot)
	if !ok || ks.cache != c || ks.closed || target < 0 || target > ks.offset {
		return false
	}
	if ks.k == nil {
		// Still lazy: rows [0, ks.offset) are untouched since the capture.
		c.offset = target
		return true
	}
	// Installing rewrites rows [0, ks.offset): every other lazy snapshot
	// must own its rows first.
	c.copyOutAbove(0)
	c.reserve(ks.k, ks.v, ks.offset)
	lo := []int{0, 0, 0, 0}
	hi := []int{ks.k.Dim(0), ks.k.Dim(1), ks.offset, ks.k.Dim(3)}
	c.k = replace(c.k, mlx.SliceUpdate(c.k, ks.k, lo, hi))
	c.v = replace(c.v, mlx.SliceUpdate(c.v, ks.v, lo, hi))
	c.offset = target
	return true
}

// copyOutAbove gives every lazy snapshot whose rows reach past slot from its
// own copy of those rows (a write at from is about to overwrite them).
func (c *KV) copyOutAbove(from int) {
	kept := c.lazy[:0]
	for _, s := range c.lazy {
		if s.offset <= from {
			kept = append(kept, s)
			continue
		}
		k, v := c.history(s.offset)
		s.k, s.v = clone(k), clone(v)
		mlx.Pin(s.k, s.v)
	}
	clear(c.lazy[len(kept):])
	c.lazy = kept
}

// Free releases the buffers. Lazy snapshots are copied out first, so they
// stay usable.
func (c *KV) Free() {
	c.copyOutAbove(0)
	if c.k != nil {
		mlx.Unpin(c.k, c.v)
	}
	c.k, c.v, c.offset = nil, nil, 0
}

// forget removes s from the lazy list.
func (c *KV) forget(s *kvSnapshot) {
	if i := slices.Index(c.lazy, s); i >= 0 {
		c.lazy = slices.Delete(c.lazy, i, i+1)
	}
}

// kvSnapshot is a KV cache's state at one offset: rows [0, offset). While k
// is nil it is lazy and names the cache's live rows.
type kvSnapshot struct {
	cache *KV
	copies
}

func (s *kvSnapshot) Close() {
	if s.release() {
		s.cache.forget(s)
	}
}
