package mlx_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// `make deps` unpacks OpenBLAS, and the shim routes MLX's CPU matmuls to it
// (the bundled reference BLAS is ~50x slower).
func TestCPUMatmulsUseOpenBLAS(t *testing.T) {
	if os.Getenv("SPECULA_BLAS") != "" {
		t.Logf("SPECULA_BLAS=%s overrides the choice", os.Getenv("SPECULA_BLAS"))
		return
	}
	var name string
	mlxtest.RunOnCPU(t, func(t *mlxtest.T) { name = mlx.BLAS() })
	if !strings.HasPrefix(name, "OpenBLAS") {
		// The shim looks for it beside the loaded libmlx.so: .deps/openblas
		// in a checkout, lib/specula/openblas in an installed tree.
		t.Fatalf("CPU matmuls use %q, want OpenBLAS: is it unpacked (`make deps`, .deps/openblas)?", name)
	}
}

// SPECULA_BLAS=reference keeps the wheel's BLAS, and matmuls still compute
// the right values through it.
func TestReferenceBLASOnRequest(t *testing.T) {
	if os.Getenv("SPECULA_BLAS_CHILD") == "1" {
		mlxtest.RunOnCPU(t, func(t *mlxtest.T) {
			got := t.Float32s(mlx.Matmul(mlx.FromFloat32s([]float32{1, 2, 3, 4}, 2, 2), mlx.FromFloat32s([]float32{5, 6, 7, 8}, 2, 2)))
			if got[0] != 19 || got[1] != 22 || got[2] != 43 || got[3] != 50 {
				t.Fatalf("matmul through the reference BLAS = %v", got)
			}
			t.Logf("BLAS: %s", mlx.BLAS())
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReferenceBLASOnRequest$", "-test.v")
	cmd.Env = append(os.Environ(), "SPECULA_BLAS_CHILD=1", "SPECULA_BLAS=reference")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "BLAS: reference") {
		t.Fatalf("child with SPECULA_BLAS=reference: %v\n%s", err, out)
	}
}

// OpenBLAS's threads follow the size of each product: one thread for a
// decode-sized product, every core for a prefill-sized one (2^29
// multiply-adds), and exactly OPENBLAS_NUM_THREADS when the user sets it.
// Each case runs in a child process because OpenBLAS reads the variable once.
func TestBLASThreadsPerProduct(t *testing.T) {
	if os.Getenv("SPECULA_BLAS_CHILD") == "threads" {
		mlxtest.RunOnCPU(t, func(t *mlxtest.T) {
			// [1, 384] x [384, 1164]: a decode step's projection.
			small := mlx.Matmul(mlx.Ones(mlx.Float32, 1, 384), mlx.Ones(mlx.Float32, 384, 1164))
			if got := t.Float32s(small); got[0] != 384 || got[len(got)-1] != 384 {
				t.Fatalf("small product = %v…, want 384s", got[:4])
			}
			fmt.Printf("small=%d\n", mlx.LastBLASThreads())
			// [1024, 512] x [512, 1024]: 2^29 multiply-adds, a prefill chunk.
			large := mlx.Matmul(mlx.Ones(mlx.Float32, 1024, 512), mlx.Full(0.5, mlx.Float32, 512, 1024))
			if got := t.Float32s(large); got[0] != 256 || got[len(got)-1] != 256 {
				t.Fatalf("large product = %v…, want 256s", got[:4])
			}
			fmt.Printf("large=%d\n", mlx.LastBLASThreads())
		})
		return
	}
	if os.Getenv("SPECULA_BLAS") != "" {
		t.Skipf("SPECULA_BLAS=%s chooses another BLAS; the thread policy is OpenBLAS's", os.Getenv("SPECULA_BLAS"))
	}
	cores := min(runtime.NumCPU(), 64) // OpenBLAS's default: the usable CPUs, at most its MAX_THREADS
	for _, tc := range []struct {
		name, env    string
		small, large int
	}{
		{"policy", "", 1, cores},
		{"user fixes 1", "OPENBLAS_NUM_THREADS=1", 1, 1},
		{"user fixes 2", "OPENBLAS_NUM_THREADS=2", 2, 2},
		{"OpenMP's variable", "OMP_NUM_THREADS=2", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runChild("TestBLASThreadsPerProduct",
				[]string{"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "SPECULA_BLAS_CHILD"},
				"SPECULA_BLAS_CHILD=threads", tc.env)
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			want := fmt.Sprintf("small=%d\nlarge=%d\n", tc.small, tc.large)
			if !strings.Contains(string(out), want) {
				t.Fatalf("child (%s) printed\n%s\nwant %q", tc.env, out, want)
			}
		})
	}
}

// Products x·Wᵀ of at most 16 rows (decode, verification and draft rows
// against a weight in checkpoint layout) are computed by the shim's own
// kernel: values as a float64 reference within 1e-5 relative (plus k·1e-6
// absolute), every row
// bit-identical to the same row multiplied alone (so a decode step and a
// verification agree exactly on the products), and 17 rows left to the BLAS.
// The portable path (CPUs without AVX2 and FMA) is run in a child process
// with SPECULA_SMALL_ROWS=portable; SPECULA_SMALL_ROWS=0 turns the kernel off.
func TestSmallRowProducts(t *testing.T) {
	if os.Getenv("SPECULA_BLAS") != "" {
		t.Skipf("SPECULA_BLAS=%s leaves every product to the chosen library", os.Getenv("SPECULA_BLAS"))
	}
	if os.Getenv("SPECULA_BLAS_CHILD") != "rows" {
		for _, mode := range []string{"portable", "0"} {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSmallRowProducts$", "-test.v")
			cmd.Env = append(os.Environ(), "SPECULA_BLAS_CHILD=rows", "SPECULA_SMALL_ROWS="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestSmallRowProducts") {
				t.Fatalf("child with SPECULA_SMALL_ROWS=%s: %v\n%s", mode, err, out)
			}
		}
	}
	off := os.Getenv("SPECULA_SMALL_ROWS") == "0"
	mlxtest.RunOnCPU(t, func(t *mlxtest.T) {
		r := newRand(t)
		for _, k := range []int{384, 37} { // 37: a remainder after the 8-lane part
			w := randTensor(r, 50, k).roundF32()
			wm := w.mlx()
			for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 17} {
				x := randTensor(r, m, k).roundF32()
				before := mlx.SmallRowProducts()
				got := mlx.Linear(x.mlx(), wm)
				want := matmulRef(x, transposeRef(w))
				// float32 sums of k products of N(0, 1) values: an absolute
				// error of k·1e-6 allows for cancellation near zero.
				check(t, fmt.Sprintf("[%d, %d]·[50, %d]ᵀ", m, k, k), got, want, 1e-5, float64(k)*1e-6)
				served := mlx.SmallRowProducts() - before
				if off && served != 0 || !off && (m <= 16 && served != 1 || m > 16 && served != 0) {
					t.Fatalf("%d rows: the shim's kernel served %d products (SPECULA_SMALL_ROWS=%q)", m, served, os.Getenv("SPECULA_SMALL_ROWS"))
				}
				if m > 16 || off {
					continue
				}
				all := t.Float32s(got)
				for i := range m {
					row := &tensor{shape: []int{1, k}, data: x.data[i*k : (i+1)*k]}
					alone := t.Float32s(mlx.Linear(row.mlx(), wm))
					for j := range alone {
						if alone[j] != all[i*50+j] {
							t.Fatalf("%d rows, k %d: row %d column %d is %v in the batch and %v alone", m, k, i, j, all[i*50+j], alone[j])
						}
					}
				}
			}
		}
	})
}

// A product of at least 2 rows and 2^18 multiply-adds has its columns cut into chunks
// that the calling thread and a helper thread share. Which thread computes a
// column, and where the cuts fall, must change nothing: every product equals,
// bit for bit, the same weight multiplied in slices of 40 rows (too small to
// be shared), and the float64 reference. Many products in a row let the
// helper join some and miss others. SPECULA_SMALL_ROWS_THREADS=1 (a child
// process) keeps every product on one thread.
func TestSmallRowProductsOnTwoThreads(t *testing.T) {
	if os.Getenv("SPECULA_BLAS") != "" {
		t.Skipf("SPECULA_BLAS=%s leaves every product to the chosen library", os.Getenv("SPECULA_BLAS"))
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: the kernel has no helper thread")
	}
	one := os.Getenv("SPECULA_SMALL_ROWS_THREADS") == "1"
	if os.Getenv("SPECULA_BLAS_CHILD") != "shared" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSmallRowProductsOnTwoThreads$", "-test.v")
		cmd.Env = append(os.Environ(), "SPECULA_BLAS_CHILD=shared", "SPECULA_SMALL_ROWS_THREADS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestSmallRowProductsOnTwoThreads") {
			t.Fatalf("child with SPECULA_SMALL_ROWS_THREADS=1: %v\n%s", err, out)
		}
	}
	mlxtest.RunOnCPU(t, func(t *mlxtest.T) {
		r := newRand(t)
		const n, slice = 1000, 40
		for _, k := range []int{384, 37} {
			w := randTensor(r, n, k).roundF32()
			wm := w.mlx()
			for rep := range 10 {
				for _, m := range []int{1, 3, 8, 16} {
					x := randTensor(r, m, k).roundF32()
					xm := x.mlx()
					before := mlx.SharedProducts()
					got := mlx.Linear(xm, wm)
					all := t.Float32s(got)
					shared := mlx.SharedProducts() - before
					if want := m >= 2 && m*n*k >= 1<<18 && !one; (shared == 1) != want {
						t.Fatalf("[%d, %d]·[%d, %d]ᵀ: shared %d times with the helper, want %v", m, k, n, k, shared, want)
					}
					if rep == 0 {
						check(t, fmt.Sprintf("[%d, %d]·[%d, %d]ᵀ", m, k, n, k), got, matmulRef(x, transposeRef(w)), 1e-5, float64(k)*1e-6)
					}
					for j0 := 0; j0 < n; j0 += slice {
						before := mlx.SharedProducts()
						part := t.Float32s(mlx.Linear(xm, mlx.SliceAxis(wm, 0, j0, j0+slice)))
						if mlx.SharedProducts() != before {
							t.Fatalf("a [%d, %d]·[%d, %d]ᵀ slice was shared", m, k, slice, k)
						}
						for i := range m {
							for j := range slice {
								if a, b := all[i*n+j0+j], part[i*slice+j]; a != b {
									t.Fatalf("[%d, %d]·[%d, %d]ᵀ: row %d column %d is %v in the whole product and %v in a slice", m, k, n, k, i, j0+j, a, b)
								}
							}
						}
					}
				}
			}
		}
	})
}

// After a product that used every core, OpenBLAS's threads sleep at once
// rather than spinning for ~0.1 s: the shim sets OPENBLAS_THREAD_TIMEOUT=4
// before OpenBLAS is loaded, unless the user set it. The child multiplies a
// prefill-sized product on every core, then idles for 200 ms and prints the
// process's CPU time in that window; a user's OPENBLAS_THREAD_TIMEOUT=30
// (2^30 cycles of spinning) shows what the window costs without the shim's
// value.
func TestOpenBLASIdleThreadsSleep(t *testing.T) {
	if os.Getenv("SPECULA_BLAS_CHILD") == "idle" {
		mlxtest.RunOnCPU(t, func(t *mlxtest.T) {
			large := mlx.Matmul(mlx.Ones(mlx.Float32, 1024, 512), mlx.Full(0.5, mlx.Float32, 512, 1024))
			if got := t.Float32s(large); got[0] != 256 {
				t.Fatalf("large product = %v…, want 256s", got[:4])
			}
			before := processCPU()
			time.Sleep(200 * time.Millisecond)
			fmt.Printf("threads=%d idle_cpu_ms=%d\n", mlx.LastBLASThreads(), (processCPU() - before).Milliseconds())
		})
		return
	}
	if os.Getenv("SPECULA_BLAS") != "" {
		t.Skipf("SPECULA_BLAS=%s chooses another BLAS; the idle threads are OpenBLAS's", os.Getenv("SPECULA_BLAS"))
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one core: OpenBLAS starts no threads")
	}
	idle := func(env string) int {
		out, err := runChild("TestOpenBLASIdleThreadsSleep",
			[]string{"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_THREAD_TIMEOUT", "SPECULA_BLAS_CHILD"},
			"SPECULA_BLAS_CHILD=idle", env)
		var threads, ms int
		if _, scanErr := fmt.Sscanf(lastLine(string(out), "threads="), "threads=%d idle_cpu_ms=%d", &threads, &ms); err != nil || scanErr != nil {
			t.Fatalf("child (%s): %v %v\n%s", env, err, scanErr, out)
		}
		if threads < 2 {
			t.Fatalf("child (%s): the large product ran on %d thread(s), want every core", env, threads)
		}
		return ms
	}
	if ms := idle(""); ms > 40 {
		t.Errorf("idle 200 ms after a product on every core, the process used %d ms of CPU: OpenBLAS's threads still spin", ms)
	}
	if ms := idle("OPENBLAS_THREAD_TIMEOUT=30"); ms < 40 {
		t.Errorf("with OPENBLAS_THREAD_TIMEOUT=30 the idle process used only %d ms of CPU in 200 ms: the user's value was not kept (or this check cannot see spinning)", ms)
	}
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
