package mlx_test

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// topKRef is the host's top k of each row of x [rows, n]: indices sorted by
// descending value, equal values by ascending index, NaN after every
// number.
func topKRef(x []float32, rows, n, k int) (ids []int32, vals []float32) {
	for r := range rows {
		row := x[r*n : (r+1)*n]
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool {
			va, vb := row[idx[a]], row[idx[b]]
			if va != va || vb != vb {
				return vb != vb && va == va
			}
			return va > vb
		})
		for _, i := range idx[:k] {
			ids = append(ids, int32(i))
			vals = append(vals, row[i])
		}
	}
	return ids, vals
}

// TopKCPU against the host's sort and against the composition of MLX ops it
// replaces in DFlash2's selector (argpartition, sort, argsort, gathers), on
// rows full of ties (values on a grid of quarters, zeros of both signs), for
// a short row with a remainder and a go-tiny vocabulary row, through a
// strided view, with NaN, and the calls it leaves to the caller.
func TestTopKCPU(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			if _, _, ok := mlx.TopKCPU(mlx.Zeros(mlx.Float32, 2, 8), 2); ok {
				t.Fatalf("TopKCPU served a call off the CPU")
			}
			return
		}
		r := newRand(t)
		for _, n := range []int{37, 8192} {
			const rows = 8
			x := make([]float32, rows*n)
			for i := range x {
				x[i] = float32(math.Round(r.NormFloat64()*4) / 4)
				if x[i] == 0 && r.IntN(2) == 0 {
					x[i] = float32(math.Copysign(0, -1))
				}
			}
			xm := mlx.FromFloat32s(x, rows, n)
			// The same values through a view whose rows are strided.
			xv := mlx.Transpose(mlx.Contiguous(mlx.Transpose(xm, 1, 0)), 1, 0)
			t.Eval(xm, xv)
			for _, k := range []int{1, 5, 16} {
				wantIDs, wantVals := topKRef(x, rows, n, k)
				neg := mlx.Negative(xm)
				top := mlx.Sort(mlx.SliceAxis(mlx.Argpartition(neg, k-1, -1), 1, 0, k), 1)
				order := mlx.Argsort(mlx.TakeAlongAxis(neg, top, 1), 1)
				composed := t.Int32s(mlx.AsType(mlx.TakeAlongAxis(top, order, 1), mlx.Int32))
				if !slices.Equal(composed, wantIDs) {
					t.Fatalf("n %d, k %d: MLX's composition gives %v…, the host %v…", n, k, composed[:k], wantIDs[:k])
				}
				for _, in := range []struct {
					name string
					x    *mlx.Array
				}{{"contiguous", xm}, {"view", xv}} {
					name := fmt.Sprintf("n %d, k %d, %s", n, k, in.name)
					ids, vals, ok := mlx.TopKCPU(in.x, k)
					if !ok {
						t.Fatalf("%s: the CPU kernel did not serve a float32 matrix", name)
					}
					wantOneNode(t, name, "TopKCPU", true, ids, vals)
					if got := t.Int32s(ids); !slices.Equal(got, wantIDs) {
						t.Fatalf("%s: ids %v…, want %v…", name, got[:k], wantIDs[:k])
					}
					got := t.Float32s(vals)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(wantVals[i]) {
							t.Fatalf("%s: value %d is %v, want %v", name, i, got[i], wantVals[i])
						}
					}
				}
			}
		}
		// NaN goes after every number, infinities where they belong.
		nan := float32(math.NaN())
		inf := float32(math.Inf(1))
		x := []float32{nan, 1, -inf, nan, inf, 1, 0, nan}
		ids, vals, ok := mlx.TopKCPU(mlx.FromFloat32s(x, 1, 8), 8)
		if !ok {
			t.Fatalf("TopKCPU did not serve the NaN row")
		}
		if got, want := t.Int32s(ids), []int32{4, 1, 5, 6, 2, 0, 3, 7}; !slices.Equal(got, want) {
			t.Fatalf("ids with NaN %v, want %v (values %v)", got, want, t.Float32s(vals))
		}
		for _, c := range []struct {
			name string
			x    *mlx.Array
			k    int
		}{
			{"bfloat16", mlx.AsType(mlx.Zeros(mlx.Float32, 2, 8), mlx.BFloat16), 2},
			{"rank 3", mlx.Zeros(mlx.Float32, 1, 2, 8), 2},
			{"k 0", mlx.Zeros(mlx.Float32, 2, 8), 0},
			{"k > n", mlx.Zeros(mlx.Float32, 2, 8), 9},
		} {
			if _, _, ok := mlx.TopKCPU(c.x, c.k); ok {
				t.Fatalf("TopKCPU served %s", c.name)
			}
		}
	})
}
