package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/mlx"
)

// writeTensors saves float32 tensors (name → values, 1-D) to path.
func writeTensors(t *testing.T, path string, tensors map[string][]float32) {
	t.Helper()
	err := mlx.Do(context.Background(), func() error {
		m := map[string]*mlx.Array{}
		for name, v := range tensors {
			m[name] = mlx.FromFloat32s(v)
		}
		return mlx.SaveSafetensors(path, m, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCompare(t *testing.T) {
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "a.safetensors"), filepath.Join(tmp, "b.safetensors")
	writeTensors(t, a, map[string][]float32{
		"close":  {1, 2, 3},
		"far":    {1, 2, 3.5},
		"zero":   {0, 1e-3},
		"shape":  {1, 2},
		"only_a": {1},
	})
	writeTensors(t, b, map[string][]float32{
		"close":  {1, 2, 3.000001},
		"far":    {1, 2, 3},
		"zero":   {0, 0},
		"shape":  {1, 2, 3},
		"only_b": {1},
	})

	code, out, stderr := runCmd("compare", a, b)
	if code != exitFailure {
		t.Fatalf("exit %d, want 1 (past tolerance); stderr %s", code, stderr)
	}
	for _, want := range []string{
		"close", "far", "PAST TOLERANCE", "[2] vs [3]",
		"only in " + a + ": [only_a]", "only in " + b + ": [only_b]",
		"4 tensors compared, 3 past tolerance or of different shapes (rtol 1e-05, atol 1e-06)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "shape ") && (strings.Contains(line, "Inf") || !strings.HasSuffix(strings.TrimSpace(line), "SHAPES DIFFER")) {
			t.Errorf("tensors of different shapes, not compared: %q", line)
		}
	}

	code, out, _ = runCmd("compare", a, b, "--json", "--atol", "0.01")
	if code != exitFailure {
		t.Fatalf("exit %d with atol 0.01 (far and shape still fail)", code)
	}
	var rep struct {
		Tensors []struct {
			Name         string
			MaxAbs       any  `json:"max_abs"`
			MaxRel       any  `json:"max_rel"`
			ShapesDiffer bool `json:"shapes_differ"`
			Within       bool
		}
		OK bool
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]bool{}
	for _, tc := range rep.Tensors {
		got[tc.Name] = tc.Within
		if tc.Name == "zero" && tc.MaxRel != "inf" {
			t.Errorf("zero: max rel %v, want inf (b = 0, a ≠ 0)", tc.MaxRel)
		}
		if tc.Name == "far" && tc.MaxAbs != 0.5 {
			t.Errorf("far: max abs %v, want 0.5", tc.MaxAbs)
		}
		if (tc.Name == "shape") != tc.ShapesDiffer || (tc.Name == "shape" && (tc.MaxAbs != nil || tc.MaxRel != nil)) {
			t.Errorf("%s: shapes_differ %v, max abs %v, max rel %v", tc.Name, tc.ShapesDiffer, tc.MaxAbs, tc.MaxRel)
		}
	}
	if !got["close"] || got["far"] || !got["zero"] || got["shape"] || rep.OK {
		t.Errorf("verdicts %v ok %v", got, rep.OK)
	}

	// Within tolerance everywhere: exit 0.
	code, _, stderr = runCmd("compare", a, a)
	if code != exitOK {
		t.Errorf("a file against itself: exit %d, %s", code, stderr)
	}
}

func TestCompareUsage(t *testing.T) {
	if code, _, _ := runCmd("compare", "only-one"); code != exitUsage {
		t.Errorf("one file: exit %d", code)
	}
	if code, _, _ := runCmd("compare", "a", "b", "--rtol", "-1"); code != exitUsage {
		t.Errorf("negative rtol: exit %d", code)
	}
	code, _, stderr := runCmd("compare", "/nonexistent/a.safetensors", "/nonexistent/b.safetensors")
	if code != exitFailure || !strings.Contains(stderr, "specula compare:") {
		t.Errorf("missing files: exit %d, stderr %q", code, stderr)
	}
}

// A file that is not safetensors is refused with package loader's words
// (the file and the rule it breaks), not MLX's reader's.
func TestCompareNotSafetensors(t *testing.T) {
	dir := t.TempDir()
	good, text := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "notes.safetensors")
	writeTensors(t, good, map[string][]float32{"w": {1}})
	if err := os.WriteFile(text, []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"compare", text, good}, {"compare", good, text}} {
		code, out, stderr := runCmd(args...)
		if code != exitFailure || out != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, text) || !strings.Contains(stderr, "safetensors rule") || strings.Contains(stderr, "mlx") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}
