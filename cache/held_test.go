package cache_test

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// heldCase is one chained write: prefix true rows, a held k-row write
// whose first keep rows are true, then a later m-row write from its end
// (true rows when every row is kept, junk otherwise, as a chained
// verification built on a wrong guess).
type heldCase struct{ prefix, k, keep, m int }

func (c heldCase) String() string {
	return fmt.Sprintf("prefix %d, held %d rows keeping %d, then %d rows", c.prefix, c.k, c.keep, c.m)
}

// heldCases lists every keep for a few prefixes and write sizes.
func heldCases() []heldCase {
	var out []heldCase
	for _, prefix := range []int{0, 3, 9} {
		for _, k := range []int{1, 4} {
			for keep := 0; keep <= k; keep++ {
				for _, m := range []int{1, 3} {
					out = append(out, heldCase{prefix, k, keep, m})
				}
			}
		}
	}
	return out
}

// resolve ends the later write and then the held one as the speculation
// core does: a later write built on a full keep is kept whole, one built on
// a wrong guess is dropped before the held write is cut back. It returns
// the number of slots the caches should hold.
func (c heldCase) resolve(caches []cache.Cache, h *cache.Held) int {
	later := c.prefix + c.k
	if c.keep == c.k {
		cache.Commit(caches, c.m, c.m, later)
		h.Resolve(c.keep)
		return later + c.m
	}
	cache.Commit(caches, 0, c.m, later)
	h.Resolve(c.keep)
	return c.prefix + c.keep
}

// A held write resolves to the same state as writing the kept rows
// directly, after a later write from its end was kept or dropped: for the
// KV cache, whose snapshots copy out rows a later write overwrites.
func TestHeldWriteKV(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		for _, tc := range heldCases() {
			c := cache.NewKV()
			caches := []cache.Cache{c}
			writeKV(c, 0, tc.prefix, 2)
			cache.Schedule(caches, tc.prefix, tc.k)
			c.Update(specRows(tc.prefix, tc.keep, tc.k))
			h := cache.Hold(caches, tc.prefix, tc.k)
			later := tc.prefix + tc.k
			cache.Schedule(caches, later, tc.m)
			if tc.keep == tc.k {
				c.Update(rows(later, tc.m))
			} else {
				c.Update(rows(later+junk, tc.m))
			}
			want := tc.resolve(caches, h)
			direct := cache.NewKV()
			writeKV(direct, 0, want, 2)
			if c.Offset() != want {
				t.Fatalf("%v: offset %d, want %d", tc, c.Offset(), want)
			}
			k1, v1 := writeKV(c, want, 2)
			k2, v2 := writeKV(direct, want, 2)
			if a, b := slotsOf(t, k1, v1), slotsOf(t, k2, v2); !eqInts(a, b) {
				t.Fatalf("%v: history %v, want %v", tc, a, b)
			}
			c.Free()
			direct.Free()
			mlx.Sweep()
		}
	})
}

// The same for the recurrent cache, whose state cannot be rewound live:
// the held write's snapshots must survive the later write.
func TestHeldWriteRecurrent(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		for _, tc := range heldCases() {
			for _, step := range []int{1, tc.k} {
				name := fmt.Sprintf("%v in steps of %d", tc, step)
				c := cache.NewRecurrent(testShape)
				caches := []cache.Cache{c}
				if tc.prefix > 0 {
					fakeLayer(c, input(0, tc.prefix))
				}
				cache.Schedule(caches, tc.prefix, tc.k)
				x := mlx.Concatenate(1, input(tc.prefix, tc.keep), input(tc.prefix+tc.keep+junk, tc.k-tc.keep))
				for i := 0; i < tc.k; i += step {
					fakeLayer(c, mlx.SliceAxis(x, 1, i, min(i+step, tc.k)))
				}
				h := cache.Hold(caches, tc.prefix, tc.k)
				later := tc.prefix + tc.k
				cache.Schedule(caches, later, tc.m)
				if tc.keep == tc.k {
					fakeLayer(c, input(later, tc.m))
				} else {
					fakeLayer(c, input(later+junk, tc.m))
				}
				want := tc.resolve(caches, h)
				direct := cache.NewRecurrent(testShape)
				if want > 0 {
					fakeLayer(direct, input(0, want))
				}
				equalState(t, name, c, direct)
				fakeLayer(c, input(want, 2))
				fakeLayer(direct, input(want, 2))
				equalState(t, name+", then 2 rows", c, direct)
				c.Free()
				direct.Free()
				mlx.Sweep()
			}
		}
	})
}

// The same for the rotating cache, before and after its ring wraps.
func TestHeldWriteRotating(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		const w = 5
		for _, tc := range heldCases() {
			c := cache.NewRotating(w)
			caches := []cache.Cache{c}
			writeRot(t, c, 0, tc.prefix, 3)
			cache.Schedule(caches, tc.prefix, tc.k)
			kr, vr := specRows(tc.prefix, tc.keep, tc.k)
			updateRot(t, c, kr, vr)
			h := cache.Hold(caches, tc.prefix, tc.k)
			later := tc.prefix + tc.k
			cache.Schedule(caches, later, tc.m)
			if tc.keep == tc.k {
				writeRot(t, c, later, tc.m, tc.m)
			} else {
				kj, vj := rows(later+junk, tc.m)
				updateRot(t, c, kj, vj)
			}
			want := tc.resolve(caches, h)
			if c.Offset() != want {
				t.Fatalf("%v: offset %d, want %d", tc, c.Offset(), want)
			}
			direct := cache.NewRotating(w)
			writeRot(t, direct, 0, want, 3)
			for _, next := range []int{1, 3} {
				got := writeRot(t, c, c.Offset(), next, next)
				ref := writeRot(t, direct, direct.Offset(), next, next)
				checkWindow(t, c, got, next)
				checkWindow(t, direct, ref, next)
			}
			c.Free()
			direct.Free()
			mlx.Sweep()
		}
	})
}
