package cache

import (
	"fmt"
	"slices"

	"github.com/specula-dev/specula/mlx"
)

// Rotating is the key/value cache of a sliding-window attention layer with
// window W (spec/speculation.md 3.3).
//
// A single-row write goes into a ring of W rows, overwriting the oldest. A
// batched write (L > 1) first puts the rows in time order, keeps only the
// newest W−1 of them and appends all L new rows, so the buffer may briefly
// hold more than W rows; the next single-row write trims it back to W.
//
// The cache only bounds the past: every row it returns may be visible to
// some query of the write. A query at slot P may see the key at slot k only
// if k >= P−W+1; causality (k <= P) is the layer's business. Update returns
// the absolute slot of every key row so the layer can build its mask.
//
// Layout invariant: the buffer's first used rows hold the consecutive slots
// Offset−used … Offset−1, rotated by ring: physical row i holds slot
// Offset−used + (i−ring) mod used. ring is 0 except while a full ring has
// wrapped in place. The rows always include the newest min(Offset, W−1)
// slots, which is what the next query needs.
type Rotating struct {
	window int
	k, v   *mlx.Array // pinned buffers [B, H, capacity, D]; nil before the first write
	used   int        // rows of the buffers holding keys
	ring   int        // physical row of the oldest slot
	offset int
	sched  schedule
	// lazy are snapshots that still name live rows: rows [row, row+n) of
	// the current buffers, which are in time order. Every write, install
	// and Free copies them out first.
	lazy []*rotSnapshot
}

// NewRotating returns an empty rotating cache with window w (> 0).
func NewRotating(w int) *Rotating {
	if w <= 0 {
		panic(fmt.Sprintf("cache: NewRotating(%d): the window must be positive", w))
	}
	return &Rotating{window: w}
}

// Window is W.
func (c *Rotating) Window() int { return c.window }

// Offset is the number of slots written.
func (c *Rotating) Offset() int { return c.offset }

// State returns the key and value buffers (none before the first write).
func (c *Rotating) State() []*mlx.Array {
	if c.k == nil {
		return nil
	}
	return []*mlx.Array{c.k, c.v}
}

// wrapped reports whether some slot below Offset is no longer held, which is
// when a live rewind becomes impossible.
func (c *Rotating) wrapped() bool { return c.used < c.offset }

// slots returns the absolute slot of each used physical row.
func (c *Rotating) slots() []int {
	out := make([]int, c.used)
	first := c.offset - c.used
	for i := range out {
		out[i] = first + ((i-c.ring)%c.used+c.used)%c.used
	}
	return out
}

// Update writes k and v [B, H, L, D] at slots Offset … Offset+L−1. It
// returns the key and value rows the queries of this write may need, and the
// absolute slot of each returned row (not necessarily in order after the ring
// has wrapped). Rows older than P−W+1 for a query at P may be among them:
// the layer masks by slot.
func (c *Rotating) Update(k, v *mlx.Array) (kHist, vHist *mlx.Array, slots []int) {
	if k.NDim() != 4 || !slices.Equal(k.Shape(), v.Shape()) {
		panic(fmt.Sprintf("cache: Rotating.Update wants keys and values [B, H, L, D] of one shape, got %v and %v", k.Shape(), v.Shape()))
	}
	if c.k != nil {
		if s := c.k.Shape(); s[0] != k.Dim(0) || s[1] != k.Dim(1) || s[3] != k.Dim(3) || c.k.DType() != k.DType() {
			panic(fmt.Sprintf("cache: Rotating.Update got %v %s, but the cache holds %v %s", k.Shape(), k.DType(), s, c.k.DType()))
		}
	}
	start, n := c.offset, k.Dim(2)
	c.copyOut()
	for _, i := range c.sched.due(start, start) {
		c.sched.snaps[i] = c.cloneWindow() // the window before this write
	}
	if n == 1 {
		c.writeOne(k, v)
	} else {
		c.writeMany(k, v)
	}
	for _, i := range c.sched.due(start+1, start+n) {
		o := c.sched.offsets[i]
		if n == 1 {
			c.sched.snaps[i] = c.cloneWindow()
			continue
		}
		// Interior or end of a batched write: the buffer is in time order,
		// so the window ending at o is a plain range of rows.
		rows := min(o, c.window)
		s := &rotSnapshot{cache: c, copies: copies{offset: o}, rows: rows, row: o - rows - (c.offset - c.used)}
		c.lazy = append(c.lazy, s)
		c.sched.snaps[i] = s
	}
	return mlx.SliceAxis(c.k, 2, 0, c.used), mlx.SliceAxis(c.v, 2, 0, c.used), c.slots()
}

// writeOne writes one row into the ring.
func (c *Rotating) writeOne(k, v *mlx.Array) {
	w := c.window
	if c.used > w {
		// After a batched write: keep the newest W−1 rows (the buffer is
		// in time order) and append, which fills the ring exactly.
		c.setBuffers(
			mlx.Concatenate(2, mlx.SliceAxis(c.k, 2, c.used-(w-1), c.used), k),
			mlx.Concatenate(2, mlx.SliceAxis(c.v, 2, c.used-(w-1), c.used), v))
		c.used, c.ring = w, 0
		c.offset++
		return
	}
	if c.used == w {
		// Full ring: overwrite the oldest row.
		c.put(k, v, c.ring)
		c.ring = (c.ring + 1) % w
		c.offset++
		return
	}
	// Not full yet (and so in time order): append, growing the buffer in
	// kvStep steps up to W rows.
	if c.k == nil || c.k.Dim(2) == c.used {
		size := min(w, roundUp(c.used+1, kvStep))
		b, h, d := k.Dim(0), k.Dim(1), k.Dim(3)
		if c.k == nil {
			c.setBuffers(mlx.Zeros(k.DType(), b, h, size, d), mlx.Zeros(v.DType(), b, h, size, d))
		} else {
			grow := size - c.k.Dim(2)
			c.setBuffers(
				mlx.Concatenate(2, c.k, mlx.Zeros(k.DType(), b, h, grow, d)),
				mlx.Concatenate(2, c.v, mlx.Zeros(v.DType(), b, h, grow, d)))
		}
	}
	c.put(k, v, c.used)
	c.used++
	c.offset++
}

// writeMany appends L > 1 rows after the newest W−1 old rows.
func (c *Rotating) writeMany(k, v *mlx.Array) {
	keep := min(c.used, c.window-1)
	if keep == 0 {
		// Own handles (views), so the caller may free k and v.
		n := k.Dim(2)
		c.setBuffers(mlx.SliceAxis(k, 2, 0, n), mlx.SliceAxis(v, 2, 0, n))
	} else {
		ok, ov := c.linear()
		c.setBuffers(
			mlx.Concatenate(2, mlx.SliceAxis(ok, 2, c.used-keep, c.used), k),
			mlx.Concatenate(2, mlx.SliceAxis(ov, 2, c.used-keep, c.used), v))
	}
	c.used, c.ring = keep+k.Dim(2), 0
	c.offset += k.Dim(2)
}

// linear returns the used rows in time order (views when already ordered).
func (c *Rotating) linear() (k, v *mlx.Array) {
	if c.ring == 0 {
		return mlx.SliceAxis(c.k, 2, 0, c.used), mlx.SliceAxis(c.v, 2, 0, c.used)
	}
	r, u := c.ring, c.used
	return mlx.Concatenate(2, mlx.SliceAxis(c.k, 2, r, u), mlx.SliceAxis(c.k, 2, 0, r)),
		mlx.Concatenate(2, mlx.SliceAxis(c.v, 2, r, u), mlx.SliceAxis(c.v, 2, 0, r))
}

// put writes one row at physical row i.
func (c *Rotating) put(k, v *mlx.Array, i int) {
	lo := []int{0, 0, i, 0}
	hi := []int{k.Dim(0), k.Dim(1), i + 1, k.Dim(3)}
	c.setBuffers(mlx.SliceUpdate(c.k, k, lo, hi), mlx.SliceUpdate(c.v, v, lo, hi))
}

func (c *Rotating) setBuffers(k, v *mlx.Array) {
	c.k = replace(c.k, k)
	c.v = replace(c.v, v)
}

// cloneWindow copies the window ending at the current offset: the newest
// min(Offset, W) slots, in time order.
func (c *Rotating) cloneWindow() *rotSnapshot {
	rows := min(c.offset, c.window)
	s := &rotSnapshot{cache: c, copies: copies{offset: c.offset}, rows: rows}
	if rows > 0 {
		k, v := c.linear()
		s.k = clone(mlx.SliceAxis(k, 2, c.used-rows, c.used))
		s.v = clone(mlx.SliceAxis(v, 2, c.used-rows, c.used))
		mlx.Pin(s.k, s.v)
	}
	return s
}

// PrepareSnapshots schedules captures at offsets (ascending, unique, each >=
// Offset). Captures happen as writes reach them: at a write's start a full
// clone of the window, at an interior or end offset of a batched write a
// lazy range of the buffer, at the end of a single-row write a clone.
func (c *Rotating) PrepareSnapshots(offsets []int) {
	c.sched.prepare("Rotating", offsets, c.offset)
}

// TakeSnapshots returns one snapshot per scheduled offset (nil where no
// write reached it: the cache still sits at or before that offset) and
// clears the schedule.
func (c *Rotating) TakeSnapshots() []Snapshot { return c.sched.take() }

// Restore moves the cache to offset target.
//
// s == nil: a live rewind, possible while the cache has never wrapped (it
// still holds every slot from 0), and always for target == Offset.
//
// s != nil: installs s and sets the offset to target. target must equal the
// snapshot's offset, or be below it only when that offset is <= W (so the
// snapshot holds every slot from 0); a shorter window would be incomplete
// and is rejected.
func (c *Rotating) Restore(s Snapshot, target int) bool {
	if s == nil {
		if target == c.offset {
			return true
		}
		if target < 0 || target > c.offset || c.wrapped() {
			return false
		}
		// Never wrapped: the rows are slots 0 … Offset−1 in order.
		c.used, c.offset = target, target
		return true
	}
	rs, ok := s.(*rotSnapshot)
	if !ok || rs.cache != c || rs.closed || target < 0 || target > rs.offset {
		return false
	}
	if target < rs.offset && rs.offset > c.window {
		return false
	}
	drop := rs.offset - target // newest rows of the window not kept
	if rs.k == nil && rs.rows > 0 {
		if slices.Contains(c.lazy, rs) {
			// Still lazy: rows [row, row+rows) of the ordered buffer are
			// the window; cutting the buffer after them restores it.
			c.used = rs.row + rs.rows - drop
			c.offset = target
			return true
		}
	}
	c.copyOut()
	if rs.rows-drop == 0 {
		c.used, c.ring, c.offset = 0, 0, target
		return true
	}
	c.setBuffers(mlx.SliceAxis(rs.k, 2, 0, rs.rows-drop), mlx.SliceAxis(rs.v, 2, 0, rs.rows-drop))
	c.used, c.ring, c.offset = rs.rows-drop, 0, target
	return true
}

// copyOut gives every lazy snapshot its own copy of its rows.
func (c *Rotating) copyOut() {
	for _, s := range c.lazy {
		s.k = clone(mlx.SliceAxis(c.k, 2, s.row, s.row+s.rows))
		s.v = clone(mlx.SliceAxis(c.v, 2, s.row, s.row+s.rows))
		mlx.Pin(s.k, s.v)
	}
	clear(c.lazy)
	c.lazy = c.lazy[:0]
}

// Free releases the buffers. Lazy snapshots are copied out first.
func (c *Rotating) Free() {
	c.copyOut()
	if c.k != nil {
		mlx.Unpin(c.k, c.v)
	}
	c.k, c.v = nil, nil
	c.used, c.ring, c.offset = 0, 0, 0
}

func (c *Rotating) forget(s *rotSnapshot) {
	if i := slices.Index(c.lazy, s); i >= 0 {
		c.lazy = slices.Delete(c.lazy, i, i+1)
	}
}

// rotSnapshot is the window ending at offset: the newest rows = min(offset,
// W) slots in time order. While k is nil and rows > 0 it is lazy: rows
// [row, row+rows) of the cache's ordered buffer.
type rotSnapshot struct {
	cache  *Rotating
	rows   int
	row    int
	copies // k, v: pinned copies [B, H, rows, D] once copied out
}

func (s *rotSnapshot) Close() {
	if s.release() {
		s.cache.forget(s)
	}
}
