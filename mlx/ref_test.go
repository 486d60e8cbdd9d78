package mlx_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// tensor is the independent Go computation the op tests compare MLX against:
// a dense row-major float64 array.
type tensor struct {
	shape []int
	data  []float64
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func newTensor(shape ...int) *tensor {
	return &tensor{shape: append([]int(nil), shape...), data: make([]float64, numel(shape))}
}

func randTensor(r *rand.Rand, shape ...int) *tensor {
	t := newTensor(shape...)
	for i := range t.data {
		t.data[i] = r.NormFloat64()
	}
	return t
}

func strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// index converts a multi-index to a flat offset.
func (t *tensor) index(idx []int) int {
	st := strides(t.shape)
	off := 0
	for i, v := range idx {
		off += v * st[i]
	}
	return off
}

// unravel converts a flat offset to a multi-index of shape.
func unravel(flat int, shape []int) []int {
	idx := make([]int, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		idx[i] = flat % shape[i]
		flat /= shape[i]
	}
	return idx
}

func (t *tensor) at(idx ...int) float64 { return t.data[t.index(idx)] }

func (t *tensor) f32() []float32 {
	out := make([]float32, len(t.data))
	for i, v := range t.data {
		out[i] = float32(v)
	}
	return out
}

// mlx returns t as a float32 MLX array.
func (t *tensor) mlx() *mlx.Array { return mlx.FromFloat32s(t.f32(), t.shape...) }

// roundF32 makes t exactly what MLX receives as float32 input.
func (t *tensor) roundF32() *tensor {
	for i, v := range t.data {
		t.data[i] = float64(float32(v))
	}
	return t
}

func broadcastShape(a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := range n {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		out[i] = max(da, db)
	}
	return out
}

// bindex maps an index of the broadcast shape to t's flat offset.
func (t *tensor) bindex(idx []int) int {
	off := len(idx) - len(t.shape)
	local := make([]int, len(t.shape))
	for i := range t.shape {
		if t.shape[i] != 1 {
			local[i] = idx[i+off]
		}
	}
	return t.index(local)
}

func zip(a, b *tensor, f func(x, y float64) float64) *tensor {
	out := newTensor(broadcastShape(a.shape, b.shape)...)
	for i := range out.data {
		idx := unravel(i, out.shape)
		out.data[i] = f(a.data[a.bindex(idx)], b.data[b.bindex(idx)])
	}
	return out
}

func mapT(a *tensor, f func(x float64) float64) *tensor {
	out := newTensor(a.shape...)
	for i, v := range a.data {
		out.data[i] = f(v)
	}
	return out
}

// reduceAxis folds axis of a with f starting from init.
func reduceAxis(a *tensor, axis int, keep bool, init float64, f func(acc, x float64) float64) *tensor {
	if axis < 0 {
		axis += len(a.shape)
	}
	outShape := append([]int(nil), a.shape...)
	outShape[axis] = 1
	out := newTensor(outShape...)
	for i := range out.data {
		out.data[i] = init
	}
	for i, v := range a.data {
		idx := unravel(i, a.shape)
		idx[axis] = 0
		o := out.index(idx)
		out.data[o] = f(out.data[o], v)
	}
	if !keep {
		out.shape = append(outShape[:axis:axis], outShape[axis+1:]...)
	}
	return out
}

func matmulRef(a, b *tensor) *tensor {
	// a [..., m, k] · b [k, n] or batched with equal leading dims.
	m, k := a.shape[len(a.shape)-2], a.shape[len(a.shape)-1]
	n := b.shape[len(b.shape)-1]
	batch := numel(a.shape[:len(a.shape)-2])
	outShape := append(append([]int(nil), a.shape[:len(a.shape)-2]...), m, n)
	out := newTensor(outShape...)
	bBatched := len(b.shape) > 2
	for bi := range batch {
		for i := range m {
			for j := range n {
				var s float64
				for p := range k {
					av := a.data[bi*m*k+i*k+p]
					var bv float64
					if bBatched {
						bv = b.data[bi*k*n+p*n+j]
					} else {
						bv = b.data[p*n+j]
					}
					s += av * bv
				}
				out.data[bi*m*n+i*n+j] = s
			}
		}
	}
	return out
}

// closeTo fails unless got matches want elementwise within |g−w| <= atol + rtol·|w|.
func closeTo(t *mlxtest.T, name string, got []float32, want *tensor, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want.data) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want.data))
	}
	for i, g := range got {
		w := want.data[i]
		if math.IsNaN(w) != math.IsNaN(float64(g)) || math.Abs(float64(g)-w) > atol+rtol*math.Abs(w) {
			t.Fatalf("%s: element %d (index %v) = %g, want %g (rtol %g, atol %g)", name, i, unravel(i, want.shape), g, w, rtol, atol)
		}
	}
}

func sameShape(t *mlxtest.T, name string, a *mlx.Array, want []int) {
	t.Helper()
	if fmt.Sprint(a.Shape()) != fmt.Sprint(want) {
		t.Fatalf("%s: shape %v, want %v", name, a.Shape(), want)
	}
}

// check evaluates a and compares it with want (shape and values).
func check(t *mlxtest.T, name string, a *mlx.Array, want *tensor, rtol, atol float64) {
	t.Helper()
	if err := mlx.Eval(a); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	sameShape(t, name, a, want.shape)
	closeTo(t, name, t.Float32s(a), want, rtol, atol)
}

func newRand(t testing.TB) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(len(t.Name())), 20261202))
}
