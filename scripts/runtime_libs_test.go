// Package scripts_test checks the shell scripts' logic that needs no
// network or GPU.
package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runtime-libs.sh link makes a tree's nvidia/ folder from a machine's CUDA
// runtime laid out like site-packages/nvidia (here a fake one, as PyTorch's
// environment has it: mma.h without crt/mma.h) and the nvidia-cuda-crt
// headers: the machine's files are linked, crt/ gains only what the machine
// lacks, and relinking replaces the folder.
func TestRuntimeLinkCompletesTheCRTHeaders(t *testing.T) {
	dir := t.TempDir()
	runtime := filepath.Join(dir, "site-packages", "nvidia")
	writeFile(t, filepath.Join(runtime, "cu13/lib/libcudart.so.13"), "cudart")
	writeFile(t, filepath.Join(runtime, "cu13/include/mma.h"), "#include \"crt/mma.h\"")
	writeFile(t, filepath.Join(runtime, "cu13/include/crt/host_defines.h"), "machine's host_defines")
	writeFile(t, filepath.Join(runtime, "cudnn/lib/libcudnn.so.9"), "cudnn")
	writeFile(t, filepath.Join(runtime, ".hidden"), "kept")
	crt := filepath.Join(dir, "cuda-crt")
	writeFile(t, filepath.Join(crt, "cu13/include/crt/mma.h"), "crt mma")
	writeFile(t, filepath.Join(crt, "cu13/include/crt/host_defines.h"), "crt host_defines")
	dest := filepath.Join(dir, "lib", "specula", "nvidia")
	source, err := filepath.EvalSymlinks(runtime) // the script records the physical path
	if err != nil {
		t.Fatal(err)
	}

	for pass := range 2 {
		out, err := exec.Command("bash", "runtime-libs.sh", "link", runtime, crt, dest).CombinedOutput()
		if err != nil {
			t.Fatalf("pass %d: runtime-libs.sh link: %v\n%s", pass, err, out)
		}
		for file, want := range map[string]string{
			"cu13/include/crt/mma.h":          "crt mma",
			"cu13/include/crt/host_defines.h": "machine's host_defines",
			"cu13/include/mma.h":              "#include \"crt/mma.h\"",
			"cu13/lib/libcudart.so.13":        "cudart",
			"cudnn/lib/libcudnn.so.9":         "cudnn",
			".hidden":                         "kept",
			".specula-source":                 source + "\n",
		} {
			if got := readFile(t, filepath.Join(dest, file)); got != want {
				t.Errorf("pass %d: %s holds %q, want %q", pass, file, got, want)
			}
		}
		// The machine's libraries are links, not copies: libmlx.so's rpath
		// reaches them through the tree.
		if fi, err := os.Lstat(filepath.Join(dest, "cu13", "lib")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("pass %d: cu13/lib is not a link into the runtime (%v)", pass, err)
		}
		if _, err := os.Stat(dest + ".partial"); !os.IsNotExist(err) {
			t.Errorf("pass %d: %s.partial was left behind", pass, dest)
		}
	}

	// A runtime that has crt/mma.h keeps its own.
	writeFile(t, filepath.Join(runtime, "cu13/include/crt/mma.h"), "machine's mma")
	if out, err := exec.Command("bash", "runtime-libs.sh", "link", runtime, crt, dest).CombinedOutput(); err != nil {
		t.Fatalf("runtime-libs.sh link: %v\n%s", err, out)
	}
	if got := readFile(t, filepath.Join(dest, "cu13/include/crt/mma.h")); got != "machine's mma" {
		t.Errorf("crt/mma.h holds %q, want the machine's", got)
	}
}
