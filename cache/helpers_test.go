package cache_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// Test rows carry their slot in their values, so a wrong row is easy to see:
// the key at slot s, head h, feature d is s + h/10 + d/1000 (the value is
// its negation).
const testHeads, testDim = 2, 3

func keyValue(s, h, d int) float32 { return float32(s) + float32(h)/10 + float32(d)/1000 }

// rows returns keys and values [1, H, n, D] for slots start … start+n−1.
func rows(start, n int) (k, v *mlx.Array) {
	kd := make([]float32, 0, testHeads*n*testDim)
	vd := make([]float32, 0, cap(kd))
	for h := range testHeads {
		for s := start; s < start+n; s++ {
			for d := range testDim {
				kd = append(kd, keyValue(s, h, d))
				vd = append(vd, -keyValue(s, h, d))
			}
		}
	}
	return mlx.FromFloat32s(kd, 1, testHeads, n, testDim), mlx.FromFloat32s(vd, 1, testHeads, n, testDim)
}

// slotsOf decodes the slot of every row of a history [1, H, N, D] written
// with rows, checking that keys and values agree and that every head and
// feature carries the same slot.
func slotsOf(t *mlxtest.T, k, v *mlx.Array) []int {
	t.Helper()
	n := k.Dim(2)
	kv, vv := t.Float32s(k), t.Float32s(v)
	out := make([]int, n)
	for i := range n {
		s := int(math.Round(float64(kv[i*testDim])))
		out[i] = s
		for h := range testHeads {
			for d := range testDim {
				j := (h*n+i)*testDim + d
				if want := keyValue(s, h, d); kv[j] != want || vv[j] != -want {
					t.Fatalf("row %d head %d dim %d: key %v value %v, want %v and %v", i, h, d, kv[j], vv[j], want, -want)
				}
			}
		}
	}
	return out
}

// writeKV writes slots from … from+n−1 to c in chunks of the given sizes
// (one chunk of n when none are given) and returns the last history.
func writeKV(c *cache.KV, from, n int, chunks ...int) (k, v *mlx.Array) {
	if len(chunks) == 0 {
		chunks = []int{n}
	}
	for done, i := 0, 0; done < n; i++ {
		size := min(chunks[i%len(chunks)], n-done)
		kr, vr := rows(from+done, size)
		k, v = c.Update(kr, vr)
		done += size
	}
	return k, v
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func eqInts(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// mustPanic runs fn and fails unless it panics with a message containing
// want.
func mustPanic(t testing.TB, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic, want one mentioning %q", want)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("panic %q, want one mentioning %q", msg, want)
		}
	}()
	fn()
}

// junk marks rows of rejected drafts: their slot values are offset by junk,
// so a stale row that survives a rollback decodes to a slot >= junk.
const junk = 1000

// specRows returns the rows of a k-row speculative write at from whose first
// j rows are the true ones (as rows writes them) and the rest junk.
func specRows(from, j, k int) (kr, vr *mlx.Array) {
	kr, vr = rows(from, j)
	if j == k {
		return kr, vr
	}
	kj, vj := rows(from+j+junk, k-j)
	if j == 0 {
		return kj, vj
	}
	return mlx.Concatenate(2, kr, kj), mlx.Concatenate(2, vr, vj)
}

// chunk returns rows [i, i+n) of a [1, H, L, D] array.
func chunk(a *mlx.Array, i, n int) *mlx.Array { return mlx.SliceAxis(a, 2, i, i+n) }
