package nn

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// The few-row (tensor-core) GEMV kernel on the GPU of a CUDA build: for 1,
// 3, 8 and 17 rows and the shapes of Qwen3.5-4B's projections (K 2560 and
// 9216; an odd N; N 4500, launched with 8 warps per block where the others
// get 16; K 2568, which ends in a partial 32-wide chunk), every output is
// within one bfloat16 rounding of a float32 product of the same bfloat16
// values (the reference: MLX's float32 matmul), and every row of a many-row
// product has exactly the bits of that row run alone — what lets a
// verification row equal a decode step's. A misaligned view takes the
// scalar loads and gives the same bits.
func TestRowsGEMVMatchesAndIsRowStable(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the few-row GEMV kernel needs the GPU of a CUDA build")
		}
		for _, shape := range [][2]int{{2560, 2561}, {9216, 1000}, {256, 248}, {2560, 4500}, {2568, 300}} {
			k, n := shape[0], shape[1]
			w := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(1), mlx.Float32, 0, 0.05, n, k), mlx.BFloat16)
			all := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(2), mlx.Float32, 0, 1, 17, k), mlx.BFloat16)
			for _, rows := range []int{1, 3, 8, 17} {
				x := mlx.SliceAxis(all, 0, 0, rows)
				got := rowsGEMV(mlx.Reshape(x, 1, rows, k), w)
				if got == nil {
					t.Fatalf("K %d, N %d, %d rows: the kernel did not run", k, n, rows)
				}
				ref := t.Float32s(mlx.Linear(mlx.AsType(x, mlx.Float32), mlx.AsType(w, mlx.Float32)))
				g := t.Float32s(mlx.AsType(got, mlx.Float32))
				for i := range ref {
					// One bfloat16 rounding (8 bits of mantissa) plus the
					// float32 sums' different order.
					if d := math.Abs(float64(g[i] - ref[i])); d > math.Abs(float64(ref[i]))/128+1e-3 {
						t.Fatalf("K %d, N %d, %d rows: output %d = %g, want %g", k, n, rows, i, g[i], ref[i])
					}
				}
				for r := range rows {
					alone := t.Float32s(mlx.AsType(rowsGEMV(mlx.SliceAxis(x, 0, r, r+1), w), mlx.Float32))
					for j := range n {
						if alone[j] != g[r*n+j] {
							t.Fatalf("K %d, N %d: row %d of %d differs from the row alone at %d: %g vs %g", k, n, r, rows, j, g[r*n+j], alone[j])
						}
					}
				}
			}
			// A view starting 1 element in: not 16-byte aligned.
			wide := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(3), mlx.Float32, 0, 1, 1, k+8), mlx.BFloat16)
			view := mlx.SliceAxis(wide, 1, 1, k+1)
			a := t.Float32s(mlx.AsType(rowsGEMV(view, w), mlx.Float32))
			b := t.Float32s(mlx.AsType(rowsGEMV(mlx.Add(view, mlx.Zeros(mlx.BFloat16, 1, k)), w), mlx.Float32))
			for j := range a {
				if a[j] != b[j] {
					t.Fatalf("K %d, N %d: a misaligned view gives %g at %d, an aligned copy %g", k, n, a[j], j, b[j])
				}
			}
		}
	})
}

// BenchmarkRowsGEMV compares the few-row kernel with MLX's own product (its
// gemv at 1 row, cuBLAS at 8) on the projection shapes of Qwen3.5-4B and
// -27B, on the GPU: 16 products per evaluation, each on its own copy of the
// weights out of at least 512 MB of them, so that they stream from memory
// rather than from the 50 MB L2 cache. It reports the weights' bandwidth in
// GB/s with MLX's own work around each product (graph capture, per-node
// host work) included, which at 8 rows sets the pace more than either
// kernel does; scripts/rowsgemv_gpu_time.py times the GPU alone.
func BenchmarkRowsGEMV(b *testing.B) {
	shapes := []struct {
		name string
		k, n int
	}{
		{"4B-in", 2560, 12352}, {"4B-down", 9216, 2560}, {"4B-out", 4096, 2560}, {"4B-head", 2560, 248320},
		{"27B-mlp-in", 5120, 34816}, {"27B-down", 17408, 5120}, {"27B-out", 6144, 5120},
	}
	for _, sh := range shapes {
		for _, rows := range []int{1, 8} {
			for _, impl := range []string{"mlx", "kernel", "mlx-f32", "kernel-f32"} {
				dt, size := mlx.BFloat16, 2.0
				if strings.HasSuffix(impl, "-f32") {
					dt, size = mlx.Float32, 4
				}
				b.Run(fmt.Sprintf("%s/rows%d/%s", sh.name, rows, impl), func(b *testing.B) {
					mlxtest.Run(b, func(t *mlxtest.T) {
						if !mlx.GPUAvailable() {
							t.Skip("the few-row GEMV kernel needs the GPU of a CUDA build")
						}
						const per = 16
						copies := max(per, int(512e6/(size*float64(sh.n)*float64(sh.k))))
						base := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(1), mlx.Float32, 0, 0.05, sh.n, sh.k), dt)
						ws := make([]*mlx.Array, copies)
						for i := range ws {
							// Distinct buffers: the weights times a scalar.
							ws[i] = mlx.Multiply(base, mlx.Scalar(1+float64(i)/1024, dt))
						}
						x := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(2), mlx.Float32, 0, 1, 1, rows, sh.k), dt)
						mlx.Pin(append(ws, x)...)
						defer mlx.Free(append(ws, x)...)
						t.Eval(append(ws, x)...)
						next := 0
						t.BenchEvals(func() []*mlx.Array {
							outs := make([]*mlx.Array, per)
							for i := range outs {
								w := ws[next%copies]
								next++
								if strings.HasPrefix(impl, "mlx") {
									outs[i] = mlx.Linear(x, w)
								} else if outs[i] = rowsGEMV(x, w); outs[i] == nil {
									t.Fatal("the kernel did not run")
								}
							}
							return outs
						})
						bytes := float64(sh.n) * float64(sh.k) * size * per * float64(b.N)
						b.ReportMetric(bytes/b.Elapsed().Seconds()/1e9, "GB/s")
					})
				})
			}
		}
	}
}

// SPECULA_ROWS_GEMV's values: unset every bfloat16 row count and float32
// products of two rows or more, "verify" two rows or more, "1" every row
// count, anything else never.
func TestParseRowsGEMV(t *testing.T) {
	for v, want := range map[string][2]int{"": {1, 2}, "0": {0, 0}, "1": {1, 1}, "verify": {2, 2}, "2": {0, 0}, "true": {0, 0}, "VERIFY": {0, 0}} {
		got := parseRowsGEMV(v)
		if half, f32 := got.of(mlx.BFloat16), got.of(mlx.Float32); half != want[0] || f32 != want[1] || got.of(mlx.Float16) != want[0] {
			t.Errorf("parseRowsGEMV(%q): from %d rows in bfloat16 and float16, %d in float32; want %d and %d", v, half, f32, want[0], want[1])
		}
	}
}

// Linear sends a bfloat16 product to the few-row kernel exactly when it has
// rowsGEMVFrom rows or more (up to maxGEMVRows) and to MLX otherwise: by
// default a decode step's row, 8- and 12-row blocks get the kernel's bits,
// and a 20-row one MLX's; with "verify" a step's row keeps MLX's gemv; with
// "0" every row count MLX's; on the GPU of a CUDA build.
func TestLinearRowsGEMVRows(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the few-row GEMV kernel needs the GPU of a CUDA build")
		}
		saved := rowsGEMVFrom
		defer func() { rowsGEMVFrom = saved }()
		k, n := 2560, 1000
		w := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(4), mlx.Float32, 0, 0.05, n, k), mlx.BFloat16)
		x := mlx.AsType(mlx.RandomNormal(mlx.RandomKey(5), mlx.Float32, 0, 1, 1, 20, k), mlx.BFloat16)
		layer := Dense(w, nil)
		for _, c := range []struct {
			env    string
			rows   int
			kernel bool
		}{{"", 1, true}, {"", 8, true}, {"", 12, true}, {"", 20, false}, {"verify", 1, false}, {"verify", 12, true}, {"1", 1, true}, {"0", 1, false}, {"0", 8, false}, {"0", 12, false}} {
			rowsGEMVFrom = parseRowsGEMV(c.env)
			in := mlx.SliceAxis(x, 1, 0, c.rows)
			want := mlx.Linear(in, w)
			if c.kernel {
				want = rowsGEMV(in, w)
			}
			t.SameBits(fmt.Sprintf("SPECULA_ROWS_GEMV=%q, %d rows", c.env, c.rows), t.Float32s(mlx.AsType(layer.Forward(in), mlx.Float32)), t.Float32s(mlx.AsType(want, mlx.Float32)))
		}
	})
}

// The float32 few-row kernel on the GPU of a CUDA build, on the shapes of
// the bfloat16 test (K 2568 ends in a partial 128-wide slice; N not a
// multiple of 4): for 1, 3, 8 and 17 rows every output is within the
// float32 error bound of a float64 product computed here (K·2⁻²³ of the
// sum of |x·w|; TF32 is not involved, so MLX's product is no reference),
// every row of a many-row product has exactly the bits of that row run
// alone, and a misaligned view takes the scalar loads and gives the same
// bits as an aligned copy.
func TestRowsGEMVF32MatchesAndIsRowStable(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		if !mlx.GPUAvailable() {
			t.Skip("the few-row GEMV kernel needs the GPU of a CUDA build")
		}
		for _, shape := range [][2]int{{2560, 2561}, {9216, 1000}, {256, 250}, {2568, 303}} {
			k, n := shape[0], shape[1]
			w := mlx.RandomNormal(mlx.RandomKey(1), mlx.Float32, 0, 0.05, n, k)
			all := mlx.RandomNormal(mlx.RandomKey(2), mlx.Float32, 0, 1, 17, k)
			wv, xv := t.Float32s(w), t.Float32s(all)
			for _, rows := range []int{1, 3, 8, 17} {
				x := mlx.SliceAxis(all, 0, 0, rows)
				got := rowsGEMVF32(mlx.Reshape(x, 1, rows, k), w)
				if got == nil {
					t.Fatalf("K %d, N %d, %d rows: the kernel did not run", k, n, rows)
				}
				g := t.Float32s(got)
				for r := range rows {
					for j := range n {
						var ref, mag float64
						for c := range k {
							p := float64(xv[r*k+c]) * float64(wv[j*k+c])
							ref += p
							mag += math.Abs(p)
						}
						if d := math.Abs(float64(g[r*n+j]) - ref); d > float64(k)*mag/(1<<23)+1e-30 {
							t.Fatalf("K %d, N %d, %d rows: output (%d, %d) = %g, want %g", k, n, rows, r, j, g[r*n+j], ref)
						}
					}
				}
				for r := range rows {
					alone := t.Float32s(rowsGEMVF32(mlx.SliceAxis(x, 0, r, r+1), w))
					for j := range n {
						if alone[j] != g[r*n+j] {
							t.Fatalf("K %d, N %d: row %d of %d differs from the row alone at %d: %g vs %g", k, n, r, rows, j, g[r*n+j], alone[j])
						}
					}
				}
			}
			wide := mlx.RandomNormal(mlx.RandomKey(3), mlx.Float32, 0, 1, 1, k+4)
			view := mlx.SliceAxis(wide, 1, 1, k+1)
			a := t.Float32s(rowsGEMVF32(view, w))
			b := t.Float32s(rowsGEMVF32(mlx.Add(view, mlx.Zeros(mlx.Float32, 1, k)), w))
			for j := range a {
				if a[j] != b[j] {
					t.Fatalf("K %d, N %d: a misaligned view gives %g at %d, an aligned copy %g", k, n, a[j], j, b[j])
				}
			}
		}
	})
}
