package cache_test

import (
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The interface is implemented by every cache kind.
var (
	_ cache.Cache = (*cache.KV)(nil)
	_ cache.Cache = (*cache.Rotating)(nil)
	_ cache.Cache = (*cache.Recurrent)(nil)
)

func TestKVUpdateAppendsAndReturnsHistory(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewKV()
		if c.State() != nil || c.Offset() != 0 {
			t.Fatalf("fresh cache: state %v offset %d", c.State(), c.Offset())
		}
		k, v := writeKV(c, 0, 3)
		t.Shape(k, 1, testHeads, 3, testDim)
		if got := slotsOf(t, k, v); !eqInts(got, seq(0, 3)) {
			t.Fatalf("after 3 rows: slots %v", got)
		}
		k, v = writeKV(c, 3, 2)
		if got := slotsOf(t, k, v); !eqInts(got, seq(0, 5)) || c.Offset() != 5 {
			t.Fatalf("after 5 rows: slots %v offset %d", got, c.Offset())
		}
		if len(c.State()) != 2 {
			t.Fatalf("State has %d arrays, want keys and values", len(c.State()))
		}
	})
}

func TestKVCapacityGrowsInStepsOf256(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewKV()
		writeKV(c, 0, 1)
		if c.Capacity() != 256 {
			t.Fatalf("capacity %d after one row, want 256", c.Capacity())
		}
		writeKV(c, 1, 255)
		if c.Capacity() != 256 {
			t.Fatalf("capacity %d after 256 rows, want 256", c.Capacity())
		}
		k, v := writeKV(c, 256, 300)
		if c.Capacity() != 768 {
			t.Fatalf("capacity %d after 556 rows, want 768", c.Capacity())
		}
		if got := slotsOf(t, k, v); !eqInts(got, seq(0, 556)) {
			t.Fatalf("history across growth is wrong: first slots %v", got[:8])
		}
	})
}

func TestKVLiveRewind(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewKV()
		writeKV(c, 0, 6)
		for _, bad := range []int{-1, 7} {
			if c.Restore(nil, bad) {
				t.Fatalf("Restore(nil, %d) at offset 6 succeeded", bad)
			}
		}
		if !c.Restore(nil, 6) || !c.Restore(nil, 2) || c.Offset() != 2 {
			t.Fatalf("live rewind to 2 failed (offset %d)", c.Offset())
		}
		// The stale rows are overwritten by the next write.
		kr, vr := rows(10, 2) // different values at slots 2, 3
		k, v := c.Update(kr, vr)
		if got := slotsOf(t, k, v); !eqInts(got, []int{0, 1, 10, 11}) {
			t.Fatalf("after rewind and write: slots %v, want [0 1 10 11]", got)
		}
	})
}

func TestKVSnapshotsAreLazyUntilOverwritten(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewKV()
		writeKV(c, 0, 4)
		c.PrepareSnapshots([]int{4, 6, 8, 20})
		writeKV(c, 4, 5) // reaches 6 and 8 inside the write; 4 at once
		snaps := c.TakeSnapshots()
		if len(snaps) != 4 || snaps[3] != nil {
			t.Fatalf("snapshots %v: want 4 entries, the last (never reached) nil", snaps)
		}
		for i, want := range []int{4, 6, 8} {
			if snaps[i] == nil || snaps[i].Offset() != want || snaps[i].Size() != 0 {
				t.Fatalf("snapshot %d: %v, want a lazy snapshot at %d", i, snaps[i], want)
			}
		}
		// Rewind to 5 and write over slots 5 … 6: the snapshots at 6 and 8
		// are copied out first, the one at 4 stays lazy.
		c.Restore(nil, 5)
		kr, vr := rows(50, 2)
		c.Update(kr, vr)
		if snaps[0].Size() != 0 || snaps[1].Size() == 0 || snaps[2].Size() == 0 {
			t.Fatalf("sizes after an overwrite: %d %d %d, want 0 and two copies", snaps[0].Size(), snaps[1].Size(), snaps[2].Size())
		}
		// Installing the copy at 8 brings back slots 0 … 7.
		if !c.Restore(snaps[2], 8) {
			t.Fatal("Restore(snapshot at 8, 8) failed")
		}
		kr, vr = rows(8, 1)
		k, v := c.Update(kr, vr)
		if got := slotsOf(t, k, v); !eqInts(got, seq(0, 9)) {
			t.Fatalf("after restoring the copy: slots %v", got)
		}
		// A snapshot restores to any offset up to its own, not past it.
		if c.Restore(snaps[1], 7) {
			t.Fatal("restored the snapshot at 6 to offset 7")
		}
		if !c.Restore(snaps[0], 3) || c.Offset() != 3 {
			t.Fatal("lazy snapshot at 4 did not restore to 3")
		}
		for _, s := range snaps[:3] {
			s.Close()
		}
		if c.Restore(snaps[0], 4) {
			t.Fatal("a closed snapshot was restored")
		}
	})
}

func TestKVFreeCopiesOutLazySnapshots(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewKV()
		c.PrepareSnapshots([]int{3})
		writeKV(c, 0, 5)
		s := c.TakeSnapshots()[0]
		c.Free()
		if c.Offset() != 0 || c.State() != nil || s.Size() == 0 {
			t.Fatalf("after Free: offset %d, state %v, snapshot size %d", c.Offset(), c.State(), s.Size())
		}
		if !c.Restore(s, 3) {
			t.Fatal("restoring a copied-out snapshot into the freed cache failed")
		}
		kr, vr := rows(3, 1)
		k, v := c.Update(kr, vr)
		if got := slotsOf(t, k, v); !eqInts(got, seq(0, 4)) {
			t.Fatalf("slots %v", got)
		}
		s.Close()
		c.Free()
	})
}

func TestKVSweepKeepsState(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewKV()
		for s := range 5 {
			c.PrepareSnapshots([]int{s + 1})
			writeKV(c, s, 1)
			cache.Commit([]cache.Cache{c}, 1, 1, s+1)
			mlx.Sweep()
		}
		kr, vr := rows(5, 1)
		k, v := c.Update(kr, vr)
		if got := slotsOf(t, k, v); !eqInts(got, seq(0, 6)) {
			t.Fatalf("slots %v", got)
		}
	})
}

func TestPrepareSnapshotsRules(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		caches := map[string]func() cache.Cache{
			"KV":        func() cache.Cache { return cache.NewKV() },
			"Rotating":  func() cache.Cache { return cache.NewRotating(4) },
			"Recurrent": func() cache.Cache { return cache.NewRecurrent(testShape) },
		}
		for name, mk := range caches {
			c := mk()
			mustPanic(t, "strictly ascending", func() { c.PrepareSnapshots([]int{1, 1}) })
			c = mk()
			mustPanic(t, "strictly ascending", func() { c.PrepareSnapshots([]int{2, 1}) })
			c = mk()
			c.PrepareSnapshots([]int{0, 1})
			mustPanic(t, "was not taken", func() { c.PrepareSnapshots([]int{2}) })
			c.TakeSnapshots()
			c.PrepareSnapshots(nil) // taken: a new schedule is fine
			if got := c.TakeSnapshots(); len(got) != 0 {
				t.Errorf("%s: empty schedule returned %v", name, got)
			}
			c.Free()
		}
		c := cache.NewKV()
		writeKV(c, 0, 3)
		mustPanic(t, "below the cache offset", func() { c.PrepareSnapshots([]int{2}) })
	})
}

// TestKVRollbackProperty: a k-token write then a restore to j equals writing
// j tokens directly, for every j < k, by live rewind and through
// Schedule/Commit, with and without a prefix and across a growth step.
func TestKVRollbackProperty(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		for _, prefix := range []int{0, 5, 250} {
			for _, k := range []int{1, 2, 7, 12} {
				for j := range k {
					for _, useCommit := range []bool{false, true} {
						c := cache.NewKV()
						writeKV(c, 0, prefix, 3)
						if useCommit {
							cache.Schedule([]cache.Cache{c}, prefix, k)
						}
						kr, vr := specRows(prefix, j, k)
						c.Update(kr, vr)
						if useCommit {
							cache.Commit([]cache.Cache{c}, j, k, prefix)
						} else if !c.Restore(nil, prefix+j) {
							t.Fatalf("prefix %d k %d j %d: live rewind failed", prefix, k, j)
						}
						direct := cache.NewKV()
						writeKV(direct, 0, prefix+j, 3)
						if c.Offset() != direct.Offset() {
							t.Fatalf("prefix %d k %d j %d: offset %d, want %d", prefix, k, j, c.Offset(), direct.Offset())
						}
						// The next write sees the same history.
						k1, v1 := writeKV(c, prefix+j, 2)
						k2, v2 := writeKV(direct, prefix+j, 2)
						if a, b := slotsOf(t, k1, v1), slotsOf(t, k2, v2); !eqInts(a, b) {
							t.Fatalf("prefix %d k %d j %d (commit %v): history %v, want %v", prefix, k, j, useCommit, a, b)
						}
						c.Free()
						direct.Free()
						mlx.Sweep()
					}
				}
			}
		}
	})
}
