package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
)

// qwenPrompt returns the qwen35-tiny prompt as a --ids value.
func qwenPrompt(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		PromptIDs []int `json:"prompt_ids"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	return joinInts(ref.PromptIDs)
}

// writeReference turns the fixture's reference.safetensors into the layout
// `specula forward` writes (hidden_per_layer split into hidden.<i>, the
// last one final_hidden).
func writeReference(t *testing.T, dir, path string) {
	t.Helper()
	err := mlx.Do(context.Background(), func() error {
		ref, err := mlx.LoadSafetensors(filepath.Join(dir, "reference.safetensors"))
		if err != nil {
			return err
		}
		out := map[string]*mlx.Array{"logits": ref["logits"], "final_hidden": ref["final_hidden"]}
		per := ref["hidden_per_layer"]
		for i := range per.Dim(0) {
			out[fmt.Sprintf("hidden.%d", i)] = mlx.Squeeze(mlx.SliceAxis(per, 0, i, i+1), 0)
		}
		// The last layer's record is transformers' hidden_states[L], taken
		// after the final norm.
		out[fmt.Sprintf("hidden.%d", per.Dim(0)-1)] = ref["final_hidden"]
		return mlx.SaveSafetensors(path, out, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tensorNames lists the tensors of a safetensors file, sorted.
func tensorNames(t *testing.T, path string) []string {
	t.Helper()
	var names []string
	err := mlx.Do(context.Background(), func() error {
		m, err := mlx.LoadSafetensors(path)
		for name, a := range m {
			names = append(names, fmt.Sprintf("%s%v", name, a.Shape()))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// TestForwardMatchesFixture: `specula forward` on qwen35-tiny's prompt,
// then `specula compare` against transformers' outputs within the fixture's
// tolerance (logits 1e-3 absolute; hidden states ~1e-4 relative, here
// per element as allclose with atol 1e-3, rtol 1e-4).
func TestForwardMatchesFixture(t *testing.T) {
	dir := fixtures.Dir(t, "qwen35-tiny")
	tmp := t.TempDir()
	out, ref := filepath.Join(tmp, "out.safetensors"), filepath.Join(tmp, "ref.safetensors")
	code, stdout, stderr := runCmd("forward", "--model", dir, "--ids", qwenPrompt(t, dir), "--out", out)
	if code != exitOK {
		t.Fatalf("forward: exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stdout, "wrote "+out) || !strings.Contains(stdout, "4 hidden states (layers 0,1,2,3)") {
		t.Errorf("forward output: %s", stdout)
	}
	want := []string{"final_hidden[24 64]", "hidden.0[24 64]", "hidden.1[24 64]", "hidden.2[24 64]", "hidden.3[24 64]", "logits[24 512]"}
	if got := tensorNames(t, out); !slices.Equal(got, want) {
		t.Errorf("tensors %v, want %v", got, want)
	}
	writeReference(t, dir, ref)

	code, stdout, stderr = runCmd("compare", out, ref, "--atol", "1e-3", "--rtol", "1e-4", "--json")
	if code != exitOK {
		t.Fatalf("compare: exit %d\n%s%s", code, stdout, stderr)
	}
	var rep struct {
		Tensors []struct {
			Name   string
			MaxAbs float64 `json:"max_abs"`
			MaxRel any     `json:"max_rel"`
			Within bool
		}
		OnlyInA []string `json:"only_in_a"`
		OnlyInB []string `json:"only_in_b"`
		OK      bool
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("compare --json: %v\n%s", err, stdout)
	}
	if !rep.OK || len(rep.Tensors) != 6 || len(rep.OnlyInA)+len(rep.OnlyInB) != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, tc := range rep.Tensors {
		t.Logf("%s: max abs %.3g, max rel %v", tc.Name, tc.MaxAbs, tc.MaxRel)
		if tc.MaxAbs > 1e-3 {
			t.Errorf("%s: max abs error %g", tc.Name, tc.MaxAbs)
		}
	}
	// No temporary files are left beside the output.
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("left behind %s", e.Name())
		}
	}
}

func TestForwardLayersSubset(t *testing.T) {
	dir := fixtures.Dir(t, "qwen35-tiny")
	out := filepath.Join(t.TempDir(), "sub.safetensors")
	code, _, stderr := runCmd("forward", "--model", dir, "--ids", "1,2,3", "--layers", "2,0,2", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{"final_hidden[3 64]", "hidden.0[3 64]", "hidden.2[3 64]", "logits[3 512]"}
	if got := tensorNames(t, out); !slices.Equal(got, want) {
		t.Errorf("tensors %v, want %v", got, want)
	}
}

func TestForwardErrors(t *testing.T) {
	dir := fixtures.Dir(t, "qwen35-tiny")
	tmp := t.TempDir()
	out := filepath.Join(tmp, "x.safetensors")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--ids", "1", "--out", out}, exitUsage, "--model, --ids and --out are required"},
		{[]string{"--model", dir, "--ids", "1,x", "--out", out}, exitUsage, `"x" is not a non-negative integer`},
		{[]string{"--model", dir, "--ids", "1", "--dtype", "float8", "--out", out}, exitUsage, "--dtype"},
		{[]string{"--model", dir, "--ids", "1,512", "--out", out}, exitFailure, "token 512 is outside the vocabulary [0, 512)"},
		{[]string{"--model", dir, "--ids", "1", "--layers", "4", "--out", out}, exitFailure, "layer tap 4 is out of range"},
		{[]string{"--model", tmp, "--ids", "1", "--out", out}, exitFailure, "specula forward: "},
		{[]string{"--model", dir, "--ids", "1", "--out", out, "extra"}, exitUsage, `unexpected argument "extra"`},
		// Where the output cannot go is said before the forward runs, in
		// the names the user gave (not a temporary file's).
		{[]string{"--model", dir, "--ids", "1", "--out", tmp}, exitUsage, "specula forward: --out " + tmp + " is a folder: name the .safetensors file to write\n"},
		{[]string{"--model", dir, "--ids", "1", "--out", filepath.Join(tmp, "no", "x.safetensors")}, exitUsage,
			"specula forward: --out " + filepath.Join(tmp, "no", "x.safetensors") + ": folder " + filepath.Join(tmp, "no") + " does not exist\n"},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(append([]string{"forward"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("forward %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("failed runs left files: %v", entries)
	}
}
