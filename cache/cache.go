// Package cache holds the per-layer state of a forward: the growing KV cache
// of full attention, the rotating KV cache of sliding-window attention and
// the recurrent cache of gated delta-net layers, with the snapshot and rewind
// contract that speculative decoding needs (spec/speculation.md section 3).
//
// Offsets count written slots: the token at slot S is written to every cache
// at S, and Offset is the slot the next write lands on.
package cache

import (
	"fmt"

	"github.com/specula-dev/specula/mlx"
)

// Cache is one layer's state.
type Cache interface {
	// Offset is the number of slots written so far.
	Offset() int
	// State returns the arrays holding the state; evaluating them forces
	// pending writes.
	State() []*mlx.Array
	// PrepareSnapshots schedules captures at absolute offsets, which must be
	// ascending, unique and >= Offset(). It panics if the previous schedule
	// was not taken.
	PrepareSnapshots(offsets []int)
	// TakeSnapshots returns one entry per scheduled offset, in order, and
	// clears the schedule. An entry is nil when that offset can be reached by
	// a live rewind alone or was never reached.
	TakeSnapshots() []Snapshot
	// Restore brings the cache to offset target: with s == nil by a live
	// rewind (false if impossible), else by installing s.
	Restore(s Snapshot, target int) bool
	// Free releases the storage, including lazily shared snapshot data.
	Free()
}

// Snapshot is a captured state of one cache at one offset.
type Snapshot interface {
	// Offset is the slot count the snapshot restores to.
	Offset() int
	// Size is the number of bytes the snapshot holds (0 while it is still a
	// lazy reference to live storage).
	Size() int64
	// Close releases the snapshot.
	Close()
}

// Schedule prepares captures at from, from+1, …, from+count−1 on every
// non-nil cache (the slots a speculative write may be cut back to).
func Schedule(caches []Cache, from, count int) {
	offsets := make([]int, count)
	for i := range offsets {
		offsets[i] = from + i
	}
	for _, c := range caches {
		if c != nil {
			c.PrepareSnapshots(offsets)
		}
	}
}

// Commit ends a speculative write scheduled with Schedule(caches, from,
// count): the caches keep the first keep slots of it and sit at from+keep.
// It is Hold followed by Resolve: see there.
func Commit(caches []Cache, keep, count, from int) {
	Hold(caches, from, count).Resolve(keep)
}

// Held is a speculative write whose outcome is not known yet, taken off the
// caches so that they can go on from its end: a chained verification is
// built over a round's whole write before the device has said how much of
// it the target accepts. Its snapshots stay valid across later writes (a
// KV or rotating cache copies out the rows a write would overwrite; a
// recurrent snapshot is an immutable state), so Resolve can still bring
// the caches back to any slot of the write.
type Held struct {
	caches      []Cache
	snaps       [][]Snapshot // per cache, one per scheduled offset
	from, count int
}

// Hold takes the snapshots of the write scheduled with Schedule(caches,
// from, count) and clears the schedule; the caches stay where the write
// left them, as if every slot were kept, and may be written again (after a
// new Schedule) before Resolve.
func Hold(caches []Cache, from, count int) *Held {
	h := &Held{caches: caches, snaps: make([][]Snapshot, len(caches)), from: from, count: count}
	for i, c := range caches {
		if c != nil {
			h.snaps[i] = c.TakeSnapshots()
		}
	}
	return h
}

// Resolve keeps the first keep slots of the held write. With keep == count
// it only releases the snapshots, and the caches keep whatever was written
// since. With keep < count every cache goes back to from+keep, live if it
// can, else from the snapshot at from+keep; a later write must have ended
// first (its schedule taken, by Commit, Hold or TakeSnapshots). If neither
// works an internal invariant is broken and Resolve panics. Unused
// snapshots are closed first, because a rotating cache copies out every
// outstanding lazy snapshot when it restores. A second Resolve is a no-op.
func (h *Held) Resolve(keep int) {
	target := h.from + keep
	for i, c := range h.caches {
		snaps := h.snaps[i]
		if c == nil {
			continue
		}
		if keep < h.count {
			for j, s := range snaps {
				if j != keep && s != nil {
					s.Close()
				}
			}
			var s Snapshot
			if keep < len(snaps) {
				s = snaps[keep]
			}
			if !c.Restore(nil, target) {
				if s == nil || !c.Restore(s, target) {
					panic(fmt.Sprintf("cache: cannot restore to offset %d after a speculative write (%T)", target, c))
				}
			}
			if s != nil {
				s.Close()
			}
			continue
		}
		for _, s := range snaps {
			if s != nil {
				s.Close()
			}
		}
	}
	h.caches, h.snaps = nil, nil
}
