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

// Float32 ops are compared with float64 Go references at ~1e-5 relative.
const (
	f32rtol = 1e-5
	f32atol = 1e-6
)

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func TestUnaryOps(t *testing.T) {
	cases := []struct {
		name   string
		op     func(*mlx.Array) *mlx.Array
		ref    func(float64) float64
		domain func(float64) float64 // maps N(0,1) samples into the op's domain
	}{
		{"negative", mlx.Negative, func(x float64) float64 { return -x }, nil},
		{"exp", mlx.Exp, math.Exp, nil},
		{"log", mlx.Log, math.Log, func(x float64) float64 { return math.Abs(x) + 0.1 }},
		{"log1p", mlx.Log1p, math.Log1p, func(x float64) float64 { return math.Abs(x) }},
		{"sigmoid", mlx.Sigmoid, sigmoid, nil},
		{"tanh", mlx.Tanh, math.Tanh, nil},
		{"rsqrt", mlx.Rsqrt, func(x float64) float64 { return 1 / math.Sqrt(x) }, func(x float64) float64 { return math.Abs(x) + 0.1 }},
		{"sqrt", mlx.Sqrt, math.Sqrt, math.Abs},
		{"square", mlx.Square, func(x float64) float64 { return x * x }, nil},
		{"abs", mlx.Abs, math.Abs, nil},
		{"floor", mlx.Floor, math.Floor, func(x float64) float64 { return 3 * x }},
		{"ceil", mlx.Ceil, math.Ceil, func(x float64) float64 { return 3 * x }},
		{"sin", mlx.Sin, math.Sin, nil},
		{"cos", mlx.Cos, math.Cos, nil},
		{"erf", mlx.Erf, math.Erf, nil},
		{"reciprocal", mlx.Reciprocal, func(x float64) float64 { return 1 / x }, func(x float64) float64 { return math.Abs(x) + 0.1 }},
		{"silu", mlx.Silu, func(x float64) float64 { return x * sigmoid(x) }, nil},
		{"softplus", mlx.Softplus, func(x float64) float64 { return math.Log1p(math.Exp(x)) }, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				x := randTensor(newRand(t), 3, 17)
				if c.domain != nil {
					x = mapT(x, c.domain)
				}
				x.roundF32()
				check(t, c.name, c.op(x.mlx()), mapT(x, c.ref), f32rtol, f32atol)
			})
		})
	}
}

func TestBinaryOpsBroadcast(t *testing.T) {
	cases := []struct {
		name string
		op   func(a, b *mlx.Array) *mlx.Array
		ref  func(x, y float64) float64
	}{
		{"add", mlx.Add, func(x, y float64) float64 { return x + y }},
		{"subtract", mlx.Subtract, func(x, y float64) float64 { return x - y }},
		{"multiply", mlx.Multiply, func(x, y float64) float64 { return x * y }},
		{"divide", mlx.Divide, func(x, y float64) float64 { return x / y }},
		{"maximum", mlx.Maximum, math.Max},
		{"minimum", mlx.Minimum, math.Min},
		{"logaddexp", mlx.LogAddExp, func(x, y float64) float64 { m := math.Max(x, y); return m + math.Log(math.Exp(x-m)+math.Exp(y-m)) }},
		{"equal", mlx.Equal, func(x, y float64) float64 { return b2f(x == y) }},
		{"less", mlx.Less, func(x, y float64) float64 { return b2f(x < y) }},
		{"greater_equal", mlx.GreaterEqual, func(x, y float64) float64 { return b2f(x >= y) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				r := newRand(t)
				a := randTensor(r, 4, 1, 5).roundF32()
				b := randTensor(r, 3, 1).roundF32()
				// Make some elements equal so comparisons see ties.
				a.data[0] = b.data[0]
				check(t, c.name, c.op(a.mlx(), b.mlx()), zip(a, b, c.ref), f32rtol, f32atol)
			})
		})
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func TestWhereAndLogical(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		x := randTensor(r, 2, 6).roundF32()
		y := randTensor(r, 2, 6).roundF32()
		cond := mlx.Greater(x.mlx(), y.mlx())
		want := zip(x, y, math.Max)
		check(t, "where", mlx.Where(cond, x.mlx(), y.mlx()), want, 0, 0)
		and := mlx.LogicalAnd(cond, mlx.LogicalNot(cond))
		got, err := and.Bools()
		t.NoErr(err)
		if slices.Contains(got, true) {
			t.Fatalf("c && !c has a true element: %v", got)
		}
	})
}

func TestReductions(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := randTensor(newRand(t), 3, 4, 5).roundF32()
		a := x.mlx()
		sum := func(acc, v float64) float64 { return acc + v }
		check(t, "sum axis 1", mlx.Sum(a, false, 1), reduceAxis(x, 1, false, 0, sum), f32rtol, 1e-5)
		check(t, "sum keepdims", mlx.Sum(a, true, -1), reduceAxis(x, -1, true, 0, sum), f32rtol, 1e-5)
		mean := reduceAxis(x, 2, false, 0, sum)
		for i := range mean.data {
			mean.data[i] /= 5
		}
		check(t, "mean", mlx.Mean(a, false, 2), mean, f32rtol, 1e-6)
		check(t, "max", mlx.Max(a, false, 0), reduceAxis(x, 0, false, math.Inf(-1), math.Max), 0, 0)
		check(t, "min", mlx.Min(a, false, 0), reduceAxis(x, 0, false, math.Inf(1), math.Min), 0, 0)
		lse := reduceAxis(x, -1, false, 0, func(acc, v float64) float64 { return acc + math.Exp(v) })
		lse = mapT(lse, math.Log)
		check(t, "logsumexp", mlx.LogSumExp(a, false, -1), lse, f32rtol, 1e-6)
		total := newTensor()
		total.data = []float64{0}
		for _, v := range x.data {
			total.data[0] += v
		}
		check(t, "sum all", mlx.Sum(a, false), total, 1e-5, 1e-5)
	})
}

func TestSoftmaxAndArgmax(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := randTensor(newRand(t), 4, 9).roundF32()
		want := newTensor(4, 9)
		wantArg := newTensor(4)
		for i := range 4 {
			row := x.data[i*9 : i*9+9]
			m := slices.Max(row)
			var z float64
			for _, v := range row {
				z += math.Exp(v - m)
			}
			for j, v := range row {
				want.data[i*9+j] = math.Exp(v-m) / z
			}
			wantArg.data[i] = float64(slices.Index(row, m))
		}
		check(t, "softmax", mlx.Softmax(x.mlx(), true, -1), want, f32rtol, 1e-7)
		check(t, "argmax", mlx.Argmax(x.mlx(), -1, false), wantArg, 0, 0)
		// Ties go to the first index.
		tie := mlx.FromFloat32s([]float32{1, 3, 3, 0}, 1, 4)
		idx := t.Int32s(mlx.Argmax(tie, -1, false))
		if idx[0] != 1 {
			t.Fatalf("argmax of a tie = %d, want 1 (lowest index)", idx[0])
		}
	})
}

func TestTopKSortArgpartition(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := randTensor(newRand(t), 3, 11).roundF32()
		a := x.mlx()
		top := t.Float32s(mlx.TopK(a, 4, -1))
		sorted := t.Float32s(mlx.Sort(a, -1))
		order := t.Int32s(mlx.Argsort(a, -1))
		part := t.Int32s(mlx.Argpartition(a, 3, -1))
		for i := range 3 {
			row := append([]float64(nil), x.data[i*11:i*11+11]...)
			want := append([]float64(nil), row...)
			sort.Float64s(want)
			for j := range 11 {
				if float64(sorted[i*11+j]) != want[j] {
					t.Fatalf("sort row %d = %v, want %v", i, sorted[i*11:i*11+11], want)
				}
				if row[order[i*11+j]] != want[j] {
					t.Fatalf("argsort row %d does not sort the row", i)
				}
			}
			gotTop := append([]float32(nil), top[i*4:i*4+4]...)
			slices.Sort(gotTop)
			for j := range 4 {
				if float64(gotTop[j]) != want[7+j] {
					t.Fatalf("topk row %d = %v, want the 4 largest %v", i, gotTop, want[7:])
				}
			}
			pivot := row[part[i*11+3]]
			for j := range 11 {
				v := row[part[i*11+j]]
				if (j < 3 && v > pivot) || (j > 3 && v < pivot) {
					t.Fatalf("argpartition row %d does not partition around element 3", i)
				}
			}
		}
	})
}

func TestCumsum(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := randTensor(newRand(t), 2, 6).roundF32()
		incl, excl, rev := newTensor(2, 6), newTensor(2, 6), newTensor(2, 6)
		for i := range 2 {
			var s float64
			for j := range 6 {
				excl.data[i*6+j] = s
				s += x.data[i*6+j]
				incl.data[i*6+j] = s
			}
			s = 0
			for j := 5; j >= 0; j-- {
				s += x.data[i*6+j]
				rev.data[i*6+j] = s
			}
		}
		check(t, "inclusive", mlx.Cumsum(x.mlx(), -1, false, true), incl, f32rtol, 1e-6)
		check(t, "exclusive", mlx.Cumsum(x.mlx(), -1, false, false), excl, f32rtol, 1e-6)
		check(t, "reverse", mlx.Cumsum(x.mlx(), -1, true, true), rev, f32rtol, 1e-6)
	})
}

func TestShapeOps(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := randTensor(newRand(t), 2, 3, 4).roundF32()
		a := x.mlx()
		// Reshape keeps row-major order.
		r := x.clone()
		r.shape = []int{6, 4}
		check(t, "reshape", mlx.Reshape(a, 6, -1), r, 0, 0)
		// Transpose (2,0,1).
		tr := newTensor(4, 2, 3)
		for i := range 2 {
			for j := range 3 {
				for k := range 4 {
					tr.data[tr.index([]int{k, i, j})] = x.at(i, j, k)
				}
			}
		}
		check(t, "transpose", mlx.Transpose(a, 2, 0, 1), tr, 0, 0)
		sw := newTensor(2, 4, 3)
		for i := range 2 {
			for j := range 3 {
				for k := range 4 {
					sw.data[sw.index([]int{i, k, j})] = x.at(i, j, k)
				}
			}
		}
		check(t, "swapaxes", mlx.SwapAxes(a, -1, -2), sw, 0, 0)
		e := x.clone()
		e.shape = []int{2, 1, 3, 4}
		check(t, "expand_dims", mlx.ExpandDims(a, 1), e, 0, 0)
		check(t, "squeeze", mlx.Squeeze(mlx.ExpandDims(a, 1), 1), x, 0, 0)
		// Broadcast, then read: the result has zero strides until made contiguous.
		row := randTensor(newRand(t), 1, 4).roundF32()
		bc := newTensor(3, 4)
		for i := range 3 {
			copy(bc.data[i*4:], row.data)
		}
		check(t, "broadcast_to", mlx.BroadcastTo(row.mlx(), 3, 4), bc, 0, 0)
		check(t, "contiguous", mlx.Contiguous(mlx.BroadcastTo(row.mlx(), 3, 4)), bc, 0, 0)
	})
}

func (t *tensor) clone() *tensor {
	return &tensor{shape: append([]int(nil), t.shape...), data: append([]float64(nil), t.data...)}
}

func TestPadConcatStackSplit(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		x := randTensor(r, 2, 3).roundF32()
		y := randTensor(r, 2, 2).roundF32()
		pad := newTensor(2, 6)
		for i := range 2 {
			for j := range 3 {
				pad.data[i*6+2+j] = x.at(i, j)
			}
			pad.data[i*6+5] = 0
			pad.data[i*6+0], pad.data[i*6+1] = 0, 0
		}
		check(t, "pad", mlx.Pad(x.mlx(), []int{1}, []int{2}, []int{1}, nil), pad, 0, 0)
		cat := newTensor(2, 5)
		for i := range 2 {
			copy(cat.data[i*5:], x.data[i*3:i*3+3])
			copy(cat.data[i*5+3:], y.data[i*2:i*2+2])
		}
		check(t, "concatenate", mlx.Concatenate(1, x.mlx(), y.mlx()), cat, 0, 0)
		st := newTensor(2, 2, 3)
		copy(st.data, x.data)
		copy(st.data[6:], x.data)
		check(t, "stack", mlx.Stack(0, x.mlx(), x.mlx()), st, 0, 0)
		parts := mlx.Split(mlx.Concatenate(1, x.mlx(), y.mlx()), 1, 3)
		check(t, "split part 0", parts[0], x, 0, 0)
		check(t, "split part 1", parts[1], y, 0, 0)
	})
}

func TestSliceAndUpdate(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		x := randTensor(r, 4, 6).roundF32()
		u := randTensor(r, 2, 3).roundF32()
		sl := newTensor(2, 3)
		for i := range 2 {
			for j := range 3 {
				sl.data[i*3+j] = x.at(1+i, 2+j)
			}
		}
		check(t, "slice", mlx.Slice(x.mlx(), []int{1, 2}, []int{3, 5}), sl, 0, 0)
		check(t, "slice axis", mlx.SliceAxis(mlx.SliceAxis(x.mlx(), 0, 1, 3), 1, 2, 5), sl, 0, 0)
		strided := newTensor(2, 3)
		for i := range 2 {
			for j := range 3 {
				strided.data[i*3+j] = x.at(2*i, 2*j)
			}
		}
		check(t, "strided slice", mlx.SliceStrided(x.mlx(), []int{0, 0}, []int{4, 6}, []int{2, 2}), strided, 0, 0)
		up := x.clone()
		for i := range 2 {
			for j := range 3 {
				up.data[up.index([]int{1 + i, 2 + j})] = u.at(i, j)
			}
		}
		check(t, "slice_update", mlx.SliceUpdate(x.mlx(), u.mlx(), []int{1, 2}, []int{3, 5}), up, 0, 0)
		start := mlx.FromInt32s([]int32{1, 2})
		check(t, "dynamic slice", mlx.SliceDynamic(x.mlx(), start, []int{0, 1}, []int{2, 3}), sl, 0, 0)
		check(t, "dynamic slice_update", mlx.SliceUpdateDynamic(x.mlx(), u.mlx(), start, []int{0, 1}), up, 0, 0)
	})
}

func TestGatherScatter(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		table := randTensor(r, 7, 3).roundF32()
		ids := []int32{6, 0, 3, 3}
		take := newTensor(4, 3)
		for i, id := range ids {
			copy(take.data[i*3:], table.data[int(id)*3:int(id)*3+3])
		}
		check(t, "take", mlx.Take(table.mlx(), mlx.FromInt32s(ids), 0), take, 0, 0)

		x := randTensor(r, 2, 5).roundF32()
		idx := []int32{4, 1, 0, 0}
		tal := newTensor(2, 2)
		for i := range 2 {
			for j := range 2 {
				tal.data[i*2+j] = x.at(i, int(idx[i*2+j]))
			}
		}
		check(t, "take_along_axis", mlx.TakeAlongAxis(x.mlx(), mlx.FromInt32s(idx, 2, 2), 1), tal, 0, 0)

		vals := randTensor(r, 2, 2).roundF32()
		put, add := x.clone(), x.clone()
		for i := range 2 {
			for j := range 2 {
				put.data[i*5+int(idx[i*2+j])] = vals.at(i, j)
				add.data[i*5+int(idx[i*2+j])] += vals.at(i, j)
			}
		}
		// Row 1 writes index 0 twice: put keeps one value, scatter-add sums both.
		check(t, "scatter_add_axis", mlx.ScatterAddAxis(x.mlx(), mlx.FromInt32s(idx, 2, 2), vals.mlx(), 1), add, f32rtol, 1e-6)
		// Indices and values of shape [1, 2] broadcast over both rows.
		got := mlx.PutAlongAxis(x.mlx(), mlx.FromInt32s(idx[:2], 1, 2), mlx.SliceAxis(vals.mlx(), 0, 0, 1), 1)
		both := x.clone()
		for row := range 2 {
			both.data[row*5+4] = vals.at(0, 0)
			both.data[row*5+1] = vals.at(0, 1)
		}
		check(t, "put_along_axis", got, both, 0, 0)
	})
}

func TestAsTypeRounding(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		// bfloat16 keeps 8 significand bits (round to nearest even);
		// float16 keeps 11.
		in := []float32{1, 1.00390625, 1.01171875, 3.14159265, -2.718281828, 65504, 1e-3}
		x := mlx.FromFloat32s(in)
		bf := t.Float32s(mlx.AsType(x, mlx.BFloat16))
		f16 := t.Float32s(mlx.AsType(x, mlx.Float16))
		for i, v := range in {
			if want := roundSignificand(float64(v), 8); float64(bf[i]) != want {
				t.Fatalf("bfloat16(%g) = %g, want %g", v, bf[i], want)
			}
			if want := roundSignificand(float64(v), 11); float64(f16[i]) != want {
				t.Fatalf("float16(%g) = %g, want %g", v, f16[i], want)
			}
		}
		i32 := t.Int32s(mlx.AsType(mlx.FromFloat32s([]float32{2.9, -2.9}), mlx.Int32))
		if !slices.Equal(i32, []int32{2, -2}) {
			t.Fatalf("int32 cast truncates: got %v", i32)
		}
	})
}

// roundSignificand rounds v to bits significant bits, ties to even (normal
// numbers only).
func roundSignificand(v float64, bits int) float64 {
	if v == 0 {
		return 0
	}
	frac, exp := math.Frexp(v) // v = frac · 2^exp, 0.5 <= |frac| < 1
	scaled := frac * math.Ldexp(1, bits)
	return math.Ldexp(math.RoundToEven(scaled), exp-bits)
}

// Linear's views of an evaluated weight are made once and evaluated: a
// product of a batch of one ([1, L, in]) or of rows ([L, in]) is one Matmul
// node, with no transpose of the weight and no flatten or unflatten around
// it; a compiled function that reads the weight bakes the view in as a
// constant, so each call adds only its product. A weight still pending in
// the graph is left so; a weight given to a compiled function as an input
// works as before. The values are a float64 product's.
func TestLinearIsOneNode(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		x := randTensor(r, 1, 4, 16).roundF32()
		w := randTensor(r, 5, 16).roundF32()
		wt := newTensor(16, 5)
		for i := range 5 {
			for j := range 16 {
				wt.data[j*5+i] = w.at(i, j)
			}
		}
		want := matmulRef(x, wt)
		wm := w.mlx()
		t.NoErr(mlx.Eval(wm))
		for _, c := range []struct {
			name string
			x    *mlx.Array
		}{{"a batch of one", x.mlx()}, {"rows", mlx.Reshape(x.mlx(), 4, 16)}} {
			t.NoErr(mlx.Eval(c.x))
			y := mlx.Linear(c.x, wm)
			wantOneNode(t, c.name, "Matmul", true, y)
			check(t, c.name, mlx.Reshape(y, 1, 4, 5), want, 1e-5, 1e-5)
		}
		baked := mlx.Compile("linear_baked", 1, func(in []*mlx.Array) []*mlx.Array {
			return []*mlx.Array{mlx.Linear(in[0], wm)}
		})
		defer baked.Free()
		for call := range 2 {
			y := baked.Call(x.mlx())[0]
			wantOneNode(t, fmt.Sprintf("compiled, call %d", call), "Matmul", false, y)
			ops, err := mlx.GraphOps(y)
			t.NoErr(err)
			if ops["Transpose"]+ops["Flatten"]+ops["Unflatten"]+ops["ExpandDims"] != 0 {
				t.Fatalf("compiled call %d replays views of the weight: %v", call, ops)
			}
			check(t, "compiled", y, want, 1e-5, 1e-5)
		}
		// A weight computed in the same graph (a dequantized one, say) is
		// not evaluated behind the caller's back: its product stays lazy.
		pending := mlx.MultiplyScalar(wm, 2)
		y := mlx.Linear(x.mlx(), pending)
		ops, err := mlx.GraphOps(y)
		t.NoErr(err)
		if ops["Multiply"] != 1 {
			t.Fatalf("a pending weight was evaluated while the graph was built: %v", ops)
		}
		check(t, "a pending weight", y, mapT(want, func(v float64) float64 { return 2 * v }), 1e-5, 1e-5)
		input := mlx.Compile("linear_input", 1, func(in []*mlx.Array) []*mlx.Array {
			return []*mlx.Array{mlx.Linear(in[0], in[1])}
		})
		defer input.Free()
		check(t, "weight as a compiled input", input.Call(x.mlx(), wm)[0], want, 1e-5, 1e-5)
		check(t, "again, another weight", input.Call(x.mlx(), mlx.MultiplyScalar(wm, 2))[0], mapT(want, func(v float64) float64 { return 2 * v }), 1e-5, 1e-5)
	})
}

func TestMatmulAndLinear(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		r := newRand(t)
		a := randTensor(r, 2, 5, 7).roundF32()
		w := randTensor(r, 3, 7).roundF32() // [out, in]
		wt := newTensor(7, 3)
		for i := range 3 {
			for j := range 7 {
				wt.data[j*3+i] = w.at(i, j)
			}
		}
		want := matmulRef(a, wt)
		check(t, "linear", mlx.Linear(a.mlx(), w.mlx()), want, 1e-5, 1e-5)
		check(t, "matmul", mlx.Matmul(a.mlx(), wt.mlx()), want, 1e-5, 1e-5)
		c := randTensor(r, 5, 3).roundF32()
		am := zip(mapT(want, func(x float64) float64 { return 2 * x }), mapT(c, func(x float64) float64 { return 0.5 * x }), func(x, y float64) float64 { return x + y })
		check(t, "addmm", mlx.Addmm(c.mlx(), a.mlx(), wt.mlx(), 2, 0.5), am, 1e-5, 1e-5)
	})
}

func TestLowPrecisionMatmul(t *testing.T) {
	for _, dt := range []mlx.DType{mlx.BFloat16, mlx.Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			mlxtest.Run(t, func(t *mlxtest.T) {
				r := newRand(t)
				a := randTensor(r, 4, 16).roundF32()
				b := randTensor(r, 16, 8).roundF32()
				got := mlx.Matmul(mlx.AsType(a.mlx(), dt), mlx.AsType(b.mlx(), dt))
				if got.DType() != dt {
					t.Fatalf("dtype %v, want %v", got.DType(), dt)
				}
				// Inputs rounded to 8 (11) significand bits: relative error ~2^-8.
				tol := 2e-2
				if dt == mlx.Float16 {
					tol = 4e-3
				}
				check(t, "matmul", got, matmulRef(a, b), tol, tol*4)
			})
		})
	}
}

func TestCreation(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		full := newTensor(2, 3)
		for i := range full.data {
			full.data[i] = 2.5
		}
		check(t, "full", mlx.Full(2.5, mlx.Float32, 2, 3), full, 0, 0)
		check(t, "zeros", mlx.Zeros(mlx.Float32, 2, 3), newTensor(2, 3), 0, 0)
		ar := newTensor(5)
		for i := range ar.data {
			ar.data[i] = 1 + 2*float64(i)
		}
		check(t, "arange", mlx.Arange(1, 10, 2, mlx.Float32), ar, 0, 0)
		tri := newTensor(3, 4)
		for i := range 3 {
			for j := range 4 {
				tri.data[i*4+j] = b2f(j <= i+1)
			}
		}
		check(t, "tri", mlx.Tri(3, 4, 1, mlx.Float32), tri, 0, 0)
		s := mlx.Scalar(3, mlx.BFloat16)
		if s.DType() != mlx.BFloat16 || s.NDim() != 0 {
			t.Fatalf("scalar is %v", s)
		}
		v, err := s.Item()
		t.NoErr(err)
		if v != 3 {
			t.Fatalf("scalar value %g, want 3", v)
		}
		ints := t.Int32s(mlx.FromInt64s([]int64{-5, 1 << 40}))
		if ints[0] != -5 {
			t.Fatalf("int64 round trip gave %v", ints)
		}
		raw, err := mlx.FromUint8s([]uint8{1, 2, 255}).Bytes()
		t.NoErr(err)
		if !slices.Equal(raw, []byte{1, 2, 255}) {
			t.Fatalf("uint8 bytes %v", raw)
		}
		u := t.Int32s(mlx.FromUint32s([]uint32{7, 9}))
		if !slices.Equal(u, []int32{7, 9}) {
			t.Fatalf("uint32 values %v", u)
		}
	})
}
