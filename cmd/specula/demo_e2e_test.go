package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Two demos started together on a fresh cache build it once and both
// succeed; a damaged cache is built again, with one line saying so.
func TestE2EDemoCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache", "demo")
	var wg sync.WaitGroup
	results := make([]struct {
		stderr string
		code   int
	}, 2)
	for i := range results {
		wg.Go(func() {
			cmd := exec.Command(specula(t), "demo", "--json", "--dir", dir, "--max-tokens", "4")
			cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
			_, results[i].stderr, results[i].code = runCommand(t, cmd)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("concurrent demo %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	// Damage the cached draft: the demo rebuilds the cache and runs.
	if err := os.WriteFile(filepath.Join(dir, "draft", "model.safetensors"), []byte("not safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := execSpecula(t, "demo", "--json", "--dir", dir, "--max-tokens", "4")
	if code != 0 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "specula demo: the cached demo pair in "+dir+" does not load (") ||
		!strings.HasSuffix(stderr, "); building it again\n") {
		t.Fatalf("demo over a damaged cache: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = execSpecula(t, "demo", "--json", "--dir", dir, "--max-tokens", "4")
	if code != 0 || stderr != "" {
		t.Fatalf("demo after the rebuild: exit %d, stderr %q", code, stderr)
	}
}
