package cache_test

import (
	"fmt"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

var testShape = cache.RecurrentShape{ConvRows: 2, ConvDim: 3, ConvDType: mlx.Float32, Heads: 2, ValueDim: 2, KeyDim: 3}

// input returns the pre-convolution rows [1, n, ConvDim] of slots from …
// from+n−1 (slot s carries s+1 plus a channel fraction).
func input(from, n int) *mlx.Array {
	var d []float32
	for s := from; s < from+n; s++ {
		for ch := range testShape.ConvDim {
			d = append(d, float32(s+1)+float32(ch)/10)
		}
	}
	return mlx.FromFloat32s(d, 1, n, testShape.ConvDim)
}

// fakeLayer plays a gated delta-net layer over c: the tail is the last
// ConvRows input rows and the delta state follows S ← S/2 + x_t (x_t's
// channel sum broadcast over the state). It honours SnapshotSplits, handing
// interior tails over as the window of rows they are taken from and the
// interior delta states one by one.
func fakeLayer(c *cache.Recurrent, x *mlx.Array) { fakeWrite(c, x, false) }

// fakeLayerRows is fakeLayer handing the delta states over as the rows of
// every state, as a scan that emits them all does.
func fakeLayerRows(c *cache.Recurrent, x *mlx.Array) { fakeWrite(c, x, true) }

func fakeWrite(c *cache.Recurrent, x *mlx.Array, rows bool) {
	n := x.Dim(1)
	splits := c.SnapshotSplits(n)
	window := mlx.Concatenate(1, c.ConvState(), x)
	state := c.DeltaState()
	var interior, all []*mlx.Array
	next := 0
	for t := 1; t <= n; t++ {
		xt := mlx.Sum(mlx.SliceAxis(x, 1, t-1, t), false)
		state = mlx.Add(mlx.MultiplyScalar(state, 0.5), xt)
		all = append(all, state)
		if next < len(splits) && splits[next] == t {
			interior = append(interior, state)
			next++
		}
	}
	w := cache.RecurrentWrite{Conv: mlx.SliceAxis(window, 1, n, n+testShape.ConvRows), Delta: state}
	if len(splits) > 0 {
		w.ConvWindow = window
		if rows {
			w.DeltaRows = mlx.Concatenate(0, all...)
		} else {
			w.Deltas = interior
		}
	}
	c.Put(w)
}

// equalState fails unless a and b hold the same offset and values.
func equalState(t *mlxtest.T, name string, a, b *cache.Recurrent) {
	t.Helper()
	if a.Offset() != b.Offset() {
		t.Fatalf("%s: offset %d, want %d", name, a.Offset(), b.Offset())
	}
	for i, pair := range [][2]*mlx.Array{{a.ConvState(), b.ConvState()}, {a.DeltaState(), b.DeltaState()}} {
		x, y := t.Float32s(pair[0]), t.Float32s(pair[1])
		if fmt.Sprint(x) != fmt.Sprint(y) {
			t.Fatalf("%s: state %d is %v, want %v", name, i, x, y)
		}
	}
}

func TestRecurrentStartsAtZeros(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRecurrent(testShape)
		t.Shape(c.ConvState(), 1, 2, 3)
		t.Shape(c.DeltaState(), 1, 2, 2, 3)
		if c.DeltaState().DType() != mlx.Float32 {
			t.Fatalf("delta dtype %s", c.DeltaState().DType())
		}
		for _, v := range append(t.Float32s(c.ConvState()), t.Float32s(c.DeltaState())...) {
			if v != 0 {
				t.Fatal("fresh state is not zero")
			}
		}
	})
}

func TestRecurrentSplitsAndPut(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRecurrent(testShape)
		fakeLayer(c, input(0, 2))
		c.PrepareSnapshots([]int{2, 3, 5, 6, 9})
		if got := c.SnapshotSplits(4); !eqInts(got, []int{1, 3}) {
			t.Fatalf("splits of a 4-row write at 2 for %v: %v, want [1 3] (strictly inside)", []int{2, 3, 5, 6, 9}, got)
		}
		live := cache.RecurrentWrite{Conv: c.ConvState(), Delta: c.DeltaState(), ConvWindow: input(0, 6)}
		one, two := []*mlx.Array{c.DeltaState()}, []*mlx.Array{c.DeltaState(), c.DeltaState()}
		mustPanic(t, "want 2 (one per split)", func() { w := live; w.Deltas = one; c.Put(w) })
		mustPanic(t, "needs its window", func() { w := live; w.ConvWindow, w.Deltas = nil, two; c.Put(w) })
		mustPanic(t, "want [1 6 3] float32", func() { w := live; w.ConvWindow, w.Deltas = input(0, 5), two; c.Put(w) })
		mustPanic(t, "want [4 2 2 3] float32", func() { w := live; w.DeltaRows = mlx.Concatenate(0, two...); c.Put(w) })
		fakeLayer(c, input(2, 4))
		snaps := c.TakeSnapshots()
		// Each holds a 2×3 float32 tail and a 2×2×3 float32 state: 72 bytes,
		// the interior ones (3, 5) too, though their tail is a window's rows.
		for i, want := range []int{2, 3, 5, 6} {
			if snaps[i] == nil || snaps[i].Offset() != want || snaps[i].Size() != 72 {
				t.Fatalf("snapshot %d: %v, want one of 72 bytes captured at %d", i, snaps[i], want)
			}
		}
		if snaps[4] != nil {
			t.Fatal("offset 9 was never reached but has a snapshot")
		}
		// Restore rules: a snapshot only to its own offset; no live rewind.
		if c.Restore(nil, 5) || !c.Restore(nil, 6) {
			t.Fatal("live rewind must fail except to the current offset")
		}
		if c.Restore(snaps[1], 2) || !c.Restore(snaps[1], 3) || c.Offset() != 3 {
			t.Fatal("snapshot at 3 must restore to exactly 3")
		}
		direct := cache.NewRecurrent(testShape)
		fakeLayer(direct, input(0, 3))
		equalState(t, "restored to 3", c, direct)
		for _, s := range snaps[:4] {
			s.Close()
		}
		if c.Restore(snaps[2], 5) {
			t.Fatal("a closed snapshot was restored")
		}
		mustPanic(t, "without SnapshotSplits", func() { c.Put(cache.RecurrentWrite{}) })
	})
}

// TestRecurrentRollbackProperty: a k-row write with per-token snapshots then
// a restore to j (through Schedule/Commit) equals writing j rows directly,
// for every j < k, with and without a prefix, for a batched write and for
// single-row writes, with the interior delta states handed over one by one
// and as rows.
func TestRecurrentRollbackProperty(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		for _, prefix := range []int{0, 1, 5} {
			for _, k := range []int{1, 2, 5, 8} {
				for j := range k {
					for _, step := range []int{1, k} {
						for form, write := range []func(*cache.Recurrent, *mlx.Array){fakeLayer, fakeLayerRows} {
							name := fmt.Sprintf("prefix %d, %d rows in steps of %d, keep %d, interior states as %s", prefix, k, step, j, []string{"arrays", "rows"}[form])
							c := cache.NewRecurrent(testShape)
							if prefix > 0 {
								fakeLayer(c, input(0, prefix))
							}
							cache.Schedule([]cache.Cache{c}, prefix, k)
							x := mlx.Concatenate(1, input(prefix, j), input(prefix+j+junk, k-j))
							for i := 0; i < k; i += step {
								write(c, mlx.SliceAxis(x, 1, i, min(i+step, k)))
							}
							cache.Commit([]cache.Cache{c}, j, k, prefix)
							direct := cache.NewRecurrent(testShape)
							if prefix+j > 0 {
								fakeLayer(direct, input(0, prefix+j))
							}
							equalState(t, name, c, direct)
							// And the next write continues identically.
							fakeLayer(c, input(prefix+j, 2))
							fakeLayer(direct, input(prefix+j, 2))
							equalState(t, name+", then 2 rows", c, direct)
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

func TestRecurrentCapturesCurrentOffsetAtOnce(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		c := cache.NewRecurrent(testShape)
		fakeLayer(c, input(0, 3))
		c.PrepareSnapshots([]int{3, 4})
		fakeLayer(c, input(3, 1)) // a single-row write: no splits, end captured
		snaps := c.TakeSnapshots()
		if snaps[0] == nil || snaps[0].Offset() != 3 || snaps[1] == nil || snaps[1].Offset() != 4 {
			t.Fatalf("snapshots %v, want captures at 3 (at once) and 4 (end of the write)", snaps)
		}
		if !c.Restore(snaps[0], 3) {
			t.Fatal("restore to 3 failed")
		}
		direct := cache.NewRecurrent(testShape)
		fakeLayer(direct, input(0, 3))
		equalState(t, "restored", c, direct)
		snaps[0].Close()
		snaps[1].Close()
	})
}

// A snapshot restores only into the cache that took it.
func TestRestoreRejectsForeignSnapshots(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		kv, kv2 := cache.NewKV(), cache.NewKV()
		kv.PrepareSnapshots([]int{0})
		writeKV(kv, 0, 2)
		rot, rot2 := cache.NewRotating(4), cache.NewRotating(4)
		rot.PrepareSnapshots([]int{1})
		writeRot(t, rot, 0, 2, 2)
		rec, rec2 := cache.NewRecurrent(testShape), cache.NewRecurrent(testShape)
		rec.PrepareSnapshots([]int{0})
		pairs := []struct {
			name       string
			owner, any cache.Cache
		}{{"KV", kv, kv2}, {"Rotating", rot, rot2}, {"Recurrent", rec, rec2}}
		for _, p := range pairs {
			s := p.owner.TakeSnapshots()[0]
			if s == nil {
				t.Fatalf("%s: no snapshot", p.name)
			}
			if p.any.Restore(s, s.Offset()) {
				t.Errorf("%s: another cache accepted the snapshot", p.name)
			}
			if kv.Restore(s, s.Offset()) && p.name != "KV" {
				t.Errorf("%s: a KV cache accepted its snapshot", p.name)
			}
			s.Close()
		}
	})
}
