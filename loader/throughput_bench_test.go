package loader_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// BenchmarkLoadThroughput measures how fast a ~1 GiB checkpoint in the page
// cache becomes evaluated MLX arrays: validation of the headers, MLX's lazy
// safetensors loader, and evaluation (the bytes read into MLX allocations).
// When SPECULA_BENCH_PYTHON names a Python with the safetensors and numpy
// packages, the same file is loaded with safetensors.numpy.load_file in the
// same run as the peer, and the ratio is reported.
func BenchmarkLoadThroughput(b *testing.B) {
	const tensors, elems = 16, 16 << 20 // 16 float32 tensors of 64 MiB
	dir := b.TempDir()
	var ts []loader.Tensor
	for i := range tensors {
		data := make([]byte, 4*elems)
		for j := 0; j < elems; j += 4096 {
			binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(float32(i+j)))
		}
		ts = append(ts, loader.Tensor{Name: fmt.Sprintf("layers.%d.weight", i), DType: mustDType(b, "F32"), Shape: []uint64{4096, elems / 4096}, Data: data})
	}
	path := filepath.Join(dir, "model.safetensors")
	if err := loader.WriteFile(path, ts, nil); err != nil {
		b.Fatal(err)
	}
	ts = nil
	size := int64(tensors * 4 * elems)
	if _, err := os.ReadFile(path); err != nil { // into the page cache
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	mlxtest.Run(b, func(t *mlxtest.T) {
		for range b.N {
			ck, err := loader.OpenCheckpoint(dir)
			t.NoErr(err)
			arrays, err := ck.Arrays()
			t.NoErr(err)
			all := make([]*mlx.Array, 0, len(arrays))
			for _, a := range arrays {
				all = append(all, a)
			}
			t.Eval(all...)
			ck.Close()
			mlx.Sweep()
		}
	})
	b.StopTimer()
	ours := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(ours, "GB/s")
	if py := os.Getenv("SPECULA_BENCH_PYTHON"); py != "" {
		peer := pythonLoad(b, py, path, 3)
		b.ReportMetric(float64(size)/peer.Seconds()/1e9, "python-GB/s")
		b.ReportMetric(ours/(float64(size)/peer.Seconds()/1e9), "ratio")
	}
}

// pythonLoad returns the best time of n loads of path with safetensors.numpy.
func pythonLoad(b *testing.B, python, path string, n int) time.Duration {
	script := `import sys, time
from safetensors.numpy import load_file
best = 1e9
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); d = load_file(sys.argv[1]); s = sum(v.nbytes for v in d.values()); best = min(best, time.perf_counter() - t)
print(best)`
	out, err := exec.Command(python, "-c", script, path, strconv.Itoa(n)).CombinedOutput()
	if err != nil {
		b.Fatalf("python peer: %v\n%s", err, out)
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatalf("python peer printed %q", out)
	}
	return time.Duration(sec * float64(time.Second))
}

func mustDType(b *testing.B, name string) loader.DType {
	d, ok := loader.ParseDType(name)
	if !ok {
		b.Fatalf("dtype %s", name)
	}
	return d
}
