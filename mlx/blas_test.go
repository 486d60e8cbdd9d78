package mlx_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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
	if _, err := os.Stat(filepath.Join("..", ".deps", "openblas", "libscipy_openblas.so")); err != nil {
		t.Fatalf("OpenBLAS is not unpacked (%v): run `make deps`", err)
	}
	var name string
	mlxtest.Run(t, func(t *mlxtest.T) { name = mlx.BLAS() })
	if !strings.HasPrefix(name, "OpenBLAS") {
		t.Fatalf("CPU matmuls use %q, want OpenBLAS", name)
	}
}

// SPECULA_BLAS=reference keeps the wheel's BLAS, and matmuls still compute
// the right values through it.
func TestReferenceBLASOnRequest(t *testing.T) {
	if os.Getenv("SPECULA_BLAS_CHILD") == "1" {
		mlxtest.Run(t, func(t *mlxtest.T) {
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
		mlxtest.Run(t, func(t *mlxtest.T) {
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
			env := []string{"SPECULA_BLAS_CHILD=threads"}
			for _, kv := range os.Environ() {
				switch strings.SplitN(kv, "=", 2)[0] {
				case "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "SPECULA_BLAS_CHILD":
				default:
					env = append(env, kv)
				}
			}
			if tc.env != "" {
				env = append(env, tc.env)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestBLASThreadsPerProduct$")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
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
