//go:build cgotraceback

package mlx_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// TestCgoTracebackNamesMLXFrames profiles a second of graph building and
// evaluation and checks that the profile holds frames inside libmlx.so,
// which a Go profile records only through the cgo traceback (without it,
// time in MLX shows as runtime.cgocall alone), and that
// scripts/pprof-cgo.py names them as MLX's functions.
func TestCgoTracebackNamesMLXFrames(t *testing.T) {
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		x := mlx.Ones(mlx.Float32, 1, 64)
		mlx.Pin(x)
		defer mlx.Free(x)
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			y := x
			for range 200 {
				y = mlx.Add(mlx.Multiply(y, x), x)
			}
			t.Eval(y)
			mlx.Sweep()
		}
	})
	pprof.StopCPUProfile()
	path := filepath.Join(t.TempDir(), "cpu.prof")
	if err := os.WriteFile(path, prof.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	top, err := exec.Command("go", "tool", "pprof", "-top", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	// A line of -top: flat flat% sum% cum cum% name; libmlx.so's cumulative
	// time must be more than nothing.
	m := regexp.MustCompile(`(?m)^\s*\S+\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\[libmlx\.so\]`).FindSubmatch(top)
	if m == nil || regexp.MustCompile(`^0(\.0*)?m?s$`).Match(m[1]) {
		t.Fatalf("no time under libmlx.so in the profile:\n%s", top)
	}
	named, err := exec.Command("python3", "../scripts/pprof-cgo.py", path, "--focus", "spx_", "--top", "60").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/pprof-cgo.py: %v\n%s", err, named)
	}
	if !bytes.Contains(named, []byte("mlx::core::")) {
		t.Fatalf("scripts/pprof-cgo.py named no MLX function:\n%s", named)
	}
}
