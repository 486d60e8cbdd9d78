package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
)

// mlx-lm (0.32.2 on mlx-cpu 0.32.4, the venv scripts/mlx-lm-venv.sh makes
// in .deps/ on first use) loads what `specula quantize` writes and computes
// the same logits as on its own conversion of the same source (the
// fixtures' reference). The source is qwen35-tiny with model_type qwen3_5,
// as mlx-lm's own run used (it has no qwen3_5_text).
func TestQuantizeOutputLoadsInMLXLM(t *testing.T) {
	venv := exec.Command("../../scripts/mlx-lm-venv.sh")
	venv.Stderr = os.Stderr
	out, err := venv.Output()
	if err != nil {
		t.Fatalf("scripts/mlx-lm-venv.sh (makes the mlx-lm venv in .deps/): %v", err)
	}
	python := strings.TrimSpace(string(out))

	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tiny := fixtures.Dir(t, "qwen35-tiny")
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(tiny, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["model_type"] = "qwen3_5"
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(src, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tiny, "model.safetensors"), filepath.Join(src, "model.safetensors")); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		fixture string
		args    []string
	}{
		{"qwen35-tiny-mlx-q4", nil},
		{"qwen35-tiny-mlx-mxfp4", []string{"--mode", "mxfp4"}},
		{"qwen35-tiny-mlx", []string{"--mode", "none"}},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			if _, stderr, code := execSpecula(t, append([]string{"quantize", src, dst}, c.args...)...); code != 0 {
				t.Fatalf("quantize: exit %d: %s", code, stderr)
			}
			check := exec.Command(python, "../../scripts/mlx_lm_load_check.py", dst, filepath.Join(fixtures.Dir(t, c.fixture), "reference.safetensors"))
			stdout, stderr, code := runCommand(t, check)
			if code != 0 {
				t.Fatalf("mlx-lm could not load specula's output: exit %d\n%s", code, stderr)
			}
			var r struct {
				MaxAbsDiff  float64 `json:"max_abs_diff"`
				ArgmaxEqual bool    `json:"argmax_equal"`
			}
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatalf("%v: %s", err, stdout)
			}
			// The tensors are mlx-lm's own, byte for byte, so the logits are too.
			if r.MaxAbsDiff != 0 || !r.ArgmaxEqual {
				t.Fatalf("mlx-lm's logits on specula's output differ from those on its own conversion: %s", stdout)
			}
			t.Logf("%s: %s", c.fixture, strings.TrimSpace(stdout))
		})
	}
}
