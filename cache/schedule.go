package cache

import (
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// schedule is the capture bookkeeping every cache kind shares: the offsets
// asked for by PrepareSnapshots and what was captured at each.
//
// Invariant: while active, snaps[i] is nil until the cache first reaches
// offsets[i]; a capture is never replaced (the snapshot is the state the
// cache had when it first reached that offset after PrepareSnapshots).
type schedule struct {
	active  bool
	offsets []int
	snaps   []Snapshot
}

// prepare starts a schedule. kind names the cache in panic messages.
func (s *schedule) prepare(kind string, offsets []int, current int) {
	if s.active {
		panic(fmt.Sprintf("cache: %s.PrepareSnapshots(%v) while the previous schedule %v was not taken (every speculative write must end in TakeSnapshots, see cache.Commit)", kind, offsets, s.offsets))
	}
	for i, o := range offsets {
		if o < current {
			panic(fmt.Sprintf("cache: %s.PrepareSnapshots(%v): offset %d is below the cache offset %d", kind, offsets, o, current))
		}
		if i > 0 && o <= offsets[i-1] {
			panic(fmt.Sprintf("cache: %s.PrepareSnapshots(%v): offsets must be strictly ascending", kind, offsets))
		}
	}
	s.active = true
	s.offsets = append(s.offsets[:0], offsets...)
	s.snaps = make([]Snapshot, len(offsets))
}

// take returns the captures in schedule order and clears the schedule.
func (s *schedule) take() []Snapshot {
	out := s.snaps
	s.active = false
	s.offsets = s.offsets[:0]
	s.snaps = nil
	return out
}

// due returns the indexes of scheduled offsets in [lo, hi] that have not
// been captured yet, in ascending order.
func (s *schedule) due(lo, hi int) []int {
	if !s.active {
		return nil
	}
	var out []int
	for i, o := range s.offsets {
		if o >= lo && o <= hi && s.snaps[i] == nil {
			out = append(out, i)
		}
	}
	return out
}

// clone returns a copy of a that shares no storage with it. A slice of a
// cache buffer is a view; multiplying by one forces MLX to allocate fresh
// storage (the view's buffer is shared, so it cannot be donated), and it is
// exact for every value.
func clone(a *mlx.Array) *mlx.Array {
	return mlx.Multiply(a, mlx.Scalar(1, a.DType()))
}

// replace pins next, unpins the array it replaces and returns next. Unpinned
// arrays go back to the current scope and are freed at its next sweep, so a
// handle a caller obtained from State earlier stays usable until then.
func replace(old, next *mlx.Array) *mlx.Array {
	mlx.Pin(next)
	if old != nil {
		mlx.Unpin(old)
	}
	return next
}

// nbytes is the storage size of arrays (nil ones count zero).
func nbytes(arrays ...*mlx.Array) int64 {
	var n int64
	for _, a := range arrays {
		if a != nil {
			n += int64(a.Size()) * int64(a.DType().Size())
		}
	}
	return n
}

// roundUp rounds n up to a multiple of step.
func roundUp(n, step int) int { return (n + step - 1) / step * step }

// copies is what the KV and rotating snapshots share: the offset they restore
// to and the pinned K/V copies they hold once copied out of live storage
// (nil while the snapshot is still a lazy reference to live rows).
type copies struct {
	offset int
	k, v   *mlx.Array
	closed bool
}

// Offset is the slot count the snapshot restores to.
func (s *copies) Offset() int { return s.offset }

// Size is 0 while the snapshot is lazy, else the bytes of its copies.
func (s *copies) Size() int64 { return nbytes(s.k, s.v) }

// release closes the copies once and reports whether the snapshot was still
// lazy, so the cache must stop tracking it.
func (s *copies) release() (wasLazy bool) {
	if s.closed {
		return false
	}
	s.closed = true
	if s.k == nil {
		return true
	}
	mlx.Unpin(s.k, s.v)
	s.k, s.v = nil, nil
	return false
}
