package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/manifests"
)

// synth checks every flag before writing: a bad one is exit 2, one line, and
// nothing on disk. A good run writes the whole folder at once; an existing
// non-empty --out is never overwritten.
func TestE2ESynthValidatesFirstAndWritesAtOnce(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "pair")
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--draft", "dflash3"}, `specula synth: --draft "dflash3": want dflash or dflash2`},
		{[]string{"--layers", "-3"}, "specula synth: --layers -3: want >= 1, or 0 for the release's"},
		{[]string{"--vocab", "-5"}, "specula synth: --vocab -5: want >= 2"},
		{[]string{"--vocab", "100", "--tokenizer"}, "specula synth: --tokenizer: tokenizer: vocabulary size 100 is too small"},
		{[]string{"--dtype", "fp8"}, `specula synth: --dtype "fp8": want bfloat16 or float32`},
		{[]string{"--shape", "3B"}, `specula synth: --shape: unknown Qwen3.5 size "3B"`},
	} {
		args := append([]string{"synth", "--out", out, "--vocab", "1024", "--layers", "2", "--dtype", "float32"}, c.flags...)
		stdout, stderr, code := execSpecula(t, args...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.flags, code, stdout, stderr, c.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("%v wrote %v", c.flags, entries)
		}
	}
	stdout, stderr, code := execSpecula(t, "synth", "--out", out, "--vocab", "1024", "--layers", "2", "--dtype", "float32", "--tokenizer", "--draft", "dflash")
	if code != 0 || strings.TrimSpace(stdout) != filepath.Join(out, "manifest.toml") {
		t.Fatalf("synth: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "pair" {
		t.Fatalf("synth left %v beside --out", entries)
	}
	// The written pair is runnable.
	stdout, stderr, code = execSpecula(t, "check", filepath.Join(out, "manifest.toml"))
	if code != 0 || !strings.Contains(stdout, "runnable") {
		t.Fatalf("check of the synth pair: exit %d\n%s\n%s", code, stdout, stderr)
	}
	_, stderr, code = execSpecula(t, "synth", "--out", out, "--vocab", "1024", "--layers", "2")
	if code != 2 || !strings.Contains(stderr, "already exists and is not empty") {
		t.Fatalf("synth over a full --out: exit %d, stderr %q", code, stderr)
	}
}

// TestE2ESynthManifestComputesInTheWeightsFloat32 checks the dtype each
// synth manifest computes in: float32 weights compute in float32 on every
// device (with "auto", an H200's float32 oracle sweep ran in bfloat16 and
// MoE routing turned its rounding into different tokens), bfloat16 weights
// in "auto".
func TestE2ESynthManifestComputesInTheWeightsFloat32(t *testing.T) {
	for _, c := range []struct{ storage, want string }{{"float32", "float32"}, {"bfloat16", "auto"}} {
		out := filepath.Join(t.TempDir(), c.storage)
		if _, stderr, code := execSpecula(t, "synth", "--out", out, "--vocab", "512", "--layers", "1", "--dtype", c.storage); code != 0 {
			t.Fatalf("synth --dtype %s: exit %d\n%s", c.storage, code, stderr)
		}
		m, err := manifests.Load(filepath.Join(out, "manifest.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Target.DType) != c.want {
			t.Errorf("synth --dtype %s: manifest [target] dtype = %q, want %q", c.storage, m.Target.DType, c.want)
		}
	}
}
