package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
)

// On the CPU, the first run in a fresh kernel folder says why it pauses;
// once a kernel is there it says nothing.
func TestCPUKernelNotice(t *testing.T) {
	dev, err := mlx.Call(context.Background(), func() (mlx.Device, error) { return mlx.CurrentDevice(), nil })
	if err != nil || dev != mlx.CPU || !mlx.CompileEnabled() {
		t.Skip("the notice is about MLX's CPU kernels")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var b bytes.Buffer
	noteCPUKernels(&b)
	want := "first run here: MLX builds its fused CPU kernels with g++"
	if _, err := exec.LookPath("g++"); err != nil {
		want = "g++ is not installed"
	}
	if !strings.Contains(b.String(), want) {
		t.Fatalf("notice %q, want it to say %q", b.String(), want)
	}
	if want != "g++ is not installed" {
		dir := filepath.Join(tmp, "mlx", mlx.Version(), "cpu")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "libkernel.so"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		b.Reset()
		noteCPUKernels(&b)
		if b.Len() != 0 {
			t.Fatalf("with a built kernel the notice says %q, want nothing", b.String())
		}
	}
}
