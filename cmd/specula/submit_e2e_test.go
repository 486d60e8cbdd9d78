package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// With SPECULA_SUBMIT_THREAD=1 (MLX's evaluations submitted from a second
// thread while the worker builds the next graph) a run gives, token for
// token, what it gives without: plain greedy decoding, greedy speculative
// decoding with the trained DFlash2 draft, and seeded sampling through it.
func TestE2ESubmitThreadGivesTheSameTokens(t *testing.T) {
	manifest, err := filepath.Abs(filepath.Join("..", "..", "manifests", "go-tiny-dflash2.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("..", "..", "models", "go-tiny", "dflash2", "config.json")); err != nil {
		t.Fatalf("models/go-tiny is part of the repository: %v", err)
	}
	const prompt = "// sum returns the sum of xs.\nfunc sum(xs []int) int {\n"
	runIDs := func(submitThread string, args ...string) []int32 {
		t.Helper()
		cmd := exec.Command(specula(t), append([]string{"run", "-m", manifest, "--json", "--quiet", "--max-tokens", "40"}, append(args, prompt)...)...)
		cmd.Env = append(os.Environ(), "SPECULA_LOG=warn", "SPECULA_SUBMIT_THREAD="+submitThread)
		stdout, stderr, code := runCommand(t, cmd)
		if code != 0 {
			t.Fatalf("run %v (SPECULA_SUBMIT_THREAD=%s): exit %d\n%s", args, submitThread, code, stderr)
		}
		var out struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.IDs) == 0 {
			t.Fatalf("run %v: %v in %q", args, err, stdout)
		}
		return out.IDs
	}
	for _, args := range [][]string{
		{"--no-draft"},
		{},
		{"--temperature", "0.8", "--seed", "7"},
	} {
		want, got := runIDs("0", args...), runIDs("1", args...)
		if !slices.Equal(got, want) {
			t.Errorf("run %v: %v with the submit thread, %v without", args, got, want)
		}
	}
}
