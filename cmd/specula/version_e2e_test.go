package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2EVersion: --version names the MLX release the headers of .deps/
// declare (the wheel's own version.h, not the binding's answer) and the
// device asked for, so an installed program shows what it loaded.
func TestE2EVersion(t *testing.T) {
	header, err := os.ReadFile(filepath.Join("..", "..", ".deps", "mlx", "include", "mlx", "version.h"))
	if err != nil {
		t.Fatalf("MLX headers (make deps): %v", err)
	}
	var parts []string
	for _, field := range []string{"MAJOR", "MINOR", "PATCH"} {
		m := regexp.MustCompile(`#define MLX_VERSION_` + field + ` (\d+)`).FindSubmatch(header)
		if m == nil {
			t.Fatalf("version.h has no MLX_VERSION_%s", field)
		}
		parts = append(parts, string(m[1]))
	}
	cmd := exec.Command(specula(t), "--version")
	cmd.Env = append(os.Environ(), "SPECULA_DEVICE=cpu")
	stdout, stderr, code := runCommand(t, cmd)
	want := "specula " + version + " (MLX " + strings.Join(parts, ".") + ", device cpu)\n"
	if code != 0 || stdout != want {
		t.Fatalf("--version: exit %d, %q (stderr %q); want %q", code, stdout, stderr, want)
	}
}
