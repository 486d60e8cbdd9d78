package mlx_test

import (
	"os"
	"os/exec"
	"path/filepath"
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
