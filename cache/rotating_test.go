package cache_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// updateRot writes k and v and checks that the returned slots name the rows
// the history really holds (junk rows decode to their slot + junk). It
// returns the decoded slots, so a stale junk row shows up as a slot >= junk.
func updateRot(t *mlxtest.T, c *cache.Rotating, k, v *mlx.Array) []int {
	t.Helper()
	kh, vh, slots := c.Update(k, v)
	got := slotsOf(t, kh, vh)
	for i, s := range got {
		if s != slots[i] && s != slots[i]+junk {
			t.Fatalf("Update reports slots %v, the rows hold %v", slots, got)
		}
	}
	return got
}

// writeRot writes the true rows of slots from … from+n−1 in chunks of size
// chunk and returns the slots of the last history.
func writeRot(t *mlxtest.T, c *cache.Rotating, from, n, chunk int) []int {
	t.Helper()
	var slots []int
	for done := 0; done < n; done += chunk {
		size := min(chunk, n-done)
		k, v := rows(from+done, size)
		slots = updateRot(t, c, k, v)
	}
	return slots
}

// visible returns the slots among slots that a query at p may see
// (p−W+1 <= s <= p), sorted.
func visible(slots []int, p, w int) []int {
	var out []int
	for _, s := range slots {
		if s >= p-w+1 && s <= p {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// checkWindow fails unless, for every query of a write of n rows that ended
// at the cache's offset, the slots it may see are exactly the true window.
func checkWindow(t *mlxtest.T, c *cache.Rotating, slots []int, n int) {
	t.Helper()
	w := c.Window()
	for p := c.Offset() - n; p < c.Offset(); p++ {
		lo := max(0, p-w+1)
		if got, want := visible(slots, p, w), seq(lo, p-lo+1); !eqInts(got, want) {
			t.Fatalf("query at %d (window %d) sees slots %v, want %v (history slots %v)", p, w, got, want, slots)
		}
	}
}

func TestRotatingSingleRowsUseARing(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRotating(4)
		var slots []int
		for s := range 6 {
			k, v := rows(s, 1)
			slots = updateRot(t, c, k, v)
			checkWindow(t, c, slots, 1)
		}
		// Slots 4 and 5 overwrote 0 and 1 in place.
		if !eqInts(slots, []int{4, 5, 2, 3}) {
			t.Fatalf("ring holds slots %v, want [4 5 2 3]", slots)
		}
	})
}

func TestRotatingBatchedWriteKeepsNewestWMinus1(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRotating(4)
		writeRot(t, c, 0, 6, 1)
		k, v := rows(6, 3)
		slots := updateRot(t, c, k, v)
		if !eqInts(slots, seq(3, 6)) {
			t.Fatalf("batched write returns slots %v, want 3 … 8 (W−1 old rows in order, then the new ones)", slots)
		}
		checkWindow(t, c, slots, 3)
		// The next single row trims back to a ring of W.
		k, v = rows(9, 1)
		slots = updateRot(t, c, k, v)
		if !eqInts(slots, seq(6, 4)) {
			t.Fatalf("single row after a batch: slots %v, want 6 … 9", slots)
		}
		checkWindow(t, c, slots, 1)
		k, v = rows(10, 1)
		if slots = updateRot(t, c, k, v); !eqInts(slots, []int{10, 7, 8, 9}) {
			t.Fatalf("ring after the trim: slots %v, want [10 7 8 9]", slots)
		}
	})
}

func TestRotatingLiveRewindOnlyBeforeWrap(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRotating(4)
		writeRot(t, c, 0, 4, 1) // offset 4 = W: not wrapped yet
		if !c.Restore(nil, 1) || c.Offset() != 1 {
			t.Fatal("live rewind before the wrap failed")
		}
		checkWindow(t, c, writeRot(t, c, 1, 2, 2), 2)
		writeRot(t, c, 3, 3, 1) // offset 6: wrapped
		if c.Restore(nil, 5) {
			t.Fatal("live rewind after the wrap succeeded")
		}
		if !c.Restore(nil, 6) {
			t.Fatal("Restore(nil, Offset) must always succeed")
		}
	})
}

func TestRotatingSnapshotKinds(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRotating(4)
		writeRot(t, c, 0, 6, 1)
		// A batched write: its start is cloned, interior and end offsets
		// are lazy ranges of the ordered buffer.
		c.PrepareSnapshots([]int{6, 7, 9})
		k, v := rows(6, 3)
		updateRot(t, c, k, v)
		snaps := c.TakeSnapshots()
		if snaps[0].Size() == 0 || snaps[1].Size() != 0 || snaps[2].Size() != 0 {
			t.Fatalf("sizes %d %d %d: want a clone at the start, lazy interior and end", snaps[0].Size(), snaps[1].Size(), snaps[2].Size())
		}
		// Restoring one copies out the others (close unused ones first).
		if !c.Restore(snaps[0], 6) {
			t.Fatal("restoring the start clone failed")
		}
		if snaps[1].Size() == 0 || snaps[2].Size() == 0 {
			t.Fatal("lazy snapshots were not copied out before an install")
		}
		checkWindow(t, c, writeRot(t, c, 6, 1, 1), 1)
		// A wrapped snapshot restores only to its own offset.
		if c.Restore(snaps[1], 6) {
			t.Fatal("restored the window at 7 to offset 6 (incomplete window)")
		}
		if !c.Restore(snaps[1], 7) {
			t.Fatal("restoring the copied-out window at 7 failed")
		}
		checkWindow(t, c, writeRot(t, c, 7, 2, 2), 2)
		for _, s := range snaps {
			s.Close()
		}

		// Single-row writes capture clones at their end.
		c.PrepareSnapshots([]int{10, 11})
		writeRot(t, c, 9, 1, 1)
		snaps = c.TakeSnapshots()
		if snaps[0] == nil || snaps[0].Size() == 0 || snaps[1] != nil {
			t.Fatalf("single-row write: snapshots %v, want a clone at 10 and nil at 11 (not reached)", snaps)
		}
		snaps[0].Close()

		// Before the wrap a snapshot may restore below its offset.
		c = cache.NewRotating(8)
		c.PrepareSnapshots([]int{5})
		writeRot(t, c, 0, 7, 7)
		s := c.TakeSnapshots()[0]
		if !c.Restore(s, 3) || c.Offset() != 3 {
			t.Fatal("restore of an unwrapped window to a lower offset failed")
		}
		checkWindow(t, c, writeRot(t, c, 3, 3, 3), 3)
		s.Close()
	})
}

// TestRotatingRollbackProperty: a k-row write then a restore to j (through
// Schedule/Commit) leaves the same visible window as writing j rows
// directly, for every j < k, before and after the ring wraps, for batched
// and single-row speculative writes, followed by a single-row or a batched
// write.
func TestRotatingRollbackProperty(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const w = 5
		for _, prefix := range []int{0, 2, 4, 5, 9, 23} {
			for _, k := range []int{1, 2, 4, 7} {
				for j := range k {
					for _, step := range []int{1, k} {
						for _, next := range []int{1, 3} {
							name := fmt.Sprintf("prefix %d, %d rows in steps of %d, keep %d, then %d rows", prefix, k, step, j, next)
							c := cache.NewRotating(w)
							writeRot(t, c, 0, prefix, 3)
							cache.Schedule([]cache.Cache{c}, prefix, k)
							kr, vr := specRows(prefix, j, k)
							for i := 0; i < k; i += step {
								n := min(step, k-i)
								updateRot(t, c, chunk(kr, i, n), chunk(vr, i, n))
							}
							cache.Commit([]cache.Cache{c}, j, k, prefix)
							if c.Offset() != prefix+j {
								t.Fatalf("%s: offset %d, want %d", name, c.Offset(), prefix+j)
							}
							direct := cache.NewRotating(w)
							writeRot(t, direct, 0, prefix+j, 3)
							got := writeRot(t, c, prefix+j, next, next)
							want := writeRot(t, direct, prefix+j, next, next)
							checkWindow(t, c, got, next)
							checkWindow(t, direct, want, next)
							c.Free()
							direct.Free()
							mlx.Sweep()
						}
					}
				}
			}
		}
	})
}
