//go:build linux

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// What synth, quantize and forward write gets the modes `mkdir` and a plain
// file write give under the usual umask 022 (and mlx_lm.convert's output
// has): folders 0755, files 0644. They are written under temporary names
// first, and os.MkdirTemp and os.CreateTemp make those private (0700,
// 0600): renamed into place, a checkpoint in a shared folder could not be
// read by the other users who serve or benchmark it.
func TestE2EOutputsAreReadableByOthers(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	dir := t.TempDir()
	pair := filepath.Join(dir, "pair")
	if _, stderr, code := execSpecula(t, "synth", "--shape", "go-tiny", "--layers", "2", "--vocab", "512", "--dtype", "float32", "--out", pair); code != 0 {
		t.Fatalf("synth: exit %d\n%s", code, stderr)
	}
	q := filepath.Join(dir, "q4")
	if _, stderr, code := execSpecula(t, "quantize", filepath.Join(pair, "target"), q); code != 0 {
		t.Fatalf("quantize: exit %d\n%s", code, stderr)
	}
	out := filepath.Join(dir, "forward.safetensors")
	if _, stderr, code := execSpecula(t, "forward", "--model", filepath.Join(pair, "target"), "--ids", "1,2", "--out", out); code != 0 {
		t.Fatalf("forward: exit %d\n%s", code, stderr)
	}
	for path, want := range map[string]os.FileMode{
		pair:                                  0o755 | os.ModeDir,
		filepath.Join(pair, "target"):         0o755 | os.ModeDir,
		filepath.Join(pair, "manifest.toml"):  0o644,
		q:                                     0o755 | os.ModeDir,
		filepath.Join(q, "model.safetensors"): 0o644,
		out:                                   0o644,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
}
